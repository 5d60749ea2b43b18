//! Slow-memory presets as data (`presets.json`, compiled in), with their sources, and how a
//! preset resolves against this machine's calibration.
//!
//! Three modes, because the machines this runs on have odd baselines (local DRAM measured at
//! 190-420 ns in these VMs against the 80-150 ns the sources measured):
//! - `absolute`: the source's nanoseconds as they are; refused when not above the measured local
//!   latency (a "slow" tier faster than DRAM would be a lie).
//! - `ratio`: the source's slow/DRAM ratio applied to the measured local latency (HMEP's own
//!   `(L_p - L_d) / L_d`).
//! - `delta`: the source's nanoseconds added to the measured local latency (CXL's "local + 70-90
//!   ns").
//!
//! Bandwidth is the source's in every mode, capped at the measured local bandwidth.

use crate::error::{HmepError, Result};
use serde::{Deserialize, Serialize};

/// How a preset's latency maps onto this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Absolute,
    Ratio,
    Delta,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Mode, String> {
        match s {
            "absolute" => Ok(Mode::Absolute),
            "ratio" => Ok(Mode::Ratio),
            "delta" => Ok(Mode::Delta),
            _ => Err(format!("{s:?}: the modes are absolute, ratio and delta")),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Absolute => "absolute",
            Mode::Ratio => "ratio",
            Mode::Delta => "delta",
        })
    }
}

/// One slow memory as a source measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preset {
    pub name: String,
    /// The mode the preset is meant for (`delta` for sources that give an added latency).
    pub mode: Mode,
    /// Dependent random read latency (ns); in `delta` mode, the ns added to local.
    pub chase_ns: f64,
    /// The local DRAM latency the source measured beside `chase_ns` (0 in `delta` mode).
    pub ref_dram_ns: f64,
    /// Read and write bandwidth of the device (GB/s).
    pub read_gbs: f64,
    pub write_gbs: f64,
    /// The device's internal access size: a smaller access still moves this many bytes.
    pub line_bytes: u32,
    /// Where each number comes from: paper title, authors, venue.
    pub sources: Vec<String>,
}

#[derive(Deserialize)]
struct File {
    presets: Vec<Preset>,
}

/// Every preset shipped, checked.
pub fn all() -> Vec<Preset> {
    let f: File = serde_json::from_str(include_str!("../presets.json"))
        .expect("presets.json is valid (tested)");
    f.presets
}

/// The preset named `name`.
pub fn by_name(name: &str) -> Result<Preset> {
    all()
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| HmepError::UnknownPreset(name.into()))
}

impl Preset {
    /// The numbers make sense for the preset's mode.
    pub fn validate(&self) -> Result<()> {
        let bad = |why: &str| {
            Err(HmepError::BadPreset {
                name: self.name.clone(),
                why: why.into(),
            })
        };
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if !(pos(self.chase_ns) && pos(self.read_gbs) && pos(self.write_gbs)) {
            return bad("latency and bandwidths must be positive");
        }
        if !self.line_bytes.is_power_of_two() || self.line_bytes < 64 {
            return bad("line_bytes must be a power of two, at least 64");
        }
        if self.sources.is_empty() {
            return bad("a preset names its sources");
        }
        match self.mode {
            Mode::Delta if self.ref_dram_ns != 0.0 => bad("a delta preset has ref_dram_ns 0"),
            Mode::Ratio | Mode::Absolute
                if !(pos(self.ref_dram_ns) && self.ref_dram_ns < self.chase_ns) =>
            {
                bad("ref_dram_ns must be positive and below chase_ns")
            }
            _ => Ok(()),
        }
    }

    /// The slow tier's dependent-miss latency on a machine whose local one is `local_ns`, in
    /// `mode` (the preset's own when `None`).
    pub fn latency_ns(&self, local_ns: f64, mode: Option<Mode>) -> Result<f64> {
        let mode = mode.unwrap_or(self.mode);
        let ns = match (mode, self.mode) {
            (Mode::Delta, Mode::Delta) => local_ns + self.chase_ns,
            (Mode::Delta, _) => local_ns + (self.chase_ns - self.ref_dram_ns),
            (Mode::Ratio, Mode::Delta) | (Mode::Absolute, Mode::Delta) => {
                return Err(HmepError::BadPreset {
                    name: self.name.clone(),
                    why: "the source gives an added latency only: use delta mode".into(),
                })
            }
            (Mode::Ratio, _) => local_ns * self.chase_ns / self.ref_dram_ns,
            (Mode::Absolute, _) => {
                if self.chase_ns <= local_ns {
                    return Err(HmepError::NotSlower {
                        name: self.name.clone(),
                        target_ns: self.chase_ns,
                        local_ns,
                    });
                }
                self.chase_ns
            }
        };
        Ok(ns)
    }

    /// The slow tier's read bandwidth (GB/s) on a machine whose local one is `local_gbs`: the
    /// source's figure in every mode (the sources do not all give their DRAM's beside it), capped
    /// at local, since no model makes the slow tier faster than the memory it runs on.
    pub fn read_bw_gbs(&self, local_gbs: f64) -> f64 {
        self.read_gbs.min(local_gbs)
    }

    /// Write bandwidth likewise.
    pub fn write_bw_gbs(&self, local_gbs: f64) -> f64 {
        self.write_gbs.min(local_gbs)
    }
}

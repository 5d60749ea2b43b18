//! Errors of pmkit-hmep, each naming what to change.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum HmepError {
    #[error("no preset named {0:?}: `pmkit hmep presets` lists them")]
    UnknownPreset(String),
    #[error("preset {name}: {why}")]
    BadPreset { name: String, why: String },
    #[error(
        "preset {name} in absolute mode asks for {target_ns:.0} ns, not above this machine's \
         measured {local_ns:.0} ns: use ratio mode (the default), or a slower preset"
    )]
    NotSlower {
        name: String,
        target_ns: f64,
        local_ns: f64,
    },
    #[error("calibration: {0}")]
    Calibration(String),
    #[error("{what}: {source}")]
    Os {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = HmepError> = std::result::Result<T, E>;

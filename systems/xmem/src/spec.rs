//! The text form of an X-Mem set-up: what a C program passes to `xmem_init` and what
//! `pmkit xmem run` passes to an unmodified X-Mem program in the environment variable
//! [`ENV`], as `key=value,...`. The program's own spec is read first and the environment's
//! keys override it, so an operator can size the tiers, load a saved profile and set
//! priorities without rebuilding the program.
//!
//! Keys: `pm` (slow-tier file or device-dax device), `pm_size`, `budget` (fast-tier bytes),
//! `region`, `reserve`, `thp` (on/off), `fast_node` and `slow_node` (NUMA nodes: DRAM regions
//! bound to the first; the slow tier the second, `pm_size` of it), `profile` (a file saved by `XMem::save_profiles` or `pmkit xmem profile`:
//! each named tag gets its profile before the program allocates), `priority` (`NAME:N`,
//! repeatable), `slow_latency` (`CHASE:RANDOM:STREAMING`, the slow tier's stall per access for
//! the placement model), `slow_write` (ns per line written back to the slow tier: the write
//! term of the placement model, 0 by default as in the thesis), `stats` (a file the regions are written to as JSON when the process
//! exits). Tag names in a spec cannot contain `,`.

use crate::Config;
use std::path::PathBuf;

/// The environment variable whose spec overrides the program's.
pub const ENV: &str = "PMKIT_XMEM";
/// Most `priority` entries one spec may carry.
pub const MAX_PRIORITIES: usize = 256;

/// A parsed spec: the configuration and what is applied once X-Mem is up.
#[derive(Debug, Clone)]
pub struct Spec {
    pub cfg: Config,
    pub profile: Option<PathBuf>,
    pub priorities: Vec<(String, i32)>,
    pub stats: Option<PathBuf>,
}

/// `4096`, `64K`, `2M`, `1G`, `1T`.
pub fn size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("{s:?} is not a size"))?;
    let shift = match unit {
        "" => 0,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        "T" | "t" => 40,
        _ => return Err(format!("{s:?}: unknown unit (K, M, G or T)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Parse `program` then `env` (either may be empty) over the defaults:
/// `/dev/shm/xmem-<pid>.img`, 1G of PM, 256M of DRAM, 64M regions, 64G reserved.
pub fn parse(program: &str, env: Option<&str>) -> Result<Spec, String> {
    let mut spec = Spec {
        cfg: Config::new(
            format!("/dev/shm/xmem-{}.img", std::process::id()),
            1 << 30,
            256 << 20,
        ),
        profile: None,
        priorities: Vec::new(),
        stats: None,
    };
    apply(&mut spec, program).map_err(|e| format!("xmem_init spec: {e}"))?;
    if let Some(env) = env {
        apply(&mut spec, env).map_err(|e| format!("{ENV}: {e}"))?;
    }
    Ok(spec)
}

fn node(v: &str) -> Result<u32, String> {
    v.parse()
        .map_err(|_| format!("NUMA node {v:?}: expected a number"))
}

fn apply(spec: &mut Spec, text: &str) -> Result<(), String> {
    let cfg = &mut spec.cfg;
    for kv in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("{kv:?}: expected key=value"))?;
        let v = v.trim();
        match k.trim() {
            "pm" => cfg.pm.path = v.into(),
            "pm_size" => cfg.pm.bytes = size(v)?,
            "budget" => cfg.fast_budget = size(v)?,
            "region" => cfg.region_size = size(v)? as usize,
            "reserve" => cfg.reserve = size(v)? as usize,
            "thp" => cfg.thp = on(v)?,
            "fast_node" => cfg.fast_node = Some(node(v)?),
            "slow_node" => cfg.slow_node = Some(node(v)?),
            "profile" => spec.profile = Some(v.into()),
            "stats" => spec.stats = Some(v.into()),
            "priority" => {
                let (name, n) = v
                    .rsplit_once(':')
                    .ok_or_else(|| format!("priority {v:?}: expected NAME:N"))?;
                let n: i32 = n
                    .trim()
                    .parse()
                    .map_err(|_| format!("priority {v:?}: {n:?} is not an integer"))?;
                if !crate::profiles::valid_name(name) {
                    return Err(format!("priority {v:?}: bad tag name"));
                }
                spec.priorities.retain(|(t, _)| t != name);
                if spec.priorities.len() == MAX_PRIORITIES {
                    return Err(format!("more than {MAX_PRIORITIES} priorities"));
                }
                spec.priorities.push((name.to_owned(), n));
            }
            "slow_latency" => {
                let p: Vec<f64> = v
                    .split(':')
                    .map(|x| x.trim().parse::<f64>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| format!("slow_latency {v:?}: expected three numbers C:R:S"))?;
                if p.len() != 3 || p.iter().any(|x| !x.is_finite() || *x < 0.0) {
                    return Err(format!(
                        "slow_latency {v:?}: expected three numbers >= 0, C:R:S"
                    ));
                }
                cfg.latencies.slow = [p[0], p[1], p[2]];
            }
            "slow_write" => {
                cfg.latencies.slow_write = v
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| format!("slow_write {v:?}: expected ns >= 0"))?;
            }
            other => return Err(format!("unknown key {other:?}")),
        }
    }
    Ok(())
}

fn on(v: &str) -> Result<bool, String> {
    match v {
        "1" | "on" | "yes" | "true" => Ok(true),
        "0" | "off" | "no" | "false" => Ok(false),
        _ => Err(format!("{v:?}: expected on or off")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_are_refused() {
        let s = parse(
            "pm=/dev/shm/x.img, pm_size=2G,budget=128M,region=2M,reserve=1G,thp=on,fast_node=0,slow_node=1",
            None,
        )
        .unwrap();
        let c = &s.cfg;
        assert_eq!(c.pm.path.to_str(), Some("/dev/shm/x.img"));
        assert_eq!(
            (c.pm.bytes, c.fast_budget, c.region_size, c.reserve, c.thp),
            (2 << 30, 128 << 20, 2 << 20, 1 << 30, true)
        );
        assert_eq!((c.fast_node, c.slow_node), (Some(0), Some(1)));
        assert!(parse("", None).is_ok());
        for bad in [
            "budget",
            "budget=12Q",
            "colour=blue",
            "thp=maybe",
            "slow_node=one",
            "fast_node=-1",
            "priority=hot",
            "priority=hot:x",
            "slow_latency=1:2",
            "slow_latency=1:-2:3",
            "slow_write=-1",
            "slow_write=fast",
        ] {
            assert!(parse(bad, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_environment_overrides_the_program() {
        let s = parse(
            "budget=128M,priority=hot:1,thp=on",
            Some("budget=2M,priority=hot:5,priority=a:b:2,profile=/tmp/p,stats=/tmp/s,thp=off,slow_latency=300:40:5,slow_write=111"),
        )
        .unwrap();
        assert_eq!(s.cfg.fast_budget, 2 << 20);
        assert!(!s.cfg.thp);
        assert_eq!(
            s.priorities,
            vec![("hot".to_string(), 5), ("a:b".to_string(), 2)]
        );
        assert_eq!(s.profile.as_deref(), Some(std::path::Path::new("/tmp/p")));
        assert_eq!(s.stats.as_deref(), Some(std::path::Path::new("/tmp/s")));
        assert_eq!(s.cfg.latencies.slow, [300.0, 40.0, 5.0]);
        assert_eq!(s.cfg.latencies.slow_write, 111.0);
        let e = parse("", Some("budget=x")).unwrap_err();
        assert!(e.starts_with(ENV), "{e}");
    }
}

//! Profiles saved per tag name, so a profiling run's `F_i(p)` is reused by later runs (tags are
//! numbered by first use, names are stable). The file is text, one tag per line:
//! `name<TAB>chase<TAB>random<TAB>streaming<TAB>writebacks<TAB>regions`, after a header line
//! naming the format. `writebacks` is the lines written back to memory per region (the write
//! term of Eq. 3); `regions` is how many regions the tag had when it was profiled: what `pmkit
//! xmem place` needs to plan a fast-tier budget without the program. Older files still load:
//! version 2 (no `writebacks`: 0) and version 1 (no `regions` either: 1 region per tag).

use crate::error::{Result, XmemError};
use crate::place::PerPattern;
use std::path::Path;

const HEADER_V1: &str =
    "# pmkit-xmem profile v1: name, then accesses per region: chase random streaming";
const HEADER_V2: &str =
    "# pmkit-xmem profile v2: name, then accesses per region: chase random streaming, then regions";
const HEADER: &str = "# pmkit-xmem profile v3: name, then per region: chase random streaming \
                      accesses and lines written back, then regions";

/// Most regions a saved tag may claim (the reservation's limit).
const MAX_SAVED_REGIONS: u64 = crate::config::MAX_REGIONS as u64;

/// One tag's saved profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    pub name: String,
    /// `F_i(p)`: accesses per region, by pattern.
    pub f: PerPattern,
    /// `W_i`: lines written back to memory per region.
    pub writebacks: f64,
    /// Regions the tag had when profiled (at least 1).
    pub regions: u64,
}

/// Whether `name` can be a tag name (non-empty, no control characters: it goes on one line).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(char::is_control)
}

pub fn encode(profiles: &[Saved]) -> String {
    let mut s = format!("{HEADER}\n");
    for p in profiles {
        assert!(valid_name(&p.name));
        let f = p.f;
        s.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\n",
            p.name, f[0], f[1], f[2], p.writebacks, p.regions
        ));
    }
    s
}

pub fn decode(text: &str) -> Result<Vec<Saved>> {
    let bad = |n: usize, why: &str| XmemError::BadConfig(format!("profile line {n}: {why}"));
    let mut lines = text.lines().enumerate();
    // Columns: name, then the numbers (patterns, and writebacks from v3), then regions (v2).
    let (nums, with_regions) = match lines.next() {
        Some((_, h)) if h == HEADER => (4, true),
        Some((_, h)) if h == HEADER_V2 => (3, true),
        Some((_, h)) if h == HEADER_V1 => (3, false),
        _ => return Err(bad(1, "not a pmkit-xmem profile (header missing)")),
    };
    let cols = 1 + nums + with_regions as usize;
    let expected = match (nums, with_regions) {
        (4, _) => "expected name<TAB>chase<TAB>random<TAB>streaming<TAB>writebacks<TAB>regions",
        (_, true) => "expected name<TAB>chase<TAB>random<TAB>streaming<TAB>regions",
        _ => "expected name<TAB>chase<TAB>random<TAB>streaming",
    };
    let mut out: Vec<Saved> = Vec::new();
    for (i, line) in lines {
        if line.is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split('\t').collect();
        if parts.len() != cols || !valid_name(parts[0]) {
            return Err(bad(i + 1, expected));
        }
        if out.iter().any(|s| s.name == parts[0]) {
            return Err(bad(i + 1, "a tag name appears twice"));
        }
        let mut v = [0.0; 4];
        for (k, x) in parts[1..=nums].iter().enumerate() {
            v[k] = x
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| bad(i + 1, "counts must be finite numbers >= 0"))?;
        }
        let regions = if with_regions {
            parts[cols - 1]
                .parse::<u64>()
                .ok()
                .filter(|n| (1..=MAX_SAVED_REGIONS).contains(n))
                .ok_or_else(|| bad(i + 1, "regions must be a whole number from 1 to 65536"))?
        } else {
            1
        };
        out.push(Saved {
            name: parts[0].to_owned(),
            f: [v[0], v[1], v[2]],
            writebacks: v[3],
            regions,
        });
    }
    Ok(out)
}

pub fn save(path: &Path, profiles: &[Saved]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let io = |what, source| XmemError::Os { what, source };
    std::fs::write(&tmp, encode(profiles)).map_err(|e| io("write profile", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("rename profile", e))
}

pub fn load(path: &Path) -> Result<Vec<Saved>> {
    let text = std::fs::read_to_string(path).map_err(|source| XmemError::Os {
        what: "read profile",
        source,
    })?;
    decode(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_round_trip_and_bad_files_are_refused() {
        let saved = |name: &str, f, regions| Saved {
            name: name.into(),
            f,
            writebacks: 0.0,
            regions,
        };
        let p = vec![
            Saved {
                writebacks: 12.5,
                ..saved("hash table", [83.5, 1.0, 0.0], 3)
            },
            saved("slab-64", [0.0, 70.25, 3e9], 1),
        ];
        assert_eq!(decode(&encode(&p)).unwrap(), p);
        assert!(decode("hash\t1\t2\t3\n").is_err(), "no header");
        let h = format!("{HEADER}\n");
        assert!(
            decode(&format!("{h}hash\t1\t2\t3\t1\n")).is_err(),
            "no writebacks"
        );
        assert!(decode(&format!("{h}hash\t1\t-2\t3\t0\t1\n")).is_err());
        assert!(decode(&format!("{h}hash\t1\t2\t3\t-1\t1\n")).is_err());
        assert!(decode(&format!("{h}hash\t1\tNaN\t3\t0\t1\n")).is_err());
        assert!(decode(&format!("{h}\t1\t2\t3\t0\t1\n")).is_err());
        assert!(decode(&format!("{h}hash\t1\t2\t3\t0\t0\n")).is_err());
        assert!(decode(&format!("{h}a\t1\t2\t3\t0\t1\na\t1\t2\t3\t0\t1\n")).is_err());
        // Version 2 files still load, with no writebacks.
        let v2 = format!("{HEADER_V2}\nhash\t1\t2\t3\t4\n");
        assert_eq!(
            decode(&v2).unwrap(),
            vec![saved("hash", [1.0, 2.0, 3.0], 4)]
        );
        // Version 1 files still load, one region per tag.
        let v1 = format!("{HEADER_V1}\nhash\t1\t2\t3\n");
        assert_eq!(
            decode(&v1).unwrap(),
            vec![saved("hash", [1.0, 2.0, 3.0], 1)]
        );
        assert!(!valid_name("a\nb") && !valid_name("") && valid_name("a b"));
    }
}

//! Profiles saved per tag name, so a profiling run's `F_i(p)` is reused by later runs (tags are
//! numbered by first use, names are stable). The file is text, one tag per line:
//! `name<TAB>chase<TAB>random<TAB>streaming`, after a header line naming the format.

use crate::error::{Result, XmemError};
use crate::place::PerPattern;
use std::path::Path;

const HEADER: &str =
    "# pmkit-xmem profile v1: name, then accesses per region: chase random streaming";

/// Whether `name` can be a tag name (non-empty, no control characters: it goes on one line).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(char::is_control)
}

pub fn encode(profiles: &[(String, PerPattern)]) -> String {
    let mut s = format!("{HEADER}\n");
    for (name, f) in profiles {
        assert!(valid_name(name));
        s.push_str(&format!("{name}\t{}\t{}\t{}\n", f[0], f[1], f[2]));
    }
    s
}

pub fn decode(text: &str) -> Result<Vec<(String, PerPattern)>> {
    let bad = |n: usize, why: &str| XmemError::BadConfig(format!("profile line {n}: {why}"));
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h == HEADER => {}
        _ => return Err(bad(1, "not a pmkit-xmem profile (header missing)")),
    }
    let mut out = Vec::new();
    for (i, line) in lines {
        if line.is_empty() {
            continue;
        }
        let parts: Vec<&str> = line.split('\t').collect();
        if parts.len() != 4 || !valid_name(parts[0]) {
            return Err(bad(
                i + 1,
                "expected name<TAB>chase<TAB>random<TAB>streaming",
            ));
        }
        let mut f = [0.0; 3];
        for (k, v) in parts[1..].iter().enumerate() {
            f[k] = v
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| bad(i + 1, "counts must be finite numbers >= 0"))?;
        }
        out.push((parts[0].to_owned(), f));
    }
    Ok(out)
}

pub fn save(path: &Path, profiles: &[(String, PerPattern)]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let io = |what, source| XmemError::Os { what, source };
    std::fs::write(&tmp, encode(profiles)).map_err(|e| io("write profile", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("rename profile", e))
}

pub fn load(path: &Path) -> Result<Vec<(String, PerPattern)>> {
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
        let p = vec![
            ("hash table".to_string(), [83.5, 1.0, 0.0]),
            ("slab-64".to_string(), [0.0, 70.25, 3e9]),
        ];
        assert_eq!(decode(&encode(&p)).unwrap(), p);
        assert!(decode("hash\t1\t2\t3\n").is_err(), "no header");
        let h = format!("{HEADER}\n");
        assert!(decode(&format!("{h}hash\t1\t2\n")).is_err());
        assert!(decode(&format!("{h}hash\t1\t-2\t3\n")).is_err());
        assert!(decode(&format!("{h}hash\t1\tNaN\t3\n")).is_err());
        assert!(decode(&format!("{h}\t1\t2\t3\n")).is_err());
        assert!(!valid_name("a\nb") && !valid_name("") && valid_name("a b"));
    }
}

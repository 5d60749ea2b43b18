//! Profiles on an [`XMem`]: each tag's `F_i(p)` and `W_i` set directly, rolled up from a
//! tracer's per-region counts (the thesis's profiler at exit), given to each region on its own
//! (an extension), and saved or loaded by tag name ([`crate::profiles`]).

use crate::error::{Result, XmemError};
use crate::place::{PerPattern, Profile};
use crate::{profiles, trace, Tag, XMem};

impl XMem {
    /// Set `F_i(p)`, the tag's average accesses per region by pattern (from a profile, see
    /// [`crate::classify`] and [`trace`]), keeping its writebacks. Counts must be finite and ≥ 0.
    pub fn set_profile(&self, t: Tag, f: PerPattern) -> Result<()> {
        let w = self.with_tag(t, |e| e.profile.writebacks)?;
        self.set_full_profile(t, Profile { f, writebacks: w })
    }

    /// Set `W_i`, the tag's lines written back to memory per region, keeping its `F_i(p)`.
    pub fn set_writebacks(&self, t: Tag, per_region: f64) -> Result<()> {
        let f = self.with_tag(t, |e| e.profile.f)?;
        self.set_full_profile(
            t,
            Profile {
                f,
                writebacks: per_region,
            },
        )
    }

    /// Set the tag's whole profile: `F_i(p)` and `W_i`, its lines written back to memory per
    /// region (the write term of Eq. 3, see [`crate::place`]).
    pub fn set_full_profile(&self, t: Tag, p: Profile) -> Result<()> {
        if !p.is_valid() {
            return Err(XmemError::BadConfig(format!(
                "profile {p:?}: counts must be >= 0"
            )));
        }
        self.with_tag(t, |e| e.profile = p)
    }

    /// Roll per-region counts (from [`trace::Tracer`]) up into each tag's profile, as the
    /// thesis's profiler does at exit: `F_i(p)` = the tag's counts of pattern `p` summed over
    /// its regions, divided by its number of regions, and `W_i` the same of its writebacks. Tags
    /// without counted accesses keep their profile. Returns the profiles set.
    pub fn apply_profile(&self, counts: &trace::RegionCounts) -> Result<Vec<(Tag, Profile)>> {
        let mut sums: std::collections::BTreeMap<Tag, (trace::Counts, usize, bool)> =
            Default::default();
        for r in self.regions() {
            let e = sums.entry(r.tag).or_default();
            e.1 += 1;
            if let Some(c) = counts.get(&r.index) {
                e.2 = true;
                e.0.add(c);
            }
        }
        let mut out = Vec::new();
        for (tag, (sum, n, seen)) in sums {
            if seen {
                let p = Profile::per_region(sum.by_pattern, sum.writebacks, n);
                self.set_full_profile(tag, p)?;
                out.push((tag, p));
            }
        }
        Ok(out)
    }

    /// Per-region profiles (an extension beyond the thesis, whose profile is per tag): roll the
    /// counts up into each tag's profile as [`XMem::apply_profile`] does, then give every
    /// region of a tag that was counted its own profile, its own counts (none counted: zero),
    /// so [`XMem::rebalance`] ranks a tag's regions against each other. A tag's accesses can
    /// crowd into a few of its regions (the edge lists of a graph's short adjacency lists);
    /// the tag's average places them no better than its cold regions. Regions made later use
    /// their tag's profile until counted. Returns the regions given a profile.
    pub fn apply_region_profiles(&self, counts: &trace::RegionCounts) -> Result<usize> {
        let counted: std::collections::BTreeSet<Tag> = self
            .apply_profile(counts)?
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        let mut tb = self.table.lock();
        let mut n = 0;
        for (i, e) in tb.entries.iter_mut().enumerate() {
            let Some(e) = e.as_mut() else { continue };
            if !counted.contains(&Tag(e.tag)) {
                continue;
            }
            let c = counts.get(&i).copied().unwrap_or_default();
            e.profile = Some(Profile::per_region(c.by_pattern, c.writebacks, 1));
            n += 1;
        }
        Ok(n)
    }

    /// Every tag's name and profile, in tag order.
    pub fn profiles(&self) -> Vec<(String, Profile)> {
        let tags = self.tags.read();
        tags.iter().map(|t| (t.name.clone(), t.profile)).collect()
    }

    /// Save every tag's profile under its name (see [`profiles`]), for later runs.
    /// Each tag's region count goes with it (at least 1), for planning without the program.
    pub fn save_profiles(&self, path: &std::path::Path) -> Result<()> {
        let regions = self.regions();
        let saved: Vec<profiles::Saved> = self
            .profiles()
            .into_iter()
            .enumerate()
            .map(|(i, (name, p))| profiles::Saved {
                name,
                f: p.f,
                writebacks: p.writebacks,
                regions: (regions.iter().filter(|r| r.tag.0 as usize == i).count() as u64).max(1),
            })
            .collect();
        profiles::save(path, &saved)
    }

    /// Load profiles saved by [`XMem::save_profiles`]: each named tag (made if new) gets its
    /// profile. Returns how many were set. A bad file changes nothing.
    pub fn load_profiles(&self, path: &std::path::Path) -> Result<usize> {
        let loaded = profiles::load(path)?;
        for s in &loaded {
            let t = self.tag(&s.name)?;
            self.set_full_profile(
                t,
                Profile {
                    f: s.f,
                    writebacks: s.writebacks,
                },
            )?;
        }
        Ok(loaded.len())
    }
}

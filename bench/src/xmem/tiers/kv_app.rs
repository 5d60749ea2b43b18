//! xkv (the MemC3-like key-value store, `hmep::kv`) as a traced application of `bench xmem`:
//! an ETC-like dataset loaded into X-Mem (the cuckoo hash and eight slab classes, one tag each),
//! then a fixed stream of ETC requests (95% GET, 5% SET, Zipf keys) as one pass.

use super::app::TracedApp;
use super::sweep::Region;
use anyhow::{ensure, Context, Result};
use pmkit_hmep::sim::Sim;
use pmkit_xkv::{self as kv, KvConfig, RunStats, Store, Workload, TAGS};
use pmkit_xmem::{Tier, XMem};
use std::path::Path;

/// X-Mem region size for the store (its hash is cut in segments of at most half a region).
pub(super) const REGION: usize = 64 << 20;

/// X-Mem set up for a dataset of `dataset_mib`, all fast.
pub(super) fn xmem(pm: &Path, dataset_mib: usize) -> Result<(XMem, KvConfig)> {
    let mean = Workload::mean_item_bytes(SEED);
    let keys = ((dataset_mib << 20) as f64 / mean) as usize;
    // A limit above the dataset: no evictions, so every pass does the same work.
    let mut k = KvConfig::new((dataset_mib << 20) * 5 / 4 + (16 << 20));
    k.hash_items = keys;
    let x = XMem::new(kv::xmem_config(pm, &k, REGION, true)).context("starting X-Mem for xkv")?;
    Ok((x, k))
}

const SEED: u64 = 0x6b76;
/// YCSB's default skew, as `pmkit bench xkv` uses.
const ZIPF: f64 = 0.99;

pub(super) struct KvApp<'a> {
    store: Store<'a>,
    w: Workload,
    reqs: Vec<kv::Request>,
    expect: Option<RunStats>,
}

impl<'a> KvApp<'a> {
    /// Load the dataset into `x` and move every region to the fast tier; the regions as the
    /// sweep sees them.
    pub(super) fn load(
        x: &'a XMem,
        k: &KvConfig,
        requests: usize,
    ) -> Result<(KvApp<'a>, Vec<Region>)> {
        let keys = k.hash_items as u32;
        let w = Workload::etc(SEED, keys, ZIPF);
        let mut store = Store::new(x, k)?;
        let loaded = kv::load(&mut store, &w, &mut ())?;
        ensure!(
            loaded == keys as usize && store.counters.evictions == 0,
            "xkv: loaded {loaded} of {keys} items with {} evictions",
            store.counters.evictions
        );
        kv::check_placement(x, &store)?;
        let mut regions = vec![];
        for r in x.regions() {
            x.move_region(r.index, Tier::Fast)?;
            let name = x.tag_name(r.tag)?;
            let tag = TAGS.iter().position(|t| *t == name).context("an xkv tag")?;
            regions.push(Region {
                addr: r.addr as u64,
                bytes: r.bytes as u64,
                span: REGION as u64,
                tag,
            });
        }
        let reqs = w.requests(requests, 3);
        let app = KvApp {
            store,
            w,
            reqs,
            expect: None,
        };
        Ok((app, regions))
    }

    fn go<P: pmkit_hmep::probe::Probe>(&mut self, p: &mut P) -> Result<()> {
        let got = kv::run(&mut self.store, &self.w, &self.reqs, p);
        let want = self.expect.get_or_insert_with(|| got.clone());
        ensure!(got == *want, "xkv: a pass gave {got:?}, the first {want:?}");
        Ok(())
    }
}

impl TracedApp for KvApp<'_> {
    fn name(&self) -> String {
        "xkv".into()
    }

    fn tags(&self) -> Vec<String> {
        TAGS.iter().map(|t| t.to_string()).collect()
    }

    fn pass_traced(&mut self, sim: &mut Sim) -> Result<()> {
        self.go(sim)
    }

    fn pass(&mut self) -> Result<()> {
        self.go(&mut ())
    }
}

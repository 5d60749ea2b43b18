//! A traced application: what `bench xmem` needs of an X-Mem user (its tags, one pass traced
//! through the simulator, one pass timed), so any app with a `run<P: Probe>` kernel plugs in.
//! xgraph's PageRank and BFS are the two here.

use anyhow::{ensure, Result};
use pmkit_hmep::probe::Probe;
use pmkit_hmep::sim::Sim;
use pmkit_xgraph::{Graph, TAGS};

pub(super) trait TracedApp {
    fn name(&self) -> String;
    /// Tag names, in structure-index order (the `s` its probe reports).
    fn tags(&self) -> Vec<String>;
    /// One pass of the workload with every access reported to `sim`.
    fn pass_traced(&mut self, sim: &mut Sim) -> Result<()>;
    /// The same pass, uninstrumented (timed).
    fn pass(&mut self) -> Result<()>;
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kernel {
    PageRank,
    Bfs,
}

/// One xgraph kernel over a built graph.
pub(super) struct GraphKernel<'g, 'a> {
    pub g: &'g mut Graph<'a>,
    pub kernel: Kernel,
    root: u32,
    /// What a pass must give (the rank sum's bits, or vertices reached), from the first pass.
    expect: Option<u64>,
}

impl<'g, 'a> GraphKernel<'g, 'a> {
    pub(super) fn new(g: &'g mut Graph<'a>, kernel: Kernel) -> Self {
        let root = g.root();
        GraphKernel {
            g,
            kernel,
            root,
            expect: None,
        }
    }

    fn go<P: Probe>(&mut self, p: &mut P) -> Result<()> {
        let got = match self.kernel {
            Kernel::PageRank => {
                // From uniform ranks every pass: the same work and result each time.
                self.g.reset_ranks();
                self.g.pagerank_iter(p).to_bits()
            }
            Kernel::Bfs => self.g.bfs(self.root, p) as u64,
        };
        let want = *self.expect.get_or_insert(got);
        ensure!(
            got == want,
            "{}: a pass gave {got}, the first {want}",
            self.name()
        );
        Ok(())
    }
}

impl TracedApp for GraphKernel<'_, '_> {
    fn name(&self) -> String {
        match self.kernel {
            Kernel::PageRank => "pagerank".into(),
            Kernel::Bfs => "bfs".into(),
        }
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

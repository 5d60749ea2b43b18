//! The `pmkit-xkv` program (also `pmkit-bench xkv-serve`): the store on 127.0.0.1 over memcached's text protocol, one thread
//! per connection, at most `--max-conns` at once (more are told "SERVER_ERROR too many open
//! connections" and closed, as memcached does).

use crate::proto::{self, Shared};
use crate::{xmem_config, KvConfig, Store};
use anyhow::{ensure, Context, Result};
use pmkit_xmem::XMem;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

/// Most connections `--max-conns` may allow.
pub const MAX_CONNS: usize = 4096;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// TCP port on 127.0.0.1 (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 11211)]
    port: u16,
    /// Slab memory limit in MiB (at least 8: one 1 MiB chunk per class).
    #[arg(long, default_value_t = 64)]
    memory_mib: usize,
    /// Ask for transparent huge pages on the fast tier.
    #[arg(long)]
    thp: bool,
    /// Put every region on X-Mem's slow tier (the /dev/shm file) instead of the fast one.
    #[arg(long)]
    slow: bool,
    /// X-Mem region size in MiB (a power of two, 2..=1024).
    #[arg(long, default_value_t = 4)]
    region_mib: usize,
    /// Most open connections.
    #[arg(long, default_value_t = 256)]
    max_conns: usize,
    /// Directory of X-Mem's slow-tier file.
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
}

pub fn serve(a: ServeArgs) -> Result<ExitCode> {
    ensure!(
        (1..=MAX_CONNS).contains(&a.max_conns),
        "--max-conns {}: 1..={MAX_CONNS}",
        a.max_conns
    );
    ensure!(
        (8..=1 << 20).contains(&a.memory_mib),
        "--memory-mib {}: 8..=1048576",
        a.memory_mib
    );
    let k = KvConfig::new(a.memory_mib << 20);
    let pm = a
        .dir
        .join(format!("pmkit-xkv-serve-{}.pm", std::process::id()));
    let _ = std::fs::remove_file(&pm);
    let mut cfg = xmem_config(&pm, &k, a.region_mib << 20, a.thp);
    if a.slow {
        // No fast budget: every region, now and later, is on the slow tier.
        cfg.fast_budget = 0;
    }
    let x = XMem::new(cfg).with_context(|| format!("starting X-Mem over {}", pm.display()))?;
    // X-Mem keeps the file open: unlinking it now means a server killed by a signal (how
    // drivers stop it) leaves nothing in /dev/shm.
    std::fs::remove_file(&pm).with_context(|| format!("unlinking {}", pm.display()))?;
    let store = Store::new(&x, &k)?;
    let l = TcpListener::bind(("127.0.0.1", a.port))
        .with_context(|| format!("binding 127.0.0.1:{}", a.port))?;
    let port = l.local_addr()?.port();
    // The one line a driver waits for (tests and the bench read the port from it).
    println!("xkv listening on 127.0.0.1:{port}");
    std::io::stdout().flush()?;
    let sh = Shared::new(store, k.memory_bytes);
    std::thread::scope(|sc| -> Result<()> {
        for c in l.incoming() {
            let c = match c {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("xkv: accept failed: {e}");
                    continue;
                }
            };
            if sh.conns.load(Ordering::Relaxed) >= a.max_conns {
                let mut c = c;
                let _ = c.write_all(b"SERVER_ERROR too many open connections\r\n");
                continue;
            }
            sh.conns.fetch_add(1, Ordering::Relaxed);
            sh.total_conns.fetch_add(1, Ordering::Relaxed);
            let sh = &sh;
            sc.spawn(move || {
                if let Err(e) = connection(c, sh) {
                    eprintln!("xkv: connection ended: {e}");
                }
                sh.conns.fetch_sub(1, Ordering::Relaxed);
            });
        }
        Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn connection(c: TcpStream, sh: &Shared) -> std::io::Result<()> {
    c.set_nodelay(true)?;
    let r = c.try_clone()?;
    proto::serve(r, c, sh)
}

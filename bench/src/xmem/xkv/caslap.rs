//! Driving `xkv-serve` with memcaslap (Debian's libmemcached-tools; memaslap upstream): the
//! server as a child process pinned to one CPU, memcaslap pinned to another, a load phase (all
//! SETs) then the ETC-like mix ([`pmkit_xkv::workload::memcaslap_config`]), ops/s from memcaslap's
//! summary and the hit ratio from the server's `stats`.

use crate::host::{need_tool, Scratch};
use anyhow::{bail, Context, Result};
use pmkit_xkv::workload::{memcaslap_config, VALUE_SIZES};
use serde::Serialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

#[derive(Serialize, Clone, Debug)]
pub(super) struct CaslapRun {
    pub tier: &'static str,
    pub load_ops: usize,
    pub ops: usize,
    pub load_ops_per_s: f64,
    pub ops_per_s: f64,
    /// ETC-mix ops/s of every round (the bench reports the median).
    pub rounds_ops_per_s: Vec<f64>,
    pub get_hits: u64,
    pub cmd_get: u64,
}

/// The server, killed on drop.
struct Server(Child, u16);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(cpu: usize, memory_mib: usize, slow: bool, dir: &Path) -> Result<Server> {
    let exe = std::env::current_exe().context("finding pmkit-bench")?;
    let mut c = Command::new("taskset");
    c.arg("-c").arg(cpu.to_string()).arg(exe).args([
        "xkv-serve",
        "--port",
        "0",
        "--thp",
        "--memory-mib",
        &memory_mib.to_string(),
        "--dir",
    ]);
    c.arg(dir);
    if slow {
        c.arg("--slow");
    }
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting xkv-serve")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("the server's stdout")?).read_line(&mut line)?;
    let port = line.trim().rsplit(':').next().and_then(|p| p.parse().ok());
    match port {
        Some(p) => Ok(Server(child, p)),
        None => {
            let _ = child.kill();
            bail!("xkv-serve did not say its port: {line:?}")
        }
    }
}

/// memcaslap's ops/s over `ops` operations with config `cfg`.
fn caslap(cpu: usize, port: u16, cfg: &Path, ops: usize, conc: usize) -> Result<f64> {
    let o = Command::new("taskset")
        .arg("-c")
        .arg(cpu.to_string())
        .arg("memcaslap")
        .arg(format!("--servers=127.0.0.1:{port}"))
        .arg(format!("--cfg_cmd={}", cfg.display()))
        .arg(format!("--execute_number={ops}"))
        .args(["--threads=1", &format!("--concurrency={conc}")])
        .output()
        .context("running memcaslap")?;
    let out = String::from_utf8_lossy(&o.stdout);
    if !o.status.success() {
        bail!(
            "memcaslap failed ({}): {out}{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    tps(&out).with_context(|| format!("no TPS in memcaslap's output: {out}"))
}

/// The last "TPS: N" of memcaslap's summary.
pub(super) fn tps(out: &str) -> Option<f64> {
    out.rsplit("TPS: ")
        .next()
        .filter(|_| out.contains("TPS: "))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `stats` from the server: (get_hits, cmd_get).
pub(super) fn hits(port: u16) -> Result<(u64, u64)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.write_all(b"stats\r\nquit\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let stat = |k: &str| -> u64 {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {k} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    Ok((stat("get_hits"), stat("cmd_get")))
}

/// A load then a run on a fresh server with every region on `slow`'s tier.
pub(super) fn run(
    dir: &Path,
    memory_mib: usize,
    load_ops: usize,
    ops: usize,
    slow: bool,
) -> Result<CaslapRun> {
    need_tool(
        "memcaslap",
        "apt-get install libmemcached-tools (Debian's memaslap)",
    )?;
    need_tool("taskset", "apt-get install util-linux")?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (server_cpu, client_cpu) = (0, if cpus > 1 { 1 } else { 0 });
    let load_cfg = Scratch::file(dir, "xkv-load.cfg");
    let mut s = String::from("key\n16 16 1\nvalue\n");
    for (lo, hi, p) in VALUE_SIZES {
        s += &format!("{lo} {hi} {p}\n");
    }
    s += "cmd\n0 1\n1 0\n";
    std::fs::write(load_cfg.path(), s)?;
    let run_cfg = Scratch::file(dir, "xkv-run.cfg");
    std::fs::write(run_cfg.path(), memcaslap_config())?;
    let srv = start(server_cpu, memory_mib, slow, dir)?;
    let load = caslap(client_cpu, srv.1, load_cfg.path(), load_ops, 16)?;
    let (h0, g0) = hits(srv.1)?;
    let r = caslap(client_cpu, srv.1, run_cfg.path(), ops, 16)?;
    let (h1, g1) = hits(srv.1)?;
    Ok(CaslapRun {
        tier: if slow { "slow" } else { "fast" },
        load_ops,
        ops,
        load_ops_per_s: load,
        ops_per_s: r,
        rounds_ops_per_s: vec![r],
        get_hits: h1 - h0,
        cmd_get: g1 - g0,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn tps_is_the_last() {
        let out = "Run time: 1.0s Ops: 10 TPS: 5 Net_rate: 1M/s\n\
                   Run time: 2.0s Ops: 1000 TPS: 12345 Net_rate: 2.1M/s\n";
        assert_eq!(super::tps(out), Some(12345.0));
        assert_eq!(super::tps("nothing"), None);
    }
}

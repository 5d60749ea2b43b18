//! `pmkit bench nbd`: fio's `nbd` engine against `pmkit serve` and against `nbdkit memory` of the
//! same size, in the same run, workload by workload (so both see the same machine noise).
//! Prints IOPS, bandwidth, mean latency and server CPU per I/O, and the pmkit/nbdkit ratios.
//! With `--tls` both servers require TLS with the same X.509 certificates, made for the run, and
//! pmkit also runs in plain text, for what TLS costs it. Not PSK: fio's nbd engine opens its URI
//! with libnbd's default of no local file access, so `tls-psk-file=` (and `tls-certificates=`) are
//! refused; libnbd loads certificates without a URI parameter, from `$HOME/.pki/libnbd`.

use crate::host::{fio_json, need_tool, sh, Scratch};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Short runs on a small device (a smoke test of the benchmark, not a measurement)
    #[arg(long)]
    pub quick: bool,
    /// Device size for both servers [default: 1G, 256M with --quick]
    #[arg(long, value_parser = pmkit::args::parse_size)]
    pub size: Option<u64>,
    /// Seconds per fio run [default: 5, 2 with --quick]
    #[arg(long)]
    pub runtime: Option<u64>,
    /// pmkit execution models to measure, comma-separated (`inline`, `threaded:N`), each
    /// optionally with a busy-poll time in microseconds (`inline@0`, `inline@50`: `serve
    /// --poll-us`), to compare them in one run
    #[arg(long, default_value = "inline", value_delimiter = ',')]
    pub models: Vec<String>,
    /// Protection modes to serve with, comma-separated, each a pmkit server of its own in the
    /// same run (`default`: no --protect, the mode pmkit picks on this CPU), e.g.
    /// `default,none` for the cost of protection
    #[arg(long, default_value = "default", value_delimiter = ',')]
    pub protects: Vec<String>,
    /// Extra arguments for `pmkit serve` (engine options), e.g. "--write clwb"
    #[arg(
        long,
        value_name = "ARGS",
        allow_hyphen_values = true,
        default_value = ""
    )]
    pub serve_args: String,
    /// Over TLS (X.509 certificates made with certtool, TLS 1.3): 4 KiB randwrite qd8 and 256
    /// KiB sequential read and write against `nbdkit memory --tls=require` with the same
    /// certificates, plus pmkit in plain text (the first model) for the cost of TLS
    #[arg(long)]
    pub tls: bool,
}

/// Workloads measured with `--tls`.
const TLS_WORKLOADS: [&str; 3] = ["4k-randwrite-qd8", "256k-seqread", "256k-seqwrite"];
/// What `--tls` measures, for the table and the JSON.
const TLS_SETUP: &str = "TLS 1.3 X.509 (fio's nbd engine cannot load a PSK file)";

#[derive(Debug, Clone, Serialize)]
struct Workload {
    name: &'static str,
    rw: &'static str,
    bs: u32,
    iodepth: u32,
}

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "4k-randwrite-qd8",
        rw: "randwrite",
        bs: 4096,
        iodepth: 8,
    },
    Workload {
        name: "4k-randwrite-qd32",
        rw: "randwrite",
        bs: 4096,
        iodepth: 32,
    },
    Workload {
        name: "4k-randread-qd8",
        rw: "randread",
        bs: 4096,
        iodepth: 8,
    },
    Workload {
        name: "4k-randread-qd32",
        rw: "randread",
        bs: 4096,
        iodepth: 32,
    },
    Workload {
        name: "256k-seqread",
        rw: "read",
        bs: 256 << 10,
        iodepth: 4,
    },
    Workload {
        name: "256k-seqwrite",
        rw: "write",
        bs: 256 << 10,
        iodepth: 4,
    },
];

#[derive(Debug, Clone, Serialize)]
struct Measure {
    iops: f64,
    mib_s: f64,
    mean_lat_us: f64,
    /// Server process CPU time (user + system) per I/O, in microseconds.
    server_cpu_us_per_io: f64,
}

#[derive(Debug, Serialize)]
struct Row {
    workload: Workload,
    /// One entry per pmkit model, in `--models` order.
    pmkit: Vec<(String, Measure)>,
    nbdkit: Measure,
    /// pmkit IOPS / nbdkit IOPS, per model.
    ratio: Vec<(String, f64)>,
    /// With --tls: 1 - (first model over TLS) / (it in plain text), in IOPS.
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_cost: Option<f64>,
}

/// The credentials of a `--tls` run, all in one scratch folder.
struct Certs {
    /// `ca-cert.pem`, `server-cert.pem`, `server-key.pem`: `--tls-certificates` for both servers.
    server: PathBuf,
    /// The `HOME` fio and nbdinfo run with: `.pki/libnbd` holds `ca-cert.pem`, `client-cert.pem`
    /// and `client-key.pem`, where libnbd looks when no URI parameter names a directory.
    home: PathBuf,
    /// Whether the servers require the client certificate (`--tls-verify-peer`): only when this
    /// process is not root, for libnbd run as root reads `/etc/pki/libnbd`, never `$HOME`, and the
    /// bench does not write there; a root client then connects without a certificate of its own.
    verify_client: bool,
}

/// A certtool template file in `dir`.
fn template(dir: &Path, name: &str, body: &str) -> Result<PathBuf> {
    let p = dir.join(format!("{name}.info"));
    std::fs::write(&p, body)?;
    Ok(p)
}

fn certtool(args: &[&Path]) -> Result<()> {
    sh(Command::new("certtool").args(args)).map(drop)
}

/// A CA, a server certificate (`localhost`) and a client certificate (`pmkit-bench`) signed by
/// it, ECDSA P-256, valid for a day, laid out in `dir` as nbdkit and pmkit read them and as
/// libnbd reads them from `$HOME`.
fn make_certs(dir: &Path) -> Result<Certs> {
    let work = dir.join("tls");
    let server = dir.join("tls/server");
    let home = dir.join("home");
    let client = home.join(".pki/libnbd");
    for d in [&work, &server, &client] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let key = |p: &Path| {
        certtool(&[
            Path::new("--generate-privkey"),
            Path::new("--key-type=ecdsa"),
            Path::new("--outfile"),
            p,
        ])
    };
    let ca_key = work.join("ca-key.pem");
    let ca = server.join("ca-cert.pem");
    key(&ca_key)?;
    let t = template(
        &work,
        "ca",
        "cn = pmkit bench CA\nca\ncert_signing_key\nexpiration_days = 1\n",
    )?;
    certtool(&[
        Path::new("--generate-self-signed"),
        Path::new("--load-privkey"),
        &ca_key,
        Path::new("--template"),
        &t,
        Path::new("--outfile"),
        &ca,
    ])?;
    let sign = |who: &str, body: &str, key_path: &Path, cert: &Path| -> Result<()> {
        key(key_path)?;
        let t = template(&work, who, body)?;
        certtool(&[
            Path::new("--generate-certificate"),
            Path::new("--load-privkey"),
            key_path,
            Path::new("--load-ca-certificate"),
            &ca,
            Path::new("--load-ca-privkey"),
            &ca_key,
            Path::new("--template"),
            &t,
            Path::new("--outfile"),
            cert,
        ])
    };
    sign(
        "server",
        "cn = localhost\ndns_name = localhost\ntls_www_server\nencryption_key\nsigning_key\nexpiration_days = 1\n",
        &server.join("server-key.pem"),
        &server.join("server-cert.pem"),
    )?;
    sign(
        "client",
        "cn = pmkit-bench\ntls_www_client\nencryption_key\nsigning_key\nexpiration_days = 1\n",
        &client.join("client-key.pem"),
        &client.join("client-cert.pem"),
    )?;
    std::fs::copy(&ca, client.join("ca-cert.pem"))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let verify_client = unsafe { libc::geteuid() } != 0;
    Ok(Certs {
        server,
        home,
        verify_client,
    })
}

/// The URI of a unix socket, over TLS when `tls`.
fn socket_uri(sock: &Path, tls: bool) -> String {
    format!(
        "{}+unix:///?socket={}",
        if tls { "nbds" } else { "nbd" },
        sock.display()
    )
}

/// What a libnbd client (nbdinfo, the same library and priorities as fio's engine) negotiates
/// with `s`, from GnuTLS's debug log ("TLS 1.3 GNUTLS_AES_256_GCM_SHA384"); None without nbdinfo
/// or when the log does not say.
fn probe_tls(s: &Served) -> Option<String> {
    let o = Command::new("nbdinfo")
        .arg("--size")
        .arg(&s.uri)
        .envs(s.home.iter().map(|h| ("HOME", h)))
        .env("GNUTLS_DEBUG_LEVEL", "4")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let log = String::from_utf8_lossy(&o.stderr);
    let after = |tag: &str| {
        log.lines()
            .find_map(|l| l.split_once(tag).map(|(_, v)| v.trim().to_string()))
    };
    // GnuTLS numbers versions as SSL did: 3.1 is TLS 1.0, ... 3.4 is TLS 1.3.
    let version = match after("Negotiated version:")?.as_str() {
        "3.1" => "TLS 1.0".to_string(),
        "3.2" => "TLS 1.1".to_string(),
        "3.3" => "TLS 1.2".to_string(),
        "3.4" => "TLS 1.3".to_string(),
        v => format!("version {v}"),
    };
    Some(match after("Selected cipher suite:") {
        Some(c) => format!("{version} {c}"),
        None => version,
    })
}

/// A server process killed on drop, with a temp dir for its socket.
struct Served {
    child: Child,
    uri: String,
    name: String,
    /// `HOME` for libnbd clients of a TLS server (where its certificates are).
    home: Option<PathBuf>,
}

impl Drop for Served {
    fn drop(&mut self) {
        // SAFETY: signalling a child we started and have not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn wait_for_socket(p: &Path, child: &mut Child, what: &str) -> Result<()> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) {
        if std::os::unix::net::UnixStream::connect(p).is_ok() {
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            bail!("{what} exited before listening ({st})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!(
        "{what} did not start listening on {} within 30 s",
        p.display()
    )
}

fn cpu_ticks(pid: u32) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = &s[s.rfind(')').context("bad /proc stat")? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Ok(f[11].parse::<u64>()? + f[12].parse::<u64>()?)
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

/// `MODEL[@POLL_US]` -> (`--io-model` value, `--poll-us` value).
fn split_model(m: &str) -> Result<(&str, Option<u64>)> {
    let (model, poll) = match m.split_once('@') {
        Some((model, us)) => {
            let us = us.parse().map_err(|_| {
                anyhow::anyhow!("{m:?}: expected MODEL@MICROSECONDS, e.g. inline@50")
            })?;
            (model, Some(us))
        }
        None => (m, None),
    };
    pmkit::args::parse_io_model(model).map_err(anyhow::Error::msg)?;
    Ok((model, poll))
}

/// The `pmkit` binary that serves: the one that ran `pmkit bench` (it says so in `PMKIT_BIN`),
/// else the one next to this binary or on PATH.
pub(crate) fn pmkit_exe() -> Result<PathBuf> {
    std::env::var_os("PMKIT_BIN")
        .map(PathBuf::from)
        .or_else(|| pmkit::sibling::find("pmkit"))
        .context("bench nbd runs `pmkit serve`, but no pmkit binary was found next to pmkit-bench or on PATH: build it with `cargo build --release -p pmkit`")
}

fn start_pmkit(
    dir: &Path,
    size: u64,
    model: &str,
    extra: &str,
    certs: Option<&Certs>,
) -> Result<Served> {
    let exe = pmkit_exe()?;
    let tag = format!(
        "{}{}",
        model.replace([':', '@'], "-"),
        if certs.is_some() { "-tls" } else { "" }
    );
    let dev = PathBuf::from(format!(
        "/dev/shm/pmkit-bench-nbd-{}-{tag}.pmbd",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&dev);
    let tag = format!("{tag}-{}", extra.replace([' ', '-', '/'], ""));
    let sock = dir.join(format!("pmkit-{tag}.sock"));
    let (io_model, poll) = split_model(model)?;
    let mut cmd = Command::new(exe);
    cmd.arg("serve")
        .arg(&dev)
        .arg("--size")
        .arg(size.to_string())
        .arg("--socket")
        .arg(&sock)
        .arg("--io-model")
        .arg(io_model)
        .args(poll.map(|us| format!("--poll-us={us}")))
        .args(extra.split_whitespace())
        .args(certs.iter().flat_map(|c| {
            [
                "--tls".into(),
                "require".into(),
                "--tls-certificates".into(),
                c.server.clone().into_os_string(),
            ]
            .into_iter()
            .chain(c.verify_client.then(|| "--tls-verify-peer".into()))
        }))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().context("cannot start pmkit serve")?;
    let r = wait_for_socket(&sock, &mut child, "pmkit serve");
    // The device file can go now: the server holds its mapping until it exits.
    let _ = std::fs::remove_file(&dev);
    let served = Served {
        child,
        uri: socket_uri(&sock, certs.is_some()),
        name: format!("{model}{}", if certs.is_some() { "+tls" } else { "" }),
        home: certs.map(|c| c.home.clone()),
    };
    r?;
    Ok(served)
}

fn start_nbdkit(dir: &Path, size: u64, certs: Option<&Certs>) -> Result<Served> {
    let sock = dir.join("nbdkit.sock");
    let mut child = Command::new("nbdkit")
        .args(["--foreground", "--exit-with-parent"])
        .args(certs.iter().flat_map(|c| {
            [
                "--tls=require".into(),
                format!("--tls-certificates={}", c.server.display()),
            ]
            .into_iter()
            .chain(c.verify_client.then(|| "--tls-verify-peer".into()))
        }))
        .arg("-U")
        .arg(&sock)
        .arg("memory")
        .arg(format!("size={size}"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start nbdkit")?;
    let r = wait_for_socket(&sock, &mut child, "nbdkit");
    let served = Served {
        child,
        uri: socket_uri(&sock, certs.is_some()),
        home: certs.map(|c| c.home.clone()),
        name: if certs.is_some() {
            "nbdkit+tls"
        } else {
            "nbdkit"
        }
        .into(),
    };
    r?;
    Ok(served)
}

fn fio(
    s: &Served,
    rw: &str,
    bs: u32,
    iodepth: u32,
    size: u64,
    runtime: Option<u64>,
) -> Result<serde_json::Value> {
    let mut cmd = Command::new("fio");
    if let Some(h) = &s.home {
        cmd.env("HOME", h);
    }
    cmd.args([
        "--output-format=json",
        "--ioengine=nbd",
        "--name=bench",
        "--numjobs=1",
    ])
    .arg(format!("--uri={}", s.uri))
    .arg(format!("--rw={rw}"))
    .arg(format!("--bs={bs}"))
    .arg(format!("--iodepth={iodepth}"))
    .arg(format!("--size={size}"));
    if let Some(t) = runtime {
        cmd.args(["--time_based", &format!("--runtime={t}")]);
    }
    fio_json(&mut cmd)
}

fn measure(s: &Served, w: &Workload, size: u64, runtime: u64) -> Result<Measure> {
    let pid = s.child.id();
    let t0 = cpu_ticks(pid)?;
    let j = fio(s, w.rw, w.bs, w.iodepth, size, Some(runtime))?;
    let t1 = cpu_ticks(pid)?;
    let job = &j["jobs"][0];
    let dir = if w.rw.contains("read") {
        &job["read"]
    } else {
        &job["write"]
    };
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let ios = f(&dir["total_ios"]).max(1.0);
    if f(&job["error"]) != 0.0 {
        bail!("fio reported error {} against {}", job["error"], s.name);
    }
    Ok(Measure {
        iops: f(&dir["iops"]),
        mib_s: f(&dir["bw"]) / 1024.0,
        mean_lat_us: f(&dir["clat_ns"]["mean"]) / 1000.0,
        server_cpu_us_per_io: (t1 - t0) as f64 / ticks_per_sec() * 1e6 / ios,
    })
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let hint = "Debian: apt-get install fio nbdkit libnbd-bin";
    need_tool("fio", hint)?;
    need_tool("nbdkit", hint)?;
    let size = a.size.unwrap_or(if a.quick { 256 << 20 } else { 1 << 30 });
    let runtime = a.runtime.unwrap_or(if a.quick { 2 } else { 5 });
    for m in &a.models {
        split_model(m)?;
    }
    let dir = Scratch::dir(&std::env::temp_dir(), "nbd")?;
    let certs = if a.tls {
        need_tool("certtool", "Debian: apt-get install gnutls-bin")?;
        Some(make_certs(dir.path())?)
    } else {
        None
    };
    let certs = certs.as_ref();
    let nbdkit = start_nbdkit(dir.path(), size, certs)?;
    let mut pmkit = Vec::new();
    for m in &a.models {
        for p in &a.protects {
            let (extra, name) = match p.as_str() {
                "default" => (a.serve_args.clone(), m.clone()),
                p => (
                    format!("--protect {p} {}", a.serve_args),
                    format!("{m}/{p}"),
                ),
            };
            let mut s = start_pmkit(dir.path(), size, m, &extra, certs)?;
            s.name = if a.tls { format!("{name}+tls") } else { name };
            pmkit.push(s);
        }
    }
    if a.tls {
        // The first model in plain text, last: the TLS cost is pmkit+tls against it.
        pmkit.push(start_pmkit(
            dir.path(),
            size,
            &a.models[0],
            &a.serve_args,
            None,
        )?);
    }
    // Fill both devices first, so reads copy real data on both (nbdkit's memory plugin is
    // sparse and would otherwise answer reads of never-written blocks without copying).
    for s in pmkit.iter().chain([&nbdkit]) {
        fio(s, "write", 1 << 20, 8, size, None).with_context(|| format!("filling {}", s.name))?;
    }
    // What each TLS server negotiates with libnbd (the library fio's engine uses).
    let negotiated: Vec<(String, String)> = pmkit
        .iter()
        .chain([&nbdkit])
        .filter(|s| s.home.is_some())
        .map(|s| {
            let n = if s.name.starts_with("nbdkit") {
                s.name.clone()
            } else {
                format!("pmkit/{}", s.name)
            };
            (n, probe_tls(s).unwrap_or_else(|| "unknown".into()))
        })
        .collect();
    let mut rows = Vec::new();
    for w in WORKLOADS {
        if a.tls && !TLS_WORKLOADS.contains(&w.name) {
            continue;
        }
        if !a.json {
            eprint!("{:<20}", w.name);
        }
        let k = measure(&nbdkit, w, size, runtime)?;
        let mut p = Vec::new();
        for s in &pmkit {
            p.push((s.name.clone(), measure(s, w, size, runtime)?));
        }
        let ratio = p
            .iter()
            .map(|(n, m)| (n.clone(), m.iops / k.iops.max(1e-9)))
            .collect();
        let tls_cost =
            (a.tls && p.len() >= 2).then(|| 1.0 - p[0].1.iops / p[p.len() - 1].1.iops.max(1e-9));
        rows.push(Row {
            workload: w.clone(),
            pmkit: p,
            nbdkit: k,
            ratio,
            tls_cost,
        });
        if !a.json {
            eprintln!(" done");
        }
    }
    let nbdkit_name = nbdkit.name.clone();
    drop(pmkit);
    drop(nbdkit);
    let goal = rows[0].ratio.first().map(|r| r.1).unwrap_or(0.0);
    // The goals: 1.5x nbdkit in plain text; with TLS on both, 1.2x, and TLS costing
    // pmkit at most 30% at 256 KiB.
    let target = if a.tls { 1.2 } else { 1.5 };
    let worst_cost = rows
        .iter()
        .filter(|r| r.workload.bs == 256 << 10)
        .filter_map(|r| r.tls_cost)
        .fold(f64::NEG_INFINITY, f64::max);
    if a.json {
        let doc = serde_json::json!({
            "benchmark": "nbd",
            "size": size,
            "runtime_s": runtime,
            "models": a.models,
            "protects": a.protects,
            "serve_args": a.serve_args,
            "results": rows,
            "tls": a.tls,
            "tls_setup": a.tls.then_some(TLS_SETUP),
            "tls_client_certificate": certs.map(|c| c.verify_client),
            "tls_negotiated": a.tls.then(|| negotiated.iter().cloned().collect::<std::collections::BTreeMap<_, _>>()),
            "goal": { "workload": "4k-randwrite-qd8", "ratio": goal, "target": target, "met": goal >= target },
            "tls_cost_goal": a.tls.then(|| serde_json::json!({
                "workloads": "256k", "worst_cost": worst_cost, "target": 0.3, "met": worst_cost <= 0.3 })),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "fio nbd engine, {} device, {runtime} s per run, 1 job; pmkit serve {} vs nbdkit memory",
        pmkit::args::human_size(size),
        if a.serve_args.is_empty() {
            "(defaults)".to_string()
        } else {
            a.serve_args.clone()
        }
    );
    if let Some(c) = certs {
        println!(
            "TLS: {TLS_SETUP}; client certificate {}",
            if c.verify_client {
                "required by both servers"
            } else {
                "not presented (run as root, libnbd reads /etc/pki/libnbd, not $HOME)"
            }
        );
        for (n, v) in &negotiated {
            println!("  negotiated with {n}: {v}");
        }
    }
    println!(
        "{:<20} {:<18} {:>10} {:>9} {:>9} {:>9} {:>7}",
        "workload", "server", "IOPS", "MiB/s", "lat us", "cpu us/io", "ratio"
    );
    for r in &rows {
        let k = &r.nbdkit;
        println!(
            "{:<20} {:<18} {:>10.0} {:>9.1} {:>9.1} {:>9.2}",
            r.workload.name, nbdkit_name, k.iops, k.mib_s, k.mean_lat_us, k.server_cpu_us_per_io
        );
        for ((n, m), (_, ratio)) in r.pmkit.iter().zip(&r.ratio) {
            println!(
                "{:<20} {:<18} {:>10.0} {:>9.1} {:>9.1} {:>9.2} {:>6.2}x",
                "",
                format!("pmkit/{n}"),
                m.iops,
                m.mib_s,
                m.mean_lat_us,
                m.server_cpu_us_per_io,
                ratio
            );
        }
    }
    for r in rows.iter().filter(|r| r.tls_cost.is_some()) {
        println!(
            "TLS cost to pmkit, {}: {:.0}% of plain IOPS",
            r.workload.name,
            r.tls_cost.unwrap_or(0.0) * 100.0
        );
    }
    println!(
        "goal: 4k-randwrite-qd8 pmkit/nbdkit{} >= {target}: {goal:.2}x ({})",
        if a.tls { " (both over TLS)" } else { "" },
        if goal >= target { "met" } else { "not met" }
    );
    if a.tls {
        println!(
            "goal: TLS costs pmkit <= 30% at 256 KiB: worst {:.0}% ({})",
            worst_cost * 100.0,
            if worst_cost <= 0.3 { "met" } else { "not met" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

//! The applications `pmkit bench attach` runs on a mounted file system: PostgreSQL's pgbench,
//! fio jobs and SQLite. Each returns one number (higher is better) and leaves nothing behind
//! in the mount.

use crate::host::{fio_json, sh};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub(crate) fn pg_bin(tool: &str) -> Result<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.flatten()
                .map(|e| e.path().join("bin").join(tool))
                .filter(|p| p.exists())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.pop().with_context(|| {
        format!("PostgreSQL's {tool} not found under /usr/lib/postgresql: install postgresql")
    })
}

/// initdb + start + pgbench -i + pgbench run + stop, as user postgres, data on `mnt`. TPS.
pub(crate) fn pgbench(mnt: &Path, scale: u32, clients: u32, tx: u32) -> Result<f64> {
    let data = mnt.join("pg");
    let sock = mnt.join("sock");
    std::fs::create_dir_all(&data)?;
    std::fs::create_dir_all(&sock)?;
    sh(Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(mnt))?;
    let as_pg = |tool: &str| -> Result<Command> {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(pg_bin(tool)?);
        Ok(c)
    };
    sh(as_pg("initdb")?
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "--no-sync"]))?;
    let opts = format!(
        "-k {} -c listen_addresses='' -p 5499 -c shared_buffers=128MB -c max_wal_size=1GB",
        sock.display()
    );
    sh(as_pg("pg_ctl")?
        .arg("-D")
        .arg(&data)
        .args(["-o", &opts, "-w", "-l"])
        .arg(mnt.join("pg.log"))
        .arg("start"))?;
    let run = (|| -> Result<f64> {
        let host = sock.display().to_string();
        sh(as_pg("pgbench")?.args([
            "-h",
            &host,
            "-p",
            "5499",
            "-i",
            "-q",
            "-s",
            &scale.to_string(),
            "postgres",
        ]))?;
        let out = sh(as_pg("pgbench")?.args([
            "-h",
            &host,
            "-p",
            "5499",
            "-c",
            &clients.to_string(),
            "-j",
            "2",
            "-t",
            &tx.to_string(),
            "postgres",
        ]))?;
        out.lines()
            .find(|l| l.starts_with("tps = "))
            .and_then(|l| l[6..].split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no tps in pgbench output: {out}"))
    })();
    let _ = sh(as_pg("pg_ctl")?
        .arg("-D")
        .arg(&data)
        .args(["-m", "fast", "-w", "stop"]));
    run
}

/// One fio job on a file in `mnt` (`args` name the engine and pattern); returns (IOPS, MB/s)
/// of the writes.
pub(crate) fn fio(mnt: &Path, name: &str, args: &[&str], secs: u32) -> Result<(f64, f64)> {
    let v = fio_json(
        Command::new("fio")
            .arg(format!("--name={name}"))
            .arg(format!("--directory={}", mnt.display()))
            .args(["--size=256M", "--time_based", "--output-format=json"])
            .arg(format!("--runtime={secs}"))
            .args(args),
    )?;
    let w = &v["jobs"][0]["write"];
    let _ = std::fs::remove_file(mnt.join(format!("{name}.0.0")));
    Ok((
        w["iops"].as_f64().unwrap_or(0.0),
        w["bw_bytes"].as_f64().unwrap_or(0.0) / 1e6,
    ))
}

/// SQLite rows per transaction (the workload: 200k rows in 2000 transactions).
pub(crate) const SQLITE_ROWS_PER_TX: u32 = 100;

/// `tx` transactions of [`SQLITE_ROWS_PER_TX`] 100-byte rows each into a fresh database in
/// `mnt`, `synchronous = FULL`, with a rollback journal (every commit fsyncs the journal and the
/// database) or with `wal` a write-ahead log (every commit fsyncs the log; its index is the
/// `-shm` file, mapped shared): rows per second, by the sqlite3 shell, started with `env` (the
/// LD_PRELOAD shim's variables for PMFS in process; none for a mounted file system).
pub(crate) fn sqlite(mnt: &Path, tx: u32, wal: bool, env: &[(String, String)]) -> Result<f64> {
    use std::io::Write;
    let db = mnt.join("bench.db");
    let _ = std::fs::remove_file(&db);
    let mode = if wal { "WAL" } else { "DELETE" };
    let mut sql = format!(
        "PRAGMA journal_mode = {mode};\nPRAGMA synchronous = FULL;\n\
         CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB);\n",
    );
    let one = format!(
        "BEGIN; INSERT INTO t (v) WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 \
         FROM c WHERE x < {SQLITE_ROWS_PER_TX}) SELECT randomblob(100) FROM c; COMMIT;\n"
    );
    for _ in 0..tx {
        sql.push_str(&one);
    }
    let t = Instant::now();
    let mut child = Command::new("sqlite3")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running sqlite3")?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(sql.as_bytes())?;
    let out = child.wait_with_output()?;
    let secs = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        out.status.success() && out.stderr.is_empty(),
        "sqlite3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in ["bench.db", "bench.db-wal", "bench.db-shm"] {
        let _ = std::fs::remove_file(mnt.join(f));
    }
    Ok(f64::from(tx * SQLITE_ROWS_PER_TX) / secs)
}

//! kill -9 test: clients write (two connections, 8 requests in flight each) with a FLUSH every
//! few dozen writes; the server is killed with SIGKILL mid-run and restarted on the same PM file;
//! every write acknowledged before the last completed FLUSH was sent must read back.
//!
//! The load generator is a small NBD client here rather than fio, because the check needs to know
//! exactly which writes were acknowledged before which flush, and fio does not report that.
//! Every block written carries (block, sequence) and data derived from them, so a read-back
//! identifies which write it holds, or that it is torn.
//!
//! Trials alternate the default engine and `--protect pt-batch` (DRAM staging buffers, where only
//! FLUSH makes writes durable). `PMKIT_KILL_TRIALS=N` runs N trials (default 2).

mod serve_util;

use serve_util::*;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BS: usize = 4096;
const CONNS: u64 = 2;
const QD: usize = 8;
const FLUSH_EVERY: u64 = 40;

const FLUSH_BIT: u64 = 1 << 63;

/// Global order of events across connections.
static CLOCK: AtomicU64 = AtomicU64::new(1);
fn now() -> u64 {
    CLOCK.fetch_add(1, Ordering::SeqCst)
}

#[derive(Clone, Debug)]
struct WriteRec {
    block: u64,
    seq: u64,
    acked: Option<u64>,
}

#[derive(Clone, Debug, Default)]
struct Log {
    writes: Vec<WriteRec>,
    /// (sent, completed) of each FLUSH that got a successful reply.
    flushes: Vec<(u64, u64)>,
}

fn block_data(block: u64, seq: u64) -> Vec<u8> {
    let mut d = vec![0u8; BS];
    fill_random(&mut d, block.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seq);
    d[0..8].copy_from_slice(&block.to_le_bytes());
    d[8..16].copy_from_slice(&seq.to_le_bytes());
    d
}

/// Which write a block holds: Some(0) for never written (zeroes), Some(seq), or None if torn.
fn identify(block: u64, d: &[u8]) -> Option<u64> {
    if d.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let b = u64::from_le_bytes(d[0..8].try_into().unwrap());
    let seq = u64::from_le_bytes(d[8..16].try_into().unwrap());
    (b == block && block_data(block, seq) == d).then_some(seq)
}

/// Write until the connection dies; returns what happened.
fn writer(sock: &Path, conn: u64, blocks: u64, seqs: Arc<AtomicU64>, stop: Arc<AtomicBool>) -> Log {
    let mut log = Log::default();
    let Ok(mut s) = nbd_connect(sock) else {
        return log;
    };
    let mut rng = 0x1234_5678u64 ^ conn;
    let mut inflight: HashMap<u64, usize> = HashMap::new(); // seq -> index in log.writes
    let mut busy_blocks = std::collections::HashSet::new();
    let mut pending_flush: Option<(u64, u64)> = None; // (handle, sent)
    let mut n = 0u64;
    let result = (|| -> std::io::Result<()> {
        while !stop.load(Ordering::Relaxed) {
            while inflight.len() < QD {
                // A block of this connection with no write in flight, so writes to one block are
                // never concurrent and their order is the send order.
                let block = loop {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let b = (rng % (blocks / CONNS)) * CONNS + conn;
                    if !busy_blocks.contains(&b) {
                        break b;
                    }
                };
                let seq = seqs.fetch_add(1, Ordering::Relaxed);
                let mut msg = nbd_request(1, seq, block * BS as u64, BS as u32);
                msg.extend_from_slice(&block_data(block, seq));
                s.write_all(&msg)?;
                log.writes.push(WriteRec {
                    block,
                    seq,
                    acked: None,
                });
                inflight.insert(seq, log.writes.len() - 1);
                busy_blocks.insert(block);
                n += 1;
                if n.is_multiple_of(FLUSH_EVERY) && pending_flush.is_none() {
                    let h = FLUSH_BIT | n;
                    let sent = now();
                    s.write_all(&nbd_request(3, h, 0, 0))?;
                    pending_flush = Some((h, sent));
                }
            }
            let (err, h) = nbd_reply(&mut s)?;
            assert_eq!(err, 0, "request {h:#x} failed with {err}");
            let t = now();
            if h & FLUSH_BIT != 0 {
                let (ph, sent) = pending_flush.take().expect("unexpected flush reply");
                assert_eq!(ph, h);
                log.flushes.push((sent, t));
            } else {
                let i = inflight.remove(&h).expect("reply for unknown handle");
                log.writes[i].acked = Some(t);
                busy_blocks.remove(&log.writes[i].block);
            }
        }
        Ok(())
    })();
    // The server was killed: an I/O error (or EOF) is how this ends.
    assert!(result.is_err() || stop.load(Ordering::Relaxed));
    log
}

fn read_all(sock: &Path, blocks: u64) -> Vec<Vec<u8>> {
    let mut s = nbd_connect(sock).expect("connect to the restarted server");
    let mut out = vec![Vec::new(); blocks as usize];
    let mut next = 0u64;
    let mut got = 0u64;
    while got < blocks {
        while next < blocks && next - got < 32 {
            s.write_all(&nbd_request(0, next, next * BS as u64, BS as u32))
                .unwrap();
            next += 1;
        }
        let (err, h) = nbd_reply(&mut s).unwrap();
        assert_eq!(err, 0);
        let mut d = vec![0u8; BS];
        s.read_exact(&mut d).unwrap();
        out[h as usize] = d;
        got += 1;
    }
    out
}

fn trial(t: u64) {
    let dev = DevFile::new(&format!("kill{t}"));
    let mb = 32u64;
    let engine: &[&str] = if t % 2 == 1 {
        &["--protect", "pt-batch", "--buffer-size", "1M"]
    } else {
        &[]
    };
    let mut args = vec!["--size", "32M"];
    args.extend(engine);
    let s = Serve::start(dev.path(), &args);
    let blocks = ((mb << 20) - 4096) / BS as u64;
    let seqs = Arc::new(AtomicU64::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..CONNS)
        .map(|c| {
            let (sock, seqs, stop) = (s.sock.clone(), seqs.clone(), stop.clone());
            std::thread::spawn(move || writer(&sock, c, blocks, seqs, stop))
        })
        .collect();
    // Let the load run for a while, then crash the server under it.
    std::thread::sleep(Duration::from_millis(300 + (t * 137) % 500));
    s.kill9();
    let logs: Vec<Log> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);

    // Restart on the same file and read everything back.
    let s = Serve::start(dev.path(), engine);
    assert!(
        s.banner.contains("note:"),
        "an unclean shutdown should be noted: {}",
        s.banner
    );
    let data = read_all(&s.sock, blocks);

    // With CAN_MULTI_CONN a flush covers writes acknowledged on every connection.
    let last_flush_sent = logs
        .iter()
        .flat_map(|l| l.flushes.iter().map(|f| f.0))
        .max()
        .unwrap_or(0);
    let mut per_block: HashMap<u64, Vec<&WriteRec>> = HashMap::new();
    for w in logs.iter().flat_map(|l| l.writes.iter()) {
        per_block.entry(w.block).or_default().push(w);
    }
    let (mut checked, mut durable_n, mut torn_inflight) = (0, 0, 0);
    for (block, ws) in &mut per_block {
        ws.sort_by_key(|w| w.seq);
        let durable = ws
            .iter()
            .rev()
            .find(|w| w.acked.is_some_and(|a| a < last_flush_sent));
        let got = identify(*block, &data[*block as usize]);
        // Allowed: the durable write, or any write sent after it (which may or may not have
        // landed); with no durable write, also the initial zeroes.
        let allowed: Vec<u64> = match durable {
            Some(d) => ws
                .iter()
                .filter(|w| w.seq >= d.seq)
                .map(|w| w.seq)
                .collect(),
            None => std::iter::once(0).chain(ws.iter().map(|w| w.seq)).collect(),
        };
        if durable.is_some() {
            durable_n += 1;
        }
        match got {
            Some(seq) => assert!(
                allowed.contains(&seq),
                "trial {t}: block {block} holds write {seq}, but the last write flushed was {:?} (allowed {allowed:?})",
                durable.map(|d| d.seq)
            ),
            None => {
                // Torn contents are acceptable only from a write still in flight at the kill
                // that was not covered by a flush.
                let unacked = ws.last().is_some_and(|w| w.acked.is_none());
                assert!(unacked, "trial {t}: block {block} is torn, and no write to it was in flight");
                torn_inflight += 1;
            }
        }
        checked += 1;
    }
    let total_writes: usize = logs.iter().map(|l| l.writes.len()).sum();
    let flushes: usize = logs.iter().map(|l| l.flushes.len()).sum();
    eprintln!(
        "trial {t} ({}): {total_writes} writes, {flushes} flushes completed, {checked} blocks checked, \
         {durable_n} with a flushed write, {torn_inflight} torn by an in-flight write",
        if engine.is_empty() { "default engine" } else { "pt-batch" }
    );
    assert!(
        flushes > 0 && durable_n > 0,
        "trial {t}: the kill came before any flush completed; the test checked nothing"
    );
    let (st, err) = s.stop();
    assert!(st.success(), "{err}");
}

#[test]
fn kill_9_loses_no_flushed_write() {
    let trials: u64 = std::env::var("PMKIT_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    for t in 0..trials {
        trial(t);
    }
}

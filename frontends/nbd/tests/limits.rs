//! The server's totals (every connection counts, however it ends).

mod common;

use common::*;
use pmkit_nbd::proto::*;
use std::io::Write;

/// How a client leaves after its requests.
#[derive(Debug, Clone, Copy)]
enum Leave {
    /// Closes the socket between requests (end-of-file).
    Eof,
    /// Closes with a reply it has not read (the server sees a reset or a failed send).
    UnreadReply,
    /// Closes in the middle of a request header.
    MidHeader,
}

#[test]
fn totals_count_connections_that_close_without_disc() {
    const WRITES: u64 = 8;
    const READS: u64 = 5;
    const LEN: u32 = 4096;
    let leaves = [Leave::Eof, Leave::UnreadReply, Leave::MidHeader];
    for model in models() {
        let srv = TestServer::start(cfg(model));
        let per_round = leaves.len() as u64;
        let rounds = 3u64;
        for i in 0..rounds * per_round {
            let leave = leaves[(i % per_round) as usize];
            let mut c = srv.go(i % 2 == 0, false);
            let base = i * WRITES * LEN as u64;
            for w in 0..WRITES {
                c.request(
                    CMD_WRITE,
                    0,
                    w,
                    base + w * LEN as u64,
                    LEN,
                    &[i as u8; 4096],
                );
            }
            for _ in 0..WRITES {
                assert_eq!(c.reply(|_| 0).error(), 0);
            }
            for r in 0..READS {
                assert_eq!(
                    c.read(base + r * LEN as u64, LEN).unwrap(),
                    vec![i as u8; 4096]
                );
            }
            match leave {
                Leave::Eof => {}
                Leave::UnreadReply => {
                    // One more read: wait for the start of its reply, leave the rest unread.
                    c.request(CMD_READ, 0, 99, base, LEN, &[]);
                    let _ = c.read_n(4);
                }
                Leave::MidHeader => c.s.write_all(&REQUEST_MAGIC.to_be_bytes()).unwrap(),
            }
            drop(c); // no NBD_CMD_DISC
        }
        let st = srv.stop();
        let extra = rounds; // the UnreadReply clients' last read
        let n = rounds * per_round;
        assert_eq!(st.connections, n, "{model:?}");
        assert_eq!(
            st.requests,
            n * (WRITES + READS) + extra,
            "{model:?}: {st:?}"
        );
        assert_eq!(st.bytes_written, n * WRITES * LEN as u64, "{model:?}");
        assert_eq!(st.bytes_read, (n * READS + extra) * LEN as u64, "{model:?}");
        assert_eq!(st.errors, 0, "{model:?}");
    }
}

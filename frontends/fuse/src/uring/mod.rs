//! FUSE over io_uring (Linux 6.14+, `CONFIG_FUSE_IO_URING`, enabled by root with
//! `/sys/module/fuse/parameters/enable_uring`): after the INIT handshake on /dev/fuse has
//! granted `FUSE_OVER_IO_URING`, a queue per CPU registers ring entries with
//! `IORING_OP_URING_CMD` on the FUSE descriptor; once every CPU's queue has one, the kernel
//! sends requests through the rings instead of /dev/fuse (interrupts and forgets still come
//! through /dev/fuse, which the /dev/fuse workers keep serving: `dev.rs`). No Rust FUSE crate
//! we use speaks this protocol (fuser 0.18 does not), so this module does: the queues carry
//! any request to a `Handler` (`answer.rs`, the decoder the /dev/fuse workers use too),
//! which calls the file system's [`crate::ops::Ops`].

use crate::abi;
use crate::answer::{answer_caught, Handler};
use serde::{Deserialize, Serialize};

mod buffers;
mod queue;

/// Answer the request in an entry's `header`/`payload` (as the kernel filled them) in place;
/// the commit id to send with COMMIT_AND_FETCH. Every request gets an answer (see
/// [`answer_caught`]).
fn handle<H: Handler>(handler: &H, header: &mut [u8], payload: &mut [u8]) -> u64 {
    let h = abi::InHeader::parse(header);
    let (errno, len) = answer_caught(handler, &h, abi::op_in(header), payload);
    abi::set_reply(header, h.unique, errno, len);
    h.commit_id
}

pub(crate) use queue::start;
pub use queue::{Queues, UringError, QUEUE_DEPTH};

/// Whether the kernel offers FUSE over io_uring to new connections.
pub fn enabled() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|s| s.trim() == "Y")
}

/// How FUSE requests reach this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// io_uring where the kernel offers it, else /dev/fuse.
    #[default]
    Auto,
    /// `read`/`writev` on /dev/fuse, a worker per CPU on cloned descriptors.
    Dev,
    /// FUSE over io_uring, a queue per CPU; attach and mount fail where the kernel does not offer it.
    Uring,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Transport::Auto),
            "dev" => Ok(Transport::Dev),
            "uring" => Ok(Transport::Uring),
            _ => Err(format!("unknown transport {s:?} (auto, dev, uring)")),
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Auto => "auto",
            Transport::Dev => "dev",
            Transport::Uring => "uring",
        })
    }
}

impl Transport {
    /// Whether to ask for io_uring at INIT; refused (with the command that enables it) for
    /// `uring` where the kernel does not offer it.
    pub fn wants_uring(self) -> Result<bool, String> {
        match self {
            Transport::Dev => Ok(false),
            Transport::Auto => Ok(enabled()),
            Transport::Uring if enabled() => Ok(true),
            Transport::Uring => Err(NOT_OFFERED.into()),
        }
    }
}

/// Why `--transport uring` was refused.
pub const NOT_OFFERED: &str =
    "the kernel does not offer FUSE over io_uring (needs CONFIG_FUSE_IO_URING and \
     `echo Y > /sys/module/fuse/parameters/enable_uring` as root); use --transport dev or auto";

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every request by panicking, or with an errno.
    struct Faulty;

    impl Handler for Faulty {
        fn answer(&self, h: &abi::InHeader, _: &[u8], _: &mut [u8]) -> Result<u32, i32> {
            if h.opcode == abi::op::SETATTR {
                panic!("a handler bug");
            }
            Err(libc::ENOSYS)
        }
    }

    fn request(opcode: u32, unique: u64) -> Vec<u8> {
        let mut h = vec![0u8; abi::HEADER_LEN];
        h[4..8].copy_from_slice(&opcode.to_le_bytes());
        h[8..16].copy_from_slice(&unique.to_le_bytes());
        h
    }

    fn errno_of(reply: &[u8]) -> i32 {
        -i32::from_le_bytes(reply[4..8].try_into().unwrap())
    }

    /// A panicking handler's request is answered (EIO, its own id), and the next is served.
    #[test]
    fn a_panicking_handler_answers_eio_and_the_queue_serves_on() {
        let mut payload = vec![0u8; 64];
        let mut h = request(abi::op::SETATTR, 7);
        handle(&Faulty, &mut h, &mut payload);
        assert_eq!(errno_of(&h), libc::EIO);
        assert_eq!(u64::from_le_bytes(h[8..16].try_into().unwrap()), 7);
        let mut h = request(abi::op::GETATTR, 8);
        handle(&Faulty, &mut h, &mut payload);
        assert_eq!(errno_of(&h), libc::ENOSYS);
    }
}

//! A minimal generic netlink client: the messages the kernel's NBD driver needs (resolve a
//! family, send one request, read its answer and acknowledgement). Attributes are written and
//! read as the kernel lays them out (`struct nlattr`, 4-byte aligned); nothing here interprets
//! them beyond that.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NLMSG_HDR: usize = 16;
const GENL_HDR: usize = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// The flag the kernel sets on (and accepts for) nested attributes.
pub const NLA_F_NESTED: u16 = 1 << 15;
/// Largest answer read: the driver's answers are a few attributes.
const RECV_MAX: usize = 16 << 10;

/// Attributes of one message, appended in order.
#[derive(Default)]
pub struct Attrs(Vec<u8>);

impl Attrs {
    pub fn put(&mut self, typ: u16, payload: &[u8]) -> &mut Self {
        let len = 4 + payload.len();
        assert!(len <= u16::MAX as usize, "netlink attribute too long");
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&typ.to_ne_bytes());
        self.0.extend_from_slice(payload);
        self.0.resize(self.0.len().next_multiple_of(4), 0);
        self
    }
    pub fn u32(&mut self, typ: u16, v: u32) -> &mut Self {
        self.put(typ, &v.to_ne_bytes())
    }
    pub fn u64(&mut self, typ: u16, v: u64) -> &mut Self {
        self.put(typ, &v.to_ne_bytes())
    }
    pub fn nested(&mut self, typ: u16, inner: &Attrs) -> &mut Self {
        self.put(typ | NLA_F_NESTED, &inner.0)
    }
}

/// Walk the attributes in `buf`: (type without flags, payload).
pub fn parse(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let typ = u16::from_ne_bytes([buf[2], buf[3]]) & !(NLA_F_NESTED | 1 << 14);
        if len < 4 || len > buf.len() {
            return None;
        }
        let payload = &buf[4..len];
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
        Some((typ, payload))
    })
}

/// A generic netlink socket bound to one family.
pub struct Genl {
    fd: OwnedFd,
    family: u16,
    seq: u32,
}

impl Genl {
    /// Open a socket and resolve `family` (ENOENT when the kernel has no such family: its
    /// module is not loaded).
    pub fn open(family: &str) -> io::Result<Genl> {
        // SAFETY: socket(2) with constant arguments; the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_GENERIC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut g = Genl {
            fd,
            family: GENL_ID_CTRL,
            seq: 0,
        };
        let mut name = family.as_bytes().to_vec();
        name.push(0);
        let mut a = Attrs::default();
        a.put(CTRL_ATTR_FAMILY_NAME, &name);
        let answer = g.request(CTRL_CMD_GETFAMILY, 1, &a)?;
        let id = answer
            .iter()
            .flat_map(|m| parse(m))
            .find(|(t, p)| *t == CTRL_ATTR_FAMILY_ID && p.len() == 2)
            .map(|(_, p)| u16::from_ne_bytes([p[0], p[1]]))
            .ok_or_else(|| io::Error::other(format!("no id for netlink family {family}")))?;
        g.family = id;
        Ok(g)
    }

    /// Send command `cmd` with `attrs`, asking for an acknowledgement; the attribute areas of
    /// every answer before the acknowledgement, or the errno the kernel answered.
    pub fn request(&mut self, cmd: u8, version: u8, attrs: &Attrs) -> io::Result<Vec<Vec<u8>>> {
        self.seq = self.seq.wrapping_add(1);
        let len = NLMSG_HDR + GENL_HDR + attrs.0.len();
        let mut m = Vec::with_capacity(len);
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&self.family.to_ne_bytes());
        m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        m.extend_from_slice(&self.seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[cmd, version, 0, 0]);
        m.extend_from_slice(&attrs.0);
        // SAFETY: sends `m.len()` initialised bytes to the kernel (a zeroed sockaddr_nl with
        // AF_NETLINK is the kernel's address).
        let sent = unsafe {
            let mut to: libc::sockaddr_nl = std::mem::zeroed();
            to.nl_family = libc::AF_NETLINK as u16;
            libc::sendto(
                self.fd.as_raw_fd(),
                m.as_ptr().cast(),
                m.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        self.answers()
    }

    /// Read the answers to the last request up to its acknowledgement (or error).
    fn answers(&self) -> io::Result<Vec<Vec<u8>>> {
        let mut answers = vec![];
        let mut buf = vec![0u8; RECV_MAX];
        loop {
            // SAFETY: reads at most buf.len() bytes into buf.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let mut rest = &buf[..n as usize];
            while rest.len() >= NLMSG_HDR {
                let len = u32::from_ne_bytes(rest[0..4].try_into().unwrap()) as usize;
                let typ = u16::from_ne_bytes([rest[4], rest[5]]);
                let seq = u32::from_ne_bytes(rest[8..12].try_into().unwrap());
                if len < NLMSG_HDR || len > rest.len() {
                    return Err(io::Error::other("malformed netlink answer"));
                }
                let body = &rest[NLMSG_HDR..len];
                rest = &rest[len.next_multiple_of(4).min(rest.len())..];
                if seq != self.seq {
                    continue;
                }
                match typ {
                    NLMSG_ERROR => {
                        let err = i32::from_ne_bytes(
                            body.get(0..4)
                                .ok_or_else(|| io::Error::other("short netlink error"))?
                                .try_into()
                                .unwrap(),
                        );
                        return if err == 0 {
                            Ok(answers)
                        } else {
                            Err(io::Error::from_raw_os_error(-err))
                        };
                    }
                    NLMSG_DONE => return Ok(answers),
                    _ if body.len() >= GENL_HDR => answers.push(body[GENL_HDR..].to_vec()),
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_with_padding_and_nesting() {
        let mut inner = Attrs::default();
        inner.u32(1, 7);
        let mut a = Attrs::default();
        a.u64(2, 1 << 40)
            .put(3, b"abcde")
            .nested(7, &inner)
            .u32(1, 9);
        let got: Vec<(u16, Vec<u8>)> = parse(&a.0).map(|(t, p)| (t, p.to_vec())).collect();
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], (2, (1u64 << 40).to_ne_bytes().to_vec()));
        assert_eq!(got[1], (3, b"abcde".to_vec()));
        assert_eq!(got[2].0, 7, "the nested flag is not part of the type");
        let nested: Vec<_> = parse(&got[2].1).collect();
        assert_eq!(nested, [(1, &7u32.to_ne_bytes()[..])]);
        assert_eq!(got[3], (1, 9u32.to_ne_bytes().to_vec()));
        assert_eq!(a.0.len() % 4, 0);
    }

    #[test]
    fn truncated_attributes_end_the_walk() {
        let mut a = Attrs::default();
        a.u32(1, 5);
        let cut = &a.0[..6];
        assert_eq!(parse(cut).count(), 0);
    }

    /// The control family always exists; an unknown family is ENOENT, not a panic.
    #[test]
    fn resolving_families() {
        match Genl::open("pmkit-no-such-family") {
            Err(e) => assert!(
                e.raw_os_error() == Some(libc::ENOENT) || e.kind() != io::ErrorKind::Other,
                "{e}"
            ),
            Ok(_) => panic!("an unknown family resolved"),
        }
        Genl::open("nlctrl").expect("the netlink control family resolves itself");
    }
}

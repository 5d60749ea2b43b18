//! `/dev/ublk-control`: add, configure, start, stop and delete devices. One command at a time,
//! each a 128-byte io_uring command waited for at once.

use crate::abi::{self, CtrlCmd, DevInfo, Params};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;

pub(crate) const CONTROL: &str = "/dev/ublk-control";

pub(crate) struct Control {
    file: File,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
}

impl Control {
    pub(crate) fn open() -> io::Result<Control> {
        let file = OpenOptions::new().read(true).write(true).open(CONTROL)?;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(4)?;
        Ok(Control { file, ring })
    }

    /// Send one command and wait for its result (>= 0, or the error the driver gave).
    fn send(&mut self, op: u32, cmd: CtrlCmd) -> io::Result<i32> {
        let sqe = opcode::UringCmd80::new(types::Fd(self.file.as_raw_fd()), op)
            .cmd(abi::bytes_of::<CtrlCmd, 80>(&cmd))
            .build();
        // SAFETY: the command's payload is copied into the SQE; the buffers its `addr` names
        // (the caller's DevInfo or Params) outlive this call, which waits for the completion.
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("ublk control ring full"))?;
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        let cqe = self
            .ring
            .completion()
            .next()
            .expect("a completion after waiting for one");
        match cqe.result() {
            r if r < 0 => Err(io::Error::from_raw_os_error(-r)),
            r => Ok(r),
        }
    }

    fn device_cmd(dev_id: u32) -> CtrlCmd {
        CtrlCmd {
            dev_id,
            queue_id: u16::MAX,
            ..Default::default()
        }
    }

    /// Add a device (the driver picks its number when `info.dev_id` is `u32::MAX`); the driver
    /// writes the final info back.
    pub(crate) fn add(&mut self, info: &mut DevInfo) -> io::Result<()> {
        let cmd = CtrlCmd {
            len: size_of::<DevInfo>() as u16,
            addr: info as *mut DevInfo as u64,
            ..Self::device_cmd(info.dev_id)
        };
        self.send(abi::CMD_ADD_DEV, cmd).map(drop)
    }

    pub(crate) fn set_params(&mut self, dev_id: u32, p: &Params) -> io::Result<()> {
        assert_eq!(p.len, abi::PARAMS_LEN);
        let cmd = CtrlCmd {
            len: abi::PARAMS_LEN as u16,
            addr: p as *const Params as u64,
            ..Self::device_cmd(dev_id)
        };
        self.send(abi::CMD_SET_PARAMS, cmd).map(drop)
    }

    /// Start the device: the driver waits until every queue has fetched every tag, then makes
    /// `/dev/ublkbN` (and reads its partition table through the queues).
    pub(crate) fn start(&mut self, dev_id: u32) -> io::Result<()> {
        let cmd = CtrlCmd {
            data: std::process::id() as u64,
            ..Self::device_cmd(dev_id)
        };
        self.send(abi::CMD_START_DEV, cmd).map(drop)
    }

    /// Remove `/dev/ublkbN` (after the last request in flight); queued fetches then fail.
    pub(crate) fn stop(&mut self, dev_id: u32) -> io::Result<()> {
        self.send(abi::CMD_STOP_DEV, Self::device_cmd(dev_id))
            .map(drop)
    }

    /// Forget the device; the driver waits until `/dev/ublkcN` is closed.
    pub(crate) fn delete(&mut self, dev_id: u32) -> io::Result<()> {
        self.send(abi::CMD_DEL_DEV, Self::device_cmd(dev_id))
            .map(drop)
    }
}

//! The ublk driver's user ABI (`include/uapi/linux/ublk_cmd.h`), the part this server uses:
//! control commands on `/dev/ublk-control`, I/O commands and descriptors on `/dev/ublkcN`.
//! Layouts are fixed by the kernel; the size checks below catch a typo at compile time.

/// `_IOC(dir, 'u', nr, size)`: every command is sent ioctl-encoded (`UBLK_F_CMD_IOCTL_ENCODE`),
/// which every kernel with ublk accepts (the legacy numbers can be configured out).
const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((b'u' as u32) << 8) | nr
}
const WR: u32 = 3;

pub(crate) const CMD_ADD_DEV: u32 = ioc(WR, 0x04, size_of::<CtrlCmd>());
pub(crate) const CMD_DEL_DEV: u32 = ioc(WR, 0x05, size_of::<CtrlCmd>());
pub(crate) const CMD_START_DEV: u32 = ioc(WR, 0x06, size_of::<CtrlCmd>());
pub(crate) const CMD_STOP_DEV: u32 = ioc(WR, 0x07, size_of::<CtrlCmd>());
pub(crate) const CMD_SET_PARAMS: u32 = ioc(WR, 0x08, size_of::<CtrlCmd>());

pub(crate) const IO_FETCH_REQ: u32 = ioc(WR, 0x20, size_of::<IoCmd>());
pub(crate) const IO_COMMIT_AND_FETCH_REQ: u32 = ioc(WR, 0x21, size_of::<IoCmd>());

/// A fetch or commit completes with this when the queue is going away: do not fetch again.
pub(crate) const IO_RES_ABORT: i32 = -libc::ENODEV;
pub(crate) const IO_RES_OK: i32 = 0;

/// Most requests in flight per queue (tags are 16 bits; the driver's limit).
pub(crate) const MAX_QUEUE_DEPTH: usize = 4096;
/// Where queue `q`'s descriptor array is mapped in `/dev/ublkcN`: one slot of the largest size
/// per queue.
pub(crate) fn descriptors_offset(q: u16) -> i64 {
    let slot = (MAX_QUEUE_DEPTH * size_of::<IoDesc>()).next_multiple_of(page_size());
    q as i64 * slot as i64
}
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

pub(crate) const F_CMD_IOCTL_ENCODE: u64 = 1 << 6;

pub(crate) const OP_READ: u8 = 0;
pub(crate) const OP_WRITE: u8 = 1;
pub(crate) const OP_FLUSH: u8 = 2;
pub(crate) const OP_DISCARD: u8 = 3;
pub(crate) const OP_WRITE_ZEROES: u8 = 5;
pub(crate) const IO_F_FUA: u32 = 1 << 13;
pub(crate) const IO_F_NOUNMAP: u32 = 1 << 15;

pub(crate) const ATTR_READ_ONLY: u32 = 1 << 0;
pub(crate) const ATTR_VOLATILE_CACHE: u32 = 1 << 2;
pub(crate) const ATTR_FUA: u32 = 1 << 3;
pub(crate) const PARAM_TYPE_BASIC: u32 = 1 << 0;
pub(crate) const PARAM_TYPE_DISCARD: u32 = 1 << 1;

/// `struct ublksrv_ctrl_cmd`: the payload of a control command (in a 128-byte SQE).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CtrlCmd {
    pub(crate) dev_id: u32,
    /// `u16::MAX` for commands that are not about one queue.
    pub(crate) queue_id: u16,
    pub(crate) len: u16,
    pub(crate) addr: u64,
    pub(crate) data: u64,
    pub(crate) dev_path_len: u16,
    pub(crate) pad: u16,
    pub(crate) reserved: u32,
}

/// `struct ublksrv_ctrl_dev_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DevInfo {
    pub(crate) nr_hw_queues: u16,
    pub(crate) queue_depth: u16,
    pub(crate) state: u16,
    pub(crate) pad0: u16,
    pub(crate) max_io_buf_bytes: u32,
    pub(crate) dev_id: u32,
    pub(crate) ublksrv_pid: i32,
    pub(crate) pad1: u32,
    pub(crate) flags: u64,
    pub(crate) ublksrv_flags: u64,
    pub(crate) owner_uid: u32,
    pub(crate) owner_gid: u32,
    pub(crate) reserved1: u64,
    pub(crate) reserved2: u64,
}

/// `struct ublk_param_basic`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ParamBasic {
    pub(crate) attrs: u32,
    pub(crate) logical_bs_shift: u8,
    pub(crate) physical_bs_shift: u8,
    pub(crate) io_opt_shift: u8,
    pub(crate) io_min_shift: u8,
    pub(crate) max_sectors: u32,
    pub(crate) chunk_sectors: u32,
    pub(crate) dev_sectors: u64,
    pub(crate) virt_boundary_mask: u64,
}

/// `struct ublk_param_discard`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ParamDiscard {
    pub(crate) discard_alignment: u32,
    pub(crate) discard_granularity: u32,
    pub(crate) max_discard_sectors: u32,
    pub(crate) max_write_zeroes_sectors: u32,
    pub(crate) max_discard_segments: u16,
    pub(crate) reserved0: u16,
}

/// The head of `struct ublk_params` with the two parts this server sets; `len` says how much
/// the driver reads, so the later parts (device numbers, zones) are left out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Params {
    pub(crate) len: u32,
    pub(crate) types: u32,
    pub(crate) basic: ParamBasic,
    pub(crate) discard: ParamDiscard,
}

/// `struct ublksrv_io_desc`: one request, written by the driver into the mapped array at its tag.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoDesc {
    /// The operation in bits 0-7, flags above.
    pub op_flags: u32,
    pub nr_sectors: u32,
    pub start_sector: u64,
    pub addr: u64,
}

impl IoDesc {
    pub(crate) fn op(&self) -> u8 {
        self.op_flags as u8
    }
}

/// `struct ublksrv_io_cmd`: the payload of an I/O command (in a 64-byte SQE).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IoCmd {
    pub(crate) q_id: u16,
    pub(crate) tag: u16,
    pub(crate) result: i32,
    pub(crate) addr: u64,
}

const _: () = assert!(size_of::<CtrlCmd>() == 32);
const _: () = assert!(size_of::<DevInfo>() == 64);
const _: () = assert!(size_of::<ParamBasic>() == 32);
const _: () = assert!(size_of::<ParamDiscard>() == 20);
const _: () = assert!(size_of::<Params>() == 64);
/// The bytes of `Params` the driver reads: the header, basic and discard (devt follows at 60).
pub(crate) const PARAMS_LEN: u32 =
    (std::mem::offset_of!(Params, discard) + size_of::<ParamDiscard>()) as u32;
const _: () = assert!(PARAMS_LEN == 60);
const _: () = assert!(size_of::<IoDesc>() == 24);
const _: () = assert!(size_of::<IoCmd>() == 16);

/// The bytes of a plain-old-data value, for a command's inline payload.
pub(crate) fn bytes_of<T: Copy, const N: usize>(v: &T) -> [u8; N] {
    assert!(size_of::<T>() <= N);
    let mut out = [0u8; N];
    // SAFETY: T is one of the repr(C) integer-only structs above (no padding is read as
    // meaningful: the kernel ignores pad fields), and out has room for size_of::<T>() bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (v as *const T).cast::<u8>(),
            out.as_mut_ptr(),
            size_of::<T>(),
        )
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_encoded_as_the_kernel_defines_them() {
        // From the kernel header: _IOWR('u', 0x04, struct ublksrv_ctrl_cmd) and
        // _IOWR('u', 0x20, struct ublksrv_io_cmd).
        assert_eq!(CMD_ADD_DEV, 0xc020_7504);
        assert_eq!(CMD_DEL_DEV, 0xc020_7505);
        assert_eq!(IO_FETCH_REQ, 0xc010_7520);
        assert_eq!(IO_COMMIT_AND_FETCH_REQ, 0xc010_7521);
    }

    #[test]
    fn each_queue_has_its_own_descriptor_slot() {
        assert_eq!(descriptors_offset(0), 0);
        if page_size() == 4096 {
            assert_eq!(descriptors_offset(1), 98_304);
        }
    }
}

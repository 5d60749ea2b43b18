//! Options of the engine, free of any command-line parser so every front end (the CLI, `pmkit
//! serve`, FUSE) fills the same struct and gets the same behaviour.

use crate::error::{BlkError, Result};
use pmkit_media::emulate::EmulationSpec;
use pmkit_media::Protect;
use pmkit_media::WriteScheme;
use serde::Serialize;

/// Largest request the engine takes in one call (front ends split bigger ones).
pub const MAX_REQUEST_LIMIT: usize = 64 << 20;
/// Limits on the pt-batch staging buffers.
pub const MAX_BUFFERS: usize = 64;
pub const MAX_BUFFER_BYTES: usize = 1 << 30;

/// Settings of the pt-batch staging buffers (the original driver's bufsize/bufnum/batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BatchOptions {
    /// Number of buffers, each with its own syncer thread (1 = Optimization 1, more = 2).
    pub buffers: usize,
    /// Bytes of DRAM per buffer.
    pub buffer_bytes: usize,
    /// Most blocks one syncer pass writes before letting writers in again.
    pub batch_blocks: usize,
    /// Consecutive blocks that go to the same buffer (so contiguous runs stay together).
    pub stride_blocks: u64,
    /// A syncer starts draining at this percentage of its buffer dirty ...
    pub high_pct: u8,
    /// ... and stops at this one. After `idle_ms` without writes it drains down to it too.
    pub low_pct: u8,
    pub idle_ms: u64,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            buffers: 1,
            buffer_bytes: 16 << 20,
            batch_blocks: 1024,
            stride_blocks: 256,
            high_pct: 70,
            low_pct: 10,
            idle_ms: 2,
        }
    }
}

impl BatchOptions {
    pub fn validate(&self, block_size: u32) -> Result<()> {
        let bad = |s: String| Err(BlkError::BadOption(s));
        if self.buffers == 0 || self.buffers > MAX_BUFFERS {
            return bad(format!(
                "--buffers must be 1..={MAX_BUFFERS}, got {}",
                self.buffers
            ));
        }
        if self.buffer_bytes < block_size as usize * 4 || self.buffer_bytes > MAX_BUFFER_BYTES {
            return bad(format!(
                "--buffer-size must hold at least 4 blocks and at most {MAX_BUFFER_BYTES} bytes, got {}",
                self.buffer_bytes
            ));
        }
        if self.batch_blocks == 0 {
            return bad("--batch must be at least 1 block".into());
        }
        if self.stride_blocks == 0 {
            return bad("--buffer-stride must be at least 1 block".into());
        }
        if self.low_pct >= self.high_pct || self.high_pct > 100 {
            return bad(format!(
                "watermarks must satisfy low < high <= 100, got low {} high {}",
                self.low_pct, self.high_pct
            ));
        }
        Ok(())
    }
}

/// Everything that decides how an opened device behaves (nothing here is stored on media
/// except, for information, the protection and write scheme last used).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineOptions {
    /// `None`: `pkey` where the CPU has memory protection keys, else `kernel` (regions with a
    /// writable file) or `pt` (anonymous memory, device-dax), with a note saying so.
    pub protect: Option<Protect>,
    /// What to use when `pkey` was asked for explicitly and is missing; `None` refuses.
    pub pkey_fallback: Option<Protect>,
    pub write: WriteScheme,
    pub batch: BatchOptions,
    /// Write only the 64-byte lines of a block that changed.
    pub subpage: bool,
    /// Read every write back and compare.
    pub write_verify: bool,
    pub emulate: EmulationSpec,
    /// Largest request accepted, in bytes.
    pub max_request: usize,
    /// Fault every page in when mapping a region from a path.
    pub populate: bool,
    /// Open read-only: the path is opened `O_RDONLY` and mapped `PROT_READ` (a read-only file
    /// system or read permission suffices), the superblock is not marked in use, writes, trims
    /// and zeroing fail with [`BlkError::ReadOnly`] (`EROFS`), flush does nothing, and
    /// protection is `none` whatever `protect` says (the mapping faults on stores by itself;
    /// the other modes need write rights to toggle). Creating a device read-only is refused.
    pub read_only: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            protect: None,
            pkey_fallback: None,
            write: WriteScheme::Nt,
            batch: BatchOptions::default(),
            subpage: false,
            write_verify: false,
            emulate: EmulationSpec::default(),
            max_request: 32 << 20,
            populate: false,
            read_only: false,
        }
    }
}

/// What is fixed when a device is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CreateOptions {
    /// 512 or 4096.
    pub block_size: u32,
    /// Keep a CRC32C per block in PM and verify it on every read.
    pub checksum: bool,
    /// Zero the data area (needed unless the media is known to read as zeroes, e.g. a freshly
    /// `fallocate`d file).
    pub zero_data: bool,
    /// Atomic block writes (BTT-class): every block write is all-or-nothing across a crash,
    /// through a map of logical to physical blocks and a pool of spare blocks.
    pub atomic: bool,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            block_size: 4096,
            checksum: false,
            zero_data: true,
            atomic: false,
        }
    }
}

impl CreateOptions {
    pub fn validate(&self) -> Result<()> {
        if self.block_size != 512 && self.block_size != 4096 {
            return Err(BlkError::BadOption(format!(
                "block size must be 512 or 4096, got {}",
                self.block_size
            )));
        }
        Ok(())
    }
}

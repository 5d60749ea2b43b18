//! Command-line arguments shared by `pmkit` and `pmkit-bench`: the engine flags every command that
//! opens a device flattens in ([`EngineArgs`]), the flags of a device created on the spot
//! ([`CreateFlags`]), and the value parsers and printers they use.

use pmkit_blk::{BatchOptions, CreateOptions, EngineOptions, Protect, WriteScheme};
use pmkit_media::emulate::EmulationSpec;
use pmkit_nbd::IoModel;

/// The help of every `--protect`: one set of modes and one automatic policy for all systems.
pub const PROTECT_HELP: &str = "Protection of PM from stray stores: auto, none, pt, pt-batch, \
     private, pkey, kernel. auto: pkey where the CPU has memory protection keys, else kernel \
     (PM mapped read-only, every store a pwrite through the kernel) where PM is a writable file, \
     else pt (mprotect around each write)";

/// `--protect`: a mode, or `auto` (the media layer's policy, `pmkit_media::guard::auto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtectArg(pub Option<Protect>);

impl std::str::FromStr for ProtectArg {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<ProtectArg, String> {
        Protect::parse_choice(s).map(ProtectArg)
    }
}

impl std::fmt::Display for ProtectArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.map_or("auto", Protect::name))
    }
}

/// Engine options as command-line flags (`#[command(flatten)]` this into any command that
/// opens a device, then call [`EngineArgs::to_options`]).
#[derive(clap::Args, Clone, Debug)]
pub struct EngineArgs {
    #[arg(long, value_name = "MODE", default_value = "auto", help = PROTECT_HELP)]
    pub protect: ProtectArg,
    /// With an explicit `--protect pkey`: what to use where pkeys are missing (default: refuse)
    #[arg(long, value_name = "MODE")]
    pub pkey_fallback: Option<Protect>,
    /// Ordered persistence: nt, clwb, clflushopt, clflush, wb, msync
    #[arg(long = "write", value_name = "SCHEME", default_value = "nt")]
    pub write: WriteScheme,
    /// pt-batch: number of staging buffers, each with a syncer thread
    #[arg(long, value_name = "N", default_value_t = BatchOptions::default().buffers)]
    pub buffers: usize,
    /// pt-batch: bytes per buffer (K, M, G suffixes)
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = parse_size)]
    pub buffer_size: u64,
    /// pt-batch: most blocks a syncer writes per batch
    #[arg(long, value_name = "BLOCKS", default_value_t = BatchOptions::default().batch_blocks)]
    pub batch: usize,
    /// pt-batch: consecutive blocks that map to the same buffer
    #[arg(long, value_name = "BLOCKS", default_value_t = BatchOptions::default().stride_blocks)]
    pub buffer_stride: u64,
    /// pt-batch: percent dirty at which a syncer starts draining
    #[arg(long, value_name = "PCT", default_value_t = BatchOptions::default().high_pct)]
    pub high_watermark: u8,
    /// pt-batch: percent dirty a syncer drains down to
    #[arg(long, value_name = "PCT", default_value_t = BatchOptions::default().low_pct)]
    pub low_watermark: u8,
    /// Write only the 64-byte lines of a block that changed
    #[arg(long)]
    pub subpage: bool,
    /// Read every write back and compare
    #[arg(long)]
    pub write_verify: bool,
    /// PM speed emulation: rdsx=N,wrsx=N,rdlat=NS,wrlat=NS,rdbw=MBS,wrbw=MBS,barrier=NS (any
    /// subset; barrier: every persistence fence takes at least NS more)
    #[arg(long, value_name = "SPEC")]
    pub emulate: Option<EmulationSpec>,
    /// Largest request accepted (K, M suffixes)
    #[arg(long, value_name = "SIZE", default_value = "32M", value_parser = parse_size)]
    pub max_request: u64,
    /// Fault every page of the region in at open
    #[arg(long)]
    pub populate: bool,
}

impl EngineArgs {
    pub fn to_options(&self) -> EngineOptions {
        let d = BatchOptions::default();
        EngineOptions {
            protect: self.protect.0,
            pkey_fallback: self.pkey_fallback,
            write: self.write,
            batch: BatchOptions {
                buffers: self.buffers,
                buffer_bytes: usize::try_from(self.buffer_size).unwrap_or(usize::MAX),
                batch_blocks: self.batch,
                stride_blocks: self.buffer_stride,
                high_pct: self.high_watermark,
                low_pct: self.low_watermark,
                idle_ms: d.idle_ms,
            },
            subpage: self.subpage,
            write_verify: self.write_verify,
            emulate: self.emulate.unwrap_or_default(),
            max_request: usize::try_from(self.max_request).unwrap_or(usize::MAX),
            populate: self.populate,
            read_only: false,
        }
    }
}

/// The flags of a device made on the spot (`pmkit create`, and `pmkit serve` when PATH is
/// missing): `#[command(flatten)]` this in, then call [`CreateFlags::to_options`].
#[derive(clap::Args, Clone, Debug)]
pub struct CreateFlags {
    /// Size of a device created here (K, M, G, T suffixes)
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Logical block size of a device created here: 512 or 4096
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub block_size: u32,
    /// Keep a CRC32C per block in PM and verify it on every read
    #[arg(long)]
    pub checksum: bool,
    /// Atomic block writes (BTT-class): every block write is all-or-nothing across a power
    /// failure (a block map plus spare blocks; multi-block requests are atomic per block)
    #[arg(long)]
    pub atomic: bool,
}

impl CreateFlags {
    /// The layout options of a new device; its data area is zeroed.
    pub fn to_options(&self) -> CreateOptions {
        CreateOptions {
            block_size: self.block_size,
            checksum: self.checksum,
            zero_data: true,
            atomic: self.atomic,
        }
    }
}

/// Bytes from `4096`, `64K`, `16M`, `1G`, `2T`: binary multiples, any case, with an optional
/// space before the unit and an optional `B` or `iB` after it (`2KiB`, `64 mb`, `4096B`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4096, 64K, 16M, 1G)"))?;
    let unit = unit.trim().to_ascii_uppercase();
    let unit = unit
        .strip_suffix("IB")
        .or_else(|| unit.strip_suffix('B'))
        .unwrap_or(&unit);
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        u => return Err(format!("{s:?}: unknown unit {u:?} (use K, M, G or T)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// `n` bytes for people: `1.0 GiB`, `256.0 MiB`, `4096 bytes`.
pub fn human_size(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n => format!("{n} bytes"),
    }
}

/// `inline` or `threaded:N`: how `pmkit serve` executes requests.
pub fn parse_io_model(s: &str) -> Result<IoModel, String> {
    if s == "inline" {
        return Ok(IoModel::Inline);
    }
    s.strip_prefix("threaded:")
        .and_then(|n| n.parse().ok())
        .map(|workers| IoModel::Threaded { workers })
        .ok_or_else(|| format!("{s:?}: expected `inline` or `threaded:N`"))
}

/// `NAME=N`: a structure's X-Mem priority.
pub fn parse_priority(s: &str) -> Result<(String, i32), String> {
    let (n, p) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAME=PRIORITY"))?;
    let p = p
        .parse()
        .map_err(|_| format!("{p:?} is not a whole number"))?;
    Ok((n.to_owned(), p))
}

/// `CHASE,RANDOM,STREAMING`: stalls per access by pattern.
pub fn parse_latencies(s: &str) -> Result<[f64; 3], String> {
    let v: Vec<f64> = s
        .split(',')
        .map(|x| x.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{s:?}: expected three numbers, chase,random,streaming"))?;
    match v[..] {
        [a, b, c] => Ok([a, b, c]),
        _ => Err(format!(
            "{s:?}: expected three numbers, chase,random,streaming"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2KiB"), Ok(2048));
        assert_eq!(parse_size("64 mb"), Ok(64 << 20));
        assert_eq!(parse_size("1gib"), Ok(1 << 30));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("1X").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn io_models_parse() {
        assert_eq!(parse_io_model("inline"), Ok(IoModel::Inline));
        assert_eq!(
            parse_io_model("threaded:2"),
            Ok(IoModel::Threaded { workers: 2 })
        );
        assert!(parse_io_model("threaded").is_err());
    }

    #[test]
    fn engine_args_map_onto_options() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            e: EngineArgs,
        }
        let t = T::try_parse_from([
            "t",
            "--protect",
            "pt-batch",
            "--write",
            "clwb",
            "--buffers",
            "4",
            "--buffer-size",
            "1M",
            "--subpage",
            "--emulate",
            "wrsx=3",
        ])
        .unwrap();
        let o = t.e.to_options();
        assert_eq!(o.protect, Some(Protect::PtBatch));
        assert_eq!(o.write, WriteScheme::Clwb);
        assert_eq!((o.batch.buffers, o.batch.buffer_bytes), (4, 1 << 20));
        assert!(o.subpage && !o.write_verify);
        assert_eq!(o.emulate.wrsx, 3);
        let d = T::try_parse_from(["t"]).unwrap().e.to_options();
        assert_eq!(
            d,
            EngineOptions::default(),
            "flag defaults are the engine's defaults"
        );
        assert!(T::try_parse_from(["t", "--protect", "bogus"]).is_err());
    }
}

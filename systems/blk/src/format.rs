//! Formatting: lay a fresh device out on media (superblocks, checksum table or atomic map,
//! optionally zeroed data), in an order that never leaves a valid-looking half-made device.

use crate::data_path::ZEROES;
use crate::error::Result;
use crate::map::entry;
use crate::superblock::{self, Layout, Superblock, PAGE};
use pmkit_media::{Media, Persister, WriteScheme};

/// Lay out a fresh device: invalidate any old superblock, zero the data (if asked) and the
/// checksum table, then write both superblock slots.
pub(crate) fn format<M: Media>(
    m: &M,
    layout: Layout,
    zero_data: bool,
    scheme: WriteScheme,
) -> Result<()> {
    let p = Persister::new(scheme, m.len(), m.domain());
    // Old superblocks first, so a crash mid-format never leaves a valid-looking device.
    p.zero(m, 0, PAGE as usize);
    p.barrier(m)?;
    if layout.atomic() {
        format_map(m, &p, layout, zero_data);
    } else if zero_data {
        p.zero(m, layout.data_off as usize, layout.capacity() as usize);
    }
    if layout.checksum() && !layout.atomic() {
        let crc = crc32c::crc32c(&ZEROES[..layout.block_size as usize]).to_le_bytes();
        let mut page = [0u8; PAGE as usize];
        for c in page.chunks_mut(4) {
            c.copy_from_slice(&crc);
        }
        let table = (layout.data_off - layout.csum_off) as usize;
        let mut done = 0;
        while done < table {
            let n = (table - done).min(page.len());
            p.write(m, layout.csum_off as usize + done, &page[..n]);
            done += n;
        }
    }
    p.fence(m);
    p.barrier(m)?;
    let mut sb = Superblock::new(layout);
    superblock::write_slot(m, 1, &sb);
    sb.seq += 1;
    superblock::write_slot(m, 0, &sb);
    Ok(())
}

/// Atomic layout: logical block `i` starts on physical block `i` (zeroed if asked, with the
/// zero block's CRC when checksums are on); blocks `nblocks..` are the spares.
fn format_map<M: Media>(m: &M, p: &Persister, layout: Layout, zero_data: bool) {
    if zero_data {
        p.zero(m, layout.data_off as usize, layout.capacity() as usize);
    }
    let crc = if layout.checksum() {
        crc32c::crc32c(&ZEROES[..layout.block_size as usize])
    } else {
        0
    };
    let mut page = [0u8; PAGE as usize];
    let per_page = PAGE / superblock::MAP_ENTRY;
    let mut b = 0u64;
    while b < layout.nblocks {
        let n = (layout.nblocks - b).min(per_page);
        for k in 0..n {
            let e = entry(b + k, crc);
            page[k as usize * 8..k as usize * 8 + 8].copy_from_slice(&e.to_le_bytes());
        }
        p.write(m, layout.map_entry_off(b), &page[..n as usize * 8]);
        b += n;
    }
}

//! Reading a fuzz input as a stream of small numbers; past the end everything reads as zero.

pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn u8(&mut self) -> u8 {
        let Some((&b, rest)) = self.data.split_first() else {
            return 0;
        };
        self.data = rest;
        b
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// `N` bytes, zero-padded at the end of the input.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let b = self.bytes(N);
        a[..b.len()].copy_from_slice(b);
        a
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// A u64 that is often near an interesting value: small, a power of two (minus one), a
    /// multiple of 4096, or anything.
    pub fn interesting_u64(&mut self) -> u64 {
        let kind = self.u8();
        let x = self.u64();
        match kind % 8 {
            0 => x % 64,
            1 => 1u64 << (x % 64),
            2 => (1u64 << (x % 64)).wrapping_sub(1),
            3 => u64::MAX - x % 64,
            4 => (x % 4096) * 4096,
            5 => (x % 4096) * 4096 + (x >> 32) % 8,
            _ => x,
        }
    }

    /// The rest of the input.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

/// Apply byte edits read from `input` to `image` until the input runs out: XOR a byte, store
/// an interesting 8-byte word, or copy input bytes in. `hot` is the length of the metadata at
/// the start of the image, where most edits land.
pub fn mutate(image: &mut [u8], hot: usize, input: &mut Input<'_>) {
    if image.is_empty() {
        return;
    }
    while !input.is_empty() {
        let op = input.u8();
        let at = if op & 0x80 == 0 {
            input.u16() as usize % hot.clamp(1, image.len())
        } else {
            (input.u32() as usize) % image.len()
        };
        match op & 3 {
            0 => image[at] ^= input.u8().max(1),
            1 => {
                let w = input.interesting_u64().to_le_bytes();
                let at = at & !7;
                let n = w.len().min(image.len() - at);
                image[at..at + n].copy_from_slice(&w[..n]);
            }
            2 => {
                let n = (input.u8() % 32) as usize;
                let src = input.bytes(n);
                let n = src.len().min(image.len() - at);
                image[at..at + n].copy_from_slice(&src[..n]);
            }
            _ => image[at] = 0,
        }
    }
}

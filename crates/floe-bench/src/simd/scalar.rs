//! What every lookup kernel sees of a table (`Probe`, `read`, the `KernelFn` signature) and the
//! scalar lookup, the oracle every vector kernel (`x86.rs`) is tested against. The bottom of
//! the kernels: `x86.rs` builds on it, `kernels.rs` chooses between the two.

use std::marker::PhantomData;

use super::{
    layout::{bucket_of, fold},
    table::{Queries, Table},
};

/// What a kernel needs of a table: its base pointer (valid for the buckets plus
/// `TAIL_PADDING`) and geometry as plain numbers.
pub struct Probe<'a> {
    pub base: *const u8,
    pub buckets: u64,
    pub bucket_bytes: usize,
    pub ways: usize,
    pub slots: usize,
    pub key_bytes: usize,
    pub payload_bytes: usize,
    pub payload_mask: u64,
    table: PhantomData<&'a Table>,
}

impl<'a> Probe<'a> {
    pub fn new(table: &'a Table) -> Probe<'a> {
        let g = table.geometry;
        Probe {
            base: table.bytes().as_ptr(),
            buckets: g.buckets as u64,
            bucket_bytes: g.bucket_bytes(),
            ways: g.layout.ways,
            slots: g.layout.slots,
            key_bytes: g.sizes.key_bytes(),
            payload_bytes: g.sizes.payload_bytes(),
            payload_mask: g.sizes.payload_mask(),
            table: PhantomData,
        }
    }

    /// The first byte of the bucket way `way` picks for a key folded to `folded`.
    #[inline(always)]
    pub fn bucket(&self, way: usize, folded: u32) -> *const u8 {
        // `bucket_of` is below `buckets`, so the result is inside the table.
        self.base
            .wrapping_add(bucket_of(way, folded, self.buckets) * self.bucket_bytes)
    }

    /// The payload of `slot` in the bucket at `bucket`.
    ///
    /// # Safety
    /// `bucket` is a bucket of this probe's table and `slot < slots`.
    #[inline(always)]
    pub unsafe fn payload(&self, bucket: *const u8, slot: usize) -> u64 {
        let at = bucket.wrapping_add(self.slots * self.key_bytes + slot * self.payload_bytes);
        // SAFETY: the payload lies inside the bucket (caller's contract).
        unsafe { read(at, self.payload_bytes) }
    }

    /// One query, widths known only at run time (the vector kernels' tails).
    ///
    /// # Safety
    /// The probe's table is alive.
    pub unsafe fn lookup(&self, key: u64) -> Option<u64> {
        let folded = fold(key);
        for way in 0..self.ways {
            let bucket = self.bucket(way, folded);
            for slot in 0..self.slots {
                // SAFETY: slot keys lie inside the bucket, which lies inside the table.
                if unsafe { read(bucket.add(slot * self.key_bytes), self.key_bytes) } == key {
                    // SAFETY: as above.
                    return Some(unsafe { self.payload(bucket, slot) });
                }
            }
        }
        None
    }
}

/// Read a little-endian word of `bytes` (2, 4 or 8) at `at`.
///
/// # Safety
/// `at..at + bytes` is readable.
#[inline(always)]
pub unsafe fn read(at: *const u8, bytes: usize) -> u64 {
    // SAFETY: caller's contract; unaligned reads of plain integers.
    unsafe {
        match bytes {
            2 => at.cast::<u16>().read_unaligned() as u64,
            4 => at.cast::<u32>().read_unaligned() as u64,
            _ => at.cast::<u64>().read_unaligned(),
        }
    }
}

/// A fixed-width integer slot.
pub trait Word {
    const BYTES: usize;
    /// # Safety
    /// `at..at + BYTES` is readable.
    unsafe fn load(at: *const u8) -> u64;
}

macro_rules! word {
    ($t:ty) => {
        impl Word for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            unsafe fn load(at: *const u8) -> u64 {
                // SAFETY: caller's contract.
                unsafe { at.cast::<$t>().read_unaligned() as u64 }
            }
        }
    };
}
word!(u16);
word!(u32);
word!(u64);

/// The scalar lookup, monomorphized on the key and payload widths: per query, per way, compare
/// slot after slot, stop at the first match (Algorithm 1 with one bucket per "vector",
/// Algorithm 2 with one key per iteration).
///
/// # Safety
/// The probe's table is alive and `out` is as long as the queries.
unsafe fn scalar<K: Word, V: Word>(p: &Probe<'_>, q: &Queries, out: &mut [u64]) -> u64 {
    let mut hits = 0;
    for (o, &key) in out.iter_mut().zip(&q.wide) {
        let folded = fold(key);
        let mut found = 0;
        'ways: for way in 0..p.ways {
            let bucket = p.bucket(way, folded);
            for slot in 0..p.slots {
                // SAFETY: slot keys and payloads lie inside the bucket.
                if unsafe { K::load(bucket.add(slot * K::BYTES)) } == key {
                    // SAFETY: as above.
                    found = unsafe { V::load(bucket.add(p.slots * K::BYTES + slot * V::BYTES)) };
                    hits += 1;
                    break 'ways;
                }
            }
        }
        *o = found;
    }
    hits
}

/// A kernel entry point.
pub type KernelFn = unsafe fn(&Probe<'_>, &Queries, &mut [u64]) -> u64;

pub fn scalar_for<K: Word>(payload_bits: u32) -> KernelFn {
    match payload_bits {
        16 => scalar::<K, u16>,
        32 => scalar::<K, u32>,
        _ => scalar::<K, u64>,
    }
}

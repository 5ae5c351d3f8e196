//! The lab's vocabulary: cuckoo layouts `(N, m)`, key and payload sizes, vector widths, and the
//! byte geometry every kernel and the generator agree on.
//!
//! A table is an array of buckets. A bucket holds `m` slots, stored as its `m` keys followed by
//! its `m` payloads (`[k0 k1 .. k(m-1) | p0 p1 .. p(m-1)]`), so one vector load of a bucket
//! brings every key of it into lanes of the key's width, and a 1-slot bucket (the N-way cuckoo
//! table) is a plain `[key | payload]` pair that a gather reads with one index. A key of 0 marks
//! an empty slot; generated keys are never 0.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use crate::keys::mix;

/// Largest table the lab builds: gather offsets are 32-bit signed byte offsets.
pub const MAX_TABLE_BYTES: u64 = 1 << 30;
/// Smallest table: a few buckets of every layout.
pub const MIN_TABLE_BYTES: u64 = 4 << 10;
/// Bytes after the last bucket that kernels may read (a bucket is loaded as a whole vector or
/// a 32/64-bit word, which can run past a narrower bucket; the extra lanes are masked off).
pub const TAIL_PADDING: usize = 128;

/// `(N, m)`: N hash functions (ways), m slots per bucket. `m = 1` is the N-way cuckoo table,
/// `m > 1` the bucketized cuckoo hash table (BCHT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    pub ways: usize,
    pub slots: usize,
}

impl Layout {
    /// The paper's layouts: N = 2..4 with m = 1, and N = 2..4 with m = 2, 4, 8.
    pub fn is_supported(self) -> bool {
        (2..=4).contains(&self.ways) && [1, 2, 4, 8].contains(&self.slots)
    }

    pub fn is_bucketized(self) -> bool {
        self.slots > 1
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", self.ways, self.slots)
    }
}

impl FromStr for Layout {
    type Err = String;

    /// `2x4`, `2,4` or `(2,4)`.
    fn from_str(text: &str) -> Result<Self, String> {
        let t = text.trim().trim_start_matches('(').trim_end_matches(')');
        let (n, m) = t
            .split_once(['x', ','])
            .ok_or_else(|| format!("'{text}': a layout is NxM, e.g. 3x1 or 2x4"))?;
        let parse = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("'{text}': a layout is NxM, e.g. 3x1 or 2x4"))
        };
        let layout = Layout {
            ways: parse(n)?,
            slots: parse(m)?,
        };
        if !layout.is_supported() {
            return Err(format!(
                "'{text}': layouts have N = 2..4 hash functions and m = 1, 2, 4 or 8 slots per bucket"
            ));
        }
        Ok(layout)
    }
}

/// Key and payload sizes in bits (16, 32 or 64 each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Sizes {
    pub key_bits: u32,
    pub payload_bits: u32,
}

impl Sizes {
    pub fn key_bytes(self) -> usize {
        self.key_bits as usize / 8
    }

    pub fn payload_bytes(self) -> usize {
        self.payload_bits as usize / 8
    }

    /// All ones in the low `payload_bits`.
    pub fn payload_mask(self) -> u64 {
        u64::MAX >> (64 - self.payload_bits)
    }

    /// The lane a vertical kernel gives one key: gathers move 32 or 64 bits per lane (x86 has
    /// no 16-bit gather), so 16-bit keys travel in 32-bit lanes.
    pub fn vertical_lane_bits(self) -> u32 {
        self.key_bits.max(32)
    }
}

impl fmt::Display for Sizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", self.key_bits, self.payload_bits)
    }
}

impl FromStr for Sizes {
    type Err = String;

    /// `32,32` or `(16,32)`: key bits, payload bits.
    fn from_str(text: &str) -> Result<Self, String> {
        let usage = || format!("'{text}': give key and payload bits, e.g. 32,32 or 16,32");
        let t = text.trim().trim_start_matches('(').trim_end_matches(')');
        let (k, v) = t.split_once([',', '/']).ok_or_else(usage)?;
        let key_bits: u32 = k.trim().parse().map_err(|_| usage())?;
        let payload_bits: u32 = v.trim().parse().map_err(|_| usage())?;
        for bits in [key_bits, payload_bits] {
            if ![16, 32, 64].contains(&bits) {
                return Err(format!(
                    "'{text}': key and payload sizes are 16, 32 or 64 bits"
                ));
            }
        }
        Ok(Sizes {
            key_bits,
            payload_bits,
        })
    }
}

/// A SIMD register width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Width {
    /// SSE (SSE4.1 for 64-bit lane compares).
    W128,
    /// AVX2.
    W256,
    /// AVX-512 (F and BW: 16-bit lane compares need BW).
    W512,
}

impl Width {
    pub const ALL: [Width; 3] = [Width::W128, Width::W256, Width::W512];

    pub fn bits(self) -> u32 {
        match self {
            Width::W128 => 128,
            Width::W256 => 256,
            Width::W512 => 512,
        }
    }

    pub fn isa(self) -> &'static str {
        match self {
            Width::W128 => "SSE",
            Width::W256 => "AVX2",
            Width::W512 => "AVX-512",
        }
    }

    /// Whether this CPU runs the lab's kernels of this width (detected at run time).
    pub fn is_supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Width::W128 => std::is_x86_feature_detected!("sse4.1"),
                Width::W256 => std::is_x86_feature_detected!("avx2"),
                Width::W512 => {
                    std::is_x86_feature_detected!("avx512f")
                        && std::is_x86_feature_detected!("avx512bw")
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// The widths this CPU supports, narrowest first.
    pub fn detected() -> Vec<Width> {
        Width::ALL
            .into_iter()
            .filter(|w| w.is_supported())
            .collect()
    }
}

impl fmt::Display for Width {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bits())
    }
}

impl FromStr for Width {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "128" | "sse" => Ok(Width::W128),
            "256" | "avx2" => Ok(Width::W256),
            "512" | "avx512" => Ok(Width::W512),
            _ => Err(format!("'{text}': vector widths are 128, 256 or 512")),
        }
    }
}

/// Where keys and payloads sit in a table's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub layout: Layout,
    pub sizes: Sizes,
    pub buckets: usize,
}

impl Geometry {
    /// As many buckets as fit in `table_bytes`.
    pub fn new(layout: Layout, sizes: Sizes, table_bytes: u64) -> Result<Geometry, String> {
        if !(MIN_TABLE_BYTES..=MAX_TABLE_BYTES).contains(&table_bytes) {
            return Err(format!(
                "table size {table_bytes} bytes: use 4K to 1G (gathers address the table with 32-bit offsets)"
            ));
        }
        let bucket_bytes = layout.slots * (sizes.key_bytes() + sizes.payload_bytes());
        let buckets = table_bytes as usize / bucket_bytes;
        Ok(Geometry {
            layout,
            sizes,
            buckets,
        })
    }

    pub fn bucket_bytes(&self) -> usize {
        self.layout.slots * (self.sizes.key_bytes() + self.sizes.payload_bytes())
    }

    pub fn slots(&self) -> usize {
        self.buckets * self.layout.slots
    }

    /// Bytes the buckets occupy (the table size the results report).
    pub fn table_bytes(&self) -> usize {
        self.buckets * self.bucket_bytes()
    }

    pub fn key_offset(&self, bucket: usize, slot: usize) -> usize {
        bucket * self.bucket_bytes() + slot * self.sizes.key_bytes()
    }

    pub fn payload_offset(&self, bucket: usize, slot: usize) -> usize {
        bucket * self.bucket_bytes()
            + self.layout.slots * self.sizes.key_bytes()
            + slot * self.sizes.payload_bytes()
    }

    /// The bucket hash function `way` picks for `key`.
    #[inline(always)]
    pub fn bucket(&self, way: usize, key: u64) -> usize {
        bucket_of(way, fold(key), self.buckets as u64)
    }
}

/// Odd multipliers of the N hash functions (multiply-shift, one per way).
pub const HASH_MULTIPLIERS: [u32; 4] = [0x9e37_79b1, 0x85eb_ca77, 0xc2b2_ae3d, 0x27d4_eb2f];

/// A key folded to the 32 bits the hash functions multiply (identity for keys of 32 bits and
/// less). Vector kernels compute the same fold lane by lane.
#[inline(always)]
pub fn fold(key: u64) -> u32 {
    (key ^ (key >> 32)) as u32
}

/// Hash function `way`: multiply-shift to 32 bits, then fastrange onto the buckets
/// (`hi32(h * buckets)`), so any bucket count works. Exactly what the vector kernels compute.
#[inline(always)]
pub fn bucket_of(way: usize, folded: u32, buckets: u64) -> usize {
    let h = folded.wrapping_mul(HASH_MULTIPLIERS[way]);
    ((h as u64 * buckets) >> 32) as usize
}

/// Generated key number `i`: distinct for distinct `i` at 32 and 64 bits (bijections), never
/// 0. 16-bit keys are fingerprints (a bijection of `i` modulo 65535), so a table of more than
/// 65535 items holds repeated fingerprints, as a table of 16-bit key hashes does.
pub fn key_of(sizes: Sizes, i: u64) -> u64 {
    match sizes.key_bits {
        64 => match mix(i) {
            0 => mix(u64::MAX),
            k => k,
        },
        32 => match permute32(i as u32) {
            0 => permute32(u32::MAX) as u64,
            k => k as u64,
        },
        _ => {
            // Cycle-walking a permutation of u16 keeps it a bijection on 1..=65535.
            let mut x = permute16(1 + (i % 65535) as u16);
            while x == 0 {
                x = permute16(x);
            }
            x as u64
        }
    }
}

/// A bijection on u16.
fn permute16(mut x: u16) -> u16 {
    x ^= x >> 7;
    x = x.wrapping_mul(0x2c1b);
    x ^= x >> 9;
    x = x.wrapping_mul(0x297b);
    x ^ (x >> 8)
}

/// The payload stored with key number `i`: never 0 (0 is what a miss returns).
pub fn payload_of(sizes: Sizes, i: u64) -> u64 {
    (mix(i ^ 0x5bd1_e995) & sizes.payload_mask()) | 1
}

/// A bijection on u32 (xorshift-multiply rounds).
fn permute32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_and_sizes_parse_and_refuse() {
        assert_eq!(
            "2x4".parse::<Layout>().unwrap(),
            Layout { ways: 2, slots: 4 }
        );
        assert_eq!(
            "(3,1)".parse::<Layout>().unwrap(),
            Layout { ways: 3, slots: 1 }
        );
        assert!("5x1".parse::<Layout>().unwrap_err().contains("N = 2..4"));
        assert!("2x3".parse::<Layout>().is_err());
        assert!("2".parse::<Layout>().unwrap_err().contains("NxM"));
        assert_eq!(
            "16,32".parse::<Sizes>().unwrap(),
            Sizes {
                key_bits: 16,
                payload_bits: 32
            }
        );
        assert!("8,32"
            .parse::<Sizes>()
            .unwrap_err()
            .contains("16, 32 or 64"));
        assert!("512".parse::<Width>().is_ok() && "64".parse::<Width>().is_err());
    }

    #[test]
    fn geometry_places_keys_before_payloads() {
        let sizes: Sizes = "16,32".parse().unwrap();
        let g = Geometry::new("2x8".parse().unwrap(), sizes, 1 << 20).unwrap();
        assert_eq!(g.bucket_bytes(), 48);
        assert_eq!(g.buckets, (1 << 20) / 48);
        assert_eq!(g.key_offset(2, 3), 96 + 6);
        assert_eq!(g.payload_offset(2, 3), 96 + 16 + 12);
        assert!(Geometry::new(g.layout, sizes, 2 << 30).is_err());
    }

    #[test]
    fn keys_are_distinct_nonzero_and_hash_in_range() {
        for bits in [32, 64] {
            let sizes = Sizes {
                key_bits: bits,
                payload_bits: 32,
            };
            let keys: std::collections::HashSet<u64> =
                (0..100_000).map(|i| key_of(sizes, i)).collect();
            assert_eq!(keys.len(), 100_000);
            assert!(!keys.contains(&0));
            assert!(keys.iter().all(|&k| bits == 64 || k < 1 << 32));
        }
        let sixteen = Sizes {
            key_bits: 16,
            payload_bits: 16,
        };
        let fingerprints: std::collections::HashSet<u64> =
            (0..65535).map(|i| key_of(sixteen, i)).collect();
        assert_eq!(fingerprints.len(), 65535);
        assert!((0..200_000).all(|i| (1..=65535).contains(&key_of(sixteen, i))));
        assert!((0..1000).all(|i| payload_of(sixteen, i) & !0xffff == 0));
        for buckets in [1u64, 7, 1000, 1 << 27] {
            for way in 0..4 {
                for key in [1u64, 65535, u32::MAX as u64, u64::MAX] {
                    assert!((bucket_of(way, fold(key), buckets) as u64) < buckets);
                }
            }
        }
    }
}

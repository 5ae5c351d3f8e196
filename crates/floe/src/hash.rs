//! Hash functions for 8-byte keys, and the reduction from a hash to a bin.
//!
//! The map hashes a key's 8-byte word with any [`BuildHasher`]: the hasher sees one
//! `write_u64` call. Three fast ones are provided:
//!
//! | hasher | cost per key | notes |
//! |---|---|---|
//! | [`Mix64`] (default) | one 64×64→128 multiply, two xors | seeded per map; good avalanche into the high bits that the bin reduction uses |
//! | [`WyHash`] | two multiplies | wyhash's 8-byte path (its `mum` folding with its secrets); the function DLHT §3.4.3 settles on |
//! | [`Crc32`] | two `crc32` instructions (SSE 4.2) | hardware CRC-32C with two seeds; a portable bit-by-bit fallback elsewhere |
//!
//! `std`'s `RandomState` (SipHash-1-3) also works, at several times the cost.
//!
//! # Untrusted keys
//!
//! None of the three hashers above resists collision attacks. [`Mix64`] and [`WyHash`] draw
//! a random seed per map, so a party that only sends keys cannot compute a collision offline
//! from the published constants; but they are not keyed pseudo-random functions: nothing bounds
//! what an attacker who can time the map's answers, or read its iteration order, learns about
//! the seed, and [`Crc32`] is linear. What floe does when keys do collide: keys crowding one
//! bin make the table grow while a larger table would separate them, and keys whose hashes
//! agree so closely that no table would are refused with
//! [`Error::HashCollisions`](crate::Error::HashCollisions) (the map does not grow for them);
//! `Map` keeps keys with one 64-bit hash in a list searched in order. Crafted keys can
//! therefore cost a map growth and slower searches, which is why untrusted keys want a keyed
//! hash.
//!
//! Where keys come from the network or any other untrusted source (a server's request
//! headers, a cache keyed by user input), give the map std's SipHash, as std's `HashMap` does
//! by default:
//!
//! ```
//! use std::collections::hash_map::RandomState;
//! let map = floe::Map::<String, u32>::builder().hasher(RandomState::new()).build()?;
//! map.pin().insert("from a client".to_string(), 1);
//! # Ok::<(), floe::Error>(())
//! ```
//!
//! (A persistent map needs a hasher it can be reopened with, [`PersistentHasher`]: `Mix64`,
//! `WyHash` or `Crc32`, whose seed is kept in the map's files.)
//!
//! # From hash to bin: fastrange
//!
//! `bin = (hash × bins) >> 64` (Lemire's multiply-shift reduction) maps a 64-bit hash onto
//! `0..bins` for any bin count, without a division and without rounding the table up to a
//! power of two. It uses the *high* bits of the hash, which is why the hashers above fold the
//! high half of their products back in.

use core::hash::{BuildHasher, Hasher};

/// A facade's hash function on key words, as the engine sees it: used only to place keys in
/// a new table (a growth, a shrink, a recovery), so it is a reference to a closure and the
/// engine is compiled once whatever the key and hasher types.
pub(crate) type Rehash<'a> = &'a dyn Fn(u64) -> u64;

/// splitmix64's finalizer: every output bit depends on every input bit. The engine's unit
/// tests hash key words with it, choosing neither the facade's hasher nor a bin.
#[cfg(all(test, not(floe_loom)))]
pub(crate) fn splitmix(key: u64) -> u64 {
    let mut x = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The default hasher.
pub type DefaultHashBuilder = Mix64;

/// Map `hash` onto `0..n` (Lemire's fastrange). Uniform when the hash's high bits are.
///
/// ```
/// assert_eq!(floe::hash::fastrange(0, 10), 0);
/// assert_eq!(floe::hash::fastrange(u64::MAX, 10), 9);
/// assert_eq!(floe::hash::fastrange(1 << 63, 10), 5);
/// ```
#[inline(always)]
pub fn fastrange(hash: u64, n: usize) -> usize {
    ((u128::from(hash) * n as u128) >> 64) as usize
}

/// 4096 words spread over the whole 64-bit range (multiples of an odd constant), where the
/// dense layout looks for its empty keys (`raw::dense::EmptyKeys`, `raw::dense::stash`): even the
/// identity hash sends them to every line.
pub(crate) fn spread_words() -> impl Iterator<Item = u64> + Clone {
    (1..=4096u64).map(|i| i.wrapping_mul(P1))
}

/// The hashes [`fastrange`] maps onto `bin` of `0..n` (`bin < n`): a contiguous run, since
/// fastrange is monotonic. Walks that must handle every hash once across tables of different
/// sizes go by these runs (`RawMap::walk_hashes`).
pub(crate) fn fastrange_hashes(bin: usize, n: usize) -> core::ops::RangeInclusive<u64> {
    debug_assert!(bin < n);
    // The least h with h * n >= bin * 2^64, and one less than the least for bin + 1 (2^64
    // for the last bin, so the end is u64::MAX).
    let first = ((bin as u128) << 64).div_ceil(n as u128);
    let end = (((bin + 1) as u128) << 64).div_ceil(n as u128);
    first as u64..=(end - 1) as u64
}

/// Multiply two words into 128 bits and fold the halves together.
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ (product >> 64) as u64
}

/// Feed bytes to `write_u64` 8 at a time, the tail zero-padded and the length mixed in, so
/// these hashers work for any `Hash` type (the map itself only ever calls `write_u64`).
#[inline]
fn write_bytes(hasher: &mut impl Hasher, bytes: &[u8]) {
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        hasher.write_u64(u64::from_le_bytes(chunk.try_into().expect("8-byte chunk")));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut tail = [0u8; 8];
        tail[..rest.len()].copy_from_slice(rest);
        hasher.write_u64(u64::from_le_bytes(tail) ^ (rest.len() as u64) << 59);
    }
}

/// A random seed from std's per-process randomness.
pub(crate) fn random_seed() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(0x666c_6f65u64)
}

// Odd constants with no structure (digits of pi and the golden ratio), the same role as wyhash's secrets.
const P0: u64 = 0x243f_6a88_85a3_08d3;
const P1: u64 = 0x9e37_79b9_7f4a_7c15;

/// A hasher a persistent map can be reopened with: it is fully described by a name and a
/// 64-bit seed, both kept in the map's superblock (`Builder::build_persistent`,
/// `FlatMap::open`). A map reopened with another hasher or seed would look for its keys in
/// the wrong bins, so an open with another hasher type is refused and the seed comes from
/// the files.
pub trait PersistentHasher: BuildHasher + Sized {
    /// A name that identifies the hash function (not the seed); stored in the superblock.
    const NAME: &'static str;
    /// The seed this instance hashes with.
    fn seed(&self) -> u64;
    /// The instance with this seed.
    fn from_seed(seed: u64) -> Self;
}

macro_rules! persistent_hasher {
    ($hasher:ident, $name:literal) => {
        impl PersistentHasher for $hasher {
            const NAME: &'static str = $name;
            fn seed(&self) -> u64 {
                self.seed
            }
            fn from_seed(seed: u64) -> Self {
                Self::with_seed(seed)
            }
        }
    };
}

persistent_hasher!(Mix64, "floe::hash::Mix64");
persistent_hasher!(WyHash, "floe::hash::WyHash");
persistent_hasher!(Crc32, "floe::hash::Crc32");

/// The default hasher: one folded multiply per key, seeded.
///
/// `hash(x) = fold(x ^ seed ^ P0, P1)` where `fold(a, b)` is the xor of the two halves of the
/// 128-bit product: every input bit reaches the high output bits that `fastrange` uses.
/// `Mix64::new()` draws a random seed (so bin collisions cannot be planned from outside without
/// seeing the map's behaviour); `Mix64::with_seed` is deterministic.
#[derive(Clone, Copy, Debug)]
pub struct Mix64 {
    seed: u64,
}

impl Mix64 {
    /// A randomly seeded instance.
    pub fn new() -> Self {
        Self {
            seed: random_seed(),
        }
    }

    /// A deterministic instance.
    ///
    /// ```
    /// use std::hash::BuildHasher;
    /// let a = floe::hash::Mix64::with_seed(7);
    /// assert_eq!(a.hash_one(5u64), floe::hash::Mix64::with_seed(7).hash_one(5u64));
    /// ```
    pub const fn with_seed(seed: u64) -> Self {
        Self { seed }
    }
}

impl Default for Mix64 {
    fn default() -> Self {
        Self::new()
    }
}

impl BuildHasher for Mix64 {
    type Hasher = Mix64Hasher;

    #[inline(always)]
    fn build_hasher(&self) -> Mix64Hasher {
        Mix64Hasher { state: self.seed }
    }
}

/// The [`Hasher`] of [`Mix64`].
#[derive(Clone, Copy, Debug)]
pub struct Mix64Hasher {
    state: u64,
}

impl Hasher for Mix64Hasher {
    #[inline(always)]
    fn write_u64(&mut self, word: u64) {
        self.state = fold_mul(word ^ self.state ^ P0, P1);
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        write_bytes(self, bytes);
    }

    #[inline(always)]
    fn finish(&self) -> u64 {
        self.state
    }
}

/// wyhash's 8-byte path: `mum(a ^ s1, b ^ seed)` then a final `mum` with the secrets, where
/// `a` and `b` are the two 32-bit halves of the key arranged as wyhash arranges an 8-byte
/// input. Two multiplies; slightly stronger mixing than [`Mix64`].
#[derive(Clone, Copy, Debug)]
pub struct WyHash {
    seed: u64,
}

impl WyHash {
    /// A randomly seeded instance.
    pub fn new() -> Self {
        Self::with_seed(random_seed())
    }

    /// A deterministic instance.
    pub const fn with_seed(seed: u64) -> Self {
        // wyhash pre-mixes the seed once per hasher.
        Self {
            seed: seed ^ fold_mul_const(seed ^ P0, P1),
        }
    }
}

/// `fold_mul` usable in const context.
const fn fold_mul_const(a: u64, b: u64) -> u64 {
    let product = (a as u128) * (b as u128);
    (product as u64) ^ (product >> 64) as u64
}

impl Default for WyHash {
    fn default() -> Self {
        Self::new()
    }
}

impl BuildHasher for WyHash {
    type Hasher = WyHasher;

    #[inline(always)]
    fn build_hasher(&self) -> WyHasher {
        WyHasher { state: self.seed }
    }
}

/// The [`Hasher`] of [`WyHash`].
#[derive(Clone, Copy, Debug)]
pub struct WyHasher {
    state: u64,
}

impl Hasher for WyHasher {
    #[inline(always)]
    fn write_u64(&mut self, word: u64) {
        let a = word.rotate_left(32) ^ P1;
        let b = word ^ self.state;
        let product = u128::from(a) * u128::from(b);
        let (lo, hi) = (product as u64, (product >> 64) as u64);
        self.state = fold_mul(lo ^ P0 ^ 8, hi ^ P1);
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        write_bytes(self, bytes);
    }

    #[inline(always)]
    fn finish(&self) -> u64 {
        self.state
    }
}

/// Hardware CRC-32C (SSE 4.2 `crc32`), two seeds for 64 bits.
///
/// The high 32 bits (what `fastrange` uses for tables under 2^32 bins) are one CRC, the low
/// 32 bits another with a different seed. CRC is linear, so it is not a good choice against
/// adversarial keys, but it spreads sequential and structured integer keys well and costs
/// about three cycles. The instruction is detected once per process; machines without it use a
/// bit-by-bit software CRC with the same results.
#[derive(Clone, Copy, Debug)]
pub struct Crc32 {
    seed: u64,
}

impl Crc32 {
    /// A randomly seeded instance.
    pub fn new() -> Self {
        Self {
            seed: random_seed(),
        }
    }

    /// A deterministic instance.
    pub const fn with_seed(seed: u64) -> Self {
        Self { seed }
    }
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

impl BuildHasher for Crc32 {
    type Hasher = Crc32Hasher;

    #[inline(always)]
    fn build_hasher(&self) -> Crc32Hasher {
        Crc32Hasher { state: self.seed }
    }
}

/// The [`Hasher`] of [`Crc32`].
#[derive(Clone, Copy, Debug)]
pub struct Crc32Hasher {
    state: u64,
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of one word, bit by bit: the oracle
/// for the hardware path and the fallback where SSE 4.2 is missing.
fn crc32c_u64_soft(crc: u32, word: u64) -> u32 {
    let mut crc = u64::from(crc) ^ word;
    for _ in 0..64 {
        crc = if crc & 1 == 1 {
            (crc >> 1) ^ 0x82F6_3B78
        } else {
            crc >> 1
        };
    }
    crc as u32
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "sse4.2")]
#[inline]
unsafe fn crc32c_pair_hw(seed: u64, word: u64) -> u64 {
    use core::arch::x86_64::_mm_crc32_u64;
    let high = _mm_crc32_u64(seed & 0xFFFF_FFFF, word);
    let low = _mm_crc32_u64(seed >> 32, word);
    high << 32 | low
}

#[inline(always)]
fn crc32c_pair(seed: u64, word: u64) -> u64 {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU supports SSE 4.2 (checked just above; the check is cached).
        return unsafe { crc32c_pair_hw(seed, word) };
    }
    let high = crc32c_u64_soft(seed as u32, word);
    let low = crc32c_u64_soft((seed >> 32) as u32, word);
    u64::from(high) << 32 | u64::from(low)
}

impl Hasher for Crc32Hasher {
    #[inline(always)]
    fn write_u64(&mut self, word: u64) {
        self.state = crc32c_pair(self.state, word);
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        write_bytes(self, bytes);
    }

    #[inline(always)]
    fn finish(&self) -> u64 {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chi-squared-style check: hashing `n` keys into `bins` bins through fastrange gives
    /// bin loads close to uniform (max load within a few standard deviations of the mean).
    fn spreads_evenly(build: &impl BuildHasher, keys: impl Iterator<Item = u64>) {
        // At least ~30 keys a bin on average for the tail bound to be meaningful.
        const BINS: usize = if cfg!(miri) { 16 } else { 1024 };
        let mut load = [0u32; BINS];
        let mut n = 0;
        for key in keys {
            load[fastrange(build.hash_one(key), BINS)] += 1;
            n += 1;
        }
        let mean = n as f64 / BINS as f64;
        let max = *load.iter().max().unwrap() as f64;
        let min = *load.iter().min().unwrap() as f64;
        let sd = mean.sqrt();
        assert!(
            max < mean + 6.0 * sd && min > mean - 6.0 * sd,
            "mean {mean} min {min} max {max}"
        );
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "arithmetic only (the software CRC's), and 21 s of ci/miri.sh's time"
    )]
    fn hashers_spread_sequential_and_strided_keys() {
        let n = 200_000;
        for &seed in &[0, 1, u64::MAX] {
            spreads_evenly(&Mix64::with_seed(seed), 0..n);
            spreads_evenly(&Mix64::with_seed(seed), (0..n).map(|k| k << 32));
            spreads_evenly(&WyHash::with_seed(seed), 0..n);
            spreads_evenly(&WyHash::with_seed(seed), (0..n).map(|k| k << 20));
            spreads_evenly(&Crc32::with_seed(seed), 0..n);
            spreads_evenly(&Crc32::with_seed(seed), (0..n).map(|k| k * 4096));
        }
    }

    #[test]
    fn crc_hardware_matches_software() {
        // Known value: CRC-32C of eight zero bytes with an all-ones initial value (no final
        // xor) is a fixed constant of the polynomial.
        for (seed, word) in [
            (0u64, 0u64),
            (u64::MAX, 1),
            (0x1234_5678_9abc_def0, u64::MAX),
        ] {
            let soft = u64::from(crc32c_u64_soft(seed as u32, word)) << 32
                | u64::from(crc32c_u64_soft((seed >> 32) as u32, word));
            assert_eq!(crc32c_pair(seed, word), soft);
        }
    }

    #[test]
    fn byte_input_is_accepted() {
        // Not the map's path, but the hashers must be usable as general Hashers.
        let h = Mix64::with_seed(3);
        assert_ne!(h.hash_one("floe"), h.hash_one("floe!"));
        assert_ne!(h.hash_one([1u8; 9]), h.hash_one([1u8; 8]));
    }

    #[test]
    fn fastrange_covers_the_range() {
        assert_eq!(fastrange(u64::MAX, 3), 2);
        assert_eq!(fastrange(u64::MAX / 3 + 1, 3), 1);
        assert_eq!(fastrange(12345, 1), 0);
    }

    #[test]
    fn fastrange_hashes_are_exactly_the_hashes_of_a_bin() {
        for n in [1usize, 2, 3, 5, 7, 64, 1000, 1 << 40, usize::MAX / 2] {
            for bin in [0, 1, n / 3, n / 2, n.saturating_sub(2), n - 1] {
                if bin >= n {
                    continue;
                }
                let hashes = fastrange_hashes(bin, n);
                let (first, last) = (*hashes.start(), *hashes.end());
                assert_eq!(fastrange(first, n), bin, "n {n} bin {bin}");
                assert_eq!(fastrange(last, n), bin, "n {n} bin {bin}");
                if first > 0 {
                    assert_eq!(fastrange(first - 1, n), bin - 1, "n {n} bin {bin}");
                }
                if last < u64::MAX {
                    assert_eq!(fastrange(last + 1, n), bin + 1, "n {n} bin {bin}");
                } else {
                    assert_eq!(bin, n - 1);
                }
                if bin == 0 {
                    assert_eq!(first, 0);
                }
            }
        }
    }
}

//! The hashers the bench can give every map, behind one `BuildHasher`.

use std::hash::BuildHasher;

use floe::hash::{Crc32, Mix64, WyHash};

/// The hashers the bench can use, behind one type (the branch is perfectly predictable).
#[derive(Clone, Copy, Debug)]
pub enum AnyHash {
    /// Mix64 with this seed (kept as the seed, so that the C++ peers can compute it too).
    Mix64(u64),
    WyHash(WyHash),
    Crc32(Crc32),
    /// ahash with fixed seeds ([`AHASH`]): conc-map-bench's hasher, for runs compared with its
    /// figures.
    Ahash(&'static ahash::RandomState),
}

/// The ahash the bench uses: fixed seeds, so runs repeat.
pub static AHASH: ahash::RandomState = ahash::RandomState::with_seeds(1, 2, 3, 4);

/// The bench's default hasher. Only leapfrog's `LeapMap` asks for `Default` (a trait bound
/// on its constructor); it is always given the run's hasher explicitly.
impl Default for AnyHash {
    fn default() -> Self {
        AnyHash::Mix64(1)
    }
}

/// A persistent map stores its hasher's seed; the bench's persistent maps use Mix64 (the
/// default), whose seed reopens it. Another hasher reports seed 0 (and would reopen as Mix64:
/// the bench never reopens its maps).
impl floe::hash::PersistentHasher for AnyHash {
    const NAME: &'static str = "floe-bench::AnyHash";
    fn seed(&self) -> u64 {
        match self {
            AnyHash::Mix64(seed) => *seed,
            _ => 0,
        }
    }
    fn from_seed(seed: u64) -> Self {
        AnyHash::Mix64(seed)
    }
}

/// The hasher of [`AnyHash`].
pub enum AnyHasher {
    Mix64(<Mix64 as BuildHasher>::Hasher),
    WyHash(<WyHash as BuildHasher>::Hasher),
    Crc32(<Crc32 as BuildHasher>::Hasher),
    Ahash(ahash::AHasher),
}

impl BuildHasher for AnyHash {
    type Hasher = AnyHasher;

    /// One match on the hasher, not one per call of the `Hasher` built (three for a word):
    /// what a map that hashes with `hash_one` (floe) pays for the bench's choice of hashers.
    #[inline(always)]
    fn hash_one<T: std::hash::Hash>(&self, x: T) -> u64 {
        match self {
            AnyHash::Mix64(seed) => Mix64::with_seed(*seed).hash_one(x),
            AnyHash::WyHash(h) => h.hash_one(x),
            AnyHash::Crc32(h) => h.hash_one(x),
            AnyHash::Ahash(h) => h.hash_one(x),
        }
    }

    #[inline(always)]
    fn build_hasher(&self) -> AnyHasher {
        match self {
            AnyHash::Mix64(seed) => AnyHasher::Mix64(Mix64::with_seed(*seed).build_hasher()),
            AnyHash::WyHash(h) => AnyHasher::WyHash(h.build_hasher()),
            AnyHash::Crc32(h) => AnyHasher::Crc32(h.build_hasher()),
            AnyHash::Ahash(h) => AnyHasher::Ahash(h.build_hasher()),
        }
    }
}

impl std::hash::Hasher for AnyHasher {
    #[inline(always)]
    fn write_u64(&mut self, word: u64) {
        match self {
            AnyHasher::Mix64(h) => h.write_u64(word),
            AnyHasher::WyHash(h) => h.write_u64(word),
            AnyHasher::Crc32(h) => h.write_u64(word),
            AnyHasher::Ahash(h) => h.write_u64(word),
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        match self {
            AnyHasher::Mix64(h) => h.write(bytes),
            AnyHasher::WyHash(h) => h.write(bytes),
            AnyHasher::Crc32(h) => h.write(bytes),
            AnyHasher::Ahash(h) => h.write(bytes),
        }
    }

    #[inline(always)]
    fn finish(&self) -> u64 {
        match self {
            AnyHasher::Mix64(h) => h.finish(),
            AnyHasher::WyHash(h) => h.finish(),
            AnyHasher::Crc32(h) => h.finish(),
            AnyHasher::Ahash(h) => h.finish(),
        }
    }
}

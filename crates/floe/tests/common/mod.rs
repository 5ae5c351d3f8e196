//! Shared helpers: run one test body over every configuration the machine supports.
#![allow(dead_code)]

use floe::{hash::Mix64, Backend, FlatMap, Layout, ResizeMode};

/// Every backend this CPU supports, scalar first (the oracle).
pub fn backends() -> Vec<Backend> {
    [Backend::Scalar, Backend::Avx2, Backend::Avx512]
        .into_iter()
        .filter(|b| b.is_supported())
        .collect()
}

/// A fixed-size map (it never grows: `max_bins` = `bins`) with an exact geometry and a fixed
/// seed (so every backend sees the same layout), for the `Full` paths.
pub fn tiny_map(
    backend: Backend,
    bins: usize,
    link_buckets: usize,
    seed: u64,
) -> FlatMap<u64, u64, Mix64> {
    FlatMap::<u64, u64>::builder()
        .bins(bins)
        .link_buckets(link_buckets)
        .max_bins(bins)
        .hasher(Mix64::with_seed(seed))
        .backend(backend)
        .build()
        .expect("tiny map")
}

/// A map that starts at `bins` bins (and a pool of `link_buckets`) and grows on demand.
pub fn growing_map(
    backend: Backend,
    bins: usize,
    link_buckets: usize,
    mode: ResizeMode,
    seed: u64,
) -> FlatMap<u64, u64, Mix64> {
    FlatMap::<u64, u64>::builder()
        .bins(bins)
        .link_buckets(link_buckets)
        .resize_mode(mode)
        .hasher(Mix64::with_seed(seed))
        .backend(backend)
        .build()
        .expect("growing map")
}

/// Both table layouts: the test matrix's other axis.
pub fn layouts() -> [Layout; 2] {
    [Layout::Bins, Layout::Dense]
}

/// Every (layout, backend) pair this CPU runs: the test matrix.
pub fn matrix() -> Vec<(Layout, Backend)> {
    layouts()
        .into_iter()
        .flat_map(|layout| backends().into_iter().map(move |backend| (layout, backend)))
        .collect()
}

/// A builder of `layout` whose first table is the smallest the layout makes (2 bins, 4
/// lines), so that a test's keys make it grow many times.
pub fn smallest(layout: Layout) -> floe::Builder<u64, u64> {
    let builder = FlatMap::<u64, u64>::builder().layout(layout);
    match layout {
        Layout::Bins => builder.bins(2),
        Layout::Dense => builder.capacity(1),
    }
}

/// A fixed-size map of the dense layout whose table holds `keys` at its trigger (at least 4
/// lines, 16 slots), with a fixed seed, for the `Full` paths.
pub fn tiny_dense_map(backend: Backend, keys: usize, seed: u64) -> FlatMap<u64, u64, Mix64> {
    FlatMap::<u64, u64>::builder()
        .layout(Layout::Dense)
        .capacity(keys)
        // At most the first table's lines: fixed.
        .max_bins(1)
        .hasher(Mix64::with_seed(seed))
        .backend(backend)
        .build()
        .expect("tiny dense map")
}

/// A map of the dense layout that starts at 4 lines and grows on demand.
pub fn growing_dense_map(
    backend: Backend,
    mode: ResizeMode,
    seed: u64,
) -> FlatMap<u64, u64, Mix64> {
    FlatMap::<u64, u64>::builder()
        .layout(Layout::Dense)
        .capacity(1)
        .resize_mode(mode)
        .hasher(Mix64::with_seed(seed))
        .backend(backend)
        .build()
        .expect("growing dense map")
}

/// Run `body` once per supported backend with a map of `bins` bins and `link_buckets` links.
pub fn with_maps(
    bins: usize,
    link_buckets: usize,
    mut body: impl FnMut(&FlatMap<u64, u64, Mix64>),
) {
    for backend in backends() {
        let map = tiny_map(backend, bins, link_buckets, 0x5eed);
        body(&map);
    }
}

/// A small, fast, deterministic generator (SplitMix64) for tests.
#[derive(Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// A hasher built from a function of the key word, for tests that choose where keys land
/// (crowded bins, colliding hashes).
#[derive(Clone, Copy)]
pub struct WordHash(pub fn(u64) -> u64);

/// The hasher of [`WordHash`].
pub struct WordHasher {
    hash: fn(u64) -> u64,
    value: u64,
}

impl std::hash::Hasher for WordHasher {
    fn write_u64(&mut self, word: u64) {
        self.value = (self.hash)(word);
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("the map hashes words only")
    }
    fn finish(&self) -> u64 {
        self.value
    }
}

impl std::hash::BuildHasher for WordHash {
    type Hasher = WordHasher;
    fn build_hasher(&self) -> WordHasher {
        WordHasher {
            hash: self.0,
            value: 0,
        }
    }
}

/// The map's live tables once replaced tables have been freed: a replaced table is freed when
/// every thread that was inside a map operation (of any map) at its retirement has left it,
/// by the retiring thread or a `floe-reclaim` thread, so right after a growth a test running
/// beside others may still see it. Polls for up to ten seconds.
#[allow(dead_code)]
pub fn live_tables<K: floe::InlineKey, V: floe::Inline, S: std::hash::BuildHasher>(
    map: &floe::FlatMap<K, V, S>,
) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let live = map.stats().live_tables;
        if live == 1 || std::time::Instant::now() > deadline {
            return live;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Four hash words for all keys (the sum of the bytes, mod 4): most keys of a `Map` share a
/// slot through a collision list.
#[derive(Clone, Copy, Default)]
pub struct FourWords;

/// The hasher of [`FourWords`].
#[derive(Default)]
pub struct FourWordsHasher(u64);

impl std::hash::Hasher for FourWordsHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = bytes
            .iter()
            .fold(self.0, |sum, &byte| sum.wrapping_add(u64::from(byte)));
    }
    fn finish(&self) -> u64 {
        self.0 % 4
    }
}

impl std::hash::BuildHasher for FourWords {
    type Hasher = FourWordsHasher;
    fn build_hasher(&self) -> FourWordsHasher {
        FourWordsHasher::default()
    }
}

/// Sets a stop flag when dropped, also when a check panics: helper threads that loop until
/// the flag is set end, instead of the scope waiting for them for ever.
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One request of the caches' differential tests (`tests/cache.rs`, `tests/flat_cache.rs`):
/// keys and values small, so that keys repeat and evictions meet them.
#[derive(Clone, Debug)]
pub enum CacheOp {
    Insert(u8, u16),
    Get(u8),
    Contains(u8),
    Remove(u8),
    GetWith(u8, u16),
    Clear,
}

/// A stream of `CacheOp`s weighted as a cache's traffic is: reads and writes, some removals,
/// a load now and then, a rare clear.
pub fn cache_op() -> impl proptest::strategy::Strategy<Value = CacheOp> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| CacheOp::Insert(k, v)),
        4 => any::<u8>().prop_map(CacheOp::Get),
        1 => any::<u8>().prop_map(CacheOp::Contains),
        2 => any::<u8>().prop_map(CacheOp::Remove),
        2 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| CacheOp::GetWith(k, v)),
        1 => Just(CacheOp::Clear),
    ]
}

/// Threads (twice the cores, at least 4) write, read and remove 24 keys of a cache, one key
/// written by all of them, and each checks that a value of its own it reads is its latest
/// write of that key (a read returns none, or any other thread's value): the caches' test
/// that no read is stale under eviction, replaces and removals.
pub fn threads_on_few_keys(
    insert: impl Fn(u64, u64) + Sync,
    get: impl Fn(u64) -> Option<u64> + Sync,
    remove: impl Fn(u64) + Sync,
) {
    let threads = (2 * std::thread::available_parallelism().map_or(2, |n| n.get())).max(4);
    let rounds = if cfg!(miri) { 200 } else { 100_000 };
    let (insert, get, remove) = (&insert, &get, &remove);
    std::thread::scope(|s| {
        for t in 0..threads as u64 {
            s.spawn(move || {
                let mut last = std::collections::HashMap::new();
                let mut x = t + 1;
                for seq in 1..=rounds {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = if x % 4 == 0 { 0 } else { x % 24 };
                    match (x >> 8) % 8 {
                        0 => {
                            remove(k);
                            last.remove(&k);
                        }
                        1..=4 => {
                            insert(k, t << 32 | seq);
                            last.insert(k, seq);
                        }
                        _ => {
                            if let Some(got) = get(k) {
                                if got >> 32 == t {
                                    assert_eq!(
                                        Some(&(got & 0xffff_ffff)),
                                        last.get(&k),
                                        "thread {t} read an old value of its own for key {k}"
                                    );
                                }
                            }
                        }
                    }
                }
            });
        }
    });
}

/// What the caches' differential test asks of a cache, in the model's terms: keys `u8`,
/// values `u16` (each cache maps them to its own types).
pub trait ModelCache {
    fn insert(&self, k: u8, v: u16) -> Option<u16>;
    fn get(&self, k: u8) -> Option<u16>;
    fn contains(&self, k: u8) -> bool;
    fn remove(&self, k: u8) -> Option<u16>;
    fn get_with(&self, k: u8, v: u16) -> u16;
    fn clear(&self);
    /// Every entry (not counted as reads).
    fn contents(&self) -> std::collections::HashMap<u8, u16>;
    /// Entries held, or their weight: never above the capacity.
    fn size(&self) -> u64;
    /// Evictions the listener heard of, and those the statistics count.
    fn evictions(&self) -> (u64, u64);
}

/// Runs `ops` on `cache` (of `capacity`) against std's `HashMap`: with room for every key
/// (256) every answer must equal std's, and nothing is evicted; else each answer must be
/// std's or none (a value evicted), and the cache never holds more than its capacity. The
/// listener must have heard of every eviction the statistics count.
pub fn check_against_std(
    cache: &impl ModelCache,
    ops: &[CacheOp],
    capacity: u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    use proptest::{prop_assert, prop_assert_eq};
    let exact = capacity >= 256;
    let mut model = std::collections::HashMap::new();
    for op in ops {
        match *op {
            CacheOp::Insert(k, v) => {
                let (old, expected) = (cache.insert(k, v), model.insert(k, v));
                if exact {
                    prop_assert_eq!(old, expected);
                } else {
                    prop_assert!(old.is_none() || old == expected, "{old:?} {expected:?}");
                }
            }
            CacheOp::Get(k) => {
                let (got, expected) = (cache.get(k), model.get(&k).copied());
                if exact {
                    prop_assert_eq!(got, expected);
                } else {
                    prop_assert!(got.is_none() || got == expected, "{got:?} {expected:?}");
                }
            }
            CacheOp::Contains(k) => {
                let got = cache.contains(k);
                if exact {
                    prop_assert_eq!(got, model.contains_key(&k));
                } else {
                    prop_assert!(!got || model.contains_key(&k));
                }
            }
            CacheOp::Remove(k) => {
                let (got, expected) = (cache.remove(k), model.remove(&k));
                prop_assert!(got.is_none() || got == expected, "{got:?} {expected:?}");
                if exact {
                    prop_assert_eq!(got, expected);
                }
            }
            CacheOp::GetWith(k, v) => {
                let got = cache.get_with(k, v);
                let expected = *model.entry(k).or_insert(v);
                if exact {
                    prop_assert_eq!(got, expected);
                } else if got != expected {
                    // Evicted before the read: loaded again.
                    prop_assert_eq!(got, v);
                    model.insert(k, v);
                }
            }
            CacheOp::Clear => {
                cache.clear();
                model.clear();
            }
        }
        prop_assert!(cache.size() <= capacity, "{} > {capacity}", cache.size());
    }
    let (told, counted) = cache.evictions();
    prop_assert_eq!(told, counted);
    if exact {
        prop_assert_eq!(told, 0);
        prop_assert_eq!(cache.contents(), model);
    }
    Ok(())
}

/// std's keyed hasher (SipHash, a random key): the caches' differential tests' default.
pub fn keyed() -> std::collections::hash_map::RandomState {
    std::collections::hash_map::RandomState::new()
}

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

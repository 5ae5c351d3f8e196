// Does a cache on FlatMap pay (issue 43, "a FlatCache on FlatMap if it pays")? A prototype
// S3-FIFO cache of u64 -> u64 on floe::FlatMap (the index holds key and value in its line; a
// hash-indexed array of 2-bit read counts; per-shard FIFO queues of keys), beside
// floe::Cache, quick_cache and scc's HashCache on the same cache-aside zipf 0.99 streams
// (floe-bench cache's throughput shape: 655,360 keys, a cache of 65,536, 2 threads).
// args: ROUNDS REQUESTS [THREADS]. Rounds alternate the caches.
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

type Hasher = ahash::RandomState;
fn hasher() -> Hasher {
    ahash::RandomState::with_seeds(1, 2, 3, 4)
}

trait Contender: Send + Sync {
    fn lookup(&self, key: u64) -> Option<u64>;
    fn store(&self, key: u64, value: u64);
    fn held(&self) -> usize;
}

const SHARDS: usize = 16;

struct Queues {
    small: VecDeque<u64>,
    main: VecDeque<u64>,
}

struct FlatCache {
    map: floe::FlatMap<u64, u64>,
    freq: Box<[AtomicU8]>,
    ghost: Box<[std::sync::atomic::AtomicU64]>,
    mask: usize,
    shards: Vec<Mutex<Queues>>,
    per_shard: usize,
    hash: Hasher,
}

impl FlatCache {
    fn new(capacity: usize) -> Self {
        let slots = (capacity * 2).next_power_of_two();
        FlatCache {
            map: floe::FlatMap::builder().capacity(capacity + capacity / 4).build().unwrap(),
            freq: (0..slots).map(|_| AtomicU8::new(0)).collect(),
            ghost: (0..slots).map(|_| std::sync::atomic::AtomicU64::new(u64::MAX)).collect(),
            mask: slots - 1,
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Queues { small: VecDeque::new(), main: VecDeque::new() }))
                .collect(),
            per_shard: capacity / SHARDS,
            hash: hasher(),
        }
    }
    fn slot(&self, key: u64) -> (usize, u64) {
        let h = self.hash.hash_one(key);
        ((h as usize) & self.mask, h)
    }
    fn evict(&self, q: &mut Queues) {
        loop {
            if q.small.len() >= self.per_shard / 10 || q.main.is_empty() {
                let Some(k) = q.small.pop_front() else { return };
                let (i, _) = self.slot(k);
                if self.freq[i].load(Relaxed) > 0 {
                    self.freq[i].store(0, Relaxed);
                    q.main.push_back(k);
                } else {
                    self.map.remove(&k);
                    self.ghost[i].store(k, Relaxed);
                    return;
                }
            } else {
                let k = q.main.pop_front().unwrap();
                let (i, _) = self.slot(k);
                let f = self.freq[i].load(Relaxed);
                if f > 0 {
                    self.freq[i].store(f - 1, Relaxed);
                    q.main.push_back(k);
                } else {
                    self.map.remove(&k);
                    return;
                }
            }
        }
    }
}

impl Contender for FlatCache {
    fn lookup(&self, key: u64) -> Option<u64> {
        let v = self.map.get(&key)?;
        let (i, _) = self.slot(key);
        let f = self.freq[i].load(Relaxed);
        if f < 3 {
            self.freq[i].store(f + 1, Relaxed);
        }
        Some(v)
    }
    fn store(&self, key: u64, value: u64) {
        let (i, h) = self.slot(key);
        let shard = (h >> 48) as usize % SHARDS;
        let mut q = self.shards[shard].lock().unwrap();
        if self.map.insert(key, value).is_none() {
            if self.ghost[i].load(Relaxed) == key {
                q.main.push_back(key);
            } else {
                q.small.push_back(key);
            }
            self.freq[i].store(0, Relaxed);
            while q.small.len() + q.main.len() > self.per_shard {
                self.evict(&mut q);
            }
        }
    }
    fn held(&self) -> usize {
        self.map.len()
    }
}

impl Contender for floe::Cache<u64, u64, Hasher> {
    fn lookup(&self, key: u64) -> Option<u64> {
        self.get(&key)
    }
    fn store(&self, key: u64, value: u64) {
        self.insert(key, value);
    }
    fn held(&self) -> usize {
        self.len()
    }
}
impl Contender for quick_cache::sync::Cache<u64, u64, quick_cache::UnitWeighter, Hasher> {
    fn lookup(&self, key: u64) -> Option<u64> {
        self.get(&key)
    }
    fn store(&self, key: u64, value: u64) {
        self.insert(key, value);
    }
    fn held(&self) -> usize {
        self.len()
    }
}
impl Contender for scc::HashCache<u64, u64, Hasher> {
    fn lookup(&self, key: u64) -> Option<u64> {
        self.get_sync(&key).map(|e| *e.get())
    }
    fn store(&self, key: u64, value: u64) {
        let _ = self.put_sync(key, value);
    }
    fn held(&self) -> usize {
        self.len()
    }
}

fn zipf_table(n: usize, theta: f64) -> Vec<f64> {
    let mut cdf = Vec::with_capacity(n);
    let mut sum = 0.0;
    for i in 1..=n {
        sum += 1.0 / (i as f64).powf(theta);
        cdf.push(sum);
    }
    for c in &mut cdf {
        *c /= sum;
    }
    cdf
}

fn run(cache: &dyn Contender, streams: &[Vec<u64>]) -> (f64, f64) {
    let start = Barrier::new(streams.len());
    let results: Vec<(f64, u64, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = streams
            .iter()
            .map(|keys| {
                let start = &start;
                s.spawn(move || {
                    let (warm, timed) = keys.split_at(keys.len() / 2);
                    for &k in warm {
                        if cache.lookup(k).is_none() {
                            cache.store(k, k);
                        }
                    }
                    start.wait();
                    let (mut hits, mut reads) = (0u64, 0u64);
                    let t = Instant::now();
                    for &k in timed {
                        reads += 1;
                        match cache.lookup(k) {
                            Some(v) => {
                                hits += 1;
                                assert_eq!(v, k);
                            }
                            None => cache.store(k, k),
                        }
                    }
                    (t.elapsed().as_secs_f64(), hits, reads)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let slowest = results.iter().map(|r| r.0).fold(0.0, f64::max);
    let reads: u64 = results.iter().map(|r| r.2).sum();
    let hits: u64 = results.iter().map(|r| r.1).sum();
    (reads as f64 / slowest / 1e6, hits as f64 / reads as f64)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).map_or(3, |s| s.parse().unwrap());
    let requests: usize = args.get(2).map_or(2_000_000, |s| s.parse().unwrap());
    let threads: usize = args.get(3).map_or(2, |s| s.parse().unwrap());
    let (keys, capacity) = (655_360usize, 65_536usize);
    let cdf = zipf_table(keys, 0.99);
    let all = ["flat-proto", "floe::Cache", "quick_cache", "scc"]; let only: Option<usize> = std::env::var("ONLY").ok().map(|s| s.parse().unwrap()); let names: Vec<&str> = all.iter().enumerate().filter(|(i, _)| only.map_or(true, |o| o == *i)).map(|(_, n)| *n).collect();
    let mut speeds = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        let streams: Vec<Vec<u64>> = (0..threads as u64)
            .map(|t| {
                let mut x = 0x1234_5678_9abc_def0u64 ^ ((t + 7 * round as u64) * 0x9E37_79B9_7F4A_7C15);
                (0..2 * requests)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                        let rank = cdf.partition_point(|&c| c < u) as u64;
                        rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1
                    })
                    .collect()
            })
            .collect();
        for (c, name) in names.iter().enumerate() {
            let c = all.iter().position(|n| n == name).unwrap(); let cache: Box<dyn Contender> = match c {
                0 => Box::new(FlatCache::new(capacity)),
                1 => Box::new(
                    floe::Cache::<u64, u64>::builder()
                        .max_capacity(capacity as u64)
                        .hasher(hasher())
                        .build()
                        .unwrap(),
                ),
                2 => Box::new(quick_cache::sync::Cache::<u64, u64, quick_cache::UnitWeighter, Hasher>::with(
                    capacity,
                    capacity as u64,
                    quick_cache::UnitWeighter,
                    hasher(),
                    quick_cache::sync::DefaultLifecycle::default(),
                )),
                _ => Box::new(scc::HashCache::<u64, u64, Hasher>::with_capacity_and_hasher(0, capacity, hasher())),
            };
            let (mps, hit) = run(&*cache, &streams);
            println!("round {round} {name:12} {mps:7.2} M req/s  hit {:.4}  held {}", hit, cache.held());
            speeds[names.iter().position(|n| n == name).unwrap()].push(mps);
        }
    }
    for (c, name) in names.iter().enumerate() {
        let mut v = speeds[c].clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("median {name:12} {:7.2}", v[v.len() / 2]);
    }
}

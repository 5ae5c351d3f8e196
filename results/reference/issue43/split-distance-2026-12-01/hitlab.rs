// floe::Cache's hit ratio on floe-bench cache's traces (a copy of their generator): every
// trace at 10% and 50%, median of seeds 1..=3. Prints the 8 cells and the gap to the best
// peer figures of BENCHMARKS.md (Intel, 2026-11-30).
use rand::{rngs::SmallRng, Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

type Hasher = ahash::RandomState;

struct Sampler {
    n: u64,
    zipf: Option<Zipf<f64>>,
    rng: SmallRng,
}
impl Sampler {
    fn zipf(n: u64, seed: u64) -> Self {
        Sampler { n, zipf: Some(Zipf::new(n as f64, 0.99).unwrap()), rng: SmallRng::seed_from_u64(seed) }
    }
    fn uniform(n: u64, seed: u64) -> Self {
        Sampler { n, zipf: None, rng: SmallRng::seed_from_u64(seed) }
    }
    fn next_index(&mut self) -> u64 {
        match &self.zipf {
            None => self.rng.random_range(0..self.n),
            Some(z) => (z.sample(&mut self.rng) as u64 - 1).min(self.n - 1),
        }
    }
}

#[derive(Clone, Copy)]
enum Request {
    Aside { key: u64, counted: bool },
    Write { key: u64 },
    Read { key: u64, counted: bool },
}

fn stream(trace: &str, keys: u64, capacity: u64, seed: u64) -> Vec<Request> {
    let total = 4 * keys;
    let mut zipf = Sampler::zipf(keys, seed);
    let mut coin = Sampler::uniform(2, seed ^ 0x5eed);
    let mut fresh = keys;
    let mut out = Vec::new();
    match trace {
        "zipf" | "scan" => {
            for i in 0..total {
                let counted = i >= total / 2;
                out.push(Request::Aside { key: zipf.next_index(), counted });
                if trace == "scan" && (i + 1) % (keys / 2).max(1) == 0 {
                    for _ in 0..capacity {
                        out.push(Request::Aside { key: fresh, counted: false });
                        fresh += 1;
                    }
                }
            }
        }
        "one-hit" => {
            for i in 0..total {
                let counted = i >= total / 2;
                if coin.next_index() == 0 {
                    out.push(Request::Aside { key: zipf.next_index(), counted });
                } else {
                    out.push(Request::Aside { key: fresh, counted: false });
                    fresh += 1;
                }
            }
        }
        "session" => {
            let mut due: Vec<Vec<u64>> = vec![Vec::new(); keys as usize + (keys / 4) as usize + 1];
            let mut distance = Sampler::uniform((keys / 4).max(1), seed ^ 0xd15);
            for key in 0..keys {
                out.push(Request::Write { key });
                due[(key + distance.next_index()) as usize].push(key);
                for &read in &due[key as usize] {
                    out.push(Request::Read { key: read, counted: key >= capacity });
                }
            }
            for reads in &due[keys as usize..] {
                for &read in reads {
                    out.push(Request::Read { key: read, counted: true });
                }
            }
        }
        _ => unreachable!(),
    }
    out
}

fn ratio(trace: &str, keys: u64, capacity: u64, seed: u64) -> f64 {
    let cache: floe::Cache<u128, u64, Hasher> = floe::Cache::builder()
        .max_capacity(capacity)
        .hasher(Hasher::with_seeds(1, 2, 3, 4))
        .build()
        .unwrap();
    let (mut reads, mut hits) = (0u64, 0u64);
    let show = std::env::var("SHOW").map_or(false, |v| v == format!("{trace}{}", capacity * 100 / keys)) && seed == 2;
    let requests = stream(trace, keys, capacity, seed);
    let every = requests.len() / 40;
    let (mut wr, mut wh) = (0u64, 0u64);
    for (n, r) in requests.into_iter().enumerate() {
        if show && n % every == 0 && n > 0 {
            println!("  at {n:7}: share {:6} ppm, window hit {:.1}% of {wr}", cache.small_queue_share(), 100.0 * wh as f64 / wr.max(1) as f64);
            wr = 0; wh = 0;
        }
        if let Request::Aside { key, .. } | Request::Read { key, .. } = r {
            let hit = cache.contains_key(&u128::from(key));
            wr += 1; wh += u64::from(hit);
        }
        match r {
            Request::Aside { key, counted } => {
                let hit = cache.get(&u128::from(key)).is_some();
                if !hit {
                    cache.insert(u128::from(key), key);
                }
                reads += u64::from(counted);
                hits += u64::from(counted && hit);
            }
            Request::Write { key } => {
                cache.insert(u128::from(key), key);
            }
            Request::Read { key, counted } => {
                let hit = cache.get(&u128::from(key)).is_some();
                reads += u64::from(counted);
                hits += u64::from(counted && hit);
            }
        }
    }
    assert!(cache.len() as u64 <= capacity);
    hits as f64 / reads.max(1) as f64
}

fn main() {
    let best = [
        ("zipf", 10, 77.40), ("zipf", 50, 90.45), ("session", 10, 39.02), ("session", 50, 100.0),
        ("scan", 10, 77.22), ("scan", 50, 82.43), ("one-hit", 10, 70.96), ("one-hit", 50, 77.97),
    ];
    let mut sum = 0.0;
    let pcts: Option<Vec<u64>> = std::env::var("PCTS").ok().map(|v| v.split(',').map(|x| x.parse().unwrap()).collect());
    let mut cells: Vec<(&str, u64, f64)> = best.to_vec();
    if let Some(p) = &pcts {
        cells = ["zipf", "session", "scan", "one-hit"].iter().flat_map(|t| p.iter().map(move |&q| (*t, q, 0.0))).collect();
    }
    for (trace, percent, peer) in cells {
        let wanted = 100_000u64 * percent / 100;
        let capacity = 1u64 << wanted.ilog2();
        let keys = capacity * 100 / percent;
        let base: u64 = std::env::var("SEED0").map_or(0, |v| v.parse().unwrap());
        let mut r: Vec<f64> = (base + 1..=base + 3).map(|seed| 100.0 * ratio(trace, keys, capacity, seed)).collect();
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let gap = r[1] - peer;
        sum += gap.min(0.0);
        println!("{trace:8} {percent:2}%  {:6.2}  best peer {peer:6.2}  gap {gap:+.2}", r[1]);
    }
    println!("sum of shortfalls {sum:+.2}");
}

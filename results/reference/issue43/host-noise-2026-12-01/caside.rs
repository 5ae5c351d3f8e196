// floe::Cache cache-aside over zipf 0.99 keys (floe-bench cache's throughput shape):
// args threads requests. Cache of 65,536 over 655,360 keys.
use std::time::Instant;

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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).map_or(1, |s| s.parse().unwrap());
    let requests: usize = args.get(2).map_or(2_000_000, |s| s.parse().unwrap());
    let (keys, capacity) = (655_360usize, 65_536u64);
    let cdf = zipf_table(keys, 0.99);
    let streams: Vec<Vec<u128>> = (0..threads as u64)
        .map(|t| {
            let mut x = 0x1234_5678_9abc_def0u64 ^ (t * 0x9E37_79B9_7F4A_7C15);
            (0..2 * requests)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                    let rank = cdf.partition_point(|&c| c < u);
                    // Scatter ranks over the key space.
                    u128::from((rank as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                })
                .collect()
        })
        .collect();
    let rounds: usize = std::env::var("ROUNDS").ok().map_or(1, |s| s.parse().unwrap());
    for _round in 0..rounds {
    let cache = floe::Cache::<u128, u64>::new(capacity);
    let start = std::sync::Barrier::new(threads);
    let times: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = streams
            .iter()
            .map(|keys| {
                let (cache, start) = (&cache, &start);
                s.spawn(move || {
                    let (warm, timed) = keys.split_at(keys.len() / 2);
                    let aside = |k: u128| {
                        if cache.get(&k).is_none() {
                            cache.insert(k, k as u64);
                        }
                    };
                    warm.iter().for_each(|&k| aside(k));
                    start.wait();
                    let t = Instant::now();
                    timed.iter().for_each(|&k| aside(k));
                    t.elapsed().as_secs_f64()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let slowest = times.iter().cloned().fold(0.0, f64::max);
    let stats = cache.stats();
    println!(
        "{threads} threads: {:.2} M req/s, hit ratio {:.4} per thread {:?}",
        (requests * threads) as f64 / slowest / 1e6,
        stats.hits as f64 / (stats.hits + stats.misses) as f64,
        times.iter().map(|t| format!("{:.3}", t)).collect::<Vec<_>>()
    );
    }
}

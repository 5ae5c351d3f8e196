// Map<u64,u64> batched gets (get_many_keys) beside FlatMap's, in-process: args N rounds.
use std::time::Instant;

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(1 << 23, |s| s.parse().unwrap());
    let rounds: usize = args.get(2).map_or(3, |s| s.parse().unwrap());
    let keys: Vec<u64> = (0..n as u64).map(mix).collect();
    let flat = floe::FlatMap::<u64, u64>::with_capacity(n);
    let map = floe::Map::<u64, u64>::builder().capacity(n).build().unwrap();
    {
        let m = map.pin();
        for &k in &keys {
            flat.insert(k, k);
            m.insert(k, k);
        }
    }
    let probe: Vec<u64> = (0..n as u64).map(|i| keys[(mix(i ^ 0x55) % n as u64) as usize]).collect();
    for _ in 0..rounds {
        let mut vals = vec![None; 2048];
        let t = Instant::now();
        let mut hits = 0;
        for chunk in probe.chunks(2048) {
            flat.batch().get_many(chunk, &mut vals[..chunk.len()]).unwrap();
            hits += vals[..chunk.len()].iter().filter(|v| v.is_some()).count();
        }
        let f = t.elapsed().as_nanos() as f64 / n as f64;
        assert_eq!(hits, n);
        let m = map.pin();
        let mut refs = vec![None; 2048];
        let t = Instant::now();
        let mut hits = 0;
        for chunk in probe.chunks(2048) {
            m.get_many_keys(chunk, &mut refs[..chunk.len()]).unwrap();
            hits += refs[..chunk.len()].iter().filter(|v| v.is_some()).count();
        }
        let a = t.elapsed().as_nanos() as f64 / n as f64;
        assert_eq!(hits, n);
        println!("flat {f:.2} ns, map {a:.2} ns: map/flat throughput {:.2}x", f / a);
    }
}

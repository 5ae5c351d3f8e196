// Two threads of a dependent multiply chain plus random reads of a 16 MiB array: rounds of
// fixed work, per-thread seconds (is the host's second vCPU ever a sibling?).
use std::time::Instant;
fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(8, |s| s.parse().unwrap());
    let table: Vec<u64> = (0..(1u64 << 21)).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
    for _ in 0..rounds {
        let times: Vec<f64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2u64).map(|t| { let table = &table; s.spawn(move || {
                let began = Instant::now();
                let mut x = 0x1234_5678u64 ^ t;
                let mut acc = 0u64;
                for _ in 0..40_000_000u64 {
                    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                    acc = acc.wrapping_add(table[(x as usize) & ((1 << 21) - 1)]);
                    acc = acc.rotate_left(5) ^ x.wrapping_mul(3);
                }
                std::hint::black_box(acc);
                began.elapsed().as_secs_f64()
            })}).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        println!("{:.3} {:.3}", times[0], times[1]);
    }
}

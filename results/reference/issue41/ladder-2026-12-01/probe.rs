// What separates a find from a raw line read through the same 64-deep L2 prefetch window?
// args MODE THREADS [MiB] [WINDOW]. Array of MiB (THP), lines of 4 (key,value) pairs, 3 full.
// MODE: read (one word of the line), find4 (4 scalar key loads + value), vec (one 64-byte
// load, mask, value), vec2 (vec + a second load of word 0, as a seqlock check), vecdep (vec,
// then the value load depends on the mask).
use std::arch::x86_64::*;
use std::time::Instant;

const MUL: u64 = 0x9E37_79B9_7F4A_7C15;
#[inline(always)]
fn line_of(key: u64, lines: u64) -> u64 { ((u128::from(key.wrapping_mul(MUL)) * u128::from(lines)) >> 64) as u64 }

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let mode = a[1].clone();
    let threads: usize = a[2].parse().unwrap();
    let mib: usize = a.get(3).map_or(900, |s| s.parse().unwrap());
    let window: usize = a.get(4).map_or(64, |s| s.parse().unwrap());
    let bytes = mib << 20;
    let base = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) } as *mut u64;
    unsafe { libc::madvise(base.cast(), bytes, libc::MADV_HUGEPAGE) };
    let lines = (bytes / 64) as u64;
    // Keys: for each line, keys whose line_of is that line: fill by scanning candidate keys.
    let words = unsafe { std::slice::from_raw_parts_mut(base, bytes / 8) };
    words.fill(0);
    let mut fill = vec![0u8; lines as usize];
    let mut keys_all = Vec::with_capacity((lines * 3) as usize);
    let mut k = 1u64;
    while (keys_all.len() as u64) < lines * 3 * 9 / 10 {
        let l = line_of(k, lines) as usize;
        if fill[l] < 3 { let s = fill[l] as usize; words[l * 8 + s * 2] = k; words[l * 8 + s * 2 + 1] = k + 1; fill[l] += 1; keys_all.push(k); }
        k += 1;
    }
    // Shuffle-ish: per-thread random picks.
    let per = 20_000_000 / threads;
    let streams: Vec<Vec<u64>> = (0..threads).map(|t| { let mut x = 0x1234_5678u64 + t as u64 * 77; (0..per).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; keys_all[(x % keys_all.len() as u64) as usize] }).collect() }).collect();
    let base_addr = base as usize;
    for round in 0..3 {
        let t0 = Instant::now();
        let sums: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = streams.iter().map(|keys| { let mode = mode.clone(); s.spawn(move || unsafe {
                let base = base_addr as *const u64;
                let n = keys.len();
                let mut sum = 0u64;
                let alu: u32 = std::env::var("ALU").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
                let m = match mode.as_str() { "read" => 0, "find4" => 1, "vec" => 2, "vec2" => 3, "vecdep" => 4, "chase" => 5, _ => panic!() };
                for i in 0..n {
                    let ahead = keys[(i + window) % n];
                    _mm_prefetch(base.add(line_of(ahead, lines) as usize * 8) as *const i8, _MM_HINT_T2);
                    let mut key = keys[i];
                    // Extra independent work per op: a chain of multiplies that ends where it started.
                    if alu > 0 { let mut h = key; for _ in 0..alu { h = h.wrapping_mul(MUL) ^ (h >> 29); } key = if h == 1 { 0 } else { key }; }
                    if m == 5 {
                        let half = keys[(i + window / 2) % n];
                        let hl = base.add(line_of(half, lines) as usize * 8);
                        if std::ptr::read_volatile(hl.add(7)) == 0xdead_beef { _mm_prefetch(base as *const i8, _MM_HINT_T2); }
                    }
                    let line = base.add(line_of(key, lines) as usize * 8);
                    match m {
                        0 => sum = sum.wrapping_add(std::ptr::read_volatile(line)),
                        1 => {
                            let mut hit = 4;
                            for s in (0..4).rev() { if std::ptr::read_volatile(line.add(s * 2)) == key { hit = s; } }
                            if hit < 4 { sum = sum.wrapping_add(std::ptr::read_volatile(line.add(hit * 2 + 1))); } else { sum += 1 << 40; }
                        }
                        2 | 3 | 4 | 5 => {
                            let v = _mm512_load_si512(line as *const __m512i);
                            let mask = _mm512_cmpeq_epi64_mask(v, _mm512_set1_epi64(key as i64)) & 0x55;
                            if mask != 0 {
                                let lane = mask.trailing_zeros() as usize;
                                let val = if m >= 4 { std::ptr::read_volatile(line.add(lane + 1)) } else {
                                    let idx = _mm512_set1_epi64(lane as i64 + 1);
                                    _mm_cvtsi128_si64(_mm512_castsi512_si128(_mm512_permutexvar_epi64(idx, v))) as u64 };
                                sum = sum.wrapping_add(val);
                                if m == 3 && std::ptr::read_volatile(line) == 0xdead { sum += 1; }
                            } else { sum += 1 << 40; }
                        }
                        _ => unreachable!(),
                    }
                }
                sum
            }) }).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let el = t0.elapsed().as_secs_f64();
        let ops = (per * threads) as f64;
        let misses: u64 = sums.iter().map(|s| s >> 40).sum();
        println!("{mode} thr={threads} {mib}MiB w={window} round {round}: {:.1} M/s ({:.2} ns/op/thread) misses {misses}", ops / el / 1e6, el * 1e9 / per as f64);
    }
}

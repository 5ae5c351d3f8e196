// A ladder from a minimal vector find toward floe's batched get, through a 64-deep L2 window:
// args LEVEL THREADS [MiB]. Levels are cumulative:
// 1 minimal (line from a multiply of the key, one 64-byte load, mask, value load)
// 2 + a ring of 128 slots holding (line pointer, key) between enter and run
// 3 + a 128-bit multiply hash of the key before the line
// 4 + header word loaded before the line and again after (seqlock check)
// 5 + a chase half a window ahead: demand load of that request's header word and key match
// 6 + the answer stored as Option<u64> into an output array of 1024, summed per chunk
use std::arch::x86_64::*;
use std::mem::MaybeUninit;
use std::time::Instant;

const MUL: u64 = 0x9E37_79B9_7F4A_7C15;
#[inline(always)]
fn line_of(h: u64, lines: u64) -> u64 { ((u128::from(h) * u128::from(lines)) >> 64) as u64 }
#[inline(always)]
fn mix(k: u64) -> u64 { let p = u128::from(k ^ 0x2545_F491_4F6C_DD1D) * u128::from(MUL); (p as u64) ^ ((p >> 64) as u64) }

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let level: u32 = a[1].parse().unwrap();
    let threads: usize = a[2].parse().unwrap();
    let mib: usize = a.get(3).map_or(900, |s| s.parse().unwrap());
    const W: usize = 64;
    let bytes = mib << 20;
    let base = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) } as *mut u64;
    unsafe { libc::madvise(base.cast(), bytes, libc::MADV_HUGEPAGE) };
    let lines = (bytes / 64) as u64;
    let words = unsafe { std::slice::from_raw_parts_mut(base, bytes / 8) };
    words.fill(0);
    let mut fill = vec![0u8; lines as usize];
    let mut keys_all = Vec::with_capacity((lines * 3) as usize);
    let mut k = 1u64;
    let h = |k: u64| if level >= 3 { mix(k) } else { k.wrapping_mul(MUL) };
    while (keys_all.len() as u64) < lines * 3 * 9 / 10 {
        let l = line_of(h(k), lines) as usize;
        if fill[l] < 3 { let s = fill[l] as usize; words[l * 8 + s * 2] = k; words[l * 8 + s * 2 + 1] = k + 1; fill[l] += 1; keys_all.push(k); }
        k += 1;
    }
    let per = 20_000_000 / threads;
    let streams: Vec<Vec<u64>> = (0..threads).map(|t| { let mut x = 0x1234_5678u64 + t as u64 * 77; (0..per).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; keys_all[(x % keys_all.len() as u64) as usize] }).collect() }).collect();
    let base_addr = base as usize;
    for round in 0..3 {
        let t0 = Instant::now();
        let sums: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = streams.iter().map(|keys| s.spawn(move || unsafe {
                let base = base_addr as *const u64;
                let n = keys.len();
                let mut sum = 0u64;
                let mut ring = [MaybeUninit::<(*const u64, u64)>::uninit(); 128];
                let mut out = vec![None::<u64>; 1024];
                let noring = std::env::var("NORING").is_ok();
                let loc = |key: u64| -> *const u64 { base.add(line_of(if level >= 3 { mix(key) } else { key.wrapping_mul(MUL) }, lines) as usize * 8) };
                for i in 0..n {
                    let ahead_key = keys[(i + W) % n];
                    let ahead = loc(ahead_key);
                    _mm_prefetch(ahead as *const i8, _MM_HINT_T2);
                    let (line, key) = if level >= 2 && !noring {
                        ring[(i + W) & 127].write((ahead, ahead_key));
                        if i < W { let k = keys[i]; (loc(k), k) } else { ring[i & 127].assume_init() }
                    } else { let k = keys[i]; (loc(k), k) };
                    if level >= 5 && i >= W / 2 {
                        let (hl, hk) = if !noring && i + W / 2 >= W { ring[(i + W / 2) & 127].assume_init() } else { let k = keys[i + W / 2]; (loc(k), k) };
                        let hdr = std::ptr::read_volatile(hl.add(7));
                        if hdr != 0 {
                            let v = _mm512_load_si512(hl as *const __m512i);
                            if _mm512_cmpeq_epi64_mask(v, _mm512_set1_epi64(hk as i64)) & 0x55 == 0 { _mm_prefetch(base.add((hdr as usize) & 0xfff) as *const i8, _MM_HINT_T2); }
                        }
                    }
                    let hdr = if level >= 4 { std::ptr::read_volatile(line.add(7)) } else { 0 };
                    let v = _mm512_load_si512(line as *const __m512i);
                    let mask = _mm512_cmpeq_epi64_mask(v, _mm512_set1_epi64(key as i64)) & 0x55;
                    let mut ans = None;
                    if mask != 0 {
                        let lane = mask.trailing_zeros() as usize;
                        ans = Some(std::ptr::read_volatile(line.add(lane + 1)));
                    }
                    if level >= 4 && std::ptr::read_volatile(line.add(7)) != hdr { ans = None; sum += 1 << 50; }
                    if level >= 6 { out[i & 1023] = ans; if i & 1023 == 1023 { sum = sum.wrapping_add(out.iter().map(|v| v.unwrap_or(1 << 40)).sum::<u64>()); } }
                    else { sum = sum.wrapping_add(ans.unwrap_or(1 << 40)); }
                }
                sum
            })).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let el = t0.elapsed().as_secs_f64();
        println!("level {level} thr={threads} {mib}MiB round {round}: {:.1} M/s ({:.2} ns/op/thread) {}", (per * threads) as f64 / el / 1e6, el * 1e9 / per as f64, sums.iter().sum::<u64>() >> 60);
    }
}

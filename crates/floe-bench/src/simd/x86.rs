//! The vector kernels (x86-64): horizontal over buckets at 128/256/512 bits, vertical (and
//! hybrid) with gathers at 256/512 bits. The scalar kernel in `scalar.rs` is their oracle.
//!
//! # Horizontal (Algorithm 1)
//! Per query: broadcast the key to every lane of its width; load `per_vector` of the key's
//! buckets into one register, each into a sub-vector of `width / per_vector` bits (a bucket
//! narrower than its sub-vector drags the start of the next bucket along; those lanes and the
//! payload lanes are masked off); compare; the lowest set bit of the masked result is the first
//! match in probe order, and its payload is read from the bucket (already in L1). Ways are taken
//! `per_vector` at a time, stopping at the first group that matches (so one bucket per vector
//! is the optimistic variant, all N per vector the pessimistic one). When N is not a multiple of
//! `per_vector`, the last group repeats the last bucket, which cannot change the first match.
//!
//! # Vertical (Algorithm 2) and hybrid
//! One key per lane (32-bit lanes for 16- and 32-bit keys, 64-bit lanes for 64-bit keys),
//! `width / lane` keys per iteration. Per way: hash every lane (multiply-shift and fastrange,
//! the scalar formula lane by lane), then per slot of the bucket (one for an N-way table, m for
//! the hybrid) gather the key of the lanes still unmatched, compare, and gather the payload of
//! the lanes that matched into the 64-bit result lanes (payloads always travel in 64-bit
//! lanes, the answer's width). The loop leaves as soon as every lane has matched. Gathers read
//! 32 or 64 bits at a byte offset: a 16-bit key or payload is masked out of the wider word (the
//! table's tail padding covers the over-read).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{
    layout::{fold, Width, HASH_MULTIPLIERS},
    scalar::{KernelFn, Probe},
    table::Queries,
};

/// The horizontal kernel for keys of `key_bits` and sub-vectors of `sub_bits`, if there is one.
pub fn horizontal(width: Width, key_bits: u32, sub_bits: u32) -> Option<KernelFn> {
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! pick {
            ($f:ident, $($sub:literal),*) => {
                match (key_bits, sub_bits) {
                    $( (16, $sub) => Some($f::<16, $sub> as KernelFn),
                       (32, $sub) => Some($f::<32, $sub> as KernelFn),
                       (64, $sub) => Some($f::<64, $sub> as KernelFn), )*
                    _ => None,
                }
            };
        }
        match width {
            Width::W128 => pick!(horizontal_128, 128, 64),
            Width::W256 => pick!(horizontal_256, 256, 128, 64),
            Width::W512 => pick!(horizontal_512, 512, 256, 128),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (width, key_bits, sub_bits);
        None
    }
}

/// The vertical kernel for keys of `key_bits` (also runs the hybrid over buckets).
pub fn vertical(width: Width, key_bits: u32) -> Option<KernelFn> {
    #[cfg(target_arch = "x86_64")]
    {
        match (width, key_bits) {
            (Width::W256, 16) => Some(vertical_256_lanes32::<16> as KernelFn),
            (Width::W256, 32) => Some(vertical_256_lanes32::<32> as KernelFn),
            (Width::W256, 64) => Some(vertical_256_lanes64 as KernelFn),
            (Width::W512, 16) => Some(vertical_512_lanes32::<16> as KernelFn),
            (Width::W512, 32) => Some(vertical_512_lanes32::<32> as KernelFn),
            (Width::W512, 64) => Some(vertical_512_lanes64 as KernelFn),
            _ => None,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (width, key_bits);
        None
    }
}

/// Bit mask of the first `n` of `unit`-sized pieces in each of `parts` sub-vectors of `stride`
/// pieces.
fn lane_mask(parts: usize, stride: usize, n: usize) -> u64 {
    let one = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    (0..parts).fold(0, |m, j| m | one << (j * stride))
}

/// Fill `at` with the buckets of ways `way..way + at.len()` (the last way repeated past N).
#[inline(always)]
fn group(p: &Probe<'_>, folded: u32, way: usize, at: &mut [*const u8]) {
    for (j, slot) in at.iter_mut().enumerate() {
        *slot = p.bucket((way + j).min(p.ways - 1), folded);
    }
}

/// Answer the queries from `start` on one by one (the vector kernels' tails).
///
/// # Safety
/// The probe's table is alive.
unsafe fn tail(p: &Probe<'_>, q: &Queries, out: &mut [u64], start: usize) -> u64 {
    let mut hits = 0;
    for (o, &key) in out[start..].iter_mut().zip(&q.wide[start..]) {
        // SAFETY: caller's contract.
        let found = unsafe { p.lookup(key) };
        hits += found.is_some() as u64;
        *o = found.unwrap_or(0);
    }
    hits
}

// ---------------------------------------------------------------------------------------------
// Horizontal

/// The horizontal lookup loop, shared by the three widths: per query and group of `per`
/// ways, `compare(key, buckets)` loads the buckets and returns the match mask in *units*
/// (bytes for SSE/AVX2 `movemask`, lanes for AVX-512 compare masks), already restricted to
/// key lanes; a sub-vector spans `units_per_sub` units and a slot's key `units_per_key`.
///
/// # Safety
/// The probe's table (with padding) is alive; `compare` only loads from the bucket pointers
/// it is given.
#[inline(always)]
unsafe fn horizontal_loop(
    p: &Probe<'_>,
    q: &Queries,
    out: &mut [u64],
    per: usize,
    units_per_sub: usize,
    units_per_key: usize,
    mut compare: impl FnMut(u64, &[*const u8]) -> u64,
) -> u64 {
    let mut hits = 0;
    let mut at = [p.base; 4];
    for (o, &key) in out.iter_mut().zip(&q.wide) {
        let folded = fold(key);
        let mut found = 0;
        let mut way = 0;
        while way < p.ways {
            group(p, folded, way, &mut at[..per]);
            let mask = compare(key, &at[..per]);
            if mask != 0 {
                let unit = mask.trailing_zeros() as usize;
                let slot = unit % units_per_sub / units_per_key;
                // SAFETY: the match is a key lane of the bucket at `at[unit / units_per_sub]`.
                found = unsafe { p.payload(at[unit / units_per_sub], slot) };
                hits += 1;
                break;
            }
            way += per;
        }
        *o = found;
    }
    hits
}

/// # Safety
/// SSE4.1; the probe's table (with padding) is alive; `out` is as long as the queries.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.1")]
unsafe fn horizontal_128<const K: u32, const SUB: u32>(
    p: &Probe<'_>,
    q: &Queries,
    out: &mut [u64],
) -> u64 {
    let per = (128 / SUB) as usize;
    let sub_bytes = SUB as usize / 8;
    let keys = lane_mask(per, sub_bytes, p.slots * p.key_bytes);
    // SAFETY: caller's contract; each load starts at a bucket and reads `sub_bytes` <=
    // bucket bytes + TAIL_PADDING, inside the allocation.
    unsafe {
        horizontal_loop(p, q, out, per, sub_bytes, K as usize / 8, |key, at| {
            let v = if SUB == 128 {
                _mm_loadu_si128(at[0].cast())
            } else {
                _mm_set_epi64x(
                    at[1].cast::<i64>().read_unaligned(),
                    at[0].cast::<i64>().read_unaligned(),
                )
            };
            let eq = match K {
                16 => _mm_cmpeq_epi16(v, _mm_set1_epi16(key as i16)),
                32 => _mm_cmpeq_epi32(v, _mm_set1_epi32(key as i32)),
                _ => _mm_cmpeq_epi64(v, _mm_set1_epi64x(key as i64)),
            };
            _mm_movemask_epi8(eq) as u64 & keys
        })
    }
}

/// # Safety
/// AVX2; the probe's table (with padding) is alive; `out` is as long as the queries.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn horizontal_256<const K: u32, const SUB: u32>(
    p: &Probe<'_>,
    q: &Queries,
    out: &mut [u64],
) -> u64 {
    let per = (256 / SUB) as usize;
    let sub_bytes = SUB as usize / 8;
    let keys = lane_mask(per, sub_bytes, p.slots * p.key_bytes);
    // SAFETY: as in `horizontal_128`.
    unsafe {
        horizontal_loop(p, q, out, per, sub_bytes, K as usize / 8, |key, at| {
            let v = match SUB {
                256 => _mm256_loadu_si256(at[0].cast()),
                128 => _mm256_loadu2_m128i(at[1].cast(), at[0].cast()),
                _ => _mm256_set_epi64x(
                    at[3].cast::<i64>().read_unaligned(),
                    at[2].cast::<i64>().read_unaligned(),
                    at[1].cast::<i64>().read_unaligned(),
                    at[0].cast::<i64>().read_unaligned(),
                ),
            };
            let eq = match K {
                16 => _mm256_cmpeq_epi16(v, _mm256_set1_epi16(key as i16)),
                32 => _mm256_cmpeq_epi32(v, _mm256_set1_epi32(key as i32)),
                _ => _mm256_cmpeq_epi64(v, _mm256_set1_epi64x(key as i64)),
            };
            _mm256_movemask_epi8(eq) as u32 as u64 & keys
        })
    }
}

/// # Safety
/// AVX-512F and BW; the probe's table (with padding) is alive; `out` is as long as the queries.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn horizontal_512<const K: u32, const SUB: u32>(
    p: &Probe<'_>,
    q: &Queries,
    out: &mut [u64],
) -> u64 {
    let per = (512 / SUB) as usize;
    let sub_lanes = (SUB / K) as usize;
    let keys = lane_mask(per, sub_lanes, p.slots);
    // SAFETY: as in `horizontal_128`.
    unsafe {
        horizontal_loop(p, q, out, per, sub_lanes, 1, |key, at| {
            let v = match SUB {
                512 => _mm512_loadu_si512(at[0].cast()),
                256 => _mm512_inserti64x4::<1>(
                    _mm512_castsi256_si512(_mm256_loadu_si256(at[0].cast())),
                    _mm256_loadu_si256(at[1].cast()),
                ),
                _ => {
                    let mut v = _mm512_castsi128_si512(_mm_loadu_si128(at[0].cast()));
                    v = _mm512_inserti32x4::<1>(v, _mm_loadu_si128(at[1].cast()));
                    v = _mm512_inserti32x4::<2>(v, _mm_loadu_si128(at[2].cast()));
                    _mm512_inserti32x4::<3>(v, _mm_loadu_si128(at[3].cast()))
                }
            };
            let lanes = match K {
                16 => _mm512_cmpeq_epi16_mask(v, _mm512_set1_epi16(key as i16)) as u64,
                32 => _mm512_cmpeq_epi32_mask(v, _mm512_set1_epi32(key as i32)) as u64,
                _ => _mm512_cmpeq_epi64_mask(v, _mm512_set1_epi64(key as i64)) as u64,
            };
            lanes & keys
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Vertical

/// `hi32(a * b)` of each 32-bit lane (`b` < 2^32 in each 64-bit lane's low half).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn mulhi_epu32_256(a: __m256i, b: __m256i) -> __m256i {
    let even = _mm256_mul_epu32(a, b);
    let odd = _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), b);
    _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd)
}

/// 8 keys per iteration in 32-bit lanes (K = 16 or 32).
///
/// # Safety
/// AVX2; the probe's table (with padding) is alive and under 2 GiB; `out` is as long as the
/// queries.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn vertical_256_lanes32<const K: u32>(p: &Probe<'_>, q: &Queries, out: &mut [u64]) -> u64 {
    const LANES: usize = 8;
    let full = q.len() / LANES * LANES;
    let buckets = _mm256_set1_epi64x(p.buckets as i64);
    let bucket_bytes = _mm256_set1_epi32(p.bucket_bytes as i32);
    let key_mask = _mm256_set1_epi32(if K == 16 { 0xffff } else { -1 });
    let payload_mask = _mm256_set1_epi64x(p.payload_mask as i64);
    let payload_base = p.slots * p.key_bytes;
    let mut hits = 0;
    for i in (0..full).step_by(LANES) {
        // SAFETY: `i + LANES <= len`.
        let keys = unsafe { _mm256_loadu_si256(q.narrow.as_ptr().add(i).cast()) };
        let mut open = _mm256_set1_epi32(-1);
        let (mut low, mut high) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        'ways: for &multiplier in HASH_MULTIPLIERS.iter().take(p.ways) {
            let h = _mm256_mullo_epi32(keys, _mm256_set1_epi32(multiplier as i32));
            let bucket = mulhi_epu32_256(h, buckets);
            let start = _mm256_mullo_epi32(bucket, bucket_bytes);
            for slot in 0..p.slots {
                let key_at =
                    _mm256_add_epi32(start, _mm256_set1_epi32((slot * p.key_bytes) as i32));
                // SAFETY: open lanes read 4 bytes at a key of a bucket (+ padding).
                let got = unsafe {
                    _mm256_mask_i32gather_epi32::<1>(
                        _mm256_setzero_si256(),
                        p.base.cast(),
                        key_at,
                        open,
                    )
                };
                let hit = _mm256_and_si256(
                    _mm256_cmpeq_epi32(_mm256_and_si256(got, key_mask), keys),
                    open,
                );
                if _mm256_testz_si256(hit, hit) == 0 {
                    let payload_at = _mm256_add_epi32(
                        start,
                        _mm256_set1_epi32((payload_base + slot * p.payload_bytes) as i32),
                    );
                    // SAFETY: lanes that hit read 8 bytes at a payload (+ padding).
                    unsafe {
                        low = _mm256_mask_i32gather_epi64::<1>(
                            low,
                            p.base.cast(),
                            _mm256_castsi256_si128(payload_at),
                            _mm256_cvtepi32_epi64(_mm256_castsi256_si128(hit)),
                        );
                        high = _mm256_mask_i32gather_epi64::<1>(
                            high,
                            p.base.cast(),
                            _mm256_extracti128_si256::<1>(payload_at),
                            _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(hit)),
                        );
                    }
                    open = _mm256_andnot_si256(hit, open);
                    if _mm256_testz_si256(open, open) == 1 {
                        break 'ways;
                    }
                }
            }
        }
        let missed = _mm256_movemask_ps(_mm256_castsi256_ps(open)).count_ones() as u64;
        hits += LANES as u64 - missed;
        // SAFETY: `i + LANES <= out.len()`.
        unsafe {
            let to = out.as_mut_ptr().add(i).cast::<__m256i>();
            _mm256_storeu_si256(to, _mm256_and_si256(low, payload_mask));
            _mm256_storeu_si256(to.add(1), _mm256_and_si256(high, payload_mask));
        }
    }
    // SAFETY: caller's contract.
    hits + unsafe { tail(p, q, out, full) }
}

/// 4 keys per iteration in 64-bit lanes (K = 64).
///
/// # Safety
/// As `vertical_256_lanes32`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn vertical_256_lanes64(p: &Probe<'_>, q: &Queries, out: &mut [u64]) -> u64 {
    const LANES: usize = 4;
    let full = q.len() / LANES * LANES;
    let buckets = _mm256_set1_epi64x(p.buckets as i64);
    let bucket_bytes = _mm256_set1_epi64x(p.bucket_bytes as i64);
    let low32 = _mm256_set1_epi64x(0xffff_ffff);
    let payload_mask = _mm256_set1_epi64x(p.payload_mask as i64);
    let payload_base = p.slots * p.key_bytes;
    let mut hits = 0;
    for i in (0..full).step_by(LANES) {
        // SAFETY: `i + LANES <= len`.
        let keys = unsafe { _mm256_loadu_si256(q.wide.as_ptr().add(i).cast()) };
        let folded = _mm256_xor_si256(keys, _mm256_srli_epi64::<32>(keys));
        let mut open = _mm256_set1_epi64x(-1);
        let mut found = _mm256_setzero_si256();
        'ways: for &multiplier in HASH_MULTIPLIERS.iter().take(p.ways) {
            let h = _mm256_and_si256(
                _mm256_mul_epu32(folded, _mm256_set1_epi64x(multiplier as i64)),
                low32,
            );
            let bucket = _mm256_srli_epi64::<32>(_mm256_mul_epu32(h, buckets));
            let start = _mm256_mul_epu32(bucket, bucket_bytes);
            for slot in 0..p.slots {
                let key_at =
                    _mm256_add_epi64(start, _mm256_set1_epi64x((slot * p.key_bytes) as i64));
                // SAFETY: open lanes read 8 bytes at a key of a bucket.
                let got = unsafe {
                    _mm256_mask_i64gather_epi64::<1>(
                        _mm256_setzero_si256(),
                        p.base.cast(),
                        key_at,
                        open,
                    )
                };
                let hit = _mm256_and_si256(_mm256_cmpeq_epi64(got, keys), open);
                if _mm256_testz_si256(hit, hit) == 0 {
                    let payload_at = _mm256_add_epi64(
                        start,
                        _mm256_set1_epi64x((payload_base + slot * p.payload_bytes) as i64),
                    );
                    // SAFETY: lanes that hit read 8 bytes at a payload (+ padding).
                    found = unsafe {
                        _mm256_mask_i64gather_epi64::<1>(found, p.base.cast(), payload_at, hit)
                    };
                    open = _mm256_andnot_si256(hit, open);
                    if _mm256_testz_si256(open, open) == 1 {
                        break 'ways;
                    }
                }
            }
        }
        let missed = _mm256_movemask_pd(_mm256_castsi256_pd(open)).count_ones() as u64;
        hits += LANES as u64 - missed;
        // SAFETY: `i + LANES <= out.len()`.
        unsafe {
            _mm256_storeu_si256(
                out.as_mut_ptr().add(i).cast(),
                _mm256_and_si256(found, payload_mask),
            )
        };
    }
    // SAFETY: caller's contract.
    hits + unsafe { tail(p, q, out, full) }
}

/// 16 keys per iteration in 32-bit lanes (K = 16 or 32).
///
/// # Safety
/// AVX-512F; otherwise as `vertical_256_lanes32`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn vertical_512_lanes32<const K: u32>(p: &Probe<'_>, q: &Queries, out: &mut [u64]) -> u64 {
    const LANES: usize = 16;
    let full = q.len() / LANES * LANES;
    let buckets = _mm512_set1_epi64(p.buckets as i64);
    let bucket_bytes = _mm512_set1_epi32(p.bucket_bytes as i32);
    let key_mask = _mm512_set1_epi32(if K == 16 { 0xffff } else { -1 });
    let payload_mask = _mm512_set1_epi64(p.payload_mask as i64);
    let payload_base = p.slots * p.key_bytes;
    let mut hits = 0;
    for i in (0..full).step_by(LANES) {
        // SAFETY: `i + LANES <= len`.
        let keys = unsafe { _mm512_loadu_si512(q.narrow.as_ptr().add(i).cast()) };
        let mut open: __mmask16 = 0xffff;
        let (mut low, mut high) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        'ways: for &multiplier in HASH_MULTIPLIERS.iter().take(p.ways) {
            let h = _mm512_mullo_epi32(keys, _mm512_set1_epi32(multiplier as i32));
            let even = _mm512_mul_epu32(h, buckets);
            let odd = _mm512_mul_epu32(_mm512_srli_epi64::<32>(h), buckets);
            let bucket = _mm512_mask_blend_epi32(0xaaaa, _mm512_srli_epi64::<32>(even), odd);
            let start = _mm512_mullo_epi32(bucket, bucket_bytes);
            for slot in 0..p.slots {
                let key_at =
                    _mm512_add_epi32(start, _mm512_set1_epi32((slot * p.key_bytes) as i32));
                // SAFETY: open lanes read 4 bytes at a key of a bucket (+ padding).
                let got = unsafe {
                    _mm512_mask_i32gather_epi32::<1>(
                        _mm512_setzero_si512(),
                        open,
                        key_at,
                        p.base.cast(),
                    )
                };
                let hit = _mm512_mask_cmpeq_epi32_mask(open, _mm512_and_si512(got, key_mask), keys);
                if hit != 0 {
                    let payload_at = _mm512_add_epi32(
                        start,
                        _mm512_set1_epi32((payload_base + slot * p.payload_bytes) as i32),
                    );
                    // SAFETY: lanes that hit read 8 bytes at a payload (+ padding).
                    unsafe {
                        low = _mm512_mask_i32gather_epi64::<1>(
                            low,
                            hit as __mmask8,
                            _mm512_castsi512_si256(payload_at),
                            p.base.cast(),
                        );
                        high = _mm512_mask_i32gather_epi64::<1>(
                            high,
                            (hit >> 8) as __mmask8,
                            _mm512_extracti64x4_epi64::<1>(payload_at),
                            p.base.cast(),
                        );
                    }
                    open &= !hit;
                    if open == 0 {
                        break 'ways;
                    }
                }
            }
        }
        hits += LANES as u64 - open.count_ones() as u64;
        // SAFETY: `i + LANES <= out.len()`.
        unsafe {
            let to = out.as_mut_ptr().add(i).cast::<__m512i>();
            _mm512_storeu_si512(to, _mm512_and_si512(low, payload_mask));
            _mm512_storeu_si512(to.add(1), _mm512_and_si512(high, payload_mask));
        }
    }
    // SAFETY: caller's contract.
    hits + unsafe { tail(p, q, out, full) }
}

/// 8 keys per iteration in 64-bit lanes (K = 64).
///
/// # Safety
/// AVX-512F; otherwise as `vertical_256_lanes32`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn vertical_512_lanes64(p: &Probe<'_>, q: &Queries, out: &mut [u64]) -> u64 {
    const LANES: usize = 8;
    let full = q.len() / LANES * LANES;
    let buckets = _mm512_set1_epi64(p.buckets as i64);
    let bucket_bytes = _mm512_set1_epi64(p.bucket_bytes as i64);
    let low32 = _mm512_set1_epi64(0xffff_ffff);
    let payload_mask = _mm512_set1_epi64(p.payload_mask as i64);
    let payload_base = p.slots * p.key_bytes;
    let mut hits = 0;
    for i in (0..full).step_by(LANES) {
        // SAFETY: `i + LANES <= len`.
        let keys = unsafe { _mm512_loadu_si512(q.wide.as_ptr().add(i).cast()) };
        let folded = _mm512_xor_si512(keys, _mm512_srli_epi64::<32>(keys));
        let mut open: __mmask8 = 0xff;
        let mut found = _mm512_setzero_si512();
        'ways: for &multiplier in HASH_MULTIPLIERS.iter().take(p.ways) {
            let h = _mm512_and_si512(
                _mm512_mul_epu32(folded, _mm512_set1_epi64(multiplier as i64)),
                low32,
            );
            let bucket = _mm512_srli_epi64::<32>(_mm512_mul_epu32(h, buckets));
            let start = _mm512_mul_epu32(bucket, bucket_bytes);
            for slot in 0..p.slots {
                let key_at =
                    _mm512_add_epi64(start, _mm512_set1_epi64((slot * p.key_bytes) as i64));
                // SAFETY: open lanes read 8 bytes at a key of a bucket.
                let got = unsafe {
                    _mm512_mask_i64gather_epi64::<1>(
                        _mm512_setzero_si512(),
                        open,
                        key_at,
                        p.base.cast(),
                    )
                };
                let hit = _mm512_mask_cmpeq_epi64_mask(open, got, keys);
                if hit != 0 {
                    let payload_at = _mm512_add_epi64(
                        start,
                        _mm512_set1_epi64((payload_base + slot * p.payload_bytes) as i64),
                    );
                    // SAFETY: lanes that hit read 8 bytes at a payload (+ padding).
                    found = unsafe {
                        _mm512_mask_i64gather_epi64::<1>(found, hit, payload_at, p.base.cast())
                    };
                    open &= !hit;
                    if open == 0 {
                        break 'ways;
                    }
                }
            }
        }
        hits += LANES as u64 - open.count_ones() as u64;
        // SAFETY: `i + LANES <= out.len()`.
        unsafe {
            _mm512_storeu_si512(
                out.as_mut_ptr().add(i).cast(),
                _mm512_and_si512(found, payload_mask),
            )
        };
    }
    // SAFETY: caller's contract.
    hits + unsafe { tail(p, q, out, full) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::scalar::read;

    #[test]
    fn lane_masks() {
        assert_eq!(lane_mask(1, 16, 8), 0xff);
        assert_eq!(lane_mask(2, 16, 8), 0x00ff_00ff);
        assert_eq!(lane_mask(4, 8, 4), 0x0f0f_0f0f);
        assert_eq!(lane_mask(1, 64, 64), u64::MAX);
    }

    #[test]
    fn read_matches_little_endian() {
        let bytes = [1u8, 2, 3, 4, 5, 6, 7, 8];
        // SAFETY: 8 readable bytes.
        unsafe {
            assert_eq!(read(bytes.as_ptr(), 2), 0x0201);
            assert_eq!(read(bytes.as_ptr(), 4), 0x0403_0201);
            assert_eq!(read(bytes.as_ptr(), 8), 0x0807_0605_0403_0201);
        }
    }
}

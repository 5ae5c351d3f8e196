//! One kind of operation on a floe map or cache, and nothing else: the program an
//! instruction counter runs to tell what one operation costs (`ci/instructions.sh` runs it
//! under valgrind's callgrind twice, with different pass counts, and divides the difference by
//! the operations between them: set-up, filling and exit cancel out).
//!
//! ```sh
//! cargo run --release -p floe --example op_instructions -- OP KEYS PASSES [BACKEND]
//! ```
//!
//! - `OP`: `get` (one call a key), `get-many` (batches of 1024), `insert-new-each` (fresh
//!   keys, batches of 1024), `fetch-add-each` (present keys, batches of 1024), `fetch-add`
//!   (one call a key), `insert` (one call a key, replacing); `map-get` (a `Map<u64, u64>`,
//!   pinned for each get); `cache-get` (a `Cache<u64, u64>` holding every key) and
//!   `cache-insert` (fresh keys each pass into a `Cache` of half the keys, so that after the
//!   first pass every insert evicts one: use 1 and 3 passes); `flat-cache-get` and
//!   `flat-cache-insert`, the same on a `FlatCache<u64, u64>`. The caches take the backend
//!   `Auto` picks (AVX2 under valgrind).
//! - `KEYS`: keys in the map (it is built for them and filled with them first, except for
//!   `insert-new-each`, whose passes insert the keys into the empty map: use 0 and 1 passes).
//! - `PASSES`: how many times the operation runs over every key.
//! - `BACKEND`: `avx2` (default: valgrind decodes no AVX-512), `scalar`, `avx512` or `auto`.
//!
//! The answers are summed and the sum checked, so the loop cannot be optimised away and a
//! wrong map fails (exit code 1); a bad argument exits with code 2.

use std::process::ExitCode;

use floe::{Backend, FlatMap, Insert};

const CHUNK: usize = 1024;

fn usage(problem: &str) -> ExitCode {
    eprintln!("op_instructions: {problem}");
    eprintln!(
        "usage: op_instructions get|get-many|insert-new-each|fetch-add-each|fetch-add|insert|\
         map-get|cache-get|cache-insert|flat-cache-get|flat-cache-insert KEYS PASSES \
         [avx2|scalar|avx512|auto]"
    );
    ExitCode::from(2)
}

/// The map a builder made, or `None` after saying why it could not (the system refused its
/// memory, or the backend asked for is not this CPU's).
fn built<M>(map: Result<M, floe::Error>) -> Option<M> {
    map.map_err(|error| eprintln!("op_instructions: the map could not be built: {error}"))
        .ok()
}

/// `n` distinct keys, none zero, spread over the word (xorshift64).
fn keys(n: usize) -> Vec<u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !(3..=4).contains(&args.len()) {
        return usage("expected 3 or 4 arguments");
    }
    let op = args[0].as_str();
    let Ok(n) = args[1].parse::<usize>() else {
        return usage(&format!("KEYS {:?} is not a count", args[1]));
    };
    let Ok(passes) = args[2].parse::<usize>() else {
        return usage(&format!("PASSES {:?} is not a count", args[2]));
    };
    if n == 0 || n > 1 << 28 {
        return usage("KEYS must be from 1 to 2^28");
    }
    let backend = match args.get(3).map_or("avx2", String::as_str) {
        "avx2" => Backend::Avx2,
        "scalar" => Backend::Scalar,
        "avx512" => Backend::Avx512,
        "auto" => Backend::Auto,
        other => return usage(&format!("unknown backend {other:?}")),
    };
    // The operations on a `Map` or a `Cache` build their own; theirs is an empty `FlatMap`.
    let on_flat_map = !matches!(
        op,
        "map-get" | "cache-get" | "cache-insert" | "flat-cache-get" | "flat-cache-insert"
    );
    let Some(map) = built(
        FlatMap::<u64, u64>::builder()
            .capacity(if on_flat_map { n } else { 1 })
            .backend(backend)
            .build(),
    ) else {
        return ExitCode::from(2);
    };
    let keys = keys(n);
    let pairs: Vec<(u64, u64)> = keys.iter().map(|&k| (k, k.wrapping_add(1))).collect();
    // Answers are summed and the sums checked at the end (a compare per answer would count
    // as the operation's own instructions); a batch call's error counts as wrong.
    let mut wrong = 0usize;
    let mut sum = 0u64;
    let values: u64 = pairs.iter().fold(0u64, |s, &(_, v)| s.wrapping_add(v));
    let times = |count: usize, of: u64| (count as u64).wrapping_mul(of);
    if on_flat_map && op != "insert-new-each" {
        for &(key, value) in &pairs {
            // Fresh keys: nothing to replace.
            let _ = map.insert(key, value);
        }
    }
    let expected = match op {
        "get" => {
            for _ in 0..passes {
                for &key in &keys {
                    sum = sum.wrapping_add(map.get(&key).unwrap_or(0));
                }
            }
            times(passes, values)
        }
        "get-many" => {
            let mut answers = vec![None; CHUNK];
            for _ in 0..passes {
                for chunk in keys.chunks(CHUNK) {
                    let answers = &mut answers[..chunk.len()];
                    wrong += usize::from(map.batch().get_many(chunk, answers).is_err());
                    sum = answers
                        .iter()
                        .fold(sum, |s, a| s.wrapping_add(a.unwrap_or(0)));
                }
            }
            times(passes, values)
        }
        "insert-new-each" => {
            if passes > 1 {
                return usage("insert-new-each inserts the keys once: PASSES 0 or 1");
            }
            for _ in 0..passes {
                for chunk in pairs.chunks(CHUNK) {
                    map.batch().insert_new_each(chunk, |_, outcome| {
                        sum += u64::from(matches!(outcome, Ok(Insert::Inserted)));
                    });
                }
            }
            times(passes, n as u64)
        }
        "fetch-add-each" | "fetch-add" => {
            let deltas: Vec<(u64, u64)> = keys.iter().map(|&k| (k, 1)).collect();
            for _ in 0..passes {
                if op == "fetch-add" {
                    for &key in &keys {
                        sum = sum.wrapping_add(map.fetch_add(key, 1).unwrap_or(0));
                    }
                } else {
                    for chunk in deltas.chunks(CHUNK) {
                        map.batch().fetch_add_each(chunk, |_, previous| {
                            sum = sum.wrapping_add(previous.ok().flatten().unwrap_or(0));
                        });
                    }
                }
            }
            // Pass p reads every value plus p.
            let steps = (passes as u64).wrapping_mul((passes as u64).wrapping_sub(1)) / 2;
            times(passes, values).wrapping_add((n as u64).wrapping_mul(steps))
        }
        "insert" => {
            for _ in 0..passes {
                for &(key, value) in &pairs {
                    sum = sum.wrapping_add(map.insert(key, value).unwrap_or(0));
                }
            }
            times(passes, values)
        }
        "map-get" => {
            let Some(map) = built(
                floe::Map::<u64, u64>::builder()
                    .capacity(n)
                    .backend(backend)
                    .build(),
            ) else {
                return ExitCode::from(2);
            };
            for &(key, value) in &pairs {
                let _ = map.pin().insert(key, value);
            }
            for _ in 0..passes {
                for &key in &keys {
                    sum = sum.wrapping_add(map.pin().get(&key).copied().unwrap_or(0));
                }
            }
            times(passes, values)
        }
        "cache-get" => {
            let cache = floe::Cache::<u64, u64>::new(2 * n as u64);
            sum = cache_gets(&pairs, passes, |k, v| cache.insert(k, v), |k| cache.get(&k));
            times(passes, values)
        }
        "flat-cache-get" => {
            let cache = floe::FlatCache::<u64, u64>::new(2 * n as u64);
            sum = cache_gets(&pairs, passes, |k, v| cache.insert(k, v), |k| cache.get(&k));
            times(passes, values)
        }
        "cache-insert" => {
            let cache = floe::Cache::<u64, u64>::new((n as u64 / 2).max(1));
            sum = cache_inserts(&pairs, passes, |k, v| cache.insert(k, v));
            wrong += usize::from(cache.len() as u64 > (n as u64 / 2).max(1));
            times(passes, n as u64)
        }
        "flat-cache-insert" => {
            let cache = floe::FlatCache::<u64, u64>::new((n as u64 / 2).max(1));
            sum = cache_inserts(&pairs, passes, |k, v| cache.insert(k, v));
            wrong += usize::from(cache.len() as u64 > (n as u64 / 2).max(1));
            times(passes, n as u64)
        }
        other => return usage(&format!("unknown operation {other:?}")),
    };
    wrong += usize::from(sum != expected);
    if wrong != 0 {
        eprintln!("op_instructions: {wrong} wrong answers");
        return ExitCode::FAILURE;
    }
    println!("{op}: {n} keys, {passes} passes, the answers' sum checked");
    ExitCode::SUCCESS
}

/// A cache filled with `pairs`, then read `passes` times over: the sum of the values found.
fn cache_gets<R>(
    pairs: &[(u64, u64)],
    passes: usize,
    insert: impl Fn(u64, u64) -> R,
    get: impl Fn(u64) -> Option<u64>,
) -> u64 {
    for &(key, value) in pairs {
        insert(key, value);
    }
    let mut sum = 0u64;
    for _ in 0..passes {
        for &(key, _) in pairs {
            sum = sum.wrapping_add(get(key).unwrap_or(0));
        }
    }
    sum
}

/// Fresh keys each pass into a cache (distinct from every other pass's but by a 2^-64
/// chance): how many inserts found their key absent.
fn cache_inserts(
    pairs: &[(u64, u64)],
    passes: usize,
    insert: impl Fn(u64, u64) -> Option<u64>,
) -> u64 {
    let mut inserted = 0;
    for pass in 0..passes as u64 {
        let salt = pass.wrapping_mul(0xd6e8_feb8_6659_fd93);
        for &(key, value) in pairs {
            inserted += u64::from(insert(key ^ salt, value).is_none());
        }
    }
    inserted
}

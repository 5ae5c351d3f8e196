//! DLHT's Fig. 9 and 10 for maps of byte strings: `floe::Map` against the any-key peers as the
//! values grow (8 to 1500 bytes, keys 8 bytes) and as the keys grow (8 to 256 bytes, values
//! 8 bytes), on three workloads:
//!
//! - `get`: look up a present key and read the value's first word (what a cache's hit costs
//!   before it copies anything);
//! - `get-read`: look up a present key and read every byte of the value (a hit that uses it);
//! - `insdel`: insert a fresh key with a fresh value, then remove it (the map's size stays
//!   put; the key and value are allocated per insert, for every map alike);
//! - `get-batch`: `get` 64 keys per call, through `MapRef::get_many` for floe and one call
//!   per key for the peers (none has a batch interface).
//!
//! Every map gets the same hasher (ahash, fixed seeds), the same keys (`i` little-endian,
//! padded to the key size with bytes derived from `i`), the same pinned threads and the same
//! per-thread operation streams prepared before timing; rounds alternate the maps, and every
//! answer is checked. The key count shrinks for large entries so that one map fits the memory
//! budget (`--budget-gib`): DLHT's 2^24 keys of 1500 bytes would take 25 GB.

use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::{
    keys::{parse_count, Rng},
    maps::{AnyHash, AHASH},
    measure::{cycle_for, median, streams, Workers},
};

#[derive(Args, Debug, Clone)]
pub struct SizesArgs {
    /// Value sizes in bytes for the value sweep (keys of 8 bytes).
    #[arg(long, value_delimiter = ',', default_value = "8,64,256,1024,1500")]
    pub value_bytes: Vec<usize>,
    /// Key sizes in bytes for the key sweep (values of 8 bytes); at least 8.
    #[arg(long, value_delimiter = ',', default_value = "8,32,64,128,256")]
    pub key_bytes: Vec<usize>,
    /// Keys in each map (fewer where the entries would exceed the budget).
    #[arg(long, default_value = "2^24", value_parser = parse_count)]
    pub keys: u64,
    /// Memory for one map's keys and values, in GiB.
    #[arg(long, default_value_t = 3.0)]
    pub budget_gib: f64,
    #[command(flatten)]
    pub run: BlobRunArgs,
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "get,get-read,insdel,get-batch"
    )]
    pub workloads: Vec<BlobWorkload>,
    /// Also measure each map's memory per entry at each size: RSS growth while a fresh child
    /// process fills it, per key, beyond the key and value bytes themselves.
    #[arg(long)]
    pub memory: bool,
}

/// The hidden `sizes-probe` subcommand: fill one map of byte strings in this process and
/// print its RSS growth.
#[derive(Args, Debug, Clone)]
pub struct SizesProbeArgs {
    #[arg(long, value_enum)]
    pub map: BlobKind,
    #[arg(long)]
    pub key_bytes: usize,
    #[arg(long)]
    pub value_bytes: usize,
    #[arg(long)]
    pub keys: usize,
}

/// How the maps of byte strings are run (`sizes` and `ycsb`).
#[derive(Args, Debug, Clone)]
pub struct BlobRunArgs {
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Seconds per timed run.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Rounds per point (the median is reported; maps alternate within a round).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "floe,papaya,scc,scc-index,dashmap"
    )]
    pub maps: Vec<BlobKind>,
}

impl BlobRunArgs {
    /// Why these settings cannot run, if they cannot.
    pub fn refusal(&self) -> Option<&'static str> {
        if self.maps.is_empty() {
            Some("nothing to measure: --maps is empty")
        } else if self.threads == 0 || self.repeat == 0 || !positive(self.seconds) {
            Some("--threads, --repeat and --seconds must be positive")
        } else {
            None
        }
    }
}

/// Whether `x` is a finite positive number.
pub fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// The maps of byte strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BlobKind {
    Floe,
    /// `floe::Map` keyed by `(namespace, key)` (four namespaces, picked by the key's first
    /// byte), looked up through `MapRef::namespace` handles: what namespaces cost.
    FloeNamespaced,
    Papaya,
    Scc,
    SccIndex,
    Dashmap,
    /// `floe::PersistentMap`: floe's `Map` with every write journaled to files in
    /// `$FLOE_BENCH_DIR` (else the temporary directory), a fresh directory per map.
    FloePersistent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BlobWorkload {
    Get,
    GetRead,
    Insdel,
    /// `get` in batches of 64 keys: `MapRef::get_many` for floe (bins, then entries,
    /// prefetched ahead), one call per key for the peers, which have no batch interface.
    GetBatch,
}

pub(crate) type Bytes = Box<[u8]>;

/// What the workloads need of a concurrent map from byte strings to byte strings (also
/// `ycsb`'s).
pub(crate) trait BlobMap: Send + Sync {
    fn with_capacity(keys: usize, hasher: AnyHash) -> Self;
    /// Insert if absent; whether it was.
    fn insert(&self, key: Bytes, value: Bytes) -> bool;
    /// Insert or overwrite (YCSB's update writes a whole new record).
    fn upsert(&self, key: Bytes, value: Bytes);
    /// `read(value)` of the value of `key`, if present.
    fn get_with(&self, key: &[u8], read: impl FnOnce(&[u8]) -> u64) -> Option<u64>;
    fn remove(&self, key: &[u8]) -> bool;
    /// `read` of the value of each of `keys` into `out` (same length); one by one unless the
    /// map has a batch interface.
    fn get_many_with(&self, keys: &[&[u8]], read: fn(&[u8]) -> u64, out: &mut [Option<u64>]) {
        for (key, out) in keys.iter().zip(out) {
            *out = self.get_with(key, read);
        }
    }
}

impl BlobMap for floe::Map<Bytes, Bytes, AnyHash> {
    fn get_many_with(&self, keys: &[&[u8]], read: fn(&[u8]) -> u64, out: &mut [Option<u64>]) {
        let m = self.pin();
        let mut found = [None; BATCH];
        let found = &mut found[..keys.len()];
        m.get_many(keys, found).expect("one slot per key");
        for (out, found) in out.iter_mut().zip(found.iter()) {
            *out = found.map(|value| read(value));
        }
    }
    fn with_capacity(keys: usize, hasher: AnyHash) -> Self {
        floe::Map::builder()
            .capacity(keys)
            .hasher(hasher)
            .build()
            .expect("the budget fits the table")
    }
    #[inline]
    fn insert(&self, key: Bytes, value: Bytes) -> bool {
        self.pin().insert_new(key, value).is_inserted()
    }
    #[inline]
    fn upsert(&self, key: Bytes, value: Bytes) {
        self.pin().insert(key, value);
    }
    #[inline]
    fn get_with(&self, key: &[u8], read: impl FnOnce(&[u8]) -> u64) -> Option<u64> {
        self.pin().get(key).map(|v| read(v))
    }
    #[inline]
    fn remove(&self, key: &[u8]) -> bool {
        self.pin().remove(key).is_some()
    }
}

/// `floe::PersistentMap` in a fresh directory (removed when dropped).
pub(crate) struct PersistentBlobs {
    map: Option<floe::PersistentMap<Bytes, Bytes, AnyHash>>,
    dir: std::path::PathBuf,
}

impl PersistentBlobs {
    fn map(&self) -> &floe::PersistentMap<Bytes, Bytes, AnyHash> {
        self.map.as_ref().expect("present until dropped")
    }
}

impl Drop for PersistentBlobs {
    fn drop(&mut self) {
        drop(self.map.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl BlobMap for PersistentBlobs {
    fn with_capacity(keys: usize, hasher: AnyHash) -> Self {
        let dir = crate::maps::fresh_map_dir();
        let map = floe::Map::builder()
            .capacity(keys)
            .hasher(hasher)
            .build_persistent(&dir)
            .unwrap_or_else(|e| panic!("floe's persistent map in {}: {e}", dir.display()));
        PersistentBlobs {
            map: Some(map),
            dir,
        }
    }
    #[inline]
    fn insert(&self, key: Bytes, value: Bytes) -> bool {
        let m = self.map().pin();
        m.insert_new(key, value)
            .expect("the journal takes the record")
            .is_inserted()
    }
    #[inline]
    fn upsert(&self, key: Bytes, value: Bytes) {
        let m = self.map().pin();
        m.insert(key, value).expect("the journal takes the record");
    }
    #[inline]
    fn get_with(&self, key: &[u8], read: impl FnOnce(&[u8]) -> u64) -> Option<u64> {
        self.map().pin().get(key).map(|v| read(v))
    }
    #[inline]
    fn remove(&self, key: &[u8]) -> bool {
        let m = self.map().pin();
        m.remove(key)
            .expect("the journal takes the record")
            .is_some()
    }
}

/// `floe::Map` with namespaces: the same keys, each in namespace `key[0] % 4`.
pub(crate) struct Namespaced(floe::Map<(u16, Bytes), Bytes, AnyHash>);

fn namespace_of(key: &[u8]) -> u16 {
    u16::from(key[0] % 4)
}

impl BlobMap for Namespaced {
    fn with_capacity(keys: usize, hasher: AnyHash) -> Self {
        Namespaced(
            floe::Map::builder()
                .capacity(keys)
                .hasher(hasher)
                .build()
                .expect("the budget fits the table"),
        )
    }
    #[inline]
    fn insert(&self, key: Bytes, value: Bytes) -> bool {
        let m = self.0.pin();
        m.namespace(namespace_of(&key))
            .insert_new(key, value)
            .is_inserted()
    }
    #[inline]
    fn upsert(&self, key: Bytes, value: Bytes) {
        let m = self.0.pin();
        m.namespace(namespace_of(&key)).insert(key, value);
    }
    #[inline]
    fn get_with(&self, key: &[u8], read: impl FnOnce(&[u8]) -> u64) -> Option<u64> {
        let m = self.0.pin();
        m.namespace(namespace_of(key)).get(key).map(|v| read(v))
    }
    #[inline]
    fn remove(&self, key: &[u8]) -> bool {
        let m = self.0.pin();
        m.namespace(namespace_of(key)).remove(key).is_some()
    }
}

impl BlobMap for papaya::HashMap<Bytes, Bytes, AnyHash> {
    fn with_capacity(keys: usize, hasher: AnyHash) -> Self {
        papaya::HashMap::builder()
            .capacity(keys)
            .hasher(hasher)
            .build()
    }
    #[inline]
    fn insert(&self, key: Bytes, value: Bytes) -> bool {
        self.pin().try_insert(key, value).is_ok()
    }
    #[inline]
    fn upsert(&self, key: Bytes, value: Bytes) {
        self.pin().insert(key, value);
    }
    #[inline]
    fn get_with(&self, key: &[u8], read: impl FnOnce(&[u8]) -> u64) -> Option<u64> {
        self.pin().get(key).map(|v| read(v))
    }
    #[inline]
    fn remove(&self, key: &[u8]) -> bool {
        self.pin().remove(key).is_some()
    }
}

impl BlobMap for scc::HashMap<Bytes, Bytes, AnyHash> {
    fn with_capacity(keys: usize, hasher: AnyHash) -> Self {
        scc::HashMap::with_capacity_and_hasher(keys, hasher)
    }
    #[inline]
    fn insert(&self, key: Bytes, value: Bytes) -> bool {
        self.insert_sync(key, value).is_ok()
    }
    #[inline]
    fn upsert(&self, key: Bytes, value: Bytes) {
        self.upsert_sync(key, value);
    }
    #[inline]
    fn get_with(&self, key: &[u8], read: impl FnOnce(&[u8]) -> u64) -> Option<u64> {
        self.read_sync(key, |_, v| read(v))
    }
    #[inline]
    fn remove(&self, key: &[u8]) -> bool {
        self.remove_sync(key).is_some()
    }
}

impl BlobMap for scc::HashIndex<Bytes, Bytes, AnyHash> {
    fn with_capacity(keys: usize, hasher: AnyHash) -> Self {
        scc::HashIndex::with_capacity_and_hasher(keys, hasher)
    }
    #[inline]
    fn insert(&self, key: Bytes, value: Bytes) -> bool {
        self.insert_sync(key, value).is_ok()
    }
    #[inline]
    fn upsert(&self, key: Bytes, value: Bytes) {
        match self.entry_sync(key) {
            scc::hash_index::Entry::Occupied(mut present) => present.update(value),
            scc::hash_index::Entry::Vacant(absent) => {
                absent.insert_entry(value);
            }
        }
    }
    #[inline]
    fn get_with(&self, key: &[u8], read: impl FnOnce(&[u8]) -> u64) -> Option<u64> {
        self.peek_with(key, |_, v| read(v))
    }
    #[inline]
    fn remove(&self, key: &[u8]) -> bool {
        self.remove_sync(key)
    }
}

impl BlobMap for dashmap::DashMap<Bytes, Bytes, AnyHash> {
    fn with_capacity(keys: usize, hasher: AnyHash) -> Self {
        dashmap::DashMap::with_capacity_and_hasher(keys, hasher)
    }
    #[inline]
    fn insert(&self, key: Bytes, value: Bytes) -> bool {
        match self.entry(key) {
            dashmap::Entry::Occupied(_) => false,
            dashmap::Entry::Vacant(v) => {
                v.insert(value);
                true
            }
        }
    }
    #[inline]
    fn upsert(&self, key: Bytes, value: Bytes) {
        dashmap::DashMap::insert(self, key, value);
    }
    #[inline]
    fn get_with(&self, key: &[u8], read: impl FnOnce(&[u8]) -> u64) -> Option<u64> {
        self.get(key).map(|v| read(&v))
    }
    #[inline]
    fn remove(&self, key: &[u8]) -> bool {
        dashmap::DashMap::remove(self, key).is_some()
    }
}

/// One point of a sweep.
#[derive(Clone, Copy, Debug)]
struct Shape {
    key_bytes: usize,
    value_bytes: usize,
    keys: usize,
}

/// Key `i`: its little-endian bytes, padded with bytes derived from `i`.
pub(crate) fn key(i: u64, bytes: usize) -> Bytes {
    let mut key = Vec::with_capacity(bytes);
    key.extend_from_slice(&i.to_le_bytes());
    let mut fill = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while key.len() < bytes {
        key.push(fill as u8);
        fill = fill.rotate_left(8);
    }
    key.into_boxed_slice()
}

/// The value of key `i`: its first word is `i`, the rest a pattern of `i`.
pub(crate) fn value(i: u64, bytes: usize) -> Bytes {
    let mut value = vec![(i as u8) ^ 0x5A; bytes];
    let head = bytes.min(8);
    value[..head].copy_from_slice(&i.to_le_bytes()[..head]);
    value.into_boxed_slice()
}

/// The value's first word (up to 8 bytes), as `get` reads it.
#[inline(always)]
pub(crate) fn first_word(value: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let head = value.len().min(8);
    word[..head].copy_from_slice(&value[..head]);
    u64::from_le_bytes(word)
}

/// Every byte of the value, summed eight at a time, as `get-read` reads it.
#[inline(always)]
pub(crate) fn sum_all(value: &[u8]) -> u64 {
    let mut chunks = value.chunks_exact(8);
    let mut sum = 0u64;
    for chunk in &mut chunks {
        sum = sum.wrapping_add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
    }
    chunks
        .remainder()
        .iter()
        .fold(sum, |s, &b| s.wrapping_add(u64::from(b)))
}

/// Keys per call of the `get-batch` workload.
const BATCH: usize = 64;

/// A map made for `shape.keys` keys and filled with them.
fn filled<M: BlobMap>(shape: Shape) -> Result<M, String> {
    let map = M::with_capacity(shape.keys, AnyHash::Ahash(&AHASH));
    for i in 0..shape.keys as u64 {
        if !map.insert(key(i, shape.key_bytes), value(i, shape.value_bytes)) {
            return Err(format!("fill: key {i} inserted twice"));
        }
    }
    Ok(map)
}

/// RSS growth (bytes) of making and filling a map of `kind` with `shape` (in this process:
/// run it in a fresh one, where no freed memory of earlier maps is reused).
pub fn probe(args: &SizesProbeArgs) -> Result<u64, String> {
    fn grow<M: BlobMap>(shape: Shape) -> Result<u64, String> {
        let before = crate::machine::rss_bytes().ok_or("no /proc/self/statm")?;
        let map = filled::<M>(shape)?;
        let after = crate::machine::rss_bytes().ok_or("no /proc/self/statm")?;
        drop(map);
        Ok(after.saturating_sub(before) as u64)
    }
    let shape = Shape {
        key_bytes: args.key_bytes,
        value_bytes: args.value_bytes,
        keys: args.keys,
    };
    match args.map {
        BlobKind::Floe => grow::<floe::Map<Bytes, Bytes, AnyHash>>(shape),
        BlobKind::FloeNamespaced => grow::<Namespaced>(shape),
        BlobKind::Papaya => grow::<papaya::HashMap<Bytes, Bytes, AnyHash>>(shape),
        BlobKind::Scc => grow::<scc::HashMap<Bytes, Bytes, AnyHash>>(shape),
        BlobKind::SccIndex => grow::<scc::HashIndex<Bytes, Bytes, AnyHash>>(shape),
        BlobKind::Dashmap => grow::<dashmap::DashMap<Bytes, Bytes, AnyHash>>(shape),
        BlobKind::FloePersistent => grow::<PersistentBlobs>(shape),
    }
}

/// How `--map` spells `kind`.
fn flag_name(kind: BlobKind) -> String {
    kind.to_possible_value()
        .map_or_else(|| format!("{kind:?}"), |v| v.get_name().to_string())
}

/// Bytes per entry beyond its key and value of a map of `kind` at `shape`, from
/// [`probe`] run in a child process.
fn overhead_per_entry(kind: BlobKind, shape: Shape) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding floe-bench: {e}"))?;
    let output = std::process::Command::new(exe)
        .args(["sizes-probe", "--map", &flag_name(kind)])
        .args(["--key-bytes", &shape.key_bytes.to_string()])
        .args(["--value-bytes", &shape.value_bytes.to_string()])
        .args(["--keys", &shape.keys.to_string()])
        .output()
        .map_err(|e| format!("starting the memory probe: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let bytes: f64 = text
        .trim()
        .strip_prefix("rss_growth_bytes=")
        .and_then(|b| b.parse().ok())
        .ok_or_else(|| {
            format!(
                "memory probe of {kind:?} printed '{}' ({})",
                text.trim(),
                String::from_utf8_lossy(&output.stderr).trim()
            )
        })?;
    Ok(bytes / shape.keys as f64 - (shape.key_bytes + shape.value_bytes) as f64)
}

/// Fill a map with `shape.keys` keys, then the throughput (Mops/s) of each workload on it, in
/// order (insdel leaves the map as it found it).
fn measure<M: BlobMap>(
    shape: Shape,
    workloads: &[BlobWorkload],
    args: &SizesArgs,
    workers: &Workers,
    round: usize,
) -> Result<Vec<f64>, String> {
    let map = filled::<M>(shape)?;
    workloads
        .iter()
        .map(|&workload| run_workload(&map, shape, workload, args, workers, round))
        .collect()
}

/// Throughput of one workload on a filled map (Mops/s).
fn run_workload<M: BlobMap>(
    map: &M,
    shape: Shape,
    workload: BlobWorkload,
    args: &SizesArgs,
    workers: &Workers,
    round: usize,
) -> Result<f64, String> {
    let threads = args.run.threads;
    let present = shape.keys as u64;
    let duration = Duration::from_secs_f64(args.run.seconds);
    let seed = 1 + round as u64 * 1000;
    let (elapsed, counts) = match workload {
        BlobWorkload::Get | BlobWorkload::GetRead | BlobWorkload::GetBatch => {
            // Per thread: random present keys, laid end to end in one buffer (the harness
            // reads them sequentially, so a lookup's only random accesses are the map's),
            // and the answer each lookup must give.
            let read_all = workload == BlobWorkload::GetRead;
            let kb = shape.key_bytes;
            let per_thread: Vec<(Vec<u8>, Vec<u64>)> =
                streams(threads, seed, 1 << 14, |rng: &mut Rng| rng.below(present))
                    .into_iter()
                    .map(|indices| {
                        let mut flat = Vec::with_capacity(indices.len() * kb);
                        let mut expects = Vec::with_capacity(indices.len());
                        for &i in &indices {
                            flat.extend_from_slice(&key(i, kb));
                            let v = value(i, shape.value_bytes);
                            expects.push(if read_all {
                                sum_all(&v)
                            } else {
                                first_word(&v)
                            });
                        }
                        (flat, expects)
                    })
                    .collect();
            if workload == BlobWorkload::GetBatch {
                return get_batches(map, &per_thread, kb, duration, workers, threads);
            }
            workers.run(threads, |t| {
                let (flat, expects) = &per_thread[t];
                let mut wrong = 0u64;
                let mut at = 0usize;
                let ops = cycle_for(expects, duration, |&expect| {
                    let k = &flat[at * kb..(at + 1) * kb];
                    let got = if read_all {
                        map.get_with(k, sum_all)
                    } else {
                        map.get_with(k, first_word)
                    };
                    wrong += u64::from(got != Some(expect));
                    at += 1;
                    if at == expects.len() {
                        at = 0;
                    }
                });
                (ops, wrong)
            })
        }
        BlobWorkload::Insdel => {
            // Fresh keys per thread, above the present ones; each is inserted then removed.
            let fresh: Vec<Vec<u64>> = (0..threads)
                .map(|t| {
                    (0..1 << 16)
                        .map(|j| present + (t as u64) * (1 << 20) + j)
                        .collect()
                })
                .collect();
            workers.run(threads, |t| {
                let mut wrong = 0u64;
                let ops = cycle_for(&fresh[t], duration, |&i| {
                    let k = key(i, shape.key_bytes);
                    let probe = k.clone();
                    wrong += u64::from(!map.insert(k, value(i, shape.value_bytes)));
                    wrong += u64::from(!map.remove(&probe));
                });
                (ops, wrong)
            })
        }
    };
    let wrong: u64 = counts.iter().map(|c| c.1).sum();
    if wrong > 0 {
        return Err(format!("{wrong} wrong answers ({workload:?}, {shape:?})"));
    }
    let ops: u64 = counts.iter().map(|c| c.0).sum();
    Ok(ops as f64 / elapsed.as_secs_f64() / 1e6)
}

/// The `get-batch` workload: each thread's keys `BATCH` at a time through
/// `BlobMap::get_many_with`, every answer checked (Mops/s).
fn get_batches<M: BlobMap>(
    map: &M,
    per_thread: &[(Vec<u8>, Vec<u64>)],
    key_bytes: usize,
    duration: Duration,
    workers: &Workers,
    threads: usize,
) -> Result<f64, String> {
    let (elapsed, counts) = workers.run(threads, |t| {
        let (flat, expects) = &per_thread[t];
        let keys: Vec<&[u8]> = flat.chunks_exact(key_bytes).collect();
        let batches: Vec<(&[&[u8]], &[u64])> =
            keys.chunks(BATCH).zip(expects.chunks(BATCH)).collect();
        let mut out = [None; BATCH];
        let mut wrong = 0u64;
        let calls = cycle_for(&batches, duration, |&(keys, expects)| {
            let out = &mut out[..keys.len()];
            map.get_many_with(keys, first_word, out);
            wrong += out
                .iter()
                .zip(expects)
                .filter(|(got, &expect)| **got != Some(expect))
                .count() as u64;
        });
        (calls * BATCH as u64, wrong)
    });
    let wrong: u64 = counts.iter().map(|c| c.1).sum();
    if wrong > 0 {
        return Err(format!("{wrong} wrong answers (get-batch)"));
    }
    let ops: u64 = counts.iter().map(|c| c.0).sum();
    Ok(ops as f64 / elapsed.as_secs_f64() / 1e6)
}

fn measure_kind(
    kind: BlobKind,
    shape: Shape,
    workloads: &[BlobWorkload],
    args: &SizesArgs,
    workers: &Workers,
    round: usize,
) -> Result<Vec<f64>, String> {
    let w = workloads;
    match kind {
        BlobKind::Floe => {
            measure::<floe::Map<Bytes, Bytes, AnyHash>>(shape, w, args, workers, round)
        }
        BlobKind::FloeNamespaced => measure::<Namespaced>(shape, w, args, workers, round),
        BlobKind::Papaya => {
            measure::<papaya::HashMap<Bytes, Bytes, AnyHash>>(shape, w, args, workers, round)
        }
        BlobKind::Scc => {
            measure::<scc::HashMap<Bytes, Bytes, AnyHash>>(shape, w, args, workers, round)
        }
        BlobKind::SccIndex => {
            measure::<scc::HashIndex<Bytes, Bytes, AnyHash>>(shape, w, args, workers, round)
        }
        BlobKind::Dashmap => {
            measure::<dashmap::DashMap<Bytes, Bytes, AnyHash>>(shape, w, args, workers, round)
        }
        BlobKind::FloePersistent => measure::<PersistentBlobs>(shape, w, args, workers, round),
    }
}

/// Why `sizes` stopped: bad flags (exit code 2) or a failed run (a wrong answer).
pub enum SizesError {
    Usage(String),
    Run(String),
}

/// The keys that fit the budget at this entry size (rounded down to a power of two).
fn keys_for(args: &SizesArgs, key_bytes: usize, value_bytes: usize) -> usize {
    // Two allocations per entry (key and value), each with allocator overhead, plus the
    // map's own slot: about 64 bytes beyond the payload.
    let per_entry = key_bytes + value_bytes + 64;
    let budget = (args.budget_gib * (1u64 << 30) as f64) as usize;
    let fit = (budget / per_entry).max(1);
    let wanted = (args.keys as usize).min(fit);
    1 << (usize::BITS - 1 - wanted.leading_zeros())
}

/// One result row's cells (a median per map, `-` for one a map sat out) and floe's ratio to
/// the best peer that ran (`-` without floe or a peer). Shared with `ycsb`.
pub(crate) fn row_cells(maps: &[BlobKind], medians: &[f64]) -> (String, String) {
    let floe = maps
        .iter()
        .position(|&m| m == BlobKind::Floe)
        .map(|i| medians[i]);
    let best_peer = maps
        .iter()
        .zip(medians)
        .filter(|(m, x)| {
            !matches!(
                m,
                BlobKind::Floe | BlobKind::FloeNamespaced | BlobKind::FloePersistent
            ) && !x.is_nan()
        })
        .map(|(_, &x)| x)
        .fold(None, |best: Option<f64>, x| {
            Some(best.map_or(x, |b| b.max(x)))
        });
    let ratio = match (floe, best_peer) {
        (Some(f), Some(p)) if p > 0.0 => format!("{:.2}", f / p),
        _ => "-".into(),
    };
    let cells: Vec<String> = medians
        .iter()
        .map(|x| {
            if x.is_nan() {
                "-".into()
            } else {
                format!("{x:.2}")
            }
        })
        .collect();
    (cells.join("\t"), ratio)
}

pub fn main(args: SizesArgs) -> Result<(), SizesError> {
    let usage = |m: &str| Err(SizesError::Usage(m.to_string()));
    if args.key_bytes.iter().any(|&k| k < 8) {
        return usage("--key-bytes: keys must be at least 8 bytes (they hold the key's index)");
    }
    if let Some(refusal) = args.run.refusal() {
        return usage(refusal);
    }
    if args.value_bytes.is_empty() && args.key_bytes.is_empty() || args.workloads.is_empty() {
        return usage("nothing to measure");
    }
    if !positive(args.budget_gib) {
        return usage("--budget-gib must be positive");
    }
    let workers = Workers::new();
    let shapes = args
        .value_bytes
        .iter()
        .map(|&v| ("value", 8, v))
        .chain(args.key_bytes.iter().map(|&k| ("key", k, 8)));
    println!(
        "# floe-bench sizes: {} threads, {} s per run, median of {} (maps alternated), hasher ahash; Mops/s",
        args.run.threads, args.run.seconds, args.run.repeat
    );
    let names: Vec<String> = args.run.maps.iter().map(|m| format!("{m:?}")).collect();
    println!(
        "sweep\tkey_B\tvalue_B\tkeys\tworkload\t{}\tfloe/best-peer",
        names.join("\t")
    );
    for (sweep, key_bytes, value_bytes) in shapes {
        let shape = Shape {
            key_bytes,
            value_bytes,
            keys: keys_for(&args, key_bytes, value_bytes),
        };
        // samples[map][workload] over the rounds.
        let mut samples = vec![vec![Vec::new(); args.workloads.len()]; args.run.maps.len()];
        for round in 0..args.run.repeat {
            for step in 0..args.run.maps.len() {
                let m = (step + round) % args.run.maps.len();
                let mops = measure_kind(
                    args.run.maps[m],
                    shape,
                    &args.workloads,
                    &args,
                    &workers,
                    round,
                )
                .map_err(SizesError::Run)?;
                for (w, x) in mops.into_iter().enumerate() {
                    samples[m][w].push(x);
                }
            }
        }
        for (w, workload) in args.workloads.iter().enumerate() {
            let medians: Vec<f64> = samples.iter().map(|by_w| median(by_w[w].clone())).collect();
            let (cells, ratio) = row_cells(&args.run.maps, &medians);
            println!(
                "{sweep}\t{key_bytes}\t{value_bytes}\t{}\t{workload:?}\t{}\t{ratio}",
                shape.keys, cells
            );
        }
        if args.memory {
            // Bytes per entry beyond the payload; the last column is floe's minus the
            // leanest peer's (the bound: at most 16).
            let overheads = args
                .run
                .maps
                .iter()
                .map(|&kind| overhead_per_entry(kind, shape))
                .collect::<Result<Vec<f64>, String>>()
                .map_err(SizesError::Run)?;
            let floe = args
                .run
                .maps
                .iter()
                .position(|&m| m == BlobKind::Floe)
                .map(|i| overheads[i]);
            let leanest_peer = args
                .run
                .maps
                .iter()
                .zip(&overheads)
                .filter(|(m, _)| {
                    !matches!(
                        m,
                        BlobKind::Floe | BlobKind::FloeNamespaced | BlobKind::FloePersistent
                    )
                })
                .map(|(_, &x)| x)
                .reduce(f64::min);
            let difference = match (floe, leanest_peer) {
                (Some(f), Some(p)) => format!("{:+.1}", f - p),
                _ => "-".into(),
            };
            let cells: Vec<String> = overheads.iter().map(|x| format!("{x:.1}")).collect();
            println!(
                "{sweep}\t{key_bytes}\t{value_bytes}\t{}\tB/entry over payload\t{}\t{difference}",
                shape.keys,
                cells.join("\t")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn keys_are_distinct_and_sized_and_values_carry_their_index() {
        let keys: std::collections::HashSet<Bytes> = (0..1000).map(|i| key(i, 24)).collect();
        assert_eq!(keys.len(), 1000);
        assert!(keys.iter().all(|k| k.len() == 24));
        assert_eq!(first_word(&value(77, 1500)), 77);
        assert_eq!(first_word(&value(77, 4)), 77);
        // Lookups by `&[u8]` must find owned `Box<[u8]>` keys: both hash alike.
        let hasher = AnyHash::Ahash(&AHASH);
        let owned: Bytes = b"some key".as_slice().into();
        assert_eq!(
            hasher.hash_one(&owned),
            hasher.hash_one(b"some key".as_slice())
        );
    }

    #[test]
    fn every_map_answers_the_workloads() {
        let args = SizesArgs {
            value_bytes: vec![],
            key_bytes: vec![],
            keys: 1 << 10,
            budget_gib: 0.01,
            run: BlobRunArgs {
                threads: 2,
                seconds: 0.02,
                repeat: 1,
                maps: vec![],
            },
            workloads: vec![],
            memory: false,
        };
        let workers = Workers::new();
        let shape = Shape {
            key_bytes: 16,
            value_bytes: 40,
            keys: 1 << 10,
        };
        for kind in [
            BlobKind::Floe,
            BlobKind::FloeNamespaced,
            BlobKind::Papaya,
            BlobKind::Scc,
            BlobKind::SccIndex,
            BlobKind::Dashmap,
            BlobKind::FloePersistent,
        ] {
            let workloads = [
                BlobWorkload::Get,
                BlobWorkload::GetRead,
                BlobWorkload::Insdel,
                BlobWorkload::GetBatch,
            ];
            let mops = measure_kind(kind, shape, &workloads, &args, &workers, 0).unwrap();
            assert!(mops.iter().all(|&x| x > 0.0), "{kind:?} {mops:?}");
        }
    }
}

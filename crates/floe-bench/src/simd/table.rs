//! The table generator (real cuckoo insertion) and the query streams.
//!
//! # Insertion
//!
//! A key goes to a free slot of one of its N buckets if there is one. Otherwise a breadth-first
//! search over displacements looks for the shortest chain "the occupant of slot s of bucket b
//! moves to another of its buckets, b'" that ends at a bucket with a free slot, visiting each
//! bucket at most once and giving up after [`MAX_SEARCH`] buckets. The chain is then applied
//! from its free end backwards, so every key is in one of its own buckets at every step. The
//! first key that finds no chain ends the build: the table reports the load factor it reached
//! and why it stopped (near the layout's threshold the search fails, e.g. ~50% for (2,1),
//! ~91% for (3,1), ~93% for (2,4) on the paper's Fig. 2).
//!
//! # Queries
//!
//! Each thread gets its own stream of [`QUERY_BLOCK`] keys, made before timing: a fraction
//! `hit_rate` are inserted keys chosen by the access pattern (ranks index the insertion order,
//! whose keys are pseudo-random, so popular keys land in random buckets), the others are keys
//! never inserted. The stream is short enough to stay in L1/L2 next to the table, long enough
//! that no branch predictor learns it; kernels cycle over it.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use super::layout::{key_of, payload_of, Geometry, TAIL_PADDING};
use crate::{
    dist::Dist,
    keys::{mix, Rng},
};

/// Buckets a displacement search visits before it gives up.
pub const MAX_SEARCH: usize = 4096;
/// Queries per thread stream.
pub const QUERY_BLOCK: usize = 16 * 1024;

/// Bytes aligned to a cache line (to 2 MiB, advised for huge pages, from 2 MiB up), zeroed.
struct Memory {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: `Memory` owns its allocation; shared references only read it.
unsafe impl Send for Memory {}
// SAFETY: as above; mutation needs `&mut Memory`.
unsafe impl Sync for Memory {}

impl Memory {
    fn zeroed(bytes: usize) -> Result<Memory, String> {
        const HUGE: usize = 2 << 20;
        let align = if bytes >= HUGE { HUGE } else { 64 };
        let layout = std::alloc::Layout::from_size_align(bytes.next_multiple_of(align), align)
            .map_err(|e| format!("table of {bytes} bytes: {e}"))?;
        // SAFETY: the layout has a non-zero size (tables are at least MIN_TABLE_BYTES).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(format!("could not allocate a table of {bytes} bytes"));
        }
        if align == HUGE {
            // SAFETY: the range is exactly our allocation, 2 MiB aligned; advice cannot
            // change its contents. Failure (no THP) is harmless, so its result is ignored.
            unsafe { libc::madvise(ptr.cast(), layout.size(), libc::MADV_HUGEPAGE) };
        }
        Ok(Memory { ptr, layout })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `layout.size()` initialised (zeroed) bytes while `self`
        // lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// A generated read-only cuckoo table.
pub struct Table {
    pub geometry: Geometry,
    memory: Memory,
    /// Items inserted (key numbers `0..items`).
    pub items: usize,
    /// Items asked for (the requested load factor times the slots).
    pub asked: usize,
    /// Why the build stopped short of `asked`, if it did.
    pub stopped: Option<String>,
}

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("geometry", &self.geometry)
            .field("items", &self.items)
            .field("asked", &self.asked)
            .finish()
    }
}

fn read_word(bytes: &[u8], offset: usize, width: usize) -> u64 {
    let mut word = [0u8; 8];
    word[..width].copy_from_slice(&bytes[offset..offset + width]);
    u64::from_le_bytes(word)
}

fn write_word(bytes: &mut [u8], offset: usize, width: usize, value: u64) {
    bytes[offset..offset + width].copy_from_slice(&value.to_le_bytes()[..width]);
}

/// One bucket of a displacement search: reached from slot `parent_slot` of node `parent`.
#[derive(Clone, Copy)]
struct Node {
    bucket: usize,
    parent: usize,
    parent_slot: usize,
}

const ROOT: usize = usize::MAX;

impl Table {
    /// Build a table of `geometry` holding `load_factor` of its slots, or as many as cuckoo
    /// insertion manages.
    pub fn build(geometry: Geometry, load_factor: f64) -> Result<Table, String> {
        let asked = (geometry.slots() as f64 * load_factor).floor() as usize;
        let memory = Memory::zeroed(geometry.table_bytes() + TAIL_PADDING)?;
        let mut table = Table {
            geometry,
            memory,
            items: 0,
            asked,
            stopped: None,
        };
        let mut visited = vec![0u32; geometry.buckets];
        let mut nodes = Vec::with_capacity(MAX_SEARCH);
        for i in 0..asked as u64 {
            let (key, payload) = (key_of(geometry.sizes, i), payload_of(geometry.sizes, i));
            if !table.insert(key, payload, i as u32 + 1, &mut visited, &mut nodes) {
                table.stopped = Some(format!(
                    "item {} of {asked} found no free slot within {MAX_SEARCH} buckets of \
                     displacement: this layout's limit",
                    i + 1
                ));
                break;
            }
            table.items += 1;
        }
        Ok(table)
    }

    /// Fraction of the slots holding an item.
    pub fn load_factor(&self) -> f64 {
        self.items as f64 / self.geometry.slots() as f64
    }

    /// The table's bytes, with the tail padding kernels may read.
    pub fn bytes(&self) -> &[u8] {
        self.memory.bytes()
    }

    pub fn key(&self, bucket: usize, slot: usize) -> u64 {
        let g = &self.geometry;
        read_word(
            self.bytes(),
            g.key_offset(bucket, slot),
            g.sizes.key_bytes(),
        )
    }

    pub fn payload(&self, bucket: usize, slot: usize) -> u64 {
        let g = &self.geometry;
        read_word(
            self.bytes(),
            g.payload_offset(bucket, slot),
            g.sizes.payload_bytes(),
        )
    }

    fn set(&mut self, bucket: usize, slot: usize, key: u64, payload: u64) {
        let g = self.geometry;
        let bytes = self.memory.bytes_mut();
        write_word(bytes, g.key_offset(bucket, slot), g.sizes.key_bytes(), key);
        write_word(
            bytes,
            g.payload_offset(bucket, slot),
            g.sizes.payload_bytes(),
            payload,
        );
    }

    fn free_slot(&self, bucket: usize) -> Option<usize> {
        (0..self.geometry.layout.slots).find(|&s| self.key(bucket, s) == 0)
    }

    /// Insert with displacement (module docs). `stamp` marks this search's visited buckets.
    fn insert(
        &mut self,
        key: u64,
        payload: u64,
        stamp: u32,
        visited: &mut [u32],
        nodes: &mut Vec<Node>,
    ) -> bool {
        let g = self.geometry;
        nodes.clear();
        for way in 0..g.layout.ways {
            let bucket = g.bucket(way, key);
            if let Some(slot) = self.free_slot(bucket) {
                self.set(bucket, slot, key, payload);
                return true;
            }
            if visited[bucket] != stamp {
                visited[bucket] = stamp;
                nodes.push(Node {
                    bucket,
                    parent: ROOT,
                    parent_slot: 0,
                });
            }
        }
        let mut next = 0;
        while next < nodes.len() {
            let node = nodes[next];
            for slot in 0..g.layout.slots {
                let occupant = self.key(node.bucket, slot);
                for way in 0..g.layout.ways {
                    let to = g.bucket(way, occupant);
                    if visited[to] == stamp {
                        continue;
                    }
                    if let Some(free) = self.free_slot(to) {
                        self.apply(nodes, next, slot, to, free);
                        let (root_bucket, root_slot) = self.vacated(nodes, next, slot);
                        self.set(root_bucket, root_slot, key, payload);
                        return true;
                    }
                    if nodes.len() == MAX_SEARCH {
                        return false;
                    }
                    visited[to] = stamp;
                    nodes.push(Node {
                        bucket: to,
                        parent: next,
                        parent_slot: slot,
                    });
                }
            }
            next += 1;
        }
        false
    }

    /// Move the chain ending at (`nodes[at]`, `slot`) -> (`to`, `free`) one step along,
    /// from the free end back to the root.
    fn apply(&mut self, nodes: &[Node], at: usize, slot: usize, to: usize, free: usize) {
        let (mut from_bucket, mut from_slot) = (nodes[at].bucket, slot);
        let (mut into_bucket, mut into_slot) = (to, free);
        let mut node = at;
        loop {
            let (k, p) = (
                self.key(from_bucket, from_slot),
                self.payload(from_bucket, from_slot),
            );
            self.set(into_bucket, into_slot, k, p);
            (into_bucket, into_slot) = (from_bucket, from_slot);
            let parent = nodes[node].parent;
            if parent == ROOT {
                return;
            }
            (from_bucket, from_slot) = (nodes[parent].bucket, nodes[node].parent_slot);
            node = parent;
        }
    }

    /// The root slot the chain from (`nodes[at]`, `slot`) vacated.
    fn vacated(&self, nodes: &[Node], at: usize, slot: usize) -> (usize, usize) {
        let (mut node, mut slot) = (at, slot);
        while nodes[node].parent != ROOT {
            slot = nodes[node].parent_slot;
            node = nodes[node].parent;
        }
        (nodes[node].bucket, slot)
    }
}

/// An access pattern over the inserted keys.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Pattern {
    /// Every inserted key equally likely.
    Uniform,
    /// A memcached-style skewed stream: key popularity Zipf with theta 0.99, what mutilate's
    /// `--popularity=zipf:0.99` generates (the paper plugs mutilate in for its skewed runs).
    Mutilate,
    /// Any of floe-bench's distributions (`zipf:THETA`, `hot:KEYS:PERCENT`).
    Dist(Dist),
}

impl Pattern {
    fn dist(self) -> Dist {
        match self {
            Pattern::Uniform => Dist::Uniform,
            Pattern::Mutilate => Dist::Zipf { theta: 0.99 },
            Pattern::Dist(d) => d,
        }
    }

    pub fn is_skewed(self) -> bool {
        self.dist() != Dist::Uniform
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Uniform => write!(f, "uniform"),
            Pattern::Mutilate => write!(f, "mutilate"),
            Pattern::Dist(d) => write!(f, "{d}"),
        }
    }
}

impl FromStr for Pattern {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "uniform" => Ok(Pattern::Uniform),
            "mutilate" | "skewed" => Ok(Pattern::Mutilate),
            other => other.parse().map(Pattern::Dist).map_err(|e| {
                format!("{e}; patterns: uniform, mutilate (skewed), zipf:THETA, hot:KEYS:PERCENT")
            }),
        }
    }
}

impl From<Pattern> for String {
    fn from(p: Pattern) -> String {
        p.to_string()
    }
}

impl TryFrom<String> for Pattern {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

/// One thread's queries: `wide` for every kernel, `narrow` (the same keys as u32) for the
/// vertical kernels of 16- and 32-bit keys, which load keys into 32-bit lanes.
#[derive(Clone, Debug)]
pub struct Queries {
    pub wide: Vec<u64>,
    pub narrow: Vec<u32>,
}

impl Queries {
    pub fn new(wide: Vec<u64>) -> Queries {
        let narrow = wide.iter().map(|&k| k as u32).collect();
        Queries { wide, narrow }
    }

    pub fn len(&self) -> usize {
        self.wide.len()
    }
}

/// Keys that are in no slot of `table`, for misses: key numbers past the inserted ones at 32
/// and 64 bits; for 16-bit fingerprints, the values absent from the table (if every value is
/// present, misses are impossible and the observed hit rate says so).
fn miss_keys(table: &Table, count: usize, rng: &mut Rng) -> Vec<u64> {
    let sizes = table.geometry.sizes;
    if sizes.key_bits > 16 {
        return (0..count)
            .map(|_| key_of(sizes, table.items as u64 + rng.below(1 << 24)))
            .collect();
    }
    let mut present = vec![false; 1 << 16];
    for i in 0..table.items as u64 {
        present[key_of(sizes, i) as usize] = true;
    }
    let absent: Vec<u64> = (1..1u64 << 16).filter(|&k| !present[k as usize]).collect();
    (0..count)
        .map(|_| match absent.len() {
            0 => 1 + rng.below(65535),
            n => absent[rng.below(n as u64) as usize],
        })
        .collect()
}

/// `threads` query streams of `len` keys over `table` (module docs).
pub fn queries(
    table: &Table,
    pattern: Pattern,
    hit_rate: f64,
    threads: usize,
    len: usize,
    seed: u64,
) -> Vec<Queries> {
    (0..threads)
        .map(|t| {
            let seed = mix(seed ^ (t as u64 + 1));
            let mut rng = Rng(seed);
            let mut sampler = pattern.dist().sampler(table.items.max(1) as u64, seed);
            let misses = miss_keys(table, len, &mut rng);
            let wide = (0..len)
                .map(|q| {
                    let hit = table.items > 0 && (rng.next() as f64 / u64::MAX as f64) < hit_rate;
                    if hit {
                        key_of(table.geometry.sizes, sampler.next_index())
                    } else {
                        misses[q]
                    }
                })
                .collect();
            Queries::new(wide)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(layout: &str, sizes: &str, bytes: u64, lf: f64) -> Table {
        let g = Geometry::new(layout.parse().unwrap(), sizes.parse().unwrap(), bytes).unwrap();
        Table::build(g, lf).unwrap()
    }

    /// Every inserted key sits in one of its own buckets, exactly once, with its payload.
    fn check_placement(table: &Table) {
        let g = table.geometry;
        let mut seen = std::collections::HashMap::new();
        for b in 0..g.buckets {
            for s in 0..g.layout.slots {
                let k = table.key(b, s);
                if k != 0 {
                    assert!((0..g.layout.ways).any(|w| g.bucket(w, k) == b));
                    *seen.entry(k).or_insert(0) += 1;
                }
            }
        }
        assert_eq!(seen.values().sum::<usize>(), table.items);
        if g.sizes.key_bits > 16 {
            for i in 0..table.items as u64 {
                assert_eq!(seen.get(&key_of(g.sizes, i)), Some(&1), "key number {i}");
            }
        }
    }

    #[test]
    fn cuckoo_reaches_the_layouts_load_factors() {
        for (layout, lf) in [("2x4", 0.9), ("3x1", 0.88), ("2x8", 0.95), ("4x1", 0.95)] {
            let table = build(layout, "32,32", 64 << 10, lf);
            assert_eq!(
                table.items, table.asked,
                "{layout} at {lf}: {:?}",
                table.stopped
            );
            assert!(table.stopped.is_none());
            check_placement(&table);
        }
    }

    #[test]
    fn two_way_cuckoo_stops_near_half_and_says_why() {
        let table = build("2x1", "32,32", 64 << 10, 0.9);
        assert!(table.stopped.as_deref().unwrap().contains("limit"));
        let lf = table.load_factor();
        assert!((0.3..0.6).contains(&lf), "(2,1) reached {lf}");
        check_placement(&table);
    }

    #[test]
    fn sixteen_bit_fingerprints_and_odd_bucket_sizes_build() {
        let table = build("2x8", "16,32", 512 << 10, 0.9);
        assert_eq!(table.items, table.asked);
        check_placement(&table);
        let table = build("3x2", "64,16", 32 << 10, 0.85);
        assert_eq!(table.items, table.asked);
        check_placement(&table);
    }

    #[test]
    fn queries_hit_at_the_asked_rate() {
        let table = build("2x4", "32,32", 64 << 10, 0.9);
        let inserted: std::collections::HashSet<u64> = (0..table.items as u64)
            .map(|i| key_of(table.geometry.sizes, i))
            .collect();
        for pattern in [Pattern::Uniform, Pattern::Mutilate] {
            let streams = queries(&table, pattern, 0.9, 2, 20_000, 7);
            assert_ne!(streams[0].wide, streams[1].wide);
            for q in &streams {
                let hits = q.wide.iter().filter(|k| inserted.contains(k)).count();
                let rate = hits as f64 / q.len() as f64;
                assert!((0.88..0.92).contains(&rate), "{pattern}: {rate}");
                assert!(q.wide.iter().zip(&q.narrow).all(|(&w, &n)| w == n as u64));
            }
        }
        let skewed = &queries(&table, Pattern::Mutilate, 1.0, 1, 20_000, 7)[0];
        let top = key_of(table.geometry.sizes, 0);
        let share = skewed.wide.iter().filter(|&&k| k == top).count();
        assert!(share > 1000, "zipf 0.99's top key drew {share} of 20000");
    }

    #[test]
    fn patterns_parse() {
        assert_eq!("skewed".parse::<Pattern>().unwrap(), Pattern::Mutilate);
        assert_eq!(
            "zipf:0.5".parse::<Pattern>().unwrap().to_string(),
            "zipf:0.5"
        );
        assert!("nope".parse::<Pattern>().unwrap_err().contains("mutilate"));
    }
}

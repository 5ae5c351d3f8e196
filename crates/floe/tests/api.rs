//! The public surface: typed keys and values, sizing, and every way a call can be refused.

mod common;

use std::hash::{BuildHasher, Hasher};

use common::{SplitMix, WordHash};
use floe::{
    hash::{Crc32, Mix64, WyHash},
    Backend, Error, FlatMap, Insert, Layout, ResizeMode, Taken,
};

#[test]
fn typed_keys_and_values_round_trip() {
    let m = FlatMap::<i8, f64>::try_with_capacity(300).unwrap();
    for k in i8::MIN..=i8::MAX {
        assert!(m
            .try_insert_new(k, f64::from(k) / 2.0)
            .unwrap()
            .is_inserted());
    }
    for k in i8::MIN..=i8::MAX {
        assert_eq!(m.get(&k), Some(f64::from(k) / 2.0));
    }
    let chars = FlatMap::<char, bool>::try_with_capacity(10).unwrap();
    let _ = chars.try_insert_new('é', true).unwrap();
    let _ = chars.try_insert_new('\u{10FFFF}', false).unwrap();
    assert_eq!(chars.get(&'é'), Some(true));
    assert_eq!(chars.get(&'\u{10FFFF}'), Some(false));
    assert_eq!(chars.get(&'e'), None);
}

#[test]
fn every_word_is_a_valid_key() {
    // Including zero (the value of a fresh slot), all-ones, and the engine's dead-key
    // candidates.
    let m = FlatMap::<u64, u64>::builder()
        .bins(2)
        .link_buckets(4)
        .build()
        .unwrap();
    let keys = [
        0,
        u64::MAX,
        0xdead_f10e_dead_f10e,
        0xdead_f10e_dead_f10f,
        1 << 63,
    ];
    for (i, &k) in keys.iter().enumerate() {
        assert_eq!(
            m.try_insert_new(k, i as u64).unwrap(),
            Insert::Inserted,
            "key {k:#x}"
        );
    }
    for (i, &k) in keys.iter().enumerate() {
        assert_eq!(m.get(&k), Some(i as u64));
        assert_eq!(m.remove(&k), Some(i as u64));
        assert_eq!(m.get(&k), None);
    }
}

#[test]
#[cfg_attr(miri, ignore = "large table")]
fn with_capacity_holds_that_many_random_keys() {
    for (n, seed) in [
        (1usize, 1u64),
        (10, 2),
        (100, 3),
        (1_000, 4),
        (10_000, 5),
        (200_000, 6),
    ] {
        for trial in 0..if n < 1000 { 50 } else { 3 } {
            let m = FlatMap::<u64, u64>::try_with_capacity(n).unwrap();
            let mut rng = SplitMix(seed * 1000 + trial);
            for i in 0..n {
                let k = rng.next();
                assert!(
                    m.try_insert_new(k, i as u64).is_ok(),
                    "capacity {n}, trial {trial}: Full after {i} keys"
                );
            }
            assert!(m.capacity() >= n);
        }
    }
}

/// `capacity` means std's: keys the map holds before its table grows, in both layouts and
/// through `Map`; at least what `with_capacity` and `reserve` asked for. (It counted slots in
/// the default layout, about twice the keys a table holds, and keys in the dense one.)
#[test]
fn capacity_is_the_keys_held_before_growing() {
    for layout in [Layout::Bins, Layout::Dense] {
        for n in [100, 1_000, 30_000] {
            let m = FlatMap::<u64, u64>::builder()
                .layout(layout)
                .capacity(n)
                .build()
                .unwrap();
            let capacity = m.capacity();
            assert!(capacity >= n, "{layout:?} {n}: capacity {capacity}");
            let slots = m.stats().slots;
            assert!(
                capacity < slots,
                "{layout:?} {n}: {capacity} of {slots} slots"
            );
            let mut rng = SplitMix(n as u64);
            let bins = m.stats().bins;
            for i in 0..capacity as u64 {
                m.insert(rng.next(), i);
            }
            assert_eq!(
                m.stats().bins,
                bins,
                "{layout:?} {n}: grew before its capacity"
            );
            m.reserve(n).unwrap();
            assert!(m.capacity() >= m.len() + n, "{layout:?} {n}: after reserve");
            let any = floe::Map::<u64, u64>::builder()
                .layout(layout)
                .capacity(n)
                .build()
                .unwrap();
            assert!(any.capacity() >= n, "{layout:?} {n}: Map");
        }
    }
}

#[test]
fn full_table_answers_full_and_loses_nothing() {
    // One link bucket for two bins: 3 + 3 + 4 slots, and no growth.
    let m = FlatMap::<u64, u64>::builder()
        .bins(2)
        .link_buckets(1)
        .max_bins(2)
        .hasher(Mix64::with_seed(9))
        .build()
        .unwrap();
    let mut stored = Vec::new();
    let mut full = 0;
    for k in 0..100u64 {
        match m.try_insert_new(k, k + 1) {
            Ok(Insert::Inserted) => stored.push(k),
            Err(Error::Full) => full += 1,
            other => panic!("{other:?}"),
        }
        // Upsert and fetch_add of an absent key are refused the same way.
        if !stored.contains(&k) {
            assert_eq!(m.try_insert(k, 0), Err(Error::Full));
            assert_eq!(m.try_fetch_add(k, 1), Err(Error::Full));
            assert_eq!(m.get(&k), None);
        }
    }
    assert!(full > 0);
    assert!(stored.len() <= 10 && stored.len() >= 6, "{}", stored.len());
    for &k in &stored {
        assert_eq!(m.get(&k), Some(k + 1), "a stored key changed after Full");
        // Operations on present keys still work in a full table.
        assert_eq!(m.try_insert(k, k + 2), Ok(Some(k + 1)));
        assert_eq!(m.try_fetch_add(k, 1), Ok(Some(k + 2)));
    }
    assert_eq!(m.len(), stored.len());
    assert_eq!(m.check_invariants(), stored.len());
    // Removing frees room at once.
    let gone = stored.pop().unwrap();
    assert_eq!(m.remove(&gone), Some(gone + 3));
    let newcomer = (100..).find(|&k| m.try_insert_new(k, 0).is_ok_and(|i| i.is_inserted()));
    assert!(newcomer.is_some());
    assert_eq!(common::live_tables(&m), 1);
    assert_eq!(m.reserve(1000), Err(Error::CapacityOverflow));
    assert_eq!(
        Error::Full.to_string(),
        "the table is full for this key: its bin has no free slot, no link bucket is left, and the map may not grow (max_bins)"
    );
}

#[test]
fn builder_refuses_bad_configurations() {
    let b = || FlatMap::<u64, u64>::builder();
    assert!(matches!(b().bins(1).build(), Err(Error::InvalidConfig(_))));
    assert!(matches!(b().bins(0).build(), Err(Error::InvalidConfig(_))));
    assert!(matches!(
        b().bins_per_link(0).build(),
        Err(Error::InvalidConfig(_))
    ));
    assert_eq!(
        b().capacity(usize::MAX).build().err(),
        Some(Error::CapacityOverflow)
    );
    assert_eq!(
        b().bins(usize::MAX / 2).build().err(),
        Some(Error::CapacityOverflow)
    );
    assert_eq!(
        b().link_buckets(u32::MAX as usize).build().err(),
        Some(Error::CapacityOverflow)
    );
    for backend in [Backend::Avx2, Backend::Avx512] {
        if !backend.is_supported() {
            assert_eq!(
                b().backend(backend).build().err(),
                Some(Error::UnsupportedBackend(backend))
            );
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "mmap")]
fn impossible_allocations_are_refused() {
    // 2^50 keys need more link buckets than a 32-bit link field can name.
    assert_eq!(
        FlatMap::<u64, u64>::try_with_capacity(1 << 50).err(),
        Some(Error::CapacityOverflow)
    );
    // 2^42 bins are 256 TiB: more than the 128 TiB a process can map.
    match FlatMap::<u64, u64>::builder()
        .bins(1 << 42)
        .link_buckets(0)
        .build()
    {
        Err(Error::AllocationFailed { bytes }) => assert_eq!(bytes, 64 << 42),
        other => panic!("{other:?}"),
    }
}

#[derive(Clone, Copy)]
struct Constant;
struct ConstantHasher;
impl Hasher for ConstantHasher {
    fn write(&mut self, _: &[u8]) {}
    fn finish(&self) -> u64 {
        42
    }
}
impl BuildHasher for Constant {
    type Hasher = ConstantHasher;
    fn build_hasher(&self) -> ConstantHasher {
        ConstantHasher
    }
}

#[test]
fn degenerate_hashers_are_refused() {
    let r = FlatMap::<u64, u64>::builder().hasher(Constant).build();
    assert_eq!(r.err(), Some(Error::DegenerateHasher));
}

#[test]
fn every_hasher_gives_a_working_map() {
    fn exercise<S: BuildHasher>(m: FlatMap<u64, u64, S>) {
        for k in 0..500u64 {
            assert!(m.try_insert_new(k * 7919, k).unwrap().is_inserted());
        }
        for k in 0..500u64 {
            assert_eq!(m.get(&(k * 7919)), Some(k));
        }
    }
    let n = 1000;
    exercise(FlatMap::<u64, u64>::builder().capacity(n).build().unwrap());
    exercise(
        FlatMap::<u64, u64>::builder()
            .capacity(n)
            .hasher(WyHash::new())
            .build()
            .unwrap(),
    );
    exercise(
        FlatMap::<u64, u64>::builder()
            .capacity(n)
            .hasher(Crc32::new())
            .build()
            .unwrap(),
    );
    exercise(
        FlatMap::<u64, u64>::builder()
            .capacity(n)
            .hasher(std::collections::hash_map::RandomState::new())
            .build()
            .unwrap(),
    );
}

#[test]
fn stats_describe_the_table() {
    let m = FlatMap::<u64, u64>::builder()
        .bins(1000)
        .link_buckets(10)
        .build()
        .unwrap();
    let s = m.stats();
    assert_eq!((s.bins, s.link_buckets, s.link_buckets_used), (1000, 10, 0));
    assert!(s.allocated_bytes >= 1010 * 64);
    assert_eq!(s.slots, 3040);
    // Keys the table is sized for: 1.75 a bin (`capacity(n)` builds n / 1.75 bins).
    assert_eq!(m.capacity(), 1750);
    assert_eq!(format!("{m:?}"), "{}");
}

/// A map whose table was faulted in when built (`populate`) is the map it would be without:
/// same geometry, empty, and it fills, grows and answers alike, in both layouts and for `Map`.
#[test]
fn a_populated_map_is_an_ordinary_map() {
    for layout in [floe::Layout::Bins, floe::Layout::Dense] {
        let build = |populate: bool| {
            FlatMap::<u64, u64>::builder()
                .layout(layout)
                .capacity(100_000)
                .populate(populate)
                .build()
                .unwrap()
        };
        let (plain, populated) = (build(false), build(true));
        assert_eq!(plain.stats(), populated.stats(), "{layout:?}");
        assert!(populated.is_empty());
        for key in 0..300_000u64 {
            assert_eq!(populated.insert(key, key + 1), None);
        }
        assert_eq!(populated.len(), 300_000);
        assert!((0..300_000u64).all(|key| populated.get(&key) == Some(key + 1)));
    }
    let map = floe::Map::<String, u64>::builder()
        .capacity(10_000)
        .populate(true)
        .build()
        .unwrap();
    let pin = map.pin();
    assert_eq!(pin.insert("a".to_string(), 1), None);
    assert_eq!(pin.get("a"), Some(&1));
}

#[test]
fn a_tiny_map_grows_to_hold_everything_and_frees_its_old_tables() {
    for mode in [ResizeMode::Incremental, ResizeMode::Blocking] {
        let m = FlatMap::<u64, u64>::builder()
            .bins(2)
            .resize_mode(mode)
            .hasher(Mix64::with_seed(3))
            .build()
            .unwrap();
        let n = 50_000u64;
        for k in 0..n {
            match k % 3 {
                0 => assert_eq!(m.try_insert_new(k, k), Ok(Insert::Inserted)),
                1 => assert_eq!(m.try_insert(k, k), Ok(None)),
                _ => assert_eq!(m.try_fetch_add(k, k), Ok(None)),
            }
            if k % 7 == 0 {
                assert_eq!(m.remove(&(k / 2)), Some(k / 2), "{mode:?} key {}", k / 2);
                assert_eq!(m.try_insert_new(k / 2, k / 2), Ok(Insert::Inserted));
            }
        }
        assert_eq!(m.check_invariants(), n as usize, "{mode:?}");
        for k in 0..n {
            assert_eq!(m.get(&k), Some(k), "{mode:?} key {k}");
        }
        let stats = m.stats();
        assert!(stats.bins >= 10_000, "{stats:?}");
        assert!(!stats.migrating);
        assert_eq!(common::live_tables(&m), 1, "every replaced table was freed");
        assert_eq!(m.len(), n as usize);
    }
}

#[test]
fn reserve_grows_once_up_front() {
    let m = FlatMap::<u64, u64>::try_with_capacity(16).unwrap();
    assert!(m.try_insert_new(1, 1).unwrap().is_inserted());
    m.reserve(1 << 20).unwrap();
    let bins = m.stats().bins;
    assert!(m.capacity() >= 1 << 20);
    for k in 2..100_000u64 {
        assert!(m.try_insert_new(k, k).unwrap().is_inserted());
    }
    assert_eq!(
        m.stats().bins,
        bins,
        "no growth after a reserve that covers the keys"
    );
    assert_eq!(m.get(&1), Some(1));
    assert_eq!(common::live_tables(&m), 1);
    assert_eq!(m.reserve(usize::MAX), Err(Error::CapacityOverflow));
}

#[test]
fn shrink_to_fit_moves_the_keys_into_fewer_bins() {
    for mode in [ResizeMode::Incremental, ResizeMode::Blocking] {
        let m = FlatMap::<u64, u64>::builder()
            .bins(2)
            .resize_mode(mode)
            .hasher(Mix64::with_seed(5))
            .build()
            .unwrap();
        for k in 0..100_000u64 {
            assert!(m.try_insert_new(k, k).unwrap().is_inserted());
        }
        for k in 1_000..100_000u64 {
            assert_eq!(m.remove(&k), Some(k));
        }
        let before = m.stats().bins;
        let mut shrinks = 0;
        while m.shrink_to_fit().unwrap() {
            shrinks += 1;
            assert!(shrinks < 10, "shrinking must converge");
        }
        let after = m.stats().bins;
        assert!(
            shrinks >= 1 && after < before / 16,
            "{before} -> {after} bins"
        );
        assert_eq!(m.check_invariants(), 1000);
        for k in 0..2_000u64 {
            assert_eq!(m.get(&k), (k < 1000).then_some(k), "{mode:?} key {k}");
        }
        assert_eq!(common::live_tables(&m), 1);
        // The shrunk map grows again on demand.
        for k in 1_000..50_000u64 {
            assert!(m.try_insert_new(k, k + 1).unwrap().is_inserted());
        }
        assert_eq!(m.check_invariants(), 50_000);
        assert_eq!(m.get(&49_999), Some(50_000));
    }
    // An empty map shrinks to two bins, and no further.
    let empty = FlatMap::<u64, u64>::builder().bins(64).build().unwrap();
    assert!(empty.shrink_to_fit().unwrap());
    while empty.shrink_to_fit().unwrap() {}
    assert_eq!(empty.stats().bins, 2);
    assert!(empty.try_insert_new(1, 1).unwrap().is_inserted());
}

/// Keys below 16 all hash to 42; the rest hash well.
fn sixteen_collide(word: u64) -> u64 {
    if word < 16 {
        42
    } else {
        Mix64::with_seed(5).hash_one(word)
    }
}

/// The same with one of the fifteen held by an open shadow insert: the shadow takes its slot
/// and moves with the bin, so it counts among the keys no growth separates (a growth for it
/// would find the bin full again, and again).
#[test]
fn colliding_hashes_count_open_shadows() {
    let m = FlatMap::<u64, u64, _>::builder()
        .bins(4)
        .max_bins(1 << 16)
        .hasher(WordHash(sixteen_collide))
        .build()
        .unwrap();
    for k in 0..14u64 {
        assert!(m.try_insert_new(k, k).unwrap().is_inserted(), "key {k}");
    }
    let shadow = m.insert_shadow(14, 14).unwrap();
    let bins = m.stats().bins;
    assert_eq!(m.try_insert_new(15, 15), Err(Error::HashCollisions));
    assert_eq!(m.stats().bins, bins, "grew for keys that cannot be split");
    shadow.abort();
    assert!(m.try_insert_new(15, 15).unwrap().is_inserted());
    assert_eq!(m.check_invariants(), 15);
}

/// Sixteen keys with one hash can never share a bin: the sixteenth insert answers an error at
/// once, without growing the map (issue 11, item 5: each failed insert grew the table again,
/// to `max_bins` or until the memory ran out).
#[test]
fn colliding_hashes_answer_an_error_without_growing() {
    for max_bins in [usize::MAX, 1 << 20] {
        let m = FlatMap::<u64, u64>::builder()
            .bins(4)
            .max_bins(max_bins)
            .hasher(WordHash(sixteen_collide))
            .build()
            .unwrap();
        for k in 16..100u64 {
            assert!(m.try_insert_new(k, k).unwrap().is_inserted());
        }
        // The bin of the colliding keys also holds other keys at first: growing splits those
        // off, so the first fifteen may grow the map.
        for k in 0..15u64 {
            assert!(m.try_insert_new(k, k).unwrap().is_inserted(), "key {k}");
        }
        assert_eq!(m.check_invariants(), 99);
        let bins = m.stats().bins;
        for _ in 0..3 {
            assert_eq!(m.try_insert_new(15, 15), Err(Error::HashCollisions));
            assert_eq!(m.try_insert(15, 15), Err(Error::HashCollisions));
            assert_eq!(m.try_fetch_add(15, 1), Err(Error::HashCollisions));
        }
        let stats = m.stats();
        assert_eq!(
            (stats.bins, stats.migrating, common::live_tables(&m)),
            (bins, false, 1),
            "grew for keys that cannot be split"
        );
        // The map is intact and still takes other keys; a freed slot takes the 16th.
        assert_eq!(m.check_invariants(), 99);
        assert!(m.try_insert_new(1000, 1).unwrap().is_inserted());
        assert_eq!(m.remove(&3), Some(3));
        assert!(m.try_insert_new(15, 15).unwrap().is_inserted());
        assert!(Error::HashCollisions.to_string().contains("hash"));
    }
}

/// Keys whose hashes differ only below the bits a capped map can ever use: `Full` at once,
/// not a growth to `max_bins` first.
#[test]
fn keys_only_a_larger_table_would_split_answer_full() {
    // Keys below 16 agree on their top 50 bits; the rest spread.
    fn low_bits(word: u64) -> u64 {
        if word < 16 {
            word << 4
        } else {
            Mix64::with_seed(9).hash_one(word)
        }
    }
    let m = FlatMap::<u64, u64>::builder()
        .bins(4)
        .max_bins(1 << 16)
        .hasher(WordHash(low_bits))
        .build()
        .unwrap();
    for k in 0..15u64 {
        assert!(m.try_insert_new(k, k).unwrap().is_inserted());
    }
    assert_eq!(m.try_insert_new(15, 15), Err(Error::HashCollisions));
    assert_eq!(m.stats().bins, 4);
}

/// Keys whose hashes share their top 36 bits: only a table of 2^37 bins (8 TiB) would split
/// them. An uncapped map answers `HashCollisions` at once instead of growing step by step
/// until an allocation fails.
#[test]
#[cfg_attr(miri, ignore = "reads /proc/meminfo")]
fn keys_only_a_table_larger_than_memory_would_split_answer_an_error() {
    fn shared_top_36_bits(word: u64) -> u64 {
        if word < 16 {
            word << 24
        } else {
            Mix64::with_seed(4).hash_one(word)
        }
    }
    let m = FlatMap::<u64, u64>::builder()
        .bins(4)
        .hasher(WordHash(shared_top_36_bits))
        .build()
        .unwrap();
    for k in 0..15u64 {
        assert!(m.try_insert_new(k, k).unwrap().is_inserted());
    }
    assert_eq!(m.try_insert_new(15, 15), Err(Error::HashCollisions));
    assert_eq!((m.stats().bins, common::live_tables(&m)), (4, 1));
}

/// Sizes at the edges (issue 11, item 7): every one answers an error, never an overflow panic
/// (debug builds check arithmetic), a mapping the machine cannot back, or an OOM kill.
#[test]
#[cfg_attr(miri, ignore = "mmap")]
fn sizes_at_the_edges_answer_errors() {
    let b = || FlatMap::<u64, u64>::builder();
    for bins in [usize::MAX, usize::MAX / 2, usize::MAX / 64, 1 << 40] {
        for per_link in [1, 8] {
            let built = b().bins(bins).bins_per_link(per_link).build();
            assert_eq!(built.err(), Some(Error::CapacityOverflow), "bins {bins}");
        }
        assert!(matches!(
            b().bins(bins).link_buckets(0).build(),
            Err(Error::CapacityOverflow | Error::AllocationFailed { .. })
        ));
    }
    // 2^36 bins are 4 TiB: more than this machine holds, so refused up front rather than
    // granted as a lazy mapping.
    match b().bins(1 << 36).link_buckets(0).build() {
        Err(Error::AllocationFailed { bytes }) => assert_eq!(bytes, 64 << 36),
        other => panic!("{other:?}"),
    }
    // A reserve the machine cannot hold is an error and leaves the map as it was.
    let m = FlatMap::<u64, u64>::try_with_capacity(1000).unwrap();
    for k in 0..1000u64 {
        assert!(m.try_insert_new(k, k).unwrap().is_inserted());
    }
    let bins = m.stats().bins;
    for huge in [1usize << 36, 1 << 40, usize::MAX / 8, usize::MAX] {
        assert!(matches!(
            m.reserve(huge),
            Err(Error::AllocationFailed { .. } | Error::CapacityOverflow)
        ));
    }
    assert_eq!((m.stats().bins, common::live_tables(&m)), (bins, 1));
    assert_eq!(m.check_invariants(), 1000);
    assert!(m.try_insert_new(5000, 1).unwrap().is_inserted());
}

/// Maps sized by capacity can always shrink (issue 11, item 7: `with_capacity(100_000)` gave
/// 57_143 bins, which no group size divides, so it never shrank).
#[test]
fn maps_sized_by_capacity_shrink() {
    for keys in [10, 100, 1000, 100_000] {
        let m = FlatMap::<u64, u64>::try_with_capacity(keys).unwrap();
        let bins = m.stats().bins;
        assert!(
            bins.is_multiple_of(2) && (bins < 32 || bins.is_multiple_of(32)),
            "{keys}: {bins}"
        );
        assert!(m.try_insert_new(1, 1).unwrap().is_inserted());
        if bins > 2 {
            assert!(m.shrink_to_fit().unwrap(), "{keys} keys, {bins} bins");
            assert!(m.stats().bins < bins);
        }
        assert_eq!(m.get(&1), Some(1));
    }
}

/// A hasher that spreads keys over the top bins of a 64-bin table but sends them all to one
/// bin of a 2-bin table: a shrink that far answers `DegenerateHasher` and changes nothing.
#[test]
fn a_shrink_the_hasher_cannot_serve_is_an_error() {
    fn top_half_only(word: u64) -> u64 {
        (word % 32) << 58
    }
    let m = FlatMap::<u64, u64>::builder()
        .bins(64)
        .hasher(WordHash(top_half_only))
        .build()
        .unwrap();
    assert!(m.try_insert_new(3, 3).unwrap().is_inserted());
    assert_eq!(m.shrink_to_fit(), Err(Error::DegenerateHasher));
    assert_eq!(m.stats().bins, 64);
    assert_eq!(m.get(&3), Some(3));
    assert!(m.try_insert_new(4, 4).unwrap().is_inserted());
    assert_eq!(m.check_invariants(), 2);
}

/// Hashes well, but panics when asked for key 12345's hash while `PANIC_ON_KEY` is set.
fn panics_on_key(word: u64) -> u64 {
    if word == 12345 && PANIC_ON_KEY.load(std::sync::atomic::Ordering::Relaxed) {
        panic!("the hasher panics on key 12345");
    }
    Mix64::with_seed(2).hash_one(word)
}

static PANIC_ON_KEY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A panic inside a bin's move (the hasher is the only user code a move calls) must not leave
/// the bin locked for every other thread to wait on forever (issue 11, item 8): the process
/// aborts with a message instead. Run in a child process of this test binary.
#[test]
#[cfg(unix)]
#[cfg_attr(miri, ignore = "spawns a process")]
fn a_panic_while_moving_a_bin_aborts_with_a_message() {
    const CHILD: &str = "FLOE_TEST_PANICKING_MOVE";
    const NAME: &str = "a_panic_while_moving_a_bin_aborts_with_a_message";
    if std::env::var_os(CHILD).is_some() {
        let m = FlatMap::<u64, u64>::builder()
            .bins(2)
            .hasher(WordHash(panics_on_key))
            .build()
            .unwrap();
        assert!(m.try_insert_new(12345, 1).unwrap().is_inserted());
        PANIC_ON_KEY.store(true, std::sync::atomic::Ordering::Relaxed);
        // The move into the larger table hashes 12345 again: the panic must abort.
        let _ = m.reserve(10_000);
        unreachable!("the move of a bin holding key 12345 returned");
    }
    use std::os::unix::process::ExitStatusExt;
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert_eq!(child.status.signal(), Some(libc::SIGABRT), "{stderr}");
    assert!(stderr.contains("aborting"), "{stderr}");
}

#[test]
fn maps_at_rest_compare_as_std_maps() {
    let a = FlatMap::<u32, u64>::try_with_capacity(64).unwrap();
    let b = FlatMap::<u32, u64>::builder().bins(2).build().unwrap();
    assert!(a == b, "empty maps of different shapes are equal");
    for k in 0..200u32 {
        let _ = a.try_insert_new(k, u64::from(k)).unwrap();
        let _ = b.try_insert_new(199 - k, u64::from(199 - k)).unwrap();
    }
    assert!(a == b);
    b.put(7, 8);
    assert!(a != b);
    b.put(7, 7);
    b.remove(&9);
    assert!(a != b);
}

/// The message of a caught panic.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => payload
            .downcast::<&str>()
            .map_or_else(|_| String::new(), |s| s.to_string()),
    }
}

#[test]
fn plain_forms_panic_with_the_error_the_try_forms_return() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let capped = FlatMap::<u64, u64>::builder()
        .bins(2)
        .link_buckets(1)
        .max_bins(2)
        .build()
        .unwrap();
    let mut k = 0;
    while capped.try_insert_new(k, k).is_ok() {
        k += 1;
    }
    let stored = capped.len();
    let attempts: [&dyn Fn(); 3] = [
        &|| {
            let _ = capped.insert_new(k, 1);
        },
        &|| {
            let _ = capped.insert(k, 1);
        },
        &|| {
            let _ = capped.fetch_add(k, 1);
        },
    ];
    for attempt in attempts {
        let message = panic_message(catch_unwind(AssertUnwindSafe(attempt)).unwrap_err());
        assert_eq!(message, format!("floe: {}", Error::Full));
    }
    // The refused calls changed nothing, and the map still serves.
    assert_eq!(capped.len(), stored);
    assert_eq!(capped.check_invariants(), stored);
    assert_eq!(capped.insert(0, 9), Some(0));

    // Sizing: the plain constructor panics where the try form answers.
    assert_eq!(
        FlatMap::<u64, u64>::try_with_capacity(usize::MAX).err(),
        Some(Error::CapacityOverflow)
    );
    let message =
        panic_message(catch_unwind(|| FlatMap::<u64, u64>::with_capacity(usize::MAX)).unwrap_err());
    assert_eq!(message, format!("floe: {}", Error::CapacityOverflow));
    assert!(floe::Map::<String, u8>::try_with_capacity(usize::MAX).is_err());
    assert!(catch_unwind(|| floe::Map::<String, u8>::with_capacity(usize::MAX)).is_err());
    assert!(floe::Set::<String>::try_with_capacity(usize::MAX).is_err());
    assert!(floe::FlatSet::<u32>::try_with_capacity(usize::MAX).is_err());

    // A growable map's plain forms never panic for want of room: they grow.
    let grows = FlatMap::<u64, u64>::new();
    for key in 0..100_000 {
        assert!(grows.insert_new(key, key).is_inserted());
    }
    assert_eq!(grows.len(), 100_000);
    let any = floe::Map::<String, u64>::new();
    let pinned = any.pin();
    for key in 0..10_000u64 {
        assert!(pinned.insert_new(key.to_string(), key).is_inserted());
    }
    assert_eq!(any.len(), 10_000);
}

#[test]
fn a_capped_any_key_map_answers_full_from_try_forms_and_panics_from_plain_ones() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let capped = floe::Map::<u64, String>::builder()
        .bins(2)
        .link_buckets(1)
        .max_bins(2)
        .build()
        .unwrap();
    let m = capped.pin();
    let mut k = 0;
    while m.try_insert_new(k, k.to_string()).is_ok() {
        k += 1;
    }
    assert_eq!(m.try_insert_new(k, String::new()), Err(Error::Full));
    assert_eq!(m.try_insert(k, String::new()), Err(Error::Full));
    let message = panic_message(
        catch_unwind(AssertUnwindSafe(|| {
            let _ = m.insert_new(k, String::new());
        }))
        .unwrap_err(),
    );
    assert_eq!(message, format!("floe: {}", Error::Full));
    assert_eq!(capped.len() as u64, k);
    assert_eq!(capped.check_invariants() as u64, k);
    let set = floe::Set::from(
        floe::Map::<u64, ()>::builder()
            .bins(2)
            .link_buckets(1)
            .max_bins(2)
            .build()
            .unwrap(),
    );
    let mut n = 0;
    while set.try_insert(n).is_ok() {
        n += 1;
    }
    assert_eq!(set.try_insert(n), Err(Error::Full));
    assert!(catch_unwind(AssertUnwindSafe(|| set.insert(n))).is_err());
    assert_eq!(set.len() as u64, n);
}

/// A dense map stashes a key that fits in neither of its lines (both full of keys whose lines
/// are those two), instead of growing for it: every operation finds it there, walks meet it
/// once, and a growth moves it on. Past the stash's limit (a table of 20 lines stashes 2) a
/// key of the same hash is refused with `HashCollisions`, and nothing else changes.
#[test]
fn dense_maps_stash_the_keys_no_line_holds() {
    use floe::Layout;
    const CROWD: u64 = 0x1234_5678_9abc_def0;
    let hash = WordHash(|k| if k < 16 { CROWD } else { SplitMix(k).next() });
    let m = FlatMap::<u64, u64>::builder()
        .layout(Layout::Dense)
        .capacity(64)
        .hasher(hash)
        .build()
        .unwrap();
    let lines = m.stats().bins;
    assert_eq!(lines, 20);
    let mut expected = std::collections::HashMap::new();
    for k in 0..16u64 {
        match m.try_insert_new(k, k + 100) {
            Ok(Insert::Inserted) => assert!(expected.insert(k, k + 100).is_none()),
            Err(Error::HashCollisions) => assert_eq!(m.get(&k), None),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(expected.len(), 10, "8 in the two lines, 2 in the stash");
    assert_eq!(m.stats().stashed, 2);
    for k in 16..56u64 {
        assert_eq!(m.insert_new(k, k + 100), Insert::Inserted);
        expected.insert(k, k + 100);
    }
    assert_eq!(m.stats().bins, lines, "no growth below the trigger");
    // The stashed keys (the last two of the crowd) answer every operation.
    for k in [8u64, 9] {
        assert_eq!(m.get(&k), Some(k + 100));
        assert_eq!(m.try_insert(k, k + 200), Ok(Some(k + 100)));
        assert_eq!(m.try_fetch_add(k, 1), Ok(Some(k + 200)));
        expected.insert(k, k + 201);
    }
    let mut walked = std::collections::HashMap::new();
    m.for_each(|k, v| assert!(walked.insert(k, v).is_none(), "{k} met twice"));
    assert_eq!(walked, expected);
    let mut pairs = m.snapshot().unwrap();
    pairs.sort_unstable();
    let mut sorted: Vec<_> = expected.iter().map(|(&k, &v)| (k, v)).collect();
    sorted.sort_unstable();
    assert_eq!(pairs, sorted);
    assert_eq!(m.check_invariants(), expected.len());
    // A stashed key removed frees its place: another of the crowd takes it.
    assert_eq!(m.remove(&9), Some(210));
    assert_eq!(m.get(&9), None);
    assert_eq!(m.try_insert_new(10, 110), Ok(Insert::Inserted));
    expected.remove(&9);
    expected.insert(10, 110);
    assert_eq!(m.check_invariants(), expected.len());
    assert_eq!(m.stats().stashed, 2);
    // A growth moves the stashed keys on (to the next table's stash: the crowd still shares
    // two lines there).
    m.reserve(1000).unwrap();
    assert!(m.stats().bins > lines);
    for (k, v) in &expected {
        assert_eq!(m.get(k), Some(*v), "key {k} after the growth");
    }
    assert_eq!(m.check_invariants(), expected.len());
}

/// The dense layout's public surface: what it refuses (the default layout's options,
/// `FlatMap`'s persistence), a full fixed table (shadow inserts in it too), sizes at the
/// edges, and the walks, `LocalMap` and `FlatSet` over it. Every refusal leaves the map as
/// it was.
#[test]
#[cfg_attr(miri, ignore = "mmap, 100 000 keys")]
fn dense_maps_answer_what_they_do_not_offer_with_errors() {
    use floe::{Layout, LocalMap};
    let dense = || FlatMap::<u64, u64>::builder().layout(Layout::Dense);
    assert!(matches!(
        dense().bins(8).build(),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        dense().link_buckets(8).build(),
        Err(Error::InvalidConfig(_))
    ));
    assert_eq!(
        dense().capacity(usize::MAX).build().err(),
        Some(Error::CapacityOverflow)
    );
    assert!(matches!(
        dense().capacity(1 << 50).build(),
        Err(Error::CapacityOverflow | Error::AllocationFailed { .. })
    ));
    assert_eq!(
        dense().hasher(Constant).build().err(),
        Some(Error::DegenerateHasher)
    );

    // A fixed table (max_bins at most its first size) answers Full and loses nothing.
    let m = dense()
        .capacity(6)
        .max_bins(1)
        .hasher(Mix64::with_seed(3))
        .build()
        .unwrap();
    assert_eq!(m.layout(), Layout::Dense);
    let mut stored = Vec::new();
    for k in 0..40u64 {
        match m.try_insert_new(k, k + 1) {
            Ok(Insert::Inserted) => stored.push(k),
            Err(Error::Full) => {
                assert_eq!(m.try_insert(k, 0), Err(Error::Full));
                assert_eq!(m.try_fetch_add(k, 1), Err(Error::Full));
                assert_eq!(m.get(&k), None);
            }
            other => panic!("{other:?}"),
        }
    }
    assert!((4..=16).contains(&stored.len()), "{}", stored.len());
    for &k in &stored {
        assert_eq!(m.get(&k), Some(k + 1), "a stored key changed after Full");
        assert_eq!(m.try_insert(k, k + 2), Ok(Some(k + 1)));
    }
    assert_eq!(m.check_invariants(), stored.len());
    assert_eq!(m.reserve(1000), Err(Error::CapacityOverflow));
    assert_eq!(m.shrink_to_fit(), Ok(false));
    assert_eq!(m.stats().bins, 4);

    // Shadow inserts in the full table: a present key is taken; a new one takes a slot as
    // an insert does, until one finds none (Full, nothing changed; the plain form panics).
    let k = stored[0];
    assert!(matches!(
        m.try_insert_shadow(k, 1),
        Ok(Err(Taken::Present(v))) if v == k + 2
    ));
    let mut shadows = Vec::new();
    let refused = (1000..1100u64)
        .find(|&k| match m.try_insert_shadow(k, 1) {
            Ok(Ok(shadow)) => {
                shadows.push(shadow);
                false
            }
            Err(Error::Full) => true,
            other => panic!("{other:?}"),
        })
        .expect("a full fixed table refuses a shadow");
    assert_eq!(m.get(&refused), None);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = m.insert_shadow(refused, 1);
    }));
    assert!(caught.is_err(), "the plain form panics with the error");
    drop(shadows);
    let mut pairs = m.snapshot().unwrap();
    pairs.sort_unstable();
    let mut expected: Vec<_> = stored.iter().map(|&k| (k, k + 2)).collect();
    expected.sort_unstable();
    assert_eq!(pairs, expected, "a strong snapshot of a dense map");
    assert!(!m.is_persistent());
    assert_eq!(m.checkpoint(), Ok(()));
    assert_eq!(
        Error::NotInLayout("persistence").to_string(),
        "the map's layout does not offer persistence"
    );
    assert_eq!(m.check_invariants(), stored.len());
    #[cfg(not(floe_loom))]
    {
        let dir = std::env::temp_dir().join(format!("floe-dense-refused-{}", std::process::id()));
        assert!(matches!(
            dense().build_persistent(&dir),
            Err(Error::NotInLayout("persistence"))
        ));
        assert!(!dir.exists(), "a refused persistent map made its directory");
    }

    // A growing map: walks, retain, clear, drain, a LocalMap and back, a set.
    let g = dense().capacity(1).build().unwrap();
    for k in 0..100_000u64 {
        assert_eq!(g.insert_new(k, !k), Insert::Inserted);
    }
    assert!(g.stats().bins >= 100_000 / 4);
    assert_eq!(common::live_tables(&g), 1);
    let mut visited = 0;
    g.for_each(|k, v| {
        assert_eq!(v, !k);
        visited += 1;
    });
    assert_eq!(
        (visited, g.iter().count(), g.len()),
        (100_000, 100_000, 100_000)
    );
    g.retain(|k, _| k % 4 == 0);
    assert_eq!(g.len(), 25_000);
    assert_eq!(g.get(&3), None);
    assert_eq!(g.get(&4), Some(!4));
    let lines = g.stats().bins;
    assert_eq!(g.shrink_to_fit(), Ok(true));
    assert!(g.stats().bins <= lines / 2);
    assert_eq!(g.check_invariants(), 25_000);
    let mut local = LocalMap::from(g);
    assert_eq!(local.insert(1, 1), None);
    assert_eq!(local.remove(&4), Some(!4));
    let mut g = local.into_shared();
    assert_eq!(g.layout(), Layout::Dense);
    assert_eq!(g.get(&1), Some(1));
    assert_eq!(g.drain().count(), 25_000);
    assert!(g.is_empty());
    assert!(g.insert_new(7, 7).is_inserted());
    g.clear();
    assert_eq!((g.len(), g.check_invariants()), (0, 0));
    let set = floe::FlatSet::from(
        FlatMap::<u16, ()>::builder()
            .layout(Layout::Dense)
            .build()
            .unwrap(),
    );
    for k in 0..1000u16 {
        assert!(set.insert(k));
    }
    assert!(set.contains(&999) && !set.insert(5));
}

//! `Builder::grow_ahead`: a growing map's writes prepare its next table's memory, the growth
//! takes it, and nothing is lost or prepared where it should not be.

mod common;

use std::sync::Barrier;

use floe::FlatMap;

/// A first table of 2^15 bins (sized as for a capacity of 1.75 keys per bin), which grows
/// fourfold: its successors (2^17 bins, 8 MiB, then 2^19, 32 MiB) are past the size that is
/// prepared (one huge page).
fn growing(grow_ahead: usize) -> FlatMap<u64, u64> {
    FlatMap::builder()
        .bins(1 << 15)
        .grow_ahead(grow_ahead)
        .build()
        .unwrap()
}

fn key(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}

/// Insert keys from `*next` on until `done(map)` or `limit` keys.
fn fill_until(
    map: &FlatMap<u64, u64>,
    next: &mut u64,
    limit: u64,
    done: impl Fn(&FlatMap<u64, u64>) -> bool,
) {
    while *next < limit && !done(map) {
        assert_eq!(map.insert_new(key(*next), *next), floe::Insert::Inserted);
        *next += 1;
    }
}

/// Grow `map` from its first table, then fill the grown table until its writes start
/// preparing its successor (past 1.75 keys per bin, the load it would be sized for); the
/// grown table's bins. It starts before it grows again.
fn grow_until_asking(map: &FlatMap<u64, u64>, next: &mut u64) -> usize {
    fill_until(map, next, 10_000_000, |m| m.stats().bins > 1 << 15);
    let grown = map.stats().bins;
    assert_eq!(grown, 1 << 17, "the first growth is fourfold");
    fill_until(map, next, 10_000_000, |m| {
        m.stats().prepared_bytes > 0 || m.stats().bins > grown
    });
    assert!(map.stats().prepared_bytes > 0, "nothing prepared");
    assert!(
        map.len() > (1 << 17) * 7 / 4,
        "prepared within the load it would be sized for: {}",
        map.len()
    );
    assert_eq!(map.stats().bins, grown, "the table grew before it asked");
    grown
}

#[test]
#[cfg_attr(miri, ignore = "no mmap under Miri")]
fn a_grown_table_prepares_its_successor_and_the_growth_takes_it() {
    let map = growing(usize::MAX);
    let mut next = 0;
    // The first table prepares nothing up to the capacity it was sized for, then prepares
    // before it grows.
    fill_until(&map, &mut next, 10_000_000, |m| {
        m.stats().bins > 1 << 15 || m.stats().prepared_bytes > 0
    });
    assert_eq!(map.stats().bins, 1 << 15, "grew before preparing");
    assert!(
        map.len() > (1 << 15) * 7 / 4,
        "prepared within its capacity: {}",
        map.len()
    );
    // So does the grown table.
    let grown = grow_until_asking(&map, &mut next);
    assert_eq!(
        map.stats().prepared_growths,
        1,
        "the first growth took its memory"
    );
    let prepared = map.stats().prepared_bytes;
    // Its successor (2^19 bins, 32 MiB) and a link region, in whole huge pages.
    assert!(prepared >= (1 << 19) * 64, "prepared {prepared} bytes");
    assert!(prepared.is_multiple_of(2 << 20));
    // The growth takes it: nothing held any more, and every key is there.
    fill_until(&map, &mut next, 10_000_000, |m| m.stats().bins > grown);
    assert_eq!(map.stats().bins, 1 << 19);
    assert_eq!(
        map.stats().prepared_growths,
        2,
        "the growth found its memory prepared"
    );
    assert_eq!(
        map.stats().prepared_bytes,
        0,
        "the growth took the prepared memory"
    );
    assert_eq!(map.len() as u64, next);
    for i in 0..next {
        assert_eq!(map.get(&key(i)), Some(i), "key number {i}");
    }
    map.check_invariants();
}

#[test]
#[cfg_attr(miri, ignore = "no mmap under Miri")]
fn nothing_is_prepared_when_off_or_over_the_limit_and_all_is_by_default() {
    for limit in [0, 1 << 20] {
        let map = growing(limit);
        let mut next = 0;
        fill_until(&map, &mut next, 10_000_000, |m| m.stats().bins > 1 << 17);
        assert_eq!(map.stats().bins, 1 << 19, "grew twice");
        assert_eq!(map.stats().prepared_bytes, 0, "limit {limit}");
        assert_eq!(map.stats().prepared_growths, 0, "limit {limit}");
    }
    let map = FlatMap::<u64, u64>::builder()
        .bins(1 << 15)
        .build()
        .unwrap();
    let mut next = 0;
    fill_until(&map, &mut next, 10_000_000, |m| m.stats().bins > 1 << 17);
    assert_eq!(map.stats().prepared_growths, 2, "on by default");
}

#[test]
#[cfg_attr(miri, ignore = "no mmap under Miri")]
fn shrinking_clearing_and_dropping_give_the_prepared_memory_back() {
    for way in ["shrink", "clear", "drop"] {
        let map = growing(usize::MAX);
        let mut next = 0;
        grow_until_asking(&map, &mut next);
        assert!(map.stats().prepared_bytes > 0, "{way}: prepared");
        match way {
            "shrink" => {
                for i in 0..next - 1000 {
                    map.remove(&key(i));
                }
                assert!(map.shrink_to_fit().unwrap(), "shrank");
                assert_eq!(map.stats().prepared_bytes, 0);
                for i in next - 1000..next {
                    assert_eq!(map.get(&key(i)), Some(i));
                }
            }
            "clear" => {
                map.clear();
                assert_eq!(map.stats().prepared_bytes, 0);
                assert!(map.is_empty());
            }
            _ => drop(map),
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "no mmap under Miri")]
fn threads_growing_a_preparing_map_lose_nothing() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 600_000;
    let map = growing(usize::MAX);
    let start = Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (map, start) = (&map, &start);
            s.spawn(move || {
                start.wait();
                for i in t * PER_THREAD..(t + 1) * PER_THREAD {
                    assert_eq!(map.insert_new(key(i), i), floe::Insert::Inserted);
                    // Read back an earlier key of this thread now and then, across growths.
                    if i % 97 == 0 {
                        let j = t * PER_THREAD + (i - t * PER_THREAD) / 2;
                        assert_eq!(map.get(&key(j)), Some(j));
                    }
                }
            });
        }
    });
    assert_eq!(map.len() as u64, THREADS * PER_THREAD);
    for i in 0..THREADS * PER_THREAD {
        assert_eq!(map.get(&key(i)), Some(i), "key number {i}");
    }
    assert!(map.stats().bins >= 1 << 19, "grew past the prepared sizes");
    assert_eq!(common::live_tables(&map), 1);
    map.check_invariants();
}

/// Growth with preparation racing `shrink_to_fit` and `reserve` from another thread: inserts
/// and removes go on while tables are prepared, taken, discarded by shrinks and replaced;
/// every key a writer left is there at the end, and nothing stays prepared for a table that
/// is gone.
#[test]
#[cfg_attr(miri, ignore = "no mmap under Miri")]
fn growth_with_preparation_racing_shrinks_and_reserves_loses_nothing() {
    // A run races only if a growth took prepared memory before the writers finished, which
    // depends on the preparer thread getting a core in time: a machine busy with other work
    // (CI's) can starve it for a whole run. Such a run still checks the keys; a few more are
    // tried until one races.
    let raced = (0..8).any(|_| shrinks_and_reserves_race_prepared_growth());
    assert!(
        raced,
        "in 8 runs the writers always finished before a growth took prepared memory"
    );
}

/// One run of the test above; whether the shrinks and reserves raced a prepared growth.
fn shrinks_and_reserves_race_prepared_growth() -> bool {
    const WRITERS: u64 = 2;
    const PER_WRITER: u64 = 400_000;
    let map = growing(usize::MAX);
    let done = std::sync::atomic::AtomicUsize::new(0);
    let raced = std::thread::scope(|s| {
        for t in 0..WRITERS {
            let (map, done) = (&map, &done);
            s.spawn(move || {
                for i in t * PER_WRITER..(t + 1) * PER_WRITER {
                    assert_eq!(map.insert_new(key(i), i), floe::Insert::Inserted);
                    // Every third key goes again, so shrinks have something to find.
                    if i.is_multiple_of(3) {
                        assert_eq!(map.remove(&key(i)), Some(i));
                    }
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            });
        }
        let (map, done) = (&map, &done);
        let racer = s.spawn(move || {
            // Race from the first prepared growth on (no shrink can call it off before then),
            // so preparations of later growths are in flight while tables shrink and grow.
            let writing = || done.load(std::sync::atomic::Ordering::Relaxed) < WRITERS as usize;
            while writing() && map.stats().prepared_growths == 0 {
                std::thread::yield_now();
            }
            if map.stats().prepared_growths == 0 {
                return false;
            }
            let mut round = 0u64;
            while writing() {
                if round.is_multiple_of(2) {
                    let _ = map.shrink_to_fit();
                } else {
                    map.reserve(1 << 16).unwrap();
                }
                round += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            true
        });
        racer.join().expect("the racing thread")
    });
    for i in 0..WRITERS * PER_WRITER {
        let expected = (i % 3 != 0).then_some(i);
        assert_eq!(map.get(&key(i)), expected, "key number {i}");
    }
    assert_eq!(
        map.len() as u64,
        (0..WRITERS * PER_WRITER).filter(|i| i % 3 != 0).count() as u64
    );
    assert_eq!(common::live_tables(&map), 1);
    map.check_invariants();
    raced
}

/// The dense layout: a table a growth made prepares its successor (twice its lines) once it
/// holds 80% of its trigger's keys, and the next growth takes that memory; the first table,
/// sized by its user, prepares nothing.
#[test]
#[cfg_attr(miri, ignore = "no mmap under Miri")]
fn a_grown_dense_table_prepares_its_successor_and_the_growth_takes_it() {
    // 19,981 lines first (1.2 MiB); then 39,962 (2.4 MiB) and 79,924, past one huge page.
    let map: FlatMap<u64, u64> = FlatMap::builder()
        .layout(floe::Layout::Dense)
        .capacity(1 << 16)
        .build()
        .unwrap();
    let mut next = 0;
    let first = map.stats().bins;
    fill_until(&map, &mut next, 10_000_000, |m| m.stats().bins > first);
    let grown = map.stats().bins;
    assert_eq!(grown, first * 2, "a dense table doubles");
    assert_eq!(map.stats().prepared_growths, 0, "the first table prepared");
    fill_until(&map, &mut next, 10_000_000, |m| {
        m.stats().prepared_bytes > 0 || m.stats().bins > grown
    });
    assert_eq!(map.stats().bins, grown, "grew before preparing");
    let trigger = grown * 4 * 820 / 1000;
    assert!(
        map.len() > trigger * 79 / 100,
        "prepared at {} keys of a trigger of {trigger}",
        map.len()
    );
    assert!(map.stats().prepared_bytes >= grown * 2 * 64);
    fill_until(&map, &mut next, 10_000_000, |m| m.stats().bins > grown);
    assert_eq!(map.stats().bins, grown * 2);
    assert_eq!(
        map.stats().prepared_growths,
        1,
        "the growth found its memory prepared"
    );
    assert_eq!(map.stats().prepared_bytes, 0, "the growth took it");
    assert_eq!(map.len() as u64, next);
    for i in 0..next {
        assert_eq!(map.get(&key(i)), Some(i), "key number {i}");
    }
    map.check_invariants();
}

/// A table refreshed at its own size (its link pool spent by churn) plans its successor
/// afresh, with a larger transfer reserve than the table before it: the growth after a
/// refresh still takes prepared memory (it took none while the old table's preparation,
/// too small, was kept).
#[test]
#[cfg_attr(miri, ignore = "no mmap under Miri")]
fn a_growth_after_a_refresh_takes_prepared_memory() {
    let map = growing(usize::MAX);
    let (mut bins, mut allocated) = (map.stats().bins, map.stats().allocated_bytes);
    let (mut growths, mut refreshes) = (0, 0);
    for i in 0..800_000u64 {
        assert!(map.insert_new(key(i), i).is_inserted());
        // Every third key goes again: the pool is spent before the keys need a growth.
        if i.is_multiple_of(3) {
            assert_eq!(map.remove(&key(i)), Some(i));
        }
        let stats = map.stats();
        if !stats.migrating {
            growths += usize::from(stats.bins > bins);
            refreshes += usize::from(stats.bins == bins && stats.allocated_bytes != allocated);
            (bins, allocated) = (stats.bins, stats.allocated_bytes);
        }
    }
    assert!(
        refreshes > 0 && growths > 0,
        "{refreshes} refreshes, {growths} growths"
    );
    assert_eq!(map.stats().prepared_growths, growths);
}

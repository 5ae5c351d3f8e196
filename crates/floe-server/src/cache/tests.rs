//! The cache's unit tests.

use core::sync::atomic::Ordering;
use std::sync::Arc;

use super::*;
use super::{counters::*, eviction::*, session::*, shared::*};
use crate::persist::StoreOptions;

/// `COUNTERS` names every counter once, in the enum's order (each counter's slot is its
/// discriminant), with distinct names.
#[test]
fn every_counter_is_listed_once() {
    for (i, (counter, _)) in COUNTERS.iter().enumerate() {
        assert_eq!(*counter as usize, i, "{counter:?} out of place");
    }
    let names: std::collections::HashSet<_> = COUNTERS.iter().map(|(_, n)| n).collect();
    assert_eq!(names.len(), COUNTERS.len());
}

/// A cache of one worker, 1 MiB, on the manual clock.
fn one_worker_cache() -> Arc<Cache> {
    Arc::new(
        Cache::with_manual_clock(Settings {
            workers: 1,
            memory_limit: 1 << 20,
            max_item_size: 64 << 10,
            ..Settings::default()
        })
        .expect("cache"),
    )
}

/// A cache of two workers on the manual clock.
fn two_worker_cache() -> Arc<Cache> {
    Arc::new(
        Cache::with_manual_clock(Settings {
            workers: 2,
            ..Settings::default()
        })
        .expect("cache"),
    )
}

/// The split adapts: a read that misses a key evicted unread from small grows the small
/// queue's share, once per eviction of that key however often it is asked for; one that
/// misses a key evicted from main shrinks it; a key never stored moves nothing.
#[test]
fn misses_of_recently_evicted_keys_move_the_split() {
    let cache = one_worker_cache();
    let mut worker = cache.worker(0);
    let share = || cache.small_share.load(Ordering::Relaxed);
    assert_eq!(share(), SMALL_SHARE_START);
    let value = [b'v'; 1000];
    let mut session = worker.session();
    // 2 MB into 1 MiB: the first keys are evicted from small, unread.
    for i in 0..2000u32 {
        let stored = session.store(
            StoreMode::Set,
            format!("k{i}").as_bytes(),
            0,
            0,
            &value,
            None,
        );
        assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
    }
    // The ghost remembers the last evictions (S3-FIFO sizes it as main, at least 64).
    let last = (0..2000u32)
        .rev()
        .find(|i| session.map.get(format!("k{i}").as_bytes()).is_none())
        .expect("evictions");
    let (last, before_last) = (format!("k{last}"), format!("k{}", last - 1));
    session.missed(b"never-stored");
    assert_eq!(share(), SMALL_SHARE_START);
    session.missed(last.as_bytes());
    assert_eq!(share(), SMALL_SHARE_START + SMALL_SHARE_STEP);
    for _ in 0..10 {
        session.missed(last.as_bytes());
    }
    assert_eq!(
        share(),
        SMALL_SHARE_START + SMALL_SHARE_STEP,
        "once per eviction"
    );
    session.missed(before_last.as_bytes());
    assert_eq!(share(), SMALL_SHARE_START + 2 * SMALL_SHARE_STEP);
    // Keys read while in small go on to main; 3 MB of them overflow main, which evicts.
    drop(session);
    let mut session = worker.session();
    for i in 0..3000u32 {
        let key = format!("hot{i}");
        let stored = session.store(StoreMode::Set, key.as_bytes(), 0, 0, &value, None);
        assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
        if let Some(item) = session.map.get(key.as_bytes()) {
            session.mark_read(item);
        }
    }
    assert!(
        !lock(&cache.queues[0]).main_ghost.members.is_empty(),
        "evictions from main are remembered"
    );
    // A miss of a key main evicted shrinks the share (its ghost entry set by hand: which
    // hot key main evicted last depends on the queues' order).
    lock(&cache.queues[0])
        .main_ghost
        .insert(cache.hash(b"gone"), 64);
    let before = share();
    session.missed(b"gone");
    assert_eq!(share(), before - SMALL_SHARE_STEP);
}

/// A later write has a larger CAS unique than an earlier one whichever worker made
/// either: `ms I` stores a value whose unique is older than the item's as stale, and a
/// worker that wrote little must not hand out uniques smaller than one that wrote much
/// (per-worker counters did: an `md I` on the quiet worker gave the item a smaller unique
/// than the one the client held, and the client's `ms I` was refused).
#[test]
fn uniques_grow_across_workers() {
    let cache = two_worker_cache();
    let (mut busy, mut quiet) = (cache.worker(0), cache.worker(1));
    let mut last = 0;
    for i in 0..100u32 {
        let mut session = busy.session();
        let key = format!("k{i}");
        let Stored::Stored(cas) = session.store(StoreMode::Set, key.as_bytes(), 0, 0, b"v", None)
        else {
            panic!("not stored");
        };
        assert!(cas > last);
        last = cas;
    }
    let mut session = quiet.session();
    let Stored::Stored(cas) = session.store(StoreMode::Set, b"q", 0, 0, b"v", None) else {
        panic!("not stored");
    };
    assert!(cas > last, "{cas} after {last}");
}

/// A read that found an item expired unlinks it only if the item there is still expired
/// at the read's time: a `touch` whose session began before the clock moved finds the
/// item valid, publishes a copy with the same CAS unique and a new expiry, and answers
/// TOUCHED; the read's unlink, coming after, must leave that copy.
#[test]
fn an_expired_read_leaves_the_item_a_touch_published() {
    let cache = two_worker_cache();
    let (mut reader, mut toucher) = (cache.worker(0), cache.worker(1));
    {
        let mut session = reader.session();
        let exptime = cache.server_time(10, session.now());
        let stored = session.store(StoreMode::Set, b"k", 0, exptime, b"v", None);
        assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
    }
    let touching = toucher.session();
    cache.advance_clock(11);
    let reading = reader.session();
    let found = reading.map.get(&b"k"[..]).expect("stored");
    assert!(cache.validity(found, reading.now()).is_err());
    let touched = touching
        .touch(b"k", cache.server_time(100, touching.now()))
        .expect("valid at the touch's time");
    assert_eq!(touched.cas(), found.cas());
    assert!(cache.validity(touched, reading.now()).is_ok());
    assert!(reading.valid(b"k", found).is_none(), "expired when read");
    assert_eq!(cache.counter(Counter::GetExpired), 0, "nothing unlinked");
    drop((touching, reading));
    assert_eq!(cache.items(), 1, "the touched item stays");
    let session = reader.session();
    assert_eq!(session.peek(b"k").map(Item::exptime), Some(102));
}
/// A directory of its own under the system's temporary one, empty.
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("floe-cache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// An insert into an absent key takes its sequence number in its decision; a write and a
/// removal of the key between that decision and its publication come later in the
/// counter, and the map still lets the insert land (the key is absent again when it does).
/// The journal must still restore the insert, which came last: before the removal clocks,
/// replay chose what came between and the key came back absent (`persist.rs`, "An absent
/// key has no version"). Each removal, journaled or not (a delete; an expired item
/// unlinked by a read), before each write that inserts into an absent key (a set; an
/// `incr` that creates).
#[test]
fn an_insert_decided_before_a_write_and_removal_of_its_key_is_restored_after_them() {
    for (creating_incr, expiring) in [(false, false), (true, false), (false, true), (true, true)] {
        let name = format!("absent-insert-{creating_incr}-{expiring}");
        let expected: &[u8] = if creating_incr { b"7" } else { b"last" };
        assert_eq!(
            overtaken_insert_restores_as(&name, creating_incr, expiring, false),
            Some(expected.to_vec()),
            "restored what the key held after the writes between"
        );
    }
}

/// As above, with a third write (an append) replacing the overtaken insert's item after its
/// publication, and a crash before that write's session appends its record: the insert's
/// own session replied first, so the record that outnumbers the delete must be in its
/// journal. Re-sequencing only the insert's own item (and giving up when another had
/// replaced it) restored the key absent, under a read that had seen the insert's value.
#[test]
fn an_overtaken_insert_replaced_before_its_check_journals_what_replaced_it() {
    for creating_incr in [false, true] {
        let name = format!("replaced-insert-{creating_incr}");
        let expected: &[u8] = if creating_incr { b"7+" } else { b"last+" };
        assert_eq!(
            overtaken_insert_restores_as(&name, creating_incr, false, true),
            Some(expected.to_vec())
        );
    }
}

/// Open a persistent cache in a scratch directory, and have worker 0 insert into the
/// absent key `k` (a set of `last`, or an `incr` creating 7) while, between its decision
/// and its publication, worker 1 sets `k` and removes it (a delete, or, `expiring`, a set
/// expired at once and the read that unlinks it). With `replaced`, worker 1 then appends
/// `+` to the published item before the insert looks at its removal clock, and its session
/// ends only after the crash. The crash: the journals copied as they are then (no
/// snapshot), and opened again. Returns what `k` holds after the restore.
fn overtaken_insert_restores_as(
    name: &str,
    creating_incr: bool,
    expiring: bool,
    replaced: bool,
) -> Option<Vec<u8>> {
    let dir = scratch_dir(name);
    let settings = || Settings {
        workers: 2,
        ..Settings::default()
    };
    let (cache, _) = Cache::open(settings(), &dir, StoreOptions::default()).expect("open");
    cache.wait_restored();
    let between = Arc::clone(&cache);
    let replacer = Arc::clone(&cache);
    // The replacing session, held open until the crash is taken.
    let (crashed, crash) = std::sync::mpsc::channel::<()>();
    let replacing_slot = std::rc::Rc::new(core::cell::RefCell::new(None));
    let slot = std::rc::Rc::clone(&replacing_slot);
    hooks::on_next_absent_insert(
        move || {
            std::thread::spawn(move || {
                let mut worker = between.worker(1);
                let mut session = worker.session();
                // Expired at once (a negative time), and unlinked by the read below.
                let exptime = if expiring {
                    between.server_time(-1, session.now())
                } else {
                    0
                };
                let stored = session.store(StoreMode::Set, b"k", 0, exptime, b"between", None);
                assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
                if expiring {
                    assert!(session.peek(b"k").is_none());
                    assert_eq!(between.counter(Counter::GetExpired), 1, "unlinked");
                } else {
                    assert_eq!(session.delete(b"k", None), Deleted::Deleted);
                }
            })
            .join()
            .expect("the writes between");
        },
        move || {
            if !replaced {
                return;
            }
            let (appended, done) = std::sync::mpsc::channel();
            let thread = std::thread::spawn(move || {
                let mut worker = replacer.worker(1);
                let mut session = worker.session();
                let stored = session.store(StoreMode::Append, b"k", 0, 0, b"+", None);
                assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
                appended.send(()).expect("the test waits");
                // The session (and its append to the journal) ends after the crash.
                // (The test drops the sender once it has taken the crash.)
                let _ = crash.recv();
            });
            done.recv().expect("appended");
            *slot.borrow_mut() = Some(thread);
        },
    );
    let mut worker = cache.worker(0);
    {
        let mut session = worker.session();
        if creating_incr {
            let created = session.delta(b"k", true, 1, None, Some((7, 0)), false, None);
            assert!(matches!(created, Delta::Value(7, _, true)), "{created:?}");
        } else {
            let stored = session.store(StoreMode::Set, b"k", 0, 0, b"last", None);
            assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
        }
    }
    let replacing = replacing_slot.borrow_mut().take();
    let held = worker.session().peek(b"k").map(|item| item.data().to_vec());
    // A crash now: the journals as the sessions that ended left them, no snapshot.
    let copy = scratch_dir(&format!("{name}-copy"));
    for file in std::fs::read_dir(&dir).expect("read the directory") {
        let path = file.expect("directory entry").path();
        std::fs::copy(&path, copy.join(path.file_name().unwrap())).expect("copy");
    }
    drop(crashed);
    if let Some(thread) = replacing {
        thread.join().expect("the replacing session");
    }
    let (restarted, _) = Cache::open(settings(), &copy, StoreOptions::default()).expect("reopen");
    restarted.wait_restored();
    let mut worker = restarted.worker(0);
    let restored = worker.session().peek(b"k").map(|item| item.data().to_vec());
    assert_eq!(restored, held, "the restore differs from what the key held");
    drop((cache, restarted));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&copy);
    restored
}

/// Store `key` with a 100-byte value (expiring `ttl` seconds from now, 0 for never) and
/// delete it if `delete`; the bytes its queue node stays charged (`node_charge`) when it is
/// deleted.
fn store_then(session: &mut Session<'_>, key: &str, ttl: i64, delete: bool) -> usize {
    let exptime = session.cache().server_time(ttl, session.now());
    let stored = session.store(
        StoreMode::Set,
        key.as_bytes(),
        0,
        exptime,
        &[b'v'; 100],
        None,
    );
    assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
    if delete {
        assert_eq!(session.delete(key.as_bytes(), None), Deleted::Deleted);
    }
    node_charge()
}

/// What `-m` should count for the items present: each item's charge and its node's (no
/// item here took over another's node).
fn charged_for_items(cache: &Cache) -> usize {
    let mut total = 0;
    cache.for_each_item(usize::MAX, |_, item| {
        total += item.charge() + node_charge();
        true
    });
    total
}

/// Deletes leave their queue nodes behind, and a node holds no key: each stale node stays
/// charged its 16-byte slot alone until eviction reaches it, so stores after many deletes of
/// long keys (210 bytes each here) find room without evicting the live items queued ahead
/// of the stale nodes. Nodes that held their keys would have charged 272 bytes each, 1.2 MB
/// in all, and pushed the cache past its 1 MiB. No housekeeping pass is needed for it.
#[test]
fn stale_nodes_of_deletes_hold_only_their_slot_and_evict_nothing_live() {
    let cache = one_worker_cache();
    let mut worker = cache.worker(0);
    let mut session = worker.session();
    for i in 0..500u32 {
        store_then(&mut session, &format!("live{i}"), 0, false);
    }
    let live_bytes = cache.bytes();
    assert_eq!(live_bytes, charged_for_items(&cache));
    let long = "x".repeat(210);
    let slot = core::mem::size_of::<Node>();
    assert_eq!(slot, 16, "a node is a hash, an id and a charge");
    for round in 1..=3usize {
        let stale: usize = (0..1500u32)
            .map(|i| store_then(&mut session, &format!("{long}{round}-{i}"), 0, true))
            .sum();
        assert_eq!(stale, 1500 * slot);
        assert_eq!(
            cache.bytes(),
            live_bytes + round * 1500 * slot,
            "round {round}: the deletes left their slots charged, nothing else"
        );
        assert_eq!(cache.reclaim_expired(), 0, "nothing expires");
    }
    let evicted = (0..500u32)
        .filter(|i| session.peek(format!("live{i}").as_bytes()).is_none())
        .count();
    assert_eq!(evicted, 0, "live items evicted for stale nodes");
    assert_eq!(
        cache.counter(Counter::CrawlerStarts),
        0,
        "no crawler run without an expiry"
    );
}

/// What `-m` counts for a 100-byte value under a 20-byte key (the hit-ratio benchmark's
/// small items): the map entry (a 24-byte key handle holding the key inline and a 64-byte
/// `Item`, a 96-byte allocation), the value's 112, and a 16-byte queue node. memcached's
/// slab class for the same item is 192 bytes; this is what `-m` holds fewer of. A key
/// longer than the handle holds takes an allocation of its own.
#[test]
fn a_small_item_and_its_node_cost_224_bytes() {
    assert_eq!(core::mem::size_of::<Key>(), 24);
    assert_eq!(core::mem::size_of::<Item>(), 64);
    assert_eq!(item_charge(20, 100), 96 + 112);
    assert_eq!(item_charge(20, 100) + node_charge(), 224);
    assert_eq!(item_charge(INLINE_KEY, 100), item_charge(1, 100));
    assert_eq!(item_charge(INLINE_KEY + 1, 100), 96 + 32 + 112);
    assert_eq!(item_charge(250, 100), 96 + 272 + 112);
}

/// `-m` counts exactly each present item's charge and one node per key through every kind
/// of write that replaces an item (overwrite, append, prepend, `incr` padded and not, touch,
/// `md ... x` and `md ... I`), for keys inline and not; once every key is deleted only the
/// nodes' slots stay charged, and once eviction has run past them nothing does.
#[test]
fn every_write_keeps_the_charge_exact() {
    let cache = one_worker_cache();
    let mut worker = cache.worker(0);
    let mut session = worker.session();
    let keys: Vec<Vec<u8>> = [1, 5, INLINE_KEY, INLINE_KEY + 1, 100, 250]
        .iter()
        .map(|&len| (0..len).map(|i| b'a' + (i % 26) as u8).collect())
        .collect();
    let exact = |cache: &Cache| {
        assert_eq!(cache.bytes(), charged_for_items(cache));
    };
    for key in &keys {
        let stored = session.store(StoreMode::Set, key, 0, 0, b"12", None);
        assert!(matches!(stored, Stored::Stored(_)), "{stored:?}");
        exact(&cache);
        let stored = session.store(StoreMode::Set, key, 1, 0, &[b'7'; 300], None);
        assert!(matches!(stored, Stored::Stored(_)));
        session.store(StoreMode::Set, key, 0, 0, b"41", None);
        session.store(StoreMode::Append, key, 0, 0, b"00", None);
        session.store(StoreMode::Prepend, key, 0, 0, b"9", None);
        exact(&cache);
        assert!(matches!(
            session.delta(key, true, 1, None, None, false, None),
            Delta::Value(94101, _, false)
        ));
        assert!(matches!(
            session.delta(key, false, 94000, None, None, true, None),
            Delta::Value(101, _, false)
        ));
        exact(&cache);
        assert!(session.touch(key, 0).is_some());
        let stale = Tombstone {
            stale: true,
            ..Tombstone::default()
        };
        assert_eq!(session.tombstone(key, None, stale), Deleted::Deleted);
        exact(&cache);
        let empty = Tombstone {
            empty: Some((3, 0)),
            ..Tombstone::default()
        };
        assert_eq!(session.tombstone(key, None, empty), Deleted::Deleted);
        exact(&cache);
    }
    assert_eq!(cache.items(), keys.len());
    for key in &keys {
        assert_eq!(session.delete(key, None), Deleted::Deleted);
    }
    assert_eq!(
        cache.bytes(),
        keys.len() * node_charge(),
        "only the nodes' slots"
    );
    // A cache's worth of other items runs eviction past the stale nodes.
    for i in 0..12_000u32 {
        store_then(&mut session, &format!("filler{i}"), 0, false);
    }
    exact(&cache);
}

/// A key hashes and compares as its bytes, inline or not, so the map is looked up with a
/// `&[u8]`; an inline key's unused bytes never take part.
#[test]
fn keys_hash_and_compare_as_their_bytes() {
    use std::hash::BuildHasher;
    let hasher = floe::hash::DefaultHashBuilder::default();
    for len in [0, 1, INLINE_KEY - 1, INLINE_KEY, INLINE_KEY + 1, 250] {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        let key = Key::from(&bytes[..]);
        assert_eq!(&key[..], &bytes[..], "{len}");
        assert_eq!(hasher.hash_one(&key), hasher.hash_one(&bytes[..]), "{len}");
        assert!(key == Key::from(&bytes[..]));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(
            key != Key::from(&longer[..]),
            "{len}: a zero byte more is another key"
        );
    }
    let map: floe::Map<Key, u32> = floe::Map::new();
    let pinned = map.pin();
    pinned.insert(Key::from(&b"short"[..]), 1);
    pinned.insert(Key::from(&[b'l'; 40][..]), 2);
    assert_eq!(pinned.get(&b"short"[..]), Some(&1));
    assert_eq!(pinned.get(&[b'l'; 40][..]), Some(&2));
    assert_eq!(pinned.get(&b"short\0"[..]), None);
}

/// Stale nodes that reach a queue's head are freed with their slot's charge, and the split
/// still drains a small queue that holds only stale slots: once evictions have run past
/// them, `-m` counts exactly the items present and their nodes.
#[test]
fn stale_nodes_reaching_the_head_free_their_slots() {
    let cache = one_worker_cache();
    let mut worker = cache.worker(0);
    let mut session = worker.session();
    for i in 0..2000u32 {
        store_then(&mut session, &format!("gone{i}"), 0, true);
    }
    assert_eq!(cache.bytes(), 2000 * core::mem::size_of::<Node>());
    // 2 MB of live items into 1 MiB: evictions reach every stale node, then live items.
    for i in 0..8000u32 {
        store_then(&mut session, &format!("live{i}"), 0, false);
    }
    assert!(session.peek(b"live0").is_none(), "evictions ran");
    assert_eq!(cache.bytes(), charged_for_items(&cache));
}

/// The pass unlinks the expired items and counts one crawler run; their nodes, like the
/// deletes', stay charged their slots until eviction reaches them.
#[test]
fn the_pass_unlinks_expired_items_and_leaves_stale_slots() {
    let cache = one_worker_cache();
    let mut worker = cache.worker(0);
    let mut session = worker.session();
    let mut expiring = 0;
    for i in 0..300u32 {
        store_then(&mut session, &format!("brief{i}"), 10, false);
        expiring += core::mem::size_of::<Node>();
    }
    for i in 0..1500u32 {
        store_then(&mut session, &format!("gone{i}"), 0, true);
    }
    cache.advance_clock(11);
    let slot = core::mem::size_of::<Node>();
    assert_eq!(cache.reclaim_expired(), 300);
    assert_eq!(cache.counter(Counter::CrawlerStarts), 1);
    assert_eq!(cache.counter(Counter::CrawlerReclaimed), 300);
    assert_eq!(
        cache.bytes(),
        1500 * slot + expiring,
        "the expired items uncharged, every node's slot still charged"
    );
    assert_eq!(cache.reclaim_expired(), 0, "nothing left to unlink");
    assert_eq!(cache.bytes(), 1500 * slot + expiring);
}

//! A directory is one map's: each persistent format refuses the other's directory, a new map
//! is made only in a missing or empty directory, and `open_or_create` opens what is there or
//! makes a map where nothing is (issue 43, part 4). Before, a program that matched
//! `StorageErrorKind::Missing` and then created made a `FlatMap` inside a `PersistentMap`'s
//! directory (and the reverse) without an error.
#![cfg(all(unix, feature = "serde"))]

#[path = "crash_harness/mod.rs"]
mod crash_harness;

use crash_harness::{make_fifo, Scratch};
use floe::{Error, FlatMap, Map, PersistentMap, StorageErrorKind};

type Persistent = PersistentMap<String, String>;

fn flat_in(dir: &Scratch) -> FlatMap<u64, u64> {
    let map = FlatMap::<u64, u64>::builder()
        .capacity(100)
        .build_persistent(dir.path())
        .expect("make a FlatMap");
    map.insert(1, 10);
    map
}

fn persistent_in(dir: &Scratch) -> Persistent {
    let map = Map::<String, String>::builder()
        .build_persistent(dir.path())
        .expect("make a PersistentMap");
    map.pin()
        .insert("a".to_string(), "b".to_string())
        .expect("journaled");
    map
}

/// The directory's entries, sorted, to see that a refusal changed nothing.
fn listing(dir: &Scratch) -> Vec<(String, u64)> {
    let mut entries: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|entry| {
            let entry = entry.expect("entry");
            let len = entry.metadata().map_or(0, |m| m.len());
            (entry.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    entries.sort();
    entries
}

/// The storage error a call refused with.
fn refusal<T>(result: Result<T, Error>) -> StorageErrorKind {
    match result {
        Err(Error::Storage(storage)) => {
            assert!(storage.path().is_some(), "{storage}: names no path");
            storage.kind()
        }
        Err(other) => panic!("expected a storage error, got {other}"),
        Ok(_) => panic!("expected a refusal"),
    }
}

#[test]
fn a_flat_map_is_not_made_or_opened_in_a_persistent_maps_directory() {
    let dir = Scratch::new("pm-dir");
    persistent_in(&dir).close().expect("close");
    let before = listing(&dir);
    let created = FlatMap::<u64, u64>::builder().build_persistent(dir.path());
    assert_eq!(
        refusal(created),
        StorageErrorKind::OtherKind("PersistentMap")
    );
    let opened = FlatMap::<u64, u64>::open(dir.path());
    assert_eq!(
        refusal(opened),
        StorageErrorKind::OtherKind("PersistentMap")
    );
    let either = FlatMap::<u64, u64>::builder().open_or_create(dir.path());
    assert_eq!(
        refusal(either),
        StorageErrorKind::OtherKind("PersistentMap")
    );
    assert_eq!(listing(&dir), before, "a refusal wrote nothing");
    let map = Persistent::open(dir.path()).expect("the PersistentMap is intact");
    assert_eq!(map.pin().get("a").map(String::as_str), Some("b"));
}

#[test]
fn a_persistent_map_is_not_made_or_opened_in_a_flat_maps_directory() {
    let dir = Scratch::new("flat-dir");
    flat_in(&dir).close().expect("close");
    let before = listing(&dir);
    let created = Map::<String, String>::builder().build_persistent(dir.path());
    assert_eq!(refusal(created), StorageErrorKind::OtherKind("FlatMap"));
    let opened = Persistent::open(dir.path());
    assert_eq!(refusal(opened), StorageErrorKind::OtherKind("FlatMap"));
    let either = Map::<String, String>::builder().open_or_create(dir.path());
    assert_eq!(refusal(either), StorageErrorKind::OtherKind("FlatMap"));
    assert_eq!(listing(&dir), before, "a refusal wrote nothing");
    let map = FlatMap::<u64, u64>::open(dir.path()).expect("the FlatMap is intact");
    assert_eq!(map.get(&1), Some(10));
}

#[test]
fn a_new_map_is_made_only_where_no_other_files_are() {
    // A file of another program, a subdirectory, a FIFO: each keeps both kinds out.
    type Plant = fn(&std::path::Path);
    let plant: [(&str, Plant); 3] = [
        ("file", |path| {
            std::fs::write(path, b"someone's notes").unwrap()
        }),
        ("subdirectory", |path| std::fs::create_dir(path).unwrap()),
        ("fifo", make_fifo),
    ];
    for (what, make) in plant {
        let dir = Scratch::new("not-empty");
        std::fs::create_dir_all(dir.path()).unwrap();
        make(&dir.path().join("notes"));
        let before = listing(&dir);
        let flat = FlatMap::<u64, u64>::builder().open_or_create(dir.path());
        assert_eq!(refusal(flat), StorageErrorKind::NotEmpty, "{what}");
        let journaled = Map::<String, String>::builder().build_persistent(dir.path());
        assert_eq!(refusal(journaled), StorageErrorKind::NotEmpty, "{what}");
        assert_eq!(listing(&dir), before, "{what}: a refusal wrote nothing");
    }
}

#[test]
fn open_or_create_makes_then_opens() {
    let dir = Scratch::new("flat-ooc");
    let (map, recovery) = FlatMap::<u64, u64>::builder()
        .capacity(1000)
        .open_or_create(dir.path())
        .expect("made");
    assert!(recovery.is_none(), "nothing was there to open");
    for key in 0..500 {
        map.insert(key, key * 2);
    }
    drop(map); // a crash-like close: recovered by the next open
    let (map, recovery) = FlatMap::<u64, u64>::builder()
        .open_or_create(dir.path())
        .expect("opened");
    assert!(recovery.is_some(), "the map there was opened");
    assert_eq!(map.len(), 500);
    assert!((0..500).all(|key| map.get(&key) == Some(key * 2)));
    // Open, it is locked: a second open_or_create is refused, not a second map.
    let second = FlatMap::<u64, u64>::builder().open_or_create(dir.path());
    assert_eq!(refusal(second), StorageErrorKind::Locked);
    map.close().expect("close");

    let dir = Scratch::new("pm-ooc");
    let (map, recovery) = Map::<String, String>::builder()
        .open_or_create(dir.path())
        .expect("made");
    assert!(recovery.is_none());
    map.pin()
        .insert("k".to_string(), "v".to_string())
        .expect("journaled");
    map.close().expect("close");
    let (map, recovery) = Map::<String, String>::builder()
        .open_or_create(dir.path())
        .expect("opened");
    assert!(recovery.is_some());
    assert_eq!(map.pin().get("k").map(String::as_str), Some("v"));
}

#[test]
fn an_empty_directory_takes_a_new_map() {
    let dir = Scratch::new("empty");
    std::fs::create_dir_all(dir.path()).unwrap();
    let (map, recovery) = Map::<String, String>::builder()
        .open_or_create(dir.path())
        .expect("an empty directory is no one's");
    assert!(recovery.is_none());
    map.close().expect("close");
}

/// A map whose marker file was removed is damage, not an empty directory: `open_or_create`
/// refuses it and leaves its files, where making a new map there would drop the old one's
/// data (its cleanups remove leftovers of their own kind by name).
#[test]
fn a_map_without_its_marker_file_is_refused_not_replaced() {
    let dir = Scratch::new("flat-orphans");
    flat_in(&dir).close().expect("close");
    std::fs::remove_file(dir.path().join("floe.super")).unwrap();
    let before = listing(&dir);
    let again = FlatMap::<u64, u64>::builder().open_or_create(dir.path());
    assert!(
        matches!(refusal(again), StorageErrorKind::Corrupt(why) if why.contains("superblock")),
        "table files without a superblock"
    );
    assert_eq!(listing(&dir), before, "the tables are kept");

    let dir = Scratch::new("pm-orphans");
    persistent_in(&dir).close().expect("close");
    std::fs::remove_file(dir.path().join("floe-map.meta")).unwrap();
    let before = listing(&dir);
    let again = Map::<String, String>::builder().open_or_create(dir.path());
    assert!(
        matches!(refusal(again), StorageErrorKind::Corrupt(why) if why.contains("meta file")),
        "journals without a meta file"
    );
    assert_eq!(listing(&dir), before, "the journals are kept");
}

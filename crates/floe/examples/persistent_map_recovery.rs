//! How long a `PersistentMap` takes to come back: a child process fills one with `KEYS` keys
//! (23-byte keys, 100-byte values, as YCSB's records) from two threads and aborts (a crash:
//! journals, no close); then the map is opened (replay, rebuild, the crash's pending records
//! settled; a compaction starts behind) and closed (a snapshot), and opened again from its
//! snapshot (a clean open).
//!
//! ```sh
//! cargo run --release -p floe --features serde --example persistent_map_recovery -- 1048576 /dev/shm
//! ```

use std::{path::PathBuf, process::Command, time::Instant};

use floe::{Map, PersistentMap};

type Persistent = PersistentMap<Box<[u8]>, Box<[u8]>>;

fn key(i: u64) -> Box<[u8]> {
    format!("user{i:019}").into_bytes().into()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--fill") {
        let (keys, dir): (u64, PathBuf) = (args[2].parse().unwrap(), args[3].clone().into());
        let map = Map::<Box<[u8]>, Box<[u8]>>::builder()
            .capacity(keys as usize)
            .build_persistent(&dir)
            .expect("create");
        std::thread::scope(|s| {
            for t in 0..2 {
                let map = &map;
                s.spawn(move || {
                    let pinned = map.pin();
                    for i in (t..keys).step_by(2) {
                        let value = vec![i as u8; 100].into_boxed_slice();
                        pinned.insert(key(i), value).expect("insert");
                    }
                });
            }
        });
        std::process::abort();
    }
    let keys: u64 = args
        .get(1)
        .map_or(1 << 20, |k| k.parse().expect("a key count"));
    let root = args.get(2).map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = root.join(format!("floe-pmap-recovery-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let start = Instant::now();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--fill", &keys.to_string(), &dir.display().to_string()])
        .status()
        .unwrap();
    assert!(!status.success(), "the child should have aborted");
    let fill = start.elapsed();
    let journal: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let start = Instant::now();
    let (map, recovery) = Map::<Box<[u8]>, Box<[u8]>>::builder()
        .open(&dir)
        .expect("open");
    let crashed_open = start.elapsed();
    assert_eq!(map.len() as u64, keys);
    assert_eq!(recovery.keys as u64, keys);
    let start = Instant::now();
    map.close().expect("close");
    let close = start.elapsed();
    let start = Instant::now();
    let map = Persistent::open(&dir).expect("clean open");
    let clean_open = start.elapsed();
    assert_eq!(map.len() as u64, keys);
    drop(map);
    std::fs::remove_dir_all(&dir).unwrap();
    println!(
        "keys {keys} in {}: fill {:.2} s, journal files {} MiB; open after the crash {:.2} s ({:.2} M records/s; its compaction then runs behind), close {:.2} s (waits for that compaction, then compacts), clean open {:.2} s ({:.2} M keys/s)",
        root.display(),
        fill.as_secs_f64(),
        journal >> 20,
        crashed_open.as_secs_f64(),
        recovery.records as f64 / crashed_open.as_secs_f64() / 1e6,
        close.as_secs_f64(),
        clean_open.as_secs_f64(),
        keys as f64 / clean_open.as_secs_f64() / 1e6,
    );
}

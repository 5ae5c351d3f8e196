//! Damaged directories (issue 42): four small directory images made once per process (a
//! persistent `FlatMap` closed cleanly and one crashed mid-run, a `PersistentMap` closed
//! cleanly and one crashed with its journal as written: each crashed image is a copy of the
//! files taken while the map is open), then per input one image with up to
//! six damages (a bit flipped, a file cut short or extended, a 4 KiB block zeroed, eight bytes
//! overwritten, two files swapped, a file removed), opened. The open must not panic or hang
//! (libFuzzer's `-timeout`), and what it opens must be honest:
//!
//! - a cleanly closed image opens holding exactly what it held, or is refused: every byte of it
//!   is covered by a checksum (the superblock's and the table's, the snapshot's, the meta
//!   file's and the manifest's) and every file by the superblock or the manifest;
//! - a crashed `PersistentMap` serves, per key, a value some acknowledged write gave it (or
//!   absence where the key was absent at some point): its records are checksummed, so damage
//!   can cost records at a journal's end (indistinguishable from a crash before them), never
//!   invent a value;
//! - a crashed `FlatMap` (whose table carries no checksum while it runs) opens as a consistent
//!   map (iteration and `get` agree, `len` counts what iteration finds), or is refused.
//!
//! Run with `bash ci/fuzz.sh`.
#![no_main]

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::OnceLock,
};

use arbitrary::Arbitrary;
use floe::{FlatMap, Map, PersistentMap};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Damage {
    FlipBit { file: u8, bit: u32 },
    Truncate { file: u8, keep: u32 },
    Extend { file: u8, bytes: u16, fill: u8 },
    ZeroBlock { file: u8, block: u16 },
    Overwrite { file: u8, at: u32, bytes: [u8; 8] },
    Swap { a: u8, b: u8 },
    Remove { file: u8 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    image: u8,
    damages: Vec<Damage>,
}

/// A directory's files: name and bytes.
type Files = Vec<(String, Vec<u8>)>;

struct Images {
    flat_clean: (Files, BTreeMap<u64, u64>),
    flat_crashed: Files,
    journaled_clean: (Files, BTreeMap<String, String>),
    /// Per key, every value an acknowledged write left, and `None` if it was ever absent.
    journaled_crashed: (Files, BTreeMap<String, BTreeSet<Option<String>>>),
}

/// A scratch directory on a memory file system when there is one (the images are copied
/// for every input).
fn scratch(name: &str) -> PathBuf {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("floe-fuzz-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn read_files(dir: &Path) -> Files {
    let mut files: Files = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            (name, std::fs::read(entry.path()).unwrap())
        })
        .filter(|(name, _)| !name.ends_with(".tmp"))
        .collect();
    files.sort();
    files
}

fn images() -> &'static Images {
    static IMAGES: OnceLock<Images> = OnceLock::new();
    IMAGES.get_or_init(|| {
        // FlatMap: grows from a tiny table, some keys removed.
        let dir = scratch("flat");
        let map = FlatMap::<u64, u64>::builder()
            .capacity(16)
            .build_persistent(&dir)
            .unwrap();
        let mut expected = BTreeMap::new();
        for key in 0..300u64 {
            map.insert(key, key * 7 + 1);
            expected.insert(key, key * 7 + 1);
        }
        for key in (0..300u64).step_by(5) {
            map.remove(&key);
            expected.remove(&key);
        }
        // Copied while open: the superblock says open, so a crashed map's image.
        let flat_crashed = read_files(&dir);
        map.close().unwrap();
        let flat_clean = (read_files(&dir), expected);
        let _ = std::fs::remove_dir_all(&dir);

        // PersistentMap: puts, overwrites and removes.
        let dir = scratch("journaled");
        let map = Map::<String, String>::builder()
            .build_persistent(&dir)
            .unwrap();
        let mut history: BTreeMap<String, BTreeSet<Option<String>>> = BTreeMap::new();
        let mut latest = BTreeMap::new();
        for step in 0..400u64 {
            let key = format!("key-{}", step % 97);
            let seen = history.entry(key.clone()).or_insert_with(|| [None].into());
            if step % 11 == 3 {
                map.pin().remove(key.as_str()).unwrap();
                seen.insert(None);
                latest.remove(&key);
            } else {
                let value = format!("value-{step}");
                map.pin().insert(key.clone(), value.clone()).unwrap();
                seen.insert(Some(value.clone()));
                latest.insert(key, value);
            }
        }
        // Copied while open (its journal is a shared mapping of the files): what a crash
        // now would leave.
        let journaled_crashed = (read_files(&dir), history);
        drop(map);
        let _ = std::fs::remove_dir_all(&dir);
        let dir = scratch("journaled-clean");
        let map = Map::<String, String>::builder()
            .build_persistent(&dir)
            .unwrap();
        for (key, value) in &latest {
            map.pin().insert(key.clone(), value.clone()).unwrap();
        }
        map.close().unwrap();
        let journaled_clean = (read_files(&dir), latest);
        let _ = std::fs::remove_dir_all(&dir);
        Images {
            flat_clean,
            flat_crashed,
            journaled_clean,
            journaled_crashed,
        }
    })
}

/// Apply `damages` to a copy of `files`; the files as damaged (`None`: removed).
fn damage(files: &Files, damages: &[Damage]) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out: Vec<(String, Option<Vec<u8>>)> = files
        .iter()
        .map(|(name, bytes)| (name.clone(), Some(bytes.clone())))
        .collect();
    let count = out.len();
    for damage in damages.iter().take(6) {
        let pick = |file: u8| usize::from(file) % count;
        match *damage {
            Damage::FlipBit { file, bit } => {
                if let Some(bytes) = &mut out[pick(file)].1 {
                    if !bytes.is_empty() {
                        let bit = bit as usize % (bytes.len() * 8);
                        bytes[bit / 8] ^= 1 << (bit % 8);
                    }
                }
            }
            Damage::Truncate { file, keep } => {
                if let Some(bytes) = &mut out[pick(file)].1 {
                    let keep = keep as usize % (bytes.len() + 1);
                    bytes.truncate(keep);
                }
            }
            Damage::Extend {
                file,
                bytes: more,
                fill,
            } => {
                if let Some(bytes) = &mut out[pick(file)].1 {
                    bytes.resize(bytes.len() + usize::from(more % 8192) + 1, fill);
                }
            }
            Damage::ZeroBlock { file, block } => {
                if let Some(bytes) = &mut out[pick(file)].1 {
                    let blocks = bytes.len().div_ceil(4096).max(1);
                    let start = usize::from(block) % blocks * 4096;
                    let end = (start + 4096).min(bytes.len());
                    if start < end {
                        bytes[start..end].fill(0);
                    }
                }
            }
            Damage::Overwrite {
                file,
                at,
                bytes: new,
            } => {
                if let Some(bytes) = &mut out[pick(file)].1 {
                    if bytes.len() >= 8 {
                        let at = at as usize % (bytes.len() - 7);
                        bytes[at..at + 8].copy_from_slice(&new);
                    }
                }
            }
            Damage::Swap { a, b } => {
                let (a, b) = (pick(a), pick(b));
                let taken = out[a].1.take();
                out[a].1 = out[b].1.take();
                out[b].1 = taken;
            }
            Damage::Remove { file } => out[pick(file)].1 = None,
        }
    }
    out
}

fn write_dir(dir: &Path, files: &[(String, Option<Vec<u8>>)]) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    for (name, bytes) in files {
        if let Some(bytes) = bytes {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
}

fuzz_target!(|input: Input| {
    let images = images();
    let dir = scratch("case");
    match input.image % 4 {
        0 => {
            let (files, expected) = &images.flat_clean;
            write_dir(&dir, &damage(files, &input.damages));
            if let Ok(map) = FlatMap::<u64, u64>::open(&dir) {
                let held: BTreeMap<u64, u64> = map.iter().collect();
                assert_eq!(
                    &held, expected,
                    "a damaged clean FlatMap opened with other contents"
                );
                assert_eq!(map.len(), expected.len());
            }
        }
        1 => {
            write_dir(&dir, &damage(&images.flat_crashed, &input.damages));
            if let Ok(map) = FlatMap::<u64, u64>::open(&dir) {
                let held: BTreeMap<u64, u64> = map.iter().collect();
                assert_eq!(map.len(), held.len(), "len disagrees with iteration");
                for (key, value) in &held {
                    assert_eq!(map.get(key), Some(*value), "get disagrees with iteration");
                }
            }
        }
        2 => {
            let (files, expected) = &images.journaled_clean;
            write_dir(&dir, &damage(files, &input.damages));
            if let Ok(map) = PersistentMap::<String, String>::open(&dir) {
                let held: BTreeMap<String, String> = map
                    .pin()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(
                    &held, expected,
                    "a damaged clean PersistentMap opened with other contents"
                );
            }
        }
        _ => {
            let (files, history) = &images.journaled_crashed;
            write_dir(&dir, &damage(files, &input.damages));
            if let Ok(map) = PersistentMap::<String, String>::open(&dir) {
                let pinned = map.pin();
                for (key, value) in pinned.iter() {
                    let seen = history.get(key);
                    assert!(
                        seen.is_some_and(|seen| seen.contains(&Some(value.clone()))),
                        "{key} = {value}: a value no acknowledged write gave it"
                    );
                }
                for (key, seen) in history {
                    if pinned.get(key.as_str()).is_none() {
                        assert!(seen.contains(&None), "{key}: absent, though it never was");
                    }
                }
                drop(pinned);
            }
        }
    }
    // (Each map was dropped above, releasing the directory.)
    let _ = std::fs::remove_dir_all(&dir);
});

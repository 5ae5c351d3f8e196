//! `stats detail`: counts of gets, hits, sets and deletes per key prefix, as memcached keeps
//! them (`stats detail on|off|dump`, the prefix ending at `-D`'s delimiter, `:` by default).
//!
//! As in memcached, only the classic commands count (text and binary get, gets, gat and
//! gats per key; every store command; delete), not the meta ones; a key without the
//! delimiter counts under no prefix; turning detail off keeps the counts (`dump` still shows
//! them) and `stats reset` clears them. Counting takes one lock for the whole server, which
//! is why it is off unless asked for; while off a command pays one relaxed load.
//!
//! Unlike memcached's, the table is bounded: past [`MAX_PREFIXES`] prefixes, new ones are not
//! counted (those already there still are), so keys with random prefixes cannot grow it
//! without end.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicU8, Ordering},
        Mutex, MutexGuard,
    },
};

/// The most prefixes counted.
pub const MAX_PREFIXES: usize = 1 << 16;

/// What a command did with a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A get of the key; `hit` when it was found.
    Get {
        /// Whether the key was found.
        hit: bool,
    },
    /// A store command on the key.
    Set,
    /// A delete of the key.
    Delete,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    gets: u64,
    hits: u64,
    sets: u64,
    deletes: u64,
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static DELIMITER: AtomicU8 = AtomicU8::new(b':');
static TABLE: Mutex<Option<HashMap<Box<[u8]>, Counts>>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<HashMap<Box<[u8]>, Counts>>> {
    // Every update is a few additions: a panic cannot leave the table half changed.
    TABLE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Turn counting on or off (`stats detail on|off`).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether counting is on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Set the byte that ends a prefix (`-D`).
pub fn set_delimiter(delimiter: u8) {
    DELIMITER.store(delimiter, Ordering::Relaxed);
}

/// The byte that ends a prefix.
pub fn delimiter() -> u8 {
    DELIMITER.load(Ordering::Relaxed)
}

/// Count `op` on `key` under its prefix, if counting is on and the key has one.
pub fn record(key: &[u8], op: Op) {
    if !enabled() {
        return;
    }
    let delimiter = delimiter();
    let Some(end) = key.iter().position(|&b| b == delimiter) else {
        return;
    };
    let prefix = &key[..end];
    let mut table = table();
    let table = table.get_or_insert_with(HashMap::new);
    if table.len() >= MAX_PREFIXES && !table.contains_key(prefix) {
        return;
    }
    let counts = match table.get_mut(prefix) {
        Some(counts) => counts,
        None => table.entry(prefix.into()).or_default(),
    };
    match op {
        Op::Get { hit } => {
            counts.gets += 1;
            counts.hits += u64::from(hit);
        }
        Op::Set => counts.sets += 1,
        Op::Delete => counts.deletes += 1,
    }
}

/// Back to a fresh process's state: off, `:` as the delimiter, no counts (for tests and the
/// fuzz target, which answer several request streams in one process).
pub fn reset() {
    set_enabled(false);
    set_delimiter(b':');
    clear();
}

/// Forget every count (`stats reset`).
pub fn clear() {
    *table() = None;
}

/// `stats detail dump`: a `PREFIX` line per prefix (sorted), then `END`.
pub fn dump(out: &mut Vec<u8>) {
    use std::io::Write;
    let table = table();
    let mut prefixes: Vec<_> = table.iter().flatten().collect();
    prefixes.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (prefix, c) in prefixes {
        out.extend_from_slice(b"PREFIX ");
        out.extend_from_slice(prefix);
        let _ = write!(
            out,
            " get {} hit {} set {} del {}\r\n",
            c.gets, c.hits, c.sets, c.deletes
        );
    }
    out.extend_from_slice(b"END\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test for the module's process-wide state (tests run in parallel).
    #[test]
    fn counts_by_prefix_only_while_on_and_clears() {
        clear();
        record(b"a:1", Op::Set);
        let mut out = Vec::new();
        dump(&mut out);
        assert_eq!(out, b"END\r\n", "off: nothing counted");

        set_enabled(true);
        record(b"b:1", Op::Set);
        record(b"b:2", Op::Get { hit: true });
        record(b"b:3", Op::Get { hit: false });
        record(b"a:x:y", Op::Delete);
        record(b"nodelimiter", Op::Set);
        set_delimiter(b'/');
        record(b"c/1", Op::Set);
        record(b"d:1", Op::Set);
        set_delimiter(b':');
        set_enabled(false);
        record(b"b:4", Op::Set);
        out.clear();
        dump(&mut out);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "PREFIX a get 0 hit 0 set 0 del 1\r\n\
             PREFIX b get 2 hit 1 set 1 del 0\r\n\
             PREFIX c get 0 hit 0 set 1 del 0\r\n\
             END\r\n"
        );

        set_enabled(true);
        for i in 0..MAX_PREFIXES + 10 {
            record(format!("p{i}:k").as_bytes(), Op::Set);
        }
        record(b"b:5", Op::Set);
        {
            let guard = table();
            let counted = guard.as_ref().unwrap();
            assert_eq!(counted.len(), MAX_PREFIXES, "bounded");
            assert_eq!(
                counted[&b"b"[..]].sets,
                2,
                "a prefix already there still counts"
            );
        }
        set_enabled(false);
        clear();
        out.clear();
        dump(&mut out);
        assert_eq!(out, b"END\r\n", "cleared");
    }
}

//! Writing cache lines back to memory: the `Flush` durability level of a persistent map on a
//! DAX or CXL mapping ([`Durability::Flush`](crate::Durability::Flush)).
//!
//! # Why, and in what order
//!
//! On a file in the page cache the stores an operation makes outlive the process the moment
//! they are made; a power loss keeps what a checkpoint (`msync`) wrote. On a DAX mapping
//! (persistent memory, or CXL memory behind a battery) the stores go to the media itself, and
//! the only volatile layer left is the CPU's caches: a line reaches the media when it is
//! evicted, at a time nobody chooses, or when it is written back (`clwb`, `clflushopt`,
//! `clflush`) and the write-back is fenced (`sfence`). SEPH §3.3 persists each slot it CASes
//! before its insert returns; this level does the same for every operation of floe's, in
//! this order (the protocols are in `bins/mod.rs` and `bins/migrate.rs`, what recovery makes
//! of each intermediate state in `persist/recover.rs`):
//!
//! 1. An operation runs its protocol unchanged (commit, store, publish; retire, free; CAS).
//!    Any line may be evicted between two of its steps, so the media may hold any of the
//!    states a process crash could leave, line by line: a bin's header line from one instant
//!    and its link bucket's line from another. `persist/recover.rs` settles each such mix as it
//!    settles a crash (an insert whose slot is written but whose header is not committed has a
//!    stale slot, cleared; a committed slot whose key did not reach the media holds the dead
//!    key, freed), so none of these states needs ordering: the operation is still in flight,
//!    and may be kept whole or lost whole.
//! 2. Once the operation has its answer, and before it returns, it writes back every line of
//!    the bin it ended in (the bin's line and each chained link bucket's) and fences. After
//!    the fence those lines' contents as of the write-back are on the media: the operation's
//!    stores, and any later ones of other operations on the same lines (newer states, which
//!    recovery settles as in 1). So an operation that returned is durable, as the promise
//!    for this level says.
//! 3. Reads write back too (a get the lines it read): a get that saw another thread's insert
//!    before that insert's own write-back must not return a value a power loss then takes
//!    away (SEPH's "a thread might access data that have not been persisted yet", §3.3.4,
//!    which it answers with PSwCAS dirty bits; a write-back of the lines read costs less than
//!    a CAS per read, and nothing when the lines are clean on CPUs where `clwb` of a clean
//!    line does not write). The same goes for an insert that answers "present" or a remove
//!    that answers "absent": both end with the write-back of 2.
//! 4. A growth or shrink copies each key to its new bin and then retires the old slot to the
//!    moved word (`migrate.rs`). Between the two it writes back the new bin's lines and fences:
//!    were the retire on the media without the copy, recovery would find a moved slot and no
//!    copy, and the key would be gone. With the copy written back first, every combination the
//!    media can hold after it is one recovery rebuilds (`persist/recover.rs`, the moves: a real key
//!    in the old slot is its newest value, a moved word takes the copy). A put that races the
//!    retire rewrites the copy; the write-back is repeated before the retire is tried again.
//!    A delete that retires the key first makes the mover take the copy out, and that is
//!    written back too before the bin is published: a published bin makes its new bins the
//!    truth for recovery, and a copy left on the media would bring the deleted key back.
//! 5. An operation that finds its bin moved (`DoneTransfer`) writes that old bin's line back
//!    before it goes on into the next table. Otherwise it could change a new bin, write that
//!    back and return while the media still showed the old bin unclaimed or `InTransfer`, and
//!    recovery, which takes an old bin that is not done as the truth for its keys (and empties
//!    the new bins of one not claimed), would undo it. With the old bin's `DoneTransfer` on
//!    the media first, recovery leaves the new bins of that bin as they are. (A shrink group
//!    publishes its bins one by one: recovery keeps the new bin's keys of the members done and
//!    rebuilds only the others'.)
//! 6. Everything the superblock names is made durable by `msync` before it is named (a new
//!    table's file is synced before it becomes current), as on any file.
//!
//! What this assumes: a line is written back whole, so a 16-byte slot (key and value, stored
//! by one instruction) is never torn on the media. That holds where whole lines move between
//! the cache and the media's write queue (the ADR platforms DAX runs on); the architectural
//! guarantee is 8 bytes, and a platform that tore lines at 8 bytes could leave a slot's key
//! without its value.
//!
//! On an ordinary file (ext4, tmpfs) this level runs the same instructions, but the page
//! cache below the CPU caches is as volatile as they are: the write-backs cost time and buy
//! nothing a process crash needs (`Process` keeps that already), and a power loss still keeps
//! only what a checkpoint synced.

/// How this CPU writes a line back (chosen once per map, `detect`; Miri, which runs no
/// `asm!`, only ever picks none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(miri, allow(dead_code))]
pub(crate) enum Writeback {
    /// `clwb`: writes the line back and may keep it cached (the next access still hits).
    Clwb,
    /// `clflushopt`: writes back and evicts, without ordering against other flushes.
    ClflushOpt,
    /// `clflush`: writes back and evicts, ordered (the x86-64 baseline).
    Clflush,
}

impl Writeback {
    /// The best write-back this CPU has; `None` where there is none (not x86-64, or Miri).
    pub(crate) fn detect() -> Option<Writeback> {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            // `is_x86_feature_detected!` does not know these two on stable Rust: ask CPUID
            // (leaf 7, subleaf 0: EBX bit 24 is CLWB, bit 23 CLFLUSHOPT; Intel SDM vol. 2A,
            // "CPUID"; AMD reports them in the same bits). Leaf 0's EAX is the highest leaf.
            use core::arch::x86_64::{__cpuid, __cpuid_count};
            let (highest, features) = (__cpuid(0).eax, __cpuid_count(7, 0).ebx);
            if highest >= 7 && features & (1 << 24) != 0 {
                return Some(Writeback::Clwb);
            }
            if highest >= 7 && features & (1 << 23) != 0 {
                return Some(Writeback::ClflushOpt);
            }
            Some(Writeback::Clflush)
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        None
    }

    /// Start writing back the line holding `line`. Ordered before later stores only by
    /// [`fence`].
    #[inline(always)]
    pub(crate) fn line(self, line: *const u8) {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        // SAFETY:
        // - `line` points into a live mapping of ours (callers pass a bin or link bucket);
        //   the instructions only write the line back (and may evict it), changing no
        //   contents, so they may race with any access;
        // - `Clwb` and `ClflushOpt` exist only where `detect` found the feature; `clflush`
        //   is in the x86-64 baseline (SSE2).
        unsafe {
            match self {
                Writeback::Clwb => core::arch::asm!(
                    "clwb [{line}]",
                    line = in(reg) line,
                    options(nostack, preserves_flags)
                ),
                Writeback::ClflushOpt => core::arch::asm!(
                    "clflushopt [{line}]",
                    line = in(reg) line,
                    options(nostack, preserves_flags)
                ),
                Writeback::Clflush => core::arch::x86_64::_mm_clflush(line),
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        let _ = line;
    }

    /// Wait until every write-back started before is done, and order them before every later
    /// store (`sfence`: `clwb` and `clflushopt` are ordered by it, `clflush` already is).
    #[inline(always)]
    pub(crate) fn fence(self) {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        // SAFETY: `sfence` is in the x86-64 baseline (SSE) and has no operands.
        unsafe {
            core::arch::x86_64::_mm_sfence();
        }
    }
}

/// Test builds (feature `crash-points`): with `FLOE_FLUSH_LOG` set to a path, every line
/// written back is appended there as its table's generation, its byte offset in the table
/// file and its 64 bytes as of the write-back (little-endian words), so a test can build the
/// media a power loss would leave when only written-back lines survive (`tests/persist.rs`).
/// With `FLOE_SYNC_LOG`, every page a table file's sync writes is logged the same way (4096
/// bytes a record), for the power loss of a map on a disk.
#[cfg(feature = "crash-points")]
pub(crate) mod log {
    use std::{
        fs::File,
        io::Write,
        sync::{Mutex, OnceLock},
    };

    fn file() -> Option<&'static Mutex<File>> {
        static LOG: OnceLock<Option<Mutex<File>>> = OnceLock::new();
        LOG.get_or_init(|| {
            let path = std::env::var_os("FLOE_FLUSH_LOG")?;
            Some(Mutex::new(
                File::create(path).expect("create FLOE_FLUSH_LOG"),
            ))
        })
        .as_ref()
    }

    /// Record the write-back of the 64 bytes at `offset` of table `gen`'s file, whose words
    /// `contents` reads. It reads them under the log's lock, so the records are in the order
    /// their contents were read: a line's last record is then its newest content (read
    /// outside the lock, a thread's older read could be logged after another's newer one,
    /// and an image built from the log would lose the newer write, which the media would
    /// not).
    pub(crate) fn written_back(gen: u64, offset: usize, contents: impl FnOnce() -> [u64; 8]) {
        let Some(file) = file() else {
            return;
        };
        let mut file = file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let line = contents();
        let mut record = Vec::with_capacity(80);
        record.extend_from_slice(&gen.to_le_bytes());
        record.extend_from_slice(&(offset as u64).to_le_bytes());
        for word in line {
            record.extend_from_slice(&word.to_le_bytes());
        }
        // One write per record under the lock: records of two threads never interleave.
        file.write_all(&record).expect("write FLOE_FLUSH_LOG");
    }

    /// The sync log (`FLOE_SYNC_LOG`): every 4 KiB page a sync of a table file (`msync`) is
    /// about to write, with what it holds then, and the last content logged of each page
    /// (only pages that changed since are logged again).
    struct SyncLog {
        file: File,
        logged: std::collections::HashMap<(u64, usize), u64>,
    }

    fn sync_log() -> Option<&'static Mutex<SyncLog>> {
        static LOG: OnceLock<Option<Mutex<SyncLog>>> = OnceLock::new();
        LOG.get_or_init(|| {
            let path = std::env::var_os("FLOE_SYNC_LOG")?;
            Some(Mutex::new(SyncLog {
                file: File::create(path).expect("create FLOE_SYNC_LOG"),
                logged: std::collections::HashMap::new(),
            }))
        })
        .as_ref()
    }

    /// Whether syncs are logged: a test simulating power loss on a disk, which wants the
    /// ordering a disk needs (`migrate.rs`, "Power loss during a move") wherever its files
    /// are (a tmpfs would otherwise be spared it).
    pub(crate) fn logging_syncs() -> bool {
        sync_log().is_some()
    }

    /// Record that a sync of table `gen`'s file is about to write the pages at `offsets`,
    /// whose words `page` reads (atomically: other threads may be storing). Logged before the
    /// `msync`: what a page held when the sync began is on the disk once it returns (the
    /// sync may write newer contents too, which a test must not count on). A record is the
    /// generation, the page's offset, then its 4096 bytes; read under the log's lock, so a
    /// page's last record is its newest synced content.
    pub(crate) fn synced(
        gen: u64,
        offsets: impl Iterator<Item = usize>,
        page: impl Fn(usize) -> Vec<u64>,
    ) {
        let Some(log) = sync_log() else {
            return;
        };
        let mut log = log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for offset in offsets {
            let words = page(offset);
            let digest = words.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, &word| {
                (hash ^ word).wrapping_mul(0x0100_0000_01b3).rotate_left(17)
            });
            if log.logged.insert((gen, offset), digest) == Some(digest) {
                continue;
            }
            let mut record = Vec::with_capacity(16 + 8 * words.len());
            record.extend_from_slice(&gen.to_le_bytes());
            record.extend_from_slice(&(offset as u64).to_le_bytes());
            for word in words {
                record.extend_from_slice(&word.to_le_bytes());
            }
            log.file.write_all(&record).expect("write FLOE_SYNC_LOG");
        }
    }
}

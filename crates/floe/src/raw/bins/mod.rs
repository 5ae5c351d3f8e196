//! The default layout's table (`Layout::Bins`): DLHT's lock-free cache-line bins with
//! bounded chaining.
//!
//! # Design
//!
//! This is the layout and the protocols of DLHT (Katsarakis et al., "Dandelion Hashtable",
//! §3.1–§3.2.5), with two changes argued below: deletes retire a slot's key before freeing the
//! slot (so a racing put can never land on a deleted key), and an insert *commits* its slot
//! before it writes the key (so no slot ever holds a real key in a state it can be abandoned
//! from: that is what gives a slot its generation without a generation counter). Growing
//! (moving the bins to a larger table while operations go on) is in `migrate.rs`; here it
//! shows only as the bin state every search checks first: a bin being moved is waited for, a
//! moved bin answers `Moved` and the caller retries in the next table.
//!
//! Reading order: this essay, `control::header` (the words), `raw/layout.rs` (the lines),
//! `raw/loader.rs` (how a backend reads a line), the code below in the order of the essay,
//! then `batch.rs` (the batch loops: the same operations, their lines loaded ahead),
//! `walk.rs` (whole-table walks: bin snapshots, the crowd read, `clear`, the invariant
//! check), `migrate.rs` (moving bins between tables), `driver.rs` (one map's tables over
//! time) and `local.rs` (the same protocols for a table one thread owns: plain stores). A
//! persistent table's files and recovery are `raw/persist/`.
//!
//! ## Terminology
//!
//! - **Table**: an array of `nbins` *bins* plus a pool of *link buckets*.
//! - **Bin**: one 64-byte line (the *primary bucket*): a header word, a link word and three
//!   16-byte *slots*. A key lives only in the bin its hash selects (closed addressing).
//! - **Link bucket**: four more slots, 64 bytes. A bin chains at most three: one through the
//!   link word's `single` field, then two consecutive ones through its `pair` field, for at
//!   most 15 slots a bin (*bounded chaining*). The pool is a fraction of the bin count (one per
//!   eight bins by default), so most bins are one line and a get costs about one memory access.
//!   A bin keeps the buckets it chained while its table lives (invariant 5), so churn at a
//!   constant size spends the pool; the table is then replaced by one of its own size, a
//!   *refresh* (`step_for` in `driver.rs`), where a fill without deletes grows. A refreshed
//!   table's pool is larger and marked at the usual size (`link_mark`): past the mark the
//!   driver opens more of it to churn and grows the table for a fill (`opens_link_pool`).
//! - **Slot**: `(key, value)`, two 8-byte words, accessed only as one 16-byte atomic.
//! - **Header**: 32-bit version, 2-bit bin state (resize), 2-bit state per slot. See
//!   `control::header`.
//! - **Dead key** of bin `b`: a key that does not hash to `b`. No operation on bin `b` ever
//!   searches for it, so a slot holding it matches nothing. The dead key is 0 for every bin but
//!   the one key 0 hashes to, so fresh (zeroed) memory already holds the dead key everywhere
//!   else; that one bin's slots, and link buckets chained to it, are filled with its own dead
//!   key before anyone can reach them.
//! - **Real key**: any other key.
//!
//! ```text
//!  primary bucket (bin b), one cache line                 link pool (nbins / 8 lines)
//! +--------+--------+-------+-------+-------+-------+...   +------+------+------+------+
//! | header |  link  | key 0 | val 0 | key 1 | val 1 |...   | k  v | k  v | k  v | k  v |  i
//! +--------+--------+-------+-------+-------+-------+...   +------+------+------+------+
//!   0        8 |      16      24      32      40           | slots 3..7 of bin b       |
//!              +----- single = i + 1 -------------------->  +---------------------------+
//!              +----- pair   = j + 1 --> lines j, j+1: slots 7..11 and 11..15
//! ```
//!
//! ## Invariants
//!
//! 1. Every change to a header is a CAS that bumps its version. Two equal header words read
//!    at two times mean no slot of the bin changed state in between (the version is 32 bits;
//!    a reader would have to sleep through exactly 2^32 header CASes on one bin to be fooled).
//! 2. A slot that is `Invalid` holds the dead key. Only the insert that moved it `Invalid ->
//!    Inserting` writes it with a plain store, once, from the dead key to `(key, value)`.
//! 3. A slot holds a real key only while it is `Inserting` (after that store) or `Valid`. While
//!    it does, its key word changes only to the dead key (a delete or `clear` retiring it) or
//!    to the bin's *moved key* (a transfer retiring it, `migrate.rs`: a word that hashes
//!    elsewhere, so no search matches it either) and its value only by a 16-byte CAS that
//!    keeps the key (a put).
//! 4. A slot leaves `Inserting` for `Valid` only by a header CAS of a thread that has read
//!    the slot's key written (a later commit in the bin, see Publication), and it leaves
//!    `Inserting` or `Valid` for `Invalid` only by the one thread that retired its key. So
//!    between two frees of a slot there is exactly one real key in it, written once: the
//!    *incarnation*.
//! 5. Link fields go from zero to a pool index once and never change back while the table
//!    lives; a slot in link bucket `c` is never `Inserting` or `Valid` unless `c` is chained,
//!    and a bucket's slots hold the bin's dead key before the link field names it.
//! 6. A key is in at most one searchable (`Inserting` or `Valid`) or `Shadow` slot of its bin.
//!
//! ## Get (DLHT §3.2.1): a seqlock read
//!
//! Load the header (`Acquire`), match the key against the searchable slots of the primary line
//! (and of the chained link lines if some of their slots are searchable), `fence(Acquire)`, load
//! the header again (`Relaxed`). Equal words: the result is consistent and is returned;
//! otherwise retry. The SIMD loaders read each 16-byte slot of the line with one atomic load, so
//! a matched key comes with the value stored with it; a loader that reads slots in halves
//! (the scalar one under loom) re-reads a hit in an `Inserting` slot as one 16-byte atomic,
//! since its key may have been written during the line read, with no header change to show
//! it, beside the value from before.
//!
//! Linearization point: for a hit, the load of the slot that matched (its value is the key's
//! value at that instant, invariant 3). For a miss, the load of the slot that could have held
//! the key: between the two header loads no slot changed state, real keys only turned dead,
//! and the one slot that may gain the key without a header change is an `Inserting` slot whose
//! store had not happened when we read it (invariant 6 rules out a second one).
//!
//! The `Acquire` header load pairs with the `Release` CASes that commit and publish slots, so a
//! slot's content and the link word chaining its bucket are visible. The acquire fence pairs
//! with the `fence(Release)` an inserter issues between committing a slot and writing it: if a
//! reader's slot load sees such a write, its second header load sees the commit, so it retries
//! instead of trusting a slot that was freed and taken again under it.
//!
//! ## The fast read: a get from the primary line alone
//!
//! Every get first tries a shorter read (`read_primary`), which the validated search above
//! stands behind: load the header (`Acquire`), read the primary line, match the key against
//! its three key lanes *whatever their states*, take the value from the lane after a match,
//! load the link word (`Relaxed`), `fence(Acquire)`, load the header again. It answers when
//! the bin is not moving (`InTransfer`, `DoneTransfer`), the two header words are equal, and
//! either a key lane matched (a hit) or the link word is zero (a miss); otherwise the search
//! runs. It skips what the search spends most of its instructions on (the searchable mask,
//! the link buckets' masks, a loop), and it answers about 95% of the gets of a full table on
//! its own (the rest have their key, or a possible miss, in a link bucket).
//!
//! Why a match needs no slot states: a slot that is not searchable holds its bin's dead key
//! (`Invalid`, invariant 2; a retired slot), a shadow key (`Shadow`), or, in a bin being
//! moved, its moved key; none of them hashes to the bin, so none equals a key searched there.
//! A key lane can gain a real key only by step 6 of an insert whose commit changed the
//! header after some earlier load of it: if that commit came after our first header load,
//! the second load sees a different word and the fast read gives up; if before, the first
//! load already showed the slot `Inserting`, and the key read is the slot's incarnation, with
//! the value stored with it (the SIMD loaders read each slot as one 16-byte atomic; a loader
//! that reads slots in halves sends a hit in an `Inserting` slot to the search, whose
//! `confirm` reads it again). So a hit is what the validated search would return, linearized
//! at the same load.
//!
//! Why a hit's value may be read after the line: the SIMD loaders take it with one more
//! 8-byte load of the value's lane, after the line read and before the fence (fewer
//! instructions than taking a lane out of vector registers). Under equal header words the
//! matched slot's key word changes at most once, to the dead or the moved key (a retire,
//! invariant 3), and before that its value changes only by puts that keep the key; a retire
//! keeps the value. So the value read is the one the key held at some instant between the
//! line read and the value read, while it was in the slot: the hit is linearized there.
//!
//! Why a zero link word proves the miss: a link slot becomes searchable only by a commit
//! that came after its bucket was chained (invariant 5), and a commit that the first header
//! load read (`Acquire` against the commit's `Release`) makes the chaining visible to the
//! link load ordered after it. So under equal header words, a zero link word means no link
//! slot is searchable in that header, and the primary slots were all read: the miss argument
//! of Get applies. (A bucket chained since, for a commit after our first load, changes the
//! header.)
//!
//! ## The fast write: an insert or a put from the primary line alone
//!
//! Batched and single writes (`insert`, `upsert`, `fetch_add`) first try `write_primary`,
//! which the full paths below stand behind: load the header (`Acquire`); give up unless the
//! bin is `NoTransfer`, holds no `Shadow` slot and no taken link slot
//! (`Header::fast_write_blockers`, one test); read the primary line. A key lane that matches
//! is a put: CAS that slot from the `(key, value)` read to `(key, f(value))`, which succeeds
//! only on a slot holding the key at that instant (Put below; a torn read only fails it). No
//! match, every `Inserting` slot's key lane written (not the dead key) and a primary slot
//! free: commit the first free slot with the header CAS expecting the header loaded, which
//! publishes the `Inserting` slots as the full path's commit does, then store the pair. Any
//! other case, or a failed CAS, runs the full path from the start.
//!
//! Why that is Insert's steps 1-6: with no link slot taken and no shadow in the header, the
//! primary line is the whole bin. A `Valid` slot's key was published by a Release CAS that
//! our Acquire load read, after its publisher read the key written, so our line read sees
//! the key or its retirement, never an older word; an `Inserting` slot that reads written is
//! its incarnation's key for good (invariant 4), and one that reads the dead key makes us give
//! up (step 2's wait); an `Invalid` slot gains a key only through a commit, which changes
//! the header. So a successful CAS, which expects the header loaded, commits under a header
//! with no copy of the key, exactly as step 5 after steps 1-2. The reads need no
//! `fence(Acquire)` before the CAS, as a reader's second header load does: if the line read
//! saw a slot store made after some commit `C` (and its `fence(Release)`), our CAS cannot
//! precede `C` in the header's modification order, since `C` would then read from our
//! Release CAS (or a later RMW of its release sequence), ordering our read before `C` and
//! so before the store it saw; so `C` came first and our CAS, expecting a header from
//! before `C` or after it, either fails or saw `C`'s slot `Inserting`. (The loom models run
//! this path: weakening the Acquire header load, or dropping the unwritten-slot test, fails
//! them.)
//!
//! ## Insert (DLHT §3.2.2, after CLHT, reordered)
//!
//! 1. Search the bin (validated, as a get). Found: return the present value.
//! 2. For every `Inserting` slot of that header, load it: the dead key means an insert has
//!    committed but not written its key yet (it may be ours): wait and start over; our key
//!    means it has been written: return it as present. Any other key cannot turn into ours
//!    without a header change (invariant 4).
//! 3. Take the first `Invalid` slot `s`; none left: the bin is full, return `Err(Full)`.
//! 4. If `s` is in a link bucket that is not chained, take one (or two consecutive) buckets
//!    from the pool with a `fetch_add`, fill their slots with the dead key, and CAS the link
//!    field; if the pool is exhausted, return `Err(Full)`. Nothing was reserved, so nothing
//!    is undone; a bucket chained by an insert that then loses its CAS stays chained, for the
//!    next insert of the bin.
//! 5. **Commit**: CAS the header `Invalid -> Inserting` for `s`, expecting the header of 1.
//!    Failure: back to 1.
//! 6. `fence(Release)`, then store `(key, value)` into `s`: the linearization point.
//!
//! There is no step 7: the slot stays `Inserting`, written, until a later header CAS of the
//! bin publishes it (Publication, below). An insert's only locked instruction is its commit.
//!
//! At most one copy of a key: a commit needs the header unchanged since 1-2 found no copy in
//! a `Valid` slot (validated) nor in an `Inserting` one (each held the dead key, or another
//! key for good); keys do not appear in a slot without a header change except by step 6 of a
//! committed insert, which 2 waits for. Every later insert of the key sees the committed slot
//! in its header and waits for it or finds the key. The insert is linearized at its store: a
//! miss before it is right (previous paragraph of Get), a hit after it finds the key.
//!
//! ## Publication: `Inserting -> Valid` on someone else's CAS
//!
//! DLHT ends an insert with a second header CAS, `Inserting -> Valid`. Here nothing needs it
//! at once: an `Inserting` slot is searchable, a get that matches it has its key and value from
//! one atomic slot read (`confirm`), and a delete frees it from either state. What `Valid`
//! buys is that step 2 of later inserts need not look at the slot. So the next
//! commit in the bin publishes every `Inserting` slot of the header it expects, in the same
//! CAS that commits its own slot: its step 2 read each of them under that header and found a
//! real key (an unwritten one makes it wait, and any header change fails the CAS). That CAS
//! is a Release that comes after the step-2 load, and a reader that sees `Valid` (Acquire
//! header load) is ordered after the load, so by read-read coherence it sees the key or a
//! later write of the slot: the same guarantee it had when the inserter published. A slot
//! whose key was retired after that load and before the CAS becomes `Valid` holding the dead
//! key, which is the state a retired slot had before (its delete frees it from `Valid`).
//! Invariant 4 is what a retire needs: nobody but its retirer makes a slot `Invalid`, so a
//! delete frees each incarnation once.
//!
//! A bin keeps at most one `Inserting` slot in the common case (the last insert), so after a
//! fill every non-empty bin holds one. That is why the SIMD loaders read slot by slot:
//! with a line read that promised atomicity only per 8 bytes, every get that hit such a slot
//! had to read it again, and that re-read (a branch no predictor learns, plus portable-atomic's
//! dispatched call) made cache-resident gets about 1.4x slower (the benchmark log,
//! `results/history/BENCHMARKS-log-2026-11.md`, issue 12). The remaining cost of leaving a
//! slot `Inserting`: an insert into the bin reads it in step 2
//! (the line is already in L1), and step 2 also waits for a slot whose key a delete has
//! retired but not yet freed (two instructions of that delete's thread).
//!
//! Chaining: several inserters may race to chain one bucket; each takes a bucket from the pool
//! and CASes the link field; the losers' buckets are wasted (counted in `links_lost`). DLHT
//! accepts the same.
//!
//! ## Shadow inserts (DLHT §3.2.2's transactions)
//!
//! A shadow insert is an insert whose commit CAS takes its slot `Invalid -> Shadow` instead of
//! `-> Inserting`, and whose store writes `(shadow key, key)`: the bin's *shadow key* (a
//! second word that does not hash to the bin, other than its dead key; `DeadKeys::shadow_of`)
//! in the key word, the key in the value word. The value stays with the shadow's owner until
//! the commit. A `Shadow` slot is not searchable, so gets, puts, removes, walks and `clear`
//! never see it; it is not free, so no insert takes it; and step 2 of every insert reads it as it
//! reads `Inserting` slots (`Header::unconfirmed`): the dead key means wait, the shadow key
//! beside our key means the key is taken (the insert answers `Shadowed`), anything else is not
//! ours without a header change. So a key has at most one slot that is searchable or `Shadow`
//! (invariant 6 extended), and a competing insert sees a shadowed key as present, as DLHT
//! wants. `len` does not count it.
//!
//! Why the key is not stored as itself: the Put and Delete arguments below rest on "a CAS that
//! matches a real key matches a live incarnation". A put or remove of `k` that read `(k, v)`,
//! stalled while `k` was removed and shadow-inserted again into the same slot, would match a
//! shadow stored as `(k, v)` and change or free a key nobody can see. No operation that
//! searched for a key ever expects the shadow key (it does not hash to the bin), so no CAS but
//! a resolution's or a move's can match a shadow's content.
//!
//! - **Claim**: a commit, an abort and a move each take a shadow with one slot CAS,
//!   `(shadow key, key) -> (dead key, key)`, so exactly one of them wins; the slot is then
//!   `Shadow` holding the dead key, which step 2 of inserts and moves wait out as they wait
//!   out an unwritten slot. A resolution looks for the shadow under a header loaded `Acquire`
//!   that is not moving (a claimed bin sends it to the next table, where the move put it).
//! - **Abort**: the claim is its linearization point (nothing could see the key before or
//!   after); then the slot is freed as a delete frees its own (`Shadow -> Invalid`).
//! - **Commit**: after the claim, a header CAS `Shadow -> Inserting` (Release, retried on
//!   unrelated changes, a move's claim included: the move waits for the held slot), then
//!   `fence(Release)` and the store of `(key, value)`: an insert's steps 5-6 on a slot already
//!   ours, with the same linearization point (the store) and the same argument. Release on
//!   the header CAS orders the claim before it, so a reader or step 2 that sees the slot
//!   `Inserting` never finds the shadow key in it.
//!
//! A slot leaves `Shadow` only by its claimer, so invariant 4 holds with "its retirer" read as
//! "its claimer" (invariants 2 to 4 read `Inserting` as "`Inserting` or `Shadow`", and a
//! `Shadow` slot's one write is `(shadow key, key)`).
//!
//! - **Growth** claims a `Shadow` slot like any other (waiting for an unwritten one) and places
//!   it as a shadow of its key, under the new table's shadow key, in the new bin; a shrink
//!   counts it as taken. A commit that claimed first completes its store, and the move takes
//!   the key from the `Inserting` slot as it takes any committed insert's.
//! - An upsert or `fetch_add` of a shadowed key finds no searchable copy and an insert that
//!   answers `Shadowed`, so it retries until the shadow is committed or aborted: the shadow is
//!   the key's lock, and those are the only operations that wait for it.
//!
//! ## Delete (DLHT §3.2.3, with retired keys)
//!
//! DLHT deletes with one header CAS `Valid -> Invalid`. That alone loses updates: a put that
//! read the slot before the delete can still CAS it afterwards (the put does not look at the
//! header), and the delete would have returned an old value. So a delete here is:
//!
//! 1. Search (validated). Not found: return `None`.
//! 2. CAS the slot `(key, value) -> (dead key, value)`. Failure (a put changed the value, or
//!    the key was retired by someone else): back to 1. Success is the linearization point:
//!    the slot held the key at that instant (invariant 3), from then on every search misses
//!    it, and any put that read `(key, value)` fails its CAS.
//! 3. Free the slot: CAS the header `Inserting -> Invalid` or `Valid -> Invalid` for `s`
//!    (whichever it is; a commit may publish it meanwhile), retrying on unrelated header
//!    changes. The slot is reusable at once, with no tombstone.
//!
//! Nobody else moves a slot whose key we retired (invariant 4), so step 3 needs no check of
//! the slot's content. Step 2 may hit a later incarnation of the slot than the one step 1 read
//! (freed and re-inserted with the same key and value meanwhile); that incarnation held the
//! key at the CAS, so removing it is what a delete at that instant does.
//!
//! ## Put and friends (DLHT §3.2.4)
//!
//! A put (`put`, `update`, `compare_exchange`, the update half of `upsert` and `fetch_add`)
//! searches, then CASes the whole 16-byte slot from the `(key, old)` it read to `(key, new)`.
//! Linearization point: the successful CAS. The CAS succeeds only on a slot that holds the
//! key at that instant (invariant 3): in the incarnation the search read, or in a later one
//! that re-inserted the key with the same value. A committed insert is never abandoned, so a
//! write to any incarnation is never discarded, and the put needs no wait after its CAS.
//!
//! Why this closes the two ABAs of the earlier protocol (reserve, write, then publish or
//! abandon): there, an insert wrote its key into a reserved slot *before* deciding whether to
//! publish it, so a stalled put or delete whose expected pair equalled the new write could
//! succeed on a slot that was then abandoned (the put's write discarded; the delete freeing a
//! slot another delete had retired). Here a slot holds a real key only after the point of no
//! return, so a CAS that matches a real key always matches a live one.
//!
//! ## Memory orderings
//!
//! - Header loads that start an operation: `Acquire` (pair with the `Release` commit and
//!   publication CASes, see Get). Re-check loads: `Relaxed` after a `fence(Acquire)`.
//! - Commit CAS (`Invalid -> Inserting`, publishing written slots on the way): `AcqRel`.
//!   Release: the chaining of the slot's bucket (and the dead keys written into it) are
//!   visible to whoever sees the slot searchable, and the step-2 loads of the slots it
//!   publishes are ordered before whoever sees them `Valid` (Publication). It is followed by
//!   `fence(Release)` before the slot store (pairs with the readers' acquire fence).
//! - Freeing CAS (`-> Invalid`): `Release`, so that the dead key written before (the retire)
//!   is ordered before the slot can be committed again.
//! - Link field CAS: `AcqRel`; the link word is read `Acquire` by inserters and `Relaxed` by
//!   searches, which are ordered after it through the commit CAS of the slot they saw.
//! - Slot CAS: `AcqRel` (see `Slot::compare_exchange`).
//! - The pool cursor and the `len` shards: `Relaxed` (they order nothing).
//! - Growth (`migrate.rs`): the claim CAS (`NoTransfer -> InTransfer`) is `AcqRel` (it reads
//!   the slots published before it); the `DoneTransfer` CAS is `Release` and pairs with the
//!   `Acquire` header load of every search, which then reads the new table's bins; the chunk
//!   counter is `AcqRel` (a release sequence the last chunk's thread acquires) and the map's
//!   current-table pointer is stored `Release` and loaded `Acquire`.

mod batch;
pub(crate) mod driver;
mod local;
pub(crate) mod migrate;
mod walk;
pub(crate) use local::{IF_ABSENT, IF_PRESENT, UPSERT};
pub(crate) use walk::BinSnapshot;

use std::sync::Arc;

use crossbeam_utils::CachePadded;

#[cfg(not(floe_loom))]
use super::{alloc, backing::TableFile};
use super::{
    alloc::TableMemory,
    backing::{Backing, Writeback},
    counter::{Count, ShardedCounter},
    layout::{Bin, LinkBucket, Slot},
    lifecycle::Migration,
    loader::LineLoader,
    prefetch_far,
    prepare::{Ahead, Prepared},
    stats, Full, Inserted, Mismatch, Moved, Upserted,
};
use crate::{
    control::{
        group::Group,
        header::{
            slot_place, BinState, Header, Link, SlotMask, SlotState, LINK_SLOTS, PRIMARY_SLOTS,
        },
    },
    sync::{
        fence, spin,
        stat::{AtomicUsize as StdAtomicUsize, Ordering as StdOrdering},
        AtomicUsize, Ordering,
    },
};

/// What step 2 of insert found in the bin's `Inserting` slots.
enum Pending {
    /// None holds the key or is unwritten: every one holds another key (so the commit may
    /// publish them all, see Publication in the essay).
    Absent,
    /// One holds the key, with this value.
    Found(u64),
    /// One is a shadow insert of the key.
    Shadowed,
    /// One has not been written yet: wait.
    Unwritten,
}

/// The dead keys of a table: `primary` for every bin except `primary_bin`, `fallback` there.
/// Invariant: `primary` hashes to `primary_bin` and `fallback` does not.
///
/// Each bin also has a *shadow key* (`shadow_of`): a second word that does not hash to the
/// bin, other than its dead key. A `Shadow` slot holds `(shadow key, key)` (see Shadow inserts
/// in the essay), so no operation that searched for a key ever expects its content.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeadKeys {
    pub(crate) primary: u64,
    pub(crate) primary_bin: usize,
    pub(crate) fallback: u64,
    /// The bin `fallback` hashes to.
    fallback_bin: usize,
    /// The shadow key of `primary_bin`: neither `fallback` nor hashing there.
    shadow_at_primary: u64,
    /// The shadow key of `fallback_bin`: not zero (its dead key) and not hashing there.
    shadow_at_fallback: u64,
    /// The moved key of every bin but `moved_bin` (the one it hashes to): a slot a growth
    /// moved holds `(moved key, key)` (`migrate.rs`). Neither a dead nor a shadow key of any
    /// bin, so recovery tells a moved slot from a deleted one (`persist/recover.rs`).
    moved: u64,
    moved_bin: usize,
    /// The moved key of `moved_bin`: none of the others, not hashing there.
    moved_at_moved_bin: u64,
}

impl DeadKeys {
    /// The dead and shadow keys of a table of `bins` bins under the hash function `hash`: 0,
    /// and words that hash to other bins than 0 and the first of them do; `None` if the first
    /// 4096 candidates do not have them (a degenerate hasher).
    pub(crate) fn find(hash: &dyn Fn(u64) -> u64, bins: usize) -> Option<Self> {
        let bin_of = |word: u64| crate::hash::fastrange(hash(word), bins);
        // Zero: the dead key of every bin but one is then what fresh memory holds (essay).
        let primary_bin = bin_of(0);
        let mut away_from_primary = (1..=4096u64).filter(|&word| bin_of(word) != primary_bin);
        let fallback = away_from_primary.next()?;
        let shadow_at_primary = away_from_primary.next()?;
        let fallback_bin = bin_of(fallback);
        let shadow_at_fallback = (1..=4096u64).find(|&word| bin_of(word) != fallback_bin)?;
        let taken = [0, fallback, shadow_at_primary, shadow_at_fallback];
        let moved = (1..=4096u64).find(|word| !taken.contains(word))?;
        let moved_bin = bin_of(moved);
        let moved_at_moved_bin = (1..=4096u64)
            .find(|&word| !taken.contains(&word) && word != moved && bin_of(word) != moved_bin)?;
        Some(DeadKeys {
            primary: 0,
            primary_bin,
            fallback,
            fallback_bin,
            shadow_at_primary,
            shadow_at_fallback,
            moved,
            moved_bin,
            moved_at_moved_bin,
        })
    }

    #[inline(always)]
    pub(crate) fn of(self, bin: usize) -> u64 {
        if bin == self.primary_bin {
            self.fallback
        } else {
            self.primary
        }
    }

    /// The moved key of `bin` (see the field's docs).
    #[inline(always)]
    pub(crate) fn moved_of(self, bin: usize) -> u64 {
        if bin == self.moved_bin {
            self.moved_at_moved_bin
        } else {
            self.moved
        }
    }

    /// The shadow key of `bin` (see the type's docs).
    #[inline(always)]
    pub(crate) fn shadow_of(self, bin: usize) -> u64 {
        if bin == self.primary_bin {
            self.shadow_at_primary
        } else if bin == self.fallback_bin {
            self.shadow_at_fallback
        } else {
            self.fallback
        }
    }
}

/// The geometry and options of a table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub(crate) bins: usize,
    pub(crate) link_buckets: usize,
    /// Link buckets after the pool reserved for a migration's transfers (`migrate`).
    pub(crate) transfer_reserve: usize,
    pub(crate) huge_pages: bool,
}

/// A hit of a search: the slot and the value it held.
#[derive(Clone, Copy, Debug)]
struct Hit {
    slot: usize,
    value: u64,
}

/// A validated search: the header it is consistent with, and the hit if the key was present.
#[derive(Clone, Copy, Debug)]
struct Search {
    header: Header,
    hit: Option<Hit>,
}

/// The engine. Non-generic over key and value types: it stores 64-bit words; the facade
/// (`crate::map`) converts.
pub(crate) struct RawTable {
    // Fields `pub(in crate::raw)` are read by the persistence engine (`raw/persist/`: the
    // recovery sweeps and the table files) as well as by this table's own modules.
    pub(in crate::raw) bins: TableMemory<Bin>,
    pub(in crate::raw) links: TableMemory<LinkBucket>,
    /// Pool cursor: link buckets `[next_link, transfer_base)` are free. May run past the end
    /// (every later take then fails).
    pub(in crate::raw) next_link: CachePadded<AtomicUsize>,
    /// Start of the transfer reserve: link buckets `[transfer_base, links.len())` are only
    /// taken by a migration filling this table (`migrate`).
    pub(in crate::raw) transfer_base: usize,
    /// Inserts chain link buckets below this mark; past it they report `Full::LinkMark` and
    /// the driver decides whether to open more of the pool (`raise_link_mark`) or to grow.
    /// The whole regular pool (`transfer_base`, no mark) except in a refreshed table, whose
    /// pool is larger than the usual one so that churn refreshes seldom, and whose mark at
    /// the usual pool lets a fill grow where a usual table would (the driver's `step_for`).
    /// A hint: racing inserts may take a few buckets past it, never a wrong answer. Not in
    /// the table's file: a persistent table reopened after a refresh has no mark.
    link_mark: AtomicUsize,
    /// Cursor into the transfer reserve.
    pub(in crate::raw) transfer_next: CachePadded<AtomicUsize>,
    /// The migration out of this table.
    pub(crate) migration: Migration<RawTable>,
    /// Tables of the map alive (a statistic: decremented when this table is dropped).
    alive: Arc<StdAtomicUsize>,
    /// Link buckets taken from the pool but lost in a chaining race (never used).
    links_lost: AtomicUsize,
    pub(in crate::raw) len: ShardedCounter,
    pub(in crate::raw) dead: DeadKeys,
    /// Prepares this table's successor ahead of its growth (`prepare.rs`); `None` when nothing is
    /// prepared (`Builder::grow_ahead(0)`, a capped map, loom and Miri).
    ahead: Option<Ahead>,
    /// A persistent map's table file, its write-back and ordered moves; nothing for a table
    /// in memory (`raw/backing.rs`).
    pub(in crate::raw) backing: Backing,
}

/// Where a table's memory comes from.
pub(crate) enum TableSource {
    /// Zeroed memory of its own, or memory prepared ahead (`prepare.rs`).
    Fresh(Option<Prepared>),
    /// A persistent map's table file, mapped (`persist/store.rs`): bins at its start, the pool
    /// after them. `fresh`: the file was just created (all zeroes); otherwise it holds a table a
    /// crashed or closed process left, which `persist/recover.rs` settles before anyone uses it.
    /// `writeback`: the map's `Durability::Flush` write-back, if it has that level;
    /// `ordered_moves`: whether a growth into it orders its moves (`Store::orders_moves`).
    #[cfg(not(floe_loom))]
    File {
        gen: u64,
        region: Arc<alloc::Region>,
        fresh: bool,
        writeback: Option<Writeback>,
        ordered_moves: bool,
    },
}

impl RawTable {
    /// Allocate a table. `None` if the memory cannot be had or a size overflows.
    /// `prepared`: memory made ready for it (`prepare.rs`); `ahead`: how it prepares its own
    /// successor's.
    pub(crate) fn new(
        geometry: Geometry,
        dead: DeadKeys,
        alive: Arc<StdAtomicUsize>,
        source: TableSource,
        ahead: Option<Ahead>,
    ) -> Option<Self> {
        debug_assert!(geometry.bins >= 2 && dead.primary_bin < geometry.bins);
        // `bin_of` relies on every table having a bin.
        if geometry.bins == 0 {
            return None;
        }
        let links = geometry
            .link_buckets
            .checked_add(geometry.transfer_reserve)?;
        // Link indexes are stored as `index + 1` in 32-bit fields.
        if links >= u32::MAX as usize {
            return None;
        }
        // `fresh`: zeroed memory, not a file holding another process's table.
        let (bins, links, backing, fresh) = match source {
            TableSource::Fresh(prepared) => {
                let (bins, links) = match prepared.and_then(|p| p.into_memory(geometry.bins, links))
                {
                    Some(memory) => memory,
                    None => (
                        TableMemory::zeroed(geometry.bins, geometry.huge_pages)?,
                        TableMemory::zeroed(links, geometry.huge_pages)?,
                    ),
                };
                (bins, links, Backing::in_memory(), true)
            }
            #[cfg(not(floe_loom))]
            TableSource::File {
                gen,
                region,
                fresh: created,
                writeback,
                ordered_moves,
            } => {
                let bin_bytes = geometry.bins.checked_mul(64)?;
                let pool = if links == 0 {
                    TableMemory::zeroed(0, false)?
                } else {
                    TableMemory::in_region_at(Arc::clone(&region), bin_bytes, links)?
                };
                let bins = TableMemory::in_region_at(Arc::clone(&region), 0, geometry.bins)?;
                let backing = Backing::file(TableFile { gen, region }, writeback, ordered_moves);
                (bins, pool, backing, created)
            }
        };
        alive.fetch_add(1, StdOrdering::Relaxed);
        let table = Self {
            bins,
            links,
            next_link: CachePadded::new(AtomicUsize::new(0)),
            transfer_base: geometry.link_buckets,
            link_mark: AtomicUsize::new(geometry.link_buckets),
            transfer_next: CachePadded::new(AtomicUsize::new(0)),
            migration: Migration::new(),
            alive,
            links_lost: AtomicUsize::new(0),
            len: ShardedCounter::new(),
            dead,
            ahead,
            backing,
        };
        // Invariant 2: free slots hold their bin's dead key. Zeroed memory holds 0, the dead
        // key of every bin but `primary_bin` when `primary` is 0 (as the map chooses it). A
        // table file left by another process holds keys: recovery settles it instead.
        if !fresh {
            return Some(table);
        }
        if dead.primary == 0 {
            table.fill_dead(&table.bins[dead.primary_bin].slots, dead.fallback);
        } else {
            for (index, bin) in table.bins.iter().enumerate() {
                table.fill_dead(&bin.slots, dead.of(index));
            }
        }
        Some(table)
    }

    /// Store `dead` into the slots of link buckets just taken from the pool, which nobody
    /// else can reach yet. Always stored, 0 included: a persistent table's recovery recounts
    /// the pool cursor from the chained buckets only, so a bucket taken and lost in a chaining
    /// race before a crash may be handed out again holding another bin's dead key.
    fn fill_taken(&self, slots: &[Slot], dead: u64) {
        for slot in slots {
            slot.store(dead, dead);
        }
    }

    /// Store `dead` into free slots nobody else can reach yet (a new table's bins). Skipped
    /// for 0, which zeroed memory already holds (and which must not touch the pages of a
    /// fresh mapping).
    fn fill_dead(&self, slots: &[Slot], dead: u64) {
        if dead != 0 {
            for slot in slots {
                slot.store(dead, 0);
            }
        }
    }

    /// A crash point (feature `crash-points`, `sync::crash_point`), counted only in a
    /// persistent table: the tables other code builds (the backend's calibration) do not
    /// shift the numbering.
    #[inline(always)]
    pub(crate) fn crash_point(&self) {
        #[cfg(all(feature = "crash-points", not(floe_loom)))]
        if self.backing.is_file() {
            crate::sync::crash_point();
        }
    }

    /// `Durability::Flush` (`persist/writeback.rs`): write back the lines of bin `index` (its own
    /// and each chained link bucket's) and fence, so what they hold now is on the media when this
    /// returns. Nothing for every other table (one predictable branch).
    #[inline(always)]
    pub(crate) fn write_back_bin(&self, index: usize) {
        if let Some(writeback) = self.backing.writeback() {
            self.write_back_lines(writeback, index);
        }
    }

    /// Whether a growth into this table orders its moves (`migrate.rs`, "Power loss during a
    /// move").
    #[inline(always)]
    pub(crate) fn orders_moves(&self) -> bool {
        self.backing.orders_moves()
    }

    /// Ordered moves: sync the lines of bins `bins` of this (new) table and of every link
    /// bucket chained to them, and wait for the disk. A failure (the device's) does not stop
    /// the growth, which cannot wait for a device that may never answer: it is kept and the
    /// next checkpoint reports it (until one succeeds, no power-loss promise holds anyway).
    #[cold]
    pub(crate) fn sync_bins(&self, bins: core::ops::Range<usize>) {
        if !self.backing.is_file() || bins.is_empty() {
            return;
        }
        let pool = 64 * self.bins();
        let mut lines = Vec::with_capacity(1 + 3 * bins.len());
        lines.push(bins.start * 64..bins.end * 64);
        for bin in &self.bins[bins] {
            // Relaxed: this thread chained the buckets of the bins it moved (only the mover
            // writes a new bin before its old bin is done). A bin in the range that another
            // thread is moving may be chaining meanwhile: its lines are that thread's to sync,
            // and syncing some of them here too only costs their writes.
            let link = Link(bin.link.load(Ordering::Relaxed));
            for bucket in 0..3 {
                if let Some(at) = link.bucket(bucket).filter(|&at| at < self.links.len()) {
                    lines.push(pool + 64 * at..pool + 64 * (at + 1));
                }
            }
        }
        self.backing.sync_ranges(lines);
    }

    /// Whether operations on this table write their lines back (`Durability::Flush`).
    pub(crate) fn writes_back(&self) -> bool {
        self.backing.writeback().is_some()
    }

    /// Cold and out of line: the branch to it is the whole cost `Durability::Process` pays
    /// (the hot paths keep their code size and registers).
    #[cold]
    #[inline(never)]
    fn write_back_lines(&self, writeback: Writeback, index: usize) {
        let bin = &self.bins[index];
        // Relaxed: this thread's own chaining, and any chaining it read (with Acquire) while
        // searching, are visible to it by coherence; a bucket chained by another thread since
        // holds nothing this operation wrote or read.
        let link = Link(bin.link.load(Ordering::Relaxed));
        self.write_back_line(writeback, (bin as *const Bin).cast(), || {
            let (k0, v0) = bin.slots[0].load();
            let (k1, v1) = bin.slots[1].load();
            let (k2, v2) = bin.slots[2].load();
            let header = bin.header.load(Ordering::Relaxed);
            [header, link.0, k0, v0, k1, v1, k2, v2]
        });
        for bucket in 0..3 {
            let Some(linked) = link.bucket(bucket).and_then(|at| self.links.get(at)) else {
                continue;
            };
            self.write_back_line(writeback, (linked as *const LinkBucket).cast(), || {
                let mut words = [0; 8];
                for (slot, pair) in linked.slots.iter().zip(words.chunks_mut(2)) {
                    (pair[0], pair[1]) = slot.load();
                }
                words
            });
        }
        writeback.fence();
    }

    /// Write back the line at `line` (a bin or link bucket of this table), logged with its
    /// content under the `crash-points` feature (`Backing::log_written_back`).
    #[inline(always)]
    fn write_back_line(
        &self,
        writeback: Writeback,
        line: *const u8,
        contents: impl FnOnce() -> [u64; 8],
    ) {
        self.backing.log_written_back(line, contents);
        writeback.line(line);
    }

    /// The dead key of `bin`.
    #[inline(always)]
    pub(crate) fn dead_key(&self, bin: usize) -> u64 {
        self.dead.of(bin)
    }

    pub(crate) fn bins(&self) -> usize {
        self.bins.len()
    }

    /// The bin `hash` maps to (`fastrange`), without a bounds check: the batch loops locate
    /// every request through it.
    #[inline(always)]
    pub(crate) fn bin_of(&self, hash: u64) -> &Bin {
        let index = crate::hash::fastrange(hash, self.bins.len());
        // SAFETY: fastrange(h, n) = floor(h * n / 2^64) < n for every h < 2^64, and every
        // table has at least one bin (`new` refuses none), so `index` is in bounds.
        unsafe { self.bins.get_unchecked(index) }
    }

    /// The index of `bin`, one of this table's bins (`bin_of`).
    #[inline(always)]
    fn index_of(&self, bin: &Bin) -> usize {
        debug_assert!(self.bins.as_ptr_range().contains(&(bin as *const Bin)));
        (bin as *const Bin as usize - self.bins.as_ptr() as usize) / core::mem::size_of::<Bin>()
    }

    /// Link buckets of the regular pool (without the transfer reserve).
    pub(crate) fn link_buckets(&self) -> usize {
        self.transfer_base
    }

    /// Set the pool's mark (`link_mark`) at `link_buckets` of it, before the table is
    /// installed.
    pub(crate) fn set_link_mark(&self, link_buckets: usize) {
        self.link_mark
            .store(link_buckets.min(self.transfer_base), Ordering::Relaxed);
    }

    /// Open `link_buckets` more of the pool to inserts, past those taken so far.
    pub(crate) fn raise_link_mark(&self, link_buckets: usize) {
        let to = self
            .next_link
            .load(Ordering::Relaxed)
            .saturating_add(link_buckets)
            .min(self.transfer_base);
        self.link_mark.fetch_max(to, Ordering::Relaxed);
    }

    /// Whether an insert that takes `width` link buckets now finds the pool spent up to its
    /// mark, short of its end (`Full::LinkMark`).
    #[inline]
    fn at_link_mark(&self, width: usize) -> bool {
        let mark = self.link_mark.load(Ordering::Relaxed);
        mark < self.transfer_base && self.next_link.load(Ordering::Relaxed) + width > mark
    }

    /// Link buckets of the transfer reserve.
    pub(crate) fn transfer_reserve(&self) -> usize {
        self.links.len() - self.transfer_base
    }

    /// Link buckets taken from the pool so far (chained or lost).
    pub(crate) fn link_buckets_used(&self) -> usize {
        self.next_link
            .load(Ordering::Relaxed)
            .min(self.transfer_base)
            + self.transfer_used()
    }

    pub(crate) fn links_lost(&self) -> usize {
        self.links_lost.load(Ordering::Relaxed)
    }

    /// Slots in the table: three per bin plus four per link bucket of the pool.
    pub(crate) fn slots(&self) -> usize {
        self.bins.len() * PRIMARY_SLOTS + self.transfer_base * LINK_SLOTS
    }

    /// Bytes of table memory (bins and link pool).
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.bins.bytes() + self.links.bytes()
    }

    pub(crate) fn huge_pages(&self) -> bool {
        self.bins.huge_pages()
    }

    /// Fault the table's memory in now (`Builder::populate`); `false` if the kernel could not.
    pub(crate) fn populate(&self) -> bool {
        self.bins.populate() & self.links.populate()
    }

    pub(crate) fn len(&self) -> usize {
        self.len.sum()
    }

    /// A write of `hash` is about to run on this table (not migrating): if it is one of the
    /// writes that pace the preparation of this table's successor, do that (`prepare.rs`).
    #[inline(always)]
    pub(crate) fn pace_preparation(&self, hash: u64) {
        if let Some(ahead) = &self.ahead {
            if Ahead::turn_of(hash) {
                ahead.pace(self.len());
            }
        }
    }

    /// The address of a bin, for software prefetching.
    #[inline(always)]
    pub(crate) fn bin_ptr(&self, bin: usize) -> *const u8 {
        (&self.bins[bin] as *const Bin).cast()
    }

    /// Start loading `bin`'s line into L2 (a lookahead ring's entry, `ring.rs`).
    #[inline(always)]
    pub(crate) fn prefetch_bin(&self, bin: usize) {
        prefetch_far(self.bin_ptr(bin));
    }

    /// Start loading the link buckets chained to `bin`; `true` if it has any. Reads the bin's
    /// link word, so call it once the bin's own line has had time to arrive (the ring's chase).
    #[inline(always)]
    pub(crate) fn prefetch_chain(&self, bin: usize) -> bool {
        self.chase(&self.bins[bin])
    }

    /// `prefetch_chain` of a bin reached by reference.
    #[inline(always)]
    fn chase(&self, bin: &Bin) -> bool {
        // Relaxed: a hint only. Link fields never go back to zero (invariant of `Bin::link`),
        // so a stale word at worst misses a bucket chained since; the operation itself reads
        // the word again with the orderings it needs.
        let link = Link(bin.link.load(Ordering::Relaxed));
        if link.0 == 0 {
            return false;
        }
        self.prefetch_links(link);
        true
    }

    /// The ring's chase for a request on `key` (`ring.rs`): half a window after `bin`'s line
    /// was asked for, start loading the link buckets chained to it, unless the key is in the
    /// primary line (as the dense layout's chase asks for an alternative line only for a key
    /// its home line does not answer). Following every chain asked for 0.26 link lines a get
    /// where 0.08 are read (23.5M keys at capacity, counted with `line-stats`), so about one
    /// line in seven a batched get fetched went unread; only a chained bin pays the compare
    /// (3.6 instructions a get there). A hint, read with the loader's plain line read
    /// (`Relaxed` link): a key stored or moved meanwhile costs at worst a line the request
    /// waits for.
    ///
    /// `true` if it asked for the chain.
    #[inline(always)]
    pub(crate) fn chase_key<P: LineLoader>(&self, loader: P, bin: &Bin, key: u64) -> bool {
        let link = Link(bin.link.load(Ordering::Relaxed));
        if link.0 == 0 || loader.primary(bin).match_word(key) & SlotMask::PRIMARY_KEY_LANES != 0 {
            return false;
        }
        self.prefetch_links(link);
        true
    }

    /// Out of line: a tenth of the bins at the load a map grows at chain a bucket.
    #[cold]
    #[inline(never)]
    fn prefetch_links(&self, link: Link) {
        for bucket in 0..3 {
            if let Some(index) = link.bucket(bucket) {
                if let Some(linked) = self.links.get(index) {
                    stats::link_prefetched();
                    prefetch_far((linked as *const LinkBucket).cast());
                }
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Reading
    // ---------------------------------------------------------------------------------------

    /// Match `key` against the slots `header` says are searchable. Not validated: see `find`.
    #[inline(always)]
    fn search<P: LineLoader>(&self, loader: P, bin: &Bin, header: Header, key: u64) -> Option<Hit> {
        let searchable = header.searchable();
        if searchable.is_empty() {
            return None;
        }
        let line = loader.primary(bin);
        let hits = SlotMask::from_primary_lanes(line.match_word(key)).and(searchable);
        if let Some(slot) = hits.first() {
            return self.confirm::<P>(bin, header, slot, key, line.lane(3 + 2 * slot));
        }
        if searchable.and(SlotMask::LINKED).is_empty() {
            return None;
        }
        // Relaxed: the link fields we follow were set before the commit of a slot that
        // `header` (an Acquire load) shows searchable, so they are visible (invariant 5).
        let link = Link(bin.link.load(Ordering::Relaxed));
        for bucket in 0..3 {
            let in_bucket = searchable.and(SlotMask::link_bucket(bucket));
            if in_bucket.is_empty() {
                continue;
            }
            // A searchable slot's bucket is chained and the chaining is visible (invariant 5
            // and the Acquire above), so this never fails; loom and the stress tests would
            // catch it.
            let Some(index) = link.bucket(bucket) else {
                debug_assert!(false, "a searchable slot in an unchained link bucket");
                continue;
            };
            let line = loader.link(&self.links[index]);
            stats::line_read();
            let hits = SlotMask::from_link_lanes(line.match_word(key), bucket).and(in_bucket);
            if let Some(slot) = hits.first() {
                let lane = 2 * ((slot - PRIMARY_SLOTS) % LINK_SLOTS);
                return self.confirm::<P>(bin, header, slot, key, line.lane(lane + 1));
            }
        }
        None
    }

    /// A key matched `slot` in a line read: a hit with `value`, unless the slot is `Inserting`
    /// and the loader reads a line word by word (`P::ATOMIC_SLOTS` false: the scalar loader
    /// under loom). Then its key may have been stored during the line read with no header
    /// change to show it, beside an older value; so the slot is read again as one 16-byte
    /// atomic. (A `Valid` slot's words change only one at a time, invariant 3.)
    #[inline(always)]
    fn confirm<P: LineLoader>(
        &self,
        bin: &Bin,
        header: Header,
        slot: usize,
        key: u64,
        value: u64,
    ) -> Option<Hit> {
        if P::ATOMIC_SLOTS || header.inserting().and(SlotMask::single(slot)).is_empty() {
            return Some(Hit { slot, value });
        }
        let (now, value) = self.slot(bin, slot).load();
        // Only a retire can have changed the key since it matched (invariant 3).
        (now == key).then_some(Hit { slot, value })
    }

    /// A search validated against the bin header (the seqlock read described in the essay).
    /// Waits while the bin is being moved to the next table; `Moved` once it has been.
    #[inline(always)]
    fn find<P: LineLoader>(&self, loader: P, bin: &Bin, key: u64) -> Result<Search, Moved> {
        // The bin's own line: read by the header load even when no slot is Valid. Retries
        // re-read it from the cache and are not counted again.
        stats::line_read();
        loop {
            // Acquire: pairs with the Release commit CAS of every slot we may read (and of
            // the commit that published it), and with the Release CAS that marks the bin
            // DoneTransfer (`migrate`).
            let header = Header(bin.header.load(Ordering::Acquire));
            // A frozen bin still holds its keys (`migrate`): reads go on.
            if header.moving() {
                return Err(self.moved(bin, header));
            }
            let hit = self.search(loader, bin, header, key);
            // Pairs with the inserters' fence(Release) between commit and slot store.
            fence(Ordering::Acquire);
            if bin.header.load(Ordering::Relaxed) == header.0 {
                return Ok(Search { header, hit });
            }
            spin();
        }
    }

    /// A search found `bin` moving (`header`): wait out a transfer in progress.
    #[cold]
    #[inline(never)]
    fn moved(&self, bin: &Bin, header: Header) -> Moved {
        if header.bin_state() == BinState::InTransfer {
            self.wait_transferred(bin);
        }
        Moved
    }

    /// The slot `slot` of `bin`. The slot must be searchable in a header the caller loaded
    /// (`Acquire`), or about to be committed by the caller after chaining, so its bucket is
    /// chained (invariant 5).
    #[inline(always)]
    pub(in crate::raw) fn slot<'a>(&'a self, bin: &'a Bin, slot: usize) -> &'a Slot {
        match slot_place(slot) {
            (None, index) => &bin.slots[index],
            (Some(bucket), index) => {
                // Acquire: pairs with the AcqRel CAS that chained the bucket.
                let link = Link(bin.link.load(Ordering::Acquire));
                let pool_index = link
                    .bucket(bucket)
                    .expect("a searchable slot's bucket is chained");
                &self.links[pool_index].slots[index]
            }
        }
    }

    /// The value of `key` in `bin`.
    #[inline(always)]
    pub(crate) fn get<P: LineLoader>(
        &self,
        loader: P,
        bin: usize,
        key: u64,
    ) -> Result<Option<u64>, Moved> {
        self.get_in(loader, &self.bins[bin], key)
    }

    /// `get` of a bin reached by reference: the fast read, and the validated search when it
    /// cannot answer.
    #[inline(always)]
    fn get_in<P: LineLoader>(&self, loader: P, bin: &Bin, key: u64) -> Result<Option<u64>, Moved> {
        if let Some(answer) = self.read_primary(loader, bin, key) {
            stats::line_read();
            return Ok(answer);
        }
        Ok(self.find(loader, bin, key)?.hit.map(|hit| hit.value))
    }

    /// The fast read (essay, "The fast read"): the answer from one read of the bin's primary
    /// line, or `None` where the validated search must run (the bin is moving or changed
    /// under the read, or a miss may lie in a link bucket).
    #[inline(always)]
    fn read_primary<P: LineLoader>(&self, loader: P, bin: &Bin, key: u64) -> Option<Option<u64>> {
        // Acquire: as in `find` (pairs with the Release commits and the DoneTransfer CAS).
        let header = Header(bin.header.load(Ordering::Acquire));
        let line = loader.primary(bin);
        let hits = line.match_word(key) & SlotMask::PRIMARY_KEY_LANES;
        let found = hits != 0;
        // The lane after the key's holds its value; for a miss, some lane (unused). The SIMD
        // loaders read it from memory again (essay, "The fast read", says why that is still
        // the key's value).
        let value = loader.primary_word(bin, &line, (hits.trailing_zeros() as usize + 1) & 7);
        // Relaxed: ordered between the two header loads by the Acquire load and the fence, as
        // the slots are; a bucket chained for a slot `header` shows searchable is visible.
        let link = bin.link.load(Ordering::Relaxed);
        // What the Acquire above guarantees (invariant 5): the loom models check it.
        debug_assert!(
            link != 0 || header.searchable().and(SlotMask::LINKED).is_empty(),
            "a searchable link slot in an unchained bucket"
        );
        // A loader that reads slots in halves (the scalar one under loom) may pair a key
        // stored during the read with the value from before it: such a hit in an `Inserting`
        // slot goes to the search, whose `confirm` reads the slot again.
        let torn = !P::ATOMIC_SLOTS
            && found
            && !header
                .inserting()
                .and(SlotMask::single((hits.trailing_zeros() as usize - 2) / 2))
                .is_empty();
        // Pairs with the inserters' fence(Release) between commit and slot store (as `find`).
        fence(Ordering::Acquire);
        let changed = bin.header.load(Ordering::Relaxed) ^ header.0;
        // One branch for every reason to search instead.
        let unsure =
            header.moving_bits() | changed | if found { 0 } else { link } | u64::from(torn);
        (unsure == 0).then_some(found.then_some(value))
    }

    /// The fast write (essay, "The fast write"): from one read of the bin's primary line,
    /// insert `key -> init` into a free primary slot if the key is absent, or, if `UPDATE`,
    /// replace a value `old` found there by `update(old)`. The previous value (`None`: the
    /// key was inserted), or `None` where the full path must run (a moving, frozen or chained
    /// bin, a shadow, an unwritten slot, no free primary slot, a lost race, or a present key
    /// without `UPDATE`). The caller counts an inserted key in `len`.
    #[inline(always)]
    fn write_primary<P: LineLoader, const UPDATE: bool>(
        &self,
        loader: P,
        bin_index: usize,
        bin: &Bin,
        key: u64,
        init: u64,
        update: &mut impl FnMut(u64) -> u64,
    ) -> Option<Option<u64>> {
        // Acquire: pairs with the Release commits and publications, as in `find`.
        let header = Header(bin.header.load(Ordering::Acquire));
        if header.fast_write_blockers() != 0 {
            return None;
        }
        let line = loader.primary(bin);
        let hits = line.match_word(key) & SlotMask::PRIMARY_KEY_LANES;
        if hits != 0 {
            if !UPDATE {
                return None;
            }
            // A put (essay, Put): the CAS succeeds only on a slot holding the key at that
            // instant, with the value read beside it (a torn read, or a value read again
            // after a put, only fails the CAS).
            let lane = hits.trailing_zeros() as usize;
            let old = loader.primary_word(bin, &line, lane + 1);
            let new = update(old);
            loader
                .cas_slot(&bin.slots[(lane - 2) / 2], (key, old), (key, new))
                .ok()?;
            stats::line_read();
            return Some(Some(old));
        }
        // Step 2 on the line already read: an `Inserting` slot still holding the dead key
        // is unwritten (or retired, not yet freed); the full path waits for it. Most headers
        // show no `Inserting` slot, and those skip the dead key's lookup and match.
        let inserting_lanes = (header.inserting().0 << 2) as u8 & SlotMask::PRIMARY_KEY_LANES;
        if inserting_lanes != 0 && line.match_word(self.dead.of(bin_index)) & inserting_lanes != 0 {
            return None;
        }
        // The commit (Insert step 5), publishing the `Inserting` slots read written above,
        // all of them primary (no link slot is taken in `header`).
        let (slot, committed) = header.commit_first_free_primary()?;
        // AcqRel as in the full path. No fence(Acquire) before it, unlike a reader's second
        // header load: the CAS is a read-modify-write, and that is enough (essay).
        bin.header
            .compare_exchange(header.0, committed.0, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        self.crash_point();
        // Pairs with the readers' fence(Acquire), as in the full path.
        fence(Ordering::Release);
        // The linearization point.
        loader.store_slot(&bin.slots[slot], key, init);
        self.crash_point();
        stats::line_read();
        Some(None)
    }

    // ---------------------------------------------------------------------------------------
    // Insert
    // ---------------------------------------------------------------------------------------

    /// Insert `key -> value` if `key` is absent.
    #[inline(always)]
    pub(crate) fn insert<P: LineLoader>(
        &self,
        loader: P,
        bin_index: usize,
        key: u64,
        value: u64,
    ) -> Result<Result<Inserted, Full>, Moved> {
        self.insert_as::<P, false>(loader, bin_index, key, value)
    }

    /// Insert `key -> value` if `key` is absent, or, if `SHADOW`, a shadow of `key` (`value`
    /// unused: see Shadow inserts in the essay; hidden from everything but inserts until
    /// committed).
    #[inline(always)]
    pub(crate) fn insert_as<P: LineLoader, const SHADOW: bool>(
        &self,
        loader: P,
        bin_index: usize,
        key: u64,
        value: u64,
    ) -> Result<Result<Inserted, Full>, Moved> {
        let bin = &self.bins[bin_index];
        self.insert_counted::<P, SHADOW>(loader, bin, bin_index, key, value, &self.len)
    }

    /// `insert_as` into `bin` (whose index is `bin_index`: a batch has both, and looking the
    /// bin up again by index cost a bounds check a write), counting a new key in `len`: the
    /// fast write where it can answer (a key never shadows there), else the essay's Insert
    /// steps.
    #[inline(always)]
    fn insert_counted<P: LineLoader, const SHADOW: bool>(
        &self,
        loader: P,
        bin: &Bin,
        bin_index: usize,
        key: u64,
        value: u64,
        len: &impl Count,
    ) -> Result<Result<Inserted, Full>, Moved> {
        debug_assert!(core::ptr::eq(bin, &self.bins[bin_index]));
        if !SHADOW
            && self
                .write_primary::<P, false>(loader, bin_index, bin, key, value, &mut |old| old)
                .is_some()
        {
            len.add(1);
            return Ok(Ok(Inserted::New));
        }
        let search = self.find(loader, bin, key)?;
        self.insert_searched::<P, SHADOW>(loader, bin_index, key, value, search, len)
    }

    /// `insert_as` after its step 1 found the key absent in `first` (an upsert's search):
    /// the first attempt goes on from there, any retry searches again.
    #[inline(always)]
    fn insert_searched<P: LineLoader, const SHADOW: bool>(
        &self,
        loader: P,
        bin_index: usize,
        key: u64,
        value: u64,
        first: Search,
        len: &impl Count,
    ) -> Result<Result<Inserted, Full>, Moved> {
        let bin = &self.bins[bin_index];
        let mut first = Some(first);
        loop {
            let Search { header, hit } = match first.take() {
                Some(search) => search,
                None => self.find(loader, bin, key)?,
            };
            if let Some(hit) = hit {
                return Ok(Ok(Inserted::Exists(hit.value)));
            }
            if header.bin_state() == BinState::Frozen {
                // A shrink is about to move the bin: no key may be added to it.
                self.wait_unfrozen(bin);
                continue;
            }
            match self.committed_inserts(loader, bin_index, bin, header, key) {
                Pending::Absent => {}
                Pending::Found(value) => return Ok(Ok(Inserted::Exists(value))),
                Pending::Shadowed => return Ok(Ok(Inserted::Shadowed)),
                Pending::Unwritten => {
                    spin();
                    continue;
                }
            }
            let Some(slot) = header.invalid().first() else {
                return Ok(Err(Full::Bin));
            };
            if let Err(full) = self.chain_for(bin_index, bin, slot) {
                return Ok(Err(full));
            }
            if let (Some(bucket), _) = slot_place(slot) {
                if header
                    .searchable()
                    .and(SlotMask::link_bucket(bucket))
                    .is_empty()
                {
                    // A link line the search did not read.
                    stats::line_read();
                }
            }
            // The commit (essay, Insert step 5), publishing the bin's other `Inserting` slots
            // on the way: step 2 read each of them written, under this very header. AcqRel:
            // Release publishes the chaining above to readers that see the slot searchable,
            // and orders the loads of step 2 before the new `Valid` states.
            let state = if SHADOW {
                SlotState::Shadow
            } else {
                SlotState::Inserting
            };
            let committed = header
                .with_published(header.inserting())
                .with_slot(slot, state);
            if bin
                .header
                .compare_exchange(header.0, committed.0, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                spin();
                continue;
            }
            self.crash_point();
            // Pairs with the readers' fence(Acquire): a reader that sees the store below also
            // sees the commit above, and so fails its version check if it started before it.
            fence(Ordering::Release);
            // The linearization point. The slot stays `Inserting` until a later header CAS of
            // the bin publishes it: no second header CAS per insert. A shadow stores its key
            // as the value, beside the bin's shadow key (see Shadow inserts in the essay); its
            // value is its owner's to keep until the commit.
            if SHADOW {
                loader.store_slot(self.slot(bin, slot), self.dead.shadow_of(bin_index), key);
            } else {
                loader.store_slot(self.slot(bin, slot), key, value);
            }
            self.crash_point();
            if !SHADOW {
                // A shadow key counts once it is committed (visible).
                len.add(1);
            }
            return Ok(Ok(Inserted::New));
        }
    }

    /// Step 2 of insert: look into the `Inserting` and `Shadow` slots of `header` (see the
    /// essay).
    #[inline(always)]
    fn committed_inserts<P: LineLoader>(
        &self,
        loader: P,
        bin_index: usize,
        bin: &Bin,
        header: Header,
        key: u64,
    ) -> Pending {
        let unconfirmed = header.unconfirmed();
        if unconfirmed.is_empty() {
            return Pending::Absent;
        }
        let dead = self.dead.of(bin_index);
        let shadow_key = self.dead.shadow_of(bin_index);
        for slot in unconfirmed.iter() {
            let (now, value) = loader.load_slot(self.slot(bin, slot));
            if now == dead {
                // Not written yet, or written and retired by a delete that has not freed it
                // yet, or a shadow claimed by its commit or abort: either way a few
                // instructions of one thread.
                return Pending::Unwritten;
            }
            if now == key {
                return Pending::Found(value);
            }
            if now == shadow_key {
                // A shadow holds its key in the value word. The shadow key is only ever in a
                // `Shadow` slot (its resolution turns it dead first, then changes the state),
                // so this slot is a shadow of `value`: ours, or another key's for good.
                if value == key {
                    return Pending::Shadowed;
                }
            }
        }
        Pending::Absent
    }

    /// Make sure the bucket of `slot` is chained to `bin`, taking buckets from the pool if not.
    #[inline(always)]
    fn chain_for(&self, bin_index: usize, bin: &Bin, slot: usize) -> Result<(), Full> {
        let (Some(bucket), _) = slot_place(slot) else {
            return Ok(());
        };
        // Acquire: pairs with the AcqRel chaining CAS of another inserter.
        let mut link = Link(bin.link.load(Ordering::Acquire));
        if link.bucket(bucket).is_some() {
            return Ok(());
        }
        self.chain_slow(bin_index, bin, bucket, &mut link)
    }

    #[cold]
    fn chain_slow(
        &self,
        bin_index: usize,
        bin: &Bin,
        bucket: usize,
        link: &mut Link,
    ) -> Result<(), Full> {
        let width = Link::field_width(bucket);
        if self.at_link_mark(width) {
            return Err(Full::LinkMark);
        }
        let taken = self.next_link.fetch_add(width, Ordering::Relaxed);
        if taken + width > self.transfer_base {
            return Err(Full::LinkPool);
        }
        self.crash_point();
        // The buckets are ours alone until the CAS below names them (invariant 5).
        for line in &self.links[taken..taken + width] {
            self.fill_taken(&line.slots, self.dead.of(bin_index));
        }
        self.crash_point();
        loop {
            let chained = link.with_bucket(bucket, taken as u32);
            match bin
                .link
                .compare_exchange(link.0, chained.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(now) => {
                    *link = Link(now);
                    if link.bucket(bucket).is_some() {
                        // Another inserter chained this bucket first; ours is lost.
                        self.links_lost.fetch_add(width, Ordering::Relaxed);
                        return Ok(());
                    }
                    // The other field changed; retry with the new word.
                }
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Remove
    // ---------------------------------------------------------------------------------------

    /// Remove `key`, returning its value.
    #[inline(always)]
    pub(crate) fn remove<P: LineLoader>(
        &self,
        loader: P,
        bin_index: usize,
        key: u64,
    ) -> Result<Option<u64>, Moved> {
        Ok(self.remove_if(loader, bin_index, key, |_| true)?.ok())
    }

    /// Remove `key` if its value satisfies `accept`, returning the value. `accept` is asked
    /// about the value the retire CAS then expects, so the key is removed only with a value
    /// it accepted (a put in between fails the CAS, and `accept` is asked about the new one).
    #[inline(always)]
    pub(crate) fn remove_if<P: LineLoader>(
        &self,
        loader: P,
        bin_index: usize,
        key: u64,
        mut accept: impl FnMut(u64) -> bool,
    ) -> Result<Result<u64, Mismatch>, Moved> {
        let bin = &self.bins[bin_index];
        let dead = self.dead.of(bin_index);
        loop {
            let Some(hit) = self.find(loader, bin, key)?.hit else {
                return Ok(Err(Mismatch::Absent));
            };
            if !accept(hit.value) {
                return Ok(Err(Mismatch::Value(hit.value)));
            }
            // The linearization point: retire the key (see the essay, Delete). The value
            // word stays: a reader that reads the slot in halves may pair the old key with
            // it, and must then see the value the key had.
            if loader
                .cas_slot(
                    self.slot(bin, hit.slot),
                    (key, hit.value),
                    (dead, hit.value),
                )
                .is_err()
            {
                spin();
                continue;
            }
            self.crash_point();
            self.free_retired(bin, hit.slot);
            self.len.decrement();
            return Ok(Ok(hit.value));
        }
    }

    /// Step 3 of delete: free slot `slot`, whose key we retired, from `Inserting` or `Valid`
    /// (a commit may publish it meanwhile; nobody else frees it, invariant 4), or from
    /// `Shadow` (an abort), retrying on unrelated header changes.
    fn free_retired(&self, bin: &Bin, slot: usize) {
        self.set_claimed_slot(bin, slot, SlotState::Invalid);
    }

    /// Commit (`commit` is `Some(value)`: make `key -> value` visible) or abort (remove) the
    /// shadow insert of `key`; whether there was one in the bin (see Shadow inserts in the
    /// essay).
    pub(crate) fn resolve_shadow<P: LineLoader>(
        &self,
        _loader: P,
        bin_index: usize,
        key: u64,
        commit: Option<u64>,
    ) -> Result<bool, Moved> {
        let bin = &self.bins[bin_index];
        let dead = self.dead.of(bin_index);
        let shadow = (self.dead.shadow_of(bin_index), key);
        loop {
            // Acquire: pairs with the Release commit CAS of the shadow slot (and with the
            // DoneTransfer CAS, as in `find`).
            let header = Header(bin.header.load(Ordering::Acquire));
            if header.moving() {
                return Err(self.moved(bin, header));
            }
            let Some(slot) = header
                .shadow()
                .iter()
                .find(|&slot| self.slot(bin, slot).load() == shadow)
            else {
                // Validated as a get's miss: no shadow slot of `key` under an unchanged header
                // (a slot holds a shadow of `key` only while it is `Shadow`).
                fence(Ordering::Acquire);
                if bin.header.load(Ordering::Relaxed) == header.0 {
                    return Ok(false);
                }
                spin();
                continue;
            };
            // The claim: one winner among a commit, an abort and a move of the bin (all three
            // take the shadow with this CAS). The slot is then `Shadow` holding the dead key,
            // which inserts and moves wait out as an unwritten slot.
            if self
                .slot(bin, slot)
                .compare_exchange(shadow, (dead, key))
                .is_err()
            {
                // A move took it first (the bin is moving) or the slot was resolved and reused.
                spin();
                continue;
            }
            match commit {
                // The abort's linearization point was the claim (nothing could see the
                // shadow's key before, nor can after); free the slot as a delete frees its own.
                None => self.free_retired(bin, slot),
                Some(value) => {
                    // Now an insert's commit and store (essay, Insert steps 5-6) of a slot we
                    // already hold: `Shadow -> Inserting` (searchable, holding the dead key),
                    // then the store, the commit's linearization point.
                    self.set_claimed_slot(bin, slot, SlotState::Inserting);
                    // Pairs with the readers' fence(Acquire), as after an insert's commit.
                    fence(Ordering::Release);
                    self.slot(bin, slot).store(key, value);
                    self.len.increment();
                }
            }
            return Ok(true);
        }
    }

    /// Move slot `slot`, which we hold (a retired key's or a claimed shadow's, so nobody else
    /// changes its state, invariant 4), to `state`, retrying on unrelated header changes (a
    /// move's claim included: the move waits for a held slot).
    fn set_claimed_slot(&self, bin: &Bin, slot: usize, state: SlotState) {
        let mut header = Header(bin.header.load(Ordering::Relaxed));
        loop {
            debug_assert!(
                !header.occupied().and(SlotMask::single(slot)).is_empty(),
                "a held slot that is free: {header:?}"
            );
            // Release: our CAS on the slot (a retire or a shadow's claim) is ordered before the
            // new state: before the slot can be committed again, once `Invalid`; before a
            // reader or step 2 that sees it `Inserting` loads it, which then never finds the
            // shadow key in an `Inserting` slot.
            match bin.header.compare_exchange(
                header.0,
                header.with_slot(slot, state).0,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => header = Header(now),
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Puts
    // ---------------------------------------------------------------------------------------

    /// If `key` is present with value `old`, replace it by `f(old)`. Returns `(old, new)`.
    /// `f` may run more than once under contention.
    #[inline(always)]
    pub(crate) fn update<P: LineLoader>(
        &self,
        loader: P,
        bin_index: usize,
        key: u64,
        mut f: impl FnMut(u64) -> u64,
    ) -> Result<Option<(u64, u64)>, Moved> {
        let bin = &self.bins[bin_index];
        loop {
            let Some(hit) = self.find(loader, bin, key)?.hit else {
                return Ok(None);
            };
            if let Some(done) = self.try_put(loader, bin, hit, key, &mut f) {
                return Ok(Some(done));
            }
            spin();
        }
    }

    /// One put attempt on a found slot: `Some((old, new))` on success.
    #[inline(always)]
    fn try_put<P: LineLoader>(
        &self,
        loader: P,
        bin: &Bin,
        hit: Hit,
        key: u64,
        f: &mut impl FnMut(u64) -> u64,
    ) -> Option<(u64, u64)> {
        let new = f(hit.value);
        loader
            .cas_slot(self.slot(bin, hit.slot), (key, hit.value), (key, new))
            .ok()?;
        Some((hit.value, new))
    }

    /// Replace the value of `key` by `new` if it is `current`.
    #[inline(always)]
    pub(crate) fn compare_exchange<P: LineLoader>(
        &self,
        loader: P,
        bin_index: usize,
        key: u64,
        current: u64,
        new: u64,
    ) -> Result<Result<u64, Mismatch>, Moved> {
        let bin = &self.bins[bin_index];
        loop {
            let Some(hit) = self.find(loader, bin, key)?.hit else {
                return Ok(Err(Mismatch::Absent));
            };
            if hit.value != current {
                return Ok(Err(Mismatch::Value(hit.value)));
            }
            if self.try_put(loader, bin, hit, key, &mut |_| new).is_some() {
                return Ok(Ok(current));
            }
            spin();
        }
    }

    /// Insert `key -> init` if absent, else replace its value `old` by `f(old)`. Returns the
    /// previous value, `None` if the key was inserted, or that an open shadow holds the key
    /// (the caller waits for it outside the operation and retries).
    #[inline(always)]
    pub(crate) fn upsert_with<P: LineLoader>(
        &self,
        loader: P,
        bin_index: usize,
        key: u64,
        init: u64,
        f: impl FnMut(u64) -> u64,
    ) -> Result<Result<Upserted, Full>, Moved> {
        let bin = &self.bins[bin_index];
        self.upsert_counted(loader, bin, bin_index, key, init, f, &self.len)
    }

    /// `upsert_with` on `bin` (index `bin_index`, as `insert_counted`), counting a new key in
    /// `len`: the fast write where it can answer, else a search, then a put or the insert
    /// going on from it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn upsert_counted<P: LineLoader>(
        &self,
        loader: P,
        bin: &Bin,
        bin_index: usize,
        key: u64,
        init: u64,
        mut f: impl FnMut(u64) -> u64,
        len: &impl Count,
    ) -> Result<Result<Upserted, Full>, Moved> {
        debug_assert!(core::ptr::eq(bin, &self.bins[bin_index]));
        if let Some(before) =
            self.write_primary::<P, true>(loader, bin_index, bin, key, init, &mut f)
        {
            len.add(isize::from(before.is_none()));
            return Ok(Ok(Upserted::Done(before)));
        }
        loop {
            let search = self.find(loader, bin, key)?;
            match search.hit {
                Some(hit) => {
                    if let Some((old, _)) = self.try_put(loader, bin, hit, key, &mut f) {
                        return Ok(Ok(Upserted::Done(Some(old))));
                    }
                }
                // The insert goes on from this search (one search for a new key, not two).
                None => {
                    match self
                        .insert_searched::<P, false>(loader, bin_index, key, init, search, len)?
                    {
                        Ok(Inserted::New) => return Ok(Ok(Upserted::Done(None))),
                        Err(full) => return Ok(Err(full)),
                        // Someone inserted it meanwhile: update that copy.
                        Ok(Inserted::Exists(_)) => {}
                        Ok(Inserted::Shadowed) => return Ok(Ok(Upserted::Shadowed)),
                    }
                }
            }
            spin();
        }
    }
}

impl Drop for RawTable {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, StdOrdering::Relaxed);
    }
}

/// A table whose dead keys are `u64::MAX` (for every bin but 0) and `u64::MAX - 1` (bin 0);
/// tests and models pick bins directly, so no hasher is involved.
#[cfg(test)]
fn test_table(bins: usize, links: usize) -> RawTable {
    test_table_with_reserve(bins, links, 0)
}

/// [`test_table`] with a transfer reserve of `reserve` link buckets after its pool.
#[cfg(test)]
pub(in crate::raw) fn test_table_with_reserve(
    bins: usize,
    links: usize,
    reserve: usize,
) -> RawTable {
    let dead = DeadKeys {
        primary: u64::MAX,
        primary_bin: 0,
        fallback: u64::MAX - 1,
        fallback_bin: 1,
        shadow_at_primary: u64::MAX - 2,
        shadow_at_fallback: u64::MAX - 3,
        moved: u64::MAX - 4,
        moved_bin: 2,
        moved_at_moved_bin: u64::MAX - 5,
    };
    RawTable::new(
        Geometry {
            bins,
            link_buckets: links,
            transfer_reserve: reserve,
            huge_pages: false,
        },
        dead,
        Arc::default(),
        TableSource::Fresh(None),
        None,
    )
    .unwrap()
}

#[cfg(all(test, not(floe_loom)))]
mod tests {
    use super::{test_table as table, *};
    use crate::raw::loader::ScalarLoader;

    const P: ScalarLoader = ScalarLoader;

    #[test]
    fn shadow_slots_are_taken_hidden_and_resolved_once() {
        let t = table(2, 3);
        // Shadows in the primary bucket and in link buckets, among visible keys.
        for k in 0..15u64 {
            let inserted = if k % 3 == 0 {
                t.insert_as::<_, true>(P, 1, k, k * 10)
            } else {
                t.insert(P, 1, k, k * 10)
            };
            assert_eq!(inserted.unwrap(), Ok(Inserted::New));
        }
        assert_eq!(t.insert_as::<_, true>(P, 1, 99, 0).unwrap(), Err(Full::Bin));
        assert_eq!(t.check_invariants(), 10, "shadows are not counted");
        for k in (0..15u64).step_by(3) {
            assert_eq!(t.get(P, 1, k).unwrap(), None);
            assert_eq!(t.remove(P, 1, k).unwrap(), None);
            assert_eq!(t.update(P, 1, k, |v| v + 1).unwrap(), None);
            assert_eq!(t.insert(P, 1, k, 1).unwrap(), Ok(Inserted::Shadowed));
            assert_eq!(
                t.insert_as::<_, true>(P, 1, k, 1).unwrap(),
                Ok(Inserted::Shadowed)
            );
        }
        for k in (1..15u64).step_by(3) {
            assert_eq!(
                t.insert_as::<_, true>(P, 1, k, 1).unwrap(),
                Ok(Inserted::Exists(k * 10))
            );
        }
        assert!(
            !t.resolve_shadow(P, 1, 1, Some(5)).unwrap(),
            "a visible key"
        );
        assert!(t.resolve_shadow(P, 1, 0, Some(7)).unwrap());
        assert!(!t.resolve_shadow(P, 1, 0, Some(8)).unwrap());
        assert!(t.resolve_shadow(P, 1, 12, None).unwrap());
        assert!(!t.resolve_shadow(P, 1, 12, None).unwrap());
        assert_eq!(
            t.get(P, 1, 0).unwrap(),
            Some(7),
            "committed with the value given"
        );
        assert_eq!(t.get(P, 1, 12).unwrap(), None);
        // The aborted slot is free again (and held the dead key when freed).
        assert_eq!(t.insert(P, 1, 12, 7).unwrap(), Ok(Inserted::New));
        assert_eq!(t.get(P, 1, 12).unwrap(), Some(7));
        assert_eq!(t.check_invariants(), 12);
    }

    #[test]
    fn a_chase_asks_for_the_chain_only_for_a_key_outside_the_primary_line() {
        let t = table(4, 3);
        let bin = &t.bins[1];
        for k in 0..3u64 {
            assert_eq!(t.insert(P, 1, k, k).unwrap(), Ok(Inserted::New));
        }
        assert!(
            !t.chase_key(P, bin, 0),
            "an unchained bin has nothing to ask for"
        );
        assert!(!t.chase_key(P, bin, 7));
        for k in 3..5u64 {
            assert_eq!(t.insert(P, 1, k, k).unwrap(), Ok(Inserted::New));
        }
        for k in 0..3u64 {
            assert!(!t.chase_key(P, bin, k), "key {k} is in the primary line");
        }
        assert!(t.chase_key(P, bin, 3), "a key in the link bucket");
        assert!(t.chase_key(P, bin, 7), "an absent key may be in the chain");
        assert!(t.chase(bin), "the key-less chase follows every chain");
    }

    #[test]
    fn insert_get_remove_in_one_bin_with_chains() {
        let t = table(2, 3);
        // 15 keys fill bin 1: 3 primary slots, then link bucket 0, then the pair.
        for k in 0..15u64 {
            assert_eq!(t.insert(P, 1, k, k * 10).unwrap(), Ok(Inserted::New));
        }
        assert_eq!(t.insert(P, 1, 99, 0).unwrap(), Err(Full::Bin));
        assert_eq!(t.link_buckets_used(), 3);
        for k in 0..15u64 {
            assert_eq!(t.get(P, 1, k).unwrap(), Some(k * 10));
            assert_eq!(t.insert(P, 1, k, 0).unwrap(), Ok(Inserted::Exists(k * 10)));
        }
        assert_eq!(t.get(P, 1, 15).unwrap(), None);
        assert_eq!(t.check_invariants(), 15);
        // Free a slot in the pair bucket and one in the primary bucket: both are reused.
        assert_eq!(t.remove(P, 1, 12).unwrap(), Some(120));
        assert_eq!(t.remove(P, 1, 1).unwrap(), Some(10));
        assert_eq!(t.remove(P, 1, 1).unwrap(), None);
        assert_eq!(t.insert(P, 1, 100, 1).unwrap(), Ok(Inserted::New));
        assert_eq!(t.insert(P, 1, 101, 2).unwrap(), Ok(Inserted::New));
        assert_eq!(t.insert(P, 1, 102, 3).unwrap(), Err(Full::Bin));
        assert_eq!(t.check_invariants(), 15);
    }

    #[test]
    fn pool_exhaustion_is_reported_and_harmless() {
        let t = table(2, 1);
        for k in 0..7u64 {
            assert_eq!(t.insert(P, 0, k, k).unwrap(), Ok(Inserted::New));
        }
        // Bin 0 took the only link bucket; bin 1 can use its primary slots only.
        for k in 0..3u64 {
            assert_eq!(t.insert(P, 1, k, k).unwrap(), Ok(Inserted::New));
        }
        assert_eq!(t.insert(P, 1, 3, 3).unwrap(), Err(Full::LinkPool));
        // Nothing was committed (chaining comes first; the invariant check below would see an
        // `Inserting` slot); bin 0 cannot chain its pair either.
        assert_eq!(t.insert(P, 0, 7, 7).unwrap(), Err(Full::LinkPool));
        assert_eq!(t.check_invariants(), 10);
    }

    #[test]
    fn puts_update_present_keys_only() {
        let t = table(2, 0);
        assert_eq!(t.update(P, 0, 5, |v| v + 1).unwrap(), None);
        assert_eq!(t.insert(P, 0, 5, 1).unwrap(), Ok(Inserted::New));
        assert_eq!(t.update(P, 0, 5, |v| v + 1).unwrap(), Some((1, 2)));
        assert_eq!(
            t.compare_exchange(P, 0, 5, 1, 9).unwrap(),
            Err(Mismatch::Value(2))
        );
        assert_eq!(t.compare_exchange(P, 0, 5, 2, 9).unwrap(), Ok(2));
        assert_eq!(
            t.compare_exchange(P, 0, 6, 2, 9).unwrap(),
            Err(Mismatch::Absent)
        );
        assert_eq!(
            t.upsert_with(P, 0, 5, 0, |v| v * 2).unwrap(),
            Ok(Upserted::Done(Some(9)))
        );
        assert_eq!(
            t.upsert_with(P, 0, 6, 7, |v| v * 2).unwrap(),
            Ok(Upserted::Done(None))
        );
        assert_eq!(t.get(P, 0, 5).unwrap(), Some(18));
        assert_eq!(t.get(P, 0, 6).unwrap(), Some(7));
    }

    #[test]
    fn removed_slots_hold_the_dead_key() {
        let t = table(2, 0);
        assert_eq!(t.insert(P, 1, 5, 50).unwrap(), Ok(Inserted::New));
        assert_eq!(t.remove(P, 1, 5).unwrap(), Some(50));
        // A put that read (5, 50) before the remove now fails its CAS (invariant 4).
        let slot = &t.bins[1].slots[0];
        // The value stays (a half read of the slot pairs the old key with it).
        assert_eq!(slot.load(), (u64::MAX, 50));
        assert!(slot.compare_exchange((5, 50), (5, 51)).is_err());
    }

    /// The crowd check's read of a bin (`keys_of_bin`, for `separable`) counts only keys that
    /// were in the bin together. A delete's retire and an insert's store into its committed
    /// slot leave the header as it is, so one read validated by the header could hold key 0
    /// (read before its retire) beside key 99 (read after its store): fifteen keys where the
    /// bin never held more than fourteen, and a crowd of fifteen answers `HashCollisions`
    /// where a growth would have fitted it. The double collect reads the bin again and uses
    /// only two identical reads.
    #[test]
    fn the_crowd_check_reads_keys_that_were_in_the_bin_together() {
        let t = table(2, 3);
        for k in 0..15u64 {
            assert_eq!(t.insert(P, 1, k, k * 10).unwrap(), Ok(Inserted::New));
        }
        // Slot 14 freed, then committed by an insert of 99 that has not written yet.
        assert_eq!(t.remove(P, 1, 14).unwrap(), Some(140));
        let bin = &t.bins[1];
        let header = Header(bin.header.load(Ordering::Relaxed));
        assert_eq!(header.invalid().first(), Some(14));
        bin.header.store(
            header.with_slot(14, SlotState::Inserting).0,
            Ordering::Relaxed,
        );
        let dead = t.dead.of(1);
        let mut raced = false;
        let mut keys = Vec::new();
        t.keys_of_bin_racing(
            1,
            |key| keys.push(key),
            |slot| {
                // Once the read has loaded slot 0: key 0 is deleted (retired, not yet freed)
                // and the insert of 99 writes its slot; the header stays as it was.
                if slot == 0 && !raced {
                    raced = true;
                    assert!(t.slot(bin, 0).compare_exchange((0, 0), (dead, 0)).is_ok());
                    t.slot(bin, 14).store(99, 990);
                }
            },
        );
        assert!(raced);
        keys.sort_unstable();
        let together: Vec<u64> = (1..14).chain([99]).collect();
        assert_eq!(keys, together, "the bin after the delete and the insert");
    }

    /// The state a stalled put or remove meets in the ABA of issue 11 (items 3 and 4): the
    /// key it read was removed, and an insert of the same key and value has taken the same
    /// slot again. Up to its commit and until it writes, that slot holds the dead key, so the
    /// stale CAS fails; after the write the insert cannot be abandoned, so a CAS that lands is
    /// a put on (or a remove of) a present key. (The earlier protocol wrote the key into a
    /// reserved slot it could still abandon: both CASes below succeeded on it, and the
    /// abandonment then discarded the put or left the remove's key in the map.)
    #[test]
    fn a_stale_cas_never_lands_on_an_insert_that_can_be_abandoned() {
        let t = table(2, 0);
        let (key, value) = (5, 0);
        assert_eq!(t.insert(P, 1, key, value).unwrap(), Ok(Inserted::New));
        assert_eq!(t.remove(P, 1, key).unwrap(), Some(value));
        // An insert of the same pair commits slot 0 again (essay, Insert step 5) and stalls
        // before its write.
        let bin = &t.bins[1];
        let header = Header(bin.header.load(Ordering::Relaxed));
        assert_eq!(header.invalid().first(), Some(0));
        let committed = header.with_slot(0, SlotState::Inserting);
        bin.header.store(committed.0, Ordering::Relaxed);
        let slot = &bin.slots[0];
        let dead = t.dead.of(1);
        assert_eq!(
            slot.load(),
            (dead, value),
            "a committed, unwritten slot holds the dead key"
        );
        // The stalled put and remove, with the pair they read before the remove.
        assert!(slot.compare_exchange((key, value), (key, 9)).is_err());
        assert!(slot.compare_exchange((key, value), (dead, value)).is_err());
        // Searches see no key there; another insert of the key waits for the writer.
        assert_eq!(t.get(P, 1, key).unwrap(), None);
        assert!(matches!(
            t.committed_inserts(ScalarLoader, 1, bin, committed, key),
            Pending::Unwritten
        ));
        // The insert writes (its linearization point); now the key is present and a CAS on
        // it is a put. The slot stays `Inserting` until a later commit publishes it.
        slot.store(key, value);
        assert!(matches!(
            t.committed_inserts(ScalarLoader, 1, bin, committed, key),
            Pending::Found(0)
        ));
        assert_eq!(t.get(P, 1, key).unwrap(), Some(value));
        t.len.increment();
        assert_eq!(t.update(P, 1, key, |v| v + 9).unwrap(), Some((0, 9)));
        assert_eq!(t.remove(P, 1, key).unwrap(), Some(9));
        assert_eq!(t.check_invariants(), 0);
    }

    #[test]
    fn clear_removes_the_wanted_keys_of_a_walk() {
        let t = table(4, 4);
        for k in 0..20u64 {
            let _ = t.insert(P, (k % 4) as usize, k, k + 1);
        }
        let mut seen = Vec::new();
        t.walk(|snapshot| seen.extend(snapshot.entries().iter().map(|&(_, k, v)| (k, v))));
        seen.sort_unstable();
        assert_eq!(seen.len(), t.len());
        assert!(seen.iter().all(|&(k, v)| v == k + 1));
        // Keep the odd keys: only the wanted ones go, and no CAS is lost when nobody races.
        t.walk(|snapshot| {
            t.clear_snapshot(snapshot, &|k| k % 2 == 0, &|_, _| false, |k, removed| {
                assert!(removed.is_some(), "lost {k}");
            })
        });
        assert_eq!(t.len(), 10);
        let mut after = Vec::new();
        t.walk(|snapshot| after.extend(snapshot.entries().iter().map(|&(_, k, _)| k)));
        after.sort_unstable();
        assert_eq!(after, (1..20).step_by(2).collect::<Vec<u64>>());
        assert_eq!(t.check_invariants(), 10);
    }

    #[test]
    fn two_threads_in_one_bin() {
        // Small enough for Miri, which checks the protocols for data races and UB.
        let t = table(2, 2);
        let rounds = if cfg!(miri) { 20 } else { 2000 };
        std::thread::scope(|s| {
            for thread in 0..2u64 {
                let t = &t;
                s.spawn(move || {
                    for i in 0..rounds {
                        let key = thread * 1000 + i % 5;
                        let _ = t.insert(P, 0, key, i);
                        let _ = t.update(P, 0, key, |v| v + 1);
                        let _ = t.get(P, 0, key ^ 1000);
                        let _ = t.remove(P, 0, key);
                    }
                });
            }
        });
        assert_eq!(t.check_invariants(), 0);
    }
}

#[cfg(all(test, floe_loom))]
mod model {
    use loom::{
        sync::{
            atomic::{AtomicBool, Ordering},
            Arc,
        },
        thread,
    };

    use super::{test_table, *};
    use crate::raw::loader::ScalarLoader;

    const P: ScalarLoader = ScalarLoader;

    /// The crowd check's read of a bin (`keys_of_bin`) visits keys that were in the bin
    /// together. Bin 1 holds keys 0 and 1, and slot 2 is committed by an insert of 99 that has
    /// not written yet. A delete retires key 0 and, before it frees the slot, the insert
    /// writes 99: the bin holds {0, 1}, then {1}, then {1, 99}, and its header does not
    /// change until the free. A read of slot 0 before the retire and of slot 2 after the write
    /// saw {0, 1, 99}, a crowd the bin never held. Fails with one validated read in place of
    /// the double collect (checked).
    #[test]
    fn crowd_read_racing_a_retire_then_a_write() {
        loom::model(|| {
            let t = Arc::new(test_table(2, 0));
            for k in 0..3 {
                assert_eq!(t.insert(P, 1, k, k * 10).unwrap(), Ok(Inserted::New));
            }
            assert_eq!(t.remove(P, 1, 2).unwrap(), Some(20));
            let bin = &t.bins[1];
            let header = Header(bin.header.load(Ordering::Relaxed));
            bin.header.store(
                header.with_slot(2, SlotState::Inserting).0,
                Ordering::Relaxed,
            );
            let retired = Arc::new(AtomicBool::new(false));
            let deleter = {
                let (t, retired) = (t.clone(), retired.clone());
                thread::spawn(move || {
                    // A delete of key 0, its retire and its free (`remove_if`).
                    let bin = &t.bins[1];
                    let dead = t.dead.of(1);
                    assert!(t.slot(bin, 0).compare_exchange((0, 0), (dead, 0)).is_ok());
                    // Release/Acquire with the writer's wait: the write follows the retire.
                    retired.store(true, Ordering::Release);
                    t.free_retired(bin, 0);
                })
            };
            let writer = {
                let (t, retired) = (t.clone(), retired.clone());
                thread::spawn(move || {
                    while !retired.load(Ordering::Acquire) {
                        thread::yield_now();
                    }
                    // The stalled insert writes (its linearization point).
                    t.slot(&t.bins[1], 2).store(99, 990);
                })
            };
            let mut keys = Vec::new();
            t.keys_of_bin(1, |key| keys.push(key));
            deleter.join().unwrap();
            writer.join().unwrap();
            keys.sort_unstable();
            assert!(
                [&[0, 1][..], &[1], &[1, 99]].contains(&&keys[..]),
                "{keys:?}: never the bin's keys at one instant"
            );
        });
    }
}

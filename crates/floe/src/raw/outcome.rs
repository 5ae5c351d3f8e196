//! What the engine's operations answer, the same for both layouts: the words a driver turns
//! into a facade's results (`Inserted`, `Mismatch`...) and the reasons an operation stops
//! (`Moved`: retry in the next table; `Full`: no room, grow), and what a recovery sweep of a
//! persistent table found (`Swept`, `raw/persist/recover.rs`).

/// The key's bin has been moved to the next table (`migrate`): retry there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Moved;

/// Why an insert found no room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// All 15 slots of the key's bin are taken.
    Bin,
    /// The bin needed a link bucket and the pool is empty.
    LinkPool,
    /// The bin needed a link bucket and the pool is spent up to its mark
    /// (`RawTable::link_mark`, a refreshed table's): the driver opens more of it or grows.
    LinkMark,
}

/// The outcome of an insert that did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Inserted {
    /// The key was absent and is now present.
    New,
    /// The key was present with this value; nothing changed.
    Exists(u64),
    /// The key is held by an open shadow insert (hidden, but taken); nothing changed.
    Shadowed,
}

/// One request of a batch as the engine runs it (`RawTable::run_batch`): a facade's request,
/// in words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WordOp {
    Get,
    /// Insert the value if the key is absent.
    Insert(u64),
    /// Insert or replace.
    Upsert(u64),
    /// Replace the value only if the key is present.
    Put(u64),
    /// Insert the delta if the key is absent; else replace the value by the facade's sum of
    /// it and the delta (`run_batch`'s `add`).
    Add(u64),
    Remove,
}

/// What a request of a batch did (`RawTable::run_batch`): the single-key operation's result,
/// in words. `Upsert`, `Put`, `Add` and `Remove` carry the value before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WordDone {
    Get(Option<u64>),
    Insert(Inserted),
    Upsert(Option<u64>),
    Put(Option<u64>),
    Add(Option<u64>),
    Remove(Option<u64>),
}

/// Where a batch of requests stopped (`RawTable::run_batch`): at request `at`, which ran
/// (`ran`: its answer asked to stop) or did not (the engine could not run it on this table:
/// its bin is full or moved, or an open shadow holds its key; it had no effect).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stopped {
    pub(crate) at: usize,
    pub(crate) ran: bool,
}

/// What an upsert did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Upserted {
    /// Done: the previous value, `None` if the key was inserted.
    Done(Option<u64>),
    /// Nothing: an open shadow insert holds the key (wait for its resolution, then retry).
    Shadowed,
}

/// Why a compare-exchange did not swap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// The key is absent.
    Absent,
    /// The key is present with this value.
    Value(u64),
}

/// What a recovery sweep found.
#[cfg(not(floe_loom))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Live keys kept.
    pub(crate) keys: usize,
    /// Slots an interrupted insert, delete or shadow held, freed.
    pub(crate) freed: usize,
    /// Keys that do not hash to the bin they were found in (a damaged file), dropped.
    pub(crate) misplaced: usize,
    /// Link words naming buckets outside the pool (a damaged file), cut.
    pub(crate) bad_links: usize,
    /// Moves rebuilt (old bins or shrink groups left `InTransfer`).
    pub(crate) rebuilt: usize,
    /// Free slots holding something other than the dead key (left by a power loss), cleared.
    pub(crate) stale: usize,
    /// Keys of an interrupted move that found no free slot or link bucket in their new bin,
    /// and link buckets the finishing migration's moves will need that the table does not
    /// have (only in a damaged file: the open refuses it).
    pub(crate) unplaced: usize,
}

#[cfg(not(floe_loom))]
impl Swept {
    pub(crate) fn add(&mut self, other: Swept) {
        self.keys += other.keys;
        self.freed += other.freed;
        self.misplaced += other.misplaced;
        self.bad_links += other.bad_links;
        self.rebuilt += other.rebuilt;
        self.stale += other.stale;
        self.unplaced += other.unplaced;
    }
}

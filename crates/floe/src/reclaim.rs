//! When a replaced table may be freed: reader announcements and asymmetric fences.
//!
//! A growth (or shrink) replaces a map's current table; threads that loaded the old pointer
//! may still be reading the old table, so it can be freed only once each of them has left its
//! operation. The common case is that no growth is running, and then this module must cost an
//! operation next to nothing: no locked instruction and no store to a line another thread
//! writes (a locked instruction per get ran gets at ~0.65x, and it also ends the overlap of
//! consecutive operations' misses).
//!
//! # The protocol
//!
//! Every thread owns a *reader slot* (a padded line of its own in a process-wide registry),
//! holding a sequence number that is odd while the thread is inside a map operation.
//!
//! - **Enter** (outermost operation of the thread): `seq += 1` (odd) with a `Release` store
//!   to the thread's own line (a plain store on x86), then a *light* barrier, then load the
//!   map's current table. Nested operations (a map called from an `update` closure or a
//!   `for_each` visitor) see the odd value and change nothing.
//! - **Leave**: `seq += 1` (even), a `Release` store: every read of the table the operation
//!   made is ordered before it.
//! - **Retire** (the thread that replaced the current pointer, with the old table): a *heavy*
//!   barrier, then read every slot (`Acquire`); the table is freed once each slot that was odd
//!   has changed (its thread left the operation it was in; sequence numbers only grow, also
//!   across threads reusing a slot).
//!
//! Why it is safe. The heavy barrier is `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: when it
//! returns, every thread of the process has executed a full memory barrier (or been switched
//! out, which is one). Take a reader and the point where that barrier ran on its CPU. If the
//! reader's odd store came before it, the store is visible to the retiring thread's slot
//! reads, so the table waits for the reader. If it came after, so does the reader's load of
//! the current pointer, which then sees the new table (the retiring thread's swap came before
//! the `membarrier` call): the reader never sees the old table. The light barrier is a
//! compiler fence: it keeps the compiler from moving the pointer load above the store; the
//! CPU's reordering of the two is what the heavy barrier covers. Where `membarrier` is not
//! available (old kernels, some sandboxes, Miri), both barriers are `fence(SeqCst)`: the store
//! / fence / load on each side is the store-buffering pattern, in which at least one side
//! sees the other's store. The loom model below checks the fence version, and fails with the
//! reader's fence removed.
//!
//! An old table can also be reached through the table it replaced (`migrating_into`), but only
//! by a reader that loaded that older table, announced before it was retired, and so is waited
//! for by every later retirement too (its slot stays odd while it runs).
//!
//! # Freeing
//!
//! The retiring thread is itself inside an operation, so it cannot wait for the readers there
//! and then. It keeps the table in a thread-local list and marks its slot; when its outermost
//! operation ends, it frees the table if every reader it waits for has moved on (the usual
//! case: a single thread, or readers between operations), and otherwise hands it to a
//! short-lived `floe-reclaim` thread that polls those slots (backing off up to a millisecond)
//! and then frees it. Tables of 64 MiB and more are unmapped on a thread of their own, so no
//! operation waits the tens of milliseconds that takes. Where no thread can be started (and
//! under Miri, which would report the thread as leaked) the table stays in the thread's list,
//! is retried when its next operation ends, and is waited for when the thread exits. Under
//! loom (whose map models cover the bin protocols) retired tables are kept until the map is
//! dropped; the announcement protocol has its own model at the end of this file.
//!
//! The registry is process-wide, so a table also waits for threads inside operations on other
//! maps; they leave them as quickly. A slot is a 128-byte line per thread that ever used a
//! growable map, reused by later threads, never freed.

#[cfg(not(floe_loom))]
use core::cell::{Cell, RefCell};

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// One thread's announcement line.
pub(crate) struct ReaderSlot {
    /// Odd while the owning thread is inside a map operation.
    seq: CachePadded<AtomicU64>,
    /// Claimed by a live thread.
    #[cfg_attr(floe_loom, allow(dead_code))]
    owned: AtomicBool,
    /// The owning thread retired a table during its current operation (only the owner
    /// touches it: checked when the operation ends).
    #[cfg_attr(floe_loom, allow(dead_code))]
    retiring: AtomicBool,
    /// The registry's next slot (set once, before the slot is published).
    #[cfg_attr(floe_loom, allow(dead_code))]
    next: *const ReaderSlot,
}

// SAFETY: `next` points to a leaked slot of the registry, which is never freed; everything
// else is atomic.
unsafe impl Sync for ReaderSlot {}
// SAFETY: as `Sync`.
unsafe impl Send for ReaderSlot {}

impl ReaderSlot {
    /// Enter an operation on this thread's slot (module docs). The slot must be the calling
    /// thread's own.
    #[cfg_attr(floe_loom, allow(dead_code))]
    #[inline(always)]
    pub(crate) fn enter(&self) -> ReadGuard<'_> {
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & 1 == 1 {
            return ReadGuard {
                slot: None,
                not_send: core::marker::PhantomData,
            };
        }
        // Release, not Relaxed: a retiring thread that waited for this slot's previous
        // operation may read this value rather than the even one before it, and must then
        // still be ordered after that operation's reads (a plain store on x86; the loom model
        // below fails with Relaxed here).
        self.seq.store(seq + 1, Ordering::Release);
        light_barrier();
        ReadGuard {
            slot: Some((self, seq + 2)),
            not_send: core::marker::PhantomData,
        }
    }
}

/// A thread inside a map operation: tables current while it lives are not freed.
pub(crate) struct ReadGuard<'s> {
    /// The slot and the even value to store on leaving; `None` for a nested guard.
    slot: Option<(&'s ReaderSlot, u64)>,
    /// Left on the thread that entered (its slot is its own).
    not_send: core::marker::PhantomData<*const ()>,
}

impl ReadGuard<'_> {
    /// Whether this guard is inside an outer operation of the same thread (it announced
    /// nothing: the outer one did).
    #[inline(always)]
    pub(crate) fn nested(&self) -> bool {
        self.slot.is_none()
    }
}

impl Drop for ReadGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some((slot, leave)) = self.slot {
            // Release: the operation's reads of the table happen before a retiring thread
            // that reads this value (Acquire, `quiescent`) frees it.
            slot.seq.store(leave, Ordering::Release);
            #[cfg(not(floe_loom))]
            if slot.retiring.load(Ordering::Relaxed) {
                flush_retired(slot);
            }
        }
    }
}

/// Every reader slot ever created: a list that only grows (slots are reused, not freed).
/// (The loom build runs it only in the announcement's model, `cfg(test)`.)
#[cfg_attr(floe_loom, allow(dead_code))]
pub(crate) struct Registry {
    head: AtomicPtr<ReaderSlot>,
}

#[cfg_attr(floe_loom, allow(dead_code))]
impl Registry {
    #[cfg(not(floe_loom))]
    pub(crate) const fn new() -> Self {
        Registry {
            head: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    #[cfg(floe_loom)]
    pub(crate) fn new() -> Self {
        Registry {
            head: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// A slot for the calling thread: a free one, or a new one.
    pub(crate) fn claim(&self) -> &ReaderSlot {
        for slot in self.slots() {
            // Acquire: pairs with the Release of `release`, so the last owner's stores to the
            // slot are behind us.
            if !slot.owned.load(Ordering::Relaxed)
                && slot
                    .owned
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return slot;
            }
        }
        let mut head = self.head.load(Ordering::Acquire);
        let slot = Box::into_raw(Box::new(ReaderSlot {
            seq: CachePadded::new(AtomicU64::new(0)),
            owned: AtomicBool::new(true),
            retiring: AtomicBool::new(false),
            next: head,
        }));
        loop {
            // Release: publishes the slot's fields to `slots` (Acquire).
            match self
                .head
                .compare_exchange(head, slot, Ordering::Release, Ordering::Acquire)
            {
                // SAFETY: just leaked; never freed while the registry lives.
                Ok(_) => return unsafe { &*slot },
                Err(now) => {
                    head = now;
                    // SAFETY: not yet published, so ours alone.
                    unsafe { (*slot).next = now };
                }
            }
        }
    }

    /// Give the calling thread's slot back (its thread is exiting, outside any operation).
    pub(crate) fn release(slot: &ReaderSlot) {
        // Release: pairs with the Acquire of `claim`.
        slot.owned.store(false, Ordering::Release);
    }

    fn slots(&self) -> impl Iterator<Item = &ReaderSlot> {
        // Acquire: pairs with the Release that published each slot.
        let mut at = self.head.load(Ordering::Acquire).cast_const();
        core::iter::from_fn(move || {
            // SAFETY: slots are leaked and fully written before publication.
            let slot = unsafe { at.as_ref()? };
            at = slot.next;
            Some(slot)
        })
    }

    /// After a heavy barrier: the slots inside an operation, with the value they showed.
    pub(crate) fn active(&self) -> Vec<(&ReaderSlot, u64)> {
        self.slots()
            .filter_map(|slot| {
                // Acquire: pairs with a leaving thread's Release store.
                let seq = slot.seq.load(Ordering::Acquire);
                (seq & 1 == 1).then_some((slot, seq))
            })
            .collect()
    }

    /// Whether every slot of `active` has moved on since (its operation ended).
    pub(crate) fn quiescent(active: &mut Vec<(&ReaderSlot, u64)>) -> bool {
        // Acquire: pairs with the leaving thread's Release store (module docs).
        active.retain(|(slot, seen)| slot.seq.load(Ordering::Acquire) == *seen);
        active.is_empty()
    }
}

// Barriers ----------------------------------------------------------------------------------

/// The readers' side: a compiler fence where `membarrier` serves the retiring side, a full
/// fence otherwise (module docs).
#[cfg_attr(floe_loom, allow(dead_code))]
#[inline(always)]
fn light_barrier() {
    #[cfg(all(target_os = "linux", not(miri), not(floe_loom)))]
    if heavy::AVAILABLE.load(Ordering::Relaxed) {
        crate::sync::compiler_fence(Ordering::SeqCst);
        return;
    }
    crate::sync::fence(Ordering::SeqCst);
}

/// The retiring side (module docs).
#[cfg_attr(floe_loom, allow(dead_code))]
fn heavy_barrier() {
    #[cfg(all(target_os = "linux", not(miri), not(floe_loom)))]
    if heavy::AVAILABLE.load(Ordering::Relaxed) {
        heavy::membarrier();
        return;
    }
    crate::sync::fence(Ordering::SeqCst);
}

#[cfg(all(target_os = "linux", not(miri), not(floe_loom)))]
mod heavy {
    //! `membarrier(2)`, registered once per process.

    use std::sync::Once;

    use crate::sync::{AtomicBool, Ordering};

    /// Whether `membarrier` serves as the heavy barrier. Set once by [`init`], before any
    /// map exists (the builder calls it), so every reader and retirer of every map agrees.
    pub(super) static AVAILABLE: AtomicBool = AtomicBool::new(false);

    const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    pub(crate) fn init() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            // SAFETY: a plain system call with integer arguments.
            let registered = unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                    0,
                    0,
                )
            } == 0;
            // The Once's completion orders this store before every map built after it.
            AVAILABLE.store(registered, Ordering::Relaxed);
        });
    }

    pub(super) fn membarrier() {
        // SAFETY: a plain system call with integer arguments; the process registered.
        let done =
            unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) };
        // It cannot fail once registered; if it did, readers relying on it would be unsafe
        // to free under, so the caller must not go on.
        assert_eq!(done, 0, "membarrier failed after registration");
    }
}

/// Decide the barriers (before the first map is built).
#[cfg_attr(floe_loom, allow(dead_code))]
pub(crate) fn init() {
    #[cfg(all(target_os = "linux", not(miri), not(floe_loom)))]
    heavy::init();
}

// The calling thread's slot and its retired tables ---------------------------------------------

#[cfg(not(floe_loom))]
static REGISTRY: Registry = Registry::new();

#[cfg(not(floe_loom))]
std::thread_local! {
    /// This thread's slot; null until its first operation on a growable map.
    static LOCAL: Cell<*const ReaderSlot> = const { Cell::new(core::ptr::null()) };
    /// Owns the slot (gives it back when the thread exits) and the tables this thread retired
    /// that still wait for readers.
    static OWNER: SlotOwner = const {
        SlotOwner {
            slot: Cell::new(core::ptr::null()),
            retired: RefCell::new(Vec::new()),
        }
    };
}

#[cfg(not(floe_loom))]
struct SlotOwner {
    slot: Cell<*const ReaderSlot>,
    retired: RefCell<Vec<Retired>>,
}

#[cfg(not(floe_loom))]
impl Drop for SlotOwner {
    fn drop(&mut self) {
        // Tables still waiting: wait for their readers here (only where no `floe-reclaim`
        // thread could take them; the readers are inside single operations).
        for retired in self.retired.take() {
            reap(retired);
        }
        let slot = self.slot.get();
        if !slot.is_null() {
            // An operation in a later thread-local destructor registers afresh (`register`).
            let _ = LOCAL.try_with(|local| local.set(core::ptr::null()));
            // SAFETY: a registry slot, never freed.
            Registry::release(unsafe { &*slot });
        }
    }
}

/// Whether the calling thread is inside an operation.
#[cfg(not(floe_loom))]
pub(crate) fn inside_operation() -> bool {
    let own = LOCAL.with(Cell::get);
    // SAFETY: a registry slot (never freed) that this thread owns.
    !own.is_null() && unsafe { &*own }.seq.load(Ordering::Relaxed) & 1 == 1
}

/// Wait until every thread that is inside a map operation now has left it. The caller (a
/// pause of the writers, `RawMap::snapshot`) has set its flag: an operation that starts after
/// the heavy barrier below sees it, by the argument of a reader that starts after a retirement
/// and sees the new table, and every earlier one is waited for. The caller must not be inside
/// an operation itself ([`inside_operation`]): it would wait for itself.
#[cfg(not(floe_loom))]
pub(crate) fn wait_for_operations() {
    heavy_barrier();
    let mut active = REGISTRY.active();
    let mut backoff = 0u32;
    while !Registry::quiescent(&mut active) {
        // Operations take microseconds; back off so a long one is not spun on.
        if backoff < 10 {
            crate::sync::spin();
            backoff += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

/// Enter an operation on the calling thread (see the module docs).
#[cfg(not(floe_loom))]
#[inline(always)]
pub(crate) fn enter() -> ReadGuard<'static> {
    let slot = LOCAL.with(Cell::get);
    let slot = if slot.is_null() {
        register()
    } else {
        // SAFETY: a registry slot (never freed) that this thread owns.
        unsafe { &*slot }
    };
    slot.enter()
}

#[cfg(not(floe_loom))]
#[cold]
#[inline(never)]
fn register() -> &'static ReaderSlot {
    let slot = REGISTRY.claim();
    // If the thread is already past its thread-local destructors, the slot stays claimed for
    // good (a leak of one line per such thread) rather than be released while in use.
    if OWNER.try_with(|owner| owner.slot.set(slot)).is_ok() {
        LOCAL.with(|local| local.set(slot));
    }
    slot
}

// Retired tables ------------------------------------------------------------------------------

/// What the collector needs of a table of any layout.
pub(crate) trait Reclaim: Send + Sync + 'static {
    /// Bytes of table memory (large tables are unmapped on a thread of their own; not under
    /// Miri or loom, which free every table where it is retired).
    #[cfg_attr(any(miri, floe_loom), allow(dead_code))]
    fn allocated_bytes(&self) -> usize;
}

/// A replaced table and the readers it waits for.
#[cfg(not(floe_loom))]
struct Retired {
    /// From `Box::into_raw`; made a `Box` again only to be freed (the retiring thread still
    /// holds references to the table while it is retired, which a `Box` would claim to be
    /// unique: Miri's Stacked Borrows rejects that). Of the table type `free` was made for.
    table: *mut (),
    /// `free_table` for the table's type.
    free: unsafe fn(*mut ()),
    waits: Vec<(&'static ReaderSlot, u64)>,
}

// SAFETY: the table is shared by the map's threads anyway (tables are `Sync`, a `Reclaim`
// bound), and only the thread holding the `Retired` frees it; the slots are `Sync`.
#[cfg(not(floe_loom))]
unsafe impl Send for Retired {}

/// Retires tables (module docs, "Freeing"). Stateless: a retired table waits in the list of
/// the thread that retired it, or with a `floe-reclaim` thread, not in the map.
#[cfg(not(floe_loom))]
pub(crate) struct Collector(());

#[cfg(not(floe_loom))]
impl Collector {
    pub(crate) fn new() -> Self {
        init();
        Collector(())
    }

    /// Free `table` once no thread can still be reading it.
    ///
    /// # Safety
    /// `table` came from `Box::into_raw`, is no longer reachable from the map's current
    /// pointer (the swap that unlinked it happened before this call, on this thread), and is
    /// retired once. The calling thread is inside an operation (holds a `ReadGuard`).
    pub(crate) unsafe fn retire<T: Reclaim>(&self, table: *mut T) {
        heavy_barrier();
        let retired = Retired {
            table: table.cast(),
            free: free_table::<T>,
            waits: REGISTRY.active(),
        };
        // The calling thread is among the readers waited for; when its operation ends
        // (`flush_retired`) the table is freed if nobody else is reading, which is the usual
        // case. Kept in a cell so that the table is not dropped with the closure if the
        // thread-local is already gone.
        let mut handed = Some(retired);
        let kept = OWNER.try_with(|owner| {
            owner.retired.borrow_mut().extend(handed.take());
        });
        match (kept, handed) {
            (Ok(()), _) => {
                let slot = LOCAL.with(Cell::get);
                if !slot.is_null() {
                    // SAFETY: this thread's registry slot.
                    unsafe { &*slot }.retiring.store(true, Ordering::Relaxed);
                }
            }
            (Err(_), Some(retired)) => hand_off(retired),
            (Err(_), None) => {}
        }
    }
}

/// The calling thread's outermost operation ended with tables it retired waiting: free those
/// whose readers have all moved on, hand the others to a `floe-reclaim` thread.
#[cfg(not(floe_loom))]
#[cold]
#[inline(never)]
fn flush_retired(slot: &ReaderSlot) {
    slot.retiring.store(false, Ordering::Relaxed);
    let Ok(retired) = OWNER.try_with(|owner| owner.retired.take()) else {
        return;
    };
    for mut retired in retired {
        if Registry::quiescent(&mut retired.waits) {
            // SAFETY: retired once, no reader left (module docs); `free` is its type's.
            unsafe { (retired.free)(retired.table) };
        } else {
            hand_off(retired);
        }
    }
}

/// Wait for `retired`'s readers on a thread of its own; where none can be started (or under
/// Miri, which would report it as leaked), in this thread's list, retried when its next
/// operation ends and at the latest when it exits.
#[cfg(not(floe_loom))]
fn hand_off(retired: Retired) {
    #[cfg(not(miri))]
    let retired = {
        // Handed over through a shared cell: if the thread cannot be started, `spawn` drops
        // the closure, and the table must not go with it.
        let cell = std::sync::Arc::new(std::sync::Mutex::new(Some(retired)));
        let theirs = std::sync::Arc::clone(&cell);
        let spawned = std::thread::Builder::new()
            .name("floe-reclaim".into())
            .spawn(move || {
                let retired = theirs.lock().map(|mut r| r.take()).ok().flatten();
                if let Some(retired) = retired {
                    reap(retired);
                }
            });
        if spawned.is_ok() {
            return;
        }
        let Some(retired) = cell.lock().ok().and_then(|mut r| r.take()) else {
            return;
        };
        retired
    };
    let mut handed = Some(retired);
    let kept = OWNER.try_with(|owner| owner.retired.borrow_mut().extend(handed.take()));
    if kept.is_ok() {
        // SAFETY: this thread's registry slot (never freed), or null.
        if let Some(slot) = unsafe { LOCAL.with(Cell::get).as_ref() } {
            slot.retiring.store(true, Ordering::Relaxed);
        }
    }
    if let Some(retired) = handed {
        // No thread and no thread-local list: wait here.
        reap(retired);
    }
}

/// Wait until every reader `retired` waits for has moved on, then free its table.
#[cfg(not(floe_loom))]
fn reap(mut retired: Retired) {
    let mut pause = std::time::Duration::from_micros(1);
    while !Registry::quiescent(&mut retired.waits) {
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(1));
    }
    // SAFETY: retired once, no reader left (module docs); `free` is its type's.
    unsafe { (retired.free)(retired.table) };
}

/// Tables at least this large are unmapped on a thread of their own (`free_table`).
#[cfg(not(any(floe_loom, miri)))]
const FREE_ASIDE_BYTES: usize = 64 << 20;

/// Drop a table nobody can reach. Unmapping a table of gigabytes takes tens of milliseconds,
/// and it may run at the end of an operation (the retiring one's): that operation would stall
/// for it (measured: the 10-40 ms maxima of inserts and the dips of gets while a map grew). So
/// large tables are dropped on a short-lived thread of their own; if none can be started,
/// here.
///
/// # Safety
/// `table` came from `Box::into_raw` of a `Box<T>`, is freed once, and no thread can reach it
/// any more.
#[cfg(not(floe_loom))]
unsafe fn free_table<T: Reclaim>(table: *mut ()) {
    // SAFETY: caller's contract.
    let table = unsafe { Box::from_raw(table.cast::<T>()) };
    #[cfg(not(miri))]
    if table.allocated_bytes() >= FREE_ASIDE_BYTES {
        // If no thread can be started, `spawn` drops the closure, and the table with it, here.
        let _ = std::thread::Builder::new()
            .name("floe-free".into())
            .spawn(move || drop(table));
        return;
    }
    drop(table);
}

/// Retired tables, kept to the end of a model: each with the function that frees it.
#[cfg(floe_loom)]
pub(crate) struct Collector(std::sync::Mutex<Vec<(usize, unsafe fn(usize))>>);

#[cfg(floe_loom)]
impl Collector {
    pub(crate) fn new() -> Self {
        Collector(std::sync::Mutex::new(Vec::new()))
    }

    /// # Safety
    /// As the non-loom `retire`.
    pub(crate) unsafe fn retire<T: Reclaim>(&self, table: *mut T) {
        /// # Safety
        /// `table` is a `Box<T>`'s pointer, freed once.
        unsafe fn free<T>(table: usize) {
            // SAFETY: the caller's contract.
            drop(unsafe { Box::from_raw(table as *mut T) });
        }
        self.0.lock().unwrap().push((table as usize, free::<T>));
    }
}

#[cfg(floe_loom)]
impl Drop for Collector {
    fn drop(&mut self) {
        for &(table, free) in self.0.lock().unwrap().iter() {
            // SAFETY: retired tables came from `Box::into_raw` and are retired once, each
            // with its type's `free`.
            unsafe { free(table) };
        }
    }
}

/// Under loom the map's operations announce nothing (its models keep every table to the end).
#[cfg(floe_loom)]
#[inline(always)]
pub(crate) fn enter() -> ReadGuard<'static> {
    ReadGuard {
        slot: None,
        not_send: core::marker::PhantomData,
    }
}

#[cfg(all(test, floe_loom))]
mod model {
    //! The announcement protocol under loom (`ci/loom.sh`), with the fence barriers (loom has
    //! no `membarrier`; the fence version is the weaker argument, module docs).

    use loom::{cell::UnsafeCell, sync::Arc, thread};

    use super::{heavy_barrier, Registry};
    use crate::sync::{AtomicUsize, Ordering};

    /// A reader that loads the current table while another thread replaces and frees it never
    /// reads it after the free: loom reports the read and the free as a data race if they are
    /// not ordered, which is what happens with the reader's barrier removed (checked).
    #[test]
    fn a_reader_is_never_left_on_a_freed_table() {
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&runs);
        loom::model(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let registry = Arc::new(Registry::new());
            // Two tables; "freeing" one writes its cell.
            let tables = Arc::new([UnsafeCell::new(0u64), UnsafeCell::new(0u64)]);
            let current = Arc::new(AtomicUsize::new(0));
            let reader = {
                let (registry, tables, current) = (
                    Arc::clone(&registry),
                    Arc::clone(&tables),
                    Arc::clone(&current),
                );
                thread::spawn(move || {
                    let slot = registry.claim();
                    for _ in 0..2 {
                        let guard = slot.enter();
                        let table = current.load(Ordering::Acquire);
                        // SAFETY: loom checks this read against the free below.
                        let freed = tables[table].with(|cell| unsafe { *cell });
                        assert_eq!(freed, 0, "read table {table} after it was freed");
                        drop(guard);
                    }
                })
            };
            current.store(1, Ordering::Release);
            heavy_barrier();
            let mut waits = registry.active();
            while !Registry::quiescent(&mut waits) {
                thread::yield_now();
            }
            // SAFETY: loom checks this write against the reader's reads.
            tables[0].with_mut(|cell| unsafe { *cell = 1 });
            reader.join().unwrap();
        });
        let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            runs > 1,
            "loom explored {runs} execution: the model is vacuous"
        );
    }
}

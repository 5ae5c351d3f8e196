//! Items and what they are charged: one cached value with its key, client flags, CAS unique,
//! expiry and read marks, all in one allocation; the bytes `-m` counts for it (its queue
//! node's are in `eviction.rs`); what each write command answers.
//!
//! # One allocation an item
//!
//! An item is a 48-byte [`Header`] followed by its key's bytes and then its value's, in one
//! allocation ([`ItemBox`] owns one until the index takes it, `index.rs`). memcached keeps an
//! item in one slab chunk the same way; two allocations (an index entry holding the key and
//! the header, and the value apart) cost a 20-byte key with a 100-byte value 208 bytes or
//! more under glibc's allocator, where memcached's slab class for it is 192 and one
//! allocation takes 176 (the 16-byte queue node besides: 192). The header is packed to 48 for
//! that: the three flags a read or a meta command may change share one atomic byte.
//!
//! `Item` is a dynamically sized type (the header, then a `[u8]` tail of the key and the
//! value), so a `&Item` carries the tail's length and the provenance of the whole allocation;
//! the index stores only the address, and `Item::at` rebuilds the reference from the
//! lengths in the header.

use core::{
    alloc::Layout,
    ops::{Deref, DerefMut},
    ptr::NonNull,
    sync::atomic::{AtomicU32, AtomicU8, Ordering},
};

/// Everything an item holds but its bytes. Fields other than the read marks (`freq`,
/// `fetched`, `last_access`, and the win token in `marks`) never change after the item is
/// published.
#[repr(C)]
pub struct Header {
    pub(super) cas: u64,
    /// The sequence number of the write that made it, in a persistent cache (`persist.rs`:
    /// replay keeps each key's largest); 0 otherwise.
    pub(super) seq: u64,
    pub(super) flags: u32,
    /// Server time at which the item expires; 0 = never.
    pub(super) exptime: u32,
    /// Server time at which it was stored (for `flush_all` with a delay).
    pub(super) time: u32,
    /// The flush generation it was stored in (for `flush_all` without a delay).
    pub(super) generation: u32,
    /// Server time of the last read (the meta protocol's `l` flag).
    pub(super) last_access: AtomicU32,
    /// Names this item's eviction queue node: the low 32 bits of the CAS unique of the store
    /// that queued it (why 32 suffice: `eviction::Node`). A write that replaces an item
    /// (overwrite, append, incr, touch) keeps the node, and its place in the queue, so only
    /// a key's first store after it was absent queues one and a key written a million times
    /// has one node, not a million stale ones.
    pub(super) node: u32,
    value_len: u32,
    /// Reads since its last pass through an eviction queue's head, saturating at 3.
    pub(super) freq: AtomicU8,
    /// Whether any read returned it (the meta protocol's `h` flag).
    pub(super) fetched: AtomicU8,
    /// The length of its key (at most 250, as memcached's; the protocols and the journal's
    /// replay refuse longer ones).
    key_len: u8,
    /// [`BINARY_KEY`], [`STALE`] and [`TOKEN_SENT`].
    marks: AtomicU8,
}

/// Stored by a meta command whose key was base64 (`b`): `mg ... k` answers the key in base64
/// again, as memcached does. Never changes once published.
const BINARY_KEY: u8 = 1;
/// Marked stale by a meta invalidation (`md ... I`, or `ms ... I` with an older CAS unique):
/// `mg` answers it with `X`, and hands its win token to one client. Never changes once
/// published.
const STALE: u8 = 2;
/// An `mg` took this item's win token (memcached's `W`; later reads get `Z`). A read mark,
/// taken with a `fetch_or`: of the reads of one item, exactly one wins. A write that copies
/// the item to change it in place (`touch`, `ms ... I`, an `incr` whose digits fit) copies
/// this state when it makes the copy, so a read that wins on the old item meanwhile leaves
/// the copy's token free, and a second client can win on the copy (one extra recache; the
/// token would have to be shared between the copies to close it; see `touch`).
const TOKEN_SENT: u8 = 4;

/// The bytes of an item's allocation before its key.
pub const HEADER: usize = size_of::<Header>();
const _: () = assert!(
    HEADER == 48,
    "the header is packed to 48 bytes (module docs)"
);

/// One cached item: its [`Header`] (reached through `Deref`), then its key's bytes and its
/// value's.
#[repr(C)]
pub struct Item {
    header: Header,
    bytes: [u8],
}

/// What a new item's header says, for [`ItemBox::new`].
#[derive(Clone, Copy)]
pub(super) struct Fields {
    pub cas: u64,
    pub seq: u64,
    pub flags: u32,
    pub exptime: u32,
    pub time: u32,
    pub generation: u32,
    pub last_access: u32,
    pub node: u32,
    pub binary_key: bool,
    pub stale: bool,
    pub token_sent: bool,
}

/// An item not (or no longer) in the index, owned: a write builds one, and the index takes
/// it over when it is published (`ItemBox::into_word`).
pub struct ItemBox(NonNull<Item>);

// SAFETY: an `ItemBox` owns its allocation, as a `Box<Item>` would; `Item` is `Sync` (plain
// bytes and atomics).
unsafe impl Send for ItemBox {}
// SAFETY: as above.
unsafe impl Sync for ItemBox {}

/// The allocation of an item whose key and value take `bytes` bytes in all: as
/// `Layout::for_value` gives it for the `Item` (the header's alignment, the size rounded up
/// to it).
fn layout(bytes: usize) -> Layout {
    Layout::from_size_align(item_size(bytes), align_of::<Header>())
        .expect("an item's size fits a Layout (values are at most 1 GiB)")
}

/// The size of an item whose key and value take `bytes` bytes in all: the header and the
/// tail, rounded up to the header's alignment.
const fn item_size(bytes: usize) -> usize {
    (HEADER + bytes).next_multiple_of(align_of::<Header>())
}

/// The `Item` at a thin address whose header is initialized: its lengths give the tail's.
///
/// # Safety
/// `base` points to a live item's allocation (from [`ItemBox::new`]), its header initialized.
unsafe fn fat(base: *mut u8) -> *mut Item {
    // SAFETY: caller; the header is the allocation's first bytes.
    let header = unsafe { &*base.cast::<Header>() };
    let bytes = header.key_len as usize + header.value_len as usize;
    // A `*mut [u8]` of the tail's length cast to the `Item` it heads: the metadata of a
    // struct whose last field is a slice is that slice's length.
    core::ptr::slice_from_raw_parts_mut(base, bytes) as *mut Item
}

impl ItemBox {
    /// A new item under `key` whose value is the concatenation of `value`'s parts.
    pub(super) fn new(key: &[u8], value: &[&[u8]], fields: Fields) -> ItemBox {
        let value_len: usize = value.iter().map(|part| part.len()).sum();
        let layout = layout(key.len() + value_len);
        // SAFETY: the layout's size is at least `HEADER`, never zero.
        let base = unsafe { std::alloc::alloc(layout) };
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let mark = |on: bool, mark: u8| if on { mark } else { 0 };
        let marks = mark(fields.binary_key, BINARY_KEY)
            | mark(fields.stale, STALE)
            | mark(fields.token_sent, TOKEN_SENT);
        let header = Header {
            cas: fields.cas,
            seq: fields.seq,
            flags: fields.flags,
            exptime: fields.exptime,
            time: fields.time,
            generation: fields.generation,
            last_access: AtomicU32::new(fields.last_access),
            node: fields.node,
            value_len: u32::try_from(value_len).expect("values are at most 1 GiB (`-I`)"),
            freq: AtomicU8::new(0),
            fetched: AtomicU8::new(0),
            key_len: u8::try_from(key.len()).expect("keys are at most 250 bytes"),
            marks: AtomicU8::new(marks),
        };
        // SAFETY: `base` is a fresh allocation of `layout`, aligned for `Header`, and holds
        // `HEADER + key.len() + value_len` bytes: the header, then the key, then the parts.
        unsafe {
            base.cast::<Header>().write(header);
            let mut at = base.add(HEADER);
            for part in core::iter::once(&key).chain(value) {
                core::ptr::copy_nonoverlapping(part.as_ptr(), at, part.len());
                at = at.add(part.len());
            }
            ItemBox(NonNull::new_unchecked(fat(base)))
        }
    }

    /// The word the index stores for it: its address, provenance exposed. The index owns it
    /// from then on (it is freed by [`ItemBox::from_word`] or through the index's collector).
    pub(super) fn into_word(self) -> u64 {
        let word = self.0.as_ptr().cast::<u8>().expose_provenance() as u64;
        core::mem::forget(self);
        word
    }

    /// Own again the item whose word [`into_word`](Self::into_word) gave.
    ///
    /// # Safety
    /// `word` came from `into_word`, and nothing else owns it or will read it again.
    pub(super) unsafe fn from_word(word: u64) -> ItemBox {
        // SAFETY: caller; a word is a live item's address.
        unsafe {
            ItemBox(NonNull::new_unchecked(fat(
                core::ptr::with_exposed_provenance_mut(word as usize),
            )))
        }
    }
}

impl Drop for ItemBox {
    fn drop(&mut self) {
        let layout = layout(self.bytes.len());
        // SAFETY: allocated by `new` with this layout (the tail's length is the same), owned.
        unsafe { std::alloc::dealloc(self.0.as_ptr().cast(), layout) }
    }
}

impl Deref for ItemBox {
    type Target = Item;

    fn deref(&self) -> &Item {
        // SAFETY: owned and initialized (`new`).
        unsafe { self.0.as_ref() }
    }
}

impl DerefMut for ItemBox {
    fn deref_mut(&mut self) -> &mut Item {
        // SAFETY: owned, initialized and not shared: nothing else holds it before the index
        // takes it.
        unsafe { self.0.as_mut() }
    }
}

// The header's fields read as the item's own (`item.cas`): the header is the item's first
// part, and what the cache module reads of it.
impl Deref for Item {
    type Target = Header;

    fn deref(&self) -> &Header {
        &self.header
    }
}

impl DerefMut for Item {
    fn deref_mut(&mut self) -> &mut Header {
        &mut self.header
    }
}

/// Start loading the line at `at` into the caches, without waiting for it. Any address will
/// do: a prefetch never faults and reads nothing the program sees.
pub(super) fn prefetch_line(at: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch is a hint; it reads nothing the program sees, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(at.cast(), core::arch::x86_64::_MM_HINT_T0)
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = at;
}

/// Bytes the allocator takes for a request of `n` bytes (glibc's malloc: an 8-byte header,
/// 16-byte granules, 32 bytes at least).
pub const fn allocation(n: usize) -> usize {
    let chunk = (n + 8 + 15) & !15;
    if chunk < 32 {
        32
    } else {
        chunk
    }
}

/// Bytes charged for an item under a key of `key_len` bytes with a value of `value_len`
/// bytes: its one allocation. Its queue node is charged apart (`node_charge`), since a node
/// may outlive it, and the index's table apart from both (`stats`' `index_bytes`).
pub const fn item_charge(key_len: usize, value_len: usize) -> usize {
    allocation(item_size(key_len + value_len))
}

impl Item {
    /// The item at `word`, as the index stores it.
    ///
    /// # Safety
    /// `word` came from [`ItemBox::into_word`] and its item is not freed for `'a` (the
    /// index's guard keeps it: `index.rs`).
    pub(super) unsafe fn at<'a>(word: u64) -> &'a Item {
        // SAFETY: caller.
        unsafe { &*fat(core::ptr::with_exposed_provenance_mut(word as usize)) }
    }

    /// The key.
    pub fn key(&self) -> &[u8] {
        &self.bytes[..self.header.key_len as usize]
    }

    /// The value bytes.
    pub fn data(&self) -> &[u8] {
        &self.bytes[self.header.key_len as usize..]
    }

    /// The client flags.
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// The CAS unique.
    pub fn cas(&self) -> u64 {
        self.cas
    }

    /// Server time of expiry, 0 for never.
    pub fn exptime(&self) -> u32 {
        self.exptime
    }

    /// Server time of the last read before this one (or of the store).
    pub fn last_access(&self) -> u32 {
        self.last_access.load(Ordering::Relaxed)
    }

    fn has(&self, mark: u8) -> bool {
        self.marks.load(Ordering::Relaxed) & mark != 0
    }

    /// Whether its key was given in base64 when it was stored (meta `b` flag).
    pub fn binary_key(&self) -> bool {
        self.has(BINARY_KEY)
    }

    /// Whether a read returned this item before.
    pub fn was_fetched(&self) -> bool {
        self.fetched.load(Ordering::Relaxed) != 0
    }

    /// Whether a meta invalidation marked it stale (`mg` answers `X`).
    pub fn is_stale(&self) -> bool {
        self.has(STALE)
    }

    /// Whether a read took its win token already (`mg` answers `Z`).
    pub fn win_token_taken(&self) -> bool {
        self.has(TOKEN_SENT)
    }

    /// Take the win token (`mg` answers `W`): `true` for the one caller that gets it. Relaxed
    /// suffices: the read-modify-writes of one location are totally ordered, so exactly one
    /// finds the bit clear, and nothing else is published through it (the other marks in
    /// the byte never change once published).
    pub fn take_win_token(&self) -> bool {
        self.marks.fetch_or(TOKEN_SENT, Ordering::Relaxed) & TOKEN_SENT == 0
    }

    pub(super) fn charge(&self) -> usize {
        item_charge(self.header.key_len as usize, self.header.value_len as usize)
    }

    /// Bytes charged against `-m` for it (value, key, bookkeeping).
    pub fn charged_bytes(&self) -> usize {
        self.charge()
    }

    /// The header's fields as a new item would take them: the marks (binary key, stale,
    /// win token) copied, the read state (`last_access`, the counts) not: `with_marks_of`
    /// copies that.
    pub(super) fn fields(&self) -> Fields {
        Fields {
            cas: self.cas,
            seq: self.seq,
            flags: self.flags,
            exptime: self.exptime,
            time: self.time,
            generation: self.generation,
            last_access: 0,
            node: self.node,
            binary_key: self.binary_key(),
            stale: self.is_stale(),
            token_sent: self.win_token_taken(),
        }
    }
}

impl ItemBox {
    /// Set or clear a mark of this unpublished item.
    fn set(&mut self, mark: u8, on: bool) {
        let marks = self.header.marks.get_mut();
        *marks = if on { *marks | mark } else { *marks & !mark };
    }

    /// Mark it stale, or not.
    pub(super) fn set_stale(&mut self, stale: bool) {
        self.set(STALE, stale);
    }

    /// Give its win token away already, or free it.
    pub(super) fn set_token_sent(&mut self, sent: bool) {
        self.set(TOKEN_SENT, sent);
    }

    /// Copy the read marks (and the win token, the stale mark) of `from`: the new item
    /// stands for `from` changed in place, as memcached changes it (a touch, an invalidation,
    /// an `incr` whose digits fit the old value).
    pub(super) fn with_marks_of(mut self, from: &Item) -> ItemBox {
        *self.freq.get_mut() = from.freq.load(Ordering::Relaxed);
        *self.fetched.get_mut() = from.fetched.load(Ordering::Relaxed);
        *self.last_access.get_mut() = from.last_access.load(Ordering::Relaxed);
        self.set_token_sent(from.win_token_taken());
        self.set_stale(from.is_stale());
        self
    }

    /// This new item as the replacement of `replaced` (whatever its validity): it takes
    /// over `replaced`'s queue node.
    pub(super) fn taking_over(mut self, replaced: &Item) -> ItemBox {
        self.node = replaced.node;
        self
    }
}

impl Item {
    /// A copy with another expiry (the key and value are copied: items never change in
    /// place).
    pub(super) fn with_exptime(&self, exptime: u32) -> ItemBox {
        ItemBox::new(
            self.key(),
            &[self.data()],
            Fields {
                exptime,
                ..self.fields()
            },
        )
        .with_marks_of(self)
    }
}

/// How a storage command treats the present item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if absent.
    Add,
    /// Store only if present.
    Replace,
    /// Add the data after the present value (flags and expiry kept).
    Append,
    /// Add the data before the present value (flags and expiry kept).
    Prepend,
}

impl StoreMode {
    /// Whether the store replaces the whole value (set, add, replace), not extends it.
    pub(super) fn replaces_whole(self) -> bool {
        matches!(self, StoreMode::Set | StoreMode::Add | StoreMode::Replace)
    }
}

/// What a storage command did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Stored, with this CAS unique.
    Stored(u64),
    /// The mode's condition failed (`add` of a present key, `replace` of an absent one).
    NotStored,
    /// The CAS unique given did not match.
    Exists,
    /// A CAS was given and the key is absent.
    NotFound,
    /// The item is larger than `-I` or than the whole memory limit.
    TooLarge,
    /// No memory and eviction is off (`-M`), or nothing is left to evict.
    OutOfMemory,
}

/// What `incr` / `decr` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delta {
    /// The new value, its CAS unique, and whether the key was created (from `create`).
    Value(u64, u64, bool),
    /// The key is absent (and no initial value was given).
    NotFound,
    /// The present value is not a decimal number of at most 20 digits.
    NonNumeric,
    /// The CAS unique given did not match.
    Exists,
    /// Storing the new value needed memory there was none of.
    OutOfMemory,
}

/// What a meta command adds to a store (all off for the other protocols).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaStore {
    /// The key was given in base64 (`b`): `mg ... k` answers it in base64 again.
    pub binary_key: bool,
    /// The CAS unique to give the new item instead of a fresh one (`E`).
    pub cas: Option<u64>,
    /// Invalidate (`ms ... I`): a set or replace whose compare unique is older (lower) than
    /// the item's stores anyway, the new item marked stale, with the expiry and the win
    /// token of the item it replaces.
    pub invalidate: bool,
    /// The new item's win token is taken already: its creator won it (`mg ... N`).
    pub token_sent: bool,
}

/// How `md` with `I` or `x` changes an item instead of removing it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tombstone {
    /// `I`: mark the item stale (its win token returned, for the next `mg` to take) with a
    /// fresh CAS unique.
    pub stale: bool,
    /// `x`: replace the item by an empty value with these client flags and this expiry,
    /// keeping its CAS unique.
    pub empty: Option<(u32, u32)>,
    /// `T` with `I`: the new expiry (with `x`, it is the empty item's already).
    pub exptime: Option<u32>,
    /// `E`: the CAS unique to give the item instead.
    pub cas: Option<u64>,
}

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// The key was removed.
    Deleted,
    /// The key is absent.
    NotFound,
    /// The CAS unique given did not match.
    Exists,
}

/// A stored value as a counter, as memcached reads one (`safe_strtoull`): leading
/// whitespace, decimal digits within `u64`, then the end or whitespace (after which anything
/// goes: `"0 jh"` counts as 0). Anything else is not a number.
pub fn parse_counter(data: &[u8]) -> Option<u64> {
    let start = data.iter().position(|b| !is_c_space(*b))?;
    let text = &data[start..];
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || text.get(digits).is_some_and(|b| !is_c_space(*b)) {
        return None;
    }
    core::str::from_utf8(&text[..digits]).ok()?.parse().ok()
}

/// C's `isspace` in the C locale.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

//! Items and what they are charged: one cached value with its client flags, CAS unique,
//! expiry and read marks; the bytes `-m` counts for it (its queue node's are in
//! `eviction.rs`); what each write command answers.

use core::{
    borrow::Borrow,
    hash::{Hash, Hasher},
    ops::Deref,
    sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering},
};

/// Keys up to this long are held inside the map entry ([`Key`]).
pub const INLINE_KEY: usize = 22;

/// A key as the index holds it: up to [`INLINE_KEY`] bytes inside the map entry itself, a
/// longer one in an allocation of its own. Either way the handle is 24 bytes, a boxed
/// slice's 16 and a tag (memcached keys are mostly short: an inline key saves the 32-byte
/// allocation a 20-byte key would take). Its map entry owns it: a queue node names its item
/// by the key's hash and the item's node id, not by the key (`eviction::Node`). It hashes
/// and compares as its bytes, so the map is looked up with a `&[u8]`.
#[derive(Clone)]
pub struct Key(KeyBytes);

#[derive(Clone)]
enum KeyBytes {
    /// The length, then the bytes (the rest zero).
    Inline(u8, [u8; INLINE_KEY]),
    Boxed(Box<[u8]>),
}

impl Key {
    /// The bytes allocated apart from the map entry for a key of `len` bytes.
    pub const fn allocation(len: usize) -> usize {
        if len <= INLINE_KEY {
            0
        } else {
            allocation(len)
        }
    }
}

impl From<&[u8]> for Key {
    fn from(bytes: &[u8]) -> Key {
        if bytes.len() <= INLINE_KEY {
            let mut inline = [0; INLINE_KEY];
            inline[..bytes.len()].copy_from_slice(bytes);
            Key(KeyBytes::Inline(bytes.len() as u8, inline))
        } else {
            Key(KeyBytes::Boxed(bytes.into()))
        }
    }
}

impl Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            KeyBytes::Inline(len, bytes) => &bytes[..*len as usize],
            KeyBytes::Boxed(bytes) => bytes,
        }
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self
    }
}

// As its bytes, which `Borrow<[u8]>` requires: a key and its bytes hash alike.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        **self == **other
    }
}

impl Eq for Key {}

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
/// bytes: its map entry (the key handle and the `Item`), its key's allocation if it is not
/// inline, and its value's. Its queue node is charged apart (`node_charge`), since a node
/// may outlive it.
pub const fn item_charge(key_len: usize, value_len: usize) -> usize {
    allocation(size_of::<Key>() + size_of::<Item>())
        + Key::allocation(key_len)
        + allocation(value_len)
}

/// One cached value. Fields other than the read marks (`freq`, `fetched`, `last_access`)
/// never change after the item is published.
pub struct Item {
    pub(super) data: Box<[u8]>,
    pub(super) cas: u64,
    pub(super) flags: u32,
    /// Server time at which the item expires; 0 = never.
    pub(super) exptime: u32,
    /// Server time at which it was stored (for `flush_all` with a delay).
    pub(super) time: u32,
    /// The flush generation it was stored in (for `flush_all` without a delay).
    pub(super) generation: u32,
    /// Reads since its last pass through an eviction queue's head, saturating at 3.
    pub(super) freq: AtomicU8,
    /// Whether any read returned it (the meta protocol's `h` flag).
    pub(super) fetched: AtomicU8,
    /// Server time of the last read (the meta protocol's `l` flag).
    pub(super) last_access: AtomicU32,
    /// The length of its key (at most 250, as memcached's; the protocols and the journal's
    /// replay refuse longer ones): with the value's, what it is charged (`charge`).
    pub(super) key_len: u8,
    /// Stored by a meta command whose key was base64 (`b`): `mg ... k` answers the key in
    /// base64 again, as memcached does.
    pub(super) binary_key: bool,
    /// Names this item's eviction queue node: the low 32 bits of the CAS unique of the store
    /// that queued it (why 32 suffice: `eviction::Node`). A write that replaces an item
    /// (overwrite, append, incr, touch) keeps the node, and its place in the queue, so only
    /// a key's first store after it was absent queues one and a key written a million times
    /// has one node, not a million stale ones.
    pub(super) node: u32,
    /// Marked stale by a meta invalidation (`md ... I`, or `ms ... I` with an older CAS
    /// unique): `mg` answers it with `X`, and hands its win token to one client.
    pub(super) stale: bool,
    /// Whether an `mg` took this item's win token (memcached's `W`; later reads get `Z`).
    /// A read mark like `fetched`, but taken with a swap: of the reads of one item, exactly
    /// one wins. A write that copies the item to change it in place (`touch`, `ms ... I`, an
    /// `incr` whose digits fit) copies this state when it makes the copy, so a read that wins
    /// on the old item meanwhile leaves the copy's token free, and a second client can win
    /// on the copy (one extra recache; the token would have to be shared between the copies
    /// to close it; see `touch`).
    pub(super) token_sent: AtomicBool,
    /// The sequence number of the write that made it, in a persistent cache (`persist.rs`:
    /// replay keeps each key's largest); 0 otherwise.
    pub(super) seq: u64,
}

impl Item {
    /// The value bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
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

    /// Whether its key was given in base64 when it was stored (meta `b` flag).
    pub fn binary_key(&self) -> bool {
        self.binary_key
    }

    /// Whether a read returned this item before.
    pub fn was_fetched(&self) -> bool {
        self.fetched.load(Ordering::Relaxed) != 0
    }

    /// Whether a meta invalidation marked it stale (`mg` answers `X`).
    pub fn is_stale(&self) -> bool {
        self.stale
    }

    /// Whether a read took its win token already (`mg` answers `Z`).
    pub fn win_token_taken(&self) -> bool {
        self.token_sent.load(Ordering::Relaxed)
    }

    /// Take the win token (`mg` answers `W`): `true` for the one caller that gets it. Relaxed
    /// suffices: the swaps of one location are totally ordered, so exactly one reads `false`,
    /// and nothing else is published through the flag.
    pub fn take_win_token(&self) -> bool {
        !self.token_sent.swap(true, Ordering::Relaxed)
    }

    pub(super) fn charge(&self) -> usize {
        item_charge(self.key_len as usize, self.data.len())
    }

    /// Bytes charged against `-m` for it (value, key, bookkeeping).
    pub fn charged_bytes(&self) -> usize {
        self.charge()
    }

    /// Copy the read marks (and the win token, the stale mark) of `from`: the new item
    /// stands for `from` changed in place, as memcached changes it (a touch, an invalidation,
    /// an `incr` whose digits fit the old value).
    pub(super) fn with_marks_of(self, from: &Item) -> Item {
        self.freq
            .store(from.freq.load(Ordering::Relaxed), Ordering::Relaxed);
        self.fetched
            .store(from.fetched.load(Ordering::Relaxed), Ordering::Relaxed);
        self.last_access
            .store(from.last_access.load(Ordering::Relaxed), Ordering::Relaxed);
        self.token_sent
            .store(from.token_sent.load(Ordering::Relaxed), Ordering::Relaxed);
        Item {
            stale: from.stale,
            ..self
        }
    }

    /// A copy with another expiry (the value is copied: items never change in place).
    pub(super) fn with_exptime(&self, exptime: u32) -> Item {
        Item {
            data: self.data.clone(),
            cas: self.cas,
            flags: self.flags,
            exptime,
            time: self.time,
            generation: self.generation,
            freq: AtomicU8::new(0),
            fetched: AtomicU8::new(0),
            last_access: AtomicU32::new(0),
            key_len: self.key_len,
            binary_key: self.binary_key,
            node: self.node,
            stale: false,
            token_sent: AtomicBool::new(false),
            seq: self.seq,
        }
        .with_marks_of(self)
    }

    /// This new item as the replacement of `replaced` (whatever its validity): it takes
    /// over `replaced`'s queue node.
    pub(super) fn taking_over(mut self, replaced: &Item) -> Item {
        self.node = replaced.node;
        self
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

//! The bin header word, the link word, and the slot mask.
//!
//! # The header (8 bytes, DLHT §3.1)
//!
//! ```text
//!  63                              32 31 30 29 28                     3 2 1 0
//! +----------------------------------+-----+-----+-------- ... -----+-----+-----+
//! |         version (32 bits)        | bin |  s14 |                  |  s1 |  s0 |
//! +----------------------------------+-----+-----+-------- ... -----+-----+-----+
//! ```
//!
//! Slot `s` (0..15) owns bits `2s..2s+2`; the bin state owns bits 30..32; the version is
//! bumped by every header CAS, so two equal header words mean "nothing happened in this bin
//! in between" (up to 2^32 wrap-around, see the default layout's essay, `raw/bins/mod.rs`).
//!
//! Slot states: `Invalid = 0b00` (free), `Inserting = 0b01` (taken by one committed insert,
//! whose key is being written), `Valid = 0b10` (holds a live key), `Shadow = 0b11` (a shadow
//! insert's key: present to inserts, hidden from everything else, DLHT §3.2.2). Searches match
//! the keys of `Inserting` and `Valid` slots (`searchable`); see the default layout's essay
//! (`raw/bins/mod.rs`) for why an insert's slot is searchable before its key is written. Step 2 of an insert looks into the
//! slots whose low bit is set (`Inserting` and `Shadow`: `unconfirmed`). Bin states: `NoTransfer = 0`, `InTransfer = 1`,
//! `DoneTransfer = 2` (the resize protocol, DLHT §3.2.5; see `raw::bins::migrate`), `Frozen = 3`
//! (a shrink about to move the bin).
//!
//! # Slot masks in "spread" form
//!
//! Masks of slots keep slot `s` at bit `2s`, the low bit of its state field. This makes the
//! masks fall straight out of the header (no bit compression) *and* line up with the key lanes
//! of a cache line, which are every other 8-byte word:
//!
//! ```text
//! header states  s2 s1 s0 = 10 00 10      (slot 2 Valid, slot 1 Invalid, slot 0 Valid)
//! valid (spread)          = 01 00 01  -> bits 0 and 4 -> slots 0 and 2
//! primary line lanes      =  v2 k2 v1 k1 v0 k0 link hdr     (lane 0 = header)
//! key lane of slot s      =  2 + 2s  ->  lane mask >> 2 == spread slot mask
//! ```

// The spread encoding relies on each state taking exactly two bits and on Valid being 0b10:
// `valid = high_bit & !low_bit`. Checked at compile time so a change of encoding cannot
// silently break the masks.
const _: () = assert!(SlotState::Valid as u64 == 0b10 && SlotState::Invalid as u64 == 0);
const _: () = assert!(SLOTS_PER_BIN * 2 + 2 <= 32);

/// Slots in the primary bucket (the bin's own cache line, after header and link words).
pub(crate) const PRIMARY_SLOTS: usize = 3;
/// Slots in one link bucket.
pub(crate) const LINK_SLOTS: usize = 4;
/// Slots a bin can hold: the primary bucket plus up to three link buckets.
pub(crate) const SLOTS_PER_BIN: usize = PRIMARY_SLOTS + 3 * LINK_SLOTS;

/// Bit `2s` set for every slot `s` of a bin.
const ALL_SLOTS_SPREAD: u64 = 0x1555_5555;
const BIN_STATE_SHIFT: u32 = 30;
const VERSION_SHIFT: u32 = 32;

/// The state of one slot, as stored in its two header bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum SlotState {
    /// Free: an insert may take it.
    Invalid = 0b00,
    /// Taken by an insert that has committed (its header CAS succeeded): the slot holds the
    /// bin's dead key until the inserter writes `(key, value)`, then the key; the inserter
    /// moves it to `Valid` next. Never abandoned.
    Inserting = 0b01,
    /// Holds a live key.
    Valid = 0b10,
    /// Taken by a shadow insert: holds the bin's dead key until the inserter writes
    /// `(shadow key, key)`, then a key present to inserts (which find it taken) and hidden
    /// from gets, puts, removes and walks, until a commit, an abort or a move claims it (slot
    /// CAS to the dead key); a commit then goes `-> Inserting` and writes `(key, value)`, an
    /// abort `-> Invalid` (see Shadow inserts in `raw/bins/mod.rs`).
    Shadow = 0b11,
}

/// The state of a bin with respect to a resize (`raw::bins::migrate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum BinState {
    /// The bin lives in this table.
    NoTransfer = 0,
    /// A resizer is copying the bin to the next table.
    InTransfer = 1,
    /// The bin has been copied; operate on the next table.
    DoneTransfer = 2,
    /// A shrink is about to move the bin: reads, puts and deletes go on, inserts wait (so the
    /// bin's key count can only fall until it is moved; `raw::bins::migrate`).
    Frozen = 3,
}

/// A snapshot of a bin header word.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header(pub(crate) u64);

impl Header {
    /// The state of slot `slot`.
    #[inline(always)]
    pub(crate) fn slot(self, slot: usize) -> SlotState {
        debug_assert!(slot < SLOTS_PER_BIN);
        match (self.0 >> (2 * slot)) & 0b11 {
            0b00 => SlotState::Invalid,
            0b01 => SlotState::Inserting,
            0b10 => SlotState::Valid,
            _ => SlotState::Shadow,
        }
    }

    /// The bin's resize state.
    #[inline(always)]
    pub(crate) fn bin_state(self) -> BinState {
        match (self.0 >> BIN_STATE_SHIFT) & 0b11 {
            0 => BinState::NoTransfer,
            1 => BinState::InTransfer,
            2 => BinState::DoneTransfer,
            _ => BinState::Frozen,
        }
    }

    /// Whether the bin is being moved or has been (`InTransfer` or `DoneTransfer`): the one
    /// test a search makes on its hot path, a bit trick instead of the match (which compiles
    /// to a jump table). The states are 1 and 2: the two state bits differ.
    #[inline(always)]
    pub(crate) fn moving(self) -> bool {
        ((self.0 >> BIN_STATE_SHIFT) ^ (self.0 >> (BIN_STATE_SHIFT + 1))) & 1 == 1
    }

    /// Nonzero iff [`moving`](Self::moving): one add and one and, for paths that fold it
    /// with other tests into one branch. Adding 1 to the two-bit state sets its high bit for
    /// states 1 and 2 only (0 -> 1, 1 -> 2, 2 -> 3, 3 -> 4 with the carry above the field).
    #[inline(always)]
    pub(crate) fn moving_bits(self) -> u64 {
        self.0.wrapping_add(1 << BIN_STATE_SHIFT) & (1 << (BIN_STATE_SHIFT + 1))
    }

    /// The 32-bit version counter.
    #[inline(always)]
    pub(crate) fn version(self) -> u32 {
        (self.0 >> VERSION_SHIFT) as u32
    }

    /// This header with slot `slot` moved to `state` and the version bumped: the value every
    /// header CAS installs. The version wraps around at 2^32.
    #[inline(always)]
    #[must_use]
    pub(crate) fn with_slot(self, slot: usize, state: SlotState) -> Header {
        debug_assert!(slot < SLOTS_PER_BIN);
        let shift = 2 * slot;
        let cleared = self.0 & !(0b11 << shift);
        Header((cleared | (state as u64) << shift).wrapping_add(1 << VERSION_SHIFT))
    }

    /// This header with the `Inserting` slots of `written` made `Valid`, version unchanged
    /// (the caller's CAS installs it together with its own change, which bumps the version).
    /// Every slot of `written` must be `Inserting` in this header.
    #[inline(always)]
    #[must_use]
    pub(crate) fn with_published(self, written: SlotMask) -> Header {
        debug_assert!(
            written.and(self.inserting()) == written,
            "{self:?} {written:?}"
        );
        // Inserting = 0b01 -> Valid = 0b10: clear the low bit, set the high one.
        Header(self.0 ^ written.0 ^ (written.0 << 1))
    }

    /// This header with the bin state set to `state` and the version bumped.
    #[inline(always)]
    #[must_use]
    pub(crate) fn with_bin_state(self, state: BinState) -> Header {
        let cleared = self.0 & !(0b11 << BIN_STATE_SHIFT);
        Header((cleared | (state as u64) << BIN_STATE_SHIFT).wrapping_add(1 << VERSION_SHIFT))
    }

    /// Slots whose state is `Valid`, in spread form (the engine goes by `searchable`).
    #[cfg(test)]
    pub(crate) fn valid(self) -> SlotMask {
        // Valid = 0b10: high bit set, low bit clear.
        SlotMask((self.0 >> 1) & !self.0 & ALL_SLOTS_SPREAD)
    }

    /// Slots whose state is `Inserting`, in spread form.
    #[inline(always)]
    pub(crate) fn inserting(self) -> SlotMask {
        // Inserting = 0b01: low bit set, high bit clear.
        SlotMask(self.0 & !(self.0 >> 1) & ALL_SLOTS_SPREAD)
    }

    /// Slots whose state is `Shadow`, in spread form.
    #[inline(always)]
    pub(crate) fn shadow(self) -> SlotMask {
        // Shadow = 0b11: both bits set.
        SlotMask(self.0 & (self.0 >> 1) & ALL_SLOTS_SPREAD)
    }

    /// Slots an insert's step 2 reads: `Inserting` and `Shadow` (the low state bit set), whose
    /// key may be unwritten or, once written, is not matched by a search.
    #[inline(always)]
    pub(crate) fn unconfirmed(self) -> SlotMask {
        SlotMask(self.0 & ALL_SLOTS_SPREAD)
    }

    /// Slots that are taken (every state but `Invalid`), in spread form.
    #[inline(always)]
    pub(crate) fn occupied(self) -> SlotMask {
        SlotMask((self.0 | (self.0 >> 1)) & ALL_SLOTS_SPREAD)
    }

    /// Slots a search matches keys in: `Valid` and `Inserting` (exactly one of the two state
    /// bits set), in spread form.
    #[inline(always)]
    pub(crate) fn searchable(self) -> SlotMask {
        SlotMask((self.0 ^ (self.0 >> 1)) & ALL_SLOTS_SPREAD)
    }

    /// Nonzero unless the bin is `NoTransfer`, holds no `Shadow` slot and no taken link slot:
    /// the bins the engine's fast write may write from one read of their primary line
    /// (`raw`'s essay, "The fast write"). Bit tricks folded into one test.
    #[inline(always)]
    pub(crate) fn fast_write_blockers(self) -> u64 {
        // The bits above the primary slots' and below the version: the link slots' states
        // (any but `Invalid` is nonzero) and the bin state (`NoTransfer` is zero).
        const LINK_SLOTS_AND_BIN_STATE: u64 = ((1 << VERSION_SHIFT) - 1) & !0b11_1111;
        let primary_shadows = self.shadow().and(SlotMask::PRIMARY).0;
        (self.0 & LINK_SLOTS_AND_BIN_STATE) | primary_shadows
    }

    /// The fast write's commit (`raw`'s essay): the first free primary slot made `Inserting`
    /// and every `Inserting` slot made `Valid`, version bumped, as `with_published` of
    /// `inserting()` then `with_slot` would make it (unit test), with the slot's index; `None`
    /// if no primary slot is free. Bit tricks: the lowest free bit isolated, the publication
    /// an xor.
    #[inline(always)]
    pub(crate) fn commit_first_free_primary(self) -> Option<(usize, Header)> {
        let free = self.invalid().and(SlotMask::PRIMARY).0;
        if free == 0 {
            return None;
        }
        // Inserting = 0b01 on a free 0b00 slot: the isolated low bit itself.
        let lowest = free & free.wrapping_neg();
        let inserting = self.inserting().0;
        let word = (self.0 ^ inserting ^ (inserting << 1)) | lowest;
        Some((
            lowest.trailing_zeros() as usize / 2,
            Header(word.wrapping_add(1 << VERSION_SHIFT)),
        ))
    }

    /// Slots whose state is `Invalid` (free), in spread form.
    #[inline(always)]
    pub(crate) fn invalid(self) -> SlotMask {
        SlotMask(!(self.0 | (self.0 >> 1)) & ALL_SLOTS_SPREAD)
    }
}

impl core::fmt::Debug for Header {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let states: String = (0..SLOTS_PER_BIN)
            .map(|s| match self.slot(s) {
                SlotState::Invalid => '.',
                SlotState::Inserting => 'i',
                SlotState::Valid => 'V',
                SlotState::Shadow => 's',
            })
            .collect();
        f.debug_struct("Header")
            .field("version", &self.version())
            .field("bin", &self.bin_state())
            .field("slots", &states)
            .finish()
    }
}

/// A set of slots of one bin, slot `s` at bit `2s` (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct SlotMask(pub(crate) u64);

impl SlotMask {
    /// Slots of the primary bucket.
    pub(crate) const PRIMARY: SlotMask = SlotMask(0b01_0101);
    /// Slots that live in link buckets.
    pub(crate) const LINKED: SlotMask = SlotMask(ALL_SLOTS_SPREAD & !Self::PRIMARY.0);

    /// Whether the set is empty.
    #[inline(always)]
    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The set holding only `slot`.
    #[inline(always)]
    pub(crate) fn single(slot: usize) -> SlotMask {
        debug_assert!(slot < SLOTS_PER_BIN);
        SlotMask(1 << (2 * slot))
    }

    /// The lowest slot in the set.
    #[inline(always)]
    pub(crate) fn first(self) -> Option<usize> {
        if self.0 == 0 {
            None
        } else {
            Some(self.0.trailing_zeros() as usize / 2)
        }
    }

    /// The intersection of two sets.
    #[inline(always)]
    #[must_use]
    pub(crate) fn and(self, other: SlotMask) -> SlotMask {
        SlotMask(self.0 & other.0)
    }

    /// Slots of link bucket `bucket` (0, 1 or 2), i.e. slots `3 + 4*bucket ..`.
    #[inline(always)]
    pub(crate) fn link_bucket(bucket: usize) -> SlotMask {
        debug_assert!(bucket < 3);
        SlotMask(0x55 << (2 * (PRIMARY_SLOTS + LINK_SLOTS * bucket)))
    }

    /// The key lanes of a primary line (2, 4, 6), as a lane mask.
    pub(crate) const PRIMARY_KEY_LANES: u8 = 0b0101_0100;

    /// Turn a lane mask of a *primary* line (bit `l` = 8-byte lane `l` matched) into slots.
    /// Key lanes are 2, 4, 6 (see the module docs), so `lanes >> 2` masked to the key lanes.
    #[inline(always)]
    pub(crate) fn from_primary_lanes(lanes: u8) -> SlotMask {
        SlotMask(u64::from(lanes >> 2) & 0b01_0101)
    }

    /// Turn a lane mask of link bucket `bucket` into slots. Key lanes are 0, 2, 4, 6.
    #[inline(always)]
    pub(crate) fn from_link_lanes(lanes: u8, bucket: usize) -> SlotMask {
        SlotMask(u64::from(lanes & 0x55) << (2 * (PRIMARY_SLOTS + LINK_SLOTS * bucket)))
    }

    /// Iterate the slots in ascending order.
    pub(crate) fn iter(self) -> impl Iterator<Item = usize> {
        let mut bits = self.0;
        core::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let slot = bits.trailing_zeros() as usize / 2;
            bits &= bits - 1;
            Some(slot)
        })
    }
}

/// Where slot `s` of a bin lives: the primary bucket, or link bucket 0, 1, 2, and the index
/// inside it.
#[inline(always)]
pub(crate) fn slot_place(slot: usize) -> (Option<usize>, usize) {
    if slot < PRIMARY_SLOTS {
        (None, slot)
    } else {
        let linked = slot - PRIMARY_SLOTS;
        (Some(linked / LINK_SLOTS), linked % LINK_SLOTS)
    }
}

/// The link word (8 bytes after the header): two 32-bit link-bucket references, each stored
/// as `index + 1` so that zero means "not chained".
///
/// ```text
///  63            32 31             0
/// +----------------+----------------+
/// | pair (idx + 1) | single (idx+1) |
/// +----------------+----------------+
/// ```
///
/// `single` chains link bucket 0 (slots 3..7). `pair` chains two consecutive buckets from the
/// pool: link buckets 1 and 2 (slots 7..15). Chains only grow, so a reader that sees a
/// reference can follow it without re-checking.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Link(pub(crate) u64);

impl Link {
    /// The pool index of link bucket `bucket` (0, 1 or 2), if it is chained.
    #[inline(always)]
    pub(crate) fn bucket(self, bucket: usize) -> Option<usize> {
        let field = if bucket == 0 {
            self.0 as u32
        } else {
            (self.0 >> 32) as u32
        };
        if field == 0 {
            None
        } else {
            Some(field as usize - 1 + usize::from(bucket == 2))
        }
    }

    /// This word with the field serving `bucket` set to pool index `index` (the first of the
    /// pair for buckets 1 and 2).
    #[inline(always)]
    #[must_use]
    pub(crate) fn with_bucket(self, bucket: usize, index: u32) -> Link {
        debug_assert!(index < u32::MAX);
        if bucket == 0 {
            Link((self.0 & !0xFFFF_FFFF) | u64::from(index + 1))
        } else {
            Link((self.0 & 0xFFFF_FFFF) | u64::from(index + 1) << 32)
        }
    }

    /// How many pool buckets the field serving `bucket` takes: 1 for bucket 0, 2 for the pair.
    #[inline(always)]
    pub(crate) fn field_width(bucket: usize) -> usize {
        if bucket == 0 {
            1
        } else {
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every slot state, in the order of their codes.
    const ALL_STATES: [SlotState; 4] = [
        SlotState::Invalid,
        SlotState::Inserting,
        SlotState::Valid,
        SlotState::Shadow,
    ];

    /// The fast write's blockers are nonzero exactly when the bin is not `NoTransfer`, a
    /// slot is `Shadow`, or a link slot is taken, for every slot and bin state.
    #[test]
    fn fast_write_blockers_match_their_definition() {
        let states = ALL_STATES;
        for slot in 0..SLOTS_PER_BIN {
            for state in states {
                for bin_state in 0..4u64 {
                    for other in [0u64, 0b10, 0b01_0000] {
                        let header = Header(
                            (other | (state as u64) << (2 * slot))
                                | bin_state << BIN_STATE_SHIFT
                                | 9 << VERSION_SHIFT,
                        );
                        let blocked = header.bin_state() != BinState::NoTransfer
                            || !header.shadow().is_empty()
                            || !header.occupied().and(SlotMask::LINKED).is_empty();
                        assert_eq!(header.fast_write_blockers() != 0, blocked, "{header:?}");
                    }
                }
            }
        }
    }

    /// The fast write's commit word equals the one the full path builds from
    /// `with_published` and `with_slot`, for every state of the primary slots, with link
    /// slots and bin states varied around them.
    #[test]
    fn fast_commit_matches_the_general_transitions() {
        let states = ALL_STATES;
        for code in 0..64u64 {
            for rest in [0u64, 0b01 << 6, 0b10 << 8 | 0b01 << 28, 0b11 << 30, 7 << 32] {
                let mut header = Header(rest);
                for slot in 0..PRIMARY_SLOTS {
                    let state = states[((code >> (2 * slot)) & 3) as usize];
                    header =
                        Header(header.0 & !(0b11 << (2 * slot)) | (state as u64) << (2 * slot));
                }
                let expected = header.invalid().and(SlotMask::PRIMARY).first().map(|slot| {
                    let made = header
                        .with_published(header.inserting())
                        .with_slot(slot, SlotState::Inserting);
                    (slot, made)
                });
                assert_eq!(header.commit_first_free_primary(), expected, "{header:?}");
            }
        }
    }

    #[test]
    fn transitions_bump_version_and_touch_one_slot() {
        let h = Header(0);
        let h1 = h.with_slot(4, SlotState::Inserting);
        assert_eq!(h1.version(), 1);
        assert_eq!(h1.slot(4), SlotState::Inserting);
        for s in (0..SLOTS_PER_BIN).filter(|&s| s != 4) {
            assert_eq!(h1.slot(s), SlotState::Invalid);
        }
        let h2 = h1.with_slot(4, SlotState::Valid);
        assert_eq!(h2.version(), 2);
        assert_eq!(h2.valid().iter().collect::<Vec<_>>(), vec![4]);
        assert!(!h2.invalid().iter().any(|s| s == 4));
        assert_eq!(h2.bin_state(), BinState::NoTransfer);
        let h3 = h2.with_bin_state(BinState::InTransfer);
        assert_eq!((h3.version(), h3.bin_state()), (3, BinState::InTransfer));
        assert_eq!(h3.valid(), h2.valid());
        let h4 = h3
            .with_slot(4, SlotState::Invalid)
            .with_bin_state(BinState::DoneTransfer);
        assert_eq!((h4.version(), h4.bin_state()), (5, BinState::DoneTransfer));
        assert!(h4.valid().is_empty());
    }

    #[test]
    fn publishing_moves_only_the_given_inserting_slots_to_valid() {
        let h = Header(7 << VERSION_SHIFT)
            .with_slot(0, SlotState::Inserting)
            .with_slot(5, SlotState::Inserting)
            .with_slot(9, SlotState::Valid)
            .with_slot(14, SlotState::Inserting);
        let written = SlotMask(SlotMask::single(5).0 | SlotMask::single(14).0);
        let p = h.with_published(written);
        assert_eq!(p.version(), h.version(), "no version bump of its own");
        assert_eq!(p.bin_state(), h.bin_state());
        for s in 0..SLOTS_PER_BIN {
            let expected = match s {
                5 | 14 | 9 => SlotState::Valid,
                0 => SlotState::Inserting,
                _ => SlotState::Invalid,
            };
            assert_eq!(p.slot(s), expected, "slot {s}");
        }
        assert_eq!(h.with_published(SlotMask(0)), h);
    }

    #[test]
    fn moving_is_in_or_done_transfer() {
        for state in [
            BinState::NoTransfer,
            BinState::InTransfer,
            BinState::DoneTransfer,
            BinState::Frozen,
        ] {
            let h = Header(u64::MAX).with_bin_state(state);
            let h0 = Header(0).with_bin_state(state);
            let expected = matches!(state, BinState::InTransfer | BinState::DoneTransfer);
            assert_eq!((h.moving(), h0.moving()), (expected, expected), "{state:?}");
            assert_eq!(
                (h.moving_bits() != 0, h0.moving_bits() != 0),
                (expected, expected),
                "{state:?}"
            );
        }
    }

    #[test]
    fn version_wraps_without_touching_states() {
        let h = Header(u64::from(u32::MAX) << 32).with_slot(14, SlotState::Valid);
        assert_eq!(h.version(), 0);
        assert_eq!(h.slot(14), SlotState::Valid);
        assert_eq!(h.bin_state(), BinState::NoTransfer);
    }

    #[test]
    #[cfg_attr(miri, ignore = "arithmetic only, and 14 s of ci/miri.sh's time")]
    fn masks_partition_the_slots() {
        // Every combination of states on a few slots: each slot is in exactly one of
        // valid / invalid / inserting / shadow.
        let states = ALL_STATES;
        for pattern in 0u32..4u32.pow(4) {
            let mut h = Header(0);
            for (i, slot) in [0usize, 3, 9, 14].into_iter().enumerate() {
                h = h.with_slot(slot, states[(pattern >> (2 * i)) as usize & 3]);
            }
            for s in 0..SLOTS_PER_BIN {
                let valid = h.valid().iter().any(|x| x == s);
                let invalid = h.invalid().iter().any(|x| x == s);
                let inserting = h.inserting().iter().any(|x| x == s);
                let searchable = h.searchable().iter().any(|x| x == s);
                assert_eq!(valid, h.slot(s) == SlotState::Valid);
                assert_eq!(invalid, h.slot(s) == SlotState::Invalid);
                assert_eq!(inserting, h.slot(s) == SlotState::Inserting);
                assert_eq!(searchable, valid || inserting);
                let shadow = h.shadow().iter().any(|x| x == s);
                assert_eq!(shadow, h.slot(s) == SlotState::Shadow);
                let unconfirmed = h.unconfirmed().iter().any(|x| x == s);
                assert_eq!(unconfirmed, inserting || shadow);
                let occupied = h.occupied().iter().any(|x| x == s);
                assert_eq!(occupied, !invalid);
            }
        }
    }

    #[test]
    fn lanes_map_to_slots() {
        // Primary line: lanes 2, 4, 6 are the keys of slots 0, 1, 2; header/link/value lanes
        // never produce a slot.
        assert_eq!(
            SlotMask::from_primary_lanes(0b0000_0100)
                .iter()
                .collect::<Vec<_>>(),
            vec![0]
        );
        assert_eq!(
            SlotMask::from_primary_lanes(0b0101_0000)
                .iter()
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert!(SlotMask::from_primary_lanes(0b1010_1011).is_empty());
        // Link bucket 1 holds slots 7..11 with keys in lanes 0, 2, 4, 6.
        assert_eq!(
            SlotMask::from_link_lanes(0b0100_0001, 1)
                .iter()
                .collect::<Vec<_>>(),
            vec![7, 10]
        );
        assert!(SlotMask::from_link_lanes(0b1010_1010, 0).is_empty());
        assert_eq!(
            SlotMask::link_bucket(2).iter().collect::<Vec<_>>(),
            vec![11, 12, 13, 14]
        );
        assert_eq!(
            SlotMask::PRIMARY.0 | SlotMask::LINKED.0,
            ALL_SLOTS_SPREAD,
            "primary and linked slots cover the bin"
        );
    }

    #[test]
    fn slot_places() {
        assert_eq!(slot_place(2), (None, 2));
        assert_eq!(slot_place(3), (Some(0), 0));
        assert_eq!(slot_place(10), (Some(1), 3));
        assert_eq!(slot_place(11), (Some(2), 0));
        assert_eq!(slot_place(14), (Some(2), 3));
    }

    #[test]
    fn link_fields() {
        let l = Link(0);
        assert_eq!(l.bucket(0), None);
        let l = l.with_bucket(0, 0);
        assert_eq!(l.bucket(0), Some(0));
        assert_eq!(l.bucket(1), None);
        let l = l.with_bucket(1, 41);
        assert_eq!(
            (l.bucket(0), l.bucket(1), l.bucket(2)),
            (Some(0), Some(41), Some(42))
        );
    }
}

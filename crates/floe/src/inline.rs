//! Types that live inline in a slot: anything that fits in one 8-byte word.

/// A type stored inline in a slot as one 64-bit word.
///
/// `from_word(to_word(x))` must give back `x`. The map only ever calls `from_word` on words
/// produced by `to_word` of the same type (or by [`Counter::add`]).
///
/// # Example: a user type
///
/// ```
/// use floe::{FlatMap, Inline, InlineKey};
///
/// #[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// struct RowId { table: u16, row: u32 }
///
/// impl Inline for RowId {
///     fn to_word(self) -> u64 { u64::from(self.table) << 32 | u64::from(self.row) }
///     fn from_word(word: u64) -> Self { RowId { table: (word >> 32) as u16, row: word as u32 } }
/// }
/// // Two RowIds are equal exactly when their words are: they can be keys.
/// impl InlineKey for RowId {}
///
/// let map = FlatMap::<RowId, u64>::with_capacity(1000);
/// map.insert(RowId { table: 3, row: 7 }, 42);
/// assert_eq!(map.get(&RowId { table: 3, row: 7 }), Some(42));
/// ```
pub trait Inline: Copy + Send + Sync + 'static {
    /// The word stored in the slot.
    fn to_word(self) -> u64;
    /// The value back from its word.
    fn from_word(word: u64) -> Self;
}

/// A type usable as a key: two keys are the same key exactly when their words are equal.
///
/// Every 64-bit word is a valid key; no value is reserved. Floats are deliberately not keys
/// (`0.0 == -0.0` but their words differ; `NaN != NaN` but the words are equal).
pub trait InlineKey: Inline {}

/// A value that `fetch_add` can add to (wrapping on overflow, like the atomics).
pub trait Counter: Inline {
    /// `self + delta`, wrapping.
    fn add(self, delta: Self) -> Self;
}

macro_rules! unsigned {
    ($($t:ty),*) => {$(
        impl Inline for $t {
            #[inline(always)]
            fn to_word(self) -> u64 { self as u64 }
            #[inline(always)]
            fn from_word(word: u64) -> Self { word as $t }
        }
        impl InlineKey for $t {}
        impl Counter for $t {
            #[inline(always)]
            fn add(self, delta: Self) -> Self { self.wrapping_add(delta) }
        }
    )*};
}

macro_rules! signed {
    ($($t:ty => $u:ty),*) => {$(
        impl Inline for $t {
            // Through the unsigned type of the same width so the word is zero-extended and
            // round-trips exactly.
            #[inline(always)]
            fn to_word(self) -> u64 { self as $u as u64 }
            #[inline(always)]
            fn from_word(word: u64) -> Self { word as $u as $t }
        }
        impl InlineKey for $t {}
        impl Counter for $t {
            #[inline(always)]
            fn add(self, delta: Self) -> Self { self.wrapping_add(delta) }
        }
    )*};
}

unsigned!(u8, u16, u32, u64, usize);
signed!(i8 => u8, i16 => u16, i32 => u32, i64 => u64, isize => usize);

const _: () = assert!(
    core::mem::size_of::<usize>() <= 8,
    "usize must fit in a word"
);

impl Inline for bool {
    #[inline(always)]
    fn to_word(self) -> u64 {
        u64::from(self)
    }
    #[inline(always)]
    fn from_word(word: u64) -> Self {
        word != 0
    }
}
impl InlineKey for bool {}

impl Inline for char {
    #[inline(always)]
    fn to_word(self) -> u64 {
        u64::from(u32::from(self))
    }
    #[inline(always)]
    fn from_word(word: u64) -> Self {
        // Words come from `to_word`, so this is always a valid scalar value.
        char::from_u32(word as u32).unwrap_or(char::REPLACEMENT_CHARACTER)
    }
}
impl InlineKey for char {}

impl Inline for f64 {
    #[inline(always)]
    fn to_word(self) -> u64 {
        self.to_bits()
    }
    #[inline(always)]
    fn from_word(word: u64) -> Self {
        f64::from_bits(word)
    }
}

impl Inline for f32 {
    #[inline(always)]
    fn to_word(self) -> u64 {
        u64::from(self.to_bits())
    }
    #[inline(always)]
    fn from_word(word: u64) -> Self {
        f32::from_bits(word as u32)
    }
}

impl Inline for () {
    #[inline(always)]
    fn to_word(self) -> u64 {
        0
    }
    #[inline(always)]
    fn from_word(_: u64) -> Self {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Inline + PartialEq + core::fmt::Debug>(values: &[T]) {
        for &v in values {
            assert_eq!(T::from_word(v.to_word()), v);
        }
    }

    #[test]
    fn every_builtin_round_trips() {
        round_trip(&[0u8, 1, u8::MAX]);
        round_trip(&[i8::MIN, -1, 0, i8::MAX]);
        round_trip(&[i32::MIN, -1, 0, i32::MAX]);
        round_trip(&[i64::MIN, -1, 0, i64::MAX]);
        round_trip(&[0u64, u64::MAX, 1 << 63]);
        round_trip(&[usize::MAX, 0]);
        round_trip(&[isize::MIN, -7]);
        round_trip(&[true, false]);
        round_trip(&['a', '\u{10FFFF}', '\0']);
        round_trip(&[0.0f64, -0.0, f64::INFINITY, 1.5e300]);
        round_trip(&[0.5f32, -3.25]);
        assert!(f64::from_word(f64::NAN.to_word()).is_nan());
    }

    #[test]
    fn signed_words_are_zero_extended() {
        // -1i8 must not collide with -1i64 semantics inside one typed map, but each type's
        // words must be canonical: the same value always gives the same word.
        assert_eq!((-1i8).to_word(), 0xFF);
        assert_eq!((-1i32).to_word(), 0xFFFF_FFFF);
    }

    #[test]
    fn counters_wrap() {
        assert_eq!(u8::MAX.add(1), 0);
        assert_eq!(i64::MAX.add(1), i64::MIN);
    }
}

//! What every entry point answers: a [`FloeStatus`], never a Rust panic, and the checks of the
//! caller's pointers and lengths that come before any work.

use core::{ffi::c_char, panic::AssertUnwindSafe};
use std::panic::catch_unwind;

use floe::Error;

/// What a call did, or why it did nothing.
///
/// Zero and the positive codes are answers: they say what state the key was in. The negative
/// codes are errors: the call changed nothing (a batch of requests checks its arguments before
/// it runs any). `floe_status_message` names each code in words.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloeStatus {
    /// Done: the key was present (get, put, remove, compare-exchange, an insert or fetch-add
    /// that replaced a value), or the key was inserted (insert-new), or the call succeeded.
    Ok = 0,
    /// The key was absent. A get, put, remove or compare-exchange did nothing; an insert or
    /// fetch-add inserted it.
    Absent = 1,
    /// An insert-new found the key present and changed nothing (the present value is reported).
    Present = 2,
    /// A compare-exchange found another value than the expected one and changed nothing (the
    /// present value is reported).
    Mismatch = 3,
    /// A value does not fit the caller's buffer: nothing was copied, and the length needed is
    /// reported.
    BufferTooSmall = 4,
    /// A handle, or a pointer the call needs, is NULL.
    NullArgument = -1,
    /// A batch got a different number of keys and answer slots.
    LengthMismatch = -2,
    /// A batch of zero requests.
    EmptyBatch = -3,
    /// A field of `FloeOptions` is out of range (an unknown backend or resize mode, a batch
    /// depth above 128).
    InvalidOption = -4,
    /// An argument is out of range: an unknown request op, a length no buffer can have.
    InvalidArgument = -5,
    /// The key's bin has no room and the map may not grow (`max_bins`).
    Full = -6,
    /// The size asked for cannot be addressed.
    CapacityOverflow = -7,
    /// The operating system refused the table's memory.
    AllocationFailed = -8,
    /// The backend asked for is not supported by this CPU.
    UnsupportedBackend = -9,
    /// Too many keys share this key's hash for any table to separate them.
    HashCollisions = -10,
    /// floe panicked (a bug): the call was stopped at the boundary. The map may be left in a
    /// state that makes later calls wait or fail; destroy it.
    Panic = -11,
    /// An error of floe's without a code of its own here (a newer floe).
    Other = -12,
}

impl From<Error> for FloeStatus {
    fn from(error: Error) -> Self {
        match error {
            Error::Full => FloeStatus::Full,
            Error::CapacityOverflow => FloeStatus::CapacityOverflow,
            Error::AllocationFailed { .. } => FloeStatus::AllocationFailed,
            Error::UnsupportedBackend(_) => FloeStatus::UnsupportedBackend,
            Error::HashCollisions => FloeStatus::HashCollisions,
            Error::InvalidConfig(_) => FloeStatus::InvalidOption,
            Error::LengthMismatch { .. } => FloeStatus::LengthMismatch,
            _ => FloeStatus::Other,
        }
    }
}

/// The result of an entry point's body: `Err` for the early returns of `?`.
pub(crate) type Answer = Result<FloeStatus, FloeStatus>;

/// Run an entry point's body, turning a panic into [`FloeStatus::Panic`]: unwinding out of an
/// `extern "C"` function would abort the caller's process.
#[inline(always)]
pub(crate) fn guarded(body: impl FnOnce() -> Answer) -> FloeStatus {
    // `AssertUnwindSafe`: after a panic the caller is told the map may be broken (the
    // `Panic` docs) and is not handed anything the panic interrupted.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(status) | Err(status)) => status,
        Err(_) => FloeStatus::Panic,
    }
}

/// The object behind a handle.
///
/// # Safety
/// `handle` is NULL or points to a live object of type `T` made by this crate.
#[inline(always)]
pub(crate) unsafe fn handle<'a, T>(handle: *const T) -> Result<&'a T, FloeStatus> {
    // SAFETY: NULL or live (the caller's contract).
    unsafe { handle.as_ref() }.ok_or(FloeStatus::NullArgument)
}

/// Store `value` through an optional out-parameter (NULL: the caller does not want it).
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
#[inline(always)]
pub(crate) unsafe fn report<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: valid for a write (the caller's contract). `write`, not an assignment: the
        // caller's memory may hold anything, which must not be read or dropped.
        unsafe { out.write(value) };
    }
}

/// The caller's array of `len` items.
///
/// # Safety
/// `items` is NULL, or valid for reads of `len` items of `T` that nothing writes during the
/// call. (A NULL `items` with a zero `len` is the empty array.)
#[inline(always)]
pub(crate) unsafe fn array<'a, T>(items: *const T, len: usize) -> Result<&'a [T], FloeStatus> {
    if len == 0 {
        return Ok(&[]);
    }
    if items.is_null() {
        return Err(FloeStatus::NullArgument);
    }
    if len > isize::MAX as usize / size_of::<T>().max(1) {
        return Err(FloeStatus::InvalidArgument);
    }
    // SAFETY: non-NULL, valid for `len` reads of `T` that nothing writes meanwhile (the
    // caller's contract), and `len` items span at most `isize::MAX` bytes (checked above).
    Ok(unsafe { core::slice::from_raw_parts(items, len) })
}

/// The checks every batch makes, in this order: the handle, an empty batch, the lengths.
///
/// # Safety
/// As [`handle`].
pub(crate) unsafe fn batch_of<'a, T>(
    map: *const T,
    requests: usize,
    answers: usize,
) -> Result<&'a T, FloeStatus> {
    // SAFETY: as this function's contract.
    let map = unsafe { handle(map) }?;
    if requests == 0 {
        return Err(FloeStatus::EmptyBatch);
    }
    if requests != answers {
        return Err(FloeStatus::LengthMismatch);
    }
    Ok(map)
}

/// A status in words, for messages: a static, NUL-terminated string that is never freed. An
/// unknown code gets "unknown floe status".
#[no_mangle]
pub extern "C" fn floe_status_message(status: i32) -> *const c_char {
    // Matched as an integer: a code from C need not be one of the enum's. NUL-terminated byte
    // strings rather than `c""` literals, which the cbindgen of Debian 12 cannot parse.
    let message: &[u8] = match status {
        0 => b"ok\0",
        1 => b"the key was absent\0",
        2 => b"the key was present\0",
        3 => b"the key's value was not the expected one\0",
        4 => b"the value does not fit the buffer\0",
        -1 => b"a handle or a required pointer is NULL\0",
        -2 => b"the batch has a different number of keys and answer slots\0",
        -3 => b"the batch has no requests\0",
        -4 => b"an option is out of range\0",
        -5 => b"an argument is out of range\0",
        -6 => b"the map is full for this key and may not grow (max_bins)\0",
        -7 => b"the requested capacity is too large for one table\0",
        -8 => b"the operating system refused the table's memory\0",
        -9 => b"this CPU does not support the backend asked for\0",
        -10 => b"too many keys share this key's hash\0",
        -11 => b"floe panicked (a bug); destroy the map\0",
        -12 => b"an error of floe's without a code of its own\0",
        _ => b"unknown floe status\0",
    };
    message.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use core::ffi::CStr;

    use super::*;

    #[test]
    fn a_panic_in_a_body_is_reported_not_unwound() {
        let status = guarded(|| panic!("a bug"));
        assert_eq!(status, FloeStatus::Panic);
        assert_eq!(guarded(|| Err(FloeStatus::Full)), FloeStatus::Full);
        assert_eq!(guarded(|| Ok(FloeStatus::Absent)), FloeStatus::Absent);
    }

    #[test]
    fn every_status_has_its_own_message_and_unknown_codes_one_too() {
        let message = |code| {
            // SAFETY: `floe_status_message` returns static NUL-terminated strings.
            unsafe { CStr::from_ptr(floe_status_message(code)) }
                .to_str()
                .unwrap()
        };
        let unknown = message(1000);
        assert_eq!(unknown, "unknown floe status");
        let known: Vec<_> = (-12..=4).map(message).collect();
        assert!(known.iter().all(|m| *m != unknown));
        let mut distinct = known.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), known.len());
        assert_eq!(message(FloeStatus::Mismatch as i32), known[15]);
    }

    #[test]
    fn arrays_refuse_null_but_take_the_empty_one() {
        // SAFETY: NULL pointers with and without a length; the last is a live array.
        unsafe {
            assert_eq!(
                array::<u64>(core::ptr::null(), 3),
                Err(FloeStatus::NullArgument)
            );
            assert_eq!(array::<u64>(core::ptr::null(), 0), Ok(&[][..]));
            let items = [1u64, 2];
            assert_eq!(array(items.as_ptr(), 2), Ok(&items[..]));
            assert_eq!(
                array(items.as_ptr(), usize::MAX),
                Err(FloeStatus::InvalidArgument)
            );
        }
    }
}

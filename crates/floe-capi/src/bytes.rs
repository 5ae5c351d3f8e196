//! `FloeBytesMap`: floe's any-key `Map` with byte-string keys and values behind an opaque
//! handle. Values are handed to the caller by copy (`floe_bytes_get`) or lent to a callback
//! for as long as it runs (the batches, iteration): the entries live until no reader can hold
//! them, and a callback's reader is the call it runs in.

use core::ffi::c_void;

use floe::{hash::Mix64, Compute, Insert, Map, MapRequest, MapResponse, Operation};

use crate::{
    flat::FloeOp,
    handle::{free, make, report_len},
    options::FloeOptions,
    status::{array, guarded, handle, Answer, FloeStatus},
};

/// The map's keys and values: owned byte strings, looked up by `&[u8]`.
type Bytes = Box<[u8]>;

/// A concurrent map from byte strings to byte strings (floe's `Map`). Opaque: made by
/// `floe_bytes_new`, destroyed by `floe_bytes_free`. Every function but `floe_bytes_free` may
/// be called on the same map from any number of threads at once.
pub struct FloeBytesMap {
    map: Map<Bytes, Bytes, Mix64>,
    batch_depth: usize,
}

/// A byte string the caller lends: `len` bytes at `data` (which may be NULL when `len` is 0).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FloeBytes {
    /// The first byte.
    pub data: *const u8,
    /// The number of bytes.
    pub len: usize,
}

/// One request of `floe_bytes_run`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FloeBytesRequest {
    /// A `FloeOp` (`FLOE_OP_FETCH_ADD` is for the u64 map only).
    pub op: u32,
    /// The key.
    pub key: FloeBytes,
    /// The value to insert (new or replacing) or put; ignored by get and remove.
    pub value: FloeBytes,
}

/// Called by `floe_bytes_get_many` and `floe_bytes_run` once per request, in order: the
/// caller's `context`, the request's index, its status (as the single-key function's), and
/// the value that function reports (got, present, replaced or removed), or NULL and 0. The
/// value is lent for the duration of the call only: copy what you keep.
pub type FloeBytesAnswer = Option<
    unsafe extern "C" fn(
        context: *mut c_void,
        index: usize,
        status: FloeStatus,
        value: *const u8,
        value_len: usize,
    ),
>;

/// Called by `floe_bytes_for_each` with the caller's `context`, a key and its value (lent for
/// the duration of the call); returns 0 to go on, anything else to stop.
pub type FloeBytesVisit = Option<
    unsafe extern "C" fn(
        context: *mut c_void,
        key: *const u8,
        key_len: usize,
        value: *const u8,
        value_len: usize,
    ) -> i32,
>;

impl FloeBytes {
    /// The bytes lent.
    ///
    /// # Safety
    /// `data` is NULL or valid for reads of `len` bytes that nothing writes during the call.
    unsafe fn get<'a>(self) -> Result<&'a [u8], FloeStatus> {
        // SAFETY: the same contract.
        unsafe { array(self.data, self.len) }
    }
}

/// The status of an insert-if-absent, and the value it reports.
fn inserted(outcome: Insert<&Bytes>) -> (FloeStatus, Option<&Bytes>) {
    match outcome {
        Insert::Inserted => (FloeStatus::Ok, None),
        Insert::Present(value) => (FloeStatus::Present, Some(value)),
        // Only shadow inserts hold a key hidden, and this ABI makes none.
        Insert::Shadowed => (FloeStatus::Present, None),
    }
}

/// The status of a call that found a value or not.
fn found(value: Option<&Bytes>) -> (FloeStatus, Option<&Bytes>) {
    (
        if value.is_some() {
            FloeStatus::Ok
        } else {
            FloeStatus::Absent
        },
        value,
    )
}

/// Where the caller is lent `bytes`: their address, or for an empty string the address of a
/// static byte (an empty `Box<[u8]>` has a dangling address, which C must not even compare).
fn lent(bytes: &[u8]) -> *const u8 {
    static NOTHING: u8 = 0;
    if bytes.is_empty() {
        &NOTHING
    } else {
        bytes.as_ptr()
    }
}

/// Hand one answer to the caller's callback.
///
/// # Safety
/// `answer` is safe to call with `context`.
unsafe fn give(
    answer: unsafe extern "C" fn(*mut c_void, usize, FloeStatus, *const u8, usize),
    context: *mut c_void,
    index: usize,
    (status, value): (FloeStatus, Option<&Bytes>),
) {
    let (data, len) = value.map_or((core::ptr::null(), 0), |v| (lent(v), v.len()));
    // SAFETY: the caller's contract; `data` stays valid for the call (the handle's guard).
    unsafe { answer(context, index, status, data, len) };
}

/// Make a map of byte strings, as `floe_map_new`.
///
/// # Safety
/// As `floe_map_new`.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_new(
    options: *const FloeOptions,
    map: *mut *mut FloeBytesMap,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        make(options, map, |options| {
            let map = options.configure(Map::<Bytes, Bytes>::builder())?.build()?;
            Ok(FloeBytesMap {
                map,
                batch_depth: options.batch_depth(),
            })
        })
    }
}

/// Destroy a map of byte strings and every key and value in it, as `floe_map_free` (NULL does
/// nothing; a second free of the same non-NULL handle is undefined behaviour).
///
/// # Safety
/// As `floe_map_free`.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_free(map: *mut FloeBytesMap) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { free(map) }
}

/// Copy the value of the key (`key_len` bytes at `key`) into `value`, a buffer of
/// `*value_len` bytes, and set `*value_len` to the value's length: `FLOE_STATUS_OK`;
/// `FLOE_STATUS_BUFFER_TOO_SMALL` with the length needed in `*value_len` and nothing copied
/// (pass `*value_len == 0` and a NULL `value` to ask for the length); or
/// `FLOE_STATUS_ABSENT` with `*value_len` set to 0. `value_len` is required.
///
/// # Safety
/// `map` is NULL or a live handle; `key` is NULL or valid for `key_len` reads; `value_len` is
/// NULL or valid for a read and a write; `value` is NULL or valid for `*value_len` writes.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_get(
    map: *const FloeBytesMap,
    key: *const u8,
    key_len: usize,
    value: *mut u8,
    value_len: *mut usize,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: NULL or live (the caller's contract).
        let map = unsafe { handle(map) }?;
        // SAFETY: NULL or valid for `key_len` reads (the caller's contract).
        let key = unsafe { array(key, key_len) }?;
        if value_len.is_null() {
            return Err(FloeStatus::NullArgument);
        }
        // SAFETY: valid for a read (checked non-NULL; the caller's contract).
        let room = unsafe { value_len.read() };
        let m = map.map.pin();
        let Some(found) = m.get(key) else {
            // SAFETY: valid for a write, as above.
            unsafe { value_len.write(0) };
            return Ok(FloeStatus::Absent);
        };
        let status = if found.len() > room {
            FloeStatus::BufferTooSmall
        } else if found.is_empty() {
            FloeStatus::Ok
        } else if value.is_null() {
            return Err(FloeStatus::NullArgument);
        } else {
            // SAFETY: `value` is valid for `room >= found.len()` writes and does not overlap
            // the map's entry (the caller's contract: it is the caller's buffer).
            unsafe { core::ptr::copy_nonoverlapping(found.as_ptr(), value, found.len()) };
            FloeStatus::Ok
        };
        // SAFETY: as above.
        unsafe { value_len.write(found.len()) };
        Ok(status)
    })
}

/// Insert the key and value (copied) only if the key is absent: `FLOE_STATUS_OK`, or
/// `FLOE_STATUS_PRESENT` and nothing changed. Errors as `floe_map_insert_new`.
///
/// # Safety
/// `map` is NULL or a live handle; `key` and `value` are NULL or valid for their lengths'
/// reads.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_insert_new(
    map: *const FloeBytesMap,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        with_pair(map, key, key_len, value, value_len, |m, key, value| {
            Ok(inserted(m.pin().try_insert_new(key, value)?).0)
        })
    }
}

/// Store the key and value (copied), inserting or replacing: `FLOE_STATUS_OK` if a value was
/// replaced, `FLOE_STATUS_ABSENT` if the key was inserted. Errors as `floe_map_insert_new`.
///
/// # Safety
/// As `floe_bytes_insert_new`.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_insert(
    map: *const FloeBytesMap,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        with_pair(map, key, key_len, value, value_len, |m, key, value| {
            Ok(found(m.pin().try_insert(key, value)?).0)
        })
    }
}

/// Replace the value of the key (copied) only if it is present: `FLOE_STATUS_OK`, or
/// `FLOE_STATUS_ABSENT` and nothing written.
///
/// # Safety
/// As `floe_bytes_insert_new`.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_put(
    map: *const FloeBytesMap,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        with_pair(map, key, key_len, value, value_len, |m, key, value| {
            Ok(found(m.pin().put(key, value)).0)
        })
    }
}

/// The handle and an owned copy of a key and a value, for the writes.
///
/// # Safety
/// As `floe_bytes_insert_new`.
unsafe fn with_pair(
    map: *const FloeBytesMap,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    write: impl FnOnce(&Map<Bytes, Bytes, Mix64>, Bytes, Bytes) -> Answer,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: NULL or live (the caller's contract).
        let map = unsafe { handle(map) }?;
        // SAFETY: NULL or valid for their lengths (the caller's contract).
        let (key, value) = unsafe { (array(key, key_len)?, array(value, value_len)?) };
        write(&map.map, key.into(), value.into())
    })
}

/// Set the value of the key to `desired` if it is `expected` (byte for byte), atomically:
/// `FLOE_STATUS_OK`, `FLOE_STATUS_MISMATCH`, or `FLOE_STATUS_ABSENT`; nothing changes unless
/// `FLOE_STATUS_OK`.
///
/// # Safety
/// `map` is NULL or a live handle; `key`, `expected` and `desired` are NULL or valid for their
/// lengths' reads.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_compare_exchange(
    map: *const FloeBytesMap,
    key: FloeBytes,
    expected: FloeBytes,
    desired: FloeBytes,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: NULL or live (the caller's contract).
        let map = unsafe { handle(map) }?;
        // SAFETY: NULL or valid for their lengths (the caller's contract).
        let (key, expected, desired) = unsafe { (key.get()?, expected.get()?, desired.get()?) };
        let m = map.map.pin();
        let decided = m.try_compute(key.into(), |present| match present {
            None => Operation::Abort(FloeStatus::Absent),
            Some(value) if **value == *expected => Operation::Insert(desired.into()),
            Some(_) => Operation::Abort(FloeStatus::Mismatch),
        })?;
        Ok(match decided {
            Compute::Aborted(status) => status,
            _ => FloeStatus::Ok,
        })
    })
}

/// Remove the key: `FLOE_STATUS_OK`, or `FLOE_STATUS_ABSENT`.
///
/// # Safety
/// `map` is NULL or a live handle; `key` is NULL or valid for `key_len` reads.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_remove(
    map: *const FloeBytesMap,
    key: *const u8,
    key_len: usize,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: NULL or live (the caller's contract).
        let map = unsafe { handle(map) }?;
        // SAFETY: NULL or valid for `key_len` reads (the caller's contract).
        let key = unsafe { array(key, key_len) }?;
        Ok(found(map.map.pin().remove(key)).0)
    })
}

/// The number of keys into `*len` (required), as `floe_map_len`.
///
/// # Safety
/// As `floe_map_len`.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_len(map: *const FloeBytesMap, len: *mut usize) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { report_len(map, len, |m| m.map.len()) }
}

/// Keys a batched get looks up at a time (the arrays live on the stack).
const CHUNK: usize = 256;

/// Gets of `keys_len` keys, in order, the bins and then the entries of the next keys
/// prefetched; `answer(context, i, status, value, value_len)` is called for each key in order,
/// with `FLOE_STATUS_OK` and the value (never NULL, also when empty), or `FLOE_STATUS_ABSENT`
/// and NULL.
///
/// Errors, checked before anything is read: `FLOE_STATUS_NULL_ARGUMENT` (`map`),
/// `FLOE_STATUS_EMPTY_BATCH`, `FLOE_STATUS_NULL_ARGUMENT` (`keys`, a key's data, `answer`).
///
/// # Safety
/// `map` is NULL or a live handle; `keys` is NULL or valid for `keys_len` reads, each key's
/// data NULL or valid for its length; `answer` is NULL or safe to call with `context`.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_get_many(
    map: *const FloeBytesMap,
    keys: *const FloeBytes,
    keys_len: usize,
    answer: FloeBytesAnswer,
    context: *mut c_void,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (map, keys, answer) = unsafe { bytes_batch(map, keys, keys_len, answer) }?;
        // Every key's bytes, checked before any is read.
        // SAFETY: NULL or valid for their lengths (the caller's contract).
        let lent = keys.iter().map(|key| unsafe { key.get() });
        let keys: Vec<&[u8]> = lent.collect::<Result<_, _>>()?;
        let m = map.map.pin();
        let mut values = [None; CHUNK];
        for (c, keys) in keys.chunks(CHUNK).enumerate() {
            let values = &mut values[..keys.len()];
            m.get_many(keys, values)?;
            for (i, value) in values.iter().enumerate() {
                // SAFETY: `answer` is safe to call with `context` (the caller's contract).
                unsafe { give(answer, context, c * CHUNK + i, found(*value)) };
            }
        }
        Ok(FloeStatus::Ok)
    })
}

/// Run `requests_len` requests in order, the bins and entries of the next ones prefetched
/// (`FloeOptions::batch_depth`): exactly the answers of calling the single-key functions one
/// by one in this order on this thread, handed to `answer` in order (an insert-new that finds the
/// key present reports the present value; an insert, put or remove the value it replaced or
/// removed). Answers `FLOE_STATUS_OK` once all have run.
///
/// Errors, checked before any request runs: `FLOE_STATUS_NULL_ARGUMENT` (`map`),
/// `FLOE_STATUS_EMPTY_BATCH`, `FLOE_STATUS_NULL_ARGUMENT` (`requests`, a key's or value's
/// data, `answer`), `FLOE_STATUS_INVALID_ARGUMENT` (an unknown op, or `FLOE_OP_FETCH_ADD`).
///
/// # Safety
/// As `floe_bytes_get_many`, for the requests' keys and values.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_run(
    map: *const FloeBytesMap,
    requests: *const FloeBytesRequest,
    requests_len: usize,
    answer: FloeBytesAnswer,
    context: *mut c_void,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: the caller's contract.
        let (map, requests, answer) = unsafe { bytes_batch(map, requests, requests_len, answer) }?;
        // Every request checked before any runs.
        let mut lent = Vec::with_capacity(requests.len());
        for request in requests {
            let op = match FloeOp::of(request.op) {
                None | Some(FloeOp::FetchAdd) => return Err(FloeStatus::InvalidArgument),
                Some(op) => op,
            };
            // SAFETY: NULL or valid for their lengths (the caller's contract).
            let (key, value) = unsafe { (request.key.get()?, request.value.get()?) };
            lent.push((op, key, value));
        }
        let m = map.map.pin();
        let batch = m.batch().depth(map.batch_depth);
        let requests = lent.iter().map(|&(op, key, value)| match op {
            FloeOp::Get => MapRequest::Get(key),
            FloeOp::InsertNew => MapRequest::InsertNew(key.into(), value.into()),
            FloeOp::Insert => MapRequest::Insert(key.into(), value.into()),
            FloeOp::Put => MapRequest::Put(key.into(), value.into()),
            FloeOp::Remove => MapRequest::Remove(key),
            FloeOp::FetchAdd => unreachable!("refused above"),
        });
        batch.run_each(requests, |i, response| {
            let outcome = match response {
                MapResponse::Get(value) | MapResponse::Put(value) | MapResponse::Remove(value) => {
                    found(value)
                }
                MapResponse::Insert(Ok(value)) => found(value),
                MapResponse::InsertNew(Ok(outcome)) => inserted(outcome),
                MapResponse::InsertNew(Err(error)) | MapResponse::Insert(Err(error)) => {
                    (error.into(), None)
                }
            };
            // SAFETY: `answer` is safe to call with `context` (the caller's contract).
            unsafe { give(answer, context, i, outcome) };
        });
        Ok(FloeStatus::Ok)
    })
}

/// The checks both batches make, in this order: the handle, an empty batch, the array, the
/// callback.
///
/// # Safety
/// `map` is NULL or a live handle; `items` is NULL or valid for `len` reads.
#[allow(clippy::type_complexity)]
unsafe fn bytes_batch<'a, T>(
    map: *const FloeBytesMap,
    items: *const T,
    len: usize,
    answer: FloeBytesAnswer,
) -> Result<
    (
        &'a FloeBytesMap,
        &'a [T],
        unsafe extern "C" fn(*mut c_void, usize, FloeStatus, *const u8, usize),
    ),
    FloeStatus,
> {
    // SAFETY: NULL or live (the caller's contract).
    let map = unsafe { handle(map) }?;
    if len == 0 {
        return Err(FloeStatus::EmptyBatch);
    }
    // SAFETY: NULL or valid for `len` reads (the caller's contract).
    let items = unsafe { array(items, len) }?;
    Ok((map, items, answer.ok_or(FloeStatus::NullArgument)?))
}

/// Call `visit(context, key, key_len, value, value_len)` for the pairs of the map until it
/// returns nonzero; weakly consistent, as `floe_map_for_each`. The walk holds back the freeing
/// of entries removed meanwhile (by any thread) until it ends.
///
/// # Safety
/// `map` is NULL or a live handle; `visit` is NULL or a function safe to call with `context`.
#[no_mangle]
pub unsafe extern "C" fn floe_bytes_for_each(
    map: *const FloeBytesMap,
    visit: FloeBytesVisit,
    context: *mut c_void,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: NULL or live (the caller's contract).
        let map = unsafe { handle(map) }?;
        let visit = visit.ok_or(FloeStatus::NullArgument)?;
        let m = map.map.pin();
        for (key, value) in m.iter() {
            // SAFETY: `visit` is safe to call with `context` (the caller's contract); the
            // pointers stay valid for the call (the handle's guard).
            let stop = unsafe { visit(context, lent(key), key.len(), lent(value), value.len()) };
            if stop != 0 {
                break;
            }
        }
        Ok(FloeStatus::Ok)
    })
}

#[cfg(test)]
mod tests {
    use core::ptr::{null, null_mut};

    use super::*;

    struct Made(*mut FloeBytesMap);

    impl Made {
        fn new() -> Made {
            let mut map = null_mut();
            // SAFETY: NULL options (the defaults), a valid out-pointer.
            assert_eq!(unsafe { floe_bytes_new(null(), &mut map) }, FloeStatus::Ok);
            Made(map)
        }
    }

    impl Drop for Made {
        fn drop(&mut self) {
            // SAFETY: made by `floe_bytes_new`, freed once.
            assert_eq!(unsafe { floe_bytes_free(self.0) }, FloeStatus::Ok);
        }
    }

    fn lend(bytes: &[u8]) -> FloeBytes {
        FloeBytes {
            data: bytes.as_ptr(),
            len: bytes.len(),
        }
    }

    /// `floe_bytes_get` into a buffer of `room` bytes.
    fn get(map: &Made, key: &[u8], room: usize) -> (FloeStatus, Vec<u8>, usize) {
        let mut buffer = vec![0u8; room];
        let mut len = room;
        // SAFETY: a live map, a key and a buffer valid for their lengths.
        let status = unsafe {
            floe_bytes_get(
                map.0,
                key.as_ptr(),
                key.len(),
                buffer.as_mut_ptr(),
                &mut len,
            )
        };
        (status, buffer, len)
    }

    #[test]
    fn every_single_key_call_answers_as_the_rust_api() {
        let made = Made::new();
        let m = made.0;
        // SAFETY: a live map, byte strings valid for their lengths.
        unsafe {
            assert_eq!(
                floe_bytes_insert_new(m, b"k".as_ptr(), 1, b"one".as_ptr(), 3),
                FloeStatus::Ok
            );
            assert_eq!(
                floe_bytes_insert_new(m, b"k".as_ptr(), 1, b"two".as_ptr(), 3),
                FloeStatus::Present
            );
            assert_eq!(
                get(&made, b"k", 8),
                (FloeStatus::Ok, b"one\0\0\0\0\0".to_vec(), 3)
            );
            assert_eq!(
                get(&made, b"k", 2),
                (FloeStatus::BufferTooSmall, vec![0, 0], 3)
            );
            assert_eq!(get(&made, b"nope", 2).0, FloeStatus::Absent);
            // A length query: NULL buffer, no room.
            let mut len = 0;
            assert_eq!(
                floe_bytes_get(m, b"k".as_ptr(), 1, null_mut(), &mut len),
                FloeStatus::BufferTooSmall
            );
            assert_eq!(len, 3);
            assert_eq!(
                floe_bytes_insert(m, b"k".as_ptr(), 1, b"three".as_ptr(), 5),
                FloeStatus::Ok
            );
            assert_eq!(
                floe_bytes_insert(m, b"j".as_ptr(), 1, null(), 0),
                FloeStatus::Absent
            );
            assert_eq!(get(&made, b"j", 0), (FloeStatus::Ok, vec![], 0));
            assert_eq!(
                floe_bytes_put(m, b"x".as_ptr(), 1, b"1".as_ptr(), 1),
                FloeStatus::Absent
            );
            assert_eq!(
                floe_bytes_put(m, b"j".as_ptr(), 1, b"jj".as_ptr(), 2),
                FloeStatus::Ok
            );
            let cas = |expected: &[u8], desired: &[u8]| {
                floe_bytes_compare_exchange(m, lend(b"k"), lend(expected), lend(desired))
            };
            assert_eq!(cas(b"one", b"four"), FloeStatus::Mismatch);
            assert_eq!(cas(b"three", b"four"), FloeStatus::Ok);
            assert_eq!(get(&made, b"k", 8).2, 4);
            assert_eq!(
                floe_bytes_compare_exchange(m, lend(b"zz"), lend(b""), lend(b"")),
                FloeStatus::Absent
            );
            // The empty key is a key.
            assert_eq!(
                floe_bytes_insert_new(m, null(), 0, b"e".as_ptr(), 1),
                FloeStatus::Ok
            );
            let mut len = 0;
            assert_eq!(floe_bytes_len(m, &mut len), FloeStatus::Ok);
            assert_eq!(len, 3);
            assert_eq!(floe_bytes_remove(m, b"k".as_ptr(), 1), FloeStatus::Ok);
            assert_eq!(floe_bytes_remove(m, b"k".as_ptr(), 1), FloeStatus::Absent);
        }
    }

    #[test]
    fn null_handles_and_pointers_are_refused() {
        let made = Made::new();
        let none: *const FloeBytesMap = null();
        let mut len = 0;
        // SAFETY: NULL handles or pointers with nonzero lengths, which are refused unread.
        unsafe {
            assert_eq!(floe_bytes_new(null(), null_mut()), FloeStatus::NullArgument);
            assert_eq!(floe_bytes_free(null_mut()), FloeStatus::Ok);
            assert_eq!(
                floe_bytes_get(none, b"k".as_ptr(), 1, null_mut(), &mut len),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_bytes_get(made.0, null(), 1, null_mut(), &mut len),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_bytes_get(made.0, b"k".as_ptr(), 1, null_mut(), null_mut()),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_bytes_insert_new(made.0, b"k".as_ptr(), 1, null(), 3),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_bytes_insert(none, null(), 0, null(), 0),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_bytes_put(made.0, null(), 2, null(), 0),
                FloeStatus::NullArgument
            );
            assert_eq!(floe_bytes_remove(none, null(), 0), FloeStatus::NullArgument);
            assert_eq!(
                floe_bytes_compare_exchange(
                    made.0,
                    lend(b"k"),
                    FloeBytes {
                        data: null(),
                        len: 1
                    },
                    lend(b"")
                ),
                FloeStatus::NullArgument
            );
            assert_eq!(floe_bytes_len(made.0, null_mut()), FloeStatus::NullArgument);
            assert_eq!(
                floe_bytes_for_each(made.0, None, null_mut()),
                FloeStatus::NullArgument
            );
        }
        // A value stored into a buffer given as NULL with room claimed for it.
        // SAFETY: a live map, valid byte strings.
        unsafe {
            floe_bytes_insert_new(made.0, b"k".as_ptr(), 1, b"v".as_ptr(), 1);
            let mut room = 4;
            assert_eq!(
                floe_bytes_get(made.0, b"k".as_ptr(), 1, null_mut(), &mut room),
                FloeStatus::NullArgument
            );
        }
    }

    /// Collects `(index, status, value)` answers.
    unsafe extern "C" fn collect(
        context: *mut c_void,
        index: usize,
        status: FloeStatus,
        value: *const u8,
        value_len: usize,
    ) {
        // SAFETY: the tests pass a `Vec` of answers as the context.
        let answers = unsafe { &mut *context.cast::<Vec<(usize, FloeStatus, Option<Vec<u8>>)>>() };
        let value = (!value.is_null()).then(|| {
            // SAFETY: `value` is valid for `value_len` reads during the call.
            unsafe { core::slice::from_raw_parts(value, value_len) }.to_vec()
        });
        answers.push((index, status, value));
    }

    #[test]
    fn batches_answer_in_order_and_refuse_bad_input() {
        let made = Made::new();
        let keys: Vec<Vec<u8>> = (0..600u32)
            .map(|i| format!("key{i}").into_bytes())
            .collect();
        let inserts: Vec<FloeBytesRequest> = keys
            .iter()
            .map(|key| FloeBytesRequest {
                op: FloeOp::InsertNew as u32,
                key: lend(key),
                value: lend(&key[3..]),
            })
            .collect();
        let mut answers = Vec::new();
        let context = core::ptr::addr_of_mut!(answers).cast();
        // SAFETY: a live map, requests valid for their lengths, a callback for the context.
        unsafe {
            assert_eq!(
                floe_bytes_run(made.0, inserts.as_ptr(), 0, Some(collect), context),
                FloeStatus::EmptyBatch
            );
            assert_eq!(
                floe_bytes_run(made.0, inserts.as_ptr(), 3, None, context),
                FloeStatus::NullArgument
            );
            let fetch_add = [FloeBytesRequest {
                op: FloeOp::FetchAdd as u32,
                ..inserts[0]
            }];
            assert_eq!(
                floe_bytes_run(made.0, fetch_add.as_ptr(), 1, Some(collect), context),
                FloeStatus::InvalidArgument
            );
            let bad_key = [
                inserts[0],
                FloeBytesRequest {
                    key: FloeBytes {
                        data: null(),
                        len: 2,
                    },
                    ..inserts[1]
                },
            ];
            assert_eq!(
                floe_bytes_run(made.0, bad_key.as_ptr(), 2, Some(collect), context),
                FloeStatus::NullArgument
            );
            assert!(
                answers.is_empty(),
                "nothing runs before every request is checked"
            );
            assert_eq!(
                floe_bytes_run(
                    made.0,
                    inserts.as_ptr(),
                    inserts.len(),
                    Some(collect),
                    context
                ),
                FloeStatus::Ok
            );
        }
        assert!(answers
            .iter()
            .enumerate()
            .all(|(i, a)| *a == (i, FloeStatus::Ok, None)));
        answers.clear();
        let mixed = [
            FloeBytesRequest {
                op: FloeOp::Get as u32,
                key: lend(b"key7"),
                value: lend(b""),
            },
            FloeBytesRequest {
                op: FloeOp::InsertNew as u32,
                key: lend(b"key7"),
                value: lend(b"x"),
            },
            FloeBytesRequest {
                op: FloeOp::Insert as u32,
                key: lend(b"key7"),
                value: lend(b"y"),
            },
            FloeBytesRequest {
                op: FloeOp::Put as u32,
                key: lend(b"new"),
                value: lend(b"z"),
            },
            FloeBytesRequest {
                op: FloeOp::Remove as u32,
                key: lend(b"key7"),
                value: lend(b""),
            },
            FloeBytesRequest {
                op: FloeOp::Get as u32,
                key: lend(b"key7"),
                value: lend(b""),
            },
        ];
        // SAFETY: as above.
        let status =
            unsafe { floe_bytes_run(made.0, mixed.as_ptr(), mixed.len(), Some(collect), context) };
        assert_eq!(status, FloeStatus::Ok);
        let seven = Some(b"7".to_vec());
        assert_eq!(
            answers,
            [
                (0, FloeStatus::Ok, seven.clone()),
                (1, FloeStatus::Present, seven.clone()),
                (2, FloeStatus::Ok, seven),
                (3, FloeStatus::Absent, None),
                (4, FloeStatus::Ok, Some(b"y".to_vec())),
                (5, FloeStatus::Absent, None),
            ]
        );
        answers.clear();
        let lookups: Vec<FloeBytes> = keys.iter().map(|k| lend(k)).collect();
        // SAFETY: as above.
        let status = unsafe {
            floe_bytes_get_many(
                made.0,
                lookups.as_ptr(),
                lookups.len(),
                Some(collect),
                context,
            )
        };
        assert_eq!(status, FloeStatus::Ok);
        assert_eq!(answers.len(), keys.len());
        for (i, (index, status, value)) in answers.iter().enumerate() {
            assert_eq!(*index, i);
            if i == 7 {
                assert_eq!((*status, value), (FloeStatus::Absent, &None));
            } else {
                assert_eq!(
                    (*status, value.as_deref()),
                    (FloeStatus::Ok, Some(&keys[i][3..]))
                );
            }
        }
        // SAFETY: as above; an empty batch.
        let status = unsafe { floe_bytes_get_many(made.0, null(), 0, Some(collect), context) };
        assert_eq!(status, FloeStatus::EmptyBatch);
    }

    #[test]
    fn iteration_lends_every_pair() {
        let made = Made::new();
        for i in 0..50u8 {
            // SAFETY: a live map, one-byte strings.
            unsafe { floe_bytes_insert_new(made.0, &i, 1, &i, 1) };
        }
        unsafe extern "C" fn tally(
            context: *mut c_void,
            key: *const u8,
            key_len: usize,
            value: *const u8,
            value_len: usize,
        ) -> i32 {
            // SAFETY: the test passes a `u64` as the context; key and value are one byte each.
            unsafe {
                assert_eq!((key_len, value_len), (1, 1));
                assert_eq!(*key, *value);
                *context.cast::<u64>() += u64::from(*key);
            }
            0
        }
        let mut sum = 0u64;
        // SAFETY: a live map and a context of the type `tally` reads.
        let status = unsafe {
            floe_bytes_for_each(made.0, Some(tally), core::ptr::addr_of_mut!(sum).cast())
        };
        assert_eq!(status, FloeStatus::Ok);
        assert_eq!(sum, (0..50).sum());
    }
}

//! `FloeMap`: `FlatMap<u64, u64>` behind an opaque handle, one entry point per operation, the
//! batches and iteration with a callback.

use core::ffi::c_void;

use floe::{hash::Mix64, CompareExchangeError, FlatMap, Insert, Request, Response};

use crate::{
    handle::{free, make, report_len},
    options::FloeOptions,
    status::{array, batch_of, guarded, handle, report, FloeStatus},
};

/// A concurrent map from 64-bit keys to 64-bit values (floe's `FlatMap<u64, u64>`). Opaque:
/// made by `floe_map_new`, destroyed by `floe_map_free`, used through pointers in between.
/// Every function but `floe_map_free` may be called on the same map from any number of
/// threads at once.
pub struct FloeMap {
    map: FlatMap<u64, u64, Mix64>,
    batch_depth: usize,
}

/// One request of `floe_map_run`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FloeRequest {
    /// A `FloeOp`.
    pub op: u32,
    /// The key.
    pub key: u64,
    /// The value to insert (new or replacing) or put, or the amount to add; ignored by get and remove.
    pub value: u64,
}

/// The answer to one request of `floe_map_run`: the status its single-key function returns,
/// and the value that function reports (0 where it reports none).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FloeResponse {
    /// As the single-key function's.
    pub status: FloeStatus,
    /// The value got, present, replaced or removed.
    pub value: u64,
}

/// What a `FloeRequest` asks for (the values of its `op`), as the single-key functions of the
/// same names.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloeOp {
    /// `floe_map_get` / `floe_bytes_get`.
    Get = 0,
    /// `floe_map_insert_new` / `floe_bytes_insert_new`.
    InsertNew = 1,
    /// `floe_map_insert` / `floe_bytes_insert`: insert or replace, as std's `insert` (named
    /// `FLOE_OP_UPSERT` before 0.2.0; the numbers are unchanged).
    Insert = 2,
    /// `floe_map_put` / `floe_bytes_put`.
    Put = 3,
    /// `floe_map_fetch_add` (the u64 map only).
    FetchAdd = 4,
    /// `floe_map_remove` / `floe_bytes_remove`.
    Remove = 5,
}

impl FloeOp {
    /// The op of a request's integer field, if it is one.
    pub(crate) fn of(op: u32) -> Option<FloeOp> {
        Some(match op {
            0 => FloeOp::Get,
            1 => FloeOp::InsertNew,
            2 => FloeOp::Insert,
            3 => FloeOp::Put,
            4 => FloeOp::FetchAdd,
            5 => FloeOp::Remove,
            _ => return None,
        })
    }
}

/// Called by `floe_map_for_each` with the caller's `context`, a key and its value; returns 0
/// to go on, anything else to stop.
pub type FloeVisit =
    Option<unsafe extern "C" fn(context: *mut c_void, key: u64, value: u64) -> i32>;

/// The status and value of a lookup that finds the value or not (get, put, remove, and an
/// upsert or fetch-add that replaced a value or inserted one).
#[inline(always)]
fn found(value: Option<u64>) -> (FloeStatus, u64) {
    match value {
        Some(value) => (FloeStatus::Ok, value),
        None => (FloeStatus::Absent, 0),
    }
}

/// The status and value of an insert-if-absent.
#[inline(always)]
fn inserted(outcome: Insert<u64>) -> (FloeStatus, u64) {
    match outcome {
        Insert::Inserted => (FloeStatus::Ok, 0),
        Insert::Present(value) => (FloeStatus::Present, value),
        // Only shadow inserts hold a key hidden, and this ABI makes none.
        Insert::Shadowed => (FloeStatus::Present, 0),
    }
}

/// Run a single-key call on the map behind `map` and report the value it gives through the
/// optional `out`.
///
/// # Safety
/// `map` is NULL or a live handle; `out` is NULL or valid for a write of a `u64`.
#[inline(always)]
unsafe fn single(
    map: *const FloeMap,
    out: *mut u64,
    call: impl FnOnce(&FlatMap<u64, u64, Mix64>) -> Result<(FloeStatus, u64), FloeStatus>,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: NULL or live (the caller's contract).
        let map = unsafe { handle(map) }?;
        let (status, value) = call(&map.map)?;
        // SAFETY: NULL or valid (the caller's contract).
        unsafe { report(out, value) };
        Ok(status)
    })
}

impl FloeRequest {
    /// floe's request for this one, or `None` for an unknown op.
    #[inline(always)]
    fn request(&self) -> Option<Request<u64, u64>> {
        let FloeRequest { key, value, .. } = *self;
        Some(match FloeOp::of(self.op)? {
            FloeOp::Get => Request::Get(key),
            FloeOp::InsertNew => Request::InsertNew(key, value),
            FloeOp::Insert => Request::Insert(key, value),
            FloeOp::Put => Request::Put(key, value),
            FloeOp::FetchAdd => Request::fetch_add(key, value),
            FloeOp::Remove => Request::Remove(key),
        })
    }
}

impl FloeResponse {
    /// The answer a single-key function would give for `response`.
    #[inline(always)]
    fn of(response: Response<u64>) -> FloeResponse {
        let (status, value) = match response {
            Response::Get(value)
            | Response::Put(value)
            | Response::Remove(value)
            | Response::Insert(Ok(value))
            | Response::FetchAdd(Ok(value)) => found(value),
            Response::InsertNew(Ok(outcome)) => inserted(outcome),
            Response::InsertNew(Err(error))
            | Response::Insert(Err(error))
            | Response::FetchAdd(Err(error)) => (error.into(), 0),
        };
        FloeResponse { status, value }
    }
}

/// Make a map. `options` may be NULL (floe's defaults). On success `*map` is the new map's
/// handle; on an error it is NULL.
///
/// Errors: `FLOE_STATUS_NULL_ARGUMENT` (`map` is NULL), `FLOE_STATUS_INVALID_OPTION`,
/// `FLOE_STATUS_UNSUPPORTED_BACKEND`, `FLOE_STATUS_CAPACITY_OVERFLOW`,
/// `FLOE_STATUS_ALLOCATION_FAILED`.
///
/// # Safety
/// `options` is NULL or points to a `FloeOptions`; `map` is NULL or valid for a write of a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn floe_map_new(
    options: *const FloeOptions,
    map: *mut *mut FloeMap,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        make(options, map, |options| {
            let map = options.configure(FlatMap::<u64, u64>::builder())?.build()?;
            Ok(FloeMap {
                map,
                batch_depth: options.batch_depth(),
            })
        })
    }
}

/// Destroy a map and free its memory. NULL is allowed and does nothing, so the pattern
/// `floe_map_free(map); map = NULL;` makes a second free harmless, and later calls on `map`
/// answer `FLOE_STATUS_NULL_ARGUMENT`. Freeing the same non-NULL handle twice, or using it
/// after it was freed, is undefined behaviour (it cannot be detected). No other call may be
/// running on the map.
///
/// # Safety
/// `map` is NULL, or a handle from `floe_map_new` not freed yet, used by no other thread.
#[no_mangle]
pub unsafe extern "C" fn floe_map_free(map: *mut FloeMap) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { free(map) }
}

/// The value of `key`: `FLOE_STATUS_OK` with the value in `*value`, or `FLOE_STATUS_ABSENT`.
/// `value` may be NULL (a presence test).
///
/// # Safety
/// `map` is NULL or a live handle; `value` is NULL or valid for a write of a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn floe_map_get(
    map: *const FloeMap,
    key: u64,
    value: *mut u64,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { single(map, value, |m| Ok(found(m.get(&key)))) }
}

/// Insert `key -> value` only if `key` is absent: `FLOE_STATUS_OK`, or `FLOE_STATUS_PRESENT`
/// with the present value in `*present` (may be NULL) and nothing changed.
/// Errors: `FLOE_STATUS_FULL` (a map capped with `max_bins`), `FLOE_STATUS_ALLOCATION_FAILED`,
/// `FLOE_STATUS_CAPACITY_OVERFLOW`, `FLOE_STATUS_HASH_COLLISIONS`.
///
/// # Safety
/// `map` is NULL or a live handle; `present` is NULL or valid for a write of a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn floe_map_insert_new(
    map: *const FloeMap,
    key: u64,
    value: u64,
    present: *mut u64,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        single(map, present, |m| {
            Ok(inserted(m.try_insert_new(key, value)?))
        })
    }
}

/// Store `key -> value`, inserting or overwriting: `FLOE_STATUS_OK` with the replaced value in
/// `*previous` (may be NULL), or `FLOE_STATUS_ABSENT` if the key was inserted. Errors as
/// `floe_map_insert_new`.
///
/// # Safety
/// As `floe_map_insert_new`.
#[no_mangle]
pub unsafe extern "C" fn floe_map_insert(
    map: *const FloeMap,
    key: u64,
    value: u64,
    previous: *mut u64,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { single(map, previous, |m| Ok(found(m.try_insert(key, value)?))) }
}

/// Overwrite the value of `key` only if it is present: `FLOE_STATUS_OK` with the replaced value
/// in `*previous` (may be NULL), or `FLOE_STATUS_ABSENT` and nothing written.
///
/// # Safety
/// As `floe_map_insert_new`.
#[no_mangle]
pub unsafe extern "C" fn floe_map_put(
    map: *const FloeMap,
    key: u64,
    value: u64,
    previous: *mut u64,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { single(map, previous, |m| Ok(found(m.put(key, value)))) }
}

/// Add `delta` to the value of `key` (wrapping), inserting `delta` if the key is absent:
/// `FLOE_STATUS_OK` with the value before the addition in `*previous` (may be NULL), or
/// `FLOE_STATUS_ABSENT` if the key was inserted. Errors as `floe_map_insert_new`.
///
/// # Safety
/// As `floe_map_insert_new`.
#[no_mangle]
pub unsafe extern "C" fn floe_map_fetch_add(
    map: *const FloeMap,
    key: u64,
    delta: u64,
    previous: *mut u64,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { single(map, previous, |m| Ok(found(m.try_fetch_add(key, delta)?))) }
}

/// Set the value of `key` to `desired` if it is `expected`, atomically: `FLOE_STATUS_OK`,
/// `FLOE_STATUS_MISMATCH` with the present value in `*actual` (may be NULL), or
/// `FLOE_STATUS_ABSENT`; nothing changes unless `FLOE_STATUS_OK`.
///
/// # Safety
/// `map` is NULL or a live handle; `actual` is NULL or valid for a write of a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn floe_map_compare_exchange(
    map: *const FloeMap,
    key: u64,
    expected: u64,
    desired: u64,
    actual: *mut u64,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        single(map, actual, |m| {
            Ok(match m.compare_exchange(&key, expected, desired) {
                Ok(old) => (FloeStatus::Ok, old),
                Err(CompareExchangeError::Mismatch(present)) => (FloeStatus::Mismatch, present),
                Err(CompareExchangeError::Absent) => (FloeStatus::Absent, 0),
            })
        })
    }
}

/// Remove `key`: `FLOE_STATUS_OK` with the removed value in `*removed` (may be NULL), or
/// `FLOE_STATUS_ABSENT`.
///
/// # Safety
/// `map` is NULL or a live handle; `removed` is NULL or valid for a write of a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn floe_map_remove(
    map: *const FloeMap,
    key: u64,
    removed: *mut u64,
) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { single(map, removed, |m| Ok(found(m.remove(&key)))) }
}

/// The number of keys into `*len` (required). Exact when no insert or remove runs meanwhile.
///
/// # Safety
/// `map` is NULL or a live handle; `len` is NULL or valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn floe_map_len(map: *const FloeMap, len: *mut usize) -> FloeStatus {
    // SAFETY: the caller's contract, passed on.
    unsafe { report_len(map, len, |m| m.map.len()) }
}

/// Keys a batch converts at a time (the arrays live on the stack).
const CHUNK: usize = 256;

/// Gets of `keys_len` keys, in order, with the bins of the next keys prefetched
/// (`FloeOptions::batch_depth`): for each `i`, `found[i]` says whether `keys[i]` is present
/// and `values[i]` is its value (0 when absent). `values` and `found` have `values_len`
/// slots. Each answer is what `floe_map_get` would say at some instant during the call.
///
/// Errors, checked in this order before anything is read: `FLOE_STATUS_NULL_ARGUMENT` (`map`),
/// `FLOE_STATUS_EMPTY_BATCH` (`keys_len` is 0), `FLOE_STATUS_LENGTH_MISMATCH` (`values_len`
/// differs), `FLOE_STATUS_NULL_ARGUMENT` (an array).
///
/// # Safety
/// `map` is NULL or a live handle; each array is NULL or valid for its length (`keys` for
/// reads, `values` and `found` for writes), and they do not overlap.
#[no_mangle]
pub unsafe extern "C" fn floe_map_get_many(
    map: *const FloeMap,
    keys: *const u64,
    keys_len: usize,
    values: *mut u64,
    found: *mut bool,
    values_len: usize,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: NULL or live (the caller's contract).
        let map = unsafe { batch_of(map, keys_len, values_len) }?;
        // SAFETY: NULL or valid for `keys_len` reads (the caller's contract).
        let keys = unsafe { array(keys, keys_len) }?;
        if values.is_null() || found.is_null() {
            return Err(FloeStatus::NullArgument);
        }
        let batch = map.map.batch().depth(map.batch_depth);
        let mut got = [None; CHUNK];
        for (c, keys) in keys.chunks(CHUNK).enumerate() {
            let got = &mut got[..keys.len()];
            batch.get_many(keys, got)?;
            for (i, value) in got.iter().enumerate() {
                let at = c * CHUNK + i;
                // SAFETY: `at < keys_len == values_len`, and both arrays are valid for
                // `values_len` writes (the caller's contract); written, never read.
                unsafe {
                    values.add(at).write(value.unwrap_or(0));
                    found.add(at).write(value.is_some());
                }
            }
        }
        Ok(FloeStatus::Ok)
    })
}

/// Run `requests_len` requests in order, with the bins of the next ones prefetched
/// (`FloeOptions::batch_depth`), writing one response per request: exactly the answers of
/// calling the single-key functions one by one in this order on this thread (other threads'
/// calls may fall between two requests). Answers `FLOE_STATUS_OK` once all have run; each
/// request's own outcome is in its response.
///
/// Errors, checked in this order before any request runs: `FLOE_STATUS_NULL_ARGUMENT` (`map`),
/// `FLOE_STATUS_EMPTY_BATCH`, `FLOE_STATUS_LENGTH_MISMATCH` (`responses_len` differs),
/// `FLOE_STATUS_NULL_ARGUMENT` (an array), `FLOE_STATUS_INVALID_ARGUMENT` (an unknown op).
///
/// # Safety
/// `map` is NULL or a live handle; `requests` is NULL or valid for `requests_len` reads,
/// `responses` NULL or valid for `responses_len` writes, and they do not overlap.
#[no_mangle]
pub unsafe extern "C" fn floe_map_run(
    map: *const FloeMap,
    requests: *const FloeRequest,
    requests_len: usize,
    responses: *mut FloeResponse,
    responses_len: usize,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: NULL or live (the caller's contract).
        let map = unsafe { batch_of(map, requests_len, responses_len) }?;
        // SAFETY: NULL or valid for `requests_len` reads (the caller's contract).
        let requests = unsafe { array(requests, requests_len) }?;
        if responses.is_null() {
            return Err(FloeStatus::NullArgument);
        }
        if requests.iter().any(|r| FloeOp::of(r.op).is_none()) {
            return Err(FloeStatus::InvalidArgument);
        }
        let batch = map.map.batch().depth(map.batch_depth);
        let mut converted = [Request::Get(0); CHUNK];
        for (c, requests) in requests.chunks(CHUNK).enumerate() {
            let converted = &mut converted[..requests.len()];
            for (to, from) in converted.iter_mut().zip(requests) {
                *to = from.request().ok_or(FloeStatus::InvalidArgument)?;
            }
            batch.run_each(converted, |i, response| {
                // SAFETY: `c * CHUNK + i < requests_len == responses_len`, and `responses`
                // is valid for that many writes (the caller's contract); written, never read
                // (it may hold bits that are no `FloeStatus`).
                unsafe {
                    responses
                        .add(c * CHUNK + i)
                        .write(FloeResponse::of(response))
                };
            });
        }
        Ok(FloeStatus::Ok)
    })
}

/// Call `visit(context, key, value)` for the pairs of the map until it returns nonzero.
/// Weakly consistent: a key present for the whole walk is visited once, also across growth;
/// a key inserted or removed meanwhile may or may not be. Writers are never blocked, and
/// `visit` may call any function on this map (not `floe_map_free`). Answers `FLOE_STATUS_OK`
/// whether or not `visit` stopped the walk. `visit` must return normally: unwinding a C++
/// exception or `longjmp` out of it is undefined behaviour.
///
/// # Safety
/// `map` is NULL or a live handle; `visit` is NULL or a function safe to call with `context`.
#[no_mangle]
pub unsafe extern "C" fn floe_map_for_each(
    map: *const FloeMap,
    visit: FloeVisit,
    context: *mut c_void,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: NULL or live (the caller's contract).
        let map = unsafe { handle(map) }?;
        let visit = visit.ok_or(FloeStatus::NullArgument)?;
        for (key, value) in map.map.iter() {
            // SAFETY: `visit` is safe to call with `context` (the caller's contract).
            if unsafe { visit(context, key, value) } != 0 {
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

    /// A map with the given options, freed when the test is done with it.
    struct Made(*mut FloeMap);

    impl Made {
        fn with(options: FloeOptions) -> Made {
            let mut map = null_mut();
            // SAFETY: a valid options struct and out-pointer.
            assert_eq!(unsafe { floe_map_new(&options, &mut map) }, FloeStatus::Ok);
            Made(map)
        }
    }

    impl Drop for Made {
        fn drop(&mut self) {
            // SAFETY: made by `floe_map_new`, freed once.
            assert_eq!(unsafe { floe_map_free(self.0) }, FloeStatus::Ok);
        }
    }

    #[test]
    fn every_single_key_call_answers_as_the_rust_api() {
        let made = Made::with(FloeOptions {
            seed: 7,
            ..FloeOptions::default()
        });
        let m = made.0;
        let mut out = 0;
        // SAFETY: a live map and valid out-pointers throughout.
        unsafe {
            assert_eq!(floe_map_get(m, 1, &mut out), FloeStatus::Absent);
            assert_eq!(floe_map_insert_new(m, 1, 10, &mut out), FloeStatus::Ok);
            assert_eq!(floe_map_insert_new(m, 1, 11, &mut out), FloeStatus::Present);
            assert_eq!(out, 10);
            assert_eq!(floe_map_get(m, 1, &mut out), FloeStatus::Ok);
            assert_eq!(out, 10);
            assert_eq!(floe_map_insert(m, 1, 12, &mut out), FloeStatus::Ok);
            assert_eq!(out, 10);
            assert_eq!(floe_map_insert(m, 2, 20, null_mut()), FloeStatus::Absent);
            assert_eq!(floe_map_put(m, 3, 30, &mut out), FloeStatus::Absent);
            assert_eq!(floe_map_put(m, 2, 21, &mut out), FloeStatus::Ok);
            assert_eq!(out, 20);
            assert_eq!(floe_map_fetch_add(m, 4, 5, &mut out), FloeStatus::Absent);
            assert_eq!(floe_map_fetch_add(m, 4, 5, &mut out), FloeStatus::Ok);
            assert_eq!(out, 5);
            assert_eq!(
                floe_map_compare_exchange(m, 4, 1, 2, &mut out),
                FloeStatus::Mismatch
            );
            assert_eq!(out, 10);
            assert_eq!(
                floe_map_compare_exchange(m, 4, 10, 2, &mut out),
                FloeStatus::Ok
            );
            assert_eq!(
                floe_map_compare_exchange(m, 5, 0, 1, &mut out),
                FloeStatus::Absent
            );
            assert_eq!(floe_map_get(m, 4, null_mut()), FloeStatus::Ok);
            let mut len = 0;
            assert_eq!(floe_map_len(m, &mut len), FloeStatus::Ok);
            assert_eq!(len, 3);
            assert_eq!(floe_map_remove(m, 4, &mut out), FloeStatus::Ok);
            assert_eq!(out, 2);
            assert_eq!(floe_map_remove(m, 4, &mut out), FloeStatus::Absent);
        }
    }

    #[test]
    fn null_handles_and_pointers_are_refused() {
        let null_map: *const FloeMap = null();
        let mut out = 0;
        // SAFETY: NULL handles, and valid pointers where one is given.
        unsafe {
            assert_eq!(floe_map_new(null(), null_mut()), FloeStatus::NullArgument);
            assert_eq!(floe_map_free(null_mut()), FloeStatus::Ok);
            assert_eq!(
                floe_map_get(null_map, 1, &mut out),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_map_insert_new(null_map, 1, 1, null_mut()),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_map_insert(null_map, 1, 1, null_mut()),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_map_put(null_map, 1, 1, null_mut()),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_map_fetch_add(null_map, 1, 1, null_mut()),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_map_compare_exchange(null_map, 1, 1, 1, null_mut()),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_map_remove(null_map, 1, null_mut()),
                FloeStatus::NullArgument
            );
            assert_eq!(floe_map_len(null_map, null_mut()), FloeStatus::NullArgument);
            assert_eq!(
                floe_map_for_each(null_map, None, null_mut()),
                FloeStatus::NullArgument
            );
            let made = Made::with(FloeOptions::default());
            assert_eq!(floe_map_len(made.0, null_mut()), FloeStatus::NullArgument);
            assert_eq!(
                floe_map_for_each(made.0, None, null_mut()),
                FloeStatus::NullArgument
            );
        }
    }

    #[test]
    fn bad_options_leave_a_null_handle() {
        let mut map = core::ptr::dangling_mut::<FloeMap>();
        let options = FloeOptions {
            backend: 99,
            ..FloeOptions::default()
        };
        // SAFETY: valid pointers.
        let status = unsafe { floe_map_new(&options, &mut map) };
        assert_eq!(status, FloeStatus::InvalidOption);
        assert!(map.is_null());
    }

    #[test]
    fn a_capped_map_answers_full_instead_of_panicking() {
        let made = Made::with(FloeOptions {
            capacity: 64,
            max_bins: 1,
            ..FloeOptions::default()
        });
        let mut full = 0;
        for key in 0..10_000 {
            // SAFETY: a live map.
            match unsafe { floe_map_insert_new(made.0, key, key, null_mut()) } {
                FloeStatus::Ok => {}
                FloeStatus::Full => full += 1,
                other => panic!("{other:?}"),
            }
        }
        let mut len = 0;
        // SAFETY: a live map, a valid out-pointer.
        unsafe { floe_map_len(made.0, &mut len) };
        assert!(full > 0);
        assert_eq!(len + full, 10_000);
    }

    #[test]
    fn batches_check_their_lengths_before_reading() {
        let made = Made::with(FloeOptions::default());
        let keys = [1u64, 2, 3];
        let mut values = [0u64; 3];
        let mut found = [false; 3];
        let requests = [FloeRequest {
            op: FloeOp::Get as u32,
            key: 1,
            value: 0,
        }];
        let mut responses = [FloeResponse {
            status: FloeStatus::Ok,
            value: 0,
        }; 2];
        // SAFETY: a live map (or NULL), arrays valid for the lengths given.
        unsafe {
            let mut get_many = |keys_len, values_len| {
                floe_map_get_many(
                    made.0,
                    keys.as_ptr(),
                    keys_len,
                    values.as_mut_ptr(),
                    found.as_mut_ptr(),
                    values_len,
                )
            };
            assert_eq!(get_many(0, 0), FloeStatus::EmptyBatch);
            assert_eq!(get_many(3, 2), FloeStatus::LengthMismatch);
            assert_eq!(
                floe_map_get_many(
                    null(),
                    keys.as_ptr(),
                    3,
                    values.as_mut_ptr(),
                    found.as_mut_ptr(),
                    3
                ),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_map_get_many(
                    made.0,
                    null(),
                    3,
                    values.as_mut_ptr(),
                    found.as_mut_ptr(),
                    3
                ),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_map_get_many(made.0, keys.as_ptr(), 3, values.as_mut_ptr(), null_mut(), 3),
                FloeStatus::NullArgument
            );
            assert_eq!(
                floe_map_run(made.0, requests.as_ptr(), 0, responses.as_mut_ptr(), 0),
                FloeStatus::EmptyBatch
            );
            assert_eq!(
                floe_map_run(made.0, requests.as_ptr(), 1, responses.as_mut_ptr(), 2),
                FloeStatus::LengthMismatch
            );
            assert_eq!(
                floe_map_run(made.0, requests.as_ptr(), 1, null_mut(), 1),
                FloeStatus::NullArgument
            );
            let unknown = [FloeRequest {
                op: 6,
                key: 1,
                value: 0,
            }];
            assert_eq!(
                floe_map_run(made.0, unknown.as_ptr(), 1, responses.as_mut_ptr(), 1),
                FloeStatus::InvalidArgument
            );
        }
    }

    #[test]
    fn batches_answer_as_the_single_key_calls_in_order() {
        let made = Made::with(FloeOptions {
            batch_depth: 4,
            ..FloeOptions::default()
        });
        // Longer than a chunk, so the chunk offsets are exercised.
        let n = 3 * CHUNK as u64 + 5;
        let mut requests = Vec::new();
        for key in 0..n {
            requests.push(FloeRequest {
                op: FloeOp::InsertNew as u32,
                key,
                value: key * 2,
            });
        }
        for key in 0..n {
            let op = [
                FloeOp::Get,
                FloeOp::Insert,
                FloeOp::Put,
                FloeOp::FetchAdd,
                FloeOp::Remove,
            ][(key % 5) as usize];
            requests.push(FloeRequest {
                op: op as u32,
                key: key + n / 2,
                value: 1,
            });
        }
        let mut responses = vec![
            FloeResponse {
                status: FloeStatus::Panic,
                value: 0,
            };
            requests.len()
        ];
        // The same requests through the Rust API, one by one, on a map of their own.
        let reference = FlatMap::<u64, u64>::new();
        let expected: Vec<_> = requests
            .iter()
            .map(|r| FloeResponse::of(reference.execute(r.request().unwrap())))
            .collect();
        // SAFETY: a live map, arrays valid for their lengths.
        let status = unsafe {
            floe_map_run(
                made.0,
                requests.as_ptr(),
                requests.len(),
                responses.as_mut_ptr(),
                responses.len(),
            )
        };
        assert_eq!(status, FloeStatus::Ok);
        for (got, want) in responses.iter().zip(&expected) {
            assert_eq!((got.status, got.value), (want.status, want.value));
        }
        let keys: Vec<u64> = (0..2 * n).collect();
        let mut values = vec![u64::MAX; keys.len()];
        let mut found = vec![false; keys.len()];
        // SAFETY: as above.
        let status = unsafe {
            floe_map_get_many(
                made.0,
                keys.as_ptr(),
                keys.len(),
                values.as_mut_ptr(),
                found.as_mut_ptr(),
                values.len(),
            )
        };
        assert_eq!(status, FloeStatus::Ok);
        for (i, key) in keys.iter().enumerate() {
            let want = reference.get(key);
            assert_eq!(found[i], want.is_some());
            assert_eq!(values[i], want.unwrap_or(0));
        }
    }

    #[test]
    fn iteration_visits_every_pair_and_stops_when_asked() {
        let made = Made::with(FloeOptions::default());
        for key in 0..100 {
            // SAFETY: a live map.
            unsafe { floe_map_insert_new(made.0, key, key + 1, null_mut()) };
        }
        unsafe extern "C" fn sum(context: *mut c_void, key: u64, value: u64) -> i32 {
            // SAFETY: the tests pass a `[u64; 2]` as the context.
            let state = unsafe { &mut *context.cast::<[u64; 2]>() };
            assert_eq!(value, key + 1);
            state[0] += value;
            state[1] += 1;
            i32::from(state[1] == 200)
        }
        let mut state = [0u64; 2];
        // SAFETY: a live map, and a context of the type `sum` reads.
        let status =
            unsafe { floe_map_for_each(made.0, Some(sum), core::ptr::addr_of_mut!(state).cast()) };
        assert_eq!(status, FloeStatus::Ok);
        assert_eq!(state, [(1..=100).sum(), 100]);
        // Stops after the first pair when the count starts just below the stop.
        let mut state = [0u64, 199];
        // SAFETY: as above.
        unsafe { floe_map_for_each(made.0, Some(sum), core::ptr::addr_of_mut!(state).cast()) };
        assert_eq!(state[1], 200);
    }
}

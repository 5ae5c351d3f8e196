//! The life of a handle, the same for both maps: made from the caller's options and handed
//! out through a pointer, freed at most once, and the length report both maps share.

use crate::{
    options::FloeOptions,
    status::{guarded, handle, FloeStatus},
};

/// Build a map with `build` from the caller's options (NULL: the defaults) and hand its
/// handle out through `out`, which holds NULL on an error.
///
/// # Safety
/// `options` is NULL or points to a `FloeOptions`; `out` is NULL or valid for a write of a
/// pointer.
pub(crate) unsafe fn make<T>(
    options: *const FloeOptions,
    out: *mut *mut T,
    build: impl FnOnce(&FloeOptions) -> Result<T, FloeStatus>,
) -> FloeStatus {
    guarded(|| {
        if out.is_null() {
            return Err(FloeStatus::NullArgument);
        }
        // SAFETY: `out` is valid for a write (checked non-NULL; the caller's contract).
        unsafe { out.write(core::ptr::null_mut()) };
        // SAFETY: NULL or a `FloeOptions` (the caller's contract).
        let options = unsafe { FloeOptions::read(options) };
        let made = Box::new(build(&options)?);
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(made)) };
        Ok(FloeStatus::Ok)
    })
}

/// Free what `make` handed out; NULL does nothing.
///
/// # Safety
/// `handle` is NULL, or a handle from `make` of the same `T` not freed yet and used by no
/// other thread.
pub(crate) unsafe fn free<T>(handle: *mut T) -> FloeStatus {
    guarded(|| {
        if !handle.is_null() {
            // SAFETY: made by `Box::into_raw` in `make`, not freed yet, and no other call
            // holds it (the caller's contract).
            drop(unsafe { Box::from_raw(handle) });
        }
        Ok(FloeStatus::Ok)
    })
}

/// Report `count(map)` through the required `len`.
///
/// # Safety
/// `map` is NULL or a live handle; `len` is NULL or valid for a write of a `usize`.
pub(crate) unsafe fn report_len<T>(
    map: *const T,
    len: *mut usize,
    count: impl FnOnce(&T) -> usize,
) -> FloeStatus {
    guarded(|| {
        // SAFETY: NULL or live (the caller's contract).
        let map = unsafe { handle(map) }?;
        if len.is_null() {
            return Err(FloeStatus::NullArgument);
        }
        // SAFETY: valid for a write (checked non-NULL; the caller's contract).
        unsafe { len.write(count(map)) };
        Ok(FloeStatus::Ok)
    })
}

//! floe from C and C++: a C ABI over floe's maps, with the header `include/floe.h` generated
//! from this crate by cbindgen.
//!
//! Two maps, each behind an opaque handle:
//!
//! - `FloeMap`: `FlatMap<u64, u64>`, keys and values inline in the table (`floe_map_*`):
//!   get, insert (replacing, as std), insert-new (only if absent), put, fetch-add, compare-exchange, remove, len, batched gets and
//!   batched requests, and iteration with a callback.
//! - `FloeBytesMap`: `Map<Box<[u8]>, Box<[u8]>>`, byte-string keys and values (`floe_bytes_*`):
//!   the same calls but fetch-add, values copied into the caller's buffer or lent to a
//!   callback.
//!
//! # The contract at the boundary
//!
//! Every entry point returns a `FloeStatus`: zero or a positive answer about the key, or a
//! negative error after which nothing changed. No Rust panic crosses the boundary: each body
//! runs under `catch_unwind` and a panic is answered `FLOE_STATUS_PANIC`. NULL handles and
//! NULL required pointers, batches of zero requests and arrays of mismatched lengths are
//! answered with their error codes before anything is read. What cannot be checked is
//! undefined behaviour, as in any C library: a handle used after it was freed (freeing it
//! twice included), pointers to too little memory, a callback that unwinds or `longjmp`s. Set
//! a handle to NULL after freeing it and a later call answers `FLOE_STATUS_NULL_ARGUMENT`.
//!
//! Out of memory for an entry of the byte-string map aborts the process, as Rust's allocation
//! failures do; the tables' own memory is asked for fallibly (`FLOE_STATUS_ALLOCATION_FAILED`).
//!
//! # Building and linking
//!
//! `cargo build --release -p floe-capi` makes `target/release/libfloe_capi.a` and
//! `libfloe_capi.so`. With the static library a program also links the system libraries
//! Rust's standard library uses:
//!
//! ```text
//! cc -I crates/floe-capi/include app.c target/release/libfloe_capi.a -lpthread -ldl -lm
//! ```
//!
//! `crates/floe-capi/examples/example.c` is a small program; `ci/capi.sh` builds it and the C
//! tests (`tests/c/test.c`) and checks the header is what cbindgen makes of this crate.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod bytes;
mod flat;
mod handle;
mod options;
mod status;

pub use crate::{
    bytes::{
        floe_bytes_compare_exchange, floe_bytes_for_each, floe_bytes_free, floe_bytes_get,
        floe_bytes_get_many, floe_bytes_insert, floe_bytes_insert_new, floe_bytes_len,
        floe_bytes_new, floe_bytes_put, floe_bytes_remove, floe_bytes_run, FloeBytes,
        FloeBytesAnswer, FloeBytesMap, FloeBytesRequest, FloeBytesVisit,
    },
    flat::{
        floe_map_compare_exchange, floe_map_fetch_add, floe_map_for_each, floe_map_free,
        floe_map_get, floe_map_get_many, floe_map_insert, floe_map_insert_new, floe_map_len,
        floe_map_new, floe_map_put, floe_map_remove, floe_map_run, FloeMap, FloeOp, FloeRequest,
        FloeResponse, FloeVisit,
    },
    options::{FloeBackend, FloeOptions, FloeResizeMode},
    status::{floe_status_message, FloeStatus},
};

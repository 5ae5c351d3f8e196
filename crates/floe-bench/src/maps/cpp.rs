//! The C++ peers (boost::concurrent_flat_map, oneTBB's concurrent_hash_map, libcuckoo,
//! abseil's flat_hash_map), compiled by `build.rs` from `cpp/peers.cpp`, and floe through its
//! own C ABI (`floe-capi`), as `BenchMap`s.
//!
//! Both sides of the language boundary are measured the same way: one out-of-line call per
//! operation through a C function pointer (the pointers are read at run time, so nothing is
//! inlined across the boundary), as a C or C++ program calling floe's shared library or a peer
//! compiled apart would make. Set beside the Rust maps, that call is part of what a C++ peer
//! costs here; `floe-capi` against `floe` shows its size.

use core::ffi::c_void;
use std::{hash::BuildHasher, hint::black_box, marker::PhantomData, ptr::NonNull};

use floe_capi::{FloeMap, FloeOptions, FloeStatus};

use super::{AnyHash, BenchMap};

/// The bench's hasher handed to C++: Mix64 with `seed` computed there (`hash` None), or a call
/// back into Rust for the other hashers (`context` an `AnyHash`).
#[repr(C)]
struct PeerHash {
    seed: u64,
    hash: Option<unsafe extern "C" fn(context: *const c_void, key: u64) -> u64>,
    context: *const c_void,
}

/// One C++ map's operations (`FloePeerOps` in `cpp/peers.cpp`).
#[repr(C)]
#[derive(Clone, Copy)]
struct PeerOps {
    create: unsafe extern "C" fn(capacity: usize, hash: PeerHash) -> *mut c_void,
    destroy: unsafe extern "C" fn(map: *mut c_void),
    get: unsafe extern "C" fn(map: *const c_void, key: u64, value: *mut u64) -> bool,
    insert: unsafe extern "C" fn(map: *mut c_void, key: u64, value: u64) -> bool,
    update: unsafe extern "C" fn(map: *mut c_void, key: u64, value: u64) -> bool,
    remove: unsafe extern "C" fn(map: *mut c_void, key: u64) -> bool,
    get_many: unsafe extern "C" fn(
        map: *const c_void,
        keys: *const u64,
        n: usize,
        values: *mut u64,
        found: *mut bool,
    ),
}

#[cfg(floe_cpp)]
extern "C" {
    /// The operations of peer `peer` (its `Peer::ID`), NULL if it was not compiled in.
    fn floe_peer_ops(peer: u32) -> *const PeerOps;
    /// floe's Mix64 as `cpp/peers.cpp` computes it.
    #[cfg(test)]
    fn floe_peer_mix64(key: u64, seed: u64) -> u64;
}

/// No C++ harness was built (no compiler, or `FLOE_NO_CPP_PEERS`): no peer is there.
#[cfg(not(floe_cpp))]
unsafe fn floe_peer_ops(_peer: u32) -> *const PeerOps {
    core::ptr::null()
}

/// Which C++ map a `CppMap` is.
pub trait Peer: Send + Sync + 'static {
    /// Its number in `floe_peer_ops`.
    const ID: u32;
    /// Whether its `get_many` is a bulk lookup of its own (`BenchMap::GET_MANY`).
    const BULK: bool;
    /// What `build.rs` said of it: "ok", or why it was left out.
    const BUILT: &'static str;
}

/// One marker type per C++ peer: its number in `floe_peer_ops`, whether it has a bulk lookup,
/// and the variable `build.rs` reports it in.
macro_rules! peers {
    ($($(#[$doc:meta])* $name:ident = $id:literal, bulk $bulk:literal, $built:literal;)*) => {$(
        $(#[$doc])*
        pub struct $name;
        impl Peer for $name {
            const ID: u32 = $id;
            const BULK: bool = $bulk;
            const BUILT: &'static str = env!($built);
        }
    )*};
}

peers! {
    /// boost::concurrent_flat_map.
    Boost = 0, bulk true, "FLOE_PEER_BOOST";
    /// oneTBB's tbb::concurrent_hash_map.
    Tbb = 1, bulk false, "FLOE_PEER_TBB";
    /// libcuckoo's cuckoohash_map.
    Libcuckoo = 2, bulk false, "FLOE_PEER_LIBCUCKOO";
    /// abseil's absl::flat_hash_map (one thread only).
    Absl = 3, bulk false, "FLOE_PEER_ABSL";
}

/// Why peer `P` cannot run in this build, if it cannot.
pub fn missing<P: Peer>() -> Option<&'static str> {
    // SAFETY: `floe_peer_ops` takes any number and only reads static data.
    let ops = unsafe { floe_peer_ops(P::ID) };
    match (ops.is_null(), P::BUILT) {
        (false, _) => None,
        (true, "ok") => Some("compiled in, but the harness was not linked"),
        (true, why) => Some(why),
    }
}

/// The seed of `hasher` if it is Mix64 (computed on the C++ side then), else `None`.
fn mix64_seed(hasher: &AnyHash) -> Option<u64> {
    match *hasher {
        AnyHash::Mix64(seed) => Some(seed),
        _ => None,
    }
}

/// `PeerHash::hash` for the hashers C++ does not compute itself.
unsafe extern "C" fn hash_in_rust(context: *const c_void, key: u64) -> u64 {
    // SAFETY: `context` is the `AnyHash` a `CppMap` keeps boxed for as long as its C++ map
    // lives.
    let hasher = unsafe { &*context.cast::<AnyHash>() };
    hasher.hash_one(key)
}

/// A C++ map, called through its table of operations.
pub struct CppMap<P> {
    map: NonNull<c_void>,
    ops: PeerOps,
    /// The hasher a C++ map calls back for (`hash_in_rust`); boxed so its address is stable.
    /// Dropped after the map (`Drop`).
    _hasher: Box<AnyHash>,
    peer: PhantomData<P>,
}

// SAFETY: boost's, oneTBB's and libcuckoo's maps are made for concurrent use from any thread;
// abseil's is not, and the harness runs it from one thread at a time only
// (`MapKind::concurrent` is false for it), with threads joined between runs. The boxed
// hasher is only read.
unsafe impl<P: Peer> Send for CppMap<P> {}
// SAFETY: as for `Send`.
unsafe impl<P: Peer> Sync for CppMap<P> {}

impl<P: Peer> CppMap<P> {
    pub fn new(capacity: usize, hasher: AnyHash) -> Result<Self, String> {
        let name = core::any::type_name::<P>()
            .rsplit("::")
            .next()
            .unwrap_or("?");
        if let Some(why) = missing::<P>() {
            return Err(format!("{name} is not in this build of floe-bench: {why}"));
        }
        // SAFETY: `floe_peer_ops` returns NULL (ruled out above) or a pointer to a static.
        let ops = unsafe { *floe_peer_ops(P::ID) };
        let hasher = Box::new(hasher);
        let hash = match mix64_seed(&hasher) {
            Some(seed) => PeerHash {
                seed,
                hash: None,
                context: core::ptr::null(),
            },
            None => PeerHash {
                seed: 0,
                hash: Some(hash_in_rust),
                context: (&*hasher as *const AnyHash).cast(),
            },
        };
        // SAFETY: the peer's constructor; the hasher outlives the map (see `_hasher`).
        let map = unsafe { (ops.create)(capacity, hash) };
        Ok(CppMap {
            map: NonNull::new(map).ok_or(format!("{name}: the C++ constructor failed"))?,
            ops,
            _hasher: hasher,
            peer: PhantomData,
        })
    }
}

impl<P> Drop for CppMap<P> {
    fn drop(&mut self) {
        // SAFETY: made by `create`, destroyed once, and no thread uses it any more (`&mut`).
        unsafe { (self.ops.destroy)(self.map.as_ptr()) };
    }
}

impl<P: Peer> BenchMap for CppMap<P> {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        let mut value = 0;
        // SAFETY: a live map and a valid out-pointer.
        unsafe { (self.ops.get)(self.map.as_ptr(), key, &mut value) }.then_some(value)
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        // SAFETY: a live map, shared as its library allows (see the `Sync` impl).
        unsafe { (self.ops.insert)(self.map.as_ptr(), key, value) }
    }
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        // SAFETY: as for `insert`.
        unsafe { (self.ops.update)(self.map.as_ptr(), key, value) }
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        // SAFETY: as for `insert`.
        unsafe { (self.ops.remove)(self.map.as_ptr(), key) }
    }
    const GET_MANY: bool = P::BULK;
    #[inline]
    fn get_many(
        &self,
        keys: &[u64],
        values: &mut [Option<u64>],
        _depth: usize,
        _prefetch: floe::Prefetch,
    ) {
        answer_many(keys, values, |keys, words, found| {
            // SAFETY: a live map; the three arrays have `keys.len()` items.
            unsafe {
                (self.ops.get_many)(
                    self.map.as_ptr(),
                    keys.as_ptr(),
                    keys.len(),
                    words.as_mut_ptr(),
                    found.as_mut_ptr(),
                )
            }
        });
    }
}

/// Keys a C batch takes at a time (the harness hands out 2048).
const CHUNK: usize = 2048;

/// Run a C-style batched get (values and found flags in two arrays) and give its answers as
/// the harness takes them.
#[inline(always)]
fn answer_many(
    keys: &[u64],
    values: &mut [Option<u64>],
    mut lookup: impl FnMut(&[u64], &mut [u64], &mut [bool]),
) {
    let mut words = [0u64; CHUNK];
    let mut found = [false; CHUNK];
    for (keys, values) in keys.chunks(CHUNK).zip(values.chunks_mut(CHUNK)) {
        let (words, found) = (&mut words[..keys.len()], &mut found[..keys.len()]);
        lookup(keys, words, found);
        for ((value, &word), &found) in values.iter_mut().zip(words.iter()).zip(found.iter()) {
            *value = found.then_some(word);
        }
    }
}

/// floe's C ABI entry points a `CapiFloe` calls.
#[derive(Clone, Copy)]
struct CapiOps {
    get: unsafe extern "C" fn(*const FloeMap, u64, *mut u64) -> FloeStatus,
    insert: unsafe extern "C" fn(*const FloeMap, u64, u64, *mut u64) -> FloeStatus,
    put: unsafe extern "C" fn(*const FloeMap, u64, u64, *mut u64) -> FloeStatus,
    remove: unsafe extern "C" fn(*const FloeMap, u64, *mut u64) -> FloeStatus,
    get_many: unsafe extern "C" fn(
        *const FloeMap,
        *const u64,
        usize,
        *mut u64,
        *mut bool,
        usize,
    ) -> FloeStatus,
}

/// floe's `FlatMap<u64, u64>` through its C ABI (`floe-capi`), called through function
/// pointers as a C program calls the shared library. The C ABI's hasher is Mix64, so it takes
/// the bench's Mix64 (`--hash mix64`, the default) only.
pub struct CapiFloe {
    map: NonNull<FloeMap>,
    ops: CapiOps,
}

// SAFETY: floe's C ABI may be called on one map from any number of threads at once (its docs).
unsafe impl Send for CapiFloe {}
// SAFETY: as for `Send`.
unsafe impl Sync for CapiFloe {}

impl CapiFloe {
    /// A map as `recipe` would build floe's (capacity, backend, huge pages, link pool, resize
    /// mode), through `floe_map_new`.
    pub fn new(recipe: &super::Recipe) -> Result<Self, String> {
        let seed = mix64_seed(&recipe.hasher)
            .ok_or("floe-capi hashes with Mix64 only: run it with --hash mix64")?;
        let options = FloeOptions {
            capacity: recipe.capacity,
            bins_per_link: recipe.bins_per_link(),
            seed,
            backend: match recipe.backend {
                floe::Backend::Scalar => 1,
                floe::Backend::Avx2 => 2,
                floe::Backend::Avx512 => 3,
                _ => 0,
            },
            resize_mode: u32::from(recipe.resize == floe::ResizeMode::Blocking),
            no_huge_pages: u32::from(!recipe.huge_pages),
            ..FloeOptions::default()
        };
        let mut map = core::ptr::null_mut();
        // SAFETY: valid options and out-pointer.
        let status = unsafe { floe_capi::floe_map_new(&options, &mut map) };
        if status != FloeStatus::Ok {
            return Err(format!("floe_map_new: {status:?}"));
        }
        Ok(CapiFloe {
            map: NonNull::new(map).ok_or("floe_map_new gave no map")?,
            // Through `black_box`: the calls cannot be inlined, as across a shared library.
            ops: black_box(CapiOps {
                get: floe_capi::floe_map_get,
                insert: floe_capi::floe_map_insert_new,
                put: floe_capi::floe_map_put,
                remove: floe_capi::floe_map_remove,
                get_many: floe_capi::floe_map_get_many,
            }),
        })
    }
}

impl Drop for CapiFloe {
    fn drop(&mut self) {
        // SAFETY: made by `floe_map_new`, freed once, no thread uses it any more (`&mut`).
        unsafe { floe_capi::floe_map_free(self.map.as_ptr()) };
    }
}

impl BenchMap for CapiFloe {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        let mut value = 0;
        // SAFETY: a live map and a valid out-pointer.
        let status = unsafe { (self.ops.get)(self.map.as_ptr(), key, &mut value) };
        (status == FloeStatus::Ok).then_some(value)
    }
    #[inline]
    fn insert(&self, key: u64, value: u64) -> bool {
        // SAFETY: a live map; NULL for the present value (not wanted). A full table answers
        // an error, here `false`, which the harness reports as a wrong answer.
        let status =
            unsafe { (self.ops.insert)(self.map.as_ptr(), key, value, core::ptr::null_mut()) };
        status == FloeStatus::Ok
    }
    #[inline]
    fn update(&self, key: u64, value: u64) -> bool {
        // SAFETY: a live map; NULL for the previous value (not wanted).
        let status =
            unsafe { (self.ops.put)(self.map.as_ptr(), key, value, core::ptr::null_mut()) };
        status == FloeStatus::Ok
    }
    #[inline]
    fn remove(&self, key: u64) -> bool {
        // SAFETY: as for `update`.
        let status = unsafe { (self.ops.remove)(self.map.as_ptr(), key, core::ptr::null_mut()) };
        status == FloeStatus::Ok
    }
    const GET_MANY: bool = true;
    /// `floe_map_get_many` with the C ABI's own prefetch depth (16, `FloeOptions`); `--batch`
    /// does not reach it.
    #[inline]
    fn get_many(
        &self,
        keys: &[u64],
        values: &mut [Option<u64>],
        _depth: usize,
        _prefetch: floe::Prefetch,
    ) {
        answer_many(keys, values, |keys, words, found| {
            // SAFETY: a live map; the three arrays have `keys.len()` items.
            let status = unsafe {
                (self.ops.get_many)(
                    self.map.as_ptr(),
                    keys.as_ptr(),
                    keys.len(),
                    words.as_mut_ptr(),
                    found.as_mut_ptr(),
                    keys.len(),
                )
            };
            assert_eq!(status, FloeStatus::Ok, "floe_map_get_many");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(floe_cpp)]
    #[test]
    fn the_cpp_mix64_is_floes() {
        for seed in [1, 7, u64::MAX] {
            let rust = floe::hash::Mix64::with_seed(seed);
            for key in [0, 1, 42, u64::MAX, 0x0123_4567_89ab_cdef] {
                // SAFETY: a pure function.
                assert_eq!(unsafe { floe_peer_mix64(key, seed) }, rust.hash_one(key));
            }
        }
    }

    /// A peer, if built, answers as a map should, with both kinds of hasher.
    fn check<P: Peer>() {
        if missing::<P>().is_some() {
            return;
        }
        for hasher in [AnyHash::Mix64(1), AnyHash::Ahash(&super::super::AHASH)] {
            let map = CppMap::<P>::new(16, hasher).unwrap();
            for key in 0..1000 {
                assert!(map.insert(key, key * 2));
            }
            assert!(!map.insert(5, 0));
            assert!(map.update(5, 11));
            assert!(!map.update(5000, 1));
            assert!(map.remove(6));
            assert!(!map.remove(6));
            let keys: Vec<u64> = (0..3000).collect();
            let mut values = vec![None; keys.len()];
            map.get_many(&keys, &mut values, 16, floe::Prefetch::Auto);
            for (key, value) in keys.iter().zip(&values) {
                let want = match key {
                    5 => Some(11),
                    6 => None,
                    k if *k < 1000 => Some(k * 2),
                    _ => None,
                };
                assert_eq!(*value, want, "key {key}");
                assert_eq!(map.get(*key), want, "key {key}");
            }
        }
    }

    #[test]
    fn every_built_peer_answers_as_a_map() {
        check::<Boost>();
        check::<Tbb>();
        check::<Libcuckoo>();
        check::<Absl>();
    }

    #[test]
    fn boosts_bulk_lookup_handles_repeated_and_missing_keys() {
        if missing::<Boost>().is_some() {
            return;
        }
        let map = CppMap::<Boost>::new(16, AnyHash::Mix64(1)).unwrap();
        map.insert(3, 30);
        map.insert(4, 40);
        let keys = [3, 3, 9, 4, 3, 9, 9, 4];
        let mut values = [None; 8];
        map.get_many(&keys, &mut values, 16, floe::Prefetch::Auto);
        let want = [
            Some(30),
            Some(30),
            None,
            Some(40),
            Some(30),
            None,
            None,
            Some(40),
        ];
        assert_eq!(values, want);
    }

    #[test]
    fn floe_through_its_c_abi_answers_as_floe() {
        let recipe = super::super::Recipe {
            capacity: 1000,
            hasher: AnyHash::Mix64(1),
            backend: floe::Backend::Auto,
            huge_pages: false,
            populate: false,
            churn: true,
            resize: floe::ResizeMode::Incremental,
        };
        let map = CapiFloe::new(&recipe).unwrap();
        assert!(map.insert(1, 10));
        assert!(!map.insert(1, 11));
        assert_eq!(map.get(1), Some(10));
        assert!(map.update(1, 12));
        assert!(!map.update(2, 1));
        let mut values = [None; 3];
        map.get_many(&[1, 2, 1], &mut values, 16, floe::Prefetch::Auto);
        assert_eq!(values, [Some(12), None, Some(12)]);
        assert!(map.remove(1));
        assert!(!map.remove(1));
        let other = super::super::Recipe {
            hasher: AnyHash::Ahash(&super::super::AHASH),
            ..recipe
        };
        assert!(CapiFloe::new(&other).is_err());
    }
}

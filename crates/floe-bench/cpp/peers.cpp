// floe-bench's C++ peers behind one C interface: a table of function pointers per map
// (`FloePeerOps`), which src/maps/cpp.rs turns into a `BenchMap`. build.rs compiles this file
// with FLOE_PEER_<NAME> defined for every library it found (and linked); a peer whose macro
// is not defined answers NULL from `floe_peer_ops`, and the bench says it is missing.
//
// Every operation is one call through the table, as floe's C ABI is measured (`floe-capi`):
// the same call per operation for every map on this side of the language boundary.

#include <cstddef>
#include <cstdint>
#include <new>

extern "C" {

// The bench's hasher: Mix64 with `seed` computed here (`hash` NULL), or a call back into
// Rust for the bench's other hashers.
struct FloePeerHash {
    uint64_t seed;
    uint64_t (*hash)(const void *context, uint64_t key);
    const void *context;
};

// One map's operations; `map` is what `create` returned.
struct FloePeerOps {
    void *(*create)(size_t capacity, FloePeerHash hash);
    void (*destroy)(void *map);
    bool (*get)(const void *map, uint64_t key, uint64_t *value);
    bool (*insert)(void *map, uint64_t key, uint64_t value);
    bool (*update)(void *map, uint64_t key, uint64_t value);
    bool (*remove)(void *map, uint64_t key);
    // Gets of `n` keys: `found[i]` and, when found, `values[i]`. The map's bulk lookup where
    // it has one (boost), otherwise one get per key.
    void (*get_many)(const void *map, const uint64_t *keys, size_t n, uint64_t *values,
                     bool *found);
};

}  // extern "C"

namespace {

// floe's Mix64 (crates/floe/src/hash.rs): one 64x64->128 multiply, the halves folded.
constexpr uint64_t kP0 = 0x243f6a8885a308d3ull;
constexpr uint64_t kP1 = 0x9e3779b97f4a7c15ull;

inline uint64_t mix64(uint64_t key, uint64_t seed) {
    unsigned __int128 product = static_cast<unsigned __int128>(key ^ seed ^ kP0) * kP1;
    return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}

struct Hash {
    FloePeerHash hash{};
    // boost skips its own post-mixing for hashers that say they avalanche. Mix64 does (its
    // high and low bits both depend on every key bit); so do the bench's other hashers.
    using is_avalanching = void;

    size_t operator()(uint64_t key) const noexcept {
        return hash.hash == nullptr ? mix64(key, hash.seed) : hash.hash(hash.context, key);
    }
};

// The C functions of a map type `M` that has get/insert/update/remove and a constructor
// from (capacity, Hash); `get_many` is the map's own if it has one.
template <class M>
struct Exports {
    static void *create(size_t capacity, FloePeerHash hash) noexcept {
        try {
            return new M(capacity, Hash{hash});
        } catch (...) {
            return nullptr;
        }
    }
    static void destroy(void *map) noexcept { delete static_cast<M *>(map); }
    // noexcept: an exception (out of memory while growing) ends the process, as a Rust
    // allocation failure would, rather than unwinding into Rust.
    static bool get(const void *map, uint64_t key, uint64_t *value) noexcept {
        return static_cast<const M *>(map)->get(key, value);
    }
    static bool insert(void *map, uint64_t key, uint64_t value) noexcept {
        return static_cast<M *>(map)->insert(key, value);
    }
    static bool update(void *map, uint64_t key, uint64_t value) noexcept {
        return static_cast<M *>(map)->update(key, value);
    }
    static bool remove(void *map, uint64_t key) noexcept {
        return static_cast<M *>(map)->remove(key);
    }
    static void get_many(const void *map, const uint64_t *keys, size_t n, uint64_t *values,
                         bool *found) noexcept {
        static_cast<const M *>(map)->get_many(keys, n, values, found);
    }
    static constexpr FloePeerOps ops{create, destroy, get, insert, update, remove, get_many};
};

// The maps without a bulk lookup: one get per key.
template <class M>
struct OneByOne {
    void get_many(const uint64_t *keys, size_t n, uint64_t *values, bool *found) const {
        for (size_t i = 0; i < n; i++) {
            found[i] = static_cast<const M *>(this)->get(keys[i], &values[i]);
        }
    }
};

}  // namespace

#ifdef FLOE_PEER_BOOST
#include <cstdlib>

// The parallel `visit_all` is not used here; with it, libstdc++'s <execution> would make
// oneTBB (its parallel backend) a link dependency of boost's map whenever TBB is installed.
#define BOOST_UNORDERED_DISABLE_PARALLEL_ALGORITHMS
#include <boost/unordered/concurrent_flat_map.hpp>

namespace {

// boost::concurrent_flat_map (Boost 1.83+): open addressing with SIMD groups of 15 slots and
// a lock per group; lookups by visitation (`cvisit`), bulk lookups by `cvisit` over a range of
// keys (`bulk_visit_size` keys at a time, their groups and then their elements prefetched).
struct Boost {
    boost::concurrent_flat_map<uint64_t, uint64_t, Hash> map;

    Boost(size_t capacity, Hash hash) : map(0, hash) { map.reserve(capacity); }

    bool get(uint64_t key, uint64_t *value) const {
        return map.cvisit(key, [&](const auto &pair) { *value = pair.second; }) != 0;
    }
    bool insert(uint64_t key, uint64_t value) { return map.emplace(key, value); }
    bool update(uint64_t key, uint64_t value) {
        return map.visit(key, [&](auto &pair) { pair.second = value; }) != 0;
    }
    bool remove(uint64_t key) { return map.erase(key) != 0; }

    // The bulk visit calls back with the elements found, not their keys' positions. It visits
    // in the order of the keys (each bulk's third loop walks them forward), so a cursor
    // finds each element's key: the keys it passes were not found.
    void get_many(const uint64_t *keys, size_t n, uint64_t *values, bool *found) const {
        size_t next = 0;
        map.cvisit(keys, keys + n, [&](const auto &pair) {
            while (next < n && keys[next] != pair.first) {
                found[next++] = false;
            }
            if (next == n) {
                std::abort();  // visited out of order: the cursor's premise is gone
            }
            values[next] = pair.second;
            found[next++] = true;
        });
        while (next < n) {
            found[next++] = false;
        }
    }
};

}  // namespace
#endif

#ifdef FLOE_PEER_TBB
#include <oneapi/tbb/concurrent_hash_map.h>

namespace {

// The hash and equality of tbb::concurrent_hash_map.
struct TbbCompare {
    Hash hash_of;
    size_t hash(uint64_t key) const { return hash_of(key); }
    bool equal(uint64_t a, uint64_t b) const { return a == b; }
};

// oneTBB's concurrent_hash_map: chained buckets, a reader-writer lock per element taken
// through accessors (`const_accessor` for reads).
struct Tbb : OneByOne<Tbb> {
    tbb::concurrent_hash_map<uint64_t, uint64_t, TbbCompare> map;

    Tbb(size_t capacity, Hash hash) : map(capacity, TbbCompare{hash}) {}

    bool get(uint64_t key, uint64_t *value) const {
        decltype(map)::const_accessor entry;
        if (!map.find(entry, key)) {
            return false;
        }
        *value = entry->second;
        return true;
    }
    bool insert(uint64_t key, uint64_t value) { return map.insert({key, value}); }
    bool update(uint64_t key, uint64_t value) {
        decltype(map)::accessor entry;
        if (!map.find(entry, key)) {
            return false;
        }
        entry->second = value;
        return true;
    }
    bool remove(uint64_t key) { return map.erase(key); }
};

}  // namespace
#endif

#ifdef FLOE_PEER_LIBCUCKOO
#include <libcuckoo/cuckoohash_map.hh>

namespace {

// libcuckoo's cuckoohash_map: bucketized cuckoo hashing with striped spinlocks.
struct Cuckoo : OneByOne<Cuckoo> {
    libcuckoo::cuckoohash_map<uint64_t, uint64_t, Hash> map;

    Cuckoo(size_t capacity, Hash hash) : map(capacity, hash) {}

    bool get(uint64_t key, uint64_t *value) const { return map.find(key, *value); }
    bool insert(uint64_t key, uint64_t value) { return map.insert(key, value); }
    bool update(uint64_t key, uint64_t value) { return map.update(key, value); }
    bool remove(uint64_t key) { return map.erase(key); }
};

}  // namespace
#endif

#ifdef FLOE_PEER_ABSL
#include <absl/container/flat_hash_map.h>

namespace {

// abseil's flat_hash_map (Swiss table), not thread-safe: the single-thread peer.
struct Absl : OneByOne<Absl> {
    absl::flat_hash_map<uint64_t, uint64_t, Hash> map;

    Absl(size_t capacity, Hash hash) : map(0, hash) { map.reserve(capacity); }

    bool get(uint64_t key, uint64_t *value) const {
        auto found = map.find(key);
        if (found == map.end()) {
            return false;
        }
        *value = found->second;
        return true;
    }
    bool insert(uint64_t key, uint64_t value) { return map.try_emplace(key, value).second; }
    bool update(uint64_t key, uint64_t value) {
        auto found = map.find(key);
        if (found == map.end()) {
            return false;
        }
        found->second = value;
        return true;
    }
    bool remove(uint64_t key) { return map.erase(key) != 0; }
};

}  // namespace
#endif

extern "C" {

// The operations of peer `peer` (0 boost, 1 tbb, 2 libcuckoo, 3 absl; src/maps/cpp.rs), or
// NULL if it was not compiled in.
const FloePeerOps *floe_peer_ops(uint32_t peer) {
    switch (peer) {
#ifdef FLOE_PEER_BOOST
    case 0: return &Exports<Boost>::ops;
#endif
#ifdef FLOE_PEER_TBB
    case 1: return &Exports<Tbb>::ops;
#endif
#ifdef FLOE_PEER_LIBCUCKOO
    case 2: return &Exports<Cuckoo>::ops;
#endif
#ifdef FLOE_PEER_ABSL
    case 3: return &Exports<Absl>::ops;
#endif
    default: return nullptr;
    }
}

// floe's Mix64 as computed here, for the test that it matches the Rust one.
uint64_t floe_peer_mix64(uint64_t key, uint64_t seed) { return mix64(key, seed); }

}  // extern "C"

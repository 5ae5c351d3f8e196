//! The bit layer: how a bin's header word, link word and key lanes are encoded, and the SIMD
//! group backends that match a key against a cache line. No atomics, no allocation, no
//! knowledge of the map.

pub(crate) mod group;
pub(crate) mod header;

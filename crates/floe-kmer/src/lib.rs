//! floe-kmer: a k-mer counter on floe's concurrent map.
//!
//! Reading order: [`kmer`] (2-bit k-mers, reverse complements, rolling extraction), then
//! [`parse`] (FASTA/FASTQ, plain or gzip, cut into chunks the workers share).

pub mod error;
pub mod kmer;
pub mod parse;

pub use crate::error::Error;

//! floe-kmer: a k-mer counter on floe's concurrent map.
//!
//! Reading order: [`kmer`] (2-bit k-mers, reverse complements, rolling extraction),
//! [`parse`] (FASTA/FASTQ, plain or gzip, cut into chunks the workers share), [`count`] (the
//! workers and the counting engines behind one interface), [`output`] (the sorted dump and
//! the histogram, as jellyfish prints them), then `main.rs` (the command line).

pub mod count;
pub mod error;
pub mod kmer;
pub mod output;
pub mod parse;

pub use crate::error::Error;

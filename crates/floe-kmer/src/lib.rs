//! floe-kmer: a k-mer counter, into a compact table of its own or floe's concurrent maps, with
//! jellyfish's database workflow.
//!
//! Reading order: [`kmer`] (2-bit k-mers, reverse complements, rolling extraction),
//! [`parse`] (FASTA/FASTQ, plain or gzip, cut into chunks the workers share), [`count`] (the
//! workers and the counting engines behind one interface), [`output`] (the dump, the histogram
//! and the statistics, as jellyfish prints them), [`db`] (the database file the counts are
//! kept in and read back from, and merging databases), [`destination`] (outputs that appear
//! only when complete), then `main.rs` (the command line).

pub mod count;
pub mod db;
pub mod destination;
pub mod error;
pub mod kmer;
pub mod output;
pub mod parse;

pub use crate::error::Error;

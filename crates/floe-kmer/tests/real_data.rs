//! floe-kmer against the naive counter of `common` on real reads: bowtie2's example reads
//! (Debian's bowtie2-examples; CI installs it), k = 15, 21, 31, 41 and 63, both strands. Skipped,
//! with a message, where the file is absent.

mod common;

use std::{io::Read, path::Path};

use common::naive_dump;
use floe_kmer::{
    count::{EngineKind, Settings},
    parse::{Input, Source},
};
use indicatif::ProgressBar;

const READS: &str = "/usr/share/doc/bowtie2/examples/reads/reads_1.fq.gz";

#[test]
fn bowtie2_example_reads_equal_the_naive_counter() {
    let path = Path::new(READS);
    if !path.exists() {
        println!("skipped: {READS} is absent (apt-get install bowtie2-examples)");
        return;
    }
    // The oracle reads the file its own way: decompressed whole, the second line of every
    // four.
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let sequences: Vec<&str> = text.lines().skip(1).step_by(4).collect();
    assert_eq!(
        sequences.len(),
        10_000,
        "bowtie2's reads_1.fq has 10,000 reads"
    );
    for k in [15, 21, 31, 41, 63] {
        for (canonical, engine) in [(false, EngineKind::Batched), (true, EngineKind::Compact)] {
            // floe's maps count k up to 32; the compact engine longer ones.
            let engine = if k > 32 { EngineKind::Compact } else { engine };
            let input = Input::new(vec![Source::Path(path.into())], ProgressBar::hidden()).unwrap();
            // A hint short of the k-mers (about 1.5M distinct at k = 31): the tables grow.
            let settings = Settings {
                k,
                canonical,
                threads: 2,
                size_hint: 1 << 16,
                engine,
            };
            let (dump, _) = common::floe_dump(input, &settings);
            let expected = naive_dump(&sequences, k, canonical);
            // Compared line by line first, so a failure shows where rather than two dumps
            // of a million lines.
            let first_difference = String::from_utf8_lossy(&dump)
                .lines()
                .zip(expected.lines())
                .position(|(a, b)| a != b);
            assert_eq!(first_difference, None, "k = {k}, canonical = {canonical}");
            assert!(
                dump == expected.as_bytes(),
                "k = {k}, canonical = {canonical}"
            );
        }
    }
}

//! floe-kmer's counts against the naive counter of `common`, on generated FASTA and FASTQ:
//! random sequences with N, IUPAC codes, gaps and lowercase, empty records, both framings
//! mixed in one file, CRLF, wrapped lines, several files, gzip in several members; counted
//! with tiny chunks and reads (so records and lines are cut everywhere), on 1 to 3 threads,
//! through every engine, for every k (1 to 64) and both strands.

mod common;

use std::{io::Write, sync::Arc};

use common::{naive_dump, Rng};
use floe_kmer::{
    count::{EngineKind, Settings},
    parse::{Input, Source},
};
use indicatif::ProgressBar;
use proptest::prelude::*;

/// One generated record.
#[derive(Clone, Debug)]
struct Record {
    sequence: Vec<u8>,
    fastq: bool,
    /// FASTA: letters per line.
    width: usize,
    /// A blank line after the record.
    blank_after: bool,
}

/// How the records are cut into files and the files written.
#[derive(Clone, Debug)]
struct Layout {
    crlf: bool,
    /// The last line of each file has no line end.
    unterminated: bool,
    /// Each file is gzip-compressed, in two members.
    gzip: bool,
    /// Records per file (the last file takes the rest).
    per_file: usize,
}

/// How the count is run.
#[derive(Clone, Debug)]
struct Run {
    k: usize,
    canonical: bool,
    threads: usize,
    engine: EngineKind,
    chunk_bases: usize,
    read_buffer: usize,
}

fn letter() -> impl Strategy<Value = u8> {
    prop_oneof![
        12 => prop::sample::select(b"ACGT".to_vec()),
        3 => prop::sample::select(b"acgt".to_vec()),
        1 => prop::sample::select(b"NnRYKMSWBDHV.-* ".to_vec()),
    ]
}

fn record() -> impl Strategy<Value = Record> {
    (
        prop::collection::vec(letter(), 0..120),
        any::<bool>(),
        1..70usize,
        prop::bool::weighted(0.2),
    )
        .prop_map(|(sequence, fastq, width, blank_after)| Record {
            sequence,
            fastq,
            width,
            blank_after,
        })
}

fn layout() -> impl Strategy<Value = Layout> {
    (any::<bool>(), any::<bool>(), any::<bool>(), 1..6usize).prop_map(
        |(crlf, unterminated, gzip, per_file)| Layout {
            crlf,
            unterminated,
            gzip,
            per_file,
        },
    )
}

fn run() -> impl Strategy<Value = Run> {
    (
        1..=64usize,
        any::<bool>(),
        1..=3usize,
        prop_oneof![
            Just(EngineKind::Compact),
            Just(EngineKind::Batched),
            Just(EngineKind::Unbatched),
            Just(EngineKind::Delegated)
        ],
        1..300usize,
        2..100usize,
    )
        .prop_map(
            |(k, canonical, threads, engine, chunk_bases, read_buffer)| Run {
                k,
                canonical,
                threads,
                // floe's maps count k up to 32; the compact engine longer ones.
                engine: if k > 32 { EngineKind::Compact } else { engine },
                chunk_bases,
                read_buffer,
            },
        )
}

/// The records as one file's text.
fn render(records: &[Record], layout: &Layout) -> Vec<u8> {
    let end: &[u8] = if layout.crlf { b"\r\n" } else { b"\n" };
    let mut text = Vec::new();
    for (i, record) in records.iter().enumerate() {
        if record.fastq {
            text.extend(format!("@read{i} a description").as_bytes());
            text.extend(end);
            text.extend(&record.sequence);
            text.extend(end);
            text.extend(b"+");
            text.extend(end);
            // Quality lines may start with '@'.
            text.extend(
                record
                    .sequence
                    .iter()
                    .enumerate()
                    .map(|(j, _)| b"@I#~!"[j % 5]),
            );
            text.extend(end);
        } else {
            text.extend(format!(">seq{i}").as_bytes());
            text.extend(end);
            for line in record.sequence.chunks(record.width) {
                text.extend(line);
                text.extend(end);
            }
        }
        if record.blank_after {
            text.extend(end);
        }
    }
    if layout.unterminated && text.ends_with(end) {
        text.truncate(text.len() - end.len());
    }
    text
}

fn gzip(text: &[u8]) -> Vec<u8> {
    let half = text.len() / 2;
    let mut out = Vec::new();
    for member in [&text[..half], &text[half..]] {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), Default::default());
        encoder.write_all(member).unwrap();
        out.extend(encoder.finish().unwrap());
    }
    out
}

/// floe-kmer's dump of `files`, run as `run` says.
fn floe_dump(files: Vec<Vec<u8>>, run: &Run) -> (String, u64) {
    let sources = files
        .into_iter()
        .enumerate()
        .map(|(i, data)| Source::Bytes {
            name: format!("file{i}"),
            data: Arc::from(data),
        })
        .collect();
    let input = Input::new(sources, ProgressBar::hidden())
        .unwrap()
        .chunk_bases(run.chunk_bases)
        .read_buffer(run.read_buffer);
    let settings = Settings {
        k: run.k,
        canonical: run.canonical,
        threads: run.threads,
        // Small, so the table grows while the workers count.
        size_hint: 16,
        engine: run.engine,
    };
    let (dump, total) = common::floe_dump(input, &settings);
    (String::from_utf8(dump).unwrap(), total)
}

/// The files of `records` as `layout` writes them.
fn files(records: &[Record], layout: &Layout) -> Vec<Vec<u8>> {
    records
        .chunks(layout.per_file)
        .map(|group| {
            let text = render(group, layout);
            if layout.gzip {
                gzip(&text)
            } else {
                text
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn counts_equal_the_naive_counter(
        records in prop::collection::vec(record(), 0..12),
        layout in layout(),
        run in run(),
    ) {
        let sequences: Vec<&[u8]> = records.iter().map(|r| r.sequence.as_slice()).collect();
        let expected = naive_dump(&sequences, run.k, run.canonical);
        let (dump, total) = floe_dump(files(&records, &layout), &run);
        prop_assert_eq!(&dump, &expected);
        let lines_total: u64 = expected
            .lines()
            .map(|line| line.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        prop_assert_eq!(total, lines_total);
    }
}

#[test]
fn every_k_on_both_strands() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let records: Vec<Record> = (0..40)
        .map(|i| {
            let len = (rng.next() % 400) as usize;
            Record {
                sequence: rng.text(b"ACGTACGTACGTACGTacgtN", len),
                fastq: i % 3 == 0,
                width: 1 + (rng.next() % 80) as usize,
                blank_after: i % 7 == 0,
            }
        })
        .collect();
    let layout = Layout {
        crlf: true,
        unterminated: true,
        gzip: false,
        per_file: 15,
    };
    let sequences: Vec<&[u8]> = records.iter().map(|r| r.sequence.as_slice()).collect();
    for k in 1..=64 {
        for canonical in [false, true] {
            let run = Run {
                k,
                canonical,
                threads: 2,
                engine: if k % 2 == 0 || k > 32 {
                    EngineKind::Compact
                } else {
                    EngineKind::Batched
                },
                chunk_bases: 97,
                read_buffer: 13,
            };
            let (dump, _) = floe_dump(files(&records, &layout), &run);
            assert_eq!(
                dump,
                naive_dump(&sequences, k, canonical),
                "k = {k}, canonical = {canonical}"
            );
        }
    }
}

#[test]
fn the_oracle_counts_a_known_example() {
    // Checked by hand, and `jellyfish count -m 3` (with and without -C) agrees.
    let records = ["ACGTNacgtAAAA", "", "ACGTRYACGT"];
    assert_eq!(
        naive_dump(&records, 3, false),
        "AAA 2\nACG 4\nCGT 4\nGTA 1\nTAA 1\n"
    );
    assert_eq!(
        naive_dump(&records, 3, true),
        "AAA 2\nACG 8\nGTA 1\nTAA 1\n"
    );
}

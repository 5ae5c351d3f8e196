//! The `floe-kmer` binary: its output on good input, and its message and exit code on each
//! kind of bad input (2 for usage errors, 1 for bad data; never a count that looks right).

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use common::{floe_kmer, gzip, naive_dump, run, text, write, Rng};

const FASTQ: &[u8] =
    b"@r1\nACGTACGTNNacgtac\n+\nIIIIIIIIIIIIIIII\n@r2\nGGGCCCATAT\n+r2\n@@@@@@@@@@\n";

#[test]
fn counts_fastq_as_the_oracle_does_and_writes_the_histogram() {
    let dir = tempfile::tempdir().unwrap();
    let reads = write(dir.path(), "reads.fq", FASTQ);
    let sequences = ["ACGTACGTNNacgtac", "GGGCCCATAT"];
    for canonical in [false, true] {
        let mut args = vec!["count", "-m", "4", "-t", "2", text(&reads)];
        if canonical {
            args.push("-C");
        }
        let ran = run(&args);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        assert_eq!(ran.stdout, naive_dump(&sequences, 4, canonical));
        assert!(ran.stderr.contains("k-mers written"), "{}", ran.stderr);
    }
    // ACGT, CGTA, GTAC (twice each), TACG, ACGT... as jellyfish histo counts them.
    let ran = run(&["count", "-m", "4", "--histo", "-q", text(&reads)]);
    assert_eq!((ran.code, ran.stderr.as_str()), (0, ""));
    let dump = naive_dump(&sequences, 4, false);
    let mut histogram = std::collections::BTreeMap::<u64, u64>::new();
    for line in dump.lines() {
        *histogram
            .entry(line.split(' ').nth(1).unwrap().parse().unwrap())
            .or_default() += 1;
    }
    let expected: String = histogram
        .iter()
        .map(|(c, n)| format!("{c} {n}\n"))
        .collect();
    assert_eq!(ran.stdout, expected);
    // --histo-high lumps the counts above it together.
    let ran = run(&[
        "count",
        "-m",
        "1",
        "--histo",
        "--histo-high",
        "3",
        "-q",
        text(&reads),
    ]);
    assert_eq!(
        ran.stdout, "4 4\n",
        "A, C, G, T each counted more than 3 times"
    );
}

#[test]
fn lower_and_upper_counts_filter_the_dump() {
    let dir = tempfile::tempdir().unwrap();
    let reads = write(dir.path(), "reads.fq", FASTQ);
    let all = run(&["count", "-m", "4", "-q", text(&reads)]).stdout;
    let kept: String = all
        .lines()
        .filter(|line| line.ends_with(" 2"))
        .map(|line| format!("{line}\n"))
        .collect();
    assert!(!kept.is_empty());
    let ran = run(&["count", "-m", "4", "-q", "-L", "2", "-U", "2", text(&reads)]);
    assert_eq!(ran.stdout, kept);
    let ran = run(&["count", "-m", "4", "-L", "3", "-U", "2", text(&reads)]);
    assert_eq!(ran.code, 2);
    assert!(ran
        .stderr
        .contains("--lower-count 3 is above --upper-count 2"));
}

#[test]
fn gzip_stdin_crlf_and_lowercase_give_the_same_counts() {
    let dir = tempfile::tempdir().unwrap();
    let fasta = b">a\nACGTTGCA\nAATTCCGG\n>b\nGATTACA\n";
    let variant = b">a\r\nacgtTGCA\r\naattccgg\r\n\r\n>b\r\nGATTACA";
    let plain = write(dir.path(), "plain.fa", fasta);
    // Named .txt: gzip is told by its magic bytes, not the name.
    let gz = write(dir.path(), "packed.txt", &gzip(variant));
    let expected = run(&["count", "-m", "5", "-C", "-q", text(&plain)]);
    assert_eq!(expected.code, 0);
    assert_eq!(
        expected.stdout,
        naive_dump(&["ACGTTGCAAATTCCGG", "GATTACA"], 5, true)
    );
    let from_gz = run(&["count", "-m", "5", "-C", "-q", text(&gz)]);
    assert_eq!(from_gz.stdout, expected.stdout);
    let from_stdin = floe_kmer(&["count", "-m", "5", "-C", "-q", "-"], variant);
    assert_eq!(
        (from_stdin.code, from_stdin.stdout),
        (0, expected.stdout.clone())
    );
    // Several files are counted together.
    let both = run(&["count", "-m", "5", "-C", "-q", text(&plain), text(&gz)]);
    let sequences = ["ACGTTGCAAATTCCGG", "GATTACA"].repeat(2);
    assert_eq!(both.stdout, naive_dump(&sequences, 5, true));
    let twice = floe_kmer(&["count", "-m", "5", "-", "-"], variant);
    assert_eq!(twice.code, 2);
    assert!(twice.stderr.contains("stdin ('-') is named more than once"));
}

/// A pipe or FIFO named as a file is read once, whole: nothing looks into it before the count
/// (a look at its first bytes for gzip took them from the count, and opening a FIFO to look
/// waited for a writer that had already gone).
#[test]
#[cfg(unix)]
fn pipes_and_fifos_named_as_files_are_counted_whole() {
    let dir = tempfile::tempdir().unwrap();
    let fasta = b">a\nACGTTGCAAATTCCGG\n>b\nGATTACA\n";
    let expected = naive_dump(&["ACGTTGCAAATTCCGG", "GATTACA"], 5, false);
    let through_stdin = floe_kmer(&["count", "-m", "5", "-q", "/dev/stdin"], fasta);
    assert_eq!(
        (through_stdin.code, through_stdin.stdout.as_str()),
        (0, expected.as_str()),
        "{}",
        through_stdin.stderr
    );
    let fifo = dir.path().join("reads.fifo");
    common::mkfifo(&fifo);
    for data in [fasta.to_vec(), gzip(fasta)] {
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::write(fifo, data).unwrap())
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_floe-kmer"))
            .args(["count", "-m", "5", "-q", text(&fifo)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Bounded: a count that hangs on the FIFO fails the test instead of stalling it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                // Let the writer go.
                let _ = std::fs::read(&fifo);
                panic!("the count of a FIFO hung");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        assert_eq!(
            (out.status.code(), String::from_utf8(out.stdout).unwrap()),
            (Some(0), expected.clone()),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A FASTA file of 60 random records of up to 12,000 bases, some N (some 360 kB).
fn random_fasta(dir: &Path) -> PathBuf {
    let mut rng = Rng(42);
    let mut fasta = Vec::new();
    for record in 0..60 {
        fasta.extend(format!(">r{record}\n").as_bytes());
        let len = (rng.next() % 12_000) as usize;
        for line in rng.text(b"ACGTACGTACGTN", len).chunks(60) {
            fasta.extend(line);
            fasta.push(b'\n');
        }
    }
    write(dir, "genome.fa", &fasta)
}

/// The sorted output of every engine at the k where a k-mer fills its 64 bits, and at the
/// smallest: the shared maps' output (one sorted part) once shifted a k-mer by 64 bits at
/// k = 32, which a release build wraps to no shift: every k-mer was dropped.
#[test]
fn every_engine_writes_every_kmer_at_k_1_and_32() {
    let dir = tempfile::tempdir().unwrap();
    let sequences = [
        "ACGTACGTACGTACGTACGTACGTACGTACGTACGTACGTAAACCCGGGTTT",
        "TTTTGCA",
    ];
    let fasta = write(
        dir.path(),
        "reads.fa",
        b">a\nACGTACGTACGTACGTACGTACGTACGTACGTACGTACGTAAACCCGGGTTT\n>b\nTTTTGCA\n",
    );
    for k in ["1", "32"] {
        let expected = naive_dump(&sequences, k.parse().unwrap(), false);
        assert!(!expected.is_empty());
        for engine in ["compact", "batched", "unbatched", "delegated"] {
            let ran = run(&["count", "-m", k, "--engine", engine, "-q", text(&fasta)]);
            assert_eq!(
                (ran.code, ran.stdout.as_str()),
                (0, expected.as_str()),
                "{engine}, k = {k}"
            );
            let db = dir.path().join(format!("{engine}-{k}.fkdb"));
            let ran = run(&[
                "count",
                "-m",
                k,
                "--engine",
                engine,
                "-q",
                "-o",
                text(&db),
                text(&fasta),
            ]);
            assert_eq!(ran.code, 0, "{}", ran.stderr);
            let dumped = run(&["dump", "-c", text(&db)]);
            assert_eq!(dumped.stdout, expected, "{engine}, k = {k}, database");
        }
    }
}

#[test]
fn more_threads_than_cores_and_both_engines_give_identical_output() {
    let dir = tempfile::tempdir().unwrap();
    let reads = random_fasta(dir.path());
    // A small size hint, so the table grows while four workers count into it.
    let one = run(&["count", "-m", "11", "-t", "1", "-q", text(&reads)]);
    assert_eq!(one.code, 0, "{}", one.stderr);
    assert!(one.stdout.lines().count() > 100_000);
    for engine in ["compact", "batched", "unbatched", "delegated"] {
        let four = run(&[
            "count",
            "-m",
            "11",
            "-t",
            "4",
            "-s",
            "1k",
            "--engine",
            engine,
            "-q",
            text(&reads),
        ]);
        assert_eq!(four.code, 0, "{}", four.stderr);
        assert!(four.stdout == one.stdout, "-t 4 --engine {engine} differs");
    }
}

#[test]
fn a_reader_that_stops_reading_is_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let reads = random_fasta(dir.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_floe-kmer"))
        .args(["count", "-m", "11", text(&reads)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read one line, then close the pipe, as `| head -1` does; the dump is megabytes, far
    // more than the pipe holds.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    assert!(
        line.starts_with("AAAAAAAA") && line.ends_with(" 1\n"),
        "{line}"
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn the_output_file_appears_only_when_complete() {
    let dir = tempfile::tempdir().unwrap();
    let reads = write(dir.path(), "reads.fq", FASTQ);
    let out = dir.path().join("counts.txt");
    let ran = run(&["count", "-m", "3", "--text", "-o", text(&out), text(&reads)]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let stdout = run(&["count", "-m", "3", "-q", text(&reads)]).stdout;
    assert_eq!(std::fs::read_to_string(&out).unwrap(), stdout);
    // A failed count leaves no output and no temporary file.
    let mut truncated = gzip(&FASTQ.repeat(50));
    truncated.truncate(truncated.len() - 10);
    let bad = write(dir.path(), "bad.fq.gz", &truncated);
    let failed_out = dir.path().join("failed.txt");
    let ran = run(&["count", "-m", "3", "-o", text(&failed_out), text(&bad)]);
    assert_eq!(ran.code, 1);
    assert!(ran.stderr.contains("truncated"), "{}", ran.stderr);
    assert!(
        !ran.stderr.contains("written"),
        "no summary: {}",
        ran.stderr
    );
    assert!(!failed_out.exists());
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["bad.fq.gz", "counts.txt", "reads.fq"]);
    // An output that cannot be made is a usage error, found before counting.
    let ran = run(&["count", "-m", "3", "-o", text(dir.path()), text(&reads)]);
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("it is a directory"), "{}", ran.stderr);
    let nowhere = dir.path().join("no/such/dir/out.txt");
    assert_eq!(
        run(&["count", "-m", "3", "-o", text(&nowhere), text(&reads)]).code,
        2
    );
}

#[test]
fn usage_errors_exit_with_2() {
    let dir = tempfile::tempdir().unwrap();
    let reads = write(dir.path(), "reads.fq", FASTQ);
    let missing = dir.path().join("missing.fq");
    let ran = run(&["count", "-m", "21", text(&reads), text(&missing)]);
    assert_eq!(ran.code, 2);
    assert!(
        ran.stderr.contains("missing.fq") && ran.stderr.contains("No such file"),
        "{}",
        ran.stderr
    );
    assert_eq!(ran.stdout, "");
    let ran = run(&["count", "-m", "21", text(dir.path())]);
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("it is a directory"), "{}", ran.stderr);
    for (args, says) in [
        (&["-m", "0"][..], "0 is not in 1..=64"),
        (&["-m", "65"], "65 is not in 1..=64"),
        (
            &["-m", "33", "--engine", "batched"],
            "--engine batched counts k up to 32",
        ),
        (&["-m", "x"], "invalid value 'x'"),
        (&["-m", "5", "-t", "0"], "0 is not in 1..=1024"),
        (&["-m", "5", "-s", "lots"], "not a size"),
        (&["-m", "5", "--engine", "magic"], "invalid value 'magic'"),
        (&["-m", "5", "--histo-high", "5"], "--histo"),
        (
            &["-m", "5", "--histo", "--histo-high", "0"],
            "--histo-high 0: the high count 0 is below the low count 1",
        ),
        (&["-m", "5", "--frobnicate"], "unexpected argument"),
    ] {
        let mut all = vec!["count"];
        all.extend(args);
        all.push(text(&reads));
        let ran = run(&all);
        assert_eq!(ran.code, 2, "{args:?}");
        assert!(ran.stderr.contains(says), "{args:?}: {}", ran.stderr);
    }
    let no_files = run(&["count", "-m", "5"]);
    assert_eq!(no_files.code, 2);
    let help = run(&["count", "--help"]);
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("Exit status:") && help.stdout.contains("2  usage error"));
}

#[test]
fn bad_data_exits_with_1_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8], &str); 5] = [
        (
            "mismatch.fq",
            b"@r1\nACGT\n+\nIIII\n@r2\nACGTA\n+\nIIII\n",
            "line 8: the quality line has 4 characters for 5 bases (record 2, '@r2')",
        ),
        (
            "garbage.bin",
            b"\x7fELF\x02\x01\x01\x00\x00\x00binary",
            "not a FASTA or FASTQ file: line 1 starts with byte 0x7f",
        ),
        (
            "binary.fa",
            b">a\nACGT\xff\xfe\x00ACGT\n",
            "line 2: byte 0xff in a sequence line is not text",
        ),
        (
            "short.fq",
            b"@r1\nACGT\n+\nIIII\n@r2\nACGT\n",
            "the file ends inside a FASTQ record, before its '+' line",
        ),
        (
            "reads.fq.xz",
            b"\xfd7zXZ\x00\x00\x04",
            "the file is xz-compressed",
        ),
    ];
    for (name, data, says) in cases {
        let path = write(dir.path(), name, data);
        let ran = run(&["count", "-m", "3", text(&path)]);
        assert_eq!(ran.code, 1, "{name}: {}", ran.stderr);
        assert!(ran.stderr.contains(says), "{name}: {}", ran.stderr);
        assert!(ran.stderr.contains(name), "{name}: {}", ran.stderr);
        assert_eq!(ran.stdout, "", "{name}: no counts");
    }
    let mut corrupt = gzip(&FASTQ.repeat(20));
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0xff;
    let path = write(dir.path(), "corrupt.fq.gz", &corrupt);
    let ran = run(&["count", "-m", "3", text(&path)]);
    assert_eq!(ran.code, 1);
    assert!(ran.stderr.contains("corrupt.fq.gz:"), "{}", ran.stderr);
    assert!(ran.stderr.contains("gzip data is"), "{}", ran.stderr);
}

#[test]
fn empty_inputs_count_nothing_and_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write(dir.path(), "empty.fa", b"");
    let headers = write(dir.path(), "headers.fa", b">a\n>b\n\n@c\n\n+\n\n");
    let empty_gz = write(dir.path(), "empty.gz", &gzip(b""));
    let ran = run(&[
        "count",
        "-m",
        "21",
        text(&empty),
        text(&headers),
        text(&empty_gz),
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(ran.stdout, "");
    assert!(
        ran.stderr.contains(": 0 21-mers, 0 distinct"),
        "{}",
        ran.stderr
    );
    let ran = floe_kmer(&["count", "-m", "21", "--histo", "-"], b"");
    assert_eq!((ran.code, ran.stdout.as_str()), (0, ""));
}

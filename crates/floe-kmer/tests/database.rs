//! The database through the binary: `count -o` writes it, and `dump`, `histo`, `query`,
//! `stats`, `merge` and `info` read it back to the same answers as counting again (the naive
//! oracle's); every damaged, truncated, missing, foreign or special file is refused with its
//! name, with nothing printed from it.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{floe_kmer, naive_dump, run, text, write, Rng};

/// Random sequences with some N, and the FASTA file holding them.
fn reads(dir: &Path, name: &str, seed: u64) -> (PathBuf, Vec<Vec<u8>>) {
    // xorshift's state must not be 0.
    let mut rng = Rng(seed | 1 << 40);
    let sequences: Vec<Vec<u8>> = (0..40)
        .map(|_| {
            let len = 20 + (rng.next() % 400) as usize;
            rng.text(b"ACGTACGTACGTN", len)
        })
        .collect();
    let mut fasta = Vec::new();
    for (i, sequence) in sequences.iter().enumerate() {
        fasta.extend_from_slice(format!(">r{i}\n").as_bytes());
        fasta.extend_from_slice(sequence);
        fasta.push(b'\n');
    }
    (write(dir, name, &fasta), sequences)
}

/// Counts `files` into the database `db`.
fn count(db: &Path, k: &str, canonical: bool, files: &[&Path]) {
    let mut args = vec!["count", "-q", "-m", k, "-o", text(db)];
    if canonical {
        args.push("-C");
    }
    args.extend(files.iter().map(|f| text(f)));
    let ran = run(&args);
    assert_eq!((ran.code, ran.stdout.as_str()), (0, ""), "{}", ran.stderr);
}

fn ok(args: &[&str]) -> String {
    let ran = run(args);
    assert_eq!(ran.code, 0, "{args:?}: {}", ran.stderr);
    ran.stdout
}

#[test]
fn what_the_database_answers_is_what_counting_again_gives() {
    let dir = tempfile::tempdir().unwrap();
    let (fasta, sequences) = reads(dir.path(), "reads.fa", 7);
    // Long k-mers (33 to 64, counted in 128-bit words) as well as short ones.
    for (k, canonical) in [
        (3, false),
        (11, true),
        (32, true),
        (17, false),
        (33, false),
        (47, true),
        (64, true),
    ] {
        let db = dir.path().join(format!("k{k}.fkdb"));
        count(&db, &k.to_string(), canonical, &[&fasta]);
        let expected = naive_dump(&sequences, k, canonical);
        let db = text(&db);
        assert_eq!(ok(&["dump", "-c", db]), expected, "k = {k}");
        let tabs = expected.replace(' ', "\t");
        assert_eq!(ok(&["dump", "-c", "-t", db]), tabs);
        let fasta_dump: String = expected
            .lines()
            .map(|line| {
                let (kmer, count) = line.split_once(' ').unwrap();
                format!(">{count}\n{kmer}\n")
            })
            .collect();
        assert_eq!(ok(&["dump", db]), fasta_dump);
        // -L and -U, the histogram and the statistics, as counting again prints them.
        let again = |extra: &[&str]| {
            let mut args = vec!["count", "-q", "-m", &*k.to_string(), text(&fasta)]
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>();
            if canonical {
                args.push("-C".to_owned());
            }
            args.extend(extra.iter().map(|s| s.to_string()));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ok(&args)
        };
        assert_eq!(
            ok(&["dump", "-c", "-L", "2", "-U", "3", db]),
            again(&["-L", "2", "-U", "3"])
        );
        assert_eq!(ok(&["histo", db]), again(&["--histo"]));
        assert_eq!(
            ok(&["histo", "-h", "2", db]),
            again(&["--histo", "--histo-high", "2"])
        );
        let counts: Vec<u64> = expected
            .lines()
            .map(|line| line.split_once(' ').unwrap().1.parse().unwrap())
            .collect();
        let stats = format!(
            "Unique:    {}\nDistinct:  {}\nTotal:     {}\nMax_count: {}\n",
            counts.iter().filter(|&&c| c == 1).count(),
            counts.len(),
            counts.iter().sum::<u64>(),
            counts.iter().max().unwrap()
        );
        assert_eq!(ok(&["stats", db]), stats);
        let info = ok(&["info", db]);
        assert!(
            info.contains(&format!("k: {k}\n"))
                && info.contains("command: ")
                && info.contains("reads.fa"),
            "{info}"
        );
    }
}

#[test]
fn queries_answer_for_either_strand_from_arguments_files_and_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let reads = write(dir.path(), "r.fa", b">a\nAACGTTNACGTT\n>b\nggtta\n");
    let plain = dir.path().join("plain.fkdb");
    let canonical = dir.path().join("canonical.fkdb");
    count(&plain, "4", false, &[&reads]);
    count(&canonical, "4", true, &[&reads]);
    // AACG once, ACGT twice, CGTT twice, GGTT once, GTTA once; canonically CGTT is AACG's
    // reverse complement (3 together) and GGTT is AACC's.
    assert_eq!(
        ok(&["query", text(&plain), "ACGT", "cgtt", "AACC", "TTTT"]),
        "ACGT 2\nCGTT 2\nAACC 0\nTTTT 0\n"
    );
    assert_eq!(
        ok(&["query", text(&canonical), "CGTT", "AACG", "GGTT", "TTTT"]),
        "AACG 3\nAACG 3\nAACC 1\nAAAA 0\n"
    );
    let queried = write(dir.path(), "q.fq", b"@q\nAACGTT\n+\nIIIIII\n");
    assert_eq!(
        ok(&["query", "-s", text(&queried), text(&canonical)]),
        "AACG 3\nACGT 2\nAACG 3\n"
    );
    let ran = floe_kmer(&["query", "-i", text(&plain)], b"ACGT\nGTTA\n");
    assert_eq!(
        (ran.code, ran.stdout.as_str()),
        (0, "2\n1\n"),
        "{}",
        ran.stderr
    );
    for bad in ["ACG", "ACGTA", "ACNT", ""] {
        let ran = run(&["query", text(&plain), "ACGT", bad]);
        assert_eq!(ran.code, 2, "{bad:?}");
        assert!(
            ran.stderr
                .contains("is not a k-mer of this database (k = 4"),
            "{}",
            ran.stderr
        );
        assert_eq!(
            ran.stdout, "",
            "nothing answered before the bad k-mer is found"
        );
    }
    let ran = floe_kmer(&["query", "-i", text(&plain)], b"ACGT\nAC\n");
    assert_eq!(ran.code, 2);
    assert_eq!(ran.stdout, "2\n");
    // A 40-mer, counted canonically: asked for as read and as its reverse complement.
    let forty = "ACGTTGCAAGGCTTACCGATCGGATCCATGACTAGCATTT";
    let reverse: String = forty
        .bytes()
        .rev()
        .map(|b| match b {
            b'A' => 'T',
            b'C' => 'G',
            b'G' => 'C',
            _ => 'A',
        })
        .collect();
    let long = write(
        dir.path(),
        "long.fa",
        format!(">x\n{forty}\n>y\n{reverse}\n>z\n{forty}\n").as_bytes(),
    );
    let long_db = dir.path().join("long.fkdb");
    count(&long_db, "40", true, &[&long]);
    let smaller = forty.min(reverse.as_str());
    assert_eq!(
        ok(&["query", text(&long_db), forty, &reverse, &"A".repeat(40)]),
        format!("{smaller} 3\n{smaller} 3\n{} 0\n", "A".repeat(40))
    );
    assert_eq!(
        ok(&["query", "-s", text(&long), text(&long_db)]),
        format!("{smaller} 3\n").repeat(3)
    );
    let ran = run(&["query", text(&long_db), &forty[..39]]);
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("k = 40"), "{}", ran.stderr);
}

#[test]
fn merging_adds_what_counting_the_files_together_gives() {
    let dir = tempfile::tempdir().unwrap();
    let (first, mut sequences) = reads(dir.path(), "a.fa", 1);
    let (second, more) = reads(dir.path(), "b.fa", 2);
    sequences.extend(more);
    let (a, b, both) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("both"),
    );
    // Long k-mers merge as short ones do.
    count(&a, "45", false, &[&first]);
    count(&b, "45", false, &[&second]);
    let merged = dir.path().join("merged");
    ok(&["merge", "-o", text(&merged), text(&a), text(&b)]);
    assert_eq!(
        ok(&["dump", "-c", text(&merged)]),
        naive_dump(&sequences, 45, false)
    );
    count(&a, "9", true, &[&first]);
    count(&b, "9", true, &[&second]);
    count(&both, "9", true, &[&first, &second]);
    ok(&["merge", "-o", text(&merged), text(&a), text(&b)]);
    assert_eq!(
        ok(&["dump", "-c", text(&merged)]),
        naive_dump(&sequences, 9, true)
    );
    assert_eq!(
        ok(&["dump", "-c", text(&merged)]),
        ok(&["dump", "-c", text(&both)])
    );
    // Into one of its own inputs: the input is read whole before the output replaces it.
    ok(&["merge", "-o", text(&a), text(&a), text(&b)]);
    assert_eq!(
        ok(&["dump", "-c", text(&a)]),
        ok(&["dump", "-c", text(&both)])
    );
    let other_k = dir.path().join("k8");
    count(&other_k, "8", true, &[&first]);
    let ran = run(&["merge", "-o", text(&merged), text(&b), text(&other_k)]);
    assert_eq!(ran.code, 2);
    assert!(ran.stderr.contains("cannot be merged"), "{}", ran.stderr);
    // The failed merge left the earlier output as it was.
    assert_eq!(
        ok(&["dump", "-c", text(&merged)]),
        ok(&["dump", "-c", text(&both)])
    );
}

/// Runs the binary, killing it if it has not finished in 20 s (a reader blocked on a FIFO).
fn run_bounded(args: &[&str]) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_floe-kmer"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("{args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn damaged_truncated_missing_foreign_and_special_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (fasta, _) = reads(dir.path(), "reads.fa", 3);
    let good = dir.path().join("good.fkdb");
    count(&good, "7", false, &[&fasta]);
    let bytes = std::fs::read(&good).unwrap();
    let bad = dir.path().join("bad.fkdb");
    let mut rng = Rng(11 << 40);
    let mut cases: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), Vec::new()),
        (
            "truncated by a byte".into(),
            bytes[..bytes.len() - 1].to_vec(),
        ),
        (
            "truncated to half".into(),
            bytes[..bytes.len() / 2].to_vec(),
        ),
        ("text".into(), b"ACGTACG 5\n".repeat(30)),
        (
            "a jellyfish header".into(),
            b"{\"alignment_key_value\"".repeat(10),
        ),
    ];
    for _ in 0..20 {
        let mut damaged = bytes.clone();
        let at = (rng.next() % bytes.len() as u64) as usize;
        damaged[at] ^= 1 << (rng.next() % 8);
        cases.push((format!("bit flipped at {at}"), damaged));
    }
    let out = dir.path().join("out");
    for (what, data) in &cases {
        std::fs::write(&bad, data).unwrap();
        let commands: [Vec<&str>; 6] = [
            vec!["dump", text(&bad)],
            vec!["histo", text(&bad)],
            vec!["query", text(&bad), "ACGTACG"],
            vec!["stats", text(&bad)],
            vec!["info", text(&bad)],
            vec!["merge", "-o", text(&out), text(&good), text(&bad)],
        ];
        for args in commands {
            let ran = run(&args);
            assert_eq!(ran.code, 1, "{what}, {args:?}: {}", ran.stderr);
            assert_eq!(ran.stdout, "", "{what}, {args:?}");
            assert!(
                ran.stderr.contains("bad.fkdb' is refused"),
                "{what}: {}",
                ran.stderr
            );
        }
    }
    assert!(!out.exists(), "no merge output from a refused input");
    std::fs::write(&bad, b"{\"alignment_key_value\"".repeat(10)).unwrap();
    assert!(run(&["stats", text(&bad)])
        .stderr
        .contains("a jellyfish database?"));
    // Missing, a directory, a FIFO: the command line's mistake (2), and no wait on the FIFO.
    let fifo = dir.path().join("fifo.fkdb");
    common::mkfifo(&fifo);
    for (path, says) in [
        (dir.path().join("missing.fkdb"), "No such file"),
        (dir.path().to_owned(), "it is a directory"),
        (fifo, "not a regular file"),
    ] {
        for command in ["dump", "histo", "stats", "info"] {
            let (code, stderr) = run_bounded(&[command, text(&path)]);
            assert_eq!(code, 2, "{command} {path:?}: {stderr}");
            assert!(
                stderr.contains(says) && stderr.contains(text(&path)),
                "{stderr}"
            );
        }
    }
    // The good file still answers after all that.
    assert_eq!(
        ok(&["dump", "-c", text(&good)]),
        ok(&["count", "-q", "-m", "7", text(&fasta)])
    );
}

#[test]
fn usage_errors_of_the_readers_exit_with_2() {
    let dir = tempfile::tempdir().unwrap();
    let (fasta, _) = reads(dir.path(), "reads.fa", 5);
    let db = dir.path().join("db");
    count(&db, "5", false, &[&fasta]);
    let db = text(&db);
    for (args, says) in [
        (
            &["histo", "-l", "5", "-h", "4", db][..],
            "below the low count",
        ),
        (&["histo", "-i", "0", db], "increment of 0"),
        (
            &["dump", "-L", "3", "-U", "2", db],
            "is above --upper-count",
        ),
        (&["merge", db], "--output"),
        (&["merge", "-o", "x", "-m", "-M", db], "cannot be used with"),
        (&["query", db, "ACGT"], "not a k-mer"),
        (&["dump", "--frobnicate", db], "unexpected argument"),
    ] {
        let ran = run(args);
        assert_eq!(ran.code, 2, "{args:?}: {}", ran.stderr);
        assert!(ran.stderr.contains(says), "{args:?}: {}", ran.stderr);
    }
    // Without -o a count writes text, so asking for a database on stdout is no error; a
    // database is never written to a terminal or pipe.
    let ran = run(&["count", "-q", "-m", "5", "-o", "-", text(&fasta)]);
    assert_eq!(ran.code, 0);
    assert!(ran
        .stdout
        .lines()
        .all(|line| line.len() > 6 && line.contains(' ')));
    let help = run(&["histo", "--help"]);
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("--high"), "{}", help.stdout);
}

#[test]
fn a_count_within_a_memory_budget_answers_as_one_without() {
    let dir = tempfile::tempdir().unwrap();
    // 300k random bases (gzip, so the passes decompress again): about 300k distinct 21-mers,
    // where --memory 20M leaves the table 2^18 slots (236k k-mers): several passes; as many
    // 41-mers, in 2^17 slots of 16 bytes.
    let mut rng = Rng(11 | 1 << 40);
    let mut fasta = b">long\n".to_vec();
    fasta.extend(rng.text(b"ACGT", 300_000));
    fasta.extend_from_slice(b"\n>short\nACGTNNACGTACGTAAAAAAAAAAAAAAAAAAAAAAAAA\n");
    let reads = write(dir.path(), "reads.fa.gz", &common::gzip(&fasta));
    for (k, canonical) in [("21", false), ("21", true), ("41", true)] {
        let strand: &[&str] = if canonical { &["-C"] } else { &[] };
        let with = |extra: &[&str]| -> Vec<String> {
            let mut args = vec!["count", "-m", k];
            args.extend_from_slice(strand);
            args.extend_from_slice(extra);
            args.push(text(&reads));
            args.into_iter().map(str::to_owned).collect()
        };
        fn strs(args: &[String]) -> Vec<&str> {
            args.iter().map(String::as_str).collect()
        }
        let counted = |args: Vec<String>| ok(&strs(&args));
        // The database: same records as one pass writes.
        let (one, passes) = (dir.path().join("one.fkdb"), dir.path().join("passes.fkdb"));
        counted(with(&["-q", "-o", text(&one)]));
        let ran = run(&strs(&with(&["--memory", "20M", "-o", text(&passes)])));
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        let passes_run: usize = ran
            .stderr
            .split(" passes within ")
            .next()
            .and_then(|head| head.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no pass count in {:?}", ran.stderr));
        assert!(passes_run > 1, "{}", ran.stderr);
        let dump = |db: &Path| ok(&["dump", "-c", text(db)]);
        assert_eq!(dump(&passes), dump(&one), "k = {k}, canonical: {canonical}");
        let stats = |db: &Path| ok(&["stats", text(db)]);
        assert_eq!(stats(&passes), stats(&one));
        // Nothing left beside the output: the passes' directory is gone.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // The text dump and the histogram, straight from the passes.
        assert_eq!(
            counted(with(&["-q", "--memory", "20M"])),
            counted(with(&["-q"])),
            "canonical: {canonical}"
        );
        assert_eq!(
            counted(with(&["-q", "--histo", "--memory", "20M"])),
            counted(with(&["-q", "--histo"]))
        );
        // -L and -U as without passes.
        assert_eq!(
            counted(with(&["-q", "-L", "2", "--memory", "21M"])),
            counted(with(&["-q", "-L", "2"]))
        );
    }
}

#[test]
fn a_memory_budget_refuses_what_it_cannot_read_twice_and_budgets_too_small() {
    let dir = tempfile::tempdir().unwrap();
    let (fasta, _) = reads(dir.path(), "reads.fa", 3);
    let refused = |args: &[&str], stdin: &[u8], says: &str| {
        let ran = floe_kmer(args, stdin);
        assert_eq!(ran.code, 2, "{args:?}: {}", ran.stderr);
        assert!(ran.stderr.contains(says), "{args:?}: {}", ran.stderr);
        assert_eq!(ran.stdout, "");
    };
    refused(
        &["count", "-m", "5", "--memory", "20M", "-"],
        b">r\nACGTACGT\n",
        "<stdin> can be read only once",
    );
    refused(
        &["count", "-m", "5", "--memory", "1000", text(&fasta)],
        b"",
        "below the least a count takes",
    );
    refused(
        &["count", "-m", "5", "--memory", "lots", text(&fasta)],
        b"",
        "not a size in bytes",
    );
    refused(
        &[
            "count",
            "-m",
            "5",
            "--memory",
            "20M",
            "--engine",
            "batched",
            text(&fasta),
        ],
        b"",
        "needs the compact engine",
    );
    #[cfg(unix)]
    {
        let fifo = dir.path().join("fifo");
        common::mkfifo(&fifo);
        // Refused before anything opens it (an open would wait for a writer).
        refused(
            &["count", "-m", "5", "--memory", "20M", text(&fifo)],
            b"",
            "can be read only once",
        );
    }
}

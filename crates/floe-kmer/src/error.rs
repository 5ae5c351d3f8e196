//! What a count can fail with, and the exit code each failure gives.

use core::fmt;

/// A failed count. The variants are the exit codes' classes: a usage error is the command
/// line's fault (exit 2), the others are the data's or the system's (exit 1).
#[derive(Debug)]
pub enum Error {
    /// The command line asks for something impossible: a file that does not exist or cannot
    /// be read, a directory, stdin twice, an output that cannot be created.
    Usage(String),
    /// The input is not what it claims: malformed FASTA/FASTQ, binary data, truncated or
    /// corrupt gzip, an unsupported compression, a read that failed. The message names the
    /// file and, where it has one, the line.
    Input(String),
    /// The table refused a k-mer (out of memory, or a capped table full): the counts would be
    /// incomplete, so there are none.
    Table(floe::Error),
    /// A table capped by a memory budget ([`count_within`]) would have had to grow past
    /// its cap of `table_bytes`. A count in passes ([`passes`]) then splits the pass's
    /// k-mers in two and counts each half on its own.
    ///
    /// [`count_within`]: crate::count::count_within
    /// [`passes`]: crate::count::passes
    OverBudget {
        /// The most the table could take.
        table_bytes: usize,
    },
    /// Writing the counts failed.
    Output(String),
    /// A check of floe-kmer's own work failed (the counts do not add up to the k-mers read):
    /// a bug, reported rather than printed as counts.
    Internal(String),
}

impl Error {
    /// The process exit code for this error: 2 for usage errors, 1 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            Error::Input(_)
            | Error::Table(_)
            | Error::OverBudget { .. }
            | Error::Output(_)
            | Error::Internal(_) => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(message) | Error::Input(message) | Error::Output(message) => {
                f.write_str(message)
            }
            Error::Table(error) => write!(f, "the k-mer table cannot take more k-mers: {error}"),
            Error::OverBudget { table_bytes } => write!(
                f,
                "the k-mer table would grow past {table_bytes} bytes, its share of the memory \
                 budget"
            ),
            Error::Internal(message) => write!(f, "internal error (a bug): {message}"),
        }
    }
}

impl std::error::Error for Error {}

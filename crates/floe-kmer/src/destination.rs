//! Where a command's output goes: stdout, or a file that appears only once complete.

use std::{
    fs::File,
    io::{self, Write},
    path::{Path, PathBuf},
};

use crate::Error;

/// Stdout, or a temporary file beside the output that is renamed to it once complete (so a
/// failed command never leaves a partial output behind, and a reader of the old file never
/// sees a half-written new one).
pub enum Destination {
    /// Standard output.
    Stdout,
    /// A file, written under a temporary name.
    File {
        /// Where it is written until [`commit`](Destination::commit).
        temporary: tempfile::NamedTempFile,
        /// Where it goes then.
        path: PathBuf,
    },
}

impl Destination {
    /// The file `path`, or stdout for `None` and `-`. The temporary file is made now, so an
    /// output that cannot be created fails before any work is done.
    ///
    /// # Errors
    /// [`Error::Usage`] if `path` is a directory or its directory cannot take a new file.
    pub fn create(path: Option<&Path>) -> Result<Destination, Error> {
        let Some(path) = path.filter(|p| p.as_os_str() != "-") else {
            return Ok(Destination::Stdout);
        };
        let usage = |why: String| {
            Error::Usage(format!(
                "cannot write the output '{}': {why}",
                path.display()
            ))
        };
        if path.is_dir() {
            return Err(usage("it is a directory".to_owned()));
        }
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let mut builder = tempfile::Builder::new();
        builder.prefix(".floe-kmer-");
        #[cfg(unix)]
        {
            // The permissions of a file made by `>` (the umask applies), not tempfile's 0600.
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o644));
        }
        let temporary = builder.tempfile_in(dir).map_err(|e| usage(e.to_string()))?;
        Ok(Destination::File {
            temporary,
            path: path.to_owned(),
        })
    }

    /// Writes through `write` (to the temporary file, which [`commit`](Self::commit) puts in
    /// place). Returns what `write` returned, or `None` if stdout was closed by its reader
    /// (`floe-kmer ... | head`): the reader wanted no more, which is no failure (as
    /// ripgrep and the tools killed by SIGPIPE treat it).
    ///
    /// # Errors
    /// [`Error::Output`] if writing or syncing failed.
    pub fn write(
        &mut self,
        write: impl FnOnce(&mut dyn Write) -> io::Result<u64>,
    ) -> Result<Option<u64>, Error> {
        match self {
            Destination::Stdout => match write(&mut io::stdout().lock()) {
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(None),
                written => written.map(Some).map_err(failed),
            },
            Destination::File { temporary, .. } => {
                let written = write(temporary.as_file_mut()).map_err(failed)?;
                // On disk before the rename, so a crash leaves the old file or the whole new
                // one.
                temporary.as_file().sync_all().map_err(failed)?;
                Ok(Some(written))
            }
        }
    }

    /// Writes a file that must be seekable (a database) through `write`, then syncs it.
    ///
    /// # Errors
    /// [`Error::Usage`] for stdout (a database is a file: `-o FILE`); `write`'s;
    /// [`Error::Output`] if syncing failed.
    pub fn write_file<T>(
        &mut self,
        write: impl FnOnce(&mut File) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let Destination::File { temporary, .. } = self else {
            return Err(Error::Usage(
                "a database is written to a file: name it with -o FILE".to_owned(),
            ));
        };
        let written = write(temporary.as_file_mut())?;
        temporary.as_file().sync_all().map_err(failed)?;
        Ok(written)
    }

    /// Renames a file output into place (nothing for stdout).
    ///
    /// # Errors
    /// [`Error::Output`] if the rename failed.
    pub fn commit(self) -> Result<(), Error> {
        if let Destination::File { temporary, path } = self {
            temporary.persist(&path).map_err(|e| {
                Error::Output(format!(
                    "cannot rename the output into '{}': {e}",
                    path.display()
                ))
            })?;
        }
        Ok(())
    }
}

fn failed(e: io::Error) -> Error {
    Error::Output(format!("writing the output failed: {e}"))
}

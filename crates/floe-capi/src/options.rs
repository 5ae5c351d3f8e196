//! `FloeOptions`: how a C caller configures a map, zero meaning "the default" in every field
//! so that `FloeOptions options = {0};` (or a NULL pointer) asks for floe's defaults.

use floe::{hash::Mix64, Backend, Builder, ResizeMode};

use crate::status::FloeStatus;

/// Options for `floe_map_new` and `floe_bytes_new`. Every field's zero is its default, so a
/// zeroed struct (or a NULL pointer) builds the map floe builds by default.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FloeOptions {
    /// Keys the first table is sized for (0: 1024). The map grows past it on demand.
    pub capacity: usize,
    /// Never grow past this many bins (0: no limit). A map at its limit answers an insert that
    /// finds no room with `FLOE_STATUS_FULL`. A limit no larger than the first table's bins
    /// makes a fixed-size map, whose operations are a little cheaper.
    pub max_bins: usize,
    /// Bins per link bucket in the overflow pool (0: 8). Smaller values give unlucky bins more
    /// room, at 64 bytes per link bucket.
    pub bins_per_link: usize,
    /// The hasher's seed (0: a random one, drawn per map). Give a fixed seed for runs that
    /// must repeat; keep it random for keys from untrusted sources.
    pub seed: u64,
    /// A `FloeBackend` (0: `FLOE_BACKEND_AUTO`).
    pub backend: u32,
    /// A `FloeResizeMode` (0: `FLOE_RESIZE_MODE_INCREMENTAL`).
    pub resize_mode: u32,
    /// Nonzero: no transparent huge pages for the table (0: huge pages for tables of 2 MiB
    /// and more, which suits large tables; off bounds the time one insert can wait for the
    /// kernel to fault in a page).
    pub no_huge_pages: u32,
    /// How many requests ahead the batch calls prefetch (0: floe's default, 64; at most 128).
    pub batch_depth: u32,
}

/// The matching code a map uses (the values of `FloeOptions::backend`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloeBackend {
    /// The fastest this CPU has, measured once per process.
    Auto = 0,
    /// Portable code.
    Scalar = 1,
    /// x86-64 AVX2.
    Avx2 = 2,
    /// x86-64 AVX-512F for lookups.
    Avx512 = 3,
}

/// How a map moves its keys when it grows (the values of `FloeOptions::resize_mode`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloeResizeMode {
    /// Each operation that finds the map growing moves a bounded share: flat tail latency.
    Incremental = 0,
    /// Every thread that finds the map growing helps until the growth is done.
    Blocking = 1,
}

/// What the batch calls prefetch ahead by default (floe's own default).
const DEFAULT_BATCH_DEPTH: usize = floe::batch::DEFAULT_DEPTH;

impl FloeOptions {
    /// Apply these options to a builder of either map, or say which field is out of range.
    pub(crate) fn configure<K, V, T>(
        &self,
        builder: Builder<K, V, floe::hash::DefaultHashBuilder, T>,
    ) -> Result<Builder<K, V, Mix64, T>, FloeStatus> {
        let backend = match self.backend {
            0 => Backend::Auto,
            1 => Backend::Scalar,
            2 => Backend::Avx2,
            3 => Backend::Avx512,
            _ => return Err(FloeStatus::InvalidOption),
        };
        let resize_mode = match self.resize_mode {
            0 => ResizeMode::Incremental,
            1 => ResizeMode::Blocking,
            _ => return Err(FloeStatus::InvalidOption),
        };
        if self.batch_depth as usize > floe::batch::MAX_DEPTH {
            return Err(FloeStatus::InvalidOption);
        }
        let mut builder = builder
            .hasher(match self.seed {
                0 => Mix64::new(),
                seed => Mix64::with_seed(seed),
            })
            .backend(backend)
            .resize_mode(resize_mode)
            .huge_pages(self.no_huge_pages == 0);
        if self.capacity != 0 {
            builder = builder.capacity(self.capacity);
        }
        if self.max_bins != 0 {
            builder = builder.max_bins(self.max_bins);
        }
        if self.bins_per_link != 0 {
            builder = builder.bins_per_link(self.bins_per_link);
        }
        Ok(builder)
    }

    /// The prefetch distance of the map's batch calls.
    pub(crate) fn batch_depth(&self) -> usize {
        match self.batch_depth {
            0 => DEFAULT_BATCH_DEPTH,
            depth => depth as usize,
        }
    }

    /// The caller's options: NULL is the defaults.
    ///
    /// # Safety
    /// `options` is NULL or valid for a read of `FloeOptions`.
    pub(crate) unsafe fn read(options: *const FloeOptions) -> FloeOptions {
        // SAFETY: NULL or valid (the caller's contract); the struct is plain integers, so
        // any bits the caller left in it are a value.
        unsafe { options.as_ref() }.copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_fields_are_refused() {
        let bad = [
            FloeOptions {
                backend: 4,
                ..FloeOptions::default()
            },
            FloeOptions {
                resize_mode: 2,
                ..FloeOptions::default()
            },
            FloeOptions {
                batch_depth: 129,
                ..FloeOptions::default()
            },
        ];
        for options in bad {
            let builder = floe::FlatMap::<u64, u64>::builder();
            assert_eq!(
                options.configure(builder).err(),
                Some(FloeStatus::InvalidOption)
            );
        }
    }

    #[test]
    fn zeroed_options_build_the_default_map() {
        let options = FloeOptions::default();
        let map = options
            .configure(floe::FlatMap::<u64, u64>::builder())
            .unwrap()
            .build()
            .unwrap();
        let default = floe::FlatMap::<u64, u64>::new();
        assert_eq!(map.capacity(), default.capacity());
        assert_eq!(options.batch_depth(), DEFAULT_BATCH_DEPTH);
    }
}

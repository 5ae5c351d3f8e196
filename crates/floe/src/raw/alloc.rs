//! Table memory: one zeroed, 2 MiB-aligned region per array, advised for transparent huge
//! pages.
//!
//! A table of tens of millions of bins is touched at random, so with 4 KiB pages nearly every
//! access also misses the TLB; 2 MiB pages cut the page-walk cost (the benchmark measures the
//! difference, see `BENCHMARKS.md`). Large tables come straight from `mmap`: the kernel hands
//! out zero pages lazily, so creating a table costs nothing until it is used, and zero is a
//! valid initial state for every bin (all slots Invalid, version 0, nothing chained). Small
//! tables (under one huge page) and Miri use the global allocator.
//!
//! Under loom the arrays are ordinary boxed slices of freshly constructed values, because
//! loom's atomics cannot be conjured from zeroed memory.

use core::ops::Deref;
#[cfg(not(floe_loom))]
use core::ptr::NonNull;
#[cfg(not(floe_loom))]
use std::sync::Arc;

/// The size and alignment of a transparent huge page on x86-64.
#[cfg(not(floe_loom))]
pub(crate) const HUGE_PAGE: usize = 2 << 20;
/// The kernel's base page: the unit a file mapping's dirty memory is written back in.
#[cfg(not(floe_loom))]
pub(crate) const PAGE: usize = 4096;

/// Whether a table of `bytes` can be had: refuse what the machine cannot hold, instead of
/// granting a lazy mapping whose first writes would have the process killed. `written`: the
/// table is written all over at once (a growth, `reserve` or a shrink moving keys into it), so
/// it must fit in the memory available now (`MemAvailable` plus free swap); otherwise it only
/// must fit in the machine (RAM plus swap), since a table built up front is written as keys
/// arrive. Where the figures cannot be read (not Linux, no `/proc`, Miri), every size is allowed.
pub(crate) fn memory_fits(bytes: usize, written: bool) -> bool {
    // Miri's isolation forbids reading host files (and its tables are small). Tables below
    // 64 MiB are not worth the look: reading /proc/meminfo costs more than building them
    // (a fuzzer growing tiny tables spent its time there).
    if cfg!(miri) || bytes < 64 << 20 {
        return true;
    }
    let Ok(meminfo) = std::fs::read_to_string("/proc/meminfo") else {
        return true;
    };
    let field = |name: &str| {
        meminfo
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|kib| kib.trim().parse::<usize>().ok())
            .map(|kib| kib.saturating_mul(1024))
    };
    let limit = if written {
        field("MemAvailable").zip(field("SwapFree"))
    } else {
        field("MemTotal").zip(field("SwapTotal"))
    };
    limit.is_none_or(|(memory, swap)| bytes <= memory.saturating_add(swap))
}

/// Types whose all-zero bit pattern is a valid value and the intended initial state.
///
/// # Safety
/// Implementors guarantee that zeroed memory of `size_of::<Self>()` bytes is a valid `Self`.
pub(crate) unsafe trait ZeroInit: Sized {
    /// The same value built normally (what loom models use).
    #[cfg(floe_loom)]
    fn new_zeroed() -> Self;
}

/// An owned array of `T`s, zero-initialised.
#[cfg(not(floe_loom))]
pub(crate) struct TableMemory<T> {
    ptr: NonNull<T>,
    len: usize,
    backing: Backing,
}

#[cfg(not(floe_loom))]
enum Backing {
    /// A mapping of its own, or one made ready ahead of time (`prepare.rs`), which may be
    /// shared with the thread still faulting it in.
    Mapped(Arc<Region>),
    /// A part of a mapping shared with other arrays (a persistent table's file holds its bins
    /// and its pool): only this part's bytes are counted as its own.
    Part(#[allow(dead_code)] Arc<Region>),
    /// From the global allocator.
    Heap { layout: std::alloc::Layout },
    /// Zero elements: nothing allocated.
    Empty,
}

// SAFETY: `TableMemory` owns its allocation like a `Box<[T]>`; sending or sharing it is as safe
// as sending or sharing the `T`s.
#[cfg(not(floe_loom))]
unsafe impl<T: Send> Send for TableMemory<T> {}
// SAFETY: as above: shared access only hands out `&T`.
#[cfg(not(floe_loom))]
unsafe impl<T: Sync> Sync for TableMemory<T> {}

#[cfg(not(floe_loom))]
impl<T: ZeroInit> TableMemory<T> {
    /// Allocate `len` zeroed elements. Returns `None` if the size overflows or the memory
    /// cannot be had. `huge_pages` asks the kernel for transparent huge pages (only for
    /// regions of at least one huge page).
    pub(crate) fn zeroed(len: usize, huge_pages: bool) -> Option<Self> {
        let bytes = len.checked_mul(core::mem::size_of::<T>())?;
        if bytes == 0 {
            return Some(Self {
                ptr: NonNull::dangling(),
                len,
                backing: Backing::Empty,
            });
        }
        if cfg!(not(miri)) && cfg!(unix) && bytes >= HUGE_PAGE {
            return Self::in_region(Arc::new(Region::map(bytes, huge_pages)?), len);
        }
        let layout =
            std::alloc::Layout::from_size_align(bytes, core::mem::align_of::<T>().max(64)).ok()?;
        // SAFETY: `layout` has a non-zero size (checked above).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw.cast::<T>())?;
        Some(Self {
            ptr,
            len,
            backing: Backing::Heap { layout },
        })
    }

    /// `len` elements at the start of `region`, which nothing has written (a fresh mapping,
    /// faulted in or not, is all zeroes). `None` if they do not fit.
    pub(crate) fn in_region(region: Arc<Region>, len: usize) -> Option<Self> {
        let bytes = len.checked_mul(core::mem::size_of::<T>())?;
        if bytes > region.bytes || bytes == 0 {
            return None;
        }
        Some(Self {
            ptr: NonNull::new(region.base.cast::<T>())?,
            len,
            backing: Backing::Mapped(region),
        })
    }

    /// `len` elements from byte `offset` of `region` (a multiple of 64), whatever the region
    /// holds: a file mapping written by an earlier table of the same layout, or fresh zeroes.
    /// Every bit pattern is a valid bin or link bucket (atomics and plain words), so any
    /// content is sound to read; whether it is a consistent table is recovery's business
    /// (`persist/recover.rs`). `None` if they do not fit.
    pub(crate) fn in_region_at(region: Arc<Region>, offset: usize, len: usize) -> Option<Self> {
        let bytes = len.checked_mul(core::mem::size_of::<T>())?;
        if bytes == 0 || !offset.is_multiple_of(64) || offset.checked_add(bytes)? > region.bytes {
            return None;
        }
        // SAFETY: `offset + bytes` lies inside the mapping (checked above).
        let start = unsafe { region.base.cast::<u8>().add(offset) };
        Some(Self {
            ptr: NonNull::new(start.cast::<T>())?,
            len,
            backing: Backing::Part(region),
        })
    }

    /// Bytes the region occupies (rounded to pages for mappings).
    pub(crate) fn bytes(&self) -> usize {
        match &self.backing {
            Backing::Mapped(region) => region.bytes,
            Backing::Part(_) => self.len * core::mem::size_of::<T>(),
            Backing::Heap { layout } => layout.size(),
            Backing::Empty => 0,
        }
    }

    /// Whether the region was advised for transparent huge pages.
    pub(crate) fn huge_pages(&self) -> bool {
        matches!(&self.backing, Backing::Mapped(region) if region.huge)
    }

    /// Fault a mapping of its own in now (`Region::populate`), so that first touches cost no
    /// page fault later (`Builder::populate`); heap memory and parts of a file's mapping are
    /// left as they are. `false` if the kernel could not.
    pub(crate) fn populate(&self) -> bool {
        match &self.backing {
            Backing::Mapped(region) => region.populate(0, region.bytes),
            Backing::Part(_) | Backing::Heap { .. } | Backing::Empty => true,
        }
    }
}

/// An anonymous private mapping of whole huge pages, aligned to a huge page, advised for
/// transparent huge pages or against them, and unmapped when dropped. Fresh, it reads as zero
/// and costs nothing until touched; [`populate`](Self::populate) faults parts of it in
/// without writing them.
#[cfg(not(floe_loom))]
pub(crate) struct Region {
    base: *mut libc::c_void,
    bytes: usize,
    huge: bool,
}

// SAFETY: a `Region` is an address range and its size; it hands out no references itself
// (`TableMemory` does, under its own rules), and unmapping it on drop is valid from any thread.
#[cfg(not(floe_loom))]
unsafe impl Send for Region {}
// SAFETY: as above; `populate` only asks the kernel to fault pages in, which never changes
// their contents and may race with any access.
#[cfg(not(floe_loom))]
unsafe impl Sync for Region {}

#[cfg(not(floe_loom))]
impl Region {
    /// Map at least `bytes` (rounded up to whole huge pages). `None` if the size overflows or
    /// the kernel refuses.
    pub(crate) fn map(bytes: usize, huge_pages: bool) -> Option<Region> {
        let region = Self::map_advised(bytes, huge_pages)?;
        region.advise(0, region.bytes, huge_pages);
        Some(region)
    }

    fn map_advised(bytes: usize, huge_pages: bool) -> Option<Region> {
        // Round the region up to whole huge pages and over-allocate by one so an aligned start
        // exists inside the mapping; the slack at both ends is unmapped again.
        let region = bytes.checked_next_multiple_of(HUGE_PAGE)?;
        let request = region.checked_add(HUGE_PAGE)?;
        // SAFETY: an anonymous private mapping with no address hint has no preconditions; the
        // result is checked against MAP_FAILED.
        let raw = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                request,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let start = raw as usize;
        let aligned = start.next_multiple_of(HUGE_PAGE);
        let head = aligned - start;
        let tail = request - head - region;
        // SAFETY: both ranges lie inside the mapping just created and outside the aligned
        // region we keep; unmapping them cannot affect any other allocation.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((aligned + region) as *mut libc::c_void, tail);
            }
        }
        Some(Region {
            base: aligned as *mut libc::c_void,
            bytes: region,
            huge: huge_pages,
        })
    }

    /// Map the first `bytes` of `file` (rounded up to whole huge pages; the file must be at
    /// least that long, or a touch past its end faults with SIGBUS) shared, at a huge-page
    /// aligned address: stores go to the file's pages in the page cache, so they outlive the
    /// process (a crash loses nothing the process stored) and reach the disk when the kernel
    /// writes them back or [`sync`](Self::sync) asks it to.
    pub(crate) fn map_file(file: &std::fs::File, bytes: usize) -> std::io::Result<Region> {
        use std::os::fd::AsRawFd;
        // Reserve an aligned range first, then map the file over it.
        let reserved = Self::map_advised(bytes, false)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        // SAFETY: MAP_FIXED over a range we own (the reservation): the file mapping replaces
        // it atomically; the result is checked against MAP_FAILED.
        let raw = unsafe {
            libc::mmap(
                reserved.base,
                reserved.bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        debug_assert_eq!(raw, reserved.base);
        // The range is the file mapping now; dropping `reserved` unmaps it, as it should.
        Ok(reserved)
    }

    /// A CRC32 of the bytes `range` (clamped to the region). Only while no thread of this
    /// process writes them: a table at its close, or before its open hands it out.
    pub(crate) fn crc32(&self, range: core::ops::Range<usize>) -> u32 {
        let end = range.end.min(self.bytes);
        let start = range.start.min(end);
        // SAFETY: `start..end` lies inside our live mapping; no thread of this process stores
        // to it meanwhile (the caller's promise), so reading it as plain bytes is no data race.
        let bytes =
            unsafe { core::slice::from_raw_parts(self.base.cast::<u8>().add(start), end - start) };
        crc32fast::hash(bytes)
    }

    /// Write the region's dirty pages to its file and wait for the device (`msync(MS_SYNC)`);
    /// for anonymous regions a no-op.
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        // SAFETY: the range is our live mapping.
        if unsafe { libc::msync(self.base, self.bytes, libc::MS_SYNC) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// [`sync`](Self::sync) for the bytes `range` only, widened to whole 4 KiB pages (the
    /// unit the kernel writes back): a growth's ordered moves sync the lines they wrote
    /// before they retire the old slots (`bins/migrate.rs`, "Power loss during a move").
    pub(crate) fn sync_range(&self, range: core::ops::Range<usize>) -> std::io::Result<()> {
        let start = range.start / PAGE * PAGE;
        let end = range.end.min(self.bytes).next_multiple_of(PAGE);
        if start >= end {
            return Ok(());
        }
        // SAFETY: `start..end` lies inside our live mapping (clamped above), page aligned as
        // msync requires (`base` is huge-page aligned).
        if unsafe {
            libc::msync(
                self.base.cast::<u8>().add(start).cast(),
                end - start,
                libc::MS_SYNC,
            )
        } == 0
        {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// The 64-bit words of the 4 KiB page at `offset` (page aligned, inside the region), each
    /// read atomically (other threads may be storing to them): a test's record of what a sync
    /// is about to write (`writeback::log`).
    #[cfg(feature = "crash-points")]
    pub(crate) fn page_words(&self, offset: usize) -> Vec<u64> {
        debug_assert!(offset.is_multiple_of(PAGE) && offset + PAGE <= self.bytes);
        (0..PAGE / 8)
            .map(|word| {
                // SAFETY: the word lies inside our live mapping, 8-byte aligned; every store
                // the engine makes there is atomic, so an atomic load of it is no data race.
                let atomic = unsafe {
                    &*self
                        .base
                        .cast::<u8>()
                        .add(offset + 8 * word)
                        .cast::<std::sync::atomic::AtomicU64>()
                };
                atomic.load(std::sync::atomic::Ordering::Relaxed)
            })
            .collect()
    }

    /// Advise `len` bytes from `offset` (whole huge pages) for transparent huge pages or
    /// against them. A hint: failure (a kernel without THP) leaves ordinary pages, which is
    /// correct, only slower.
    fn advise(&self, offset: usize, len: usize, huge_pages: bool) {
        let advice = if huge_pages {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: the range lies inside our live mapping (callers clamp it); advice changes no
        // contents.
        unsafe {
            libc::madvise(self.base.cast::<u8>().add(offset).cast(), len, advice);
        }
    }

    /// The byte offset of `address` (inside the region) from its start.
    #[cfg(feature = "crash-points")]
    pub(crate) fn offset_of(&self, address: *const u8) -> usize {
        debug_assert!((address as usize).wrapping_sub(self.base as usize) < self.bytes);
        address as usize - self.base as usize
    }

    /// Bytes mapped (whole huge pages).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Fault in `len` bytes from `offset` (clamped to the region) as writable, without
    /// writing them (`MADV_POPULATE_WRITE`, Linux 5.14): pages already there are left as they
    /// are, missing ones come zeroed, so this may run while the region is in use. `false` if
    /// the kernel cannot do it (too old, or out of memory): the pages then come on first touch.
    pub(crate) fn populate(&self, offset: usize, len: usize) -> bool {
        let offset = offset.min(self.bytes);
        let len = len.min(self.bytes - offset);
        if len == 0 {
            return true;
        }
        #[cfg(target_os = "linux")]
        {
            // SAFETY: the range lies inside our live mapping; MADV_POPULATE_WRITE changes no
            // contents (it faults pages in as a write would, without writing).
            unsafe {
                let start = self.base.cast::<u8>().add(offset).cast();
                libc::madvise(start, len, libc::MADV_POPULATE_WRITE) == 0
            }
        }
        #[cfg(not(target_os = "linux"))]
        false
    }
}

#[cfg(not(floe_loom))]
impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `base`/`bytes` is exactly the mapping kept in `map`, unmapped once, here.
        unsafe {
            libc::munmap(self.base, self.bytes);
        }
    }
}

#[cfg(not(floe_loom))]
impl<T> Deref for TableMemory<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY:
        // - `ptr` points to `len` zero-initialised `T`s (valid by `ZeroInit`) that we own, or is
        //   dangling with `len == 0`;
        // - the region lives as long as `self`, and is only ever accessed through `&T`.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(not(floe_loom))]
impl<T> Drop for TableMemory<T> {
    fn drop(&mut self) {
        // The elements are atomics and plain data: no destructors to run.
        match &self.backing {
            // The mapping goes when its last owner does (`Region`'s drop).
            Backing::Mapped(_) | Backing::Part(_) => {}
            // SAFETY: `ptr` came from `alloc_zeroed(layout)`.
            Backing::Heap { layout } => unsafe {
                std::alloc::dealloc(self.ptr.as_ptr().cast(), *layout);
            },
            Backing::Empty => {}
        }
    }
}

/// Under loom: a boxed slice of freshly built values.
#[cfg(floe_loom)]
pub(crate) struct TableMemory<T> {
    items: Box<[T]>,
}

#[cfg(floe_loom)]
impl<T: ZeroInit> TableMemory<T> {
    pub(crate) fn zeroed(len: usize, _huge_pages: bool) -> Option<Self> {
        Some(Self {
            items: (0..len).map(|_| T::new_zeroed()).collect(),
        })
    }

    pub(crate) fn bytes(&self) -> usize {
        self.items.len() * core::mem::size_of::<T>()
    }

    pub(crate) fn huge_pages(&self) -> bool {
        false
    }

    pub(crate) fn populate(&self) -> bool {
        true
    }
}

#[cfg(floe_loom)]
impl<T> Deref for TableMemory<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.items
    }
}

#[cfg(all(test, not(floe_loom)))]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    #[repr(C, align(64))]
    struct Line([u64; 8]);
    // SAFETY: plain integers; zero is valid.
    unsafe impl ZeroInit for Line {}

    #[test]
    fn small_regions_are_zeroed_and_aligned() {
        let m = TableMemory::<Line>::zeroed(10, true).unwrap();
        assert_eq!(m.len(), 10);
        assert!(m.iter().all(|l| l.0 == [0; 8]));
        assert_eq!(m.as_ptr() as usize % 64, 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "mmap is not modelled by Miri")]
    fn large_regions_are_huge_page_aligned() {
        let lines = 3 * HUGE_PAGE / 64 + 5;
        for huge in [true, false] {
            let m = TableMemory::<Line>::zeroed(lines, huge).unwrap();
            assert_eq!(m.as_ptr() as usize % HUGE_PAGE, 0);
            assert_eq!(m.bytes() % HUGE_PAGE, 0);
            assert!(m.bytes() >= lines * 64);
            assert_eq!(m.huge_pages(), huge);
            assert_eq!(m[lines - 1].0, [0; 8]);
        }
    }

    /// Pages of `m`'s mapping resident now, by `mincore`.
    #[cfg(target_os = "linux")]
    fn resident_pages(m: &TableMemory<Line>) -> usize {
        let page = 4096;
        let mut vec = vec![0u8; m.bytes().div_ceil(page)];
        // SAFETY: the range is our live mapping (page aligned); `vec` has a byte per page.
        let status =
            unsafe { libc::mincore(m.as_ptr() as *mut libc::c_void, m.bytes(), vec.as_mut_ptr()) };
        assert_eq!(status, 0);
        vec.iter().filter(|&&byte| byte & 1 == 1).count()
    }

    #[test]
    #[cfg(target_os = "linux")]
    #[cfg_attr(miri, ignore = "mmap is not modelled by Miri")]
    fn populate_faults_a_whole_mapping_in_without_writing() {
        let lines = 2 * HUGE_PAGE / 64;
        let m = TableMemory::<Line>::zeroed(lines, false).unwrap();
        let pages = m.bytes() / 4096;
        assert!(
            resident_pages(&m) < pages,
            "a fresh mapping is faulted in lazily"
        );
        if !m.populate() {
            // A kernel before 5.14: the hint is not available, nothing to check.
            return;
        }
        assert_eq!(resident_pages(&m), pages);
        assert!(m.iter().all(|l| l.0 == [0; 8]));
    }

    #[test]
    fn overflowing_sizes_are_refused() {
        assert!(TableMemory::<Line>::zeroed(usize::MAX / 2, true).is_none());
    }

    #[test]
    fn empty_regions_are_fine() {
        let m = TableMemory::<Line>::zeroed(0, true).unwrap();
        assert!(m.is_empty());
        assert_eq!(m.bytes(), 0);
    }
}

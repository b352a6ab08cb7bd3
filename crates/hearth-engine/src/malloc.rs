//! Allocator settings for the serving process. glibc serves allocations above its mmap threshold (128 KiB at
//! first, adapting up to 32 MiB) with fresh anonymous mappings, unmapped again on free: every step's large
//! temporaries (long-context attention gathers and scores) then cost a page fault and a zeroed page per 4 KiB,
//! every step. Raising the thresholds keeps those buffers in the heap for reuse (`HEARTH_MALLOC_KEEP`; measured
//! in docs/benchmarks.md). The price: up to the trim threshold of freed memory stays with the process.

/// Apply the settings the levers ask for. Call once at start, before threads allocate.
pub fn tune() {
    if !crate::levers::get().malloc_keep {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts glibc's allocator parameters; it is called before other threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 512 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Hand freed heap memory back to the system now (glibc's `malloc_trim`). The thresholds `tune` sets keep freed
/// memory for reuse, which a model load (every weight read, then copies such as the fused projections' stacks) and
/// the grammar compiler's vocabulary index leave behind by the hundred MiB: call this after such one-off work.
pub fn release_free() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's arenas to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Element types whose all-zero bit pattern is the value zero.
///
/// # Safety
/// Every bit of a zeroed `Self` must read as a valid value.
pub unsafe trait ZeroBits: Copy {}
// SAFETY: integers and IEEE floats: all-zero bits are 0 / +0.0.
unsafe impl ZeroBits for f32 {}
// SAFETY: as above.
unsafe impl ZeroBits for u16 {}
// SAFETY: as above.
unsafe impl ZeroBits for u8 {}

/// Below this, a zeroed vector is simply written.
const LAZY_MIN_BYTES: usize = 1 << 20;

/// `n` zeros whose pages become resident only as they are written, as the KV cache's buffers must be: a cache is
/// sized for a whole budget of tokens and filled as requests come. `calloc` gives that only sometimes: with the
/// thresholds [`tune`] sets, a buffer below 512 MiB comes from a heap, and glibc clears a reused or non-main-arena
/// chunk with a memset that touches every page (every layer's buffer resident at start). Here the
/// vector's whole pages are dropped with `MADV_DONTNEED` instead, which on Linux makes a private anonymous
/// mapping (every heap and mmap'd chunk) read back as zeros and hold no memory until written; the partial pages
/// at both ends are written. Elsewhere, or if `madvise` fails, every byte is written.
pub fn lazy_zeroed<T: ZeroBits>(n: usize) -> Vec<T> {
    let bytes = n * std::mem::size_of::<T>();
    let mut v = Vec::<T>::with_capacity(n);
    let p = v.as_mut_ptr().cast::<u8>();
    let mut cleared = false;
    #[cfg(target_os = "linux")]
    if bytes >= LAZY_MIN_BYTES {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        let (lo, hi) = ((p as usize).next_multiple_of(page), (p as usize + bytes) / page * page);
        // SAFETY: [lo, hi) lies inside the vector's own allocation [p, p + bytes), whose contents nothing else
        // uses; the allocator's bookkeeping lies outside it. The ends outside [lo, hi) are written below.
        if hi > lo && unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) } == 0 {
            // SAFETY: both ranges are within [p, p + bytes).
            unsafe {
                std::ptr::write_bytes(p, 0, lo - p as usize);
                std::ptr::write_bytes(hi as *mut u8, 0, p as usize + bytes - hi);
            }
            cleared = true;
        }
    }
    if !cleared {
        // SAFETY: the capacity is `bytes` bytes.
        unsafe { std::ptr::write_bytes(p, 0, bytes) };
    }
    // SAFETY: all `n` elements are zero bits, a valid value of `T` (ZeroBits).
    unsafe { v.set_len(n) };
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident memory of this process, KiB.
    #[cfg(target_os = "linux")]
    fn rss_kib() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// A lazily zeroed buffer reads as zeros, and only what is written of it becomes resident, even where the
    /// allocator hands back memory that was written before (a freed, dirty chunk).
    #[cfg(target_os = "linux")]
    #[test]
    fn lazy_zeroed_buffers_read_as_zeros_and_stay_out_of_memory_until_written() {
        let n = 64 << 20; // 256 MiB of f32
                          // Dirty the memory the next allocation will most likely reuse.
        let mut dirty = vec![1.5f32; n];
        std::hint::black_box(&mut dirty);
        drop(dirty);
        let before = rss_kib();
        let mut v = lazy_zeroed::<f32>(n);
        let after = rss_kib();
        assert!(after < before + 32 * 1024, "{} MiB resident after allocating 256 MiB", (after - before) / 1024);
        assert!(v.iter().step_by(1000).all(|&x| x == 0.0) && v[n - 1] == 0.0 && v[0] == 0.0);
        v[12345] = 2.0;
        assert_eq!(v.iter().filter(|&&x| x != 0.0).count(), 1);
        let small = lazy_zeroed::<u16>(1001);
        assert!(small.iter().all(|&x| x == 0));
    }
}

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

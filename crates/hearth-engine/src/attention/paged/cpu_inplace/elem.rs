//! The KV cache's element types (f32, or f16 under `HEARTH_CPU_KV_F16`) as the kernels read them: widened to f32
//! on load, so every sum runs in f32 whatever the cache keeps.

/// An element of the KV cache as the kernels read it: widened to f32 on load, so every sum runs in f32 whatever
/// the cache keeps.
pub trait KvElem: Copy + Send + Sync + 'static {
    fn to_f32(self) -> f32;
    /// Eight consecutive values at `p`, widened.
    ///
    /// # Safety
    /// Eight values must be readable at `p` and the CPU must have AVX and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> core::arch::x86_64::__m256;
}

impl KvElem for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx")]
    unsafe fn load8(p: *const f32) -> core::arch::x86_64::__m256 {
        core::arch::x86_64::_mm256_loadu_ps(p)
    }
}

impl KvElem for half::f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx,f16c")]
    unsafe fn load8(p: *const half::f16) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast::<__m128i>()))
    }
}

//! The row driver the k-quant kernels share ([`rows_impl`]) and the entry points that compile a [`RowKernel`] for
//! each instruction set.

/// Output columns `rows` (weight rows) of `out (m, n) = x (m, nb blocks) @ W^T`: what the ISA entry points
/// ([`rows_avx2`], ...) compile for their target features.
pub(crate) trait RowKernel {
    /// The quantized activation block.
    type X;
    /// Output columns `rows` of `a`.
    unsafe fn rows(a: Mat<Self::X>, rows: std::ops::Range<usize>);
}

/// One matmul's operands: W (n rows of nb blocks at `w`), x (m rows of nb blocks), out (m, n).
pub(crate) struct Mat<X> {
    pub w: *const u8,
    pub nb: usize,
    pub x: *const X,
    pub m: usize,
    pub n: usize,
    pub out: *mut f32,
}

/// One weight format's per-row dot products, run by [`rows_impl`] (the k-quants).
pub(crate) trait TileKernel {
    /// The quantized activation block.
    type X;
    /// Bytes of one weight block.
    const BYTES: usize;
    /// One weight row (nb blocks at `w`) against MR activation rows.
    unsafe fn tile<const MR: usize>(w: *const u8, nb: usize, xs: [*const Self::X; MR]) -> [f32; MR];
    /// Two weight rows against one activation row (two independent accumulator chains for m = 1).
    unsafe fn pair(w0: *const u8, w1: *const u8, nb: usize, x: *const Self::X) -> (f32, f32);
}

/// A [`TileKernel`] driven by [`rows_impl`].
pub(crate) struct Tiled<T>(std::marker::PhantomData<T>);

impl<T: TileKernel> RowKernel for Tiled<T> {
    type X = T::X;
    #[inline(always)]
    unsafe fn rows(a: Mat<T::X>, rows: std::ops::Range<usize>) {
        rows_impl::<T>(a.w, a.nb, a.x, a.m, a.n, rows, a.out)
    }
}

/// Activation rows kept hot in L1 while a chunk's weight rows stream past.
const ACT_TILE: usize = 16;

/// Output columns `rows` (weight rows) of `out (m, n) = x (m, nb blocks) @ W^T`.
#[inline(always)]
pub(crate) unsafe fn rows_impl<R: TileKernel>(
    w: *const u8,
    nb: usize,
    x: *const R::X,
    m: usize,
    n: usize,
    rows: std::ops::Range<usize>,
    out: *mut f32,
) {
    let row_bytes = nb * R::BYTES;
    if m == 1 {
        // Two rows at a time for two independent accumulator chains, taken from the two halves of the
        // range so that each half is read front to back (adjacent-row pairs defeat the stream prefetcher).
        let half = rows.len() / 2;
        for i in 0..half {
            let (j0, j1) = (rows.start + i, rows.start + half + i);
            let (a, b) = R::pair(w.add(j0 * row_bytes), w.add(j1 * row_bytes), nb, x);
            *out.add(j0) = a;
            *out.add(j1) = b;
        }
        if rows.len() % 2 == 1 {
            let j = rows.end - 1;
            *out.add(j) = R::tile::<1>(w.add(j * row_bytes), nb, [x])[0];
        }
        return;
    }
    // Cache blocking: a tile of ACT_TILE activation rows stays in L1 while the chunk's weight rows stream by.
    let mut r0 = 0;
    while r0 < m {
        let r1 = m.min(r0 + ACT_TILE);
        for j in rows.clone() {
            let wr = w.add(j * row_bytes);
            let mut r = r0;
            while r < r1 {
                let left = r1 - r;
                let xr = |i: usize| x.add((r + i) * nb);
                if left >= 4 {
                    let v = R::tile::<4>(wr, nb, [xr(0), xr(1), xr(2), xr(3)]);
                    for (i, v) in v.into_iter().enumerate() {
                        *out.add((r + i) * n + j) = v;
                    }
                    r += 4;
                } else if left == 3 {
                    let v = R::tile::<3>(wr, nb, [xr(0), xr(1), xr(2)]);
                    for (i, v) in v.into_iter().enumerate() {
                        *out.add((r + i) * n + j) = v;
                    }
                    r += 3;
                } else if left == 2 {
                    let v = R::tile::<2>(wr, nb, [xr(0), xr(1)]);
                    for (i, v) in v.into_iter().enumerate() {
                        *out.add((r + i) * n + j) = v;
                    }
                    r += 2;
                } else {
                    *out.add(r * n + j) = R::tile::<1>(wr, nb, [xr(0)])[0];
                    r += 1;
                }
            }
        }
        r0 = r1;
    }
}

/// [`RowKernel::rows`] compiled for AVX2 + FMA + F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn rows_avx2<R: RowKernel>(a: Mat<R::X>, rows: std::ops::Range<usize>) {
    R::rows(a, rows)
}

/// [`RowKernel::rows`] compiled for AVX2 + FMA + F16C + AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(crate) unsafe fn rows_vnni<R: RowKernel>(a: Mat<R::X>, rows: std::ops::Range<usize>) {
    R::rows(a, rows)
}

/// [`RowKernel::rows`] compiled for AVX2 + FMA + F16C + AVX512-VNNI + AVX512-VL.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub(crate) unsafe fn rows_vnni512<R: RowKernel>(a: Mat<R::X>, rows: std::ops::Range<usize>) {
    R::rows(a, rows)
}

/// [`RowKernel::rows`] compiled for AVX2 + FMA + F16C + AVX-512 F/BW/VL/VNNI, 512-bit vectors allowed.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn rows_zmm<R: RowKernel>(a: Mat<R::X>, rows: std::ops::Range<usize>) {
    R::rows(a, rows)
}

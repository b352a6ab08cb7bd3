// Skinny matmuls for decode steps (see src/gpu/gemv.rs): y[M, N] = x[M, K] · W[N, K]ᵀ, bound by reading the
// weights once. Both kernels are launched with programmatic dependent launch (gpu/launch.rs): weights are never
// written by a kernel, so they are loaded before pdl_wait(), while the previous kernel is still finishing.
//
// * gemv_row_*: one input row (batch-1 decode), K <= 32 * ROW_CHUNK 16-byte vectors. A persistent grid (a few
//   blocks per multiprocessor): each warp keeps x in registers and walks output columns n = warp, warp + warps,
//   ..., loading the next column's whole weight row while it reduces the current one. Measured against cuBLAS on
//   the H200 (bench/gpu/gemv_probe.cu's gemv_persist — the same kernel reading x with __ldg; both compile to 224
//   registers — back-to-back launches with PDL, Llama-3.1-8B shapes): q|k|v 14.7 vs 16.5 us, o_proj 10.9 vs 16.3,
//   gate|up 55.3 vs 56.8, lm_head 91.6 vs 96.9. A long K (the 14336-wide down projection) is
//   not its shape (cuBLAS was faster than every variant tried there); gemv_row_split (opt-in, not yet measured)
//   splits each column over 2 or 4 warps for it.
// * gemv_*_m{M}: 1 <= M <= 8 rows, any K (a multiple of the vector): one warp per output column, CHUNK 16-byte
//   loads per lane in flight, the M input rows read through L1. Slower than cuBLAS on the 8B shapes (equal or
//   worse); used only when asked for (HEARTH_GPU_GEMV_ROWS) and as the general form the tests check.
// The K order of every sum is fixed per column, so a row's output does not depend on the other rows of a launch.
#include "common.cuh"

constexpr int WARPS = 4;       // warps per block (both kernels)
constexpr int CHUNK = 16;      // gemv_*_m: 16-byte loads per lane in flight
constexpr int ROW_CHUNK = 16;  // gemv_row: 16-byte vectors per lane = the whole row

template <typename T> struct Vec16 { static constexpr int N = 16 / sizeof(T); };

template <typename T>
__device__ __forceinline__ void unpack(const uint4 &v, float *out) {
  const T *p = reinterpret_cast<const T *>(&v);
#pragma unroll
  for (int i = 0; i < Vec16<T>::N; ++i) out[i] = to_f(p[i]);
}

// grid (a few blocks per multiprocessor), block WARPS * 32. Requires K % (16 / sizeof(T)) == 0,
// K <= 32 * ROW_CHUNK * (16 / sizeof(T)) and 16-byte aligned x and w rows.
template <typename T>
__device__ void gemv_row(const T *__restrict__ x, const T *__restrict__ w, T *__restrict__ y, int N, int K) {
  constexpr int V = Vec16<T>::N;
  pdl_trigger();
  const int lane = threadIdx.x % 32;
  const int nw = gridDim.x * WARPS;
  int n = blockIdx.x * WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const int kv = K / V;
  uint4 wv[ROW_CHUNK];
  auto load_row = [&](int col) {
    const uint4 *wr = reinterpret_cast<const uint4 *>(w + (size_t)col * K);
#pragma unroll
    for (int u = 0; u < ROW_CHUNK; ++u) {
      const int i = lane + u * 32;
      wv[u] = i < kv ? __ldg(wr + i) : make_uint4(0, 0, 0, 0);
    }
  };
  load_row(n);
  pdl_wait();  // x is the previous kernel's output
  uint4 xv[ROW_CHUNK];
#pragma unroll
  for (int u = 0; u < ROW_CHUNK; ++u) {
    const int i = lane + u * 32;
    // Coherent L2 loads (ld.global.cg), not the read-only path: under PDL this kernel starts before the kernel that
    // writes x has finished, so x is not read-only for this kernel's whole lifetime.
    xv[u] = i < kv ? __ldcg(reinterpret_cast<const uint4 *>(x) + i) : make_uint4(0, 0, 0, 0);
  }
  for (; n < N; n += nw) {
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < ROW_CHUNK; ++u) {
      float wf[V], xf[V];
      unpack<T>(wv[u], wf);
      unpack<T>(xv[u], xf);
#pragma unroll
      for (int j = 0; j < V; ++j) acc = fmaf(wf[j], xf[j], acc);
    }
    if (n + nw < N) load_row(n + nw);  // in flight while this column is reduced and stored
    acc = warp_sum(acc);
    if (lane == 0) y[n] = from_f<T>(acc);
  }
}

// gemv_row for a K up to SPLIT times longer (opt-in, HEARTH_GPU_GEMV_SPLIT: not yet measured on a GPU): the
// block's WARPS warps take WARPS / SPLIT columns at a time, SPLIT warps per column, each warp one contiguous part of
// K (its part of x in registers, its part of the next column's weight row loaded while it reduces the current
// one); the parts' sums meet in shared memory and are added in part order (deterministic). Meant for the 8B
// shape's 14336-wide down projection (SPLIT 4: 448 vectors a part), which gemv_row cannot hold and cuBLAS reads at
// ~3.7 TB/s. grid (a few blocks per multiprocessor), block WARPS * 32; requires ceil(K / V / SPLIT) <= 32 *
// ROW_CHUNK.
template <typename T, int SPLIT>
__device__ void gemv_row_split(const T *__restrict__ x, const T *__restrict__ w, T *__restrict__ y, int N, int K) {
  constexpr int V = Vec16<T>::N;
  constexpr int R = WARPS / SPLIT;  // columns per block step
  static_assert(WARPS % SPLIT == 0, "SPLIT divides the block's warps");
  __shared__ float part_sum[WARPS];
  pdl_trigger();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int r = warp / SPLIT, p = warp % SPLIT;
  const int kv = K / V;
  const int kvp = (kv + SPLIT - 1) / SPLIT;             // vectors per part
  const int v0 = min(kv, p * kvp), vn = min(kv, v0 + kvp) - v0;  // this warp's part: [v0, v0 + vn)
  const int step = gridDim.x * R;
  uint4 wv[ROW_CHUNK];
  auto load_row = [&](int col) {
    const uint4 *wr = reinterpret_cast<const uint4 *>(w + (size_t)col * K) + v0;
#pragma unroll
    for (int u = 0; u < ROW_CHUNK; ++u) {
      const int i = lane + u * 32;
      wv[u] = i < vn ? __ldg(wr + i) : make_uint4(0, 0, 0, 0);
    }
  };
  int n = blockIdx.x * R + r;
  if (n < N) {
    load_row(n);
  } else {
#pragma unroll
    for (int u = 0; u < ROW_CHUNK; ++u) wv[u] = make_uint4(0, 0, 0, 0);  // a slot past N: its sum is never stored
  }
  pdl_wait();  // x is the previous kernel's output: read it coherently (see gemv_row)
  uint4 xv[ROW_CHUNK];
#pragma unroll
  for (int u = 0; u < ROW_CHUNK; ++u) {
    const int i = lane + u * 32;
    xv[u] = i < vn ? __ldcg(reinterpret_cast<const uint4 *>(x) + v0 + i) : make_uint4(0, 0, 0, 0);
  }
  // Every warp of the block runs the same steps (decided by the block's first column), for the barriers.
  for (int base = blockIdx.x * R; base < N; base += step, n += step) {
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < ROW_CHUNK; ++u) {
      float wf[V], xf[V];
      unpack<T>(wv[u], wf);
      unpack<T>(xv[u], xf);
#pragma unroll
      for (int j = 0; j < V; ++j) acc = fmaf(wf[j], xf[j], acc);
    }
    if (n + step < N) load_row(n + step);
    acc = warp_sum(acc);
    if (lane == 0) part_sum[warp] = acc;
    __syncthreads();
    if (p == 0 && lane == 0 && n < N) {
      float s = 0.f;
#pragma unroll
      for (int q = 0; q < SPLIT; ++q) s += part_sum[r * SPLIT + q];
      y[n] = from_f<T>(s);
    }
    __syncthreads();
  }
}

// grid (ceil(N / WARPS)), block WARPS * 32. Requires K % (16 / sizeof(T)) == 0 and 16-byte aligned x and w rows.
template <typename T, int M>
__device__ void gemv(const T *__restrict__ x, const T *__restrict__ w, T *__restrict__ y, int N, int K) {
  constexpr int V = Vec16<T>::N;
  pdl_trigger();
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const uint4 *wr = reinterpret_cast<const uint4 *>(w + (size_t)n * K);
  const int kv = K / V;  // 16-byte vectors per row
  uint4 wv[CHUNK];
#pragma unroll
  for (int u = 0; u < CHUNK; ++u) {
    const int i = lane + u * 32;
    wv[u] = i < kv ? __ldg(wr + i) : make_uint4(0, 0, 0, 0);
  }
  pdl_wait();  // x is the previous kernel's output
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.f;
  for (int base = 0;;) {
#pragma unroll
    for (int u = 0; u < CHUNK; ++u) {
      const int i = base + lane + u * 32;
      if (i < kv) {
        float wf[V];
        unpack<T>(wv[u], wf);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xf[V];
          unpack<T>(__ldcg(reinterpret_cast<const uint4 *>(x + (size_t)m * K) + i), xf);
#pragma unroll
          for (int j = 0; j < V; ++j) acc[m] = fmaf(wf[j], xf[j], acc[m]);
        }
      }
    }
    base += 32 * CHUNK;
    if (base >= kv) break;
#pragma unroll
    for (int u = 0; u < CHUNK; ++u) {
      const int i = base + lane + u * 32;
      wv[u] = i < kv ? __ldg(wr + i) : make_uint4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float s = warp_sum(acc[m]);
    if (lane == 0) y[(size_t)m * N + n] = from_f<T>(s);
  }
}

#define GEMV_M(SFX, T, M)                                                                                    \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                                   \
      gemv_##SFX##_m##M(const T *x, const T *w, T *y, int N, int K) {                                        \
    gemv<T, M>(x, w, y, N, K);                                                                               \
  }
#define INSTANTIATE(SFX, T)                                                                                  \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                                   \
      gemv_row_##SFX(const T *x, const T *w, T *y, int N, int K) {                                           \
    gemv_row<T>(x, w, y, N, K);                                                                              \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                                   \
      gemv_row_split_##SFX##_s2(const T *x, const T *w, T *y, int N, int K) {                                \
    gemv_row_split<T, 2>(x, w, y, N, K);                                                                     \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                                   \
      gemv_row_split_##SFX##_s4(const T *x, const T *w, T *y, int N, int K) {                                \
    gemv_row_split<T, 4>(x, w, y, N, K);                                                                     \
  }                                                                                                          \
  GEMV_M(SFX, T, 1) GEMV_M(SFX, T, 2) GEMV_M(SFX, T, 3) GEMV_M(SFX, T, 4) GEMV_M(SFX, T, 5) GEMV_M(SFX, T, 6) \
  GEMV_M(SFX, T, 7) GEMV_M(SFX, T, 8)
INSTANTIATE(f32, float)
INSTANTIATE(bf16, __nv_bfloat16)
INSTANTIATE(f16, __half)

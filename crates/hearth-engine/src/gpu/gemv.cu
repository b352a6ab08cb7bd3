// Skinny matmuls for batch-1 decode steps (see src/gpu/gemv.rs): y[N] = W[N, K] · x[K], bound by reading the
// weights once. All are launched with programmatic dependent launch (gpu/launch.rs): weights are never written by
// a kernel, so they are loaded before pdl_wait(), while the previous kernel is still finishing.
//
// * gemv_row*: one input row (batch-1 decode), a persistent grid, each column over SPLIT = 1, 2 or 4 warps (K up
//   to 32 * ROW_CHUNK 16-byte vectors per warp). The input row is the previous kernel's output (gemv_row_*,
//   gemv_row_split_*), or computed by the kernel from what the separate kernel before it would have read: the
//   residual add and RMSNorm (gemv_row_addnorm_*, the projections after a norm: 64 launches and dependent steps a
//   step fewer on the 8B shape).
// Several rows go to cuBLAS: it reads each weight once for all rows, as a few-row kernel would (docs/benchmarks.md).
// The K order of every sum is fixed per column.
#include "common.cuh"

constexpr int WARPS = 4;       // warps per block
constexpr int ROW_CHUNK = 16;  // 16-byte vectors per lane = the whole row

// Where a one-row kernel's input row comes from (MODE). The gated activation stays its own kernel (act_mul): computed
// while loading the down projection's input it costs every column block the whole activation (docs/benchmarks.md,
// levers tried and rejected).
constexpr int X_PLAIN = 0;    // x[K], the previous kernel's output
constexpr int X_ADDNORM = 1;  // rmsnorm(h + a) * wn (add_rmsnorm's arithmetic; a may be null); block 0 writes h + a
                              // to h_out (unless null)

// X_ADDNORM's prologue, block-wide (every thread of the block calls it): each thread adds NV vectors of h and a
// (rounded to T: the residual stream's dtype), the block reduces their squares in f32, scales by the norm's weight
// (loaded before pdl_wait: a weight) into shared memory, and each warp takes its registers' row from there.
// Block 0 also stores h + a to h_out. Same per-value arithmetic as fused.cu's add_rmsnorm (the sum of squares is
// added in another order).
template <typename T>
__device__ void addnorm_row(const T *h, const T *a, const T *__restrict__ wn, T *h_out, float eps, int K,
                            uint4 *xv) {
  constexpr int V = Vec16<T>::N;
  constexpr int NV = ROW_CHUNK / WARPS;  // vectors per thread: the block holds the row's 32 * ROW_CHUNK
  static_assert(ROW_CHUNK % WARPS == 0, "the block's threads cover the whole row");
  __shared__ uint4 xs[32 * ROW_CHUNK];
  __shared__ float part[WARPS];
  const int kv = K / V, t = threadIdx.x, lane = t % 32, warp = t / 32;
  const uint4 *h4 = reinterpret_cast<const uint4 *>(h), *a4 = reinterpret_cast<const uint4 *>(a);
  uint4 wnv[NV], hv[NV], av[NV];
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int c = t + i * WARPS * 32;
    wnv[i] = c < kv ? __ldg(reinterpret_cast<const uint4 *>(wn) + c) : make_uint4(0, 0, 0, 0);
  }
  pdl_wait();  // h and a are earlier kernels' outputs
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int c = t + i * WARPS * 32;
    hv[i] = c < kv ? __ldcg(h4 + c) : make_uint4(0, 0, 0, 0);
    av[i] = a != nullptr && c < kv ? __ldcg(a4 + c) : make_uint4(0, 0, 0, 0);
  }
  float s[NV][V];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    float hf[V], af[V];
    unpack<T>(hv[i], hf);
    unpack<T>(av[i], af);
    uint4 packed;
    T *pp = reinterpret_cast<T *>(&packed);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      pp[j] = from_f<T>(hf[j] + af[j]);
      s[i][j] = to_f(pp[j]);
      ss += s[i][j] * s[i][j];
    }
    const int c = t + i * WARPS * 32;
    if (h_out != nullptr && blockIdx.x == 0 && c < kv) reinterpret_cast<uint4 *>(h_out)[c] = packed;
  }
  ss = warp_sum(ss);
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int q = 0; q < WARPS; ++q) total += part[q];
  const float scale = rsqrtf(total / K + eps);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    float wf[V];
    unpack<T>(wnv[i], wf);
    uint4 packed;
    T *pp = reinterpret_cast<T *>(&packed);
#pragma unroll
    for (int j = 0; j < V; ++j) pp[j] = from_f<T>(s[i][j] * scale * wf[j]);
    const int c = t + i * WARPS * 32;
    if (c < kv) xs[c] = packed;
  }
  __syncthreads();
#pragma unroll
  for (int u = 0; u < ROW_CHUNK; ++u) {
    const int i = lane + u * 32;
    xv[u] = i < kv ? xs[i] : make_uint4(0, 0, 0, 0);
  }
}

// What a one-row kernel does with its column sums (EPI). The paired epilogues have each warp compute two columns
// one after the other (the second's weight row loading while the first is reduced, as between any two columns)
// and write one result from the pair, so that the separate elementwise kernel after the matmul goes away:
constexpr int EPI_NONE = 0;  // y[n] = sum
constexpr int EPI_SILU = 1;  // gate|up: pair (i, i + N/2) -> y[i] = silu(gate) * up (fused.cu act_mul's arithmetic
constexpr int EPI_GELU = 2;  //   on the sums rounded to T as act_mul reads them: the same values)

// The two columns of pair p: (p, p + N/2).
__device__ __forceinline__ int2 pair_cols(int p, int N) { return make_int2(p, p + N / 2); }

// The one-row kernels: y[N] = W[N, K] · x[K], x from MODE. A persistent grid (a few blocks per multiprocessor),
// block WARPS * 32. The block's warps take WARPS / SPLIT columns at a time, SPLIT warps per column, each warp one
// contiguous part of K: its part of x in registers, its part of the current column's weight row in flight while it
// reduces the previous one (the first row is loaded before pdl_wait: weights are never written by a kernel). With
// SPLIT > 1 the parts' sums meet in shared memory and are added in part order (deterministic).
// Requires K % (16 / sizeof(T)) == 0, ceil(K / V / SPLIT) <= 32 * ROW_CHUNK and 16-byte aligned rows.
//
// Measured against cuBLAS on the H200 (bench/gpu/gemv_probe.cu, back-to-back launches with PDL, Llama-3.1-8B
// shapes): SPLIT 1 q|k|v 16.2 vs 16.6 us, o_proj 12.2 vs 15.6, gate|up 57.3 vs 57.7, lm_head 94.0
// vs 101.3; SPLIT 4 on the 14336-wide down projection 29.9 vs 32.8.
template <typename T, int SPLIT, int MODE, int EPI = EPI_NONE>
__device__ void gemv_row(const T *x, const T *a, const T *__restrict__ wn, T *h_out, float eps,
                         const T *__restrict__ w, T *y, int N, int K) {
  constexpr int V = Vec16<T>::N;
  constexpr int R = WARPS / SPLIT;  // columns per block step
  static_assert(WARPS % SPLIT == 0, "SPLIT divides the block's warps");
  static_assert(MODE != X_ADDNORM || SPLIT == 1, "the norm's row is held whole by each warp");
  static_assert(EPI == EPI_NONE || SPLIT == 1, "paired epilogues walk whole columns");
  pdl_trigger();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int r = warp / SPLIT, p = warp % SPLIT;
  const int kv = K / V;
  const int kvp = (kv + SPLIT - 1) / SPLIT;                       // vectors per part
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
  int n = blockIdx.x * R + r;  // the first column, or with a paired epilogue the first pair
  const int limit = EPI == EPI_NONE ? N : N / 2;
  if (n < limit) {
    load_row(EPI == EPI_NONE ? n : pair_cols(n, N).x);
  } else {
#pragma unroll
    for (int u = 0; u < ROW_CHUNK; ++u) wv[u] = make_uint4(0, 0, 0, 0);  // a slot past N: its sum is never stored
  }
  uint4 xv[ROW_CHUNK];
  if constexpr (MODE == X_ADDNORM) {
    addnorm_row<T>(x, a, wn, h_out, eps, K, xv);  // waits itself
  } else {
    pdl_wait();  // x is the previous kernel's output
#pragma unroll
    for (int u = 0; u < ROW_CHUNK; ++u) {
      const int i = lane + u * 32;
      // Coherent L2 loads (ld.global.cg), not the read-only path: under PDL this kernel starts before the kernel
      // that writes x has finished.
      xv[u] = i < vn ? __ldcg(reinterpret_cast<const uint4 *>(x) + v0 + i) : make_uint4(0, 0, 0, 0);
    }
  }
  auto dot = [&]() {
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < ROW_CHUNK; ++u) {
      float wf[V], xf[V];
      unpack<T>(wv[u], wf);
      unpack<T>(xv[u], xf);
#pragma unroll
      for (int j = 0; j < V; ++j) acc = fmaf(wf[j], xf[j], acc);
    }
    return acc;
  };
  if constexpr (EPI != EPI_NONE) {
    for (; n < limit; n += step) {
      const int2 c = pair_cols(n, N);
      float s0 = dot();
      load_row(c.y);  // the pair's second column, in flight while the first is reduced
      s0 = warp_sum(s0);
      float s1 = dot();
      if (n + step < limit) load_row(pair_cols(n + step, N).x);
      s1 = warp_sum(s1);
      if (lane == 0) {
        // Rounded to T first: the separate kernel reads the matmul's T output.
        const float f0 = to_f(from_f<T>(s0)), f1 = to_f(from_f<T>(s1));
        y[n] = from_f<T>((EPI == EPI_SILU ? silu(f0) : gelu_tanh(f0)) * f1);
      }
    }
  } else if constexpr (SPLIT == 1) {
    for (; n < N; n += step) {
      float acc = dot();
      if (n + step < N) load_row(n + step);  // in flight while this column is reduced and stored
      acc = warp_sum(acc);
      if (lane == 0) y[n] = from_f<T>(acc);
    }
  } else {
    __shared__ float part_sum[WARPS];
    // Every warp of the block runs the same steps (decided by the block's first column), for the barriers.
    for (int base = blockIdx.x * R; base < N; base += step, n += step) {
      float acc = dot();
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
}

#define ROW_KERNEL(NAME, T, SPLIT, MODE)                                                                     \
  extern "C" __global__ void __launch_bounds__(WARPS * 32) NAME(const T *x, const T *w, T *y, int N, int K) {   \
    gemv_row<T, SPLIT, MODE>(x, nullptr, nullptr, nullptr, 0.f, w, y, N, K);                                 \
  }
#define ADDNORM_KERNEL(NAME, T, EPI)                                                                         \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                                   \
      NAME(const T *h, const T *a, const T *wn, T *h_out, float eps, const T *w, T *y, int N, int K) {         \
    gemv_row<T, 1, X_ADDNORM, EPI>(h, a, wn, h_out, eps, w, y, N, K);                                         \
  }
#define INSTANTIATE(SFX, T)                                                                                  \
  ROW_KERNEL(gemv_row_##SFX, T, 1, X_PLAIN)                                                                  \
  ROW_KERNEL(gemv_row_split_##SFX##_s2, T, 2, X_PLAIN)                                                       \
  ROW_KERNEL(gemv_row_split_##SFX##_s4, T, 4, X_PLAIN)                                                       \
  ADDNORM_KERNEL(gemv_row_addnorm_##SFX, T, EPI_NONE)                                                       \
  ADDNORM_KERNEL(gemv_row_addnorm_silu_##SFX, T, EPI_SILU)                                                  \
  ADDNORM_KERNEL(gemv_row_addnorm_gelu_##SFX, T, EPI_GELU)
INSTANTIATE(f32, float)
INSTANTIATE(bf16, __nv_bfloat16)
INSTANTIATE(f16, __half)

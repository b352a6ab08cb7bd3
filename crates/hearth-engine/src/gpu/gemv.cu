// Skinny matmul for decode steps (see src/gpu/gemv.rs): y[M, N] = x[M, K] · W[N, K]ᵀ for 1 ≤ M ≤ 8 rows, the
// shape of a decode step with few streams, where cuBLAS reaches 1.8-3.9 TB/s of the H200's ~4.3 (measured by
// bench/gpu/gemm_probe.py) and the step is bound by reading the weights once. It did not beat cuBLAS (equal at 1
// row, slower at 8: docs/benchmarks.md), so it is opt-in (`HEARTH_GPU_GEMV=1`).
//
// Each warp owns ROWS consecutive output columns n and streams their weight rows with 16-byte loads (UNROLL loads
// per row in flight per lane), multiplying each against all M input rows (read through L1: every warp of a block
// reads the same x), accumulating in f32. The K order of the sum is the same for every M, so a row's output does
// not depend on how many other rows share the launch.
#include "common.cuh"

constexpr int ROWS = 2;     // output columns per warp
constexpr int UNROLL = 4;   // 16-byte loads per weight row in flight per lane
constexpr int WARPS = 4;    // warps per block

template <typename T> struct Vec16 { static constexpr int N = 16 / sizeof(T); };

template <typename T>
__device__ __forceinline__ void unpack(const uint4 &v, float *out) {
  const T *p = reinterpret_cast<const T *>(&v);
#pragma unroll
  for (int i = 0; i < Vec16<T>::N; ++i) out[i] = to_f(p[i]);
}

// grid (ceil(N / (WARPS * ROWS))), block WARPS * 32. Requires K % (16 / sizeof(T)) == 0 and 16-byte aligned rows.
template <typename T, int M>
__device__ void gemv(const T *__restrict__ x, const T *__restrict__ w, T *__restrict__ y, int N, int K) {
  constexpr int V = Vec16<T>::N;
  const int lane = threadIdx.x % 32;
  const int n0 = (blockIdx.x * WARPS + threadIdx.x / 32) * ROWS;
  if (n0 >= N) return;
  float acc[ROWS][M];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
  const uint4 *wr[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)min(n0 + r, N - 1) * K);
  const int kv = K / V;  // 16-byte vectors per row
  for (int base = lane; base < kv; base += 32 * UNROLL) {
    uint4 wv[ROWS][UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int i = base + u * 32;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) wv[r][u] = i < kv ? __ldg(wr[r] + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int i = base + u * 32;
      if (i >= kv) break;
      float wf[ROWS][V];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) unpack<T>(wv[r][u], wf[r]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xf[V];
        unpack<T>(__ldg(reinterpret_cast<const uint4 *>(x + (size_t)m * K) + i), xf);
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
          for (int j = 0; j < V; ++j) acc[r][m] = fmaf(wf[r][j], xf[j], acc[r][m]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float s = warp_sum(acc[r][m]);
      if (lane == 0 && n0 + r < N) y[(size_t)m * N + n0 + r] = from_f<T>(s);
    }
}

#define GEMV_M(SFX, T, M)                                                                                    \
  extern "C" __global__ void gemv_##SFX##_m##M(const T *x, const T *w, T *y, int N, int K) {                 \
    gemv<T, M>(x, w, y, N, K);                                                                               \
  }
#define INSTANTIATE(SFX, T)                                                                                  \
  GEMV_M(SFX, T, 1) GEMV_M(SFX, T, 2) GEMV_M(SFX, T, 3) GEMV_M(SFX, T, 4) GEMV_M(SFX, T, 5) GEMV_M(SFX, T, 6) \
  GEMV_M(SFX, T, 7) GEMV_M(SFX, T, 8)
INSTANTIATE(f32, float)
INSTANTIATE(bf16, __nv_bfloat16)
INSTANTIATE(f16, __half)

// Fused elementwise kernels for hearth's CUDA decode path (see src/gpu/mod.rs). Each replaces several candle ops
// (and their launches, allocations and dtype casts) in the per-layer sequence of a dense model. Each is launched
// with programmatic dependent launch where the GPU has it (gpu/launch.rs): pdl_wait() before any global access.
//
// * add_rmsnorm_*: h_out = h + a (rounded to T, the residual stream's dtype), y = rmsnorm(h_out) * w, reduced in f32.
// * silu_mul_* / gelu_mul_*: out[t, i] = act(gu[t, i]) * gu[t, I + i] over a fused gate|up projection.
// * qkv_rope_*: splits a fused q|k|v projection (T, (H + 2 KvH) * D), applies the rotary embedding to q and k
//   (f32 tables (T, D/2), half-split or interleaved pairs), writes q to (T, H, D) and k, v straight into their
//   paged cache rows (slots[t]).
#include "common.cuh"

// One block per row, VPT values per thread held in registers between the sum of squares and the scaling: every
// load of the row is issued before the first use (one memory latency per pass, not one per value as a strided
// loop has).
// Requires ncols <= VPT * blockDim.x.
template <typename T, int VPT>
__device__ void add_rmsnorm(const T *h, const T *a, T *__restrict__ h_out,
                            T *__restrict__ y, const T *__restrict__ w, int ncols, float eps) {
  __shared__ float partial[32];
  pdl_trigger();
  pdl_wait();
  const size_t row = blockIdx.x;
  const T *hr = h + row * ncols;
  const T *ar = a + row * ncols;
  T *hor = h_out + row * ncols;
  T *yr = y + row * ncols;
  float v[VPT];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int c = threadIdx.x + k * blockDim.x;
    v[k] = c < ncols ? to_f(hr[c]) + to_f(ar[c]) : 0.f;
  }
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int c = threadIdx.x + k * blockDim.x;
    const T s = from_f<T>(v[k]);
    v[k] = to_f(s);  // the residual stream is stored (and normalized) in T
    if (c < ncols) hor[c] = s;
    ss += v[k] * v[k];
  }
  ss = warp_sum(ss);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  if (lane == 0) partial[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    float x = lane < nw ? partial[lane] : 0.f;
    x = warp_sum(x);
    if (lane == 0) partial[0] = x;
  }
  __syncthreads();
  const float scale = rsqrtf(partial[0] / ncols + eps);
#pragma unroll
  for (int k = 0; k < VPT; k++) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < ncols) yr[c] = from_f<T>(v[k] * scale * to_f(w[c]));
  }
}

template <typename T, int ACT>
__device__ void act_mul(const T *gu, T *__restrict__ out, int inter, size_t n) {
  pdl_trigger();
  pdl_wait();
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const size_t t = i / inter, c = i % inter;
    const float g = to_f(gu[t * 2 * inter + c]);
    const float u = to_f(gu[t * 2 * inter + inter + c]);
    out[i] = from_f<T>((ACT == 0 ? silu(g) : gelu_tanh(g)) * u);
  }
}

// grid (T, H + 2 KvH), block D / 2 threads: one pair of rotated values each. cos_t / sin_t may stay on the read-only
// path (__restrict__): candle's gather writes them with a normal launch before the first layer, so they are complete
// before any kernel that reads them starts.
template <typename T>
__device__ void qkv_rope(const T *qkv, const float *__restrict__ cos_t, const float *__restrict__ sin_t,
                         T *__restrict__ q_out, T *__restrict__ kc, T *__restrict__ vc,
                         const uint32_t *__restrict__ slots, int H, int KvH, int D, int interleaved) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x, head = blockIdx.y, i = threadIdx.x, half = D / 2;
  if (i >= half) return;
  const T *src = qkv + ((size_t)t * (H + 2 * KvH) + head) * D;
  if (head >= H + KvH) {  // v: copy into the cache
    T *dst = vc + ((size_t)slots[t] * KvH + (head - H - KvH)) * D;
    dst[i] = src[i];
    dst[i + half] = src[i + half];
    return;
  }
  const float c = cos_t[(size_t)t * half + i], s = sin_t[(size_t)t * half + i];
  const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
  const float x0 = to_f(src[i0]), x1 = to_f(src[i1]);
  T *dst = head < H ? q_out + ((size_t)t * H + head) * D : kc + ((size_t)slots[t] * KvH + (head - H)) * D;
  const float2 r = rope_pair(x0, x1, c, s);
  dst[i0] = from_f<T>(r.x);
  dst[i1] = from_f<T>(r.y);
}

#define ADD_RMSNORM(SFX, T, VPT)                                                                               \
  extern "C" __global__ void __launch_bounds__(1024)                                                          \
      add_rmsnorm_##SFX##_v##VPT(const T *h, const T *a, T *h_out, T *y, const T *w, int ncols, float eps) {  \
    add_rmsnorm<T, VPT>(h, a, h_out, y, w, ncols, eps);                                                       \
  }
#define INSTANTIATE(SFX, T)                                                                                    \
  ADD_RMSNORM(SFX, T, 1) ADD_RMSNORM(SFX, T, 2) ADD_RMSNORM(SFX, T, 4) ADD_RMSNORM(SFX, T, 8)                \
  ADD_RMSNORM(SFX, T, 16)                                                                                     \
  extern "C" __global__ void silu_mul_##SFX(const T *gu, T *out, int inter, size_t n) {                      \
    act_mul<T, 0>(gu, out, inter, n);                                                                         \
  }                                                                                                           \
  extern "C" __global__ void gelu_mul_##SFX(const T *gu, T *out, int inter, size_t n) {                      \
    act_mul<T, 1>(gu, out, inter, n);                                                                         \
  }                                                                                                           \
  extern "C" __global__ void qkv_rope_##SFX(const T *qkv, const float *cos_t, const float *sin_t, T *q_out,   \
                                            T *kc, T *vc, const uint32_t *slots, int H, int KvH, int D,       \
                                            int interleaved) {                                                \
    qkv_rope<T>(qkv, cos_t, sin_t, q_out, kc, vc, slots, H, KvH, D, interleaved);                             \
  }
INSTANTIATE(f32, float)
INSTANTIATE(bf16, __nv_bfloat16)
INSTANTIATE(f16, __half)

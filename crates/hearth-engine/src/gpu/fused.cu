// Fused elementwise kernels for hearth's CUDA decode path (see src/gpu/mod.rs). Each replaces several candle ops
// (and their launches, allocations and dtype casts) in the per-layer sequence of a dense model.
//
// * add_rmsnorm_*: h_out = h + a (rounded to T, the residual stream's dtype), y = rmsnorm(h_out) * w, reduced in f32.
// * silu_mul_* / gelu_mul_*: out[t, i] = act(gu[t, i]) * gu[t, I + i] over a fused gate|up projection.
// * qkv_rope_*: splits a fused q|k|v projection (T, (H + 2 KvH) * D), applies the rotary embedding to q and k
//   (f32 tables (T, D/2), half-split or interleaved pairs), writes q to (T, H, D) and k, v straight into their
//   paged cache rows (slots[t]).
#include "common.cuh"

template <typename T>
__device__ void add_rmsnorm(const T *__restrict__ h, const T *__restrict__ a, T *__restrict__ h_out,
                            T *__restrict__ y, const T *__restrict__ w, int ncols, float eps) {
  __shared__ float partial[32];
  const size_t row = blockIdx.x;
  const T *hr = h + row * ncols;
  const T *ar = a + row * ncols;
  T *hor = h_out + row * ncols;
  T *yr = y + row * ncols;
  float ss = 0.f;
  for (int c = threadIdx.x; c < ncols; c += blockDim.x) {
    const T s = from_f<T>(to_f(hr[c]) + to_f(ar[c]));
    hor[c] = s;
    const float f = to_f(s);
    ss += f * f;
  }
  ss = warp_sum(ss);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  if (lane == 0) partial[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    float v = lane < nw ? partial[lane] : 0.f;
    v = warp_sum(v);
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  const float scale = rsqrtf(partial[0] / ncols + eps);
  for (int c = threadIdx.x; c < ncols; c += blockDim.x) yr[c] = from_f<T>(to_f(hor[c]) * scale * to_f(w[c]));
}

__device__ __forceinline__ float silu(float g) { return g / (1.f + __expf(-g)); }
__device__ __forceinline__ float gelu_tanh(float g) {
  return 0.5f * g * (1.f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
}

template <typename T, int ACT>
__device__ void act_mul(const T *__restrict__ gu, T *__restrict__ out, int inter, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const size_t t = i / inter, c = i % inter;
    const float g = to_f(gu[t * 2 * inter + c]);
    const float u = to_f(gu[t * 2 * inter + inter + c]);
    out[i] = from_f<T>((ACT == 0 ? silu(g) : gelu_tanh(g)) * u);
  }
}

// grid (T, H + 2 KvH), block D / 2 threads: one pair of rotated values each.
template <typename T>
__device__ void qkv_rope(const T *__restrict__ qkv, const float *__restrict__ cos_t, const float *__restrict__ sin_t,
                         T *__restrict__ q_out, T *__restrict__ kc, T *__restrict__ vc,
                         const uint32_t *__restrict__ slots, int H, int KvH, int D, int interleaved) {
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
  dst[i0] = from_f<T>(x0 * c - x1 * s);
  dst[i1] = from_f<T>(x1 * c + x0 * s);
}

#define INSTANTIATE(SFX, T)                                                                                    \
  extern "C" __global__ void add_rmsnorm_##SFX(const T *h, const T *a, T *h_out, T *y, const T *w, int ncols,  \
                                               float eps) {                                                   \
    add_rmsnorm<T>(h, a, h_out, y, w, ncols, eps);                                                            \
  }                                                                                                           \
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

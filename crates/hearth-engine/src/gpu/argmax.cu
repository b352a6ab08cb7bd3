// Greedy sampling on the device: the index of each row's maximum logit, lowest index on ties (as torch.argmax and
// hearth's CPU sampler), so that a greedy step copies R token ids to the host instead of R x V logits.
//
// argmax_rows_f32: logits (R, V) f32, out (R,) u32; one block of ARGMAX_THREADS threads per row. A NaN never wins
// (a comparison with NaN is false) except at index 0, as on the CPU; a row of only -inf gives index 0.
//
// argmax_rows_masked_f32: the same over the tokens a row's grammar allows: mask (R, W) u32, token c allowed when
// bit c % 32 of word c / 32 is set. Out: the best allowed token (lowest index on ties; a NaN never wins), or
// 0xffffffff when the mask allows no token below V.
#include "common.cuh"

#define ARGMAX_THREADS 1024

// Whether (v, i) beats (bv, bi): larger value, or equal value at a lower index.
__device__ __forceinline__ bool beats(float v, uint32_t i, float bv, uint32_t bi) {
  return v > bv || (v == bv && i < bi);
}

// The block's best (value, index) over the whole block, in lane 0 of warp 0.
__device__ __forceinline__ void block_best(float &bv, uint32_t &bi) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffff, bv, o);
    const uint32_t oi = __shfl_xor_sync(0xffffffff, bi, o);
    if (beats(ov, oi, bv, bi)) { bv = ov; bi = oi; }
  }
  __shared__ float sv[32];
  __shared__ uint32_t si[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
  __syncthreads();
  if (warp == 0) {
    const int nw = blockDim.x / 32;
    bv = lane < nw ? sv[lane] : -INFINITY;
    bi = lane < nw ? si[lane] : 0xffffffffu;
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffff, bv, o);
      const uint32_t oi = __shfl_xor_sync(0xffffffff, bi, o);
      if (beats(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
  }
}

extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_rows_masked_f32(const float *logits, const uint32_t *__restrict__ mask, uint32_t *__restrict__ out, int V,
                           int W) {
  pdl_trigger();
  pdl_wait();
  const float *row = logits + (size_t)blockIdx.x * V;
  const uint32_t *m = mask + (size_t)blockIdx.x * W;
  float bv = -INFINITY;
  uint32_t bi = 0xffffffffu;
  // One mask word per thread and step: its 32 tokens, those allowed compete (an allowed -inf still beats nothing).
  for (int w = threadIdx.x; w < W; w += ARGMAX_THREADS) {
    uint32_t bits = m[w];
    while (bits) {
      const uint32_t c = (uint32_t)w * 32 + __ffs(bits) - 1;
      bits &= bits - 1;
      if (c >= (uint32_t)V) break;
      const float x = row[c];
      if (beats(x, c, bv, bi) || (bi == 0xffffffffu && !isnan(x))) { bv = x; bi = c; }
    }
  }
  block_best(bv, bi);
  if (threadIdx.x == 0) out[blockIdx.x] = bi;
}

extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_rows_f32(const float *logits, uint32_t *__restrict__ out, int V) {
  pdl_trigger();
  pdl_wait();  // launched with PDL (gpu/launch.rs): the logits are the previous kernel's output
  const float *row = logits + (size_t)blockIdx.x * V;
  float bv = -INFINITY;
  uint32_t bi = 0xffffffffu;
  // Four independent loads in flight per thread; indices ascend, so a strict > keeps the lowest index.
  for (int base = threadIdx.x; base < V; base += 4 * ARGMAX_THREADS) {
    float x[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int c = base + u * ARGMAX_THREADS;
      x[u] = c < V ? row[c] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const uint32_t c = base + u * ARGMAX_THREADS;
      if (c < (uint32_t)V && beats(x[u], c, bv, bi)) { bv = x[u]; bi = c; }
    }
  }
  block_best(bv, bi);
  // Index 0 when nothing wins (a row of only NaN), or when row[0] is NaN: the CPU sampler's argmax starts from
  // index 0 and no value compares greater than a NaN there.
  if (threadIdx.x == 0) out[blockIdx.x] = bi == 0xffffffffu || isnan(row[0]) ? 0u : bi;
}

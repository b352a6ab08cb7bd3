// Shared pieces of hearth's decode-attention kernels (paged_attention.cu, decode_cluster.cu): the block shape, vector
// loads, a block's key range, the per-tile online softmax and PV steps, and the cross-warp merge.
#pragma once
#include "../../gpu/common.cuh"

#define NWARPS 8
#define MAX_GD 1024  // G * D values of one block's queries / accumulators
#define PV_BATCH 8   // value rows loaded ahead in the batched PV loop

// Blocks of NWARPS * 32 threads a multiprocessor should fit (the register budget of __launch_bounds__): 16-bit
// caches 4 for GM * D <= 256 and 3 for <= 512 (bf16, D 128, G 4: 80 registers, 3 blocks, where 89 unbounded gave
// 2), f32 caches 2 (their wider rows spill under a tighter budget).
constexpr int min_blocks(int elem_bytes, int gd) { return elem_bytes == 4 ? 2 : gd <= 256 ? 4 : gd <= 512 ? 3 : 2; }

// 8 consecutive values (16- or 32-byte aligned) as floats.
__device__ __forceinline__ void load8(const float *p, float *o) {
  const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
  o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w; o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16 *p, float *o) {
  const uint4 u = *reinterpret_cast<const uint4 *>(p);
  const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 f = __bfloat1622float2(h[i]);
    o[2 * i] = f.x; o[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const __half *p, float *o) {
  const uint4 u = *reinterpret_cast<const uint4 *>(p);
  const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 f = __half22float2(h[i]);
    o[2 * i] = f.x; o[2 * i + 1] = f.y;
  }
}

// N consecutive values loaded as one (or, past 16 bytes, a few) vector loads.
template <typename T, int N> struct alignas(sizeof(T) * N) Pack { T v[N]; };

// A decode block's keys: its token's position p, the first visible position `start`, its block-table row, and
// the key offsets [k_lo, n_keys) of its split (flash-decoding: block z takes [z * split_keys, (z + 1) *
// split_keys) of the visible range; a split that starts past the last key has none, n_keys <= k_lo). Reads only
// host-uploaded step metadata (safe before pdl_wait).
struct KeyRange {
  int p, start, k_lo, n_keys;
  const uint32_t *table;
};
__device__ __forceinline__ KeyRange key_range(const uint32_t *__restrict__ tables, const uint32_t *__restrict__ tok_row,
                                              const uint32_t *__restrict__ tok_pos, int t, int max_blocks,
                                              int window, int split_keys) {
  KeyRange r;
  r.p = (int)tok_pos[t];
  r.start = window > 0 ? max(0, r.p + 1 - window) : 0;
  r.table = tables + (size_t)tok_row[t] * max_blocks;
  const int n_all = r.p + 1 - r.start;
  r.k_lo = split_keys > 0 ? (int)blockIdx.z * split_keys : 0;
  r.n_keys = split_keys > 0 ? min(n_all, r.k_lo + split_keys) : n_all;  // one past the last key offset
  return r;
}

// One tile's online-softmax step for the G heads: s[h] (this lane's key score) becomes its probability under the
// running max, m/l/acc are rescaled to the new max. Shared by paged_attn and paged_attn_pf (the same arithmetic).
template <int GMAX, int PER_LANE>
__device__ __forceinline__ void softmax_tile(float (&s)[GMAX], float (&m)[GMAX], float (&l)[GMAX],
                                             float (&acc)[GMAX][PER_LANE], bool valid, float softcap, int G) {
#pragma unroll
  for (int h = 0; h < GMAX; h++) {
    if (h >= G) break;
    float x = s[h];
    if (softcap > 0.f) x = softcap * tanhf(x / softcap);
    x = valid ? x : -INFINITY;
    const float mt = warp_max(x);
    const float m_new = fmaxf(m[h], mt);  // finite: lane 0 of every tile is valid
    const float corr = __expf(m[h] - m_new);
    const float pr = valid ? __expf(x - m_new) : 0.f;
    l[h] = l[h] * corr + pr;  // lane-partial sum, reduced at the end
    m[h] = m_new;
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) acc[h][e] *= corr;
    s[h] = pr;
  }
}

// acc[h] += p(key kk) * this lane's slice of key kk's value row, for the G heads (p from lane kk's s[h]).
template <typename T, int GMAX, int PER_LANE>
__device__ __forceinline__ void pv_row(float (&acc)[GMAX][PER_LANE], const float (&s)[GMAX],
                                       const Pack<T, PER_LANE> &pk, int kk, int G) {
  float vv[PER_LANE];
#pragma unroll
  for (int e = 0; e < PER_LANE; e++) vv[e] = to_f(pk.v[e]);
#pragma unroll
  for (int h = 0; h < GMAX; h++) {
    if (h >= G) break;
    const float ph = __shfl_sync(0xffffffff, s[h], kk);  // 0 for a lane past the tile's keys
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) acc[h][e] += ph * vv[e];
  }
}

// This lane's block-table entry for a tile of the block's key range (0 past its last key). Loaded one tile ahead of
// its use (the first one before the queries are staged), so that the table lookup is not a memory latency of its
// own before each tile's keys.
__device__ __forceinline__ uint32_t tile_table_entry(const uint32_t *__restrict__ table, int start, int n_keys, int bs,
                                                     int tile, int lane) {
  const int off = tile * 32 + lane;
  return off < n_keys ? table[(start + off) / bs] : 0u;
}

// A warp's walk over its tiles of the block's keys [k_lo, n_keys) (tile k_lo / 32 + warp, then every NWARPS-th):
// QK^T for the G heads (one key per lane, its row's loads issued before the FMAs), the online softmax, and PV (a
// slice of D per lane; batched: PV_BATCH value rows loaded before they are used, one memory latency per batch; a
// key past the tile's last one repeats that row's load with probability 0). qs: the scaled queries (shared); blk_next: this lane's entry for the warp's
// first tile. PVB: value rows per PV batch (PV_BATCH, or 32 for a whole tile in one memory latency where registers
// allow; visiting more zero-probability keys adds exact zeros, so the bits do not depend on it). Leaves the warp's
// state in m, l (lane-partial sums) and acc.
template <typename T, int D, int GMAX, int PVB = PV_BATCH>
__device__ __forceinline__ void attend_tiles(const float *qs, const T *kc, const T *vc, const uint32_t *__restrict__ table,
                                             int start, int k_lo, int n_keys, int bs, size_t row_stride, int g, int G,
                                             float softcap, int pv_batched, uint32_t blk_next, float (&m)[GMAX],
                                             float (&l)[GMAX], float (&acc)[GMAX][D / 32]) {
  constexpr int PER_LANE = D / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < GMAX; h++) {
    m[h] = -INFINITY;
    l[h] = 0.f;
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) acc[h][e] = 0.f;
  }
  for (int tile = k_lo / 32 + warp; tile * 32 < n_keys; tile += NWARPS) {
    const int j = start + tile * 32 + lane;
    const bool valid = tile * 32 + lane < n_keys;
    const uint32_t blk = blk_next;
    blk_next = tile_table_entry(table, start, n_keys, bs, tile + NWARPS, lane);
    unsigned long long krow = 0;
    if (valid) krow = ((size_t)blk * bs + j % bs) * row_stride + (size_t)g * D;
    float s[GMAX];
#pragma unroll
    for (int h = 0; h < GMAX; h++) s[h] = 0.f;
    if (valid) {
      const T *kp = kc + krow;
      // Fully unrolled: the row's loads are independent of the FMAs, so they are all issued up front.
#pragma unroll
      for (int d0 = 0; d0 < D; d0 += 8) {
        float kv[8];
        load8(kp + d0, kv);
#pragma unroll
        for (int h = 0; h < GMAX; h++) {
          if (h >= G) break;
#pragma unroll
          for (int e = 0; e < 8; e++) s[h] += qs[h * D + d0 + e] * kv[e];
        }
      }
    }
    softmax_tile<GMAX, PER_LANE>(s, m, l, acc, valid, softcap, G);
    const int tile_keys = min(32, n_keys - tile * 32);
    if (pv_batched) {
      for (int k0 = 0; k0 < tile_keys; k0 += PVB) {
        Pack<T, PER_LANE> pk[PVB];
#pragma unroll
        for (int u = 0; u < PVB; u++) {
          const unsigned long long vrow = __shfl_sync(0xffffffff, krow, min(k0 + u, tile_keys - 1));
          pk[u] = *reinterpret_cast<const Pack<T, PER_LANE> *>(vc + vrow + lane * PER_LANE);
        }
#pragma unroll
        for (int u = 0; u < PVB; u++) pv_row<T, GMAX, PER_LANE>(acc, s, pk[u], k0 + u, G);
      }
    } else {
      for (int kk = 0; kk < tile_keys; kk++) {
        const unsigned long long vrow = __shfl_sync(0xffffffff, krow, kk);
        // This lane's PER_LANE values of the row in one vector load (rows and slices are aligned to it).
        const Pack<T, PER_LANE> pk = *reinterpret_cast<const Pack<T, PER_LANE> *>(vc + vrow + lane * PER_LANE);
        pv_row<T, GMAX, PER_LANE>(acc, s, pk, kk, G);
      }
    }
  }
}

// A decode block's warps hand their online-softmax states to shared memory (part_m/part_l: each warp's max and its
// lanes' summed l; part_acc: its unnormalized outputs), then the block syncs.
template <int D, int GMAX>
__device__ __forceinline__ void warps_to_smem(const float (&m)[GMAX], const float (&l)[GMAX],
                                              const float (&acc)[GMAX][D / 32], float (*part_acc)[GMAX * D],
                                              float (*part_m)[GMAX], float (*part_l)[GMAX], int G) {
  constexpr int PER_LANE = D / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < GMAX; h++) {
    if (h >= G) break;
    const float lsum = warp_sum(l[h]);
    if (lane == 0) {
      part_m[warp][h] = m[h];
      part_l[warp][h] = lsum;
    }
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) part_acc[warp][h * D + lane * PER_LANE + e] = acc[h][e];
  }
  __syncthreads();
}

// The block's combined state for output i (head h = i / D) from its warps' (warps_to_smem): (num, M, den) with
// M the warps' max, num = Σ_w acc_w[i] e^{m_w - M}, den = Σ_w l_w e^{m_w - M} (a warp that saw no keys adds
// nothing; no keys at all: (0, -inf, 0)).
template <int D, int GMAX>
__device__ __forceinline__ float3 warp_combine(const float (*part_acc)[GMAX * D], const float (*part_m)[GMAX],
                                               const float (*part_l)[GMAX], int i, int h) {
  float M = -INFINITY;
  for (int w = 0; w < NWARPS; w++) M = fmaxf(M, part_m[w][h]);
  float num = 0.f, den = 0.f;
  for (int w = 0; w < NWARPS; w++) {
    if (part_m[w][h] == -INFINITY) continue;  // a warp that saw no keys
    const float f = __expf(part_m[w][h] - M);
    num += part_acc[w][i] * f;
    den += part_l[w][h] * f;
  }
  return make_float3(num, M, den);
}

// One output of a split attention from its Z splits' (max m_z, sum l_z, unnormalized value num_z), read through the
// accessors: Σ_z num_z e^{m_z - M} / Σ_z l_z e^{m_z - M} with M the splits' max, summed in split order (a split past
// the last key, m_z = -inf, adds nothing). The one arithmetic of every split merge (paged_attn_merge and the
// cluster kernel), so they make the same bits from the same partials. UNROLL: the sum loop's unroll factor (the
// separate merge kernel loads its partials from global memory, 8 at a time).
template <int UNROLL, typename FM, typename FL, typename FN>
__device__ __forceinline__ float merge_splits(int Z, FM m, FL l, FN num) {
  float M = -INFINITY;
  for (int z = 0; z < Z; z++) M = fmaxf(M, m(z));
  float n = 0.f, den = 0.f;
#pragma unroll UNROLL
  for (int z = 0; z < Z; z++) {
    const float mz = m(z);
    const float f = mz == -INFINITY ? 0.f : __expf(mz - M);
    n += num(z) * f;
    den += l(z) * f;
  }
  return n / den;
}

// Shared pieces of hearth's decode-attention kernels (paged_attention.cu, decode_cluster.cu): the block shape, vector
// loads, a block's key range, the per-tile online softmax and PV steps, and the cross-warp merge.
#pragma once
#include "../../gpu/common.cuh"

#define NWARPS 8
#define MAX_GD 1024  // G * D values of one block's queries / accumulators
#define PV_BATCH 8   // value rows loaded ahead in the batched PV loop
#define MAX_Z 256    // splits the merge handles (the launchers keep z <= MAX_Z)

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

// A float cache's head rows (T values).
template <typename T, int D>
struct PlainRows {
  using E = T;
  static constexpr bool CODED = false;
  static constexpr int UNITS = D;
  static constexpr int P = D / 32;
  struct Raw {
    Pack<T, P> v;
  };
  __device__ __forceinline__ void key8(const E *row, int d0, float (&o)[8]) const { load8(row + d0, o); }
  __device__ __forceinline__ Raw lane_raw(const E *row, int lane) const {
    return Raw{*reinterpret_cast<const Pack<T, P> *>(row + lane * P)};
  }
  __device__ __forceinline__ void decode(const Raw &r, float (&o)[P]) const {
#pragma unroll
    for (int e = 0; e < P; e++) o[e] = to_f(r.v.v[e]);
  }
};

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

// acc[h] += p(key kk) * this lane's slice of key kk's value row (vv, decoded), for the G heads (p from lane kk's
// s[h]).
template <int GMAX, int PER_LANE>
__device__ __forceinline__ void pv_row(float (&acc)[GMAX][PER_LANE], const float (&s)[GMAX], const float (&vv)[PER_LANE],
                                       int kk, int G) {
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
template <typename KR, typename VR, int D, int GMAX, int PVB = PV_BATCH>
__device__ __forceinline__ void attend_tiles(const float *qs, const KR &kr, const typename KR::E *kc, const VR &vr,
                                             const typename VR::E *vc, const uint32_t *__restrict__ table, int start,
                                             int k_lo, int n_keys, int bs, int KvH, int g, int G, float softcap,
                                             int pv_batched, uint32_t blk_next, float (&m)[GMAX], float (&l)[GMAX],
                                             float (&acc)[GMAX][D / 32]) {
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
    // The key's head row (cache row * KvH + g): its K and V rows start at that times their row sizes.
    unsigned long long hrow = 0;
    if (valid) hrow = ((size_t)blk * bs + j % bs) * KvH + g;
    float s[GMAX];
#pragma unroll
    for (int h = 0; h < GMAX; h++) s[h] = 0.f;
    if (valid) {
      const typename KR::E *kp = kc + hrow * KR::UNITS;
      // Fully unrolled: the row's loads are independent of the FMAs, so they are all issued up front.
#pragma unroll
      for (int d0 = 0; d0 < D; d0 += 8) {
        float kv[8];
        kr.key8(kp, d0, kv);
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
        typename VR::Raw pk[PVB];
#pragma unroll
        for (int u = 0; u < PVB; u++) {
          const unsigned long long vh = __shfl_sync(0xffffffff, hrow, min(k0 + u, tile_keys - 1));
          pk[u] = vr.lane_raw(vc + vh * VR::UNITS, lane);
        }
#pragma unroll
        for (int u = 0; u < PVB; u++) {
          float vv[PER_LANE];
          vr.decode(pk[u], vv);
          pv_row<GMAX, PER_LANE>(acc, s, vv, k0 + u, G);
        }
      }
    } else {
      for (int kk = 0; kk < tile_keys; kk++) {
        const unsigned long long vh = __shfl_sync(0xffffffff, hrow, kk);
        // This lane's PER_LANE values of the row in one vector load (rows and slices are aligned to it).
        float vv[PER_LANE];
        vr.decode(vr.lane_raw(vc + vh * VR::UNITS, lane), vv);
        pv_row<GMAX, PER_LANE>(acc, s, vv, kk, G);
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

// The fixed pseudo-random sign of index i (codec.rs flip_signs: bit 25 of i * 0x9E3779B9).
__device__ __forceinline__ bool kv_flip(int i) { return (((uint32_t)i * 0x9E3779B9u) >> 25) & 1u; }

// Rotate (or, `inverse`, rotate back) `nv` vectors of D floats in shared memory, vector v at x + v * ld (ld >= D):
// signs then the normalized Walsh-Hadamard transform (its inverse: the transform, then the signs), the CPU's exact
// sequence of f32 operations. Vector v is left alone unless bit v of `mask` is set (v < 64; ~0 for all). Every
// thread of the block calls it (it syncs).
template <int D>
__device__ void rotate_smem(float *x, int nv, unsigned long long mask, bool inverse, int ld = D) {
  const int tid = threadIdx.x, nt = blockDim.x;
  auto on = [&](int v) { return v >= 64 ? mask == ~0ull : ((mask >> v) & 1ull) != 0; };
  if (!inverse) {
    for (int i = tid; i < nv * D; i += nt)
      if (on(i / D) && kv_flip(i % D)) x[(i / D) * ld + i % D] = -x[(i / D) * ld + i % D];
    __syncthreads();
  }
  for (int h = 1; h < D; h *= 2) {
    for (int p = tid; p < nv * D / 2; p += nt) {
      const int v = p / (D / 2), j = p % (D / 2);
      if (!on(v)) continue;
      float *y = x + v * ld + (j / h) * 2 * h + j % h;
      const float a = y[0], b = y[h];
      y[0] = __fadd_rn(a, b);
      y[h] = __fsub_rn(a, b);
    }
    __syncthreads();
  }
  const float scale = 1.f / sqrtf((float)D);
  for (int i = tid; i < nv * D; i += nt) {
    if (!on(i / D)) continue;
    float *y = x + (i / D) * ld + i % D;
    float v = __fmul_rn(*y, scale);
    if (inverse && kv_flip(i % D)) v = -v;
    *y = v;
  }
  __syncthreads();
}

// Stage token t's G query heads of kv head g (from `row`, its q|k|v projection row) in shared memory: rotated
// (rope_pair at the token's angles ct/st, rounded to T as qkv_rope stores them), then scaled as paged_attn stages
// them. The cluster decode kernels' first step.
template <typename T, int D>
__device__ __forceinline__ void stage_rope_queries(float *qs, const T *row, const float *ct, const float *st, int g,
                                                   int G, int interleaved, float scale) {
  constexpr int half = D / 2;
  for (int i = threadIdx.x; i < G * half; i += blockDim.x) {
    const int hh = i / half, j = i % half;
    const T *src = row + (size_t)(g * G + hh) * D;
    const int i0 = interleaved ? 2 * j : j, i1 = interleaved ? 2 * j + 1 : j + half;
    const float2 r = rope_pair(to_f(src[i0]), to_f(src[i1]), ct[j], st[j]);
    qs[hh * D + i0] = to_f(from_f<T>(r.x)) * scale;
    qs[hh * D + i1] = to_f(from_f<T>(r.y)) * scale;
  }
}

// The end of a decode-attention block: merge its warps' online-softmax states, out = Σ_w acc_w e^{m_w - M} /
// Σ_w l_w e^{m_w - M}, and write the token's G heads (or, in split mode, this split's unnormalized partial for
// paged_attn_merge: acc at max M, then (M, l); a split past the last key writes M = -inf, l = 0). ROT: the
// outputs are of rotated values, rotated back per head through `fin` (G * D floats of shared memory) before they
// are written (the merge does it in split mode).
template <typename T, int D, int GMAX, bool ROT>
__device__ void block_finish(const float (&m)[GMAX], const float (&l)[GMAX], const float (&acc)[GMAX][D / 32],
                             float (*part_acc)[GMAX * D], float (*part_m)[GMAX], float (*part_l)[GMAX],
                             T *__restrict__ out, float *__restrict__ part, int t, int b, int g, int G, int H,
                             int split_keys, float *fin) {
  warps_to_smem<D, GMAX>(m, l, acc, part_acc, part_m, part_l, G);
  T *ot = out + ((size_t)t * H + (size_t)g * G) * D;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int h = i / D;
    const float3 r = warp_combine<D, GMAX>(part_acc, part_m, part_l, i, h);
    const float num = r.x, M = r.y, den = r.z;
    if (split_keys > 0) {
      float *pp = part + (((size_t)b * H + (size_t)g * G + h) * gridDim.z + blockIdx.z) * (D + 2);
      pp[i % D] = num;
      if (i % D == 0) {
        pp[D] = M;
        pp[D + 1] = den;
      }
    } else if (ROT) {
      fin[i] = num / den;
    } else {
      ot[i] = from_f<T>(num / den);
    }
  }
  if (ROT && split_keys == 0) {
    __syncthreads();
    rotate_smem<D>(fin, G, ~0ull, true);
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) ot[i] = from_f<T>(fin[i]);
  }
}

// Merge the splits of paged_attn's split mode: grid (B, H), block D threads; part (B, H, Z, D + 2), Z <= MAX_Z
// (B: the attention launch's blocks along x, token tok_idx[b] or b).
// Every split's (max, sum) is loaded at once into shared memory, then each thread sums its d over the splits
// with the loads unrolled (no chain of dependent loads per split). ROT: the head's outputs are of rotated values,
// rotated back before they are written.
template <typename T, int D, bool ROT>
__device__ void paged_attn_merge(const float *part, T *__restrict__ out, int H, int Z,
                                 const uint32_t *__restrict__ tok_idx) {
  pdl_trigger();
  pdl_wait();
  const int b = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int t = tok_idx != nullptr ? (int)tok_idx[b] : b;
  const float *pp = part + ((size_t)b * H + h) * Z * (D + 2);
  __shared__ float sm[MAX_Z], sl[MAX_Z];
  for (int z = threadIdx.x; z < Z; z += blockDim.x) {
    sm[z] = pp[z * (D + 2) + D];
    sl[z] = pp[z * (D + 2) + D + 1];
  }
  __syncthreads();
  const float o = merge_splits<8>(
      Z, [&](int z) { return sm[z]; }, [&](int z) { return sl[z]; }, [&](int z) { return pp[z * (D + 2) + d]; });
  if constexpr (ROT) {
    __shared__ float head[D];
    head[d] = o;
    __syncthreads();
    rotate_smem<D>(head, 1, 1ull, true);
    out[((size_t)t * H + h) * D + d] = from_f<T>(head[d]);
  } else {
    out[((size_t)t * H + h) * D + d] = from_f<T>(o);
  }
}

// Paged attention for hearth's CUDA build: kernels that read and write the paged KV blocks in place.
//
// Layout (see src/kv/paged.rs): per layer one K and one V buffer of shape (rows, KvH, D) with
// rows = blocks * block_size; a sequence's position p lives in row table[p / bs] * bs + p % bs.
//
// * write_kv_*:  copies this step's new k (or v) rows, (T, KvH, D), to their cache rows (one launch per
//                buffer and layer; slot[t] = the cache row of packed token t).
// * paged_attn_*: one launch per layer for every packed token of the step, prefill pieces and decode tokens
//                mixed (or, through tok_idx, those the tensor-core kernel of prefill_tc.cu does not take). Block (t, g): token t against kv head g and the G = H / KvH query heads sharing it, so
//                GQA reads each key once per token. Its warps split the visible keys in tiles of 32 (one key per
//                lane for QK^T, one slice of D per lane for PV), each keeping an online softmax in f32; the
//                warps' partial results are merged at the end. Keys visible to the token at position p:
//                [max(0, p + 1 - window), p] (window 0 = unlimited). Latency, not bandwidth, bounds it at
//                small batches, so each tile's block-table entries are loaded one tile ahead, a key row's loads
//                are all issued before its FMAs, and PV loads 8 value rows at a time (HEARTH_CUDA_PV_BATCH=0:
//                one at a time). (Issuing a tile's value rows before its softmax — 128 bytes a lane — lost its A/B
//                at 8 and 32 streams: fewer blocks fit a multiprocessor; not kept.)
// * paged_attn_*_pf_*: the same for decode-only steps of one wave (batch 1), a tile's key and value rows loaded
//                before pdl_wait (HEARTH_CUDA_DECODE_PREFETCH=1, opt-in; see paged_attn_pf).
// Launched with programmatic dependent launch (gpu/launch.rs): the step metadata (host uploads, complete before
// any kernel of the step starts) is read before pdl_wait(), q and the caches (earlier kernels' writes) after it.
#include "../../gpu/common.cuh"

#define NWARPS 8
#define MAX_GD 1024  // G * D values of one block's queries / accumulators
#define PV_BATCH 8   // value rows loaded ahead in the batched PV loop
#define MAX_Z 256    // splits the merge handles (the launcher keeps z <= MAX_Z)

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

// 8 16-bit values of a 16-byte vector as floats.
template <typename T> __device__ __forceinline__ void unpack8(const uint4 &u, float *o) {
  const T *h = reinterpret_cast<const T *>(&u);
#pragma unroll
  for (int i = 0; i < 8; i++) o[i] = to_f(h[i]);
}

// N consecutive values loaded as one (or, past 16 bytes, a few) vector loads.
template <typename T, int N> struct alignas(sizeof(T) * N) Pack { T v[N]; };

template <typename T>
__device__ void write_kv(T *__restrict__ cache, const T *__restrict__ src, const uint32_t *__restrict__ slot,
                         int row_elems) {
  const int t = blockIdx.x;
  const size_t dst = (size_t)slot[t] * row_elems;
  const size_t s = (size_t)t * row_elems;
  for (int i = threadIdx.x; i < row_elems; i += blockDim.x) cache[dst + i] = src[s + i];
}

// Folded split merge (HEARTH_CUDA_MERGE_FOLD=1, opt-in: no gain measured): the split block of (b, g) that finishes
// last merges every split's partial for the G heads of g, with paged_attn_merge's arithmetic and order (the same
// bits), so no merge launch follows the attention. The classic last-block pattern: each block makes its partials
// visible (__threadfence) before it is counted; the last one reads them through L2 (__ldcg) and resets its
// counter for the next launch (a later launch counts only after its pdl_wait, when this one has completed).
// counters: one u32 per (b, g), zero before the launch. smem: the block's part_acc, free by now (>= 2 * GMAX *
// MAX_Z floats for D >= 64).
template <typename T, int D, int GMAX>
__device__ void merge_last(const float *part, T *ot, uint32_t *counters, float *smem, int b, int g, int G, int H,
                           int KvH) {
  static_assert(2 * GMAX * MAX_Z <= NWARPS * GMAX * D, "the merge's (max, sum) arrays fit in part_acc");
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&counters[(size_t)b * KvH + g], 1u) == gridDim.z - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int Z = gridDim.z;
  float *sm = smem, *sl = smem + GMAX * MAX_Z;
  const float *p0 = part + ((size_t)b * H + (size_t)g * G) * Z * (D + 2);  // head hh, split z: + (hh * Z + z) * (D + 2)
  for (int i = threadIdx.x; i < G * Z; i += blockDim.x) {
    const int hh = i / Z, z = i % Z;
    sm[hh * MAX_Z + z] = __ldcg(p0 + (size_t)(hh * Z + z) * (D + 2) + D);
    sl[hh * MAX_Z + z] = __ldcg(p0 + (size_t)(hh * Z + z) * (D + 2) + D + 1);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int hh = i / D, d = i % D;
    float M = -INFINITY;
    for (int z = 0; z < Z; z++) M = fmaxf(M, sm[hh * MAX_Z + z]);
    float num = 0.f, den = 0.f;
    for (int z = 0; z < Z; z++) {
      const float mz = sm[hh * MAX_Z + z];
      const float f = mz == -INFINITY ? 0.f : __expf(mz - M);
      num += __ldcg(p0 + (size_t)(hh * Z + z) * (D + 2) + d) * f;
      den += sl[hh * MAX_Z + z] * f;
    }
    ot[i] = from_f<T>(num / den);
  }
  if (threadIdx.x == 0) counters[(size_t)b * KvH + g] = 0u;
}

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

// The end of a decode-attention block: merge its warps' online-softmax states, out = Σ_w acc_w e^{m_w - M} /
// Σ_w l_w e^{m_w - M}, and write the token's G heads (or, in split mode, this split's unnormalized partial for
// paged_attn_merge: acc at max M, then (M, l); a split past the last key writes M = -inf, l = 0), then the folded
// merge when it is on. Shared by paged_attn and paged_attn_pf.
template <typename T, int D, int GMAX>
__device__ void block_finish(const float (&m)[GMAX], const float (&l)[GMAX], const float (&acc)[GMAX][D / 32],
                             float (*part_acc)[GMAX * D], float (*part_m)[GMAX], float (*part_l)[GMAX],
                             T *__restrict__ out, float *__restrict__ part, uint32_t *counters, int t, int b, int g,
                             int G, int H, int KvH, int split_keys) {
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
  T *ot = out + ((size_t)t * H + (size_t)g * G) * D;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int h = i / D;
    float M = -INFINITY;
    for (int w = 0; w < NWARPS; w++) M = fmaxf(M, part_m[w][h]);
    float num = 0.f, den = 0.f;
    for (int w = 0; w < NWARPS; w++) {
      if (part_m[w][h] == -INFINITY) continue;  // a warp that saw no keys
      const float f = __expf(part_m[w][h] - M);
      num += part_acc[w][i] * f;
      den += part_l[w][h] * f;
    }
    if (split_keys > 0) {
      float *pp = part + (((size_t)b * H + (size_t)g * G + h) * gridDim.z + blockIdx.z) * (D + 2);
      pp[i % D] = num;
      if (i % D == 0) {
        pp[D] = M;
        pp[D + 1] = den;
      }
    } else {
      ot[i] = from_f<T>(num / den);
    }
  }
  if (split_keys > 0 && counters != nullptr) merge_last<T, D, GMAX>(part, ot, counters, &part_acc[0][0], b, g, G, H, KvH);
}

// q: (T, H, D); kc, vc: (rows, KvH, D); tables: (R, max_blocks); tok_row, tok_pos: (T,); out: (T, H, D).
template <typename T, int D, int GMAX>
__device__ void paged_attn(const T *q, const T *kc, const T *vc,
                           const uint32_t *__restrict__ tables, const uint32_t *__restrict__ tok_row,
                           const uint32_t *__restrict__ tok_pos, T *__restrict__ out, int H, int KvH, int bs,
                           int max_blocks, int window, float scale, float softcap, int split_keys,
                           float *__restrict__ part, int pv_batched, const uint32_t *__restrict__ tok_idx,
                           uint32_t *counters) {
  constexpr int PER_LANE = D / 32;  // values of D each lane owns in PV
  static_assert(GMAX * D <= MAX_GD, "a block's queries and accumulators hold at most MAX_GD values");
  // Block b attends token tok_idx[b] (every token when tok_idx is null: the tensor-core kernel took none).
  const int b = blockIdx.x, g = blockIdx.y;
  const int t = tok_idx != nullptr ? (int)tok_idx[b] : b;
  const int G = H / KvH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  __shared__ float qs[GMAX * D];               // scaled queries of the G heads
  __shared__ float part_acc[NWARPS][GMAX * D];  // per-warp unnormalized outputs
  __shared__ float part_m[NWARPS][GMAX], part_l[NWARPS][GMAX];

  pdl_trigger();
  const KeyRange range = key_range(tables, tok_row, tok_pos, t, max_blocks, window, split_keys);
  const int start = range.start, k_lo = range.k_lo, n_keys = range.n_keys;
  const uint32_t *table = range.table;
  const size_t row_stride = (size_t)KvH * D;
  // This lane's block-table entry for a tile, loaded one tile ahead of its use (the first one before the
  // queries are staged), so that the table lookup is not a memory latency of its own before each tile's keys.
  auto table_entry = [&](int tile) -> uint32_t {
    const int off = tile * 32 + lane;
    return off < n_keys ? table[(start + off) / bs] : 0u;
  };
  uint32_t blk_next = table_entry(k_lo / 32 + warp);
  pdl_wait();  // q and this step's k/v rows are the previous kernels' writes

  const T *qt = q + ((size_t)t * H + (size_t)g * G) * D;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) qs[i] = to_f(qt[i]) * scale;
  __syncthreads();

  float m[GMAX], l[GMAX], acc[GMAX][PER_LANE];
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
    blk_next = table_entry(tile + NWARPS);
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
    // PV: key kk of the tile, this lane's slice of D. Batched mode loads PV_BATCH value rows before using them
    // (one memory latency per batch instead of per key); a key past the tile's last one repeats that row's load
    // (its probability is 0). (Running all 32 keys of every tile lost its A/B at 32-64 streams: not kept.)
    const int tile_keys = min(32, n_keys - tile * 32);
    if (pv_batched) {
      for (int k0 = 0; k0 < tile_keys; k0 += PV_BATCH) {
        Pack<T, PER_LANE> pk[PV_BATCH];
#pragma unroll
        for (int u = 0; u < PV_BATCH; u++) {
          const unsigned long long vrow = __shfl_sync(0xffffffff, krow, min(k0 + u, tile_keys - 1));
          pk[u] = *reinterpret_cast<const Pack<T, PER_LANE> *>(vc + vrow + lane * PER_LANE);
        }
#pragma unroll
        for (int u = 0; u < PV_BATCH; u++) pv_row<T, GMAX, PER_LANE>(acc, s, pk[u], k0 + u, G);
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

  block_finish<T, D, GMAX>(m, l, acc, part_acc, part_m, part_l, out, part, counters, t, b, g, G, H, KvH, split_keys);
}

// paged_attn_pf_*: paged_attn for steps whose every token is a single-token decode and whose launch is one wave
// of one block per multiprocessor (batch-1 decode; HEARTH_CUDA_DECODE_PREFETCH=1, opt-in: built, not yet run on a
// GPU). The decode chain at batch 1 is latency, not bandwidth (ncu: 16 us a layer for ~2 MB of K/V): q, then the
// key rows, then four batches of value rows, each a memory round trip. Here each warp issues its first tile's key
// rows and all 32 of its value slices *before* pdl_wait — every key but the token's own (position p, written by
// this step's rope kernel) was written by an earlier step, so no kernel in flight writes it — overlapping them with
// the previous kernel; after the wait only q and the newest key's rows are loaded. Later tiles (long contexts)
// load their key and value rows together. The arithmetic is paged_attn's, in the same order (the GPU test
// requires the same bits). 16-bit caches with D <= 128 only: a lane holds a key row (D * 2 bytes) and 32 value
// slices in registers.
template <typename T, int D, int GMAX>
__device__ void paged_attn_pf(const T *q, const T *kc, const T *vc, const uint32_t *__restrict__ tables,
                              const uint32_t *__restrict__ tok_row, const uint32_t *__restrict__ tok_pos,
                              T *__restrict__ out, int H, int KvH, int bs, int max_blocks, int window, float scale,
                              float softcap, int split_keys, float *__restrict__ part, uint32_t *counters) {
  constexpr int PER_LANE = D / 32;
  constexpr int KV = D * (int)sizeof(T) / 16;  // 16-byte vectors of a key row
  static_assert(sizeof(T) == 2 && D <= 128, "registers hold a 16-bit key row of D <= 128 values");
  static_assert(GMAX * D <= MAX_GD, "a block's queries and accumulators hold at most MAX_GD values");
  const int b = blockIdx.x, g = blockIdx.y, t = b;
  const int G = H / KvH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  __shared__ float qs[GMAX * D];
  __shared__ float part_acc[NWARPS][GMAX * D];
  __shared__ float part_m[NWARPS][GMAX], part_l[NWARPS][GMAX];

  pdl_trigger();
  const KeyRange range = key_range(tables, tok_row, tok_pos, t, max_blocks, window, split_keys);
  const int p = range.p, start = range.start, k_lo = range.k_lo, n_keys = range.n_keys;
  const uint32_t *table = range.table;
  const size_t row_stride = (size_t)KvH * D;

  uint4 kr[KV];                  // this lane's key row
  Pack<T, PER_LANE> vr[32];      // this lane's slice of each of the tile's value rows
  unsigned long long krow = 0;   // this lane's key's cache offset
  bool valid = false;
  int tile_keys = 0;
  // Issue tile `tile`'s loads; with `skip_new`, not the rows of position p (the caller loads those after the wait).
  auto load_tile = [&](int tile, bool skip_new) {
    const int off = tile * 32 + lane;
    valid = off < n_keys;
    const int j = start + off;
    const uint32_t blk = valid ? table[j / bs] : 0u;
    krow = valid ? ((size_t)blk * bs + j % bs) * row_stride + (size_t)g * D : 0ull;
    const bool load_k = valid && !(skip_new && j == p);
#pragma unroll
    for (int u = 0; u < KV; u++) kr[u] = load_k ? *reinterpret_cast<const uint4 *>(kc + krow + u * 8) : make_uint4(0, 0, 0, 0);
    tile_keys = min(32, n_keys - tile * 32);
#pragma unroll
    for (int u = 0; u < 32; u++) {
      const int kk = min(u, tile_keys - 1);  // past the tile's last key: that row again (its probability is 0)
      const unsigned long long vrow = __shfl_sync(0xffffffff, krow, kk);
      if (!(skip_new && start + tile * 32 + kk == p)) vr[u] = *reinterpret_cast<const Pack<T, PER_LANE> *>(vc + vrow + lane * PER_LANE);
    }
  };

  int tile = k_lo / 32 + warp;
  const bool first = tile * 32 < n_keys;
  if (first) load_tile(tile, true);
  pdl_wait();  // q and the newest key's rows are this step's writes

  const T *qt = q + ((size_t)t * H + (size_t)g * G) * D;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) qs[i] = to_f(qt[i]) * scale;
  if (first && start + tile * 32 + tile_keys - 1 == p) {  // this tile holds position p (its last key)
    const int kp = tile_keys - 1;
    if (lane == kp) {
#pragma unroll
      for (int u = 0; u < KV; u++) kr[u] = *reinterpret_cast<const uint4 *>(kc + krow + u * 8);
    }
    const unsigned long long vrow = __shfl_sync(0xffffffff, krow, kp);
    const Pack<T, PER_LANE> pv = *reinterpret_cast<const Pack<T, PER_LANE> *>(vc + vrow + lane * PER_LANE);
#pragma unroll
    for (int u = 0; u < 32; u++)
      if (u >= kp) vr[u] = pv;  // u > kp: past the last key, the same row
  }
  __syncthreads();

  float m[GMAX], l[GMAX], acc[GMAX][PER_LANE];
#pragma unroll
  for (int h = 0; h < GMAX; h++) {
    m[h] = -INFINITY;
    l[h] = 0.f;
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) acc[h][e] = 0.f;
  }
  for (bool loaded = first; tile * 32 < n_keys; tile += NWARPS, loaded = false) {
    if (!loaded) load_tile(tile, false);
    float s[GMAX];
#pragma unroll
    for (int h = 0; h < GMAX; h++) s[h] = 0.f;
    if (valid) {
#pragma unroll
      for (int u = 0; u < KV; u++) {
        float kv[8];
        unpack8<T>(kr[u], kv);
#pragma unroll
        for (int h = 0; h < GMAX; h++) {
          if (h >= G) break;
#pragma unroll
          for (int e = 0; e < 8; e++) s[h] += qs[h * D + u * 8 + e] * kv[e];
        }
      }
    }
    softmax_tile<GMAX, PER_LANE>(s, m, l, acc, valid, softcap, G);
    // PV over the keys paged_attn's batched loop visits (the tile's keys rounded up to its batch of 8), in order.
    const int visit = (tile_keys + PV_BATCH - 1) / PV_BATCH * PV_BATCH;
#pragma unroll
    for (int u = 0; u < 32; u++) {
      if (u >= visit) break;
      pv_row<T, GMAX, PER_LANE>(acc, s, vr[u], u, G);
    }
  }
  block_finish<T, D, GMAX>(m, l, acc, part_acc, part_m, part_l, out, part, counters, t, b, g, G, H, KvH, split_keys);
}

// Merge the splits of paged_attn's split mode: grid (B, H), block D threads; part (B, H, Z, D + 2), Z <= MAX_Z
// (B: the attention launch's blocks along x, token tok_idx[b] or b).
// Every split's (max, sum) is loaded at once into shared memory, then each thread sums its d over the splits
// with the loads unrolled (no chain of dependent loads per split).
template <typename T, int D>
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
  float M = -INFINITY;
  for (int z = 0; z < Z; z++) M = fmaxf(M, sm[z]);
  float num = 0.f, den = 0.f;
#pragma unroll 8
  for (int z = 0; z < Z; z++) {
    const float mz = sm[z];
    const float f = mz == -INFINITY ? 0.f : __expf(mz - M);  // a split past the last key adds nothing
    num += pp[z * (D + 2) + d] * f;
    den += sl[z] * f;
  }
  out[((size_t)t * H + h) * D + d] = from_f<T>(num / den);
}

#define WRITE_KV(NAME, T)                                                                                      \
  extern "C" __global__ void NAME(T *cache, const T *src, const uint32_t *slot, int row_elems) {              \
    write_kv<T>(cache, src, slot, row_elems);                                                                 \
  }
WRITE_KV(write_kv_f32, float)
WRITE_KV(write_kv_bf16, __nv_bfloat16)
WRITE_KV(write_kv_f16, __half)

// One kernel per (dtype, head dim, GM): GM = the query heads per kv head rounded up to a power of two, so that a
// block's per-head registers and shared buffers are sized for its group (G = 4 uses about half the registers of
// a kernel sized for 8, so more blocks fit on a multiprocessor).
// Blocks of 256 threads each multiprocessor should fit (register budget): 16-bit caches 4 for GM * D <= 256 and 3
// for <= 512 (bf16, D 128, G 4: 80 registers, 3 blocks, where 89 unbounded gave 2), f32 caches 2 (their wider
// rows spill under a tighter budget).
constexpr int min_blocks(int elem_bytes, int gd) { return elem_bytes == 4 ? 2 : gd <= 256 ? 4 : gd <= 512 ? 3 : 2; }
#define PAGED_ATTN_G(NAME, T, D, GM)                                                                           \
  extern "C" __global__ void __launch_bounds__(NWARPS * 32, min_blocks(sizeof(T), (GM) * (D)))               \
      NAME##_g##GM(const T *q, const T *kc, const T *vc, const uint32_t *tables, const uint32_t *tok_row,     \
                   const uint32_t *tok_pos, T *out, int H, int KvH, int bs, int max_blocks, int window,       \
                   float scale, float softcap, int split_keys, float *part, int pv_batched,                   \
                   const uint32_t *tok_idx, uint32_t *counters) {                                             \
    paged_attn<T, D, GM>(q, kc, vc, tables, tok_row, tok_pos, out, H, KvH, bs, max_blocks, window, scale,     \
                         softcap, split_keys, part, pv_batched, tok_idx, counters);                           \
  }
// The prefetching decode kernel: one block per multiprocessor (it holds a key row and 32 value slices per lane).
#define PAGED_ATTN_PF(NAME, T, D, GM)                                                                          \
  extern "C" __global__ void __launch_bounds__(NWARPS * 32, 1)                                               \
      NAME##_pf_g##GM(const T *q, const T *kc, const T *vc, const uint32_t *tables, const uint32_t *tok_row,  \
                      const uint32_t *tok_pos, T *out, int H, int KvH, int bs, int max_blocks, int window,    \
                      float scale, float softcap, int split_keys, float *part, uint32_t *counters) {          \
    paged_attn_pf<T, D, GM>(q, kc, vc, tables, tok_row, tok_pos, out, H, KvH, bs, max_blocks, window, scale,  \
                            softcap, split_keys, part, counters);                                             \
  }
#define PAGED_ATTN_PF_ALL(NAME, T)                                                                             \
  PAGED_ATTN_PF(NAME##_d64, T, 64, 1) PAGED_ATTN_PF(NAME##_d64, T, 64, 2) PAGED_ATTN_PF(NAME##_d64, T, 64, 4) \
  PAGED_ATTN_PF(NAME##_d64, T, 64, 8) PAGED_ATTN_PF(NAME##_d64, T, 64, 16)                                    \
  PAGED_ATTN_PF(NAME##_d128, T, 128, 1) PAGED_ATTN_PF(NAME##_d128, T, 128, 2)                                 \
  PAGED_ATTN_PF(NAME##_d128, T, 128, 4) PAGED_ATTN_PF(NAME##_d128, T, 128, 8)
#define PAGED_ATTN_MERGE(NAME, T, D)                                                                           \
  extern "C" __global__ void NAME##_merge(const float *part, T *out, int H, int Z, const uint32_t *tok_idx) {   \
    paged_attn_merge<T, D>(part, out, H, Z, tok_idx);                                                         \
  }
#define PAGED_ATTN_D64(NAME, T)                                                                                \
  PAGED_ATTN_G(NAME, T, 64, 1) PAGED_ATTN_G(NAME, T, 64, 2) PAGED_ATTN_G(NAME, T, 64, 4)                      \
  PAGED_ATTN_G(NAME, T, 64, 8) PAGED_ATTN_G(NAME, T, 64, 16) PAGED_ATTN_MERGE(NAME, T, 64)
#define PAGED_ATTN_D128(NAME, T)                                                                               \
  PAGED_ATTN_G(NAME, T, 128, 1) PAGED_ATTN_G(NAME, T, 128, 2) PAGED_ATTN_G(NAME, T, 128, 4)                   \
  PAGED_ATTN_G(NAME, T, 128, 8) PAGED_ATTN_MERGE(NAME, T, 128)
#define PAGED_ATTN_D256(NAME, T)                                                                               \
  PAGED_ATTN_G(NAME, T, 256, 1) PAGED_ATTN_G(NAME, T, 256, 2) PAGED_ATTN_G(NAME, T, 256, 4)                   \
  PAGED_ATTN_MERGE(NAME, T, 256)
PAGED_ATTN_D64(paged_attn_f32_d64, float)
PAGED_ATTN_D128(paged_attn_f32_d128, float)
PAGED_ATTN_D256(paged_attn_f32_d256, float)
PAGED_ATTN_D64(paged_attn_bf16_d64, __nv_bfloat16)
PAGED_ATTN_D128(paged_attn_bf16_d128, __nv_bfloat16)
PAGED_ATTN_D256(paged_attn_bf16_d256, __nv_bfloat16)
PAGED_ATTN_D64(paged_attn_f16_d64, __half)
PAGED_ATTN_D128(paged_attn_f16_d128, __half)
PAGED_ATTN_D256(paged_attn_f16_d256, __half)
PAGED_ATTN_PF_ALL(paged_attn_bf16, __nv_bfloat16)
PAGED_ATTN_PF_ALL(paged_attn_f16, __half)

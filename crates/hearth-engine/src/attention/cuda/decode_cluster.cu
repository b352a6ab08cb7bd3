// Decode attention for decode-only steps, with the rotary embedding folded in and the key splits merged inside a
// thread-block cluster (attention/cuda/decode.rs; HEARTH_CUDA_DECODE_CLUSTER). One launch replaces three of the
// default path (qkv_rope, paged_attn in split mode, paged_attn_merge) and the two kernel boundaries between them:
//
// * grid (T, KvH, Z), cluster (1, 1, Z), Z <= 8: block (t, g, z) attends token t's G query heads of kv head g over
//   split z of its visible keys (key_range: [z * split_keys, (z + 1) * split_keys)).
// * After pdl_wait (the q|k|v projection is the previous kernel), each block stages its queries rotated from the
//   projection's output (rope_pair, rounded to T as qkv_rope stores them, then scaled as paged_attn stages them);
//   the block whose split holds the token's own position writes the token's rotated k row and its v row into the
//   cache (as qkv_rope does) before it reads its keys: within a step no other block reads that row (a decode
//   token's row is its own, in a block no other sequence shares).
// * Each block walks its tiles (attend_tiles, paged_attn's arithmetic), combines its warps (warp_combine) into
//   shared memory, and after a cluster barrier each block merges a share of the G * D outputs over the Z splits by
//   reading the other blocks' shared memory (distributed shared memory) with merge_splits, the arithmetic of every
//   split merge; a second barrier keeps every block's shared memory alive until the reads are done.
// Compute capability 9.0+ only (clusters); the launcher uses it only there.
#include "attn_common.cuh"
#include <cooperative_groups.h>

template <typename T, int D, int GMAX, int PVB>
__device__ void decode_cluster(const T *qkv, const float *cos_t, const float *sin_t, T *kc, T *vc,
                               const uint32_t *__restrict__ slots, const uint32_t *__restrict__ tables,
                               const uint32_t *__restrict__ tok_row, const uint32_t *__restrict__ tok_pos,
                               T *__restrict__ out, int H, int KvH, int bs, int max_blocks, int window, float scale,
                               float softcap, int split_keys, int interleaved, int pv_batched) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  constexpr int PER_LANE = D / 32;
  static_assert(GMAX * D <= MAX_GD, "a block's queries and accumulators hold at most MAX_GD values");
  const int t = blockIdx.x, g = blockIdx.y, z = blockIdx.z, Z = gridDim.z;
  const int G = H / KvH, half = D / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  __shared__ float qs[GMAX * D];
  __shared__ float part_acc[NWARPS][GMAX * D];
  __shared__ float part_m[NWARPS][GMAX], part_l[NWARPS][GMAX];
  __shared__ float blk_num[GMAX * D];  // this split's unnormalized outputs, its max and sum: what the others read
  __shared__ float blk_m[GMAX], blk_l[GMAX];
  cg::cluster_group cluster = cg::this_cluster();

  pdl_trigger();
  const KeyRange range = key_range(tables, tok_row, tok_pos, t, max_blocks, window, split_keys);
  const int start = range.start, k_lo = range.k_lo, n_keys = range.n_keys;
  const int own = range.p - start;  // the token's own key, offset in its visible range
  const bool owns_new = own >= k_lo && own < n_keys;
  const size_t slot = owns_new ? slots[t] : 0;
  uint32_t blk_next = tile_table_entry(range.table, start, n_keys, bs, k_lo / 32 + warp, lane);
  pdl_wait();  // the q|k|v projection is the previous kernel's output

  const T *row = qkv + (size_t)t * (H + 2 * KvH) * D;
  const float *ct = cos_t + (size_t)t * half, *st = sin_t + (size_t)t * half;
  stage_rope_queries<T, D>(qs, row, ct, st, g, G, interleaved, scale);
  if (owns_new) {
    const T *ks = row + (size_t)(H + g) * D, *vs = row + (size_t)(H + KvH + g) * D;
    T *kd = kc + (slot * KvH + g) * D, *vd = vc + (slot * KvH + g) * D;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
      const int i0 = interleaved ? 2 * j : j, i1 = interleaved ? 2 * j + 1 : j + half;
      const float2 r = rope_pair(to_f(ks[i0]), to_f(ks[i1]), ct[j], st[j]);
      kd[i0] = from_f<T>(r.x);
      kd[i1] = from_f<T>(r.y);
      vd[j] = vs[j];
      vd[j + half] = vs[j + half];
    }
  }
  __syncthreads();  // queries staged; the own rows written and visible to this block's loads

  float m[GMAX], l[GMAX], acc[GMAX][PER_LANE];
  const PlainRows<T, D> rows{};
  attend_tiles<PlainRows<T, D>, PlainRows<T, D>, D, GMAX, PVB>(qs, rows, kc, rows, vc, range.table, start, k_lo, n_keys,
                                                               bs, KvH, g, G, softcap, pv_batched, blk_next, m, l, acc);
  warps_to_smem<D, GMAX>(m, l, acc, part_acc, part_m, part_l, G);
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int h = i / D;
    const float3 r = warp_combine<D, GMAX>(part_acc, part_m, part_l, i, h);
    blk_num[i] = r.x;
    if (i % D == 0) {
      blk_m[h] = r.y;
      blk_l[h] = r.z;
    }
  }
  cluster.sync();  // every split's (num, M, den) is in its block's shared memory

  T *ot = out + ((size_t)t * H + (size_t)g * G) * D;
  for (int i = z * blockDim.x + threadIdx.x; i < G * D; i += Z * blockDim.x) {
    const int h = i / D;
    ot[i] = from_f<T>(merge_splits<4>(
        Z, [&](int zz) { return *cluster.map_shared_rank(&blk_m[h], zz); },
        [&](int zz) { return *cluster.map_shared_rank(&blk_l[h], zz); },
        [&](int zz) { return *cluster.map_shared_rank(&blk_num[i], zz); }));
  }
  cluster.sync();  // no block exits while another still reads its shared memory
#else
  __trap();
#endif
}

// Each twice: PV batches of PV_BATCH value rows under paged_attn's register budget, and (_pv32) a tile's 32 rows in
// one batch with no budget (one wave of blocks: the small grids of batch-1 decode).
#define DECODE_CLUSTER_G(NAME, T, D, GM) DECODE_CLUSTER_K(NAME##_g##GM, T, D, GM, PV_BATCH, min_blocks(sizeof(T), (GM) * (D))) \
  DECODE_CLUSTER_K(NAME##_g##GM##_pv32, T, D, GM, 32, 1)
#define DECODE_CLUSTER_K(NAME, T, D, GM, PVB, MINB)                                                            \
  extern "C" __global__ void __launch_bounds__(NWARPS * 32, MINB)                                            \
      NAME(const T *qkv, const float *cos_t, const float *sin_t, T *kc, T *vc, const uint32_t *slots,  \
                   const uint32_t *tables, const uint32_t *tok_row, const uint32_t *tok_pos, T *out, int H,     \
                   int KvH, int bs, int max_blocks, int window, float scale, float softcap, int split_keys,      \
                   int interleaved, int pv_batched) {                                                         \
    decode_cluster<T, D, GM, PVB>(qkv, cos_t, sin_t, kc, vc, slots, tables, tok_row, tok_pos, out, H, KvH, bs,      \
                             max_blocks, window, scale, softcap, split_keys, interleaved, pv_batched);        \
  }
#define DECODE_CLUSTER(NAME, T)                                                                                \
  DECODE_CLUSTER_G(NAME##_d64, T, 64, 1) DECODE_CLUSTER_G(NAME##_d64, T, 64, 2)                               \
  DECODE_CLUSTER_G(NAME##_d64, T, 64, 4) DECODE_CLUSTER_G(NAME##_d64, T, 64, 8)                               \
  DECODE_CLUSTER_G(NAME##_d64, T, 64, 16) DECODE_CLUSTER_G(NAME##_d128, T, 128, 1)                            \
  DECODE_CLUSTER_G(NAME##_d128, T, 128, 2) DECODE_CLUSTER_G(NAME##_d128, T, 128, 4)                           \
  DECODE_CLUSTER_G(NAME##_d128, T, 128, 8) DECODE_CLUSTER_G(NAME##_d256, T, 256, 1)                           \
  DECODE_CLUSTER_G(NAME##_d256, T, 256, 2) DECODE_CLUSTER_G(NAME##_d256, T, 256, 4)
DECODE_CLUSTER(decode_cluster_f32, float)
DECODE_CLUSTER(decode_cluster_bf16, __nv_bfloat16)
DECODE_CLUSTER(decode_cluster_f16, __half)

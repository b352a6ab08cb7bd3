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
//                one at a time). Value rows are not issued before the tile's softmax: the registers that would
//                take (128 bytes a lane) leave fewer blocks per multiprocessor.
// Launched with programmatic dependent launch (gpu/launch.rs): the step metadata (host uploads, complete before
// any kernel of the step starts) is read before pdl_wait(), q and the caches (earlier kernels' writes) after it.

#include "attn_common.cuh"


template <typename T>
__device__ void write_kv(T *__restrict__ cache, const T *__restrict__ src, const uint32_t *__restrict__ slot,
                         int row_elems) {
  const int t = blockIdx.x;
  const size_t dst = (size_t)slot[t] * row_elems;
  const size_t s = (size_t)t * row_elems;
  for (int i = threadIdx.x; i < row_elems; i += blockDim.x) cache[dst + i] = src[s + i];
}

// q: (T, H, D); kc, vc: (rows, KvH, D); tables: (R, max_blocks); tok_row, tok_pos: (T,); out: (T, H, D).
template <typename T, int D, int GMAX>
__device__ void paged_attn(const T *q, const T *kc, const T *vc,
                           const uint32_t *__restrict__ tables, const uint32_t *__restrict__ tok_row,
                           const uint32_t *__restrict__ tok_pos, T *__restrict__ out, int H, int KvH, int bs,
                           int max_blocks, int window, float scale, float softcap, int split_keys,
                           float *__restrict__ part, int pv_batched, const uint32_t *__restrict__ tok_idx) {
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
  // The first tile's block-table entry before the wait (host-uploaded metadata).
  uint32_t blk_next = tile_table_entry(table, start, n_keys, bs, k_lo / 32 + warp, lane);
  pdl_wait();  // q and this step's k/v rows are the previous kernels' writes

  const T *qt = q + ((size_t)t * H + (size_t)g * G) * D;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) qs[i] = to_f(qt[i]) * scale;
  __syncthreads();

  float m[GMAX], l[GMAX], acc[GMAX][PER_LANE];
  const PlainRows<T, D> rows{};
  attend_tiles<PlainRows<T, D>, PlainRows<T, D>, D, GMAX>(qs, rows, kc, rows, vc, table, start, k_lo, n_keys, bs, KvH, g,
                                                          G, softcap, pv_batched, blk_next, m, l, acc);

  block_finish<T, D, GMAX, false>(m, l, acc, part_acc, part_m, part_l, out, part, t, b, g, G, H, split_keys, qs);
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
// Register budget: min_blocks (attn_common.cuh).
#define PAGED_ATTN_G(NAME, T, D, GM)                                                                           \
  extern "C" __global__ void __launch_bounds__(NWARPS * 32, min_blocks(sizeof(T), (GM) * (D)))               \
      NAME##_g##GM(const T *q, const T *kc, const T *vc, const uint32_t *tables, const uint32_t *tok_row,     \
                   const uint32_t *tok_pos, T *out, int H, int KvH, int bs, int max_blocks, int window,       \
                   float scale, float softcap, int split_keys, float *part, int pv_batched,                   \
                   const uint32_t *tok_idx) {                                                                 \
    paged_attn<T, D, GM>(q, kc, vc, tables, tok_row, tok_pos, out, H, KvH, bs, max_blocks, window, scale,     \
                         softcap, split_keys, part, pv_batched, tok_idx);                                     \
  }
#define PAGED_ATTN_MERGE(NAME, T, D)                                                                           \
  extern "C" __global__ void NAME##_merge(const float *part, T *out, int H, int Z, const uint32_t *tok_idx) {   \
    paged_attn_merge<T, D, false>(part, out, H, Z, tok_idx);                                                         \
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

// Tensor-core (WMMA) paged attention for prompt pieces, 16-bit caches (bf16, f16).
//
// Arguments as paged_attention.cu's paged_attn_* up to softcap, then the tiles.
// Block (tile, g): a query tile of up to BQ = 64 / G consecutive tokens of one sequence (tiles[2 * tile] = the
// packed index of its first token, tiles[2 * tile + 1] = its token count) against kv head g and the G query heads
// sharing it: M = 64 query rows (token i, head h) -> row i * G + h. Four warps each own 16 rows. Keys go through
// shared memory in tiles of 64, gathered through the block table with 16-byte loads:
//   S = Q K^T (wmma 16x16x16, f32 accumulators) -> scale, soft-cap, causal / sliding-window mask -> online
//   softmax per row in f32 (P rounded to T, the row sum taken over the rounded values) -> O = O * corr + P V.
// O lives in shared memory as f32 (a wmma accumulator's element-to-row mapping is opaque, so the per-row rescale
// is done there). Positions of a tile's tokens are consecutive: token i sits at tok_pos[t0] + i.
// Same layouts as paged_attention.cu: q (T, H, D); caches (rows, KvH, D); tables (R, max_blocks).
// Key split (split_keys > 0, `part` non-null): block (tile, g, z) attends only keys key_lo + z * split_keys ..
// + split_keys - 1 of its tile and writes its unnormalized O rows with their running max and sum to `part`
// ((tile, g, z, row) -> D + 2 floats); prefill_tc_*_merge then combines a tile's splits. A short piece over a long
// context (a prompt-cache hit) is otherwise one block per (tile, kv head) walking every key.
// Built only for compute capability >= 8.0 (bf16 WMMA); prefill.rs checks the device before using it.
#include "prefill_tc.cuh"

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define PREFILL_TC(NAME, T, D)                                                                                 \
  extern "C" __global__ void __launch_bounds__(TC_WARPS * 32)                                                 \
      NAME(const T *q, const T *kc, const T *vc, const uint32_t *tables, const uint32_t *tok_row,             \
           const uint32_t *tok_pos, T *out, int H, int KvH, int bs, int max_blocks, int window, float scale,  \
           float softcap, const uint32_t *tiles, int split_keys, float *part) {                               \
    const PlainRows<T, D> rows{};                                                                             \
    prefill_tc<T, D, PlainRows<T, D>, PlainRows<T, D>, false, false>(                                         \
        q, kc, vc, tables, tok_row, tok_pos, out, H, KvH, bs, max_blocks, window, scale, softcap, tiles,      \
        split_keys, part, rows, rows);                                                                        \
  }                                                                                                           \
  extern "C" __global__ void NAME##_merge(const float *part, T *out, int H, int KvH, int Z,                   \
                                          const uint32_t *tiles) {                                            \
    prefill_tc_merge<T, D, false>(part, out, H, KvH, Z, tiles);                                                      \
  }
PREFILL_TC(prefill_tc_bf16_d64, __nv_bfloat16, 64)
PREFILL_TC(prefill_tc_bf16_d128, __nv_bfloat16, 128)
PREFILL_TC(prefill_tc_bf16_d256, __nv_bfloat16, 256)
PREFILL_TC(prefill_tc_f16_d64, __half, 64)
PREFILL_TC(prefill_tc_f16_d128, __half, 128)
PREFILL_TC(prefill_tc_f16_d256, __half, 256)
#endif

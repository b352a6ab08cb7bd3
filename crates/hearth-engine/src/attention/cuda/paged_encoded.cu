// Paged attention over an encoded KV cache (--kv-cache-dtype q8_0, q4_0, turbo:kXvY; attention/cuda/encoded.rs):
// paged_attention.cu's and decode_cluster.cu's kernels with the blocks read in place through CodedRows (each key
// row decoded eight values at a time as its scores are taken, each value slice as it is accumulated: no decoded
// copy of the cache), plus the writer that encodes the step's new rows. Built once per (key code, value code):
// build.rs compiles this file with -DKC=<code> -DVC=<code> (and -DENC_F16 for models computing in f16, else bf16)
// into a module of its own, so a process JIT-compiles only its encoding's kernels for its dtype.
//
// * kv_encode: the step's new k and v rows (T, KvH, D) encoded into their cache rows: grid (T, KvH), two warps
//   (warp 0 the key, warp 1 the value), rotated first where the code rotates (kv_codes.cuh), once per token and
//   layer.
// * paged_attn_enc: paged_attn over encoded blocks. The queries are rotated as the keys are (rotation is orthogonal,
//   so the scores are those of the unrotated vectors); with rotated values the outputs are rotated back once per
//   head, after the split merge where the keys are split (paged_attn_merge).
// * prefill_tc_enc: the tensor-core prompt kernel (prefill_tc.cuh) with each tile's key and value rows decoded to
//   16 bits as they are staged in shared memory, the queries rotated as they are staged, the outputs rotated back.
// * decode_cluster_enc: decode_cluster over encoded blocks; the block that holds the token's own position encodes
//   its k (after the rotary embedding, rounded to T as qkv_rope stores it) and v rows itself, with kv_encode's
//   arithmetic, so that a row's bytes do not depend on the path that wrote it.
#include "kv_codes.cuh"
#include "prefill_tc.cuh"
#include <cooperative_groups.h>

#if !defined(KC) || !defined(VC)
#error "build.rs compiles paged_encoded.cu with -DKC=<key code> -DVC=<value code>"
#endif

constexpr bool V_ROT = code_rotated(VC, false);
constexpr unsigned long long V_MASK = V_ROT ? 2ull : 0ull;  // rotate_smem's mask over (k, v)

// The codes' Lloyd-Max levels into shared memory (books[0] the key's, books[1] the value's).
__device__ __forceinline__ void load_books(float (*books)[16]) {
  const int i = threadIdx.x;
  if (i < 16) {
    books[0][i] = code_lm(KC) && i < (1 << code_bits(KC)) ? code_book(KC)[i] : 0.f;
    books[1][i] = code_lm(VC) && i < (1 << code_bits(VC)) ? code_book(VC)[i] : 0.f;
  }
}

template <typename T, int D>
__device__ void kv_encode(const T *k, const T *v, uint8_t *kc, uint8_t *vc, const uint32_t *__restrict__ slots,
                          int KvH) {
  __shared__ float x[2][D];
  __shared__ uint8_t codes[2][D];
  const int t = blockIdx.x, g = blockIdx.y;
  pdl_trigger();
  const size_t slot = slots[t];
  pdl_wait();  // k and v are the previous kernels' writes
  const size_t src = ((size_t)t * KvH + g) * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    x[0][i] = to_f(k[src + i]);
    x[1][i] = to_f(v[src + i]);
  }
  __syncthreads();
  rotate_smem<D>(&x[0][0], 2, 1ull | V_MASK, false);
  const int warp = threadIdx.x / 32;
  if (warp == 0) encode_row<D>(x[0], kc + (slot * KvH + g) * code_units(KC, D), KC, codes[0]);
  if (warp == 1) encode_row<D>(x[1], vc + (slot * KvH + g) * code_units(VC, D), VC, codes[1]);
}

template <typename T, int D, int GMAX>
__device__ void paged_attn_enc(const T *q, const uint8_t *kc, const uint8_t *vc, const uint32_t *__restrict__ tables,
                               const uint32_t *__restrict__ tok_row, const uint32_t *__restrict__ tok_pos,
                               T *__restrict__ out, int H, int KvH, int bs, int max_blocks, int window, float scale,
                               float softcap, int split_keys, float *__restrict__ part, int pv_batched,
                               const uint32_t *__restrict__ tok_idx) {
  constexpr int PER_LANE = D / 32;
  static_assert(GMAX * D <= MAX_GD, "a block's queries and accumulators hold at most MAX_GD values");
  const int b = blockIdx.x, g = blockIdx.y;
  const int t = tok_idx != nullptr ? (int)tok_idx[b] : b;
  const int G = H / KvH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  __shared__ float qs[GMAX * D];  // the rotated, scaled queries; then the outputs, rotated back
  __shared__ float part_acc[NWARPS][GMAX * D];
  __shared__ float part_m[NWARPS][GMAX], part_l[NWARPS][GMAX];
  __shared__ float books[2][16];

  pdl_trigger();
  const KeyRange range = key_range(tables, tok_row, tok_pos, t, max_blocks, window, split_keys);
  uint32_t blk_next = tile_table_entry(range.table, range.start, range.n_keys, bs, range.k_lo / 32 + warp, lane);
  load_books(books);
  pdl_wait();

  const T *qt = q + ((size_t)t * H + (size_t)g * G) * D;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) qs[i] = to_f(qt[i]) * scale;
  __syncthreads();
  rotate_smem<D>(qs, G, ~0ull, false);  // keys are always rotated

  float m[GMAX], l[GMAX], acc[GMAX][PER_LANE];
  const CodedRows<KC, D> kr{books[0]};
  const CodedRows<VC, D> vr{books[1]};
  attend_tiles<CodedRows<KC, D>, CodedRows<VC, D>, D, GMAX>(qs, kr, kc, vr, vc, range.table, range.start, range.k_lo,
                                                            range.n_keys, bs, KvH, g, G, softcap, pv_batched,
                                                            blk_next, m, l, acc);
  block_finish<T, D, GMAX, V_ROT>(m, l, acc, part_acc, part_m, part_l, out, part, t, b, g, G, H, split_keys, qs);
}

template <typename T, int D, int GMAX, int PVB>
__device__ void decode_cluster_enc(const T *qkv, const float *cos_t, const float *sin_t, uint8_t *kc, uint8_t *vc,
                                   const uint32_t *__restrict__ slots, const uint32_t *__restrict__ tables,
                                   const uint32_t *__restrict__ tok_row, const uint32_t *__restrict__ tok_pos,
                                   T *__restrict__ out, int H, int KvH, int bs, int max_blocks, int window,
                                   float scale, float softcap, int split_keys, int interleaved, int pv_batched) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  constexpr int PER_LANE = D / 32;
  static_assert(GMAX * D <= MAX_GD, "a block's queries and accumulators hold at most MAX_GD values");
  const int t = blockIdx.x, g = blockIdx.y, z = blockIdx.z, Z = gridDim.z;
  const int G = H / KvH, half = D / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  __shared__ float qs[GMAX * D];  // the queries; after the cluster merge, this block's heads' outputs
  __shared__ float part_acc[NWARPS][GMAX * D];
  __shared__ float part_m[NWARPS][GMAX], part_l[NWARPS][GMAX];
  __shared__ float blk_num[GMAX * D];
  __shared__ float blk_m[GMAX], blk_l[GMAX];
  __shared__ float own[2][D];  // the token's own k and v rows, to encode
  __shared__ uint8_t own_codes[2][D];
  __shared__ float books[2][16];
  cg::cluster_group cluster = cg::this_cluster();

  pdl_trigger();
  const KeyRange range = key_range(tables, tok_row, tok_pos, t, max_blocks, window, split_keys);
  const int own_at = range.p - range.start;
  const bool owns_new = own_at >= range.k_lo && own_at < range.n_keys;
  const size_t slot = owns_new ? slots[t] : 0;
  uint32_t blk_next = tile_table_entry(range.table, range.start, range.n_keys, bs, range.k_lo / 32 + warp, lane);
  load_books(books);
  pdl_wait();

  const T *row = qkv + (size_t)t * (H + 2 * KvH) * D;
  const float *ct = cos_t + (size_t)t * half, *st = sin_t + (size_t)t * half;
  stage_rope_queries<T, D>(qs, row, ct, st, g, G, interleaved, scale);
  if (owns_new) {
    const T *ks = row + (size_t)(H + g) * D, *vs = row + (size_t)(H + KvH + g) * D;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
      const int i0 = interleaved ? 2 * j : j, i1 = interleaved ? 2 * j + 1 : j + half;
      const float2 r = rope_pair(to_f(ks[i0]), to_f(ks[i1]), ct[j], st[j]);
      own[0][i0] = to_f(from_f<T>(r.x));
      own[0][i1] = to_f(from_f<T>(r.y));
      own[1][j] = to_f(vs[j]);
      own[1][j + half] = to_f(vs[j + half]);
    }
  }
  __syncthreads();
  rotate_smem<D>(qs, G, ~0ull, false);
  if (owns_new) {
    rotate_smem<D>(&own[0][0], 2, 1ull | V_MASK, false);
    if (warp == 0) encode_row<D>(own[0], kc + (slot * KvH + g) * code_units(KC, D), KC, own_codes[0]);
    if (warp == 1) encode_row<D>(own[1], vc + (slot * KvH + g) * code_units(VC, D), VC, own_codes[1]);
    __syncthreads();  // the own rows written and visible to this block's loads
  }

  float m[GMAX], l[GMAX], acc[GMAX][PER_LANE];
  const CodedRows<KC, D> kr{books[0]};
  const CodedRows<VC, D> vr{books[1]};
  attend_tiles<CodedRows<KC, D>, CodedRows<VC, D>, D, GMAX, PVB>(qs, kr, kc, vr, vc, range.table, range.start,
                                                                 range.k_lo, range.n_keys, bs, KvH, g, G, softcap,
                                                                 pv_batched, blk_next, m, l, acc);
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

  // Block z merges the heads h with h % Z == z (whole heads, so that it can rotate them back).
  unsigned long long mine = 0;
  for (int h = z; h < G; h += Z) mine |= 1ull << h;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int h = i / D;
    if (!((mine >> h) & 1ull)) continue;
    qs[i] = merge_splits<4>(
        Z, [&](int zz) { return *cluster.map_shared_rank(&blk_m[h], zz); },
        [&](int zz) { return *cluster.map_shared_rank(&blk_l[h], zz); },
        [&](int zz) { return *cluster.map_shared_rank(&blk_num[i], zz); });
  }
  __syncthreads();
  if (V_ROT) rotate_smem<D>(qs, G, mine, true);
  T *ot = out + ((size_t)t * H + (size_t)g * G) * D;
  for (int i = threadIdx.x; i < G * D; i += blockDim.x)
    if ((mine >> (i / D)) & 1ull) ot[i] = from_f<T>(qs[i]);
  cluster.sync();  // no block exits while another still reads its shared memory
#else
  __trap();
#endif
}

#define ENC_G(NAME, T, D, GM)                                                                                    \
  extern "C" __global__ void __launch_bounds__(NWARPS * 32, min_blocks(sizeof(T), (GM) * (D)))                 \
      paged_attn_enc_##NAME##_d##D##_g##GM(                                                                    \
          const T *q, const uint8_t *kc, const uint8_t *vc, const uint32_t *tables, const uint32_t *tok_row,   \
          const uint32_t *tok_pos, T *out, int H, int KvH, int bs, int max_blocks, int window, float scale,    \
          float softcap, int split_keys, float *part, int pv_batched, const uint32_t *tok_idx) {               \
    paged_attn_enc<T, D, GM>(q, kc, vc, tables, tok_row, tok_pos, out, H, KvH, bs, max_blocks, window, scale,  \
                             softcap, split_keys, part, pv_batched, tok_idx);                                  \
  }                                                                                                            \
  DECODE_CLUSTER_ENC(NAME, T, D, GM, , PV_BATCH, min_blocks(sizeof(T), (GM) * (D)))                              \
  DECODE_CLUSTER_ENC(NAME, T, D, GM, _pv32, 32, 1)
// The cluster decode kernel twice, as decode_cluster.cu has it: PV batches of PV_BATCH value rows under
// paged_attn's register budget, and (_pv32) a tile's 32 rows in one batch with no budget (one wave of blocks: the
// small grids of batch-1 decode).
#define DECODE_CLUSTER_ENC(NAME, T, D, GM, SFX, PVB, MINB)                                                      \
  extern "C" __global__ void __launch_bounds__(NWARPS * 32, MINB) decode_cluster_enc_##NAME##_d##D##_g##GM##SFX( \
      const T *qkv, const float *cos_t, const float *sin_t, uint8_t *kc, uint8_t *vc, const uint32_t *slots,    \
      const uint32_t *tables, const uint32_t *tok_row, const uint32_t *tok_pos, T *out, int H, int KvH, int bs, \
      int max_blocks, int window, float scale, float softcap, int split_keys, int interleaved, int pv_batched) {   \
    decode_cluster_enc<T, D, GM, PVB>(qkv, cos_t, sin_t, kc, vc, slots, tables, tok_row, tok_pos, out, H, KvH, bs, \
                                      max_blocks, window, scale, softcap, split_keys, interleaved, pv_batched);  \
  }
#define ENC_D(NAME, T, D)                                                                                        \
  extern "C" __global__ void paged_attn_enc_##NAME##_d##D##_merge(const float *part, T *out, int H, int Z,     \
                                                                  const uint32_t *tok_idx) {                   \
    paged_attn_merge<T, D, V_ROT>(part, out, H, Z, tok_idx);                                                      \
  }                                                                                                            \
  extern "C" __global__ void kv_encode_##NAME##_d##D(const T *k, const T *v, uint8_t *kc, uint8_t *vc,         \
                                                     const uint32_t *slots, int KvH) {                         \
    kv_encode<T, D>(k, v, kc, vc, slots, KvH);                                                                 \
  }
#define ENC(NAME, T)                                                                                             \
  ENC_D(NAME, T, 64) ENC_D(NAME, T, 128) ENC_D(NAME, T, 256)                                                   \
  ENC_G(NAME, T, 64, 1) ENC_G(NAME, T, 64, 2) ENC_G(NAME, T, 64, 4) ENC_G(NAME, T, 64, 8) ENC_G(NAME, T, 64, 16) \
  ENC_G(NAME, T, 128, 1) ENC_G(NAME, T, 128, 2) ENC_G(NAME, T, 128, 4) ENC_G(NAME, T, 128, 8)                   \
  ENC_G(NAME, T, 256, 1) ENC_G(NAME, T, 256, 2) ENC_G(NAME, T, 256, 4)
#define ENC_TC(NAME, T, D)                                                                                       \
  extern "C" __global__ void __launch_bounds__(TC_WARPS * 32) prefill_tc_enc_##NAME##_d##D(                    \
      const T *q, const uint8_t *kc, const uint8_t *vc, const uint32_t *tables, const uint32_t *tok_row,       \
      const uint32_t *tok_pos, T *out, int H, int KvH, int bs, int max_blocks, int window, float scale,        \
      float softcap, const uint32_t *tiles, int split_keys, float *part) {                                     \
    __shared__ float books[2][16];                                                                             \
    load_books(books);                                                                                         \
    __syncthreads();                                                                                           \
    const CodedRows<KC, D> kr{books[0]};                                                                       \
    const CodedRows<VC, D> vr{books[1]};                                                                       \
    prefill_tc<T, D, CodedRows<KC, D>, CodedRows<VC, D>, true, V_ROT>(q, kc, vc, tables, tok_row, tok_pos,     \
                                                                       out, H, KvH, bs, max_blocks, window,    \
                                                                       scale, softcap, tiles, split_keys,      \
                                                                       part, kr, vr);                          \
  }                                                                                                            \
  extern "C" __global__ void prefill_tc_enc_##NAME##_d##D##_merge(const float *part, T *out, int H, int KvH,    \
                                                                  int Z, const uint32_t *tiles) {              \
    prefill_tc_merge<T, D, V_ROT>(part, out, H, KvH, Z, tiles);                                                \
  }

#if defined(ENC_F16)
ENC(f16, __half)
#else
ENC(bf16, __nv_bfloat16)
#endif
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#if defined(ENC_F16)
ENC_TC(f16, __half, 64) ENC_TC(f16, __half, 128) ENC_TC(f16, __half, 256)
#else
ENC_TC(bf16, __nv_bfloat16, 64) ENC_TC(bf16, __nv_bfloat16, 128) ENC_TC(bf16, __nv_bfloat16, 256)
#endif
#endif

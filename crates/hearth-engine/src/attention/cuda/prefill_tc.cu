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
#include <mma.h>

#include "../../gpu/common.cuh"

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

using namespace nvcuda;

#define TC_M 64      // query rows per block
#define TC_KT 64     // keys per shared-memory tile
#define TC_WARPS 4   // 16 query rows each

template <int D> struct TcLayout {
  static constexpr int LDK = D + 8;       // Q, K, V rows (16-bit): padded against bank conflicts
  static constexpr int LDS = TC_KT + 4;   // S rows (f32)
  static constexpr int LDP = TC_KT + 8;   // P rows (16-bit)
  static constexpr int LDO = D + 4;       // O rows (f32)
  static constexpr int Q = 0;
  static constexpr int K = Q + TC_M * LDK * 2;
  static constexpr int V = K + TC_KT * LDK * 2;
  static constexpr int S = V + TC_KT * LDK * 2;
  static constexpr int P = S + TC_M * LDS * 4;
  static constexpr int O = P + TC_M * LDP * 2;
  static constexpr int ROW = O + TC_M * LDO * 4;  // m, l, corr per row
  static constexpr int BYTES = ROW + 3 * TC_M * 4;  // = prefill::smem_bytes(D) on the Rust side
};
static_assert(TcLayout<128>::BYTES == 113408, "prefill.rs mirrors this layout");

// Copy 64 rows of D 16-bit values (row r from src_row(r), or zeros when it returns null) into shared rows of ld.
template <typename T, int D, typename F>
__device__ __forceinline__ void stage_rows(T *dst, int ld, F src_row) {
  constexpr int CH = D / 8;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < 64 * CH; c += blockDim.x) {
    const int r = c / CH, part = c % CH;
    const T *src = src_row(r);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (src != nullptr) v = *reinterpret_cast<const uint4 *>(src + part * 8);
    *reinterpret_cast<uint4 *>(dst + r * ld + part * 8) = v;
  }
}

template <typename T, int D>
__device__ void prefill_tc(const T *q, const T *kc, const T *vc,
                           const uint32_t *__restrict__ tables, const uint32_t *__restrict__ tok_row,
                           const uint32_t *__restrict__ tok_pos, T *__restrict__ out, int H, int KvH, int bs,
                           int max_blocks, int window, float scale, float softcap,
                           const uint32_t *__restrict__ tiles, int split_keys, float *__restrict__ part) {
  using L = TcLayout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  T *Qs = reinterpret_cast<T *>(smem + L::Q);
  T *Ks = reinterpret_cast<T *>(smem + L::K);
  T *Vs = reinterpret_cast<T *>(smem + L::V);
  float *Ss = reinterpret_cast<float *>(smem + L::S);
  T *Ps = reinterpret_cast<T *>(smem + L::P);
  float *Os = reinterpret_cast<float *>(smem + L::O);
  float *row_m = reinterpret_cast<float *>(smem + L::ROW);
  float *row_l = row_m + TC_M;
  float *row_c = row_l + TC_M;

  pdl_trigger();
  pdl_wait();  // launched with PDL (gpu/launch.rs): q and the caches are earlier kernels' writes
  const int g = blockIdx.y, G = H / KvH;
  const int t0 = (int)tiles[2 * blockIdx.x], n_tok = (int)tiles[2 * blockIdx.x + 1];
  const int p0 = (int)tok_pos[t0];
  const uint32_t *table = tables + (size_t)tok_row[t0] * max_blocks;
  const size_t row_stride = (size_t)KvH * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // Q rows (token i, head h) -> i * G + h; rows past the tile's tokens are zeros.
  stage_rows<T, D>(Qs, L::LDK, [&](int r) -> const T * {
    const int i = r / G, h = r % G;
    return i < n_tok ? q + ((size_t)(t0 + i) * H + (size_t)g * G + h) * D : nullptr;
  });
  for (int i = threadIdx.x; i < TC_M * L::LDO; i += blockDim.x) Os[i] = 0.f;
  for (int i = threadIdx.x; i < TC_M; i += blockDim.x) {
    row_m[i] = -INFINITY;
    row_l[i] = 0.f;
  }

  const int tile_end = p0 + n_tok - 1;                       // the last token's position: its last key
  const int tile_lo = window > 0 ? max(0, p0 + 1 - window) : 0;  // the first token's first key
  const int key_lo = split_keys > 0 ? tile_lo + (int)blockIdx.z * split_keys : tile_lo;
  const int key_end = split_keys > 0 ? min(tile_end, key_lo + split_keys - 1) : tile_end;
  for (int kt = key_lo; kt <= key_end; kt += TC_KT) {
    __syncthreads();  // the previous tile's K/V (and, at the start, Q / O / rows) are no longer being read
    auto key_row = [&](int r) -> size_t {
      const int j = kt + r;
      return ((size_t)table[j / bs] * bs + j % bs) * row_stride + (size_t)g * D;
    };
    stage_rows<T, D>(Ks, L::LDK, [&](int r) -> const T * { return kt + r <= key_end ? kc + key_row(r) : nullptr; });
    stage_rows<T, D>(Vs, L::LDK, [&](int r) -> const T * { return kt + r <= key_end ? vc + key_row(r) : nullptr; });
    __syncthreads();

    // S (this warp's 16 rows x 64 keys) = Q K^T.
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[TC_KT / 16];
#pragma unroll
      for (int c = 0; c < TC_KT / 16; c++) wmma::fill_fragment(acc[c], 0.f);
#pragma unroll
      for (int k = 0; k < D / 16; k++) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::load_matrix_sync(a, Qs + warp * 16 * L::LDK + k * 16, L::LDK);
#pragma unroll
        for (int c = 0; c < TC_KT / 16; c++) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
          wmma::load_matrix_sync(b, Ks + c * 16 * L::LDK + k * 16, L::LDK);
          wmma::mma_sync(acc[c], a, b, acc[c]);
        }
      }
#pragma unroll
      for (int c = 0; c < TC_KT / 16; c++)
        wmma::store_matrix_sync(Ss + warp * 16 * L::LDS + c * 16, acc[c], L::LDS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: two lanes per row, 32 keys each.
    {
      const int r = warp * 16 + lane / 2, half = lane & 1;
      const int i = r / G;
      const int pos = p0 + i;
      const int lo = window > 0 ? max(0, pos + 1 - window) : 0;
      const bool row_ok = i < n_tok;
      float x[32];
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 32; c++) {
        const int j = kt + half * 32 + c;
        float v = Ss[r * L::LDS + half * 32 + c] * scale;
        if (softcap > 0.f) v = softcap * tanhf(v / softcap);
        x[c] = row_ok && j >= lo && j <= pos ? v : -INFINITY;
        mx = fmaxf(mx, x[c]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
      const float m_old = row_m[r];
      const float m_new = fmaxf(m_old, mx);
      const float corr = m_new == -INFINITY ? 1.f : __expf(m_old - m_new);
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < 32; c++) {
        const T pt = from_f<T>(x[c] == -INFINITY ? 0.f : __expf(x[c] - m_new));
        Ps[r * L::LDP + half * 32 + c] = pt;
        sum += to_f(pt);
      }
      sum += __shfl_xor_sync(0xffffffff, sum, 1);
      __syncwarp();
      if (half == 0) {
        row_l[r] = row_l[r] * corr + sum;
        row_m[r] = m_new;
        row_c[r] = corr;
      }
    }
    __syncwarp();

    // O = O * corr + P V for this warp's rows.
    for (int idx = lane; idx < 16 * D; idx += 32) {
      const int r = warp * 16 + idx / D;
      Os[r * L::LDO + idx % D] *= row_c[r];
    }
    __syncwarp();
    {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa[TC_KT / 16];
#pragma unroll
      for (int k = 0; k < TC_KT / 16; k++) wmma::load_matrix_sync(pa[k], Ps + warp * 16 * L::LDP + k * 16, L::LDP);
#pragma unroll
      for (int n = 0; n < D / 16; n++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        float *o = Os + warp * 16 * L::LDO + n * 16;
        wmma::load_matrix_sync(acc, o, L::LDO, wmma::mem_row_major);
#pragma unroll
        for (int k = 0; k < TC_KT / 16; k++) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
          wmma::load_matrix_sync(vb, Vs + k * 16 * L::LDK + n * 16, L::LDK);
          wmma::mma_sync(acc, pa[k], vb, acc);
        }
        wmma::store_matrix_sync(o, acc, L::LDO, wmma::mem_row_major);
      }
    }
  }
  __syncthreads();  // every thread leaves the loop together; with no key tile, the initial O / m / l are visible
  if (part != nullptr) {
    // A split whose range is empty (past the tile's last key) leaves O = 0, m = -inf, l = 0: the merge skips it.
    float *dst = part + (((size_t)blockIdx.x * KvH + g) * gridDim.z + blockIdx.z) * TC_M * (D + 2);
    for (int idx = lane; idx < 16 * (D + 2); idx += 32) {
      const int r = warp * 16 + idx / (D + 2), d = idx % (D + 2);
      dst[(size_t)r * (D + 2) + d] = d < D ? Os[r * L::LDO + d] : (d == D ? row_m[r] : row_l[r]);
    }
    return;
  }
  for (int idx = lane; idx < 16 * D; idx += 32) {
    const int r = warp * 16 + idx / D, d = idx % D;
    const int i = r / G, h = r % G;
    if (i < n_tok) out[((size_t)(t0 + i) * H + (size_t)g * G + h) * D + d] = from_f<T>(Os[r * L::LDO + d] / row_l[r]);
  }
}

// Combine the Z key splits of block (tile, g): O = sum_z O_z e^(m_z - M) / sum_z l_z e^(m_z - M), M = max_z m_z.
template <typename T, int D>
__device__ void prefill_tc_merge(const float *__restrict__ part, T *__restrict__ out, int H, int KvH, int Z,
                                 const uint32_t *__restrict__ tiles) {
  pdl_trigger();
  pdl_wait();
  const int g = blockIdx.y, G = H / KvH;
  const int t0 = (int)tiles[2 * blockIdx.x], n_tok = (int)tiles[2 * blockIdx.x + 1];
  const float *src = part + ((size_t)blockIdx.x * KvH + g) * Z * TC_M * (D + 2);
  const size_t split_stride = (size_t)TC_M * (D + 2);
  for (int idx = threadIdx.x; idx < TC_M * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    const int i = r / G, h = r % G;
    if (i >= n_tok) continue;
    const float *row = src + (size_t)r * (D + 2);
    float m = -INFINITY;
    for (int z = 0; z < Z; z++) m = fmaxf(m, row[z * split_stride + D]);
    float o = 0.f, l = 0.f;
    for (int z = 0; z < Z; z++) {
      const float mz = row[z * split_stride + D];
      if (mz == -INFINITY) continue;
      const float w = __expf(mz - m);
      o += row[z * split_stride + d] * w;
      l += row[z * split_stride + D + 1] * w;
    }
    out[((size_t)(t0 + i) * H + (size_t)g * G + h) * D + d] = from_f<T>(o / l);
  }
}

#define PREFILL_TC(NAME, T, D)                                                                                 \
  extern "C" __global__ void __launch_bounds__(TC_WARPS * 32)                                                 \
      NAME(const T *q, const T *kc, const T *vc, const uint32_t *tables, const uint32_t *tok_row,             \
           const uint32_t *tok_pos, T *out, int H, int KvH, int bs, int max_blocks, int window, float scale,  \
           float softcap, const uint32_t *tiles, int split_keys, float *part) {                               \
    prefill_tc<T, D>(q, kc, vc, tables, tok_row, tok_pos, out, H, KvH, bs, max_blocks, window, scale,         \
                     softcap, tiles, split_keys, part);                                                       \
  }                                                                                                           \
  extern "C" __global__ void NAME##_merge(const float *part, T *out, int H, int KvH, int Z,                   \
                                          const uint32_t *tiles) {                                            \
    prefill_tc_merge<T, D>(part, out, H, KvH, Z, tiles);                                                      \
  }
PREFILL_TC(prefill_tc_bf16_d64, __nv_bfloat16, 64)
PREFILL_TC(prefill_tc_bf16_d128, __nv_bfloat16, 128)
PREFILL_TC(prefill_tc_bf16_d256, __nv_bfloat16, 256)
PREFILL_TC(prefill_tc_f16_d64, __half, 64)
PREFILL_TC(prefill_tc_f16_d128, __half, 128)
PREFILL_TC(prefill_tc_f16_d256, __half, 256)
#endif

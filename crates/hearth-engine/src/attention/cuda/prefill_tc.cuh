// The tensor-core prompt kernel's body (prefill_tc.cu has its description), generic over the caches' row readers:
// prefill_tc.cu instantiates it over 16-bit caches, paged_encoded.cu over its encoding's blocks (decoded to 16 bits
// as they are staged in shared memory). Compute capability 8.0+ (bf16 WMMA): include it only under that guard.
#pragma once
#include <mma.h>

#include "kv_codes.cuh"

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

// 64 key (or value) rows of D values into shared 16-bit rows of ld: copied (a float cache) or decoded eight values
// at a time (an encoded one) from row src_row(r) (zeros where it returns null).
template <typename T, int D, typename R, typename F>
__device__ __forceinline__ void stage_kv(T *dst, int ld, const R &rows, F src_row) {
  if constexpr (!R::CODED) {
    stage_rows<T, D>(dst, ld, src_row);
  } else {
    constexpr int CH = D / 8;
    for (int c = threadIdx.x; c < 64 * CH; c += blockDim.x) {
      const int r = c / CH, part = c % CH;
      const typename R::E *src = src_row(r);
      float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      if (src != nullptr) rows.key8(src, part * 8, f);
      Pack<T, 8> pk;
#pragma unroll
      for (int e = 0; e < 8; e++) pk.v[e] = from_f<T>(f[e]);
      *reinterpret_cast<Pack<T, 8> *>(dst + r * ld + part * 8) = pk;
    }
  }
}

// KR, VR: the caches' row readers (PlainRows, or CodedRows over an encoded cache). ROT_Q: the keys are rotated, so
// the staged queries are rotated too (through f32, then rounded to T); ROT_O: the values are rotated, so the
// outputs are rotated back (here, or in prefill_tc_merge for split keys).
template <typename T, int D, typename KR, typename VR, bool ROT_Q, bool ROT_O>
__device__ void prefill_tc(const T *q, const typename KR::E *kc, const typename VR::E *vc,
                           const uint32_t *__restrict__ tables, const uint32_t *__restrict__ tok_row,
                           const uint32_t *__restrict__ tok_pos, T *__restrict__ out, int H, int KvH, int bs,
                           int max_blocks, int window, float scale, float softcap,
                           const uint32_t *__restrict__ tiles, int split_keys, float *__restrict__ part,
                           const KR &kr, const VR &vr) {
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
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // Q rows (token i, head h) -> i * G + h; rows past the tile's tokens are zeros.
  stage_rows<T, D>(Qs, L::LDK, [&](int r) -> const T * {
    const int i = r / G, h = r % G;
    return i < n_tok ? q + ((size_t)(t0 + i) * H + (size_t)g * G + h) * D : nullptr;
  });
  if constexpr (ROT_Q) {  // rotate the staged rows through O's f32 rows
    __syncthreads();
    for (int i = threadIdx.x; i < TC_M * D; i += blockDim.x) Os[(i / D) * L::LDO + i % D] = to_f(Qs[(i / D) * L::LDK + i % D]);
    __syncthreads();
    rotate_smem<D>(Os, TC_M, ~0ull, false, L::LDO);
    for (int i = threadIdx.x; i < TC_M * D; i += blockDim.x) Qs[(i / D) * L::LDK + i % D] = from_f<T>(Os[(i / D) * L::LDO + i % D]);
    __syncthreads();
  }
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
    auto head_row = [&](int r) -> size_t {  // the key's cache row * KvH + g
      const int j = kt + r;
      return ((size_t)table[j / bs] * bs + j % bs) * KvH + g;
    };
    stage_kv<T, D>(Ks, L::LDK, kr, [&](int r) -> const typename KR::E * {
      return kt + r <= key_end ? kc + head_row(r) * KR::UNITS : nullptr;
    });
    stage_kv<T, D>(Vs, L::LDK, vr, [&](int r) -> const typename VR::E * {
      return kt + r <= key_end ? vc + head_row(r) * VR::UNITS : nullptr;
    });
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
  if constexpr (ROT_O) rotate_smem<D>(Os, TC_M, ~0ull, true, L::LDO);
  for (int idx = lane; idx < 16 * D; idx += 32) {
    const int r = warp * 16 + idx / D, d = idx % D;
    const int i = r / G, h = r % G;
    if (i < n_tok) out[((size_t)(t0 + i) * H + (size_t)g * G + h) * D + d] = from_f<T>(Os[r * L::LDO + d] / row_l[r]);
  }
}

// Combine the Z key splits of block (tile, g): O = sum_z O_z e^(m_z - M) / sum_z l_z e^(m_z - M), M = max_z m_z.
// ROT_O: the rows are rotated back before they are written (16 rows at a time through shared memory).
template <typename T, int D, bool ROT_O>
__device__ void prefill_tc_merge(const float *__restrict__ part, T *__restrict__ out, int H, int KvH, int Z,
                                 const uint32_t *__restrict__ tiles) {
  pdl_trigger();
  pdl_wait();
  const int g = blockIdx.y, G = H / KvH;
  const int t0 = (int)tiles[2 * blockIdx.x], n_tok = (int)tiles[2 * blockIdx.x + 1];
  const float *src = part + ((size_t)blockIdx.x * KvH + g) * Z * TC_M * (D + 2);
  const size_t split_stride = (size_t)TC_M * (D + 2);
  auto merged = [&](int r, int d) {
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
    return o / l;
  };
  if constexpr (ROT_O) {
    __shared__ float rows[16 * D];
    for (int r0 = 0; r0 < TC_M; r0 += 16) {
      for (int idx = threadIdx.x; idx < 16 * D; idx += blockDim.x) {
        const int r = r0 + idx / D;
        rows[idx] = r / G < n_tok ? merged(r, idx % D) : 0.f;
      }
      __syncthreads();
      rotate_smem<D>(rows, 16, ~0ull, true, D);
      for (int idx = threadIdx.x; idx < 16 * D; idx += blockDim.x) {
        const int r = r0 + idx / D, i = r / G, h = r % G;
        if (i < n_tok) out[((size_t)(t0 + i) * H + (size_t)g * G + h) * D + idx % D] = from_f<T>(rows[idx]);
      }
      __syncthreads();
    }
  } else {
    for (int idx = threadIdx.x; idx < TC_M * D; idx += blockDim.x) {
      const int r = idx / D, d = idx % D;
      const int i = r / G, h = r % G;
      if (i >= n_tok) continue;
      out[((size_t)(t0 + i) * H + (size_t)g * G + h) * D + d] = from_f<T>(merged(r, d));
    }
  }
}

// Quantized skinny matmuls for decode steps (see src/gpu/qgemv.rs): y[m, N] = W[N, K] · x[m, K] for m <= 8 rows,
// W in GGUF's own block layout (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K), read in place, x in the activation
// dtype T (compiled once per dtype: -DXT=<type> -DXSFX=<suffix>).
//
// * x is quantized once per block into shared memory as llama.cpp's q8_1 does (per 32 values: d = amax / 127,
//   q = round(v / d), s = the sum of the values; one pass, a group's threads meeting by shuffles), and every 32-value unit of a weight row is dotted with it in
//   integer arithmetic (dp4a), as llama.cpp's MMVQ does: its arithmetic (the k-quants' min term on d · Σq), with d
//   and s kept in f32.
// * A persistent grid of WARPS-warp blocks. A warp walks its output columns' weight rows in pieces of 64 units
//   (two per lane), each piece loaded with 16-byte vectors into the warp's staging buffer in shared memory (GGUF
//   blocks are 2-byte aligned: 18, 20, 22, 34, 144, 176, 210 bytes), the next piece in flight in registers while
//   the lanes compute the current one. With SPLIT > 1 (a runtime value) a column's pieces are shared by SPLIT warps
//   of the block, whose sums meet in shared memory in warp order (deterministic).
// * MODE X_ADDNORM computes x itself from the residual add and RMSNorm before it (gemv.cu's arithmetic, per row);
//   block 0 writes h + a. EPI_SILU / EPI_GELU: gate|up pairs (p, p + N/2) -> act(gate) * up (the sums rounded to T
//   first, as act_mul reads the matmul's output).
// The first piece of weights is loaded before pdl_wait (weights are never written by a kernel).
#include "common.cuh"

#ifndef XT
#define XT __nv_bfloat16
#define XSFX bf16
#endif

constexpr int WARPS = 8;        // warps per block
constexpr int PIECE = 64;        // 32-value units a warp stages at a time (two per lane)
constexpr int STAGE_VECS = 140;  // 16-byte vectors of a warp's staging buffer: a piece's bytes (at most 64 Q8_0
                                 // blocks, 2176 bytes) plus up to 15 before its start and the round-up after
constexpr int NV = 5;            // vectors per lane in flight: ceil(STAGE_VECS / 32)

constexpr int X_PLAIN = 0;
constexpr int X_ADDNORM = 1;
constexpr int EPI_NONE = 0;
constexpr int EPI_SILU = 1;
constexpr int EPI_GELU = 2;

// GGML types by their ggml_type numbers.
constexpr int Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14;

template <int TY> struct QType;
template <> struct QType<Q4_0> { static constexpr int UNITS = 1, BYTES = 18; };
template <> struct QType<Q4_1> { static constexpr int UNITS = 1, BYTES = 20; };
template <> struct QType<Q5_0> { static constexpr int UNITS = 1, BYTES = 22; };
template <> struct QType<Q8_0> { static constexpr int UNITS = 1, BYTES = 34; };
template <> struct QType<Q4_K> { static constexpr int UNITS = 8, BYTES = 144; };
template <> struct QType<Q5_K> { static constexpr int UNITS = 8, BYTES = 176; };
template <> struct QType<Q6_K> { static constexpr int UNITS = 8, BYTES = 210; };
// UNITS: 32-value units per GGML block.

// A 32-bit int from 2-byte aligned shared memory.
__device__ __forceinline__ int get_int_b2(const uint8_t *p) {
  const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
  return (int)h[0] | ((int)h[1] << 16);
}
__device__ __forceinline__ float half_at(const uint8_t *p) {
  return __half2float(*reinterpret_cast<const __half *>(p));
}

// One 32-value unit of a weight row: its values as int8 (q[i] holds values 4i..4i+3) and the affine map of its
// dot with a q8_1 block (d8, s8): d8 * (d0 * sum(q * x8)[values 0..15] + d1 * sum(...)[16..31]) + m * s8.
struct Unit {
  int q[8];
  float d0, d1, m;
};

// The unit `sub` (0 for the 32-value types, 0..7 of a k-quant super block) of the GGML block at `b`.
template <int TY> __device__ __forceinline__ Unit decode(const uint8_t *b, int sub);

template <> __device__ __forceinline__ Unit decode<Q4_0>(const uint8_t *b, int) {
  Unit u;
  const float d = half_at(b);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int v = get_int_b2(b + 2 + 4 * i);
    u.q[i] = v & 0x0F0F0F0F;
    u.q[i + 4] = (v >> 4) & 0x0F0F0F0F;
  }
  u.d0 = u.d1 = d;
  u.m = -8.f * d;
  return u;
}

template <> __device__ __forceinline__ Unit decode<Q4_1>(const uint8_t *b, int) {
  Unit u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int v = get_int_b2(b + 4 + 4 * i);
    u.q[i] = v & 0x0F0F0F0F;
    u.q[i + 4] = (v >> 4) & 0x0F0F0F0F;
  }
  u.d0 = u.d1 = half_at(b);
  u.m = half_at(b + 2);
  return u;
}

// Bits 0..3 of h moved to bit 4 of bytes 0..3.
__device__ __forceinline__ int high_bits(int h) {
  return ((h << 4) & 0x00000010) | ((h << 11) & 0x00001000) | ((h << 18) & 0x00100000) | ((h << 25) & 0x10000000);
}

template <> __device__ __forceinline__ Unit decode<Q5_0>(const uint8_t *b, int) {
  Unit u;
  const float d = half_at(b);
  const int qh = get_int_b2(b + 2);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int v = get_int_b2(b + 6 + 4 * i);
    u.q[i] = (v & 0x0F0F0F0F) | high_bits(qh >> (4 * i));
    u.q[i + 4] = ((v >> 4) & 0x0F0F0F0F) | high_bits(qh >> (4 * i + 16));
  }
  u.d0 = u.d1 = d;
  u.m = -16.f * d;
  return u;
}

template <> __device__ __forceinline__ Unit decode<Q8_0>(const uint8_t *b, int) {
  Unit u;
#pragma unroll
  for (int i = 0; i < 8; ++i) u.q[i] = get_int_b2(b + 2 + 4 * i);
  u.d0 = u.d1 = half_at(b);
  u.m = 0.f;
  return u;
}

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super block (ggml's get_scale_min_k4).
__device__ __forceinline__ void scale_min_k4(const uint8_t *s, int j, int &sc, int &mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K: d, dmin, scales[12], qs[128]; sub-block j: the low (even j) or high (odd j) nibbles of qs[32 (j / 2) ..].
template <> __device__ __forceinline__ Unit decode<Q4_K>(const uint8_t *b, int j) {
  Unit u;
  int sc, mn;
  scale_min_k4(b + 4, j, sc, mn);
  const uint8_t *qs = b + 16 + 32 * (j / 2);
  const int shift = 4 * (j % 2);
#pragma unroll
  for (int i = 0; i < 8; ++i) u.q[i] = (get_int_b2(qs + 4 * i) >> shift) & 0x0F0F0F0F;
  u.d0 = u.d1 = half_at(b) * (float)sc;
  u.m = -half_at(b + 2) * (float)mn;
  return u;
}

// Q5_K: d, dmin, scales[12], qh[32], qs[128]; the fifth bit of value l of sub-block j is bit j of qh[l].
template <> __device__ __forceinline__ Unit decode<Q5_K>(const uint8_t *b, int j) {
  Unit u;
  int sc, mn;
  scale_min_k4(b + 4, j, sc, mn);
  const uint8_t *qs = b + 48 + 32 * (j / 2);
  const int shift = 4 * (j % 2);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int hi = ((get_int_b2(b + 16 + 4 * i) >> j) & 0x01010101) << 4;
    u.q[i] = ((get_int_b2(qs + 4 * i) >> shift) & 0x0F0F0F0F) | hi;
  }
  u.d0 = u.d1 = half_at(b) * (float)sc;
  u.m = -half_at(b + 2) * (float)mn;
  return u;
}

// Q6_K: ql[128], qh[64], scales[16] (int8), d. Sub-block j = (half n = j / 4, quarter t = j % 4): value l is
// (nibble (t / 2) of ql[64 n + 32 (t % 2) + l]) | (bits 2t..2t+1 of qh[32 n + l]) << 4, minus 32, with scale
// scales[8 n + 2 t + l / 16].
template <> __device__ __forceinline__ Unit decode<Q6_K>(const uint8_t *b, int j) {
  Unit u;
  const int n = j / 4, t = j % 4;
  const uint8_t *ql = b + 64 * n + 32 * (t % 2);
  const uint8_t *qh = b + 128 + 32 * n;
  const int shift = 4 * (t / 2);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int lo = (get_int_b2(ql + 4 * i) >> shift) & 0x0F0F0F0F;
    const int hi = ((get_int_b2(qh + 4 * i) >> (2 * t)) & 0x03030303) << 4;
    u.q[i] = __vsubss4(lo | hi, 0x20202020);
  }
  const float d = half_at(b + 208);
  const int8_t *sc = reinterpret_cast<const int8_t *>(b + 192 + 8 * n + 2 * t);
  u.d0 = d * (float)sc[0];
  u.d1 = d * (float)sc[1];
  u.m = 0.f;
  return u;
}

// The dot of a unit with one q8_1 block (q: 8 ints of shared memory, 16-byte aligned). The offset term takes the
// block's sum as llama.cpp does for each type: the values' own sum s for the 32-value types, the quantized values'
// sum d8 · Σq for the k-quants (QSUM; their large min term then meets the same rounded x as the scaled term, which
// keeps it within the 8-bit rounding: 2-4x closer to the exact product than with s).
template <bool QSUM>
__device__ __forceinline__ float unit_dot(const Unit &u, const int *q, float2 ds) {
  const int4 a = reinterpret_cast<const int4 *>(q)[0], b = reinterpret_cast<const int4 *>(q)[1];
  float sum = ds.y;
  if constexpr (QSUM) {
    int n = __dp4a(0x01010101, a.x, 0);
    n = __dp4a(0x01010101, a.y, n);
    n = __dp4a(0x01010101, a.z, n);
    n = __dp4a(0x01010101, a.w, n);
    n = __dp4a(0x01010101, b.x, n);
    n = __dp4a(0x01010101, b.y, n);
    n = __dp4a(0x01010101, b.z, n);
    n = __dp4a(0x01010101, b.w, n);
    sum = ds.x * (float)n;
  }
  int lo = __dp4a(u.q[0], a.x, 0);
  lo = __dp4a(u.q[1], a.y, lo);
  lo = __dp4a(u.q[2], a.z, lo);
  lo = __dp4a(u.q[3], a.w, lo);
  int hi = __dp4a(u.q[4], b.x, 0);
  hi = __dp4a(u.q[5], b.y, hi);
  hi = __dp4a(u.q[6], b.z, hi);
  hi = __dp4a(u.q[7], b.w, hi);
  return ds.x * (u.d0 * (float)lo + u.d1 * (float)hi) + u.m * sum;
}

// Values off..off + V of one row of the kernel's input (16-byte aligned; earlier kernels' outputs: coherent loads):
// x itself (X_PLAIN), or rmsnorm(h + a) * wn rounded to T as add_rmsnorm stores it (X_ADDNORM, `scale` the row's
// 1 / rms).
template <typename T, int MODE>
__device__ __forceinline__ void input_chunk(const T *xr, const T *ar, const T *wn, float scale, int off, float *v) {
  constexpr int V = Vec16<T>::N;
  unpack<T>(__ldcg(reinterpret_cast<const uint4 *>(xr + off)), v);
  if constexpr (MODE == X_ADDNORM) {
    float av[V], wv[V];
    if (ar != nullptr) unpack<T>(__ldcg(reinterpret_cast<const uint4 *>(ar + off)), av);
    unpack<T>(__ldg(reinterpret_cast<const uint4 *>(wn + off)), wv);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float s = to_f(from_f<T>(v[i] + (ar != nullptr ? av[i] : 0.f)));
      v[i] = to_f(from_f<T>(s * scale * wv[i]));
    }
  }
}

// x (m rows of K) into shared memory as q8_1: the rows themselves (X_PLAIN) or rmsnorm(h + a) * wn per row
// (X_ADDNORM; a may be null; block 0 writes h + a to h_out unless it is null). Block-wide; waits for the previous
// kernel itself.
template <typename T, int MODE>
__device__ void quantize_x(const T *x, const T *a, const T *wn, T *h_out, float eps, int m, int K, int8_t *xq,
                           float2 *xds, float *red) {
  constexpr int V = Vec16<T>::N;
  const int groups = K / 32, t = threadIdx.x, lane = t % 32, warp = t / 32;
  pdl_wait();  // x (h, a) is an earlier kernel's output
  for (int r = 0; r < m; ++r) {
    const T *xr = x + (size_t)r * K;
    const T *ar = a != nullptr ? a + (size_t)r * K : nullptr;
    float scale = 1.f;
    if constexpr (MODE == X_ADDNORM) {
      float ss = 0.f;
      for (int c = t; c < K / V; c += WARPS * 32) {
        float hv[V], av[V];
        unpack<T>(__ldcg(reinterpret_cast<const uint4 *>(xr) + c), hv);
        if (ar != nullptr) unpack<T>(__ldcg(reinterpret_cast<const uint4 *>(ar) + c), av);
        uint4 packed;
        T *pp = reinterpret_cast<T *>(&packed);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          pp[i] = from_f<T>(hv[i] + (ar != nullptr ? av[i] : 0.f));
          const float f = to_f(pp[i]);
          ss += f * f;
        }
        if (h_out != nullptr && blockIdx.x == 0) reinterpret_cast<uint4 *>(h_out + (size_t)r * K)[c] = packed;
      }
      ss = warp_sum(ss);
      if (lane == 0) red[warp] = ss;
      __syncthreads();
      float total = 0.f;
#pragma unroll
      for (int q = 0; q < WARPS; ++q) total += red[q];
      scale = rsqrtf(total / K + eps);
      __syncthreads();  // red is reused by the next row
    }
    // One pass: each thread takes 16-byte chunks (QB of them loaded before any is used, so their loads are in
    // flight together); the G threads of a 32-value group are adjacent lanes and meet amax and the sum by shuffles.
    constexpr int G = 32 / V, QB = 2;
    const int chunks = K / V;
    for (int c0 = 0; c0 < chunks; c0 += QB * WARPS * 32) {
      float v[QB][V];
#pragma unroll
      for (int b = 0; b < QB; ++b) {
        const int c = c0 + b * WARPS * 32 + t;
        if (c < chunks) {
          input_chunk<T, MODE>(xr, ar, wn, scale, c * V, v[b]);
        } else {
#pragma unroll
          for (int i = 0; i < V; ++i) v[b][i] = 0.f;
        }
      }
#pragma unroll
      for (int b = 0; b < QB; ++b) {
        const int c = c0 + b * WARPS * 32 + t;
        float amax = 0.f, sum = 0.f;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          amax = fmaxf(amax, fabsf(v[b][i]));
          sum += v[b][i];
        }
#pragma unroll
        for (int o = G / 2; o > 0; o >>= 1) {
          amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, o));
          sum += __shfl_xor_sync(0xffffffff, sum, o);
        }
        const float d = amax / 127.f;
        if (c < chunks) {
          int words[V / 4];
#pragma unroll
          for (int w = 0; w < V / 4; ++w) {
            int word = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const int x8 = amax == 0.f ? 0 : (int)roundf(v[b][4 * w + j] / d);
              word |= (x8 & 0xFF) << (8 * j);
            }
            words[w] = word;
          }
          int *dst = reinterpret_cast<int *>(xq + (size_t)r * K + (size_t)c * V);
#pragma unroll
          for (int w = 0; w < V / 4; ++w) dst[w] = words[w];
          if (t % G == 0) xds[(size_t)r * groups + c / G] = make_float2(d, sum);
        }
      }
    }
  }
  __syncthreads();
}

// The kernel body. w: the matrix's GGML rows (row_bytes each, rows 2-byte aligned, readable up to 16 bytes past
// the last row's end: candle pads its quantized buffers). MR: the most rows of x this instantiation takes (m <= MR).
template <typename T, int TY, int MR, int MODE, int EPI>
__device__ void qgemv(const T *x, const T *a, const T *wn, T *h_out, float eps, const uint8_t *__restrict__ w, T *y,
                      int N, int K, int m, int split) {
  using Q = QType<TY>;
  extern __shared__ uint4 smem[];
  pdl_trigger();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int units = K / 32, groups = K / 32;
  const int pieces = (units + PIECE - 1) / PIECE;
  const size_t row_bytes = (size_t)(units / Q::UNITS) * Q::BYTES;
  // Shared memory (qgemv.rs smem_bytes sizes it the same way): [x's q8 values: m * K bytes][x's (d, s): m * groups
  // float2, rounded up to 16 bytes][red: WARPS * 2 * MR floats][the norm's WARPS floats][staging: WARPS *
  // STAGE_VECS vectors].
  int8_t *xq = reinterpret_cast<int8_t *>(smem);
  float2 *xds = reinterpret_cast<float2 *>(xq + (size_t)m * K);
  float *red = reinterpret_cast<float *>(reinterpret_cast<uint8_t *>(xds) + (((size_t)m * groups * 8 + 15) & ~(size_t)15));
  float *nred = red + WARPS * 2 * MR;
  uint4 *stage = reinterpret_cast<uint4 *>(nred + WARPS) + warp * STAGE_VECS;
  const uint8_t *stage_b = reinterpret_cast<const uint8_t *>(stage);

  // Output columns (pairs with a gated epilogue); a column's matrix rows: n (and n + N / 2 when paired).
  const int cols = EPI == EPI_NONE ? N : N / 2;
  constexpr int R = EPI == EPI_NONE ? 1 : 2;
  const int per_block = WARPS / split;  // columns a block takes per step
  const int col_in_block = warp / split, part = warp % split;
  const int step = gridDim.x * per_block;
  // The warp's work as a flat sequence of (column step, matrix row of the column, piece): pieces part, part +
  // split, ... of each row. `cur` walks it; a column step past `cols` still runs (its loads masked) so that every
  // warp of the block meets the barriers of the split sum.
  const int my_pieces = part < pieces ? (pieces - part + split - 1) / split : 0;
  const int per_col = R * my_pieces;  // pieces of one column step for this warp
  const int block_steps = blockIdx.x * per_block < cols ? (cols - blockIdx.x * per_block + step - 1) / step : 0;
  const int total = block_steps * per_col;

  // Where piece `i` of the flat sequence is: its matrix row (or -1 past the columns) and piece index.
  auto locate = [&](int i, int &mrow, int &piece) {
    const int s = i / per_col, rem = i % per_col;
    const int col = blockIdx.x * per_block + s * step + col_in_block;
    const int sub = rem / my_pieces;
    piece = part + (rem % my_pieces) * split;
    mrow = col < cols ? col + sub * (N / R) : -1;
  };
  uint4 nxt[NV];
  int nxt_off = 0;
  auto load = [&](int i) {
    int mrow, piece;
    locate(i, mrow, piece);
    const int u0 = piece * PIECE, u1 = min(units, u0 + PIECE);
    const uint8_t *start = w + (size_t)max(mrow, 0) * row_bytes + (size_t)(u0 / Q::UNITS) * Q::BYTES;
    const size_t bytes = (size_t)((u1 + Q::UNITS - 1) / Q::UNITS - u0 / Q::UNITS) * Q::BYTES;
    const uint4 *aligned = reinterpret_cast<const uint4 *>(reinterpret_cast<uintptr_t>(start) & ~(uintptr_t)15);
    nxt_off = (int)(start - reinterpret_cast<const uint8_t *>(aligned));
    const int vecs = mrow < 0 ? 0 : (int)((nxt_off + bytes + 15) / 16);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int v = lane + 32 * k;
      nxt[k] = v < vecs ? __ldg(aligned + v) : make_uint4(0, 0, 0, 0);
    }
  };
  if (total > 0) load(0);
  quantize_x<T, MODE>(x, a, wn, h_out, eps, m, K, xq, xds, nred);

  float acc[R][MR];
#pragma unroll
  for (int s = 0; s < R; ++s)
#pragma unroll
    for (int r = 0; r < MR; ++r) acc[s][r] = 0.f;
  for (int i = 0; i < total; ++i) {
    int mrow, piece;
    locate(i, mrow, piece);
    const int off = nxt_off;
    __syncwarp();
#pragma unroll
    for (int k = 0; k < NV; ++k)
      if (lane + 32 * k < STAGE_VECS) stage[lane + 32 * k] = nxt[k];
    __syncwarp();
    if (i + 1 < total) load(i + 1);  // in flight while this piece is computed
    const int sub = (i % per_col) / my_pieces;
#pragma unroll
    for (int half = 0; half < PIECE / 32; ++half) {
      const int u = piece * PIECE + 32 * half + lane;
      if (mrow >= 0 && u < units) {
        const int first_block = (piece * PIECE) / Q::UNITS;
        const uint8_t *blk = stage_b + off + (size_t)(u / Q::UNITS - first_block) * Q::BYTES;
        const Unit q = decode<TY>(blk, u % Q::UNITS);
#pragma unroll
        for (int r = 0; r < MR; ++r)
          if (r < m)
            acc[sub][r] +=
                unit_dot<TY == Q4_K || TY == Q5_K>(q, reinterpret_cast<const int *>(xq + (size_t)r * K + 32 * u),
                                                   xds[r * groups + u]);
      }
    }
    // The end of a column step: reduce and write.
    if ((i + 1) % per_col == 0) {
      const int s = i / per_col;
      const int col = blockIdx.x * per_block + s * step + col_in_block;
      float sums[R][MR];
#pragma unroll
      for (int q = 0; q < R; ++q)
#pragma unroll
        for (int r = 0; r < MR; ++r) {
          sums[q][r] = warp_sum(acc[q][r]);
          acc[q][r] = 0.f;
        }
      if (split > 1) {
        // red: [WARPS][R * MR] partial sums; the column's first warp adds them in part order.
        float *mine = red + warp * R * MR;
        __syncthreads();
        if (lane == 0)
#pragma unroll
          for (int q = 0; q < R; ++q)
#pragma unroll
            for (int r = 0; r < MR; ++r) mine[q * MR + r] = sums[q][r];
        __syncthreads();
        if (part == 0)
#pragma unroll
          for (int q = 0; q < R; ++q)
#pragma unroll
            for (int r = 0; r < MR; ++r) {
              float t = 0.f;
              for (int p = 0; p < split; ++p) t += red[(warp + p) * R * MR + q * MR + r];
              sums[q][r] = t;
            }
      }
      if (part == 0 && lane == 0 && col < cols) {
#pragma unroll
        for (int r = 0; r < MR; ++r) {
          if (r >= m) break;
          if constexpr (EPI == EPI_NONE) {
            y[(size_t)r * cols + col] = from_f<T>(sums[0][r]);
          } else {
            const float g = to_f(from_f<T>(sums[0][r])), up = to_f(from_f<T>(sums[1][r]));
            y[(size_t)r * cols + col] = from_f<T>((EPI == EPI_SILU ? silu(g) : gelu_tanh(g)) * up);
          }
        }
      }
    }
  }
}

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define KERNEL(TYN, TY, MR, MODE, MODEN, EPI)                                                                \
  extern "C" __global__ void __launch_bounds__(WARPS * 32, 3) CAT(qgemv_##TYN##_##MODEN##_m##MR##_, XSFX)(        \
      const XT *x, const XT *a, const XT *wn, XT *h_out, float eps, const uint8_t *w, XT *y, int N, int K, int m, \
      int split) {                                                                                            \
    qgemv<XT, TY, MR, MODE, EPI>(x, a, wn, h_out, eps, w, y, N, K, m, split);                                 \
  }
#define BY_MODE(TYN, TY, MR)                                \
  KERNEL(TYN, TY, MR, X_PLAIN, plain, EPI_NONE)             \
  KERNEL(TYN, TY, MR, X_ADDNORM, addnorm, EPI_NONE)         \
  KERNEL(TYN, TY, MR, X_ADDNORM, addnorm_silu, EPI_SILU)    \
  KERNEL(TYN, TY, MR, X_ADDNORM, addnorm_gelu, EPI_GELU)
#define BY_ROWS(TYN, TY) \
  BY_MODE(TYN, TY, 1)    \
  BY_MODE(TYN, TY, 8)
BY_ROWS(q4_0, Q4_0)
BY_ROWS(q4_1, Q4_1)
BY_ROWS(q5_0, Q5_0)
BY_ROWS(q8_0, Q8_0)
BY_ROWS(q4_k, Q4_K)
BY_ROWS(q5_k, Q5_K)
BY_ROWS(q6_k, Q6_K)

// The quantized KV row codes on the device: the rotation, the encoders (once per token, layer and head on write)
// and the row readers the attention kernels decode with (PlainRows for float caches, CodedRows for the encoded
// ones). kv/codec.rs has the layouts and the CPU arithmetic, which these are written to reproduce bit for bit
// (tests/gpu_kv_encodings.rs checks it: every byte equal on an H100).
//
// Code ids (attention/cuda/encoded.rs): KV_Q8 int8 + an f16 scale per 64; KV_Q4 4-bit (code - 8) + an f16 scale
// per 32; KV_LM4/3/2 Lloyd-Max codes + one f16 scale a row. Codes are a little-endian bit stream: value i at bits
// b*i .. b*i + b.
#pragma once
#include "attn_common.cuh"

#define KV_Q8 1
#define KV_Q4 2
#define KV_LM4 3
#define KV_LM3 4
#define KV_LM2 5

__constant__ float kv_lm2[4] = {-1.5104f, -0.4528f, 0.4528f, 1.5104f};
__constant__ float kv_lm3[8] = {-2.1519f, -1.3439f, -0.7560f, -0.2451f, 0.2451f, 0.7560f, 1.3439f, 2.1519f};
__constant__ float kv_lm4[16] = {-2.7326f, -2.0690f, -1.6181f, -1.2562f, -0.9424f, -0.6568f, -0.3881f, -0.1284f,
                                 0.1284f,  0.3881f,  0.6568f,  0.9424f,  1.2562f,  1.6181f,  2.0690f,  2.7326f};

__host__ __device__ constexpr int code_bits(int code) {
  return code == KV_Q8 ? 8 : code == KV_Q4 || code == KV_LM4 ? 4 : code == KV_LM3 ? 3 : 2;
}
__host__ __device__ constexpr bool code_lm(int code) { return code >= KV_LM4; }
// Bytes of a head row of D values (RowCode::units).
__host__ __device__ constexpr int code_units(int code, int D) {
  return code == KV_Q8 ? D + 2 * ((D + 63) / 64) : code == KV_Q4 ? D / 2 + 2 * ((D + 31) / 32) : D * code_bits(code) / 8 + 2;
}
// Whether a row of this code is rotated before it is encoded (RowCode::rotated): q8_0 values are not.
__host__ __device__ constexpr bool code_rotated(int code, bool key) { return code != KV_Q8 || key; }
// Values per scale (a row's D for the Lloyd-Max codes); the scale's byte offset in the row follows the codes.
__host__ __device__ constexpr int code_block(int code, int D) { return code == KV_Q8 ? 64 : code == KV_Q4 ? 32 : D; }
__device__ __forceinline__ const float *code_book(int code) {
  return code == KV_LM4 ? kv_lm4 : code == KV_LM3 ? kv_lm3 : kv_lm2;
}

// One f16 scale, stored as one 16-bit word: every scale sits at an even offset of a row of an even number of bytes
// (code_units), so the store is aligned. (Two byte stores of its halves lost the low byte on an H100: the rows
// came back with it 0 or 1.)
__device__ __forceinline__ void put_f16(uint8_t *p, float v) { *reinterpret_cast<__half *>(p) = __float2half_rn(v); }

// The index of the level of `book` (2^bits ascending levels) nearest v: the midpoints below it (codec.rs nearest).
__device__ __forceinline__ int lm_nearest(const float *book, int n, float v) {
  int c = 0;
  for (int i = 0; i + 1 < n; i++) c += v > __fmul_rn(0.5f, __fadd_rn(book[i], book[i + 1]));
  return c;
}

// Encode one head row x (D floats in shared memory, rotated where the code rotates) with `code` into dst (global
// bytes). One whole warp calls it; codes: D bytes of shared scratch. Written for codec.rs's encoders' bits: the
// sums a scale needs are taken by one lane in index order, with unfused multiplies and adds.
template <int D>
__device__ void encode_row(const float *x, uint8_t *dst, int code, uint8_t *codes) {
  const int lane = threadIdx.x % 32;
  if (code == KV_Q8) {
    for (int b = 0; b < D / 64; b++) {
      float amax = 0.f;
      for (int i = lane; i < 64; i += 32) amax = fmaxf(amax, fabsf(x[b * 64 + i]));
      amax = warp_max(amax);
      const float s = __half2float(__float2half_rn(amax / 127.f));
      const float inv = s > 0.f ? 1.f / s : 0.f;
      for (int i = lane; i < 64; i += 32) {
        const float q = fminf(fmaxf(roundf(__fmul_rn(x[b * 64 + i], inv)), -127.f), 127.f);
        dst[b * 64 + i] = (uint8_t)(int8_t)q;
      }
      if (lane == 0) put_f16(dst + D + 2 * b, amax / 127.f);
    }
  } else if (code == KV_Q4) {
    __shared__ float q4_scale[32];  // per warp of a block, indexed by block of 32 values (D <= 256: 8 of them)
    float *sc = q4_scale + (threadIdx.x / 32 % 4) * 8;
    if (lane < D / 32) {
      float peak = 0.f;
      for (int i = 0; i < 32; i++) {
        const float v = x[lane * 32 + i];
        if (fabsf(v) > fabsf(peak)) peak = v;
      }
      put_f16(dst + D / 2 + 2 * lane, peak / -8.f);
      sc[lane] = __half2float(__float2half_rn(peak / -8.f));
    }
    __syncwarp();
    for (int j = lane; j < D / 2; j += 32) {
      const float s = sc[2 * j / 32];
      const float inv = s != 0.f ? 1.f / s : 0.f;
      int c[2];
      for (int e = 0; e < 2; e++) c[e] = (int)fminf(fmaxf(__fadd_rn(roundf(__fmul_rn(x[2 * j + e], inv)), 8.f), 0.f), 15.f);
      dst[j] = (uint8_t)(c[0] | (c[1] << 4));
    }
  } else {
    const int bits = code_bits(code), n = 1 << bits;
    const float *book = code_book(code);
    __shared__ float lm_inv[4];
    if (lane == 0) {
      float ss = 0.f;
      for (int i = 0; i < D; i++) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
      const float norm = sqrtf(ss);
      lm_inv[threadIdx.x / 32 % 4] = norm > 0.f ? sqrtf((float)D) / norm : 0.f;
    }
    __syncwarp();
    const float inv_sigma = lm_inv[threadIdx.x / 32 % 4];
    for (int i = lane; i < D; i += 32) codes[i] = (uint8_t)lm_nearest(book, n, __fmul_rn(x[i], inv_sigma));
    __syncwarp();
    // Eight values' codes are `bits` bytes at 8g*bits/8 (a little-endian word).
    for (int g = lane; g < D / 8; g += 32) {
      uint32_t w = 0;
      for (int e = 0; e < 8; e++) w |= (uint32_t)codes[8 * g + e] << (bits * e);
      for (int k = 0; k < bits; k++) dst[g * bits + k] = (uint8_t)(w >> (8 * k));
    }
    if (lane == 0) {
      float xc = 0.f, cc = 0.f;
      for (int i = 0; i < D; i++) {
        const float c = book[codes[i]];
        xc = __fadd_rn(xc, __fmul_rn(x[i], c));
        cc = __fadd_rn(cc, __fmul_rn(c, c));
      }
      put_f16(dst + D * bits / 8, cc > 0.f ? xc / cc : 0.f);
    }
  }
  __syncwarp();
}

// NBITS bits (<= 64) at bit offset `bit` of a row whose start is aligned to A bytes, where consecutive reads
// step by NBITS (so, for NBITS a multiple of 8, the offset keeps the alignment gcd(NBITS / 8, A)).
template <int NBITS, int A>
__device__ __forceinline__ uint64_t load_bits(const uint8_t *row, int bit) {
  if constexpr (NBITS % 8 == 0) {
    constexpr int BYTES = NBITS / 8;
    constexpr int W = (BYTES % 8 == 0 && A % 8 == 0) ? 8 : (BYTES % 4 == 0 && A % 4 == 0) ? 4 : (BYTES % 2 == 0 && A % 2 == 0) ? 2 : 1;
    const uint8_t *p = row + bit / 8;
    uint64_t r = 0;
#pragma unroll
    for (int i = 0; i < BYTES / W; i++) {
      uint64_t w;
      if constexpr (W == 8) w = *reinterpret_cast<const unsigned long long *>(p + 8 * i);
      else if constexpr (W == 4) w = *reinterpret_cast<const uint32_t *>(p + 4 * i);
      else if constexpr (W == 2) w = *reinterpret_cast<const unsigned short *>(p + 2 * i);
      else w = p[i];
      r |= w << (8 * W * i);
    }
    return r;
  } else {
    constexpr int BYTES = (NBITS + 14) / 8;  // covers any start within a byte
    const uint8_t *p = row + bit / 8;
    uint64_t r = 0;
#pragma unroll
    for (int i = 0; i < BYTES; i++) r |= (uint64_t)p[i] << (8 * i);
    return (r >> (bit % 8)) & ((1ull << NBITS) - 1);
  }
}

__device__ __forceinline__ float load_f16(const uint8_t *p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short *>(p)));
}

// An encoded cache's head rows (bytes): keys read eight values at a time, values a lane's D / 32. `book`: the
// code's Lloyd-Max levels in shared memory (unused by q8_0 / q4_0).
template <int CODE, int D>
struct CodedRows {
  using E = uint8_t;
  static constexpr bool CODED = true;
  static constexpr int UNITS = code_units(CODE, D);
  static constexpr int B = code_bits(CODE);
  static constexpr int P = D / 32;
  static constexpr int A = UNITS % 8 == 0 ? 8 : UNITS % 4 == 0 ? 4 : UNITS % 2 == 0 ? 2 : 1;
  static constexpr int SCALE_AT = D * B / 8;  // the scales follow the codes
  const float *book;
  struct Raw {
    uint64_t w;
    float s;
  };
  // Value e of the codes in w, times the scale. Integer codes become floats through the bits of 2^23 + code and
  // one subtraction (exact: the values an int-to-float conversion gives), not through I2F, which issues at an eighth
  // of the FMA rate on this chip and, at batch 1 (a warp or two per scheduler), is what a tile's walk waits on.
  __device__ __forceinline__ float level(uint64_t w, int e, float s) const {
    if constexpr (CODE == KV_Q8) {
      // q + 128 in the low byte under 2^23's exponent: flip the byte's sign bit, then subtract 2^23 + 128.
      const uint32_t word = (uint32_t)(w >> (32 * (e / 4))) ^ 0x80808080u;
      return (__uint_as_float(__byte_perm(word, 0x4B000000u, 0x7540u | (e % 4))) - 8388736.f) * s;
    } else if constexpr (CODE == KV_Q4) {
      return (__uint_as_float(0x4B000000u | ((uint32_t)(w >> (4 * e)) & 15u)) - 8388616.f) * s;
    } else {
      return book[(uint32_t)(w >> (B * e)) & ((1u << B) - 1)] * s;
    }
  }
  __device__ __forceinline__ void key8(const E *row, int d0, float (&o)[8]) const {
    const uint64_t w = load_bits<8 * B, A>(row, d0 * B);
    const float s = load_f16(row + SCALE_AT + 2 * (d0 / code_block(CODE, D)));
#pragma unroll
    for (int e = 0; e < 8; e++) o[e] = level(w, e, s);
  }
  __device__ __forceinline__ Raw lane_raw(const E *row, int lane) const {
    return Raw{load_bits<P * B, A>(row, lane * P * B), load_f16(row + SCALE_AT + 2 * (lane * P / code_block(CODE, D)))};
  }
  __device__ __forceinline__ void decode(const Raw &r, float (&o)[P]) const {
#pragma unroll
    for (int e = 0; e < P; e++) o[e] = level(r.w, e, r.s);
  }
};

// Decode-matmul probe: y[N] = W[N, K] · x[K] (bf16, M = 1) on the Llama-3.1-8B shapes, for variants of a skinny
// GEMV kernel against cuBLAS, timed back to back with CUDA events (weights rotated through a pool larger than L2,
// so every launch reads them from memory, as in a decode step). Build here, run on the device:
//   export PATH=~/.cache/hearth-cuda/home/bin:$PATH   (scripts/setup-cuda installs nvcc and cuBLAS)
//   nvcc -O3 -arch=sm_90 -std=c++17 -o .gpu/gemv_probe bench/gpu/gemv_probe.cu -L ~/.cache/hearth-cuda/home/lib -lcublas
//   .gpu/gemv_probe   (on the device; carry .gpu) -> one JSON line per (variant, shape): us per launch, TB/s of
//                      weights, and the largest difference from cuBLAS's output relative to its largest value
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#include "probe_common.cuh"
#include "../../crates/hearth-engine/src/gpu/common.cuh"
// The shipped kernels (gemv_row_bf16, gemv_row_split_bf16_s2/_s4, ...), measured as they are.
#include "../../crates/hearth-engine/src/gpu/gemv.cu"


typedef __nv_bfloat16 T;

__device__ __forceinline__ void unpack8(const uint4 &v, float *o) {
  const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 f = __bfloat1622float2(h[i]);
    o[2 * i] = f.x;
    o[2 * i + 1] = f.y;
  }
}

template <int LOAD> __device__ __forceinline__ uint4 ldw(const uint4 *p) {
  if (LOAD == 0) return __ldg(p);
  if (LOAD == 1) return __ldcs(p);
  return *p;
}

// Warp-per-ROWS-rows kernel: lanes stream ROWS weight rows, CHUNK 16-byte loads per row per lane in flight.
template <int ROWS, int CHUNK, int WARPS, int LOAD>
__global__ void __launch_bounds__(WARPS * 32) gemv_warp(const T *__restrict__ x, const T *__restrict__ w,
                                                         T *__restrict__ y, int N, int K) {
  pdl_trigger();
  const int lane = threadIdx.x % 32;
  const int n0 = (blockIdx.x * WARPS + threadIdx.x / 32) * ROWS;
  if (n0 >= N) return;
  const int kv = K / 8;
  const uint4 *wr[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; r++) wr[r] = reinterpret_cast<const uint4 *>(w + (size_t)min(n0 + r, N - 1) * K);
  uint4 wv[ROWS][CHUNK];
#pragma unroll
  for (int u = 0; u < CHUNK; u++)
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
      const int i = lane + u * 32;
      wv[r][u] = i < kv ? ldw<LOAD>(wr[r] + i) : make_uint4(0, 0, 0, 0);
    }
  pdl_wait();
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; r++) acc[r] = 0.f;
  const uint4 *xv = reinterpret_cast<const uint4 *>(x);
  for (int base = 0;;) {
#pragma unroll
    for (int u = 0; u < CHUNK; u++) {
      const int i = base + lane + u * 32;
      if (i < kv) {
        float xf[8];
        unpack8(__ldg(xv + i), xf);
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
          float wf[8];
          unpack8(wv[r][u], wf);
#pragma unroll
          for (int j = 0; j < 8; j++) acc[r] = fmaf(wf[j], xf[j], acc[r]);
        }
      }
    }
    base += 32 * CHUNK;
    if (base >= kv) break;
#pragma unroll
    for (int u = 0; u < CHUNK; u++)
#pragma unroll
      for (int r = 0; r < ROWS; r++) {
        const int i = base + lane + u * 32;
        wv[r][u] = i < kv ? ldw<LOAD>(wr[r] + i) : make_uint4(0, 0, 0, 0);
      }
  }
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    const float s = warp_sum(acc[r]);
    if (lane == 0 && n0 + r < N) y[n0 + r] = __float2bfloat16(s);
  }
}

// Persistent grid-stride variant: each warp walks rows n = warp_id, warp_id + total_warps, ...; the next row's
// first chunk is loaded while the current one is reduced (K <= 32 * CHUNK * 8 only).
template <int CHUNK, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) gemv_persist(const T *__restrict__ x, const T *__restrict__ w,
                                                            T *__restrict__ y, int N, int K) {
  pdl_trigger();
  const int lane = threadIdx.x % 32;
  const int gw = blockIdx.x * WARPS + threadIdx.x / 32, nw = gridDim.x * WARPS;
  const int kv = K / 8;
  int n = gw;
  if (n >= N) return;
  uint4 wv[CHUNK];
#pragma unroll
  for (int u = 0; u < CHUNK; u++) {
    const int i = lane + u * 32;
    wv[u] = i < kv ? __ldg(reinterpret_cast<const uint4 *>(w + (size_t)n * K) + i) : make_uint4(0, 0, 0, 0);
  }
  pdl_wait();
  const uint4 *xv = reinterpret_cast<const uint4 *>(x);
  float xf[CHUNK][8];
#pragma unroll
  for (int u = 0; u < CHUNK; u++) {
    const int i = lane + u * 32;
    if (i < kv) unpack8(__ldg(xv + i), xf[u]);
    else
#pragma unroll
      for (int j = 0; j < 8; j++) xf[u][j] = 0.f;
  }
  for (; n < N; n += nw) {
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < CHUNK; u++) {
      float wf[8];
      unpack8(wv[u], wf);
#pragma unroll
      for (int j = 0; j < 8; j++) acc = fmaf(wf[j], xf[u][j], acc);
    }
    const int nn = n + nw;
    if (nn < N) {
#pragma unroll
      for (int u = 0; u < CHUNK; u++) {
        const int i = lane + u * 32;
        wv[u] = i < kv ? __ldg(reinterpret_cast<const uint4 *>(w + (size_t)nn * K) + i) : make_uint4(0, 0, 0, 0);
      }
    }
    acc = warp_sum(acc);
    if (lane == 0) y[n] = __float2bfloat16(acc);
  }
}

// Streaming persistent variant: each warp walks its (row, chunk) items — rows n = warp_id + i * total_warps, chunks
// of CH 16-byte loads per lane — with two buffers, so that the next item's loads are in flight while the current
// one is multiplied: every warp keeps 1-2 chunks of weights in flight continuously, for any K.
template <int CH, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) gemv_stream(const T *__restrict__ x, const T *__restrict__ w,
                                                           T *__restrict__ y, int N, int K) {
  pdl_trigger();
  const int lane = threadIdx.x % 32;
  const int gw = blockIdx.x * WARPS + threadIdx.x / 32, nw = gridDim.x * WARPS;
  const int kv = K / 8;
  const int nck = (kv + 32 * CH - 1) / (32 * CH);
  const int my_rows = gw < N ? (N - 1 - gw) / nw + 1 : 0;
  const int total = my_rows * nck;
  if (total == 0) return;
  auto load = [&](uint4 *buf, int j) {
    const int n = gw + (j / nck) * nw, c = j % nck;
    const uint4 *wr = reinterpret_cast<const uint4 *>(w + (size_t)n * K) + c * 32 * CH;
    const int lim = kv - c * 32 * CH;
#pragma unroll
    for (int u = 0; u < CH; u++) {
      const int i = lane + u * 32;
      buf[u] = i < lim ? __ldg(wr + i) : make_uint4(0, 0, 0, 0);
    }
  };
  const uint4 *xv = reinterpret_cast<const uint4 *>(x);
  float acc = 0.f;
  auto compute = [&](const uint4 *buf, int j) {
    const int c = j % nck;
    const int lim = kv - c * 32 * CH;
#pragma unroll
    for (int u = 0; u < CH; u++) {
      const int i = lane + u * 32;
      if (i < lim) {
        float xf[8], wf[8];
        unpack8(__ldg(xv + c * 32 * CH + i), xf);
        unpack8(buf[u], wf);
#pragma unroll
        for (int e = 0; e < 8; e++) acc = fmaf(wf[e], xf[e], acc);
      }
    }
    if (c == nck - 1) {
      const float s = warp_sum(acc);
      if (lane == 0) y[gw + (j / nck) * nw] = __float2bfloat16(s);
      acc = 0.f;
    }
  };
  uint4 a[CH], b[CH];
  load(a, 0);
  if (total > 1) load(b, 1);
  pdl_wait();
  for (int j = 0; j < total; j += 2) {
    compute(a, j);
    if (j + 2 < total) load(a, j + 2);
    if (j + 1 < total) {
      compute(b, j + 1);
      if (j + 3 < total) load(b, j + 3);
    }
  }
}

__global__ void fill(T *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2bfloat16(((h & 0xffff) / 65536.f - 0.5f) * 0.1f);
  }
}

struct Shape {
  const char *name;
  int n, k;
};

typedef void (*Kern)(const T *, const T *, T *, int, int);

int main() {
  const Shape shapes[] = {{"qkv", 6144, 4096}, {"o_proj", 4096, 4096}, {"gate_up", 28672, 4096},
                          {"down", 4096, 14336}, {"lm_head", 49152, 4096}};
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t pool_bytes = (size_t)2 << 30;  // 2 GiB of weights, rotated
  T *pool, *x, *y;
  CK(cudaMalloc(&pool, pool_bytes));
  fill<<<1024, 256>>>(pool, pool_bytes / sizeof(T), 1);
  CK(cudaMalloc(&x, 64 << 10));
  fill<<<64, 256>>>(x, (64 << 10) / sizeof(T), 2);
  CK(cudaMalloc(&y, 1 << 20));
  T *yref;
  CK(cudaMalloc(&yref, 1 << 20));
  std::vector<T> hy(1 << 19), hr(1 << 19);
  cublasHandle_t h;
  cublasCreate(&h);
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cublasSetStream(h, st);
  struct V {
    const char *name;
    Kern k;
    int rows_per_block;
    int threads;
    int persist_blocks_per_sm;
  };
  const V vars[] = {
      {"warp_r1_c16_w4_ldcs", gemv_warp<1, 16, 4, 1>, 4, 128, 0},
      {"warp_r2_c4_w4_ldg", gemv_warp<2, 4, 4, 0>, 8, 128, 0},
      {"persist_c16_w4_x4", gemv_persist<16, 4>, 0, 128, 4},
      {"stream_c8_w4_x4", gemv_stream<8, 4>, 0, 128, 4},
      {"stream_c8_w4_x3", gemv_stream<8, 4>, 0, 128, 3},
      {"stream_c8_w4_x2", gemv_stream<8, 4>, 0, 128, 2},
      {"stream_c8_w8_x2", gemv_stream<8, 8>, 0, 256, 2},
      {"stream_c4_w4_x6", gemv_stream<4, 4>, 0, 128, 6},
      {"stream_c4_w4_x4", gemv_stream<4, 4>, 0, 128, 4},
      {"stream_c16_w4_x2", gemv_stream<16, 4>, 0, 128, 2},
      {"stream_c16_w4_x3", gemv_stream<16, 4>, 0, 128, 3},
      {"shipped_gemv_row", gemv_row_bf16, 0, 128, 4},
      {"shipped_gemv_row_split4", gemv_row_split_bf16_s4, 0, 128, 4},
  };
  const int reps = 40;
  for (const Shape &s : shapes) {
    const size_t wbytes = (size_t)s.n * s.k * sizeof(T);
    const int copies = std::max<size_t>(2, pool_bytes / wbytes);
    auto time_it = [&](auto launch) { return time_median_us(st, reps, copies, launch); };
    const float alpha = 1.f, beta = 0.f;
    float us = time_it([&](int c) {
      const T *w = pool + (size_t)c * s.n * s.k;
      // y (N x 1) = W (N x K row-major = K x N column-major)^T · x
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.n, 1, s.k, &alpha, w, CUDA_R_16BF, s.k, x, CUDA_R_16BF, s.k,
                   &beta, y, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    printf("{\"variant\": \"cublas\", \"shape\": \"%s\", \"us\": %.2f, \"tb_s\": %.2f}\n", s.name, us, wbytes / us / 1e6);
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.n, 1, s.k, &alpha, pool, CUDA_R_16BF, s.k, x, CUDA_R_16BF, s.k, &beta,
                 yref, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(hr.data(), yref, s.n * sizeof(T), cudaMemcpyDeviceToHost));
    for (const V &v : vars) {
      if ((v.k == (Kern)gemv_persist<16, 4> || v.k == (Kern)gemv_row_bf16) && s.k > 16 * 32 * 8) continue;
      if (v.k == (Kern)gemv_row_split_bf16_s4 && s.k <= 16 * 32 * 8) continue;  // only where gemv_row cannot go
      for (int pdl = 0; pdl < 2; pdl++) {
        us = time_it([&](int c) {
          const T *w = pool + (size_t)c * s.n * s.k;
          cudaLaunchConfig_t cfg = {};
          cfg.gridDim = v.persist_blocks_per_sm ? dim3(sms * v.persist_blocks_per_sm)
                                                : dim3((s.n + v.rows_per_block - 1) / v.rows_per_block);
          cfg.blockDim = dim3(v.threads);
          cfg.stream = st;
          cudaLaunchAttribute attr;
          attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
          attr.val.programmaticStreamSerializationAllowed = 1;
          cfg.attrs = &attr;
          cfg.numAttrs = pdl;
          CK(cudaLaunchKernelEx(&cfg, v.k, (const T *)x, w, y, s.n, s.k));
        });
        // Check: copy 0 against cuBLAS (max |diff| relative to max |ref|).
        {
          cudaLaunchConfig_t cfg = {};
          cfg.gridDim = v.persist_blocks_per_sm ? dim3(sms * v.persist_blocks_per_sm)
                                                : dim3((s.n + v.rows_per_block - 1) / v.rows_per_block);
          cfg.blockDim = dim3(v.threads);
          cfg.stream = st;
          CK(cudaLaunchKernelEx(&cfg, v.k, (const T *)x, (const T *)pool, y, s.n, s.k));
          CK(cudaStreamSynchronize(st));
        }
        CK(cudaMemcpy(hy.data(), y, s.n * sizeof(T), cudaMemcpyDeviceToHost));
        float md = 0.f, mr = 0.f;
        for (int i = 0; i < s.n; i++) {
          md = std::max(md, fabsf(__bfloat162float(hy[i]) - __bfloat162float(hr[i])));
          mr = std::max(mr, fabsf(__bfloat162float(hr[i])));
        }
        printf("{\"variant\": \"%s%s\", \"shape\": \"%s\", \"us\": %.2f, \"tb_s\": %.2f, \"rel_err\": %.4f}\n", v.name,
               pdl ? "_pdl" : "", s.name, us, wbytes / us / 1e6, md / mr);
      }
    }
    fflush(stdout);
  }
  return 0;
}

// Fusion probe: the one-row GEMV that computes its own input row from the residual add + RMSNorm
// (gemv.cu's gemv_row_addnorm_*) against the two kernels it replaces (fused.cu's add_rmsnorm, then the plain
// one-row kernel), and its gated-activation epilogue on gate|up against the kernel after it (silu_mul), on the
// Llama-3.1-8B shapes, bf16. Every launch uses programmatic dependent launch, as in a decode step; each timed
// iteration is one pair (or one fused launch), 40 back to back, weights rotated through 2 GiB so none come from L2,
// median of 5. Build here, run on the device:
//   export PATH=~/.cache/hearth-cuda/home/bin:$PATH   (scripts/setup-cuda installs nvcc)
//   nvcc -O3 -arch=sm_90 -std=c++17 -o .gpu/fusion_probe bench/gpu/fusion_probe.cu -L ~/.cache/hearth-cuda/home/lib
//   .gpu/fusion_probe   (carry .gpu) -> one JSON line per (variant, shape): us per iteration, and the fused
//                        output's largest difference from the separate kernels' relative to its largest value
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#include "probe_common.cuh"
#include "../../crates/hearth-engine/src/gpu/common.cuh"
#include "../../crates/hearth-engine/src/gpu/gemv.cu"
#undef INSTANTIATE
#include "../../crates/hearth-engine/src/gpu/fused.cu"


typedef __nv_bfloat16 B;

__global__ void fill(B *p, size_t n, uint32_t seed, float scale, float offset) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2bfloat16(((h & 0xffff) / 65536.f - 0.5f) * scale + offset);
  }
}

static cudaStream_t st;

// Launch `k` with PDL (programmatic stream serialization) on the probe's stream.
template <typename... Args, typename... P>
static void launch(void (*k)(Args...), int grid, int threads, P... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.stream = st;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, k, (Args)args...));
}

static float rel_diff(const B *got, const B *want, int n) {
  std::vector<B> g(n), w(n);
  CK(cudaMemcpy(g.data(), got, n * sizeof(B), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(w.data(), want, n * sizeof(B), cudaMemcpyDeviceToHost));
  float md = 0.f, mr = 0.f;
  for (int i = 0; i < n; i++) {
    md = std::max(md, fabsf(__bfloat162float(g[i]) - __bfloat162float(w[i])));
    mr = std::max(mr, fabsf(__bfloat162float(w[i])));
  }
  return md / mr;
}

int main() {
  struct Shape {
    const char *name;
    int n, k;
    int epi;  // 1: also the gated epilogue (gate|up)
  };
  const Shape shapes[] = {{"qkv", 6144, 4096, 0}, {"o_proj_as_norm", 4096, 4096, 0}, {"gate_up", 28672, 4096, 1},
                          {"lm_head", 49152, 4096, 0}};
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t pool_bytes = (size_t)2 << 30;
  B *pool, *h, *a, *wn, *x, *hout, *y, *yref, *hout2, *x2;
  CK(cudaMalloc(&pool, pool_bytes));
  fill<<<1024, 256>>>(pool, pool_bytes / sizeof(B), 1, 0.1f, 0.f);
  const int maxk = 1 << 15;
  for (B **p : {&h, &a, &wn, &x, &hout, &hout2}) CK(cudaMalloc(p, maxk * sizeof(B)));
  CK(cudaMalloc(&y, 1 << 20));
  CK(cudaMalloc(&x2, 1 << 20));
  CK(cudaMalloc(&yref, 1 << 20));
  fill<<<64, 256>>>(h, maxk, 2, 2.f, 0.f);
  fill<<<64, 256>>>(a, maxk, 3, 2.f, 0.f);
  fill<<<64, 256>>>(wn, maxk, 4, 0.5f, 1.f);
  CK(cudaStreamCreate(&st));
  CK(cudaDeviceSynchronize());
  const int reps = 40;
  const float eps = 1e-5f;
  for (const Shape &s : shapes) {
    const size_t wbytes = (size_t)s.n * s.k * sizeof(B);
    const int copies = std::max<size_t>(2, pool_bytes / wbytes);
    auto time_it = [&](auto body) { return time_median_us(st, reps, copies, body); };
    auto wof = [&](int c) { return (const B *)(pool + (size_t)c * s.n * s.k); };
    auto report = [&](const char *v, float us, float err) {
      printf("{\"variant\": \"%s\", \"shape\": \"%s\", \"us\": %.2f, \"tb_s\": %.2f, \"rel_err\": %.5f}\n", v, s.name, us,
             wbytes / us / 1e6, err);
    };
    const int nk = s.n, kk = s.k;
    {
      // Separate: add_rmsnorm (1024 threads, 4 values each for K = 4096), then gemv_row.
      auto separate = [&](int c) {
        launch(add_rmsnorm_bf16_v4, 1, 1024, (const B *)h, (const B *)a, hout, x, (const B *)wn, kk, eps);
        launch(gemv_row_bf16, std::min((nk + 3) / 4, sms * 4), 128, (const B *)x, wof(c), yref, nk, kk);
      };
      report("add_rmsnorm+gemv_row", time_it(separate), 0.f);
      separate(0);
      CK(cudaStreamSynchronize(st));
      for (int per_sm : {4, 2, 3}) {
        auto fused_k = [&](int c) {
          launch(gemv_row_addnorm_bf16, std::min((nk + 3) / 4, sms * per_sm), 128, (const B *)h, (const B *)a,
                 (const B *)wn, hout2, eps, wof(c), y, nk, kk);
        };
        const float us = time_it(fused_k);
        fused_k(0);
        CK(cudaStreamSynchronize(st));
        char name[64];
        snprintf(name, sizeof name, "gemv_row_addnorm_x%d", per_sm);
        report(name, us, rel_diff(y, yref, nk));
        if (rel_diff(hout2, hout, kk) != 0.f) printf("{\"error\": \"h + a differs\", \"shape\": \"%s\"}\n", s.name);
      }
      // For scale: the plain kernel alone (the unfused pair's GEMV).
      report("gemv_row_alone", time_it([&](int c) {
               launch(gemv_row_bf16, std::min((nk + 3) / 4, sms * 4), 128, (const B *)x, wof(c), y, nk, kk);
             }), 0.f);
      if (s.epi == 1) {  // gate|up: the gated epilogue against the norm-fused kernel + silu_mul
        const int inter = nk / 2;
        auto sep2 = [&](int c) {
          launch(gemv_row_addnorm_bf16, std::min((nk + 3) / 4, sms * 4), 128, (const B *)h, (const B *)a,
                 (const B *)wn, hout, eps, wof(c), x2, nk, kk);
          launch(silu_mul_bf16, std::min((inter + 255) / 256, 8192), 256, (const B *)x2, yref, inter, (size_t)inter);
        };
        report("gemv_row_addnorm+silu_mul", time_it(sep2), 0.f);
        sep2(0);
        CK(cudaStreamSynchronize(st));
        auto fused_g = [&](int c) {
          launch(gemv_row_addnorm_silu_bf16, std::min((inter + 3) / 4, sms * 4), 128, (const B *)h, (const B *)a,
                 (const B *)wn, hout2, eps, wof(c), y, nk, kk);
        };
        const float us = time_it(fused_g);
        fused_g(0);
        CK(cudaStreamSynchronize(st));
        report("gemv_row_addnorm_silu", us, rel_diff(y, yref, inter));
      }
    }
    fflush(stdout);
  }
  return 0;
}

// Helpers shared by hearth's CUDA kernels (included by src/attention/cuda/paged_attention.cu and src/gpu/fused.cu).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half(v); }

// Values of T in one 16-byte vector, and such a vector as floats (gemv.cu, qgemv.cu).
template <typename T> struct Vec16 { static constexpr int N = 16 / sizeof(T); };

template <typename T>
__device__ __forceinline__ void unpack(const uint4 &v, float *out) {
  const T *p = reinterpret_cast<const T *>(&v);
#pragma unroll
  for (int i = 0; i < Vec16<T>::N; ++i) out[i] = to_f(p[i]);
}

// The gated MLP's activations, one definition for fused.cu's act_mul and gemv.cu's gated epilogue (the same
// values from both).
__device__ __forceinline__ float silu(float g) { return g / (1.f + __expf(-g)); }
__device__ __forceinline__ float gelu_tanh(float g) {
  return 0.5f * g * (1.f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
}

// One rotary pair (x0, x1) at angle (c, s) = (cos, sin), with explicit roundings so that every kernel that rotates
// (fused.cu's qkv_rope, decode_cluster.cu) makes the same bits.
__device__ __forceinline__ float2 rope_pair(float x0, float x1, float c, float s) {
  return make_float2(__fmaf_rn(x0, c, -__fmul_rn(x1, s)), __fmaf_rn(x1, c, __fmul_rn(x0, s)));
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

// Programmatic dependent launch (gpu/launch.rs; compute capability 9.0+, no-ops elsewhere and when the kernel was
// launched without the attribute). pdl_trigger: this kernel's successor may launch now (it waits itself before
// touching what this kernel writes). pdl_wait: every earlier kernel has completed and its writes are visible;
// call it before reading anything a previous kernel wrote and before any global write. Data a previous kernel
// wrote must not be read through the read-only (non-coherent) path — __ldg, or `const T *__restrict__`, which lets
// the compiler emit ld.global.nc: the kernel's lifetime overlaps the writer's, and such reads returned stale values
// on the H200 (the GEMV's input, docs/design/0002-cuda.md). Use plain pointers or __ldcg for those inputs;
// weights and host-uploaded step metadata may stay on the read-only path.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

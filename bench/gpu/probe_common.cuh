// Shared by the kernel probes (gemv_probe.cu, fusion_probe.cu): error checks and the timing loop.
#pragma once
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                 \
  do {                                                                        \
    cudaError_t e = (x);                                                      \
    if (e != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

// Microseconds per call of body(copy): 5 warm-up calls, then the median of 5 timed runs of `reps` calls back to back
// on stream `st`, the weight copy rotating through `copies` (so that no run reads its weights from L2).
template <typename F>
float time_median_us(cudaStream_t st, int reps, int copies, F body) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 5; i++) body(i % copies);
  CK(cudaStreamSynchronize(st));
  std::vector<float> ts;
  for (int rep = 0; rep < 5; rep++) {
    cudaEventRecord(e0, st);
    for (int i = 0; i < reps; i++) body((rep * reps + i) % copies);
    cudaEventRecord(e1, st);
    CK(cudaEventSynchronize(e1));
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    ts.push_back(ms * 1000.f / reps);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

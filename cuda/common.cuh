// cuda/common.cuh — device-side helpers shared by the .cu files (internal).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels.h"

namespace jobflow::cuda::k {

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items (capped; the loop covers the rest).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(b, 1, int64_t{1} << 16));
}

#define JF_GRID_LOOP(i, n)                                                                              \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Calls f(T{}) with the C++ type of `t`.
template <class F>
cudaError_t dispatch_all(DT t, F&& f) {
  switch (t) {
    case DT::F32: f(float{}); break;
    case DT::F64: f(double{}); break;
    case DT::I32: f(int32_t{}); break;
    case DT::I64: f(int64_t{}); break;
    case DT::I8: f(int8_t{}); break;
    case DT::U8: f(uint8_t{}); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
template <class F>
cudaError_t dispatch_float(DT t, F&& f) {
  switch (t) {
    case DT::F32: f(float{}); break;
    case DT::F64: f(double{}); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// Precise math in the operand's precision (no fast-math intrinsics, so the
// results stay within a few ulp of the CPU's libm).
__device__ inline float dexp(float v) { return expf(v); }
__device__ inline double dexp(double v) { return exp(v); }
__device__ inline float dlog(float v) { return logf(v); }
__device__ inline double dlog(double v) { return log(v); }
__device__ inline float dsqrt(float v) { return sqrtf(v); }
__device__ inline double dsqrt(double v) { return sqrt(v); }
__device__ inline float dtanh(float v) { return tanhf(v); }
__device__ inline double dtanh(double v) { return tanh(v); }

template <class T>
__host__ __device__ inline T lowest() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}

// Max that keeps NaN (a NaN seen once wins and stays), like the CPU kernels.
template <class T>
__device__ inline T max_nan(T a, T v) {
  return (v > a || v != v) ? v : a;
}

// Tree reduction over the block through shared memory `sh` (blockDim.x
// elements, a power of two). Deterministic: the same inputs always combine
// in the same order. Every thread gets the result.
template <class A, class Op>
__device__ A block_reduce(A v, A* sh, Op op) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const A r = sh[0];
  __syncthreads();  // sh may be reused right after
  return r;
}

}  // namespace jobflow::cuda::k

// cuda/context.h — per-thread device context and the caching allocator (internal).
//
// A Context is one CUDA stream with its cuBLAS and cuDNN handles and a
// caching allocator for memory used on that stream. Every thread that
// evaluates ops gets its own Context; the runtime runs each compiled job on
// one worker thread, so this is one stream per job. Contexts of finished
// threads go back to a pool and are handed to new threads (stream, handles
// and cached memory included), so creating jobs over and over does not
// create streams over and over.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <map>
#include <string>

#include "jobflow/tensor.h"
#include "jobflow_cuda.h"
#include "kernels.h"

namespace jobflow::cuda {

// Throw jobflow::Error("[cuda] <where>: <what>") on failure.
void check(cudaError_t e, const std::string& where);
void check(cublasStatus_t e, const std::string& where);
void check(cudnnStatus_t e, const std::string& where);

k::DT dt(DType t);

// device_count() (jobflow_cuda.h) counts the devices usable by this build:
// compute capability 9.0 or newer, as the library holds sm_90 code and
// compute_90 PTX; counted once; 0 without a driver or device.

// Stream-ordered caching allocator of one Context. A freed block goes to a
// free list and the next allocation of a similar size on the same stream
// takes it without synchronizing: work queued later on the stream runs after
// every earlier use of the block. Sizes are rounded (512 B below 1 MiB, 2 MiB
// above) so that blocks are reused across slightly different shapes. When
// cudaMalloc fails, the cached blocks are released and the allocation tried
// once more. Not thread-safe: a Context is used by one thread at a time.
class Allocator {
 public:
  explicit Allocator(cudaStream_t s = nullptr) : stream_(s) {}
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;
  void* allocate(size_t bytes, size_t* actual);
  void release(void* p, size_t actual);
  // Synchronizes the stream and returns every cached block to the driver.
  void empty_cache();
  size_t cached_bytes() const { return cached_; }
  size_t in_use_bytes() const { return in_use_; }

 private:
  cudaStream_t stream_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0, in_use_ = 0;
};

// A device buffer from an Allocator, returned to it on destruction.
class DevBuf {
 public:
  DevBuf() = default;
  DevBuf(Allocator& a, size_t bytes) : a_(&a) { p_ = a.allocate(bytes, &n_); }
  DevBuf(DevBuf&& o) noexcept : a_(o.a_), p_(o.p_), n_(o.n_) { o.p_ = nullptr; }
  DevBuf& operator=(DevBuf&& o) noexcept {
    if (this != &o) {
      reset();
      a_ = o.a_, p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr;
    }
    return *this;
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() { reset(); }
  void* get() const { return p_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }

 private:
  void reset() {
    if (p_) a_->release(p_, n_);
    p_ = nullptr;
  }
  Allocator* a_ = nullptr;
  void* p_ = nullptr;
  size_t n_ = 0;
};

class Context {
 public:
  explicit Context(int device);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  Allocator& alloc() { return alloc_; }
  // Created on first use (cuDNN's handle costs device memory and time) and
  // bound to this context's stream.
  cublasHandle_t blas();
  cudnnHandle_t dnn();

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  Allocator alloc_;
  cublasHandle_t blas_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
};

// This thread's context (taken from the pool or created on first use).
Context& context();

// TF32 tensor-core math for float32 GEMM and convolutions: off unless
// JOBFLOW_CUDA_TF32=1 (results then differ from the CPU by ~1e-3 relative).
bool tf32_enabled();

}  // namespace jobflow::cuda

#include "context.h"

#include <cstdlib>
#include <mutex>
#include <vector>

namespace jobflow::cuda {

void check(cudaError_t e, const std::string& where) {
  if (e == cudaSuccess) return;
  throw Error("[cuda] " + where + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

void check(cublasStatus_t e, const std::string& where) {
  if (e == CUBLAS_STATUS_SUCCESS) return;
  throw Error("[cuda] " + where + ": cuBLAS " + cublasGetStatusName(e) + " (" + cublasGetStatusString(e) + ")");
}

void check(cudnnStatus_t e, const std::string& where) {
  if (e == CUDNN_STATUS_SUCCESS) return;
  throw Error("[cuda] " + where + ": cuDNN " + cudnnGetErrorString(e));
}

k::DT dt(DType t) {
  switch (t) {
    case DType::Float32: return k::DT::F32;
    case DType::Float64: return k::DT::F64;
    case DType::Int32: return k::DT::I32;
    case DType::Int64: return k::DT::I64;
    case DType::Int8: return k::DT::I8;
    case DType::UInt8: return k::DT::U8;
    case DType::Bool: return k::DT::U8;  // one byte, 0 or 1
    default: break;
  }
  throw Error(std::string("[cuda] dtype ") + dtype_name(t) + " is not supported by the CUDA backend");
}

int device_count() {
  static const int n = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // no driver / no device: not an error for us
      return 0;
    }
    // Only device 0 is used for now; it needs the code this library holds.
    int major = 0;
    if (count > 0 && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess &&
        major >= 9)
      return count;
    cudaGetLastError();
    return 0;
  }();
  return n;
}

bool tf32_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("JOBFLOW_CUDA_TF32");
    return e && *e && std::string(e) != "0";
  }();
  return on;
}

// ---------------------------------------------------------------------------
// Allocator

namespace {
size_t round_size(size_t n) {
  constexpr size_t kSmall = 512, kLarge = size_t{2} << 20, kSplit = size_t{1} << 20;
  return n < kSplit ? (n + kSmall - 1) / kSmall * kSmall : (n + kLarge - 1) / kLarge * kLarge;
}
}  // namespace

void* Allocator::allocate(size_t bytes, size_t* actual) {
  *actual = 0;
  if (bytes == 0) return nullptr;
  const size_t want = round_size(bytes);
  // Smallest cached block that fits, if it wastes at most half of itself.
  auto it = free_.lower_bound(want);
  if (it != free_.end() && it->first <= 2 * want) {
    void* p = it->second;
    *actual = it->first;
    cached_ -= it->first;
    in_use_ += it->first;
    free_.erase(it);
    return p;
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, want);
  if (e == cudaErrorMemoryAllocation && !free_.empty()) {
    cudaGetLastError();
    empty_cache();
    e = cudaMalloc(&p, want);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("[cuda] out of device memory allocating " + std::to_string(bytes) + " bytes (" +
                std::to_string(in_use_) + " bytes in use on this stream): " + cudaGetErrorString(e));
  }
  *actual = want;
  in_use_ += want;
  return p;
}

void Allocator::release(void* p, size_t actual) {
  if (!p) return;
  free_.emplace(actual, p);
  in_use_ -= actual;
  cached_ += actual;
}

void Allocator::empty_cache() {
  if (free_.empty()) return;
  cudaStreamSynchronize(stream_);
  for (auto& [n, p] : free_) cudaFree(p);
  free_.clear();
  cached_ = 0;
}

// ---------------------------------------------------------------------------
// Context

namespace {
cudaStream_t new_stream(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}
}  // namespace

Context::Context(int device) : device_(device), stream_(new_stream(device)), alloc_(stream_) {}

cublasHandle_t Context::blas() {
  if (!blas_) {
    check(cublasCreate(&blas_), "cublasCreate");
    check(cublasSetStream(blas_, stream_), "cublasSetStream");
    if (tf32_enabled()) check(cublasSetMathMode(blas_, CUBLAS_TF32_TENSOR_OP_MATH), "cublasSetMathMode");
  }
  return blas_;
}

cudnnHandle_t Context::dnn() {
  if (!dnn_) {
    check(cudnnCreate(&dnn_), "cudnnCreate");
    check(cudnnSetStream(dnn_, stream_), "cudnnSetStream");
  }
  return dnn_;
}

namespace {

// Contexts of exited threads, ready for new ones. Never destroyed: nothing
// here may call into CUDA while the process exits (the runtime may already
// be gone), and the driver frees everything at exit anyway.
struct Pool {
  std::mutex mu;
  std::vector<Context*> idle;
};
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

struct ThreadSlot {
  Context* c = nullptr;
  ~ThreadSlot() {
    if (!c) return;
    std::lock_guard<std::mutex> lock(pool().mu);
    pool().idle.push_back(c);
  }
};
thread_local ThreadSlot slot;

}  // namespace

Context& context() {
  if (slot.c) return *slot.c;
  Context* c = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool().mu);
    if (!pool().idle.empty()) {
      c = pool().idle.back();
      pool().idle.pop_back();
    }
  }
  if (c) check(cudaSetDevice(c->device()), "cudaSetDevice");
  else c = new Context(0);
  slot.c = c;
  return *c;
}

}  // namespace jobflow::cuda

// cuda/jobflow_cuda.h — entry points of libjobflow_cuda.so.
//
// The engine never includes this: its backend registry (engine/src/backend.cpp)
// loads the library at run time and looks up `jobflow_cuda_backend`. Tests
// and tools that link the library directly may use the rest.
#pragma once

#include <cstdint>

#include "jobflow/backend.h"

#define JOBFLOW_CUDA_API __attribute__((visibility("default")))

// The CUDA backend (never null; check available() before evaluating).
extern "C" JOBFLOW_CUDA_API const jobflow::Backend* jobflow_cuda_backend();

namespace jobflow::cuda {

// Usable devices (compute capability >= 9.0); 0 without a driver or device.
JOBFLOW_CUDA_API int device_count();

// Counters of the backend's eval() calls, for tests and profiling.
struct Stats {
  int64_t device_evals = 0;  // ops run on the device
  int64_t host_evals = 0;    // ops eval() handed to eval_cpu (unsupported dtype, size, attributes)
  int64_t h2d_bytes = 0, d2h_bytes = 0;
};
JOBFLOW_CUDA_API Stats stats();
JOBFLOW_CUDA_API void reset_stats();

// Returns the calling thread's cached device memory to the driver.
JOBFLOW_CUDA_API void empty_cache();

}  // namespace jobflow::cuda

// cpu/dnnl_common.h — the process's oneDNN engine and the calling thread's
// stream, shared by every oneDNN kernel (dnnl_kernels.cpp, layout_ops.cpp).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <vector>

namespace jobflow::cpu {

dnnl::engine& dnnl_engine();
// The calling thread's stream (each job's worker has its own).
dnnl::stream& dnnl_stream();
// Executes through the C API with a prebuilt argument array: the C++
// primitive::execute copies its std::unordered_map into a fresh std::vector
// on every call, the per-call allocation the kernels avoid.
void dnnl_execute(const dnnl::primitive& prim, const std::vector<dnnl_exec_arg_t>& args);

}  // namespace jobflow::cpu

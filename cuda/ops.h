// cuda/ops.h — the CUDA backend's op table (internal).
//
// The engine's primitives live in the engine library (engine/src/ops/*.cpp)
// behind the Primitive interface; this backend cannot add eval_gpu() to them
// from the outside, so it recognizes each op by name() and reads its
// parameters from attributes() (the same complete attribute list the ONNX
// exporter uses). Each entry runs one op on device copies of its inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "context.h"
#include "jobflow/primitive.h"

namespace jobflow::cuda {

// One evaluation: the host tensors (shapes, dtypes; the values have already
// been copied) and their device copies. Outputs are copied back to the host
// after run() returns, as are the inputs an op declares as written.
struct Launch {
  Context& c;
  const Primitive& p;
  const std::vector<Tensor>& in;
  const std::vector<Tensor>& out;
  ExecContext& ctx;
  std::vector<DevBuf> din, dout;

  cudaStream_t stream() const { return c.stream(); }
  void* i(size_t k) const { return din[k].get(); }
  void* o(size_t k) const { return dout[k].get(); }
  template <class T> T* i(size_t k) const { return static_cast<T*>(din[k].get()); }
  template <class T> T* o(size_t k) const { return static_cast<T*>(dout[k].get()); }
  // A scratch buffer on this launch's stream.
  DevBuf scratch(size_t bytes) { return DevBuf(c.alloc(), bytes); }
  // Throws "[cuda] <op>: ..." naming this op.
  void check(cudaError_t e) const;
  void check(cublasStatus_t e) const;
  void check(cudnnStatus_t e) const;
};

struct OpDef {
  // Attribute-only test; false: the compiler runs the op on the CPU.
  std::function<bool(const Primitive&)> supports;
  // Test on the actual inputs (dtypes, sizes); false: eval() runs eval_cpu().
  std::function<bool(const Primitive&, const std::vector<Tensor>&)> accepts;
  std::function<void(Launch&)> run;
  uint32_t skip_inputs = 0;     // bit i: input i is not read (not copied to the device)
  uint32_t written_inputs = 0;  // bit i: the op updates input i in place (copied back)
};
using OpTable = std::map<std::string, OpDef>;

void add_elementwise_ops(OpTable& t);  // ops_elementwise.cpp
void add_blas_ops(OpTable& t);         // ops_blas.cpp
void add_dnn_ops(OpTable& t);          // ops_dnn.cpp

// ---- attribute access (attributes() of the engine's primitives) ----
const AttrValue* find_attr(const Attrs& a, const char* name);
int64_t attr_int(const Primitive& p, const char* name, int64_t def = 0);
double attr_double(const Primitive& p, const char* name, double def = 0.0);
std::vector<int64_t> attr_ints(const Primitive& p, const char* name);

// ---- layouts ----
inline int norm_axis(int64_t axis, int rank) { return static_cast<int>(axis < 0 ? axis + rank : axis); }
// (outer, C, inner) around axis `ax` of `s`.
struct Lanes {
  int64_t outer = 1, C = 1, inner = 1;
};
Lanes lanes_of(const Shape& s, int ax);
// Collapsed views (see kernels.h).
k::BView broadcast_view(const Shape& out, const Shape& a, const Shape& b);
k::RView reduce_view(const Shape& x, const std::vector<bool>& reduced);
bool is_float(DType t);

}  // namespace jobflow::cuda

// cuda/ops.h — the CUDA backend's op table (internal).
//
// The engine's primitives live in the engine library (engine/src/ops/*.cpp)
// behind the Primitive interface and know nothing of this backend: it keeps
// one entry per op kind (Primitive::kind(), an OpKind) and reads the op's
// parameters with its attribute getters (attr_int(), ... over the same
// complete attribute list the ONNX exporter uses). Each entry runs one op on
// device copies of its inputs.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "context.h"
#include "jobflow/primitive.h"
#include "layout.h"

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
  bool defined() const { return static_cast<bool>(run); }
};
// One entry per OpKind; an entry without `run` means the op runs on the CPU.
class OpTable {
 public:
  OpDef& operator[](OpKind k) { return defs_[static_cast<size_t>(k)]; }
  const OpDef* find(OpKind k) const {
    const OpDef& d = defs_[static_cast<size_t>(k)];
    return d.defined() ? &d : nullptr;
  }

 private:
  std::array<OpDef, kOpKindCount> defs_;
};

void add_elementwise_ops(OpTable& t);  // ops_elementwise.cpp
void add_blas_ops(OpTable& t);         // ops_blas.cpp
void add_dnn_ops(OpTable& t);          // ops_dnn.cpp

// ---- layouts (the engine's, engine/src/layout.h) ----
// The op's axis in [0, rank); Error("[op] axis ...") when out of range.
inline int norm_axis(const Primitive& p, int64_t axis, int rank) { return layout::norm_axis(p.name(), axis, rank); }
using layout::Lanes;  // (outer, C, inner) around an axis
using layout::lanes_of;
// Collapsed views (see kernels.h).
k::BView broadcast_view(const Shape& out, const Shape& a, const Shape& b);
k::RView reduce_view(const Shape& x, const std::vector<bool>& reduced);
bool is_float(DType t);

}  // namespace jobflow::cuda

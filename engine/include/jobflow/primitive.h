// jobflow/primitive.h — what an op is.
//
// Every op is a Primitive (MLX's design): one non-copyable class holding the
// op's attributes, with
//   infer()    shapes/dtypes of the outputs from those of the inputs; throws
//              Error("[opname] ...") naming the shapes when they do not fit;
//   eval_cpu() the CPU kernel (writes into preallocated outputs);
//   eval_gpu() the CUDA kernel (cuda/; a CPU-only build throws);
//   vjp()      the gradient, written with other ops so it runs on every
//              backend.
// An op's builder function (ops.h) validates arguments and adds a node
// holding its primitive to the current graph.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "jobflow/graph.h"

namespace jobflow {

// A primitive's attributes by name (for export to ONNX and inspection).
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>, Tensor>;
using Attrs = std::vector<std::pair<std::string, AttrValue>>;

// Per-step state handed to kernels.
struct ExecContext {
  int64_t step = 0;        // train step counter of the job (0-based)
  double lr = 0.0;         // learning rate of this step (train jobs)
  uint64_t seed = 0;       // job seed (dropout, etc.)
  bool training = false;   // train job
};

class Primitive {
 public:
  Primitive() = default;
  Primitive(const Primitive&) = delete;
  Primitive& operator=(const Primitive&) = delete;
  virtual ~Primitive() = default;

  virtual const char* name() const = 0;
  virtual std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const = 0;
  virtual void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const = 0;
  virtual void eval_gpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const;
  // Gradients w.r.t. inputs[argnums[k]], given cotangents of every output
  // (undefined Blob = zero cotangent). Returns one Blob per argnum;
  // undefined = no gradient flows.
  virtual std::vector<Blob> vjp(const std::vector<Blob>& inputs, const std::vector<Blob>& outputs,
                                const std::vector<Blob>& cotangents, const std::vector<int>& argnums) const;
  // Ops that change state (optimizer updates, moving averages) are kept even
  // when no output is used.
  virtual bool has_side_effects() const { return false; }
  // Output `i` is a view of input `aliases_input(i)` (same bytes, e.g.
  // reshape): the memory plan gives it no buffer of its own. -1 = none.
  virtual int aliases_input(int /*out*/) const { return -1; }
  // Inputs that are not differentiable (labels, indices, masks).
  virtual bool differentiable_input(int /*i*/) const { return true; }
  // Fusion hooks for the compiler: a new primitive computing this op plus a
  // bias (appended as an extra last input, broadcast along axis 1), or plus
  // a relu of its first output. nullptr when not supported.
  virtual std::shared_ptr<Primitive> with_bias() const { return nullptr; }
  virtual std::shared_ptr<Primitive> with_relu() const { return nullptr; }
  // For weight-gradient ops reading a dy: a variant that also outputs the
  // bias gradient (dy summed over every axis but 1) as an extra last
  // output, replacing a separate bias_grad pass over the same dy.
  virtual std::shared_ptr<Primitive> with_bias_grad() const { return nullptr; }
  // Every parameter that defines the op (axis, strides, pads, flags,
  // constant values...), so an exporter can write it and a loader can
  // rebuild an identical op through its builder function.
  virtual Attrs attributes() const { return {}; }
  // Human-readable attributes for `jobflow inspect` and error messages.
  virtual std::string attrs() const { return ""; }
};

// "[opname] " prefix helper for errors thrown by infer().
[[noreturn]] void op_error(const char* op, const std::string& what);
// Checks used by infer() implementations.
void expect_inputs(const char* op, const std::vector<TensorSpec>& in, size_t n);
void expect_float(const char* op, const TensorSpec& s, const char* arg);
void expect_same_dtype(const char* op, const TensorSpec& a, const TensorSpec& b);

}  // namespace jobflow

// Primitives whose buffers the compiler binds instead of allocating:
// placeholders (the call's inputs) and variables (the session's tensors).
#pragma once

#include <memory>

#include "jobflow/primitive.h"
#include "session_internal.h"

namespace jobflow::internal {

class PlaceholderOp final : public Primitive {
 public:
  PlaceholderOp(int index, TensorSpec spec, std::string arg) : index_(index), spec_(std::move(spec)), arg_(std::move(arg)) {}
  OpKind kind() const override { return OpKind::Placeholder; }
  Attrs attributes() const override {
    return {{"index", int64_t{index_}}, {"name", arg_}, {"shape", spec_.shape}, {"dtype", std::string(dtype_name(spec_.dtype))}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>&) const override { return {spec_}; }
  void eval_cpu(const std::vector<Tensor>&, const std::vector<Tensor>&, ExecContext&) const override {}
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>&) const override { return {}; }
  int index() const { return index_; }

 private:
  int index_;
  TensorSpec spec_;
  std::string arg_;
};

// A job's use of a session variable. Whether the job trains it is a
// property of this use, not of the variable (OneFlow's variable op carries
// `trainable` per job): a predict job may define a variable as frozen and a
// train job loaded later still trains it.
class VariableOp final : public Primitive {
 public:
  VariableOp(std::shared_ptr<VariableEntry> e, bool trainable) : entry_(std::move(e)), trainable_(trainable) {}
  OpKind kind() const override { return OpKind::Variable; }
  Attrs attributes() const override {
    return {{"name", entry_->name},
            {"shape", entry_->spec.shape},
            {"dtype", std::string(dtype_name(entry_->spec.dtype))},
            {"trainable", int64_t{trainable_}}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>&) const override { return {entry_->spec}; }
  void eval_cpu(const std::vector<Tensor>&, const std::vector<Tensor>&, ExecContext&) const override {}
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>&) const override { return {}; }
  const std::shared_ptr<VariableEntry>& entry() const { return entry_; }
  // Whether the job this node belongs to may train the variable.
  bool trainable() const { return trainable_; }

 private:
  std::shared_ptr<VariableEntry> entry_;
  bool trainable_;
};

}  // namespace jobflow::internal

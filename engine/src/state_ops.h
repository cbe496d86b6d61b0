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

class VariableOp final : public Primitive {
 public:
  explicit VariableOp(std::shared_ptr<VariableEntry> e) : entry_(std::move(e)) {}
  OpKind kind() const override { return OpKind::Variable; }
  Attrs attributes() const override {
    return {{"name", entry_->name},
            {"shape", entry_->spec.shape},
            {"dtype", std::string(dtype_name(entry_->spec.dtype))},
            {"trainable", int64_t{entry_->trainable}}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>&) const override { return {entry_->spec}; }
  void eval_cpu(const std::vector<Tensor>&, const std::vector<Tensor>&, ExecContext&) const override {}
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>&) const override { return {}; }
  const std::shared_ptr<VariableEntry>& entry() const { return entry_; }

 private:
  std::shared_ptr<VariableEntry> entry_;
};

}  // namespace jobflow::internal

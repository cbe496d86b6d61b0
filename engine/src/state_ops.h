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
  const char* name() const override { return "placeholder"; }
  std::string attrs() const override { return arg_ + " " + spec_str(spec_); }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>&) const override { return {spec_}; }
  void eval_cpu(const std::vector<Tensor>&, const std::vector<Tensor>&, ExecContext&) const override {}
  void eval_gpu(const std::vector<Tensor>&, const std::vector<Tensor>&, ExecContext&) const override {}
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
  const char* name() const override { return "variable"; }
  std::string attrs() const override {
    return entry_->name + " " + spec_str(entry_->spec) + (entry_->trainable ? "" : " (not trainable)");
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>&) const override { return {entry_->spec}; }
  void eval_cpu(const std::vector<Tensor>&, const std::vector<Tensor>&, ExecContext&) const override {}
  void eval_gpu(const std::vector<Tensor>&, const std::vector<Tensor>&, ExecContext&) const override {}
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>&) const override { return {}; }
  const std::shared_ptr<VariableEntry>& entry() const { return entry_; }

 private:
  std::shared_ptr<VariableEntry> entry_;
};

}  // namespace jobflow::internal

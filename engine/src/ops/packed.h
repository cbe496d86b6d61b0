// Packed values (internal): sequences (jobflow/sequence.h, ops/sequence.cpp)
// and string tensors (jobflow/strings.h, ops/strings.cpp), each one uint8
// tensor of rank 1 led by little-endian int64 words.
//
// PackedWords reads those words with the checks both share. SizedByData is
// the base of the host ops whose outputs their data sizes (a packed output's
// byte length is known only from the values): make() computes the outputs; the compiler cuts the call at such an op and
// calls eval_sized(), which returns them; eval_cpu() (outputs already sized,
// e.g. when the compiler folds the op) copies them in; infer_data() reports
// their specs. They move bytes (stores_only) and have no gradient.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "jobflow/graph.h"
#include "jobflow/primitive.h"

namespace jobflow {

// The words of a packed value `p` of kind `noun` ("sequence", "string
// tensor"), magic word checked; errors read "<what>: not a packed <noun>
// (<why>)".
class PackedWords {
 public:
  PackedWords(const Tensor& p, const std::string& what, const char* noun, int64_t magic) : what_(what), noun_(noun) {
    if (!p.defined()) throw bad("an undefined tensor");
    if (p.dtype() != DType::UInt8 || p.ndim() != 1)
      throw bad(std::string("a ") + noun + " is a uint8 tensor of rank 1, got " + spec_str({p.shape(), p.dtype()}));
    size_ = p.numel();
    base_ = static_cast<const char*>(p.raw());
    if (word(0) != magic) throw bad("no magic word");
  }
  Error bad(const std::string& why) const { return Error(what_ + ": not a packed " + noun_ + " (" + why + ")"); }
  int64_t word(int64_t i) const {
    if (i < 0 || (i + 1) * 8 > size_) throw bad("it ends inside its header");
    int64_t v;
    std::memcpy(&v, base_ + i * 8, 8);
    return v;
  }
  int64_t size() const { return size_; }     // bytes
  const char* bytes() const { return base_; }

 private:
  std::string what_;
  const char* noun_;
  int64_t size_ = 0;
  const char* base_ = nullptr;
};

class SizedByData : public Primitive {
 public:
  bool differentiable_input(int) const override { return false; }
  bool output_shape_from_data() const override { return true; }
  bool sizes_outputs() const override { return true; }
  bool stores_only() const override { return true; }
  virtual std::vector<Tensor> make(const std::vector<Tensor>& in) const = 0;
  std::vector<Tensor> eval_sized(const std::vector<Tensor>& in, ExecContext&) const override { return make(in); }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    std::vector<TensorSpec> r;
    for (const Tensor& t : make(v)) r.push_back({t.shape(), t.dtype()});
    return r;
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const std::vector<Tensor> r = make(in);
    for (size_t k = 0; k < out.size(); ++k) {
      if (r[k].shape() != out[k].shape())
        op_error(name(), "output " + std::to_string(k) + " is " + shape_str(r[k].shape()) + ", " +
                             shape_str(out[k].shape()) + " was expected");
      if (r[k].nbytes() > 0) std::memcpy(out[k].raw(), r[k].raw(), r[k].nbytes());
    }
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }
};

}  // namespace jobflow

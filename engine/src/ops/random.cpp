// Random draws (ONNX RandomUniform, RandomNormal and their *Like forms;
// Bernoulli and Dropout with a training_mode given at run time are built
// from them by the importer).
//
// A counter-based generator as dropout's (ops/nn.cpp): element i of a call
// hashes (job seed, the op's salt, the call's step, i), so a job's draws are
// reproducible for a given seed, differ from call to call and from node to
// node, and are free to compute in parallel. Uniform: 53 random bits scaled
// into [low, high); normal: Box-Muller on two uniforms. No gradients; the
// compiler never folds a draw into a constant (draws_random).
#include <cmath>
#include <cstring>

#include "jobflow/ops.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

using kern::kGolden;
using kern::mix64;
// A double in [0, 1) from 53 bits of r.
inline double unit(uint64_t r) { return static_cast<double>(r >> 11) * 0x1.0p-53; }

class RandomDraw final : public Primitive {
 public:
  RandomDraw(bool normal, double a, double b, DType dt, Shape shape, double seed, uint64_t salt)
      : normal_(normal), a_(a), b_(b), dt_(dt), shape_(std::move(shape)), seed_(seed), salt_(salt) {}
  OpKind kind() const override { return normal_ ? OpKind::RandomNormal : OpKind::RandomUniform; }
  Attrs attributes() const override {
    Attrs r;
    if (normal_) r = {{"mean", a_}, {"scale", b_}};
    else r = {{"low", a_}, {"high", b_}};
    r.emplace_back("dtype", std::string(dtype_name(dt_)));
    r.emplace_back("shape", std::vector<int64_t>(shape_.begin(), shape_.end()));
    r.emplace_back("seed", seed_);
    return r;
  }
  bool differentiable_input(int) const override { return false; }
  bool draws_random() const override { return true; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    const char* op = normal_ ? "random_normal" : "random_uniform";
    if (in.size() > 1) op_error(op, "takes at most one input (a tensor whose shape the draws take)");
    if (!is_floating(dt_)) op_error(op, std::string("draws floats, not ") + dtype_name(dt_));
    return {{in.empty() ? shape_ : in[0].shape, dt_}};
  }
  void eval_cpu(const std::vector<Tensor>&, const std::vector<Tensor>& out, ExecContext& ctx) const override {
    const uint64_t key = mix64(mix64(mix64(ctx.seed + kGolden) ^ salt_) + static_cast<uint64_t>(ctx.step) * kGolden);
    const int64_t n = out[0].numel();
    const double a = a_, b = b_;
    const bool normal = normal_;
    kern::dispatch_float(dt_, normal_ ? "random_normal" : "random_uniform", [&](auto z) {
      using T = decltype(z);
      T* y = out[0].data<T>();
#pragma omp parallel for if (n > kern::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t r = mix64(key + static_cast<uint64_t>(2 * i + 1) * kGolden);
        if (!normal) {
          T v = static_cast<T>(a + (b - a) * unit(r));
          y[i] = v < static_cast<T>(b) || !(b > a) ? v : static_cast<T>(a);  // [low, high) after rounding to T
        } else {
          const uint64_t r2 = mix64(key + static_cast<uint64_t>(2 * i + 2) * kGolden);
          const double u1 = 1.0 - unit(r);  // (0, 1]: the log stays finite
          y[i] = static_cast<T>(a + b * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * unit(r2)));
        }
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

 private:
  bool normal_;
  double a_, b_;
  DType dt_;
  Shape shape_;
  double seed_;
  uint64_t salt_;
};

// A node's stream: from its seed when one is given (nodes sharing a seed
// draw alike, as ONNX Runtime's), else from its name (unique in the job).
uint64_t salt_of(const std::string& name, double seed) {
  if (seed != 0) {
    uint64_t bits;
    std::memcpy(&bits, &seed, sizeof bits);
    return mix64(bits + kGolden);
  }
  uint64_t h = 0xCBF29CE484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ULL;
  return mix64(h);
}

Blob draw(bool normal, Blob like, const Shape& shape, double a, double b, DType dt, double seed,
          const std::string& name) {
  const char* op = normal ? "random_normal" : "random_uniform";
  Graph* g = current_graph();
  const std::string n = name.empty() && g ? g->unique_name(op) : name;
  std::vector<Blob> in;
  if (like.defined()) in.push_back(like);
  else kern::check_rank(op, shape);
  for (int64_t d : shape)
    if (d < 0) op_error(op, "shape " + shape_str(shape) + " must be known (use the _like form for a shape known per call)");
  return internal::add_node(
      std::make_shared<RandomDraw>(normal, a, b, dt, like.defined() ? Shape{} : shape, seed, salt_of(n, seed)), in, n)[0];
}

}  // namespace

namespace random {

Blob uniform(const Shape& shape, double low, double high, DType dtype, double seed, const std::string& name) {
  return draw(false, Blob(), shape, low, high, dtype, seed, name);
}
Blob uniform_like(Blob like, double low, double high, DType dtype, double seed, const std::string& name) {
  return draw(false, like, {}, low, high, dtype, seed, name);
}
Blob normal(const Shape& shape, double mean, double scale, DType dtype, double seed, const std::string& name) {
  return draw(true, Blob(), shape, mean, scale, dtype, seed, name);
}
Blob normal_like(Blob like, double mean, double scale, DType dtype, double seed, const std::string& name) {
  return draw(true, like, {}, mean, scale, dtype, seed, name);
}

}  // namespace random
}  // namespace jobflow

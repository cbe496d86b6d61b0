// Learning-rate schedules, SGD and Adam. Updates are primitives that write
// the variable (and its state) in place; the compiler runs them after every
// other op of the step, so no op reads a half-updated variable.
#include "jobflow/optimizer.h"

#include <cmath>
#include <numbers>
#include <sstream>

#include "jobflow/job.h"
#include "jobflow/ops.h"
#include "jobflow/primitive.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow::optimizer {
namespace {

class Piecewise final : public LrScheduler {
 public:
  Piecewise(std::vector<int64_t> b, std::vector<double> v) : b_(std::move(b)), v_(std::move(v)) {
    if (v_.size() != b_.size() + 1)
      throw Error("[PiecewiseConstantScheduler] needs len(values) == len(boundaries) + 1, got " +
                  std::to_string(v_.size()) + " values and " + std::to_string(b_.size()) + " boundaries");
    for (size_t i = 1; i < b_.size(); ++i)
      if (b_[i] <= b_[i - 1]) throw Error("[PiecewiseConstantScheduler] boundaries must increase");
  }
  double lr(int64_t step) const override {
    size_t i = 0;
    while (i < b_.size() && step >= b_[i]) ++i;
    return v_[i];
  }
  std::string str() const override {
    std::ostringstream o;
    o << "piecewise_constant(boundaries=[";
    for (size_t i = 0; i < b_.size(); ++i) o << (i ? "," : "") << b_[i];
    o << "], values=[";
    for (size_t i = 0; i < v_.size(); ++i) o << (i ? "," : "") << v_[i];
    o << "])";
    return o.str();
  }
  std::string kind() const override { return "piecewise_constant"; }
  std::vector<std::pair<std::string, std::vector<double>>> params() const override {
    return {{"boundaries", std::vector<double>(b_.begin(), b_.end())}, {"values", v_}};
  }

 private:
  std::vector<int64_t> b_;
  std::vector<double> v_;
};

class Cosine final : public LrScheduler {
 public:
  Cosine(double base, int64_t steps, double alpha) : base_(base), steps_(steps), alpha_(alpha) {
    if (steps <= 0) throw Error("[CosineScheduler] decay_steps must be > 0");
  }
  double lr(int64_t step) const override {
    const double t = std::min<double>(static_cast<double>(step), static_cast<double>(steps_)) / steps_;
    return base_ * (alpha_ + (1 - alpha_) * 0.5 * (1 + std::cos(std::numbers::pi * t)));
  }
  std::string str() const override {
    return "cosine(base_lr=" + std::to_string(base_) + ", decay_steps=" + std::to_string(steps_) +
           ", alpha=" + std::to_string(alpha_) + ")";
  }
  std::string kind() const override { return "cosine"; }
  std::vector<std::pair<std::string, std::vector<double>>> params() const override {
    return {{"base_lr", {base_}}, {"decay_steps", {static_cast<double>(steps_)}}, {"alpha", {alpha_}}};
  }

 private:
  double base_;
  int64_t steps_;
  double alpha_;
};

class Warmup final : public LrScheduler {
 public:
  Warmup(Scheduler after, int64_t steps, double start) : after_(std::move(after)), steps_(steps), start_(start) {
    if (!after_.impl()) throw Error("[LinearWarmupScheduler] needs a schedule to warm up to");
  }
  double lr(int64_t step) const override {
    const double target = after_.lr(step);
    if (step >= steps_ || steps_ <= 0) return target;
    const double f = start_ + (1 - start_) * static_cast<double>(step) / steps_;
    return target * f;
  }
  std::string str() const override {
    return "linear_warmup(steps=" + std::to_string(steps_) + ", then " + after_.str() + ")";
  }
  std::string kind() const override { return "linear_warmup"; }
  std::vector<std::pair<std::string, std::vector<double>>> params() const override {
    return {{"steps", {static_cast<double>(steps_)}}, {"start", {start_}}};
  }
  std::shared_ptr<const LrScheduler> inner() const override { return after_.impl(); }

 private:
  Scheduler after_;
  int64_t steps_;
  double start_;
};

// w -= lr * g, or with momentum: v = m * v - lr * g; w += v.
class SgdUpdate final : public Primitive {
 public:
  explicit SgdUpdate(double momentum) : momentum_(momentum) {}
  OpKind kind() const override { return OpKind::SgdUpdate; }
  Attrs attributes() const override { return {{"momentum", momentum_}}; }
  bool has_side_effects() const override { return true; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("sgd_update", in, momentum_ != 0 ? 3 : 2);
    for (auto& s : in)
      if (!specs_agree(s, in[0])) op_error("sgd_update", "variable, gradient and state differ: " + spec_str(in[0]) + " vs " + spec_str(s));
    return {};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>&, ExecContext& ctx) const override {
    kern::dispatch_float(in[0].dtype(), "sgd_update", [&](auto z) {
      using T = decltype(z);
      T* w = in[0].data<T>();
      const T* g = in[1].data<T>();
      const int64_t n = in[0].numel();
      const T lr = static_cast<T>(ctx.lr);
      if (momentum_ == 0) {
#pragma omp parallel for if (n > kern::kParallelGrain)
        for (int64_t i = 0; i < n; ++i) w[i] -= lr * g[i];
      } else {
        T* v = in[2].data<T>();
        const T m = static_cast<T>(momentum_);
#pragma omp parallel for if (n > kern::kParallelGrain)
        for (int64_t i = 0; i < n; ++i) {
          v[i] = m * v[i] - lr * g[i];
          w[i] += v[i];
        }
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& a) const override {
    return std::vector<Blob>(a.size());
  }

 private:
  double momentum_;
};

class AdamUpdate final : public Primitive {
 public:
  AdamUpdate(double b1, double b2, double eps) : b1_(b1), b2_(b2), eps_(eps) {}
  OpKind kind() const override { return OpKind::AdamUpdate; }
  Attrs attributes() const override { return {{"beta1", b1_}, {"beta2", b2_}, {"epsilon", eps_}}; }
  bool has_side_effects() const override { return true; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("adam_update", in, 4);
    for (auto& s : in)
      if (!specs_agree(s, in[0])) op_error("adam_update", "variable, gradient and state differ: " + spec_str(in[0]) + " vs " + spec_str(s));
    return {};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>&, ExecContext& ctx) const override {
    kern::dispatch_float(in[0].dtype(), "adam_update", [&](auto z) {
      using T = decltype(z);
      T* w = in[0].data<T>();
      const T* g = in[1].data<T>();
      T* m = in[2].data<T>();
      T* v = in[3].data<T>();
      const int64_t n = in[0].numel();
      const double t = static_cast<double>(ctx.step + 1);
      // Bias corrections folded into the step size.
      const T step = static_cast<T>(ctx.lr * std::sqrt(1 - std::pow(b2_, t)) / (1 - std::pow(b1_, t)));
      const T b1 = static_cast<T>(b1_), b2 = static_cast<T>(b2_);
      const T eps = static_cast<T>(eps_ * std::sqrt(1 - std::pow(b2_, t)));
#pragma omp parallel for if (n > kern::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        w[i] -= step * m[i] / (std::sqrt(v[i]) + eps);
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& a) const override {
    return std::vector<Blob>(a.size());
  }

 private:
  double b1_, b2_, eps_;
};

}  // namespace

PiecewiseConstantScheduler::PiecewiseConstantScheduler(std::vector<int64_t> boundaries, std::vector<double> values)
    : Scheduler(std::make_shared<Piecewise>(std::move(boundaries), std::move(values))) {}
CosineScheduler::CosineScheduler(double base_lr, int64_t decay_steps, double alpha)
    : Scheduler(std::make_shared<Cosine>(base_lr, decay_steps, alpha)) {}
LinearWarmupScheduler::LinearWarmupScheduler(Scheduler after, int64_t warmup_steps, double start_multiplier)
    : Scheduler(std::make_shared<Warmup>(std::move(after), warmup_steps, start_multiplier)) {}

void Optimizer::minimize(Blob loss) const {
  if (!sched_.impl()) throw Error("[optimizer.minimize] the optimizer has no learning-rate schedule");
  detail::set_objective(loss, clone());
}

void SGD::add_update(Graph&, Blob variable, Blob grad, const std::string& var_name) const {
  std::vector<Blob> in{variable, grad};
  if (momentum_ != 0)
    in.push_back(get_variable(var_name + "-momentum", variable.shape(), variable.dtype(), zeros_initializer(), false));
  internal::add_node(std::make_shared<SgdUpdate>(momentum_), in, var_name + "-update");
}
std::string SGD::str() const { return "SGD(momentum=" + std::to_string(momentum_) + ", lr=" + sched_.str() + ")"; }

void Adam::add_update(Graph&, Blob variable, Blob grad, const std::string& var_name) const {
  Blob m = get_variable(var_name + "-m", variable.shape(), variable.dtype(), zeros_initializer(), false);
  Blob v = get_variable(var_name + "-v", variable.shape(), variable.dtype(), zeros_initializer(), false);
  internal::add_node(std::make_shared<AdamUpdate>(beta1_, beta2_, epsilon_), {variable, grad, m, v},
                     var_name + "-update");
}
std::string Adam::str() const {
  return "Adam(beta1=" + std::to_string(beta1_) + ", beta2=" + std::to_string(beta2_) +
         ", epsilon=" + std::to_string(epsilon_) + ", lr=" + sched_.str() + ")";
}

}  // namespace jobflow::optimizer

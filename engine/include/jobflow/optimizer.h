// jobflow/optimizer.h — learning-rate schedules and optimizers.
//
//   flow::optimizer::PiecewiseConstantScheduler sched({}, {0.1});
//   flow::optimizer::SGD(sched, /*momentum=*/0).minimize(loss);
//
// minimize() is called inside a train job's body; it marks `loss` (its mean
// when not a scalar) as the objective. Every call of the job then runs
// forward, backward and one update of every trainable variable the loss
// depends on. Optimizer state lives in variables named "<var>-momentum"
// (SGD), "<var>-m" / "<var>-v" (Adam), so it is saved with checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jobflow/graph.h"

namespace jobflow::optimizer {

class LrScheduler {
 public:
  virtual ~LrScheduler() = default;
  virtual double lr(int64_t step) const = 0;
  virtual std::string str() const = 0;
  // Introspection (job files): the schedule's kind ("piecewise_constant",
  // "cosine", "linear_warmup"), its numeric parameters by name, in a fixed
  // order, and for wrapping schedules the schedule wrapped.
  virtual std::string kind() const { return ""; }
  virtual std::vector<std::pair<std::string, std::vector<double>>> params() const { return {}; }
  virtual std::shared_ptr<const LrScheduler> inner() const { return nullptr; }
};

// A schedule by value (shared implementation).
class Scheduler {
 public:
  Scheduler() = default;
  explicit Scheduler(std::shared_ptr<const LrScheduler> s) : impl_(std::move(s)) {}
  double lr(int64_t step) const { return impl_->lr(step); }
  std::string str() const { return impl_ ? impl_->str() : "none"; }
  const std::shared_ptr<const LrScheduler>& impl() const { return impl_; }

 protected:
  std::shared_ptr<const LrScheduler> impl_;
};

// values[i] for boundaries[i-1] <= step < boundaries[i]; len(values) ==
// len(boundaries) + 1 (OneFlow's flow.optimizer.PiecewiseConstantScheduler).
struct PiecewiseConstantScheduler : Scheduler {
  PiecewiseConstantScheduler(std::vector<int64_t> boundaries, std::vector<double> values);
};
// base_lr * (alpha + (1 - alpha) * (1 + cos(pi * step / decay_steps)) / 2),
// constant after decay_steps.
struct CosineScheduler : Scheduler {
  CosineScheduler(double base_lr, int64_t decay_steps, double alpha = 0.0);
};
// Linear warm-up from start_multiplier * lr to the wrapped schedule over
// warmup_steps, then the wrapped schedule.
struct LinearWarmupScheduler : Scheduler {
  LinearWarmupScheduler(Scheduler after, int64_t warmup_steps, double start_multiplier = 0.0);
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Marks `loss` as the objective of the train job being defined.
  void minimize(Blob loss) const;
  // Adds the update of one variable to the graph (called by the compiler).
  virtual void add_update(Graph& g, Blob variable, Blob grad, const std::string& var_name) const = 0;
  virtual std::string str() const = 0;
  const Scheduler& scheduler() const { return sched_; }
  // Shared copy for the job (minimize() may be called on a temporary).
  virtual std::shared_ptr<Optimizer> clone() const = 0;

 protected:
  explicit Optimizer(Scheduler s) : sched_(std::move(s)) {}
  Scheduler sched_;
};

// v = momentum * v - lr * g; w += v   (momentum 0: w -= lr * g)
class SGD : public Optimizer {
 public:
  explicit SGD(Scheduler s, double momentum = 0.9) : Optimizer(std::move(s)), momentum_(momentum) {}
  void add_update(Graph& g, Blob variable, Blob grad, const std::string& var_name) const override;
  std::string str() const override;
  std::shared_ptr<Optimizer> clone() const override { return std::make_shared<SGD>(*this); }
  double momentum() const { return momentum_; }

 private:
  double momentum_;
};

// Adam with bias correction (Kingma & Ba).
class Adam : public Optimizer {
 public:
  explicit Adam(Scheduler s, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8)
      : Optimizer(std::move(s)), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {}
  void add_update(Graph& g, Blob variable, Blob grad, const std::string& var_name) const override;
  std::string str() const override;
  std::shared_ptr<Optimizer> clone() const override { return std::make_shared<Adam>(*this); }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double epsilon() const { return epsilon_; }

 private:
  double beta1_, beta2_, epsilon_;
};

}  // namespace jobflow::optimizer

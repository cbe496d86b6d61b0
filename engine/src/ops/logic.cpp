// Comparisons, logical ops and selection: equal, less, greater, less_equal,
// greater_equal (two operands of one dtype -> bool), logical_not/and/or/xor
// (bool -> bool), where (bool, x, y -> x's dtype), is_nan and is_inf
// (float -> bool). All broadcast as numpy does (nary.h). Only where carries
// a gradient (to x and y); the others are piecewise constant.
#include <cmath>
#include <type_traits>

#include "jobflow/ops.h"
#include "kernel_util.h"
#include "nary.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

using kern::check_rank;

enum class Cmp { Equal, Less, Greater, LessEqual, GreaterEqual };

class Compare final : public Primitive {
 public:
  explicit Compare(Cmp op) : op_(op) {}
  OpKind kind() const override {
    switch (op_) {
      case Cmp::Equal: return OpKind::Equal;
      case Cmp::Less: return OpKind::Less;
      case Cmp::Greater: return OpKind::Greater;
      case Cmp::LessEqual: return OpKind::LessEqual;
      case Cmp::GreaterEqual: return OpKind::GreaterEqual;
    }
    return OpKind::Equal;
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 2);
    expect_same_dtype(name(), in[0], in[1]);
    if (op_ != Cmp::Equal) expect_not_bool(name(), in[0], "operands");
    check_rank(name(), in[0].shape);
    check_rank(name(), in[1].shape);
    return {{layout::broadcast_shape(name(), in[0].shape, in[1].shape), DType::Bool}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      switch (op_) {
        case Cmp::Equal: kern::broadcast_map2<T, bool>(in[0], in[1], out[0], [](T a, T b) { return a == b; }); break;
        case Cmp::Less: kern::broadcast_map2<T, bool>(in[0], in[1], out[0], [](T a, T b) { return a < b; }); break;
        case Cmp::Greater: kern::broadcast_map2<T, bool>(in[0], in[1], out[0], [](T a, T b) { return a > b; }); break;
        case Cmp::LessEqual: kern::broadcast_map2<T, bool>(in[0], in[1], out[0], [](T a, T b) { return a <= b; }); break;
        case Cmp::GreaterEqual:
          kern::broadcast_map2<T, bool>(in[0], in[1], out[0], [](T a, T b) { return a >= b; });
          break;
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());  // piecewise constant
  }
  bool differentiable_input(int) const override { return false; }

 private:
  Cmp op_;
};

enum class Logic { And, Or, Xor };

class Logical final : public Primitive {
 public:
  explicit Logical(Logic op) : op_(op) {}
  OpKind kind() const override {
    return op_ == Logic::And ? OpKind::LogicalAnd : op_ == Logic::Or ? OpKind::LogicalOr : OpKind::LogicalXor;
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 2);
    for (const TensorSpec& s : in)
      if (s.dtype != DType::Bool) op_error(name(), "operands must be bool, got " + spec_str(s));
    check_rank(name(), in[0].shape);
    check_rank(name(), in[1].shape);
    return {{layout::broadcast_shape(name(), in[0].shape, in[1].shape), DType::Bool}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    switch (op_) {
      case Logic::And: kern::broadcast_map2<bool, bool>(in[0], in[1], out[0], [](bool a, bool b) { return a && b; }); break;
      case Logic::Or: kern::broadcast_map2<bool, bool>(in[0], in[1], out[0], [](bool a, bool b) { return a || b; }); break;
      case Logic::Xor: kern::broadcast_map2<bool, bool>(in[0], in[1], out[0], [](bool a, bool b) { return a != b; }); break;
    }
  }
  bool differentiable_input(int) const override { return false; }

 private:
  Logic op_;
};

// not, is_nan, is_inf: one operand, a bool of its shape.
enum class Test { Not, IsNaN, IsInf };

class Predicate final : public Primitive {
 public:
  explicit Predicate(Test op, bool pos = true, bool neg = true) : op_(op), pos_(pos), neg_(neg) {}
  OpKind kind() const override {
    return op_ == Test::Not ? OpKind::LogicalNot : op_ == Test::IsNaN ? OpKind::IsNaN : OpKind::IsInf;
  }
  Attrs attributes() const override {
    if (op_ != Test::IsInf) return {};
    return {{"detect_positive", int64_t{pos_}}, {"detect_negative", int64_t{neg_}}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 1);
    if (op_ == Test::Not) {
      if (in[0].dtype != DType::Bool) op_error(name(), "operand must be bool, got " + spec_str(in[0]));
    } else {
      expect_float(name(), in[0], "x");
    }
    return {{in[0].shape, DType::Bool}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int64_t n = in[0].numel();
    bool* y = out[0].data<bool>();
    if (op_ == Test::Not) {
      const bool* x = in[0].data<bool>();
#pragma omp parallel for if (n > kern::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) y[i] = !x[i];
      return;
    }
    kern::dispatch_float(in[0].dtype(), name(), [&](auto z) {
      using T = decltype(z);
      const T* x = static_cast<const T*>(in[0].raw());
      if (op_ == Test::IsNaN) {
#pragma omp parallel for if (n > kern::kParallelGrain)
        for (int64_t i = 0; i < n; ++i) y[i] = std::isnan(x[i]);
      } else {
        const bool p = pos_, q = neg_;
#pragma omp parallel for if (n > kern::kParallelGrain)
        for (int64_t i = 0; i < n; ++i) y[i] = std::isinf(x[i]) && (x[i] > 0 ? p : q);
      }
    });
  }
  bool differentiable_input(int) const override { return false; }

 private:
  Test op_;
  bool pos_, neg_;
};

// where(cond, x, y): x where cond, else y; the three broadcast together.
class Where final : public Primitive {
 public:
  OpKind kind() const override { return OpKind::Where; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs(name(), in, 3);
    if (in[0].dtype != DType::Bool) op_error(name(), "condition must be bool, got " + spec_str(in[0]));
    expect_same_dtype(name(), in[1], in[2]);
    for (const TensorSpec& s : in) check_rank(name(), s.shape);
    const Shape s = layout::broadcast_shape(name(), in[0].shape, layout::broadcast_shape(name(), in[1].shape, in[2].shape));
    return {{s, in[1].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_all(in[1].dtype(), [&](auto z) {
      using T = decltype(z);
      kern::broadcast_map3<bool, T>(in[0], in[1], in[2], out[0], [](bool c, T a, T b) { return c ? a : b; });
    });
  }
  bool differentiable_input(int i) const override { return i != 0; }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    const Blob& g = cot[0];
    const Blob zero = zeros_like(g);
    std::vector<Blob> r;
    for (int arg : argnums) {
      if (arg == 0) {
        r.push_back(Blob());
        continue;
      }
      Blob full = arg == 1 ? where(in[0], g, zero) : where(in[0], zero, g);
      r.push_back(full.shape() == in[arg].shape() ? full : sum_to(full, in[arg].shape()));
    }
    return r;
  }
};

Blob compare(Cmp op, Blob a, Blob b, const std::string& name) {
  return internal::add_node(std::make_shared<Compare>(op), {a, b}, name)[0];
}
Blob logical(Logic op, Blob a, Blob b, const std::string& name) {
  return internal::add_node(std::make_shared<Logical>(op), {a, b}, name)[0];
}

}  // namespace

Blob equal(Blob a, Blob b, const std::string& name) { return compare(Cmp::Equal, a, b, name); }
Blob less(Blob a, Blob b, const std::string& name) { return compare(Cmp::Less, a, b, name); }
Blob greater(Blob a, Blob b, const std::string& name) { return compare(Cmp::Greater, a, b, name); }
Blob less_equal(Blob a, Blob b, const std::string& name) { return compare(Cmp::LessEqual, a, b, name); }
Blob greater_equal(Blob a, Blob b, const std::string& name) { return compare(Cmp::GreaterEqual, a, b, name); }
Blob logical_and(Blob a, Blob b, const std::string& name) { return logical(Logic::And, a, b, name); }
Blob logical_or(Blob a, Blob b, const std::string& name) { return logical(Logic::Or, a, b, name); }
Blob logical_xor(Blob a, Blob b, const std::string& name) { return logical(Logic::Xor, a, b, name); }
Blob logical_not(Blob x, const std::string& name) {
  return internal::add_node(std::make_shared<Predicate>(Test::Not), {x}, name)[0];
}
Blob where(Blob cond, Blob x, Blob y, const std::string& name) {
  return internal::add_node(std::make_shared<Where>(), {cond, x, y}, name)[0];
}

namespace math {
Blob is_nan(Blob x, const std::string& name) {
  return internal::add_node(std::make_shared<Predicate>(Test::IsNaN), {x}, name)[0];
}
Blob is_inf(Blob x, bool detect_positive, bool detect_negative, const std::string& name) {
  return internal::add_node(std::make_shared<Predicate>(Test::IsInf, detect_positive, detect_negative), {x}, name)[0];
}
}  // namespace math

}  // namespace jobflow

// Elementwise, reduction, softmax, cross-entropy and optimizer ops on the
// backend's own kernels (kernels.h). Semantics (names, attributes, dtypes)
// follow the CPU primitives in engine/src/ops/{elementwise,linalg,reduce,
// shape,nn}.cpp and engine/src/optimizer.cpp.
#include <algorithm>

#include "ops.h"

namespace jobflow::cuda {
namespace {

OpDef binary_op(k::Bin op) {
  OpDef d;
  d.run = [op](Launch& L) {
    const Tensor &a = L.in[0], &b = L.in[1], &o = L.out[0];
    const k::BView v = broadcast_view(o.shape(), a.shape(), b.shape());
    L.check(k::binary(op, dt(a.dtype()), L.i(0), L.i(1), L.o(0), o.numel(), a.numel(), b.numel(), v, L.stream()));
  };
  return d;
}

bool float_only(k::Un op) {
  return op == k::Un::Exp || op == k::Un::Log || op == k::Un::Sqrt || op == k::Un::Rsqrt || op == k::Un::Sigmoid ||
         op == k::Un::Tanh;
}

OpDef unary_op(k::Un op) {
  OpDef d;
  const bool scalar = op == k::Un::AddScalar || op == k::Un::MulScalar;
  if (float_only(op)) d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return is_float(in[0].dtype()); };
  d.run = [op, scalar](Launch& L) {
    const double s = scalar ? L.p.attr_double("scalar") : 0.0;
    L.check(k::unary(op, dt(L.in[0].dtype()), L.i(0), L.o(0), L.out[0].numel(), s, L.stream()));
  };
  return d;
}

OpDef act_grad_op(k::Act a) {
  OpDef d;
  d.accepts = [](const Primitive&, const std::vector<Tensor>& in) {
    return is_float(in[0].dtype()) && in[0].shape() == in[1].shape();
  };
  d.run = [a](Launch& L) {
    L.check(k::act_grad(a, dt(L.in[0].dtype()), L.i(0), L.i(1), L.o(0), L.out[0].numel(), L.stream()));
  };
  return d;
}

// Sum over the dims flagged in `red` (a view of x), written as y.
void run_sum(Launch& L, k::Red op, const Tensor& x, const void* dx, void* dy, int64_t n_out, const std::vector<bool>& red) {
  const k::RView v = reduce_view(x.shape(), red);
  L.check(k::reduce(op, dt(x.dtype()), dx, dy, v, n_out, L.stream()));
}

OpDef reduce_op(k::Red op) {
  OpDef d;
  if (op == k::Red::Mean)
    d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return is_float(in[0].dtype()); };
  d.run = [op](Launch& L) {
    const Tensor& x = L.in[0];
    const int r = x.ndim();
    std::vector<bool> red(r, false);
    const auto axes = L.p.attr_ints("axes");
    if (axes.empty()) std::fill(red.begin(), red.end(), true);
    for (int64_t a : axes) red[norm_axis(L.p, a, r)] = true;
    run_sum(L, op, x, L.i(0), L.o(0), L.out[0].numel(), red);
  };
  return d;
}

// ---- softmax family ----

OpDef softmax_op(bool log) {
  OpDef d;
  d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return is_float(in[0].dtype()); };
  d.run = [log](Launch& L) {
    const Tensor& x = L.in[0];
    const Lanes l = lanes_of(x.shape(), norm_axis(L.p, L.p.attr_int("axis"), x.ndim()));
    L.check(k::softmax(dt(x.dtype()), log, L.i(0), L.o(0), l.outer, l.C, l.inner, L.stream()));
  };
  return d;
}

OpDef softmax_grad_op(bool log) {
  OpDef d;
  d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return is_float(in[0].dtype()); };
  d.run = [log](Launch& L) {  // inputs y, dy
    const Tensor& y = L.in[0];
    const Lanes l = lanes_of(y.shape(), norm_axis(L.p, L.p.attr_int("axis"), y.ndim()));
    L.check(k::softmax_grad(dt(y.dtype()), log, L.i(0), L.i(1), L.o(0), l.outer, l.C, l.inner, L.stream()));
  };
  return d;
}

// Labels are still on the host when an op runs: checked there, with the
// CPU's message, before anything is launched.
template <class L>
void check_labels(const L* lab, int64_t B, int64_t C) {
  for (int64_t b = 0; b < B; ++b)
    if (lab[b] < 0 || lab[b] >= C)
      op_error("sparse_softmax_cross_entropy", "label " + std::to_string(static_cast<int64_t>(lab[b])) + " of row " +
                                                   std::to_string(b) + " is out of range [0, " + std::to_string(C) +
                                                   ")");
}

}  // namespace

void add_elementwise_ops(OpTable& t) {
  t[OpKind::Add] = binary_op(k::Bin::Add);
  t[OpKind::Sub] = binary_op(k::Bin::Sub);
  t[OpKind::Mul] = binary_op(k::Bin::Mul);
  t[OpKind::Div] = binary_op(k::Bin::Div);
  t[OpKind::EqualMask] = binary_op(k::Bin::EqMask);

  t[OpKind::Neg] = unary_op(k::Un::Neg);
  t[OpKind::Exp] = unary_op(k::Un::Exp);
  t[OpKind::Log] = unary_op(k::Un::Log);
  t[OpKind::Sqrt] = unary_op(k::Un::Sqrt);
  t[OpKind::Rsqrt] = unary_op(k::Un::Rsqrt);
  t[OpKind::Square] = unary_op(k::Un::Square);
  t[OpKind::Sigmoid] = unary_op(k::Un::Sigmoid);
  t[OpKind::Tanh] = unary_op(k::Un::Tanh);
  t[OpKind::Relu] = unary_op(k::Un::Relu);
  t[OpKind::AddScalar] = unary_op(k::Un::AddScalar);
  t[OpKind::MulScalar] = unary_op(k::Un::MulScalar);

  t[OpKind::ReluGrad] = act_grad_op(k::Act::Relu);
  t[OpKind::SigmoidGrad] = act_grad_op(k::Act::Sigmoid);
  t[OpKind::TanhGrad] = act_grad_op(k::Act::Tanh);

  {  // add_n: the gradient accumulator of autodiff
    OpDef d;
    d.run = [](Launch& L) {
      std::vector<const void*> ptrs;
      for (size_t j = 0; j < L.in.size(); ++j) ptrs.push_back(L.i(j));
      L.check(k::add_n(dt(L.out[0].dtype()), ptrs.data(), static_cast<int>(ptrs.size()), L.o(0), L.out[0].numel(),
                       L.stream()));
    };
    t[OpKind::AddN] = d;
  }
  {
    OpDef d;
    d.run = [](Launch& L) {
      L.check(k::cast(dt(L.in[0].dtype()), dt(L.out[0].dtype()), L.i(0), L.o(0), L.out[0].numel(), L.stream()));
    };
    t[OpKind::Cast] = d;
  }
  for (OpKind kind : {OpKind::ZerosLike, OpKind::OnesLike}) {  // the input only supplies the spec
    OpDef d;
    d.skip_inputs = 1u;
    d.run = [](Launch& L) {
      L.check(k::fill(dt(L.out[0].dtype()), L.o(0), L.out[0].numel(), L.p.attr_double("value"), L.stream()));
    };
    t[kind] = d;
  }

  // ---- bias ----
  {
    OpDef d;
    d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return is_float(in[0].dtype()); };
    d.run = [](Launch& L) {
      const Tensor& x = L.in[0];
      const Lanes l = lanes_of(x.shape(), norm_axis(L.p, L.p.attr_int("axis"), x.ndim()));
      L.check(k::bias_add(dt(x.dtype()), L.i(0), L.i(1), L.o(0), l.outer, l.C, l.inner, L.p.attr_int("relu") != 0,
                          L.stream()));
    };
    t[OpKind::BiasAdd] = d;
  }
  {  // sum of dy over every axis but `axis`
    OpDef d;
    d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return is_float(in[0].dtype()); };
    d.run = [](Launch& L) {
      const Tensor& dy = L.in[0];
      std::vector<bool> red(dy.ndim(), true);
      red[norm_axis(L.p, L.p.attr_int("axis"), dy.ndim())] = false;
      run_sum(L, k::Red::Sum, dy, L.i(0), L.o(0), L.out[0].numel(), red);
    };
    t[OpKind::BiasGrad] = d;
  }

  // ---- reductions ----
  t[OpKind::ReduceSum] = reduce_op(k::Red::Sum);
  t[OpKind::ReduceMean] = reduce_op(k::Red::Mean);
  t[OpKind::ReduceMax] = reduce_op(k::Red::Max);
  {  // the gradient of broadcasting: sums the broadcast dims back
    OpDef d;
    d.run = [](Launch& L) {
      const Tensor& x = L.in[0];
      const Shape& target = L.out[0].shape();
      const int r = x.ndim(), lead = r - static_cast<int>(target.size());
      std::vector<bool> red(r, false);
      for (int i = 0; i < r; ++i) red[i] = i < lead || (target[i - lead] == 1 && x.dim(i) != 1);
      run_sum(L, k::Red::Sum, x, L.i(0), L.o(0), L.out[0].numel(), red);
    };
    t[OpKind::SumTo] = d;
  }
  {
    OpDef d;
    d.run = [](Launch& L) {
      const Tensor& x = L.in[0];
      const Lanes l = lanes_of(x.shape(), norm_axis(L.p, L.p.attr_int("axis"), x.ndim()));
      L.check(k::argmax(dt(x.dtype()), L.i(0), L.o<int32_t>(0), l.outer, l.C, l.inner, L.stream()));
    };
    t[OpKind::ArgMax] = d;
  }

  // ---- data movement ----
  {
    OpDef d;
    d.run = [](Launch& L) {
      const Shape& xs = L.in[0].shape();
      const Shape& ys = L.out[0].shape();
      const int r = static_cast<int>(ys.size()), off = r - static_cast<int>(xs.size());
      if (r > k::kMaxRank) op_error("broadcast_to", "rank too large for the CUDA backend");
      k::SView v;
      v.nd = std::max(r, 1);
      int64_t acc = 1;
      for (int i = r - 1; i >= 0; --i) {
        const int64_t d = i >= off ? xs[i - off] : 1;
        v.dim[i] = ys[i];
        v.str[i] = d == 1 ? 0 : acc;
        acc *= d;
      }
      L.check(k::strided_copy(dt(L.in[0].dtype()), L.i(0), L.o(0), v, L.out[0].numel(), L.stream()));
    };
    t[OpKind::BroadcastTo] = d;
  }
  {
    OpDef d;
    d.run = [](Launch& L) {
      const Shape& xs = L.in[0].shape();
      const auto perm = L.p.attr_ints("perm");
      const int r = static_cast<int>(xs.size());
      if (r > k::kMaxRank || static_cast<int>(perm.size()) != r)
        op_error("transpose", "unexpected permutation for the CUDA backend");
      int64_t xstr[k::kMaxRank];
      int64_t acc = 1;
      for (int i = r - 1; i >= 0; --i) xstr[i] = acc, acc *= xs[i];
      k::SView v;
      v.nd = std::max(r, 1);
      for (int i = 0; i < r; ++i) {
        const int src = norm_axis(L.p, perm[i], r);
        v.dim[i] = xs[src];
        v.str[i] = xstr[src];
      }
      L.check(k::strided_copy(dt(L.in[0].dtype()), L.i(0), L.o(0), v, L.out[0].numel(), L.stream()));
    };
    t[OpKind::Transpose] = d;
  }

  // ---- softmax, cross-entropy ----
  t[OpKind::Softmax] = softmax_op(false);
  t[OpKind::LogSoftmax] = softmax_op(true);
  t[OpKind::SoftmaxGrad] = softmax_grad_op(false);
  t[OpKind::LogSoftmaxGrad] = softmax_grad_op(true);
  {  // inputs labels (B,), logits (B, C); outputs loss (B,), prob (B, C)
    OpDef d;
    d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return is_float(in[1].dtype()); };
    d.run = [](Launch& L) {
      const Tensor &lab = L.in[0], &x = L.in[1];
      const int64_t B = x.dim(0), C = x.dim(1);
      if (lab.dtype() == DType::Int32) check_labels(lab.data<int32_t>(), B, C);
      else check_labels(lab.data<int64_t>(), B, C);
      L.check(k::xent(dt(x.dtype()), dt(lab.dtype()), L.i(0), L.i(1), L.o(0), L.o(1), B, C, L.stream()));
    };
    t[OpKind::SparseSoftmaxCrossEntropy] = d;
  }
  {  // inputs prob (B, C), labels (B,), dloss (B,)
    OpDef d;
    d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return is_float(in[0].dtype()); };
    d.run = [](Launch& L) {
      const Tensor &p = L.in[0], &lab = L.in[1];
      // Out-of-range labels would index out of bounds: the CPU relies on the
      // forward's check; here the labels are at hand, so check them again.
      if (lab.dtype() == DType::Int32) check_labels(lab.data<int32_t>(), p.dim(0), p.dim(1));
      else check_labels(lab.data<int64_t>(), p.dim(0), p.dim(1));
      L.check(k::xent_grad(dt(p.dtype()), dt(lab.dtype()), L.i(0), L.i(1), L.i(2), L.o(0), p.dim(0), p.dim(1),
                           L.stream()));
    };
    t[OpKind::SparseSoftmaxCrossEntropyGrad] = d;
  }

  // ---- optimizer ----
  {  // inputs w, g [, v]: updated in place
    OpDef d;
    d.accepts = [](const Primitive&, const std::vector<Tensor>& in) { return is_float(in[0].dtype()); };
    d.written_inputs = 0b101;
    d.run = [](Launch& L) {
      const double m = L.p.attr_double("momentum");
      L.check(k::sgd(dt(L.in[0].dtype()), L.i(0), L.i(1), m != 0 ? L.i(2) : nullptr, L.in[0].numel(), L.ctx.lr, m,
                     L.stream()));
    };
    t[OpKind::SgdUpdate] = d;
  }
}

}  // namespace jobflow::cuda

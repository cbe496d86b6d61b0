// ONNX rows of the ai.onnx.preview.training domain (registry.h): Gradient,
// built by the engine's autodiff (gradients(), ops.h), and the optimizer
// updates (Adagrad, Momentum, Adam), built from elementwise ops. Each node updates one or more tensors X with their gradients
// G and state, given the learning rate R and the step T (scalars computed in
// the graph): inputs R, T, X1..Xn, G1..Gn, state1..staten (, state2 ...);
// outputs the new X1..Xn, then the new states, as ONNX defines them.
#include <cmath>

#include "onnx/importer.h"

namespace jobflow::onnx {
namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

struct Update {
  Blob r, t;  // learning rate (X's dtype), step (int64), both scalars
  int n = 0;  // tensors updated
};

// The shared inputs; `states` tensors of state per X.
Update update_inputs(Importer& I, int states) {
  const int groups = 2 + states;
  if (I.nin() < 2 + groups || (I.nin() - 2) % groups != 0)
    I.err("needs R, T and " + std::to_string(groups) + " inputs per tensor, got " + std::to_string(I.nin()) + " inputs");
  Update u;
  u.n = (I.nin() - 2) / groups;
  if (I.node->output_size() != (1 + states) * u.n)
    I.err("needs " + std::to_string((1 + states) * u.n) + " outputs for " + std::to_string(u.n) + " tensors");
  u.r = I.in(0), u.t = I.in(1);
  if (!is_floating(u.r.dtype()) || numel(u.r.shape()) != 1) I.err("R must be one float, got " + spec_str(u.r.spec()));
  if (u.t.dtype() != DType::Int64 || numel(u.t.shape()) != 1) I.err("T must be one int64, got " + spec_str(u.t.spec()));
  u.r = reshape(u.r, {}), u.t = reshape(u.t, {});
  for (int i = 2; i < I.nin(); ++i) {
    Blob b = I.in(i);
    if (!is_floating(b.dtype())) I.err("input " + std::to_string(i) + " must be float, got " + spec_str(b.spec()));
  }
  return u;
}

Blob s(double v, DType dt) { return scalar_blob(v, dt); }
Blob as(Blob v, DType dt) { return v.dtype() == dt ? v : cast(v, dt); }

// h' = h + g'^2, x' = x - r / (1 + t decay) * g' / (sqrt(h') + epsilon), g' = g + norm x.
void op_adagrad(Importer& I) {
  const Update u = update_inputs(I, 1);
  const double decay = I.attr_f("decay_factor", 0.0), eps = I.attr_f("epsilon", 1e-6), norm = I.attr_f("norm_coefficient", 0.0);
  for (int i = 0; i < u.n; ++i) {
    Blob x = I.in(2 + i), g = I.in(2 + u.n + i), h = I.in(2 + 2 * u.n + i);
    const DType dt = x.dtype();
    Blob t = cast(u.t, dt), r = as(u.r, dt);
    Blob rr = div(r, add(s(1, dt), mul(t, s(decay, dt))));
    Blob gr = add(mul(s(norm, dt), x), g);
    Blob hn = add(h, mul(gr, gr));
    I.out(i, sub(x, div(mul(rr, gr), add(sqrt(hn), s(eps, dt)))));
    I.out(u.n + i, hn);
  }
}

// v' = alpha v + beta' g' (beta' = 1 at step 0), x' = x - r v' (nesterov:
// x - r (g' + alpha v')), g' = g + norm x.
void op_momentum(Importer& I) {
  const Update u = update_inputs(I, 1);
  const double alpha = I.attr_f("alpha", 0.0), beta = I.attr_f("beta", 0.0), norm = I.attr_f("norm_coefficient", 0.0);
  const std::string mode = I.attr_s("mode", "standard");
  if (mode != "standard" && mode != "nesterov") I.err("mode must be standard or nesterov, got '" + mode + "'");
  for (int i = 0; i < u.n; ++i) {
    Blob x = I.in(2 + i), g = I.in(2 + u.n + i), v = I.in(2 + 2 * u.n + i);
    const DType dt = x.dtype();
    Blob r = as(u.r, dt);
    Blob gr = add(mul(s(norm, dt), x), g);
    Blob b = where(greater(u.t, scalar_blob(0, DType::Int64)), s(beta, dt), s(1, dt));
    Blob vn = add(mul(s(alpha, dt), v), mul(b, gr));
    Blob step = mode == "standard" ? vn : add(gr, mul(s(alpha, dt), vn));
    I.out(i, sub(x, mul(r, step)));
    I.out(u.n + i, vn);
  }
}

// v' = alpha v + (1 - alpha) g', h' = beta h + (1 - beta) g'^2,
// x' = (1 - norm_post) (x - r' v' / (sqrt(h') + epsilon)) with
// r' = r sqrt(1 - beta^t) / (1 - alpha^t) after step 0, g' = g + norm x.
void op_adam(Importer& I) {
  const Update u = update_inputs(I, 2);
  // ONNX's schema gives epsilon 1e-6 by default, its own test of Adam without
  // the attribute (test_adam_multiple) expects 1e-2: a model that leaves it
  // out is refused rather than answered one way or the other.
  if (!I.has_attr("epsilon")) I.unsupported(std::string(kTrainingDomain) + ".Adam(epsilon left to its default)");
  const double alpha = I.attr_f("alpha", 0.9), beta = I.attr_f("beta", 0.999), eps = I.attr_f("epsilon", 1e-6);
  const double norm = I.attr_f("norm_coefficient", 0.0), post = I.attr_f("norm_coefficient_post", 0.0);
  for (int i = 0; i < u.n; ++i) {
    Blob x = I.in(2 + i), g = I.in(2 + u.n + i), v = I.in(2 + 2 * u.n + i), h = I.in(2 + 3 * u.n + i);
    const DType dt = x.dtype();
    Blob r = as(u.r, dt), t = cast(u.t, dt);
    Blob gr = add(mul(s(norm, dt), x), g);
    Blob vn = add(mul(s(alpha, dt), v), mul(s(1 - alpha, dt), gr));
    Blob hn = add(mul(s(beta, dt), h), mul(s(1 - beta, dt), mul(gr, gr)));
    Blob corr = div(sqrt(sub(s(1, dt), pow(s(beta, dt), t))), sub(s(1, dt), pow(s(alpha, dt), t)));
    Blob ra = where(greater(u.t, scalar_blob(0, DType::Int64)), mul(r, corr), r);
    Blob xn = sub(x, mul(ra, div(vn, add(sqrt(hn), s(eps, dt)))));
    I.out(i, mul(s(1 - post, dt), xn));
    I.out(u.n + i, vn);
    I.out(2 * u.n + i, hn);
  }
}

// Gradient (xs, y, zs): the gradients of the value named y with respect to
// the values named in xs (the node's inputs are xs then zs), with y's
// cotangent ones (the gradient of y's sum, as ONNX's reference computes
// it); zs are inputs y depends on that are held constant. A gradient that
// does not reach y is zeros.
void op_gradient(Importer& I) {
  const auto* xs = I.attr("xs", AttributeProto::STRINGS);
  if (!xs || xs->strings_size() == 0) I.err("needs the attribute xs (the values to differentiate by)");
  const std::string y_name = I.attr_s("y", "");
  if (y_name.empty()) I.err("needs the attribute y (the value to differentiate)");
  const auto* zs = I.attr("zs", AttributeProto::STRINGS);
  const int nz = zs ? zs->strings_size() : 0;
  if (I.nin() != xs->strings_size() + nz)
    I.err("has " + std::to_string(I.nin()) + " inputs; xs and zs name " + std::to_string(xs->strings_size() + nz));
  for (int i = 0; i < xs->strings_size(); ++i)
    if (I.iname(i) != xs->strings(i))
      I.err("input " + std::to_string(i) + " is '" + I.iname(i) + "', xs names '" + xs->strings(i) + "' there");
  if (I.node->output_size() != xs->strings_size())
    I.err("has " + std::to_string(I.node->output_size()) + " outputs for " + std::to_string(xs->strings_size()) +
          " values in xs");
  std::vector<Blob> x;
  for (int i = 0; i < xs->strings_size(); ++i) {
    x.push_back(I.in(i));
    if (!is_floating(x.back().dtype())) I.err("xs value '" + I.iname(i) + "' is " + spec_str(x.back().spec()) + ", not a float");
  }
  const Blob y = I.blob_of(y_name);
  if (!is_floating(y.dtype())) I.err("y value '" + y_name + "' is " + spec_str(y.spec()) + ", not a float");
  std::vector<Blob> g;
  try {
    g = gradients(y, x);
  } catch (const Error& e) {
    I.err(e.what());
  }
  for (size_t i = 0; i < g.size(); ++i) I.out(static_cast<int>(i), g[i]);
}

}  // namespace

void training_onnx_rows(OpRows& r) {
  r.import_domain_op(kTrainingDomain, "Gradient", op_gradient);
  r.import_domain_op(kTrainingDomain, "Adagrad", op_adagrad);
  r.import_domain_op(kTrainingDomain, "Momentum", op_momentum);
  r.import_domain_op(kTrainingDomain, "Adam", op_adam);
}

}  // namespace jobflow::onnx

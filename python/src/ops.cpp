// The builder API for job bodies: Blob, the ops of ops.h, layers,
// initializers, optimizers and schedules, placement scopes and
// FunctionConfig. Thin: argument conversion only; the Python modules give
// OneFlow's names and defaults.
#include "common.h"

#include <jobflow/optimizer.h>

namespace jobflow::python {

namespace {

nn::Size2 size2(py::handle v) {
  if (py::isinstance<py::int_>(v)) return nn::Size2(v.cast<int64_t>());
  auto s = v.cast<std::vector<int64_t>>();
  if (s.size() == 1) return nn::Size2(s[0]);
  if (s.size() != 2) throw Error("[jobflow] expected one number or (h, w), got " + std::to_string(s.size()) + " numbers");
  return nn::Size2(s[0], s[1]);
}

nn::Padding padding(py::handle v) {
  if (py::isinstance<py::str>(v)) return nn::Padding(v.cast<std::string>());
  return nn::Padding(v.cast<std::vector<int64_t>>());
}

std::string name_of(py::handle n) { return n.is_none() ? std::string() : n.cast<std::string>(); }

// A scalar operand as a constant of the blob's dtype (for 2 - x, 1 / x).
Blob scalar_like(Blob b, double v) {
  return constant(Tensor::scalar<double>(v).astype(b.dtype()));
}

}  // namespace

void bind_ops(py::module_& m) {
  // ---- Blob: a placeholder of the graph being built (graph.h) ----
  py::class_<Blob>(m, "Blob", "A symbolic tensor of the job being defined: shape and dtype, no data (OneFlow's Blob).")
      .def_property_readonly("shape", [](const Blob& b) {
        Shape s = b.shape();
        py::tuple t(s.size());
        for (size_t i = 0; i < s.size(); ++i) t[i] = py::int_(s[i]);
        return t;
      })
      .def_property_readonly("dtype", &Blob::dtype)
      .def_property_readonly("ndim", &Blob::ndim)
      .def_property_readonly("name", &Blob::name)
      .def_property_readonly("logical_blob_name", &Blob::name)
      .def_property_readonly("op_name", [](const Blob& b) {
        std::string n = b.name();
        auto p = n.rfind('/');
        return p == std::string::npos ? n : n.substr(0, p);
      })
      .def("__repr__", [](const Blob& b) {
        return "<jobflow.Blob '" + b.name() + "' " + spec_str(b.spec()) + ">";
      })
      .def("__add__", [](Blob a, Blob b) { return add(a, b); })
      .def("__add__", [](Blob a, double s) { return add_scalar(a, s); })
      .def("__radd__", [](Blob a, double s) { return add_scalar(a, s); })
      .def("__sub__", [](Blob a, Blob b) { return sub(a, b); })
      .def("__sub__", [](Blob a, double s) { return add_scalar(a, -s); })
      .def("__rsub__", [](Blob a, double s) { return add_scalar(neg(a), s); })
      .def("__mul__", [](Blob a, Blob b) { return mul(a, b); })
      .def("__mul__", [](Blob a, double s) { return mul_scalar(a, s); })
      .def("__rmul__", [](Blob a, double s) { return mul_scalar(a, s); })
      .def("__truediv__", [](Blob a, Blob b) { return div(a, b); })
      .def("__truediv__", [](Blob a, double s) { return mul_scalar(a, 1.0 / s); })
      .def("__rtruediv__", [](Blob a, double s) { return div(scalar_like(a, s), a); })
      .def("__neg__", [](Blob a) { return neg(a); })
      .def("__pow__", [](Blob a, double e) { return e == 2.0 ? square(a) : pow(a, scalar_like(a, e)); })
      .def("__matmul__", [](Blob a, Blob b) { return matmul(a, b); });

  // ---- Initializers ----
  py::class_<Initializer>(m, "Initializer")
      .def("__repr__", [](const Initializer& i) { return "<jobflow.Initializer " + i.str() + ">"; })
      .def("__str__", &Initializer::str);
  m.def("constant_initializer", &constant_initializer, py::arg("value") = 0.0);
  m.def("zeros_initializer", &zeros_initializer);
  m.def("ones_initializer", &ones_initializer);
  m.def("random_normal_initializer", &random_normal_initializer, py::arg("mean") = 0.0, py::arg("stddev") = 1.0);
  m.def("truncated_normal", &truncated_normal, py::arg("stddev") = 1.0, py::arg("mean") = 0.0);
  m.def("random_uniform_initializer", &random_uniform_initializer, py::arg("minval") = 0.0, py::arg("maxval") = 1.0);
  m.def("xavier_uniform_initializer", &xavier_uniform_initializer);
  m.def("xavier_normal_initializer", &xavier_normal_initializer);
  m.def("kaiming_uniform_initializer", &kaiming_uniform_initializer);
  m.def("kaiming_normal_initializer", &kaiming_normal_initializer);

  m.def("get_variable", [](const std::string& name, const Shape& shape, DType dtype, const Initializer& init,
                           bool trainable) { return get_variable(name, shape, dtype, init, trainable); });

  // ---- Ops (ops.h) ----
  m.def("add", [](Blob a, Blob b) { return add(a, b); });
  m.def("sub", [](Blob a, Blob b) { return sub(a, b); });
  m.def("mul", [](Blob a, Blob b) { return mul(a, b); });
  m.def("div", [](Blob a, Blob b) { return div(a, b); });
  m.def("add_scalar", &add_scalar);
  m.def("mul_scalar", &mul_scalar);
  m.def("neg", &neg);
  m.def("exp", [](Blob a) { return exp(a); });
  m.def("log", [](Blob a) { return log(a); });
  m.def("sqrt", [](Blob a) { return sqrt(a); });
  m.def("rsqrt", &rsqrt);
  m.def("square", &square);
  m.def("sigmoid", &math::sigmoid);
  m.def("tanh", [](Blob a) { return math::tanh(a); });
  m.def("matmul", [](Blob a, Blob b, bool ta, bool tb, py::handle name) { return matmul(a, b, ta, tb, name_of(name)); },
        py::arg("a"), py::arg("b"), py::arg("transpose_a") = false, py::arg("transpose_b") = false,
        py::arg("name") = py::none());
  m.def("reshape", [](Blob x, const Shape& s, py::handle name) { return reshape(x, s, name_of(name)); });
  m.def("flatten", &flatten);
  m.def("transpose", [](Blob x, const std::vector<int>& perm, py::handle name) { return transpose(x, perm, name_of(name)); });
  m.def("concat", [](const std::vector<Blob>& xs, int axis, py::handle name) { return concat(xs, axis, name_of(name)); });
  m.def("cast", [](Blob x, DType t, py::handle name) { return cast(x, t, name_of(name)); });
  m.def("identity", [](Blob x, py::handle name) { return identity(x, name_of(name)); });
  m.def("broadcast_to", &broadcast_to);
  m.def("zeros_like", &zeros_like);
  m.def("ones_like", &ones_like);
  m.def("constant", [](py::handle value, DType dtype, py::handle name) {
    // A value known at definition: copied into the plan.
    Tensor t = to_tensor(value, {{}, dtype}, "constant", name_of(name));
    return constant(t.clone(), name_of(name));
  });
  m.def("reduce_sum", [](Blob x, const std::vector<int>& axes, bool keep, py::handle name) {
    return reduce_sum(x, axes, keep, name_of(name));
  });
  m.def("reduce_mean", [](Blob x, const std::vector<int>& axes, bool keep, py::handle name) {
    return reduce_mean(x, axes, keep, name_of(name));
  });
  m.def("reduce_max", [](Blob x, const std::vector<int>& axes, bool keep, py::handle name) {
    return reduce_max(x, axes, keep, name_of(name));
  });
  m.def("argmax", [](Blob x, int axis, py::handle name) { return argmax(x, axis, name_of(name)); });
  m.def("clip", [](Blob x, std::optional<double> lo, std::optional<double> hi, py::handle name) {
    return clip(x, lo, hi, name_of(name));
  });
  m.def("pow", [](Blob a, Blob b, py::handle name) { return pow(a, b, name_of(name)); });
  m.def("minimum", [](Blob a, Blob b, py::handle name) { return minimum(a, b, name_of(name)); });
  m.def("maximum", [](Blob a, Blob b, py::handle name) { return maximum(a, b, name_of(name)); });
  m.def("gather", [](Blob x, Blob i, int axis, py::handle name) { return gather(x, i, axis, name_of(name)); });
  m.def("squeeze", [](Blob x, const std::vector<int64_t>& axes, py::handle name) { return squeeze(x, axes, name_of(name)); });
  m.def("unsqueeze", [](Blob x, const std::vector<int64_t>& axes, py::handle name) {
    return unsqueeze(x, axes, name_of(name));
  });
  m.def("pad", [](Blob x, const std::vector<int64_t>& pads, const std::string& mode, double v, py::handle name) {
    return pad(x, pads, mode, v, name_of(name));
  });
  m.def("slice", [](Blob x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                    const std::vector<int64_t>& axes, const std::vector<int64_t>& steps, py::handle name) {
    return slice(x, starts, ends, axes, steps, name_of(name));
  });
  m.def("split", [](Blob x, const std::vector<int64_t>& sizes, int axis, py::handle name) {
    return split(x, sizes, axis, name_of(name));
  });
  m.def("gradients", [](Blob y, const std::vector<Blob>& xs) { return gradients(y, xs); });

  // nn
  m.def("relu", [](Blob x, py::handle name) { return nn::relu(x, name_of(name)); });
  m.def("nn_sigmoid", [](Blob x, py::handle name) { return nn::sigmoid(x, name_of(name)); });
  m.def("nn_tanh", [](Blob x, py::handle name) { return nn::tanh(x, name_of(name)); });
  m.def("bias_add", [](Blob x, Blob b, int axis, py::handle name) { return nn::bias_add(x, b, axis, name_of(name)); });
  m.def("softmax", [](Blob x, int axis, py::handle name) { return nn::softmax(x, axis, name_of(name)); });
  m.def("log_softmax", [](Blob x, int axis, py::handle name) { return nn::log_softmax(x, axis, name_of(name)); });
  m.def("sparse_softmax_cross_entropy_with_logits", [](Blob labels, Blob logits, py::handle name) {
    return nn::sparse_softmax_cross_entropy_with_logits(labels, logits, name_of(name));
  });
  m.def("dropout", [](Blob x, double rate, py::handle name) { return nn::dropout(x, rate, name_of(name)); });
  m.def("conv2d", [](Blob x, Blob w, py::handle strides, py::handle pad, py::handle dil, int64_t groups, py::handle name) {
    return nn::conv2d(x, w, size2(strides), padding(pad), size2(dil), groups, name_of(name));
  });
  m.def("max_pool2d", [](Blob x, py::handle k, py::handle s, py::handle pad, const std::string& fmt, py::handle name) {
    return nn::max_pool2d(x, size2(k), size2(s), padding(pad), fmt, name_of(name));
  });
  m.def("avg_pool2d", [](Blob x, py::handle k, py::handle s, py::handle pad, const std::string& fmt, py::handle name) {
    return nn::avg_pool2d(x, size2(k), size2(s), padding(pad), fmt, name_of(name));
  });
  m.def("batch_normalization", [](Blob x, Blob mean, Blob var, Blob offset, Blob scale, double eps, int axis,
                                  py::handle name) {
    return nn::batch_normalization(x, mean, var, offset, scale, eps, axis, name_of(name));
  });
  m.def("leaky_relu", [](Blob x, double a, py::handle name) { return nn::leaky_relu(x, a, name_of(name)); });
  m.def("elu", [](Blob x, double a, py::handle name) { return nn::elu(x, a, name_of(name)); });
  m.def("selu", [](Blob x, py::handle name) { return nn::selu(x, 1.6732632423543772848170429916717,
                                                               1.0507009873554804934193349852946, name_of(name)); });
  m.def("softplus", [](Blob x, py::handle name) { return nn::softplus(x, name_of(name)); });
  m.def("softsign", [](Blob x, py::handle name) { return nn::softsign(x, name_of(name)); });
  m.def("hard_sigmoid", [](Blob x, double a, double b, py::handle name) { return nn::hard_sigmoid(x, a, b, name_of(name)); });

  // layers: the activation is applied by the Python side, as the C++
  // layers apply it (last), so the graph is the same.
  m.def("dense", [](Blob x, int64_t units, bool use_bias, std::optional<Initializer> k, std::optional<Initializer> b,
                    py::handle name, bool trainable) {
    layers::DenseOptions o;
    o.use_bias = use_bias;
    o.kernel_initializer = k;
    o.bias_initializer = b;
    o.name = name_of(name);
    o.trainable = trainable;
    return layers::dense(x, units, o);
  });
  m.def("conv2d_layer", [](Blob x, int64_t filters, py::handle kernel, py::handle strides, py::handle pad,
                           const std::string& fmt, py::handle dil, int64_t groups, bool use_bias,
                           std::optional<Initializer> k, std::optional<Initializer> b, py::handle name, bool trainable) {
    layers::Conv2dOptions o;
    o.strides = size2(strides);
    o.padding = padding(pad);
    o.data_format = fmt;
    o.dilation_rate = size2(dil);
    o.groups = groups;
    o.use_bias = use_bias;
    o.kernel_initializer = k;
    o.bias_initializer = b;
    o.name = name_of(name);
    o.trainable = trainable;
    return layers::conv2d(x, filters, size2(kernel), o);
  });
  m.def("batch_normalization_layer", [](Blob x, int axis, double momentum, double eps, bool center, bool scale,
                                        py::handle name, bool trainable) {
    layers::BatchNormOptions o;
    o.axis = axis;
    o.momentum = momentum;
    o.epsilon = eps;
    o.center = center;
    o.scale = scale;
    o.name = name_of(name);
    o.trainable = trainable;
    return layers::batch_normalization(x, o);
  });

  // ---- optimizers and schedules (optimizer.h) ----
  py::class_<optimizer::Scheduler>(m, "Scheduler")
      .def("lr", &optimizer::Scheduler::lr)
      .def("__repr__", [](const optimizer::Scheduler& s) { return "<jobflow.Scheduler " + s.str() + ">"; });
  m.def("piecewise_constant_scheduler", [](std::vector<int64_t> boundaries, std::vector<double> values) {
    return optimizer::Scheduler(optimizer::PiecewiseConstantScheduler(std::move(boundaries), std::move(values)));
  });
  m.def("cosine_scheduler", [](double base_lr, int64_t steps, double alpha) {
    return optimizer::Scheduler(optimizer::CosineScheduler(base_lr, steps, alpha));
  });
  m.def("linear_warmup_scheduler", [](const optimizer::Scheduler& after, int64_t steps, double start) {
    return optimizer::Scheduler(optimizer::LinearWarmupScheduler(after, steps, start));
  });
  py::class_<optimizer::Optimizer, std::shared_ptr<optimizer::Optimizer>>(m, "Optimizer")
      .def("minimize", &optimizer::Optimizer::minimize)
      .def("__repr__", [](const optimizer::Optimizer& o) { return "<jobflow.Optimizer " + o.str() + ">"; });
  m.def("sgd", [](const optimizer::Scheduler& s, double momentum) -> std::shared_ptr<optimizer::Optimizer> {
    return std::make_shared<optimizer::SGD>(s, momentum);
  });
  m.def("adam", [](const optimizer::Scheduler& s, double b1, double b2, double eps) -> std::shared_ptr<optimizer::Optimizer> {
    return std::make_shared<optimizer::Adam>(s, b1, b2, eps);
  });

  // ---- placement scopes (graph.h) ----
  m.def("push_placement", [](std::string device, std::string ids) {
    if (device != "cpu" && device != "gpu" && device != "cuda")
      throw Error("[scope.placement] device must be \"cpu\" or \"gpu\", got \"" + device + "\"");
    if (device == "cuda") device = "gpu";
    detail::push_placement(Placement{std::move(device), std::move(ids)});
  });
  m.def("pop_placement", &detail::pop_placement);
  m.def("defining", [] { return current_graph() != nullptr; }, "whether a job function body is being defined");
  m.def("defining_train_job", &defining_train_job);

  // ---- FunctionConfig (job.h) ----
  py::class_<FunctionConfig>(m, "FunctionConfig")
      .def(py::init<>())
      .def("set_default_data_type", [](FunctionConfig& c, DType t) { c.default_data_type(t); })
      .def("set_default_placement", [](FunctionConfig& c, std::string d, std::string ids) {
        c.default_placement(std::move(d), std::move(ids));
      })
      .def("set_max_in_flight", [](FunctionConfig& c, size_t n) { c.max_in_flight(n); })
      .def("set_num_threads", [](FunctionConfig& c, int n) { c.num_threads(n); })
      .def("set_seed", [](FunctionConfig& c, uint64_t s) { c.seed(s); })
      .def("set_enable_fusion", [](FunctionConfig& c, bool on) { c.enable_fusion(on); })
      .def("set_enable_auto_mixed_precision", [](FunctionConfig& c, bool on) { c.enable_auto_mixed_precision(on); })
      .def("set_name", [](FunctionConfig& c, std::string n) { c.name(std::move(n)); })
      .def("set_summary_dir", [](FunctionConfig& c, std::string d) { c.summary_dir(std::move(d)); })
      .def_property_readonly("name", [](const FunctionConfig& c) { return c.name(); })
      .def_property_readonly("max_in_flight", [](const FunctionConfig& c) { return c.max_in_flight(); });
}

}  // namespace jobflow::python

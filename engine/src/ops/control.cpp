// Control flow: a branch chosen at call time (ONNX If whose condition is
// only known when the job runs, e.g. "no boxes left" in torchvision's
// batched NMS), and loops (ONNX Loop and Scan) whose body runs once per
// iteration.
//
// Each branch is a predict job of its own (a CompiledJob: its plans, its
// plan cache) taking the same inputs, the values of the outer graph it
// reads. The op reads its condition and runs one branch on the calling
// thread; as the branches' outputs may differ in size (an empty tensor
// against the kept boxes), the op's output shapes come from that run: it is
// cut like a data-dependent op (docs/architecture.md, segments), and its
// kernel sizes its outputs itself (Primitive::sizes_outputs).
#include <cstring>
#include <limits>

#include "jobflow/ops.h"
#include "jobflow/runtime.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

// A run's results into outputs sized for them.
void copy_results(const char* op, const std::vector<Tensor>& r, const std::vector<Tensor>& out) {
  for (size_t k = 0; k < out.size(); ++k) {
    if (r[k].shape() != out[k].shape())
      op_error(op, "output " + std::to_string(k) + " is " + shape_str(r[k].shape()) + ", " +
                       shape_str(out[k].shape()) + " was expected");
    if (r[k].nbytes() > 0) std::memcpy(out[k].raw(), r[k].raw(), r[k].nbytes());
  }
}

class If final : public Primitive {
 public:
  If(std::shared_ptr<CompiledJob> then_job, std::shared_ptr<CompiledJob> else_job)
      : then_(std::move(then_job)), else_(std::move(else_job)) {}
  OpKind kind() const override { return OpKind::If; }
  // Hands its inputs to the branch or body job: 16-bit floats pass (the
  // nodes inside run them in float32 between casts).
  bool stores_only() const override { return true; }
  Attrs attributes() const override {
    return {{"then_branch", then_->signature().job_name}, {"else_branch", else_->signature().job_name}};
  }
  bool differentiable_input(int) const override { return false; }
  bool output_shape_from_data() const override { return true; }
  bool sizes_outputs() const override { return true; }

  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    const Signature &ts = then_->signature(), &es = else_->signature();
    if (in.size() != ts.inputs.size() + 1)
      op_error("if", "takes the condition and " + std::to_string(ts.inputs.size()) + " inputs, got " +
                         std::to_string(in.size()) + " tensors");
    if (is_static(in[0].shape) && numel(in[0].shape) != 1)
      op_error("if", "the condition must hold one value, got " + spec_str(in[0]));
    for (size_t i = 1; i < in.size(); ++i)
      if (!specs_agree(in[i], ts.inputs[i - 1]))
        op_error("if", "input " + std::to_string(i) + " is " + spec_str(in[i]) + ", the branches take " +
                           spec_str(ts.inputs[i - 1]));
    std::vector<TensorSpec> out;
    for (size_t k = 0; k < ts.outputs.size(); ++k) {
      const TensorSpec &a = ts.outputs[k], &b = es.outputs[k];
      TensorSpec s = a;
      for (size_t d = 0; d < s.shape.size(); ++d)
        if (s.shape[d] != b.shape[d]) s.shape[d] = kDynamic;
      out.push_back(s);
    }
    return out;
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    std::vector<TensorSpec> r;
    for (const Tensor& t : run(v)) r.push_back({t.shape(), t.dtype()});
    return r;
  }
  std::vector<Tensor> eval_sized(const std::vector<Tensor>& in, ExecContext&) const override { return run(in); }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    copy_results("if", run(in), out);
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

  const CompiledJob& branch(bool then) const { return then ? *then_ : *else_; }

 private:
  std::vector<Tensor> run(const std::vector<Tensor>& in) const {
    if (!in[0].defined() || in[0].numel() != 1)
      op_error("if", "the condition must hold one value, got " + shape_str(in[0].defined() ? in[0].shape() : Shape{}));
    const bool c = in[0].at(0) != 0.0;
    return (c ? then_ : else_)->run_here(std::vector<Tensor>(in.begin() + 1, in.end()));
  }

  std::shared_ptr<CompiledJob> then_, else_;
};

// ---- helpers of the loops ----

// Bytes of the dims before `axis` (outer count) and after it (inner bytes).
std::pair<int64_t, int64_t> around(const Shape& s, int axis, DType dt) {
  int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(dt));
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) inner *= s[d];
  return {outer, inner};
}

// x[..., i, ...] along `axis`, as a tensor without that axis.
Tensor take(const Tensor& x, int axis, int64_t i) {
  Shape s = x.shape();
  const int64_t len = s[static_cast<size_t>(axis)];
  s.erase(s.begin() + axis);
  Tensor y(s, x.dtype());
  const auto [outer, inner] = around(x.shape(), axis, x.dtype());
  const auto* src = static_cast<const char*>(x.raw());
  auto* dst = static_cast<char*>(y.raw());
  for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * inner, src + (o * len + i) * inner, inner);
  return y;
}

// The elements stacked along a new `axis` (element t at position t, or
// count - 1 - t when reversed); `elem` is their spec when there are none.
Tensor stack(const char* op, const std::vector<Tensor>& xs, int axis, bool reverse, const TensorSpec& elem, int k) {
  Shape es = xs.empty() ? elem.shape : xs[0].shape();
  const DType dt = xs.empty() ? elem.dtype : xs[0].dtype();
  for (int64_t& d : es)
    if (d < 0) d = 0;  // no element: an empty output
  if (axis < 0 || axis > static_cast<int>(es.size()))
    op_error(op, "scan output " + std::to_string(k) + ": axis " + std::to_string(axis) + " is out of range for elements " +
                     shape_str(es));
  Shape s = es;
  const int64_t n = static_cast<int64_t>(xs.size());
  s.insert(s.begin() + axis, n);
  Tensor y(s, dt);
  const auto [outer, inner] = around(s, axis, dt);
  auto* dst = static_cast<char*>(y.raw());
  for (int64_t t = 0; t < n; ++t) {
    const Tensor& x = xs[static_cast<size_t>(t)];
    if (x.shape() != es || x.dtype() != dt)
      op_error(op, "scan output " + std::to_string(k) + " is " + spec_str({x.shape(), x.dtype()}) + " at iteration " +
                       std::to_string(t) + ", " + spec_str({es, dt}) + " before: its elements must agree");
    const int64_t at = reverse ? n - 1 - t : t;
    const auto* src = static_cast<const char*>(x.raw());
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + (o * n + at) * inner, src + o * inner, inner);
  }
  return y;
}

// A carried value or state as the body returns it, against the one it had
// on entry: the same dtype and rank (the size may change).
void check_carried(const char* op, const Tensor& now, const Tensor& was, size_t j) {
  if (now.dtype() != was.dtype() || now.ndim() != was.ndim())
    op_error(op, "the body returns " + spec_str({now.shape(), now.dtype()}) + " for carried value " + std::to_string(j) +
                     ", which entered as " + spec_str({was.shape(), was.dtype()}));
}

// The specs a body returns for its carried values, dims that may change
// between iterations made kDynamic (those where the body's output and the
// entering value differ).
TensorSpec carried_spec(const TensorSpec& in, const TensorSpec& body_out) {
  TensorSpec s = in;
  for (size_t d = 0; d < s.shape.size() && d < body_out.shape.size(); ++d)
    if (s.shape[d] != body_out.shape[d]) s.shape[d] = kDynamic;
  return s;
}

class Loop final : public Primitive {
 public:
  Loop(std::shared_ptr<CompiledJob> body, bool has_max, bool has_cond, size_t carried)
      : body_(std::move(body)), has_max_(has_max), has_cond_(has_cond), carried_(carried) {}
  OpKind kind() const override { return OpKind::Loop; }
  // Hands its inputs to the branch or body job: 16-bit floats pass (the
  // nodes inside run them in float32 between casts).
  bool stores_only() const override { return true; }
  Attrs attributes() const override {
    return {{"body", body_->signature().job_name},
            {"has_max_trips", int64_t{has_max_}},
            {"has_cond", int64_t{has_cond_}},
            {"carried", static_cast<int64_t>(carried_)}};
  }
  bool differentiable_input(int) const override { return false; }
  bool output_shape_from_data() const override { return true; }
  bool sizes_outputs() const override { return true; }

  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    const Signature& b = body_->signature();
    const size_t lead = static_cast<size_t>(has_max_) + has_cond_;
    if (in.size() < lead + carried_ || b.inputs.size() != 2 + in.size() - lead)
      op_error("loop", "the body '" + b.job_name + "' takes " + std::to_string(b.inputs.size()) +
                           " tensors (iteration, condition, carried values, outer values); the node gives " +
                           std::to_string(in.size()) + " inputs");
    if (b.outputs.size() < 1 + carried_)
      op_error("loop", "the body '" + b.job_name + "' returns " + std::to_string(b.outputs.size()) +
                           " tensors, fewer than the condition and " + std::to_string(carried_) + " carried values");
    if (has_max_ && (in[0].dtype != DType::Int64 || (is_static(in[0].shape) && numel(in[0].shape) != 1)))
      op_error("loop", "the trip count must be one int64, got " + spec_str(in[0]));
    if (has_cond_ && (in[has_max_].dtype != DType::Bool || (is_static(in[has_max_].shape) && numel(in[has_max_].shape) != 1)))
      op_error("loop", "the condition must be one bool, got " + spec_str(in[has_max_]));
    for (size_t j = lead; j < in.size(); ++j)
      if (!specs_agree(in[j], b.inputs[2 + j - lead]))
        op_error("loop", "input " + std::to_string(j) + " is " + spec_str(in[j]) + ", the body takes " +
                             spec_str(b.inputs[2 + j - lead]));
    std::vector<TensorSpec> out;
    for (size_t j = 0; j < carried_; ++j) out.push_back(carried_spec(in[lead + j], b.outputs[1 + j]));
    for (size_t k = 1 + carried_; k < b.outputs.size(); ++k) {
      TensorSpec s = b.outputs[k];
      s.shape.insert(s.shape.begin(), kDynamic);
      out.push_back(s);
    }
    return out;
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    std::vector<TensorSpec> r;
    for (const Tensor& t : run(v)) r.push_back({t.shape(), t.dtype()});
    return r;
  }
  std::vector<Tensor> eval_sized(const std::vector<Tensor>& in, ExecContext&) const override { return run(in); }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    copy_results("loop", run(in), out);
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

  const CompiledJob& body() const { return *body_; }
  bool has_max() const { return has_max_; }
  bool has_cond() const { return has_cond_; }

 private:
  std::vector<Tensor> run(const std::vector<Tensor>& in) const {
    size_t k = 0;
    int64_t max = std::numeric_limits<int64_t>::max();
    if (has_max_) {
      const Tensor& m = in[k++];
      if (m.numel() != 1 || m.dtype() != DType::Int64) op_error("loop", "the trip count must be one int64");
      max = m.data<int64_t>()[0];
    }
    bool cond = true;
    if (has_cond_) {
      const Tensor& c = in[k++];
      if (c.numel() != 1) op_error("loop", "the condition must hold one value, got " + shape_str(c.shape()));
      cond = c.at(0) != 0.0;
    }
    std::vector<Tensor> v(in.begin() + static_cast<long>(k), in.begin() + static_cast<long>(k + carried_));
    const std::vector<Tensor> outer(in.begin() + static_cast<long>(k + carried_), in.end());
    const Signature& b = body_->signature();
    const size_t scans = b.outputs.size() - 1 - carried_;
    std::vector<std::vector<Tensor>> elems(scans);
    for (int64_t i = 0; i < max && cond; ++i) {
      std::vector<Tensor> args{Tensor::scalar<int64_t>(i), Tensor::scalar<bool>(cond)};
      args.insert(args.end(), v.begin(), v.end());
      args.insert(args.end(), outer.begin(), outer.end());
      std::vector<Tensor> r = body_->run_here(std::move(args));
      if (has_cond_) {
        if (r[0].numel() != 1) op_error("loop", "the body's condition must hold one value, got " + shape_str(r[0].shape()));
        cond = r[0].at(0) != 0.0;
      }
      for (size_t j = 0; j < carried_; ++j) {
        check_carried("loop", r[1 + j], v[j], j);
        v[j] = r[1 + j];
      }
      for (size_t s = 0; s < scans; ++s) elems[s].push_back(r[1 + carried_ + s]);
    }
    std::vector<Tensor> out = v;
    for (size_t s = 0; s < scans; ++s)
      out.push_back(stack("loop", elems[s], 0, false, b.outputs[1 + carried_ + s], static_cast<int>(s)));
    return out;
  }

  std::shared_ptr<CompiledJob> body_;
  bool has_max_, has_cond_;
  size_t carried_;
};

class Scan final : public Primitive {
 public:
  Scan(std::shared_ptr<CompiledJob> body, size_t states, size_t scanned, ScanOptions o)
      : body_(std::move(body)), states_(states), scanned_(scanned), o_(std::move(o)) {
    const Signature& b = body_->signature();
    for (const TensorSpec& s : b.inputs) static_ = static_ && is_static(s.shape);
    for (const TensorSpec& s : b.outputs) static_ = static_ && is_static(s.shape);
  }
  OpKind kind() const override { return OpKind::Scan; }
  // Hands its inputs to the branch or body job: 16-bit floats pass (the
  // nodes inside run them in float32 between casts).
  bool stores_only() const override { return true; }
  Attrs attributes() const override {
    auto ints = [](const std::vector<bool>& v) { return std::vector<int64_t>(v.begin(), v.end()); };
    return {{"body", body_->signature().job_name},
            {"states", static_cast<int64_t>(states_)},
            {"scanned", static_cast<int64_t>(scanned_)},
            {"input_axes", o_.input_axes},
            {"input_reverse", ints(o_.input_reverse)},
            {"output_axes", o_.output_axes},
            {"output_reverse", ints(o_.output_reverse)}};
  }
  bool differentiable_input(int) const override { return false; }
  // A body whose shapes are all known at definition gives the outputs'
  // shapes from the inputs' (an ordinary node); otherwise its run sizes
  // them (a cut).
  bool output_shape_from_data() const override { return !static_; }
  bool sizes_outputs() const override { return !static_; }

  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    const Signature& b = body_->signature();
    if (in.size() < states_ + scanned_ || b.inputs.size() != in.size())
      op_error("scan", "the body '" + b.job_name + "' takes " + std::to_string(b.inputs.size()) +
                           " tensors (states, slices, outer values); the node gives " + std::to_string(in.size()));
    if (b.outputs.size() < states_)
      op_error("scan", "the body '" + b.job_name + "' returns fewer tensors than the " + std::to_string(states_) +
                           " states");
    int64_t len = kDynamic;
    bool first = true;
    for (size_t j = 0; j < scanned_; ++j) {
      const TensorSpec& x = in[states_ + j];
      const int ax = axis_of_input(j, x.shape.size());
      const int64_t d = x.shape[static_cast<size_t>(ax)];
      if (!first && !dims_agree(d, len))
        op_error("scan", "scanned input " + std::to_string(j) + " " + spec_str(x) + " has " + std::to_string(d) +
                             " steps along axis " + std::to_string(ax) + ", the others " + std::to_string(len));
      if (first || len < 0) len = d;
      first = false;
      TensorSpec slice = x;
      slice.shape.erase(slice.shape.begin() + ax);
      if (!specs_agree(slice, b.inputs[states_ + j]))
        op_error("scan", "a slice of scanned input " + std::to_string(j) + " is " + spec_str(slice) +
                             ", the body takes " + spec_str(b.inputs[states_ + j]));
    }
    for (size_t j = 0; j < in.size(); ++j)
      if ((j < states_ || j >= states_ + scanned_) && !specs_agree(in[j], b.inputs[j]))
        op_error("scan", "input " + std::to_string(j) + " is " + spec_str(in[j]) + ", the body takes " +
                             spec_str(b.inputs[j]));
    std::vector<TensorSpec> out;
    for (size_t j = 0; j < states_; ++j) out.push_back(carried_spec(in[j], b.outputs[j]));
    for (size_t k = states_; k < b.outputs.size(); ++k) {
      TensorSpec s = b.outputs[k];
      const size_t idx = k - states_;
      const int64_t a = idx < o_.output_axes.size() ? o_.output_axes[idx] : 0;
      const int r = static_cast<int>(s.shape.size()) + 1;
      if (a < -r || a >= r) op_error("scan", "output axis " + std::to_string(a) + " is out of range for scan output " + std::to_string(idx));
      s.shape.insert(s.shape.begin() + (a < 0 ? a + r : a), len);
      out.push_back(s);
    }
    return out;
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    std::vector<TensorSpec> r;
    for (const Tensor& t : run(v)) r.push_back({t.shape(), t.dtype()});
    return r;
  }
  std::vector<Tensor> eval_sized(const std::vector<Tensor>& in, ExecContext&) const override { return run(in); }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    copy_results("scan", run(in), out);
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

  const CompiledJob& body() const { return *body_; }
  const ScanOptions& options() const { return o_; }

 private:
  int axis_of_input(size_t j, size_t rank) const {
    const int64_t a = j < o_.input_axes.size() ? o_.input_axes[j] : 0;
    const int64_t r = static_cast<int64_t>(rank);
    if (a < -r || a >= r)
      op_error("scan", "input axis " + std::to_string(a) + " is out of range for scanned input " + std::to_string(j) +
                           " of rank " + std::to_string(r));
    return static_cast<int>(a < 0 ? a + r : a);
  }

  std::vector<Tensor> run(const std::vector<Tensor>& in) const {
    std::vector<Tensor> states(in.begin(), in.begin() + static_cast<long>(states_));
    const std::vector<Tensor> outer(in.begin() + static_cast<long>(states_ + scanned_), in.end());
    int64_t len = 0;
    std::vector<int> axes;
    for (size_t j = 0; j < scanned_; ++j) {
      const Tensor& x = in[states_ + j];
      axes.push_back(axis_of_input(j, static_cast<size_t>(x.ndim())));
      const int64_t d = x.shape()[static_cast<size_t>(axes.back())];
      if (j > 0 && d != len)
        op_error("scan", "scanned input " + std::to_string(j) + " has " + std::to_string(d) + " steps, input 0 " +
                             std::to_string(len));
      len = d;
    }
    const Signature& b = body_->signature();
    const size_t outs = b.outputs.size() - states_;
    std::vector<std::vector<Tensor>> elems(outs);
    for (int64_t t = 0; t < len; ++t) {
      std::vector<Tensor> args = states;
      for (size_t j = 0; j < scanned_; ++j) {
        const bool rev = j < o_.input_reverse.size() && o_.input_reverse[j];
        args.push_back(take(in[states_ + j], axes[j], rev ? len - 1 - t : t));
      }
      args.insert(args.end(), outer.begin(), outer.end());
      std::vector<Tensor> r = body_->run_here(std::move(args));
      for (size_t j = 0; j < states_; ++j) {
        check_carried("scan", r[j], states[j], j);
        states[j] = r[j];
      }
      for (size_t k = 0; k < outs; ++k) elems[k].push_back(r[states_ + k]);
    }
    std::vector<Tensor> out = states;
    for (size_t k = 0; k < outs; ++k) {
      const int64_t r = static_cast<int64_t>(b.outputs[states_ + k].shape.size()) + 1;
      int64_t a = k < o_.output_axes.size() ? o_.output_axes[k] : 0;
      if (a < 0) a += r;
      const bool rev = k < o_.output_reverse.size() && o_.output_reverse[k];
      out.push_back(stack("scan", elems[k], static_cast<int>(a), rev, b.outputs[states_ + k], static_cast<int>(k)));
    }
    return out;
  }

  std::shared_ptr<CompiledJob> body_;
  size_t states_, scanned_;
  ScanOptions o_;
  bool static_ = true;
};

// A body job: a predict job.
void check_body(const char* op, const CompiledJob* body) {
  if (!body) throw Error(std::string("[") + op + "] the body must be a job");
  if (body->signature().type != JobType::Predict)
    throw Error(std::string("[") + op + "] the body '" + body->signature().job_name + "' must be a predict job");
}

}  // namespace

std::vector<Blob> if_else(Blob cond, const std::vector<Blob>& inputs, std::shared_ptr<CompiledJob> then_job,
                          std::shared_ptr<CompiledJob> else_job, const std::string& name) {
  if (!then_job || !else_job) throw Error("[if] both branches must be jobs");
  const Signature &ts = then_job->signature(), &es = else_job->signature();
  if (ts.type != JobType::Predict || es.type != JobType::Predict)
    throw Error("[if] the branches must be predict jobs ('" + ts.job_name + "', '" + es.job_name + "')");
  if (ts.inputs.size() != inputs.size() || es.inputs.size() != inputs.size())
    throw Error("[if] the branches '" + ts.job_name + "' and '" + es.job_name + "' take " +
                std::to_string(ts.inputs.size()) + " and " + std::to_string(es.inputs.size()) + " inputs; " +
                std::to_string(inputs.size()) + " are given");
  if (ts.outputs.size() != es.outputs.size())
    throw Error("[if] branch '" + ts.job_name + "' returns " + std::to_string(ts.outputs.size()) + " tensors, '" +
                es.job_name + "' " + std::to_string(es.outputs.size()));
  for (size_t k = 0; k < ts.outputs.size(); ++k)
    if (ts.outputs[k].dtype != es.outputs[k].dtype || ts.outputs[k].shape.size() != es.outputs[k].shape.size())
      throw Error("[if] output " + std::to_string(k) + " is " + spec_str(ts.outputs[k]) + " in '" + ts.job_name +
                  "' and " + spec_str(es.outputs[k]) + " in '" + es.job_name + "': the branches must agree in "
                  "dtype and rank");
  std::vector<Blob> in{cond};
  in.insert(in.end(), inputs.begin(), inputs.end());
  return internal::add_node(std::make_shared<If>(std::move(then_job), std::move(else_job)), in, name);
}

std::vector<Blob> loop(Blob max_trips, Blob cond, const std::vector<Blob>& carried, const std::vector<Blob>& outer,
                       std::shared_ptr<CompiledJob> body, const std::string& name) {
  check_body("loop", body.get());
  if (!max_trips.defined() && !cond.defined())
    throw Error("[loop] neither a trip count nor a condition: the loop would not end");
  std::vector<Blob> in;
  if (max_trips.defined()) in.push_back(max_trips);
  if (cond.defined()) in.push_back(cond);
  in.insert(in.end(), carried.begin(), carried.end());
  in.insert(in.end(), outer.begin(), outer.end());
  const bool m = max_trips.defined(), c = cond.defined();
  return internal::add_node(std::make_shared<Loop>(std::move(body), m, c, carried.size()), in, name);
}

std::vector<Blob> scan(const std::vector<Blob>& states, const std::vector<Blob>& scanned, const std::vector<Blob>& outer,
                       std::shared_ptr<CompiledJob> body, const ScanOptions& options, const std::string& name) {
  check_body("scan", body.get());
  if (scanned.empty()) throw Error("[scan] needs at least one scanned input");
  std::vector<Blob> in = states;
  in.insert(in.end(), scanned.begin(), scanned.end());
  in.insert(in.end(), outer.begin(), outer.end());
  return internal::add_node(std::make_shared<Scan>(std::move(body), states.size(), scanned.size(), options), in, name);
}

const CompiledJob* internal::loop_body(const Primitive& op, bool* has_max_trips, bool* has_cond) {
  auto* p = dynamic_cast<const Loop*>(&op);
  if (!p) return nullptr;
  *has_max_trips = p->has_max();
  *has_cond = p->has_cond();
  return &p->body();
}

const CompiledJob* internal::scan_body(const Primitive& op, ScanOptions* options) {
  auto* p = dynamic_cast<const Scan*>(&op);
  if (!p) return nullptr;
  *options = p->options();
  return &p->body();
}

const CompiledJob* internal::if_branch(const Primitive& op, bool then) {
  auto* p = dynamic_cast<const If*>(&op);
  return p ? &p->branch(then) : nullptr;
}

}  // namespace jobflow

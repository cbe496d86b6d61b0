// Control flow: a branch chosen at call time (ONNX If whose condition is
// only known when the job runs, e.g. "no boxes left" in torchvision's
// batched NMS).
//
// Each branch is a predict job of its own (a CompiledJob: its plans, its
// plan cache) taking the same inputs, the values of the outer graph it
// reads. The op reads its condition and runs one branch on the calling
// thread; as the branches' outputs may differ in size (an empty tensor
// against the kept boxes), the op's output shapes come from that run: it is
// cut like a data-dependent op (docs/architecture.md, segments), and its
// kernel sizes its outputs itself (Primitive::sizes_outputs).
#include <algorithm>

#include "jobflow/ops.h"
#include "jobflow/runtime.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

class If final : public Primitive {
 public:
  If(std::shared_ptr<CompiledJob> then_job, std::shared_ptr<CompiledJob> else_job)
      : then_(std::move(then_job)), else_(std::move(else_job)) {}
  OpKind kind() const override { return OpKind::If; }
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
    std::vector<Tensor> r = run(in);
    for (size_t k = 0; k < out.size(); ++k) {
      if (r[k].shape() != out[k].shape())
        op_error("if", "output " + std::to_string(k) + " is " + shape_str(r[k].shape()) + ", " +
                           shape_str(out[k].shape()) + " was expected");
      std::copy_n(static_cast<const char*>(r[k].raw()), r[k].nbytes(), static_cast<char*>(out[k].raw()));
    }
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

const CompiledJob* internal::if_branch(const Primitive& op, bool then) {
  auto* p = dynamic_cast<const If*>(&op);
  return p ? &p->branch(then) : nullptr;
}

}  // namespace jobflow

// Definition of job functions: placeholders, variables, the objective, and
// the step that turns the body's graph into a compiled job.
#include "jobflow/job.h"
#include "jobflow/session.h"

#include <atomic>
#include <cstring>
#include <map>

#include "jobflow/backend.h"
#include "compiler.h"
#include "jobflow/ops.h"
#include "jobflow/optimizer.h"
#include "jobflow/summary.h"
#include "ops_internal.h"
#include "session_internal.h"
#include "state_ops.h"

namespace jobflow {
namespace detail {

struct JobBuilder::State {
  JobType type;
  FunctionConfig config;
  std::vector<PlaceholderSpec> specs;
  std::shared_ptr<Graph> graph = std::make_shared<Graph>();
  std::vector<Blob> inputs;
  std::vector<std::string> input_names;
  std::vector<std::vector<std::string>> input_dim_names;
  std::map<std::string, Blob> variables;  // name -> blob in this graph
  Blob loss;
  std::shared_ptr<optimizer::Optimizer> opt;
  std::unique_ptr<GraphScope> scope;
  JobBuilder* prev = nullptr;
  std::string variable_scope;
};

namespace {
thread_local JobBuilder* t_builder = nullptr;
thread_local JobBuilder::State* t_state = nullptr;
std::atomic<int> g_job_counter{0};

void flatten_specs(const PlaceholderSpec& p, const std::string& name, DType def, std::vector<TensorSpec>& specs,
                   std::vector<std::string>& names, std::vector<std::vector<std::string>>& dim_names) {
  if (p.kind == Structure::Kind::Tuple) {
    for (size_t i = 0; i < p.children.size(); ++i)
      flatten_specs(p.children[i], p.children[i].name.empty() ? name + "[" + std::to_string(i) + "]" : p.children[i].name,
                    def, specs, names, dim_names);
    return;
  }
  for (int64_t d : p.shape)
    if (d <= 0 && d != kDynamic)
      throw Error("[global_function] placeholder '" + name + "' has shape " + shape_str(p.shape) +
                  "; every dimension must be > 0, or -1 for a size known at each call");
  if (!p.dim_names.empty() && p.dim_names.size() != p.shape.size())
    throw Error("[global_function] placeholder '" + name + "' names " + std::to_string(p.dim_names.size()) +
                " dims of its shape " + shape_str(p.shape));
  std::vector<std::string> dn = p.dim_names;
  if (p.leaf == Structure::Leaf::ListListNumpy && !dn.empty()) dn.insert(dn.begin(), "");
  dim_names.push_back(dn);
  if (p.leaf == Structure::Leaf::ListListNumpy) {
    if (p.items <= 0)
      throw Error("[global_function] ListListNumpy placeholder '" + name + "' needs items > 0");
    Shape s{p.items};
    s.insert(s.end(), p.shape.begin(), p.shape.end());
    specs.push_back({s, p.dtype.value_or(def)});
  } else {
    specs.push_back({p.shape, p.dtype.value_or(def)});
  }
  names.push_back(name);
}

Structure structure_of(const PlaceholderSpec& p, int& next) {
  Structure s;
  if (p.kind == Structure::Kind::Tuple) {
    s.kind = Structure::Kind::Tuple;
    for (auto& c : p.children) s.children.push_back(structure_of(c, next));
  } else {
    s.kind = Structure::Kind::Leaf;
    s.leaf = p.leaf;
    s.index = next++;
  }
  return s;
}

void fill_dtype(PlaceholderSpec& p, DType def) {
  if (!p.dtype) p.dtype = def;
  for (auto& c : p.children) fill_dtype(c, def);
}

// The mean of a float tensor, read in place.
double mean_value(const Tensor& t) {
  const int64_t n = t.numel();
  double sum = 0;
  if (t.dtype() == DType::Float64) {
    const double* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i) sum += p[i];
  } else {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) sum += p[i];
  }
  return n ? sum / static_cast<double>(n) : 0.0;
}

// FunctionConfig::summary_dir: "loss" and "learning_rate" at every step.
void install_summary(CompiledJob& job, const std::string& dir, int loss_index, optimizer::Scheduler schedule) {
  auto writer = std::make_shared<summary::FileWriter>(dir);
  job.set_step_observer([writer, loss_index, schedule](int64_t step, const std::vector<Tensor>& result) {
    // The plan ran step `step` (from 1) with the rate of its step - 1.
    writer->scalars({{"loss", mean_value(result[loss_index])}, {"learning_rate", schedule.lr(step - 1)}}, step);
    writer->flush();
  });
}

// FunctionConfig::accuracy: the declared returns must be integer labels
// (B,) and float logits (B, C) of one batch; records them in `sig`.
void check_accuracy(const std::string& job, std::pair<int, int> declared, Signature& sig) {
  const auto [labels, logits] = declared;
  if (labels < 0 && logits < 0) return;
  const std::string what = "[global_function] job '" + job + "': accuracy(" + std::to_string(labels) + ", " +
                           std::to_string(logits) + ")";
  const int n = static_cast<int>(sig.outputs.size());
  if (labels < 0 || logits < 0 || labels >= n || logits >= n || labels == logits)
    throw Error(what + " needs two different returns of the " + std::to_string(n) + " the job has");
  const TensorSpec& l = sig.outputs[labels];
  const TensorSpec& z = sig.outputs[logits];
  if (is_floating(l.dtype) || l.shape.size() != 1)
    throw Error(what + ": return " + std::to_string(labels) + " is " + spec_str(l) + ", not (B,) integer labels");
  if (!is_floating(z.dtype) || z.shape.size() != 2)
    throw Error(what + ": return " + std::to_string(logits) + " is " + spec_str(z) + ", not (B, C) float logits");
  if (l.shape[0] != z.shape[0])
    throw Error(what + ": labels " + spec_str(l) + " and logits " + spec_str(z) + " differ in the batch");
  sig.accuracy_labels = labels;
  sig.accuracy_logits = logits;
}

void name_specs(std::vector<PlaceholderSpec>& specs, DType def) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name.empty()) specs[i].name = "arg" + std::to_string(i);
    fill_dtype(specs[i], def);
  }
}
}  // namespace

JobBuilder::JobBuilder(JobType type, const FunctionConfig& config, const std::vector<PlaceholderSpec>& specs)
    : st_(std::make_unique<State>()) {
  st_->type = type;
  st_->config = config;
  {
    Device d;
    std::string why;
    if (!parse_device(config.default_placement().device, &d, &why))
      throw Error("[global_function] default_placement: " + why);
    st_->config.default_placement(d.tag, config.default_placement().ids);
  }
  st_->specs = specs;
  name_specs(st_->specs, config.default_data_type());
  if (st_->config.name().empty()) st_->config.name("job" + std::to_string(g_job_counter++));
  std::vector<TensorSpec> flat;
  for (auto& p : st_->specs)
    flatten_specs(p, p.name, config.default_data_type(), flat, st_->input_names, st_->input_dim_names);
  if (type == JobType::Train)
    for (size_t i = 0; i < flat.size(); ++i)
      if (!is_static(flat[i].shape))
        throw Error("[global_function] train job '" + st_->config.name() + "': placeholder '" + st_->input_names[i] +
                    "' has shape " + shape_str(flat[i].shape) + "; train jobs need fixed shapes (-1 is for predict jobs)");
  for (size_t i = 0; i < flat.size(); ++i) {
    Graph& g = *st_->graph;
    auto op = std::make_shared<internal::PlaceholderOp>(static_cast<int>(i), flat[i], st_->input_names[i]);
    st_->inputs.push_back(g.add(op, {}, st_->input_names[i])[0]);
  }
}

JobBuilder::~JobBuilder() = default;

Blob JobBuilder::input(int i) const { return st_->inputs.at(i); }
void JobBuilder::set_variable_scope(std::string scope) { st_->variable_scope = std::move(scope); }
const std::vector<PlaceholderSpec>& JobBuilder::specs() const { return st_->specs; }

void JobBuilder::enter() {
  st_->prev = t_builder;
  t_builder = this;
  t_state = st_.get();
  st_->scope = std::make_unique<GraphScope>(st_->graph.get());
  detail::push_placement(st_->config.default_placement());
}

void JobBuilder::leave() {
  detail::pop_placement();
  st_->scope.reset();
  t_builder = st_->prev;
  t_state = t_builder ? t_builder->st_.get() : nullptr;
}

std::shared_ptr<CompiledJob> JobBuilder::finish(std::vector<Blob> outputs, Structure s, bool callback,
                                                std::vector<std::string> output_names) {
  State& S = *st_;
  const std::string& job = S.config.name();
  std::vector<int> updates;
  const size_t forward_nodes = S.graph->nodes.size();
  std::vector<std::string> trainable_names;
  if (S.type == JobType::Train) {
    if (!S.loss.defined())
      throw Error("[global_function] train job '" + job +
                  "' never called optimizer.minimize(loss) in its body; use flow::Predict for a job that only "
                  "computes");
    enter();
    try {
      Blob loss = S.loss;
      if (!is_floating(loss.dtype()))
        throw Error("[optimizer.minimize] loss must be float, got " + spec_str(loss.spec()));
      // minimize() of a non-scalar loss minimizes its mean (OneFlow).
      if (numel(loss.shape()) != 1 || !loss.shape().empty()) loss = reduce_mean(loss);
      // Variables the loss depends on (walking back from it): only those
      // get an update; others would still be moved by momentum or Adam.
      std::vector<char> reaches(S.graph->blobs.size(), 0);
      {
        std::vector<int> stack{loss.id()};
        while (!stack.empty()) {
          const int b = stack.back();
          stack.pop_back();
          if (reaches[b]) continue;
          reaches[b] = 1;
          const int p = S.graph->blobs[b].producer;
          if (p >= 0)
            for (int in : S.graph->nodes[p].inputs) stack.push_back(in);
        }
      }
      std::vector<Blob> vars;
      std::vector<std::string> names;
      for (auto& [name, b] : S.variables) {
        if (!reaches[b.id()]) continue;
        auto* v = dynamic_cast<const internal::VariableOp*>(S.graph->nodes[S.graph->blobs[b.id()].producer].op.get());
        if (v && v->trainable() && is_floating(b.dtype())) {
          vars.push_back(b);
          names.push_back(name);
        }
      }
      if (vars.empty()) throw Error("[optimizer.minimize] train job '" + job + "' has no trainable variables");
      trainable_names = names;
      std::vector<Blob> grads = gradients(loss, vars);
      const size_t before = S.graph->nodes.size();
      for (size_t i = 0; i < vars.size(); ++i) S.opt->add_update(*S.graph, vars[i], grads[i], names[i]);
      for (size_t i = before; i < S.graph->nodes.size(); ++i)
        if (S.graph->nodes[i].op->has_side_effects()) updates.push_back(static_cast<int>(i));
    } catch (...) {
      leave();
      throw;
    }
    leave();
  } else if (S.loss.defined()) {
    throw Error("[global_function] predict job '" + job + "' called optimizer.minimize(); use flow::Train");
  }

  Signature sig;
  sig.job_name = job;
  sig.type = S.type;
  sig.input_names = S.input_names;
  for (auto& n : S.input_dim_names)
    if (!n.empty()) {
      sig.input_dim_names = S.input_dim_names;
      break;
    }
  for (auto& b : S.inputs) sig.inputs.push_back(b.spec());
  int next = 0;
  sig.input_structure.kind = Structure::Kind::Tuple;
  for (auto& p : S.specs) sig.input_structure.children.push_back(structure_of(p, next));
  for (auto& b : outputs) {
    if (b.graph() != S.graph.get())
      throw Error("[global_function] job '" + job + "' returns a blob that is not part of its own graph");
    sig.outputs.push_back(b.spec());
  }
  sig.output_structure = std::move(s);
  if (!output_names.empty() && output_names.size() != outputs.size())
    throw Error("[global_function] job '" + job + "': " + std::to_string(output_names.size()) + " output names for " +
                std::to_string(outputs.size()) + " outputs");
  sig.output_names = std::move(output_names);
  sig.callback = callback;
  if (S.loss.defined())
    for (size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i].id() == S.loss.id()) {
        sig.loss_output = static_cast<int>(i);
        break;
      }
  check_accuracy(job, S.config.accuracy(), sig);

  // summary_dir: checked before compiling, so a refused job leaves no file.
  int summary_loss = -1;
  if (!S.config.summary_dir().empty()) {
    if (S.type != JobType::Train)
      throw Error("[global_function] summary_dir(\"" + S.config.summary_dir() + "\"): job '" + job +
                  "' is a predict job; summary_dir logs a train job's loss and learning rate");
    summary_loss = sig.loss_output;
    if (summary_loss < 0)
      throw Error("[global_function] summary_dir(\"" + S.config.summary_dir() + "\"): train job '" + job +
                  "' does not return its loss (the blob given to minimize()); return it to log it");
  }

  PlanOptions po;
  po.job_name = job;
  po.type = S.type;
  po.fusion = S.config.enable_fusion();
  po.bf16 = S.config.enable_auto_mixed_precision();
  po.threads = S.config.num_threads();
  if (po.threads <= 0)
    if (const char* env = std::getenv("JOBFLOW_NUM_THREADS"); env && *env) po.threads = std::max(0, std::atoi(env));
  po.seed = S.config.seed();
  if (S.opt) po.schedule = S.opt->scheduler();
  if (S.type == JobType::Train) {
    // OneFlow's step counter: a variable, so checkpoints carry it and a
    // resumed job continues its learning-rate schedule.
    po.step_variable = S.variable_scope + session::train_step_variable(job);
    internal::VariableStore::get().define(po.step_variable, {{1}, DType::Int64}, zeros_initializer(), false);
  }
  std::vector<int> in_ids, out_ids;
  for (auto& b : S.inputs) in_ids.push_back(b.id());
  for (auto& b : outputs) out_ids.push_back(b.id());
  // The compiler rewrites its graph (fusion): give it a copy, so the job's
  // definition keeps the body as written (export, inspection). A job with
  // shapes known only at call time compiles its plans per call shape.
  std::shared_ptr<CompiledJob> compiled;
  if (Program::needs_specialization(*S.graph, in_ids)) {
    PlanCacheLimits limits;
    limits.max_plans = S.config.plan_cache_size();
    limits.max_bytes = S.config.plan_cache_bytes();
    auto program = Program::dynamic(std::make_shared<Graph>(*S.graph), in_ids, out_ids, updates, po, limits);
    compiled = std::make_shared<CompiledJob>(program, sig, S.config.max_in_flight(), S.config.num_threads());
  } else {
    auto plan = Plan::compile(std::make_shared<Graph>(*S.graph), in_ids, out_ids, updates, po);
    compiled = std::make_shared<CompiledJob>(plan, sig, S.config.max_in_flight(), S.config.num_threads());
  }
  JobDefinition def;
  def.graph = S.graph;
  def.forward_nodes = forward_nodes;
  def.inputs = in_ids;
  def.outputs = out_ids;
  def.loss = S.loss.defined() ? S.loss.id() : -1;
  def.optimizer = S.opt;
  def.trainable = trainable_names;
  def.seed = S.config.seed();
  def.default_device = S.config.default_placement().device;
  def.bf16 = S.config.enable_auto_mixed_precision();
  def.variable_scope = S.variable_scope;
  compiled->set_definition(std::move(def));
  if (summary_loss >= 0) install_summary(*compiled, S.config.summary_dir(), summary_loss, S.opt->scheduler());
  std::weak_ptr<CompiledJob> weak = compiled;
  internal::VariableStore::get().add_syncer(
      [weak] {
        auto j = weak.lock();
        if (!j) return false;
        j->sync();
        return true;
      },
      weak);
  return compiled;
}

void set_objective(Blob loss, std::shared_ptr<optimizer::Optimizer> opt) {
  if (!t_state) throw Error("[optimizer.minimize] called outside a job function body");
  if (!loss.defined() || loss.graph() != t_state->graph.get())
    throw Error("[optimizer.minimize] the loss is not a blob of the job being defined");
  if (t_state->type != JobType::Train)
    throw Error("[optimizer.minimize] job '" + t_state->config.name() + "' is a predict job; define it with flow::Train");
  if (t_state->loss.defined()) throw Error("[optimizer.minimize] called twice in job '" + t_state->config.name() + "'");
  t_state->loss = loss;
  t_state->opt = std::move(opt);
}

// ---- call-time argument packing ----
namespace {
std::string expect_text(const PlaceholderSpec& spec) {
  return shape_str(spec.shape) + (spec.dtype ? std::string(" ") + dtype_name(*spec.dtype) : "");
}
}  // namespace

void arity_error(const std::string& job, size_t want, size_t got) {
  throw Error("[" + job + "] takes " + std::to_string(want) + " arguments, got " + std::to_string(got));
}
void tuple_arg_error(const std::string& job, const PlaceholderSpec& spec, size_t got) {
  throw Error("[" + job + "] argument '" + spec.name + "': a tuple of " + std::to_string(got) +
              " tensors was given for placeholder " +
              (spec.kind == Structure::Kind::Tuple ? "tuple of " + std::to_string(spec.children.size())
                                                   : "Numpy " + expect_text(spec)));
}

void pack_arg(const Tensor& t, const PlaceholderSpec& spec, std::vector<Tensor>& flat, const std::string& job) {
  if (spec.kind != Structure::Kind::Leaf || spec.leaf != Structure::Leaf::Numpy)
    throw Error("[" + job + "] argument '" + spec.name + "': a Tensor was given but the placeholder is " +
                (spec.kind == Structure::Kind::Tuple ? std::string("a tuple")
                 : spec.leaf == Structure::Leaf::ListNumpy ? std::string("ListNumpy (a list, one tensor per device)")
                                                           : std::string("ListListNumpy (per device, a list of tensors)")));
  flat.push_back(t);
}

void pack_arg(const std::vector<Tensor>& v, const PlaceholderSpec& spec, std::vector<Tensor>& flat, const std::string& job) {
  if (spec.kind == Structure::Kind::Tuple) {
    if (v.size() != spec.children.size()) tuple_arg_error(job, spec, v.size());
    for (size_t i = 0; i < v.size(); ++i) pack_arg(v[i], spec.children[i], flat, job);
    return;
  }
  if (spec.leaf != Structure::Leaf::ListNumpy)
    throw Error("[" + job + "] argument '" + spec.name + "': a list of tensors was given but the placeholder is " +
                (spec.leaf == Structure::Leaf::Numpy ? "Numpy (one tensor)" : "ListListNumpy (a list of lists)"));
  if (v.size() != 1)
    throw Error("[" + job + "] argument '" + spec.name + "': ListNumpy takes one tensor per device (1 device), got " +
                std::to_string(v.size()));
  flat.push_back(v[0]);
}

void pack_arg(const std::vector<std::vector<Tensor>>& v, const PlaceholderSpec& spec, std::vector<Tensor>& flat,
              const std::string& job) {
  if (spec.kind != Structure::Kind::Leaf || spec.leaf != Structure::Leaf::ListListNumpy)
    throw Error("[" + job + "] argument '" + spec.name +
                "': a list of lists of tensors was given but the placeholder is not ListListNumpy");
  if (v.size() != 1)
    throw Error("[" + job + "] argument '" + spec.name + "': ListListNumpy takes one list per device (1 device), got " +
                std::to_string(v.size()));
  // The element dtype is checked against the compiled signature afterwards;
  // stack with the first item's dtype.
  Shape s{spec.items};
  s.insert(s.end(), spec.shape.begin(), spec.shape.end());
  const DType dt = spec.dtype ? *spec.dtype : (v[0].empty() ? DType::Float32 : v[0][0].dtype());
  flat.push_back(stack_dim0(v[0], {s, dt}, "[" + job + "] argument '" + spec.name + "'"));
}

std::vector<Tensor> split_dim0(const Tensor& t) {
  std::vector<Tensor> r;
  if (t.ndim() == 0) return {t};
  const Shape item(t.shape().begin() + 1, t.shape().end());
  const size_t bytes = static_cast<size_t>(numel(item)) * dtype_size(t.dtype());
  for (int64_t i = 0; i < t.dim(0); ++i) {
    Tensor e(item, t.dtype());
    std::memcpy(e.raw(), static_cast<const char*>(t.raw()) + i * bytes, bytes);
    r.push_back(std::move(e));
  }
  return r;
}

Tensor stack_dim0(const std::vector<Tensor>& items, const TensorSpec& spec, const std::string& what) {
  if (spec.shape.empty()) throw Error(what + ": ListListNumpy placeholder needs rank >= 1");
  const Shape item(spec.shape.begin() + 1, spec.shape.end());
  if (static_cast<int64_t>(items.size()) != spec.shape[0])
    throw Error(what + ": expected a list of " + std::to_string(spec.shape[0]) + " tensors, got " +
                std::to_string(items.size()));
  Tensor out(spec.shape, spec.dtype);
  const size_t bytes = static_cast<size_t>(numel(item)) * dtype_size(spec.dtype);
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].shape() != item || items[i].dtype() != spec.dtype)
      throw Error(what + ": item " + std::to_string(i) + " expected " + spec_str({item, spec.dtype}) + ", got " +
                  spec_str({items[i].shape(), items[i].dtype()}));
    std::memcpy(static_cast<char*>(out.raw()) + i * bytes, items[i].raw(), bytes);
  }
  return out;
}

}  // namespace detail

bool defining_train_job() { return detail::t_state && detail::t_state->type == JobType::Train; }

Blob get_variable(const std::string& name, const Shape& shape, DType dtype, const Initializer& initializer,
                  bool trainable) {
  auto* st = detail::t_state;
  if (!st) throw Error("[get_variable] called outside a job function body");
  if (name.empty()) throw Error("[get_variable] a variable needs a name");
  if (!is_static(shape))
    throw Error("[get_variable] variable '" + name + "' has shape " + shape_str(shape) + "; a variable's shape is fixed");
  auto it = st->variables.find(name);
  if (it != st->variables.end()) {
    if (it->second.shape() != shape || it->second.dtype() != dtype)
      throw Error("[get_variable] variable '" + name + "' already exists as " + spec_str(it->second.spec()) +
                  ", asked for " + spec_str({shape, dtype}));
    return it->second;
  }
  auto entry = internal::VariableStore::get().define(name, {shape, dtype}, initializer, trainable);
  Blob b = st->graph->add(std::make_shared<internal::VariableOp>(entry, trainable), {}, name)[0];
  st->variables[name] = b;
  return b;
}

namespace internal {
std::vector<Blob> add_node(std::shared_ptr<Primitive> op, const std::vector<Blob>& inputs, const std::string& name) {
  Graph* g = nullptr;
  for (const Blob& b : inputs)
    if (b.defined()) {
      g = b.graph();
      break;
    }
  if (!g) g = &require_graph(op->name());
  // Only the body (or the compiler, which enters the same scope) adds nodes:
  // an op applied later to a blob kept from a body would silently change
  // that job's saved definition.
  if (current_graph() != g)
    op_error(op->name(), current_graph() ? "its inputs belong to another job function"
                                         : "called outside the job function body its inputs belong to");
  return g->add(std::move(op), inputs, name);
}
}  // namespace internal

}  // namespace jobflow

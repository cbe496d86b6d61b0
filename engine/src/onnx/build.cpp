// The last stage of a load: the job built from a checked model
// (importer.h lists the stages): graph inputs that are not initializers
// become placeholders, float initializers session variables (get_variable +
// session::assign), the rest constants read at load time; each node goes
// through its import row; then the signature, loss, optimizer and the
// jobflow.* metadata of a job file.
#include <algorithm>
#include <cctype>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "import_internal.h"
#include "importer.h"
#include "jobflow/backend.h"
#include "jobflow/checkpoint_io.h"
#include "jobflow/job.h"
#include "jobflow/optimizer.h"
#include "jobflow/session.h"
#include "model_check.h"
#include "onnx_util.h"
#include "session_internal.h"

namespace jobflow::onnx {
namespace {

namespace fs = std::filesystem;
namespace ou = onnx_util;

PlaceholderSpec spec_from_structure(const Structure& s, const std::vector<std::string>& names,
                                    const std::vector<TensorSpec>& specs, const std::string& what) {
  if (s.kind == Structure::Kind::Tuple) {
    std::vector<PlaceholderSpec> ch;
    for (auto& c : s.children) ch.push_back(spec_from_structure(c, names, specs, what));
    return TuplePlaceholder(std::move(ch));
  }
  if (s.kind != Structure::Kind::Leaf || s.index < 0 || s.index >= static_cast<int>(specs.size()))
    fail(what, "jobflow.input_structure does not match the graph inputs");
  const TensorSpec& t = specs[s.index];
  if (s.leaf == Structure::Leaf::ListListNumpy) {
    if (t.shape.empty()) fail(what, "ListListNumpy input '" + names[s.index] + "' has rank 0");
    return ListListNumpy::Placeholder(Shape(t.shape.begin() + 1, t.shape.end()), t.dtype, names[s.index], t.shape[0]);
  }
  if (s.leaf == Structure::Leaf::ListNumpy) return ListNumpy::Placeholder(t.shape, t.dtype, names[s.index]);
  return Numpy::Placeholder(t.shape, t.dtype, names[s.index]);
}

void count_leaves(const Structure& s, int& n, std::vector<int>& idx) {
  if (s.kind == Structure::Kind::Leaf) {
    ++n;
    idx.push_back(s.index);
  }
  for (auto& c : s.children) count_leaves(c, n, idx);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> r;
  std::string cur;
  for (char c : s) {
    if (c == ',') {
      if (!cur.empty()) r.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) r.push_back(cur);
  return r;
}

// Which initializers an ordinary model trains: weights, biases and scales
// (the inputs each op's import row names as its weights).
std::set<std::string> param_inputs(const GraphProto& g) {
  std::set<std::string> r;
  for (const auto& n : g.node()) {
    const ImportRow* row = find_import(n.domain(), n.op_type());
    if (!row) continue;
    for (int i : row->weights)
      if (i < n.input_size() && !n.input(i).empty()) r.insert(n.input(i));
  }
  return r;
}

std::string file_stem(const std::string& what) { return fs::path(what).stem().string(); }

struct BuildResult {
  std::shared_ptr<CompiledJob> job;
  onnx_import::Analysis analysis;
};

// The build of one checked model, step by step (run() calls them in order).
class Build {
 public:
  Build(Parsed& P, const LoadOptions& opts, bool inspect)
      : P_(P), opts_(opts), inspect_(inspect), g_(P.model.graph()), what_(P.what) {
    job_file_ = !meta(ou::kVersion).empty() || !meta(ou::kJobType).empty();
  }

  BuildResult run() {
    read_initializers();
    read_inputs();
    choose_type();
    const std::vector<PlaceholderSpec> specs = placeholder_specs();
    const FunctionConfig cfg = config();
    // Loads of ordinary models name their variables one at a time, until the
    // job exists (finish() defines the step counter): two loads at once
    // would both find the names free and share them. (So such loads, their
    // compile included, run one after the other.)
    std::unique_lock<std::mutex> naming;
    if (!job_file_ && !inspect_) naming = std::unique_lock<std::mutex>(naming_mutex());
    Importer I(what_, opts_, P_.model, P_.base_dir);
    I.var_scope = var_scope_ = variable_scope();
    I.graph = &g_;
    I.opset = P_.opset;
    I.inspect_mode = inspect_;
    I.train = type_ == JobType::Train;
    I.job_file = job_file_;
    choose_trainable(I);
    make_optimizer();

    detail::JobBuilder B(type_, cfg, specs);
    B.set_variable_scope(job_scope(I.var_scope));
    B.enter();
    BuildResult R;
    try {
      import_graph(I, B, R);
      outputs(I, B);
      if (inspect_) {
        for (size_t i = 0; i < in_types_.size(); ++i)
          if (!in_types_[i].is_tensor()) R.analysis.packed.emplace_back(in_names_[i], in_types_[i].str());
        for (const auto& o : g_.output()) {
          auto it = I.values.find(o.name());
          if (it != I.values.end() && !it->second.type.is_tensor())
            R.analysis.packed.emplace_back(o.name(), it->second.type.str());
        }
      }
    } catch (...) {
      B.leave();
      throw;
    }
    B.leave();
    if (inspect_) {
      R.analysis.signature = analysis_signature();
      return R;
    }
    R.job = B.finish(outs_, out_struct_, meta(ou::kCallback) == "1", out_names_);
    restore_progress(*R.job);
    return R;
  }

 private:
  Parsed& P_;
  const LoadOptions& opts_;
  const bool inspect_;
  const GraphProto& g_;
  const std::string& what_;
  bool job_file_ = false;
  std::map<std::string, Tensor> inits_;  // initializer name -> value (after the checkpoint)
  std::map<std::string, SeqType> init_types_;  // initializer name -> Strings for a string tensor
  std::vector<std::string> in_names_;    // placeholders
  std::vector<TensorSpec> in_specs_;
  std::vector<SeqType> in_types_;  // sequences and optionals among them
  std::vector<std::vector<std::string>> in_dim_names_;  // symbolic dims' names per input
  JobType type_ = JobType::Predict;
  bool file_loss_ = false;   // a train job file (jobflow.loss)
  bool added_loss_ = false;  // a train job from a model without one (LoadOptions.loss)
  std::string loss_output_;
  Structure in_struct_;
  bool have_in_struct_ = false;
  std::string name_;
  std::map<std::string, int64_t> ckpt_steps_;  // train step variables found in the checkpoint
  std::map<std::string, Tensor> ckpt_state_;   // an ordinary model's optimizer state in the checkpoint
  std::string var_scope_;  // the prefix of the session names of the model's variables (variable_scope())
  std::shared_ptr<optimizer::Optimizer> opt_;
  std::vector<Blob> outs_;
  std::vector<std::string> out_names_;  // the graph outputs' names (or "loss")
  Structure out_struct_;

  std::string meta(const char* k) const {
    auto it = P_.meta.find(k);
    return it == P_.meta.end() ? "" : it->second;
  }

  // The structure the metadata key `k` holds, its leaf count and indices.
  Structure structure_of(const char* k, int* leaves, std::vector<int>* idx) const {
    Structure s;
    try {
      s = ou::structure_from_text(meta(k));
    } catch (const Error& e) {
      fail(what_, std::string(k) + ": " + e.what());
    }
    count_leaves(s, *leaves, *idx);
    return s;
  }

  // Initializers (validated and read; a checkpoint may override them).
  void read_initializers() {
    for (const auto& t : g_.initializer()) {
      inits_[t.name()] = read_tensor(t, P_.base_dir, opts_.max_tensor_bytes, "initializer '" + t.name() + "'", t.name(),
                                     /*strings=*/true);
      init_types_[t.name()] = proto_type(t);
    }
    if (opts_.checkpoint.empty() || inspect_) return;
    // Variables saved without `meta` (OneFlow 0.2/0.3) take the initializer's spec.
    checkpoint_io::Contents c = checkpoint_io::load_any(
        opts_.checkpoint, [this](const std::string& n) -> std::optional<std::pair<Shape, DType>> {
          auto it = inits_.find(n);
          if (it == inits_.end()) return std::nullopt;
          return std::make_pair(it->second.shape(), it->second.dtype());
        });
    for (auto& [name, v] : c.untyped)
      fail(what_, "checkpoint '" + opts_.checkpoint + "' has variable '" + name + "', which the model does not have");
    // Train step counters (System-Train-TrainStep-<job>): this job's sets
    // its step in restore_progress(), once the job exists.
    const std::string step_prefix = session::train_step_variable("");
    for (auto& [name, v] : c.typed) {
      if (name.rfind(step_prefix, 0) == 0 && !inits_.count(name)) {
        if (v.dtype() != DType::Int64 || numel(v.shape()) != 1)
          fail(what_, "checkpoint variable '" + name + "' is " + spec_str({v.shape(), v.dtype()}) +
                          ", expected a train step: int64 (1,)");
        ckpt_steps_[name] = v.data<int64_t>()[0];
        continue;
      }
      auto it = inits_.find(name);
      if (it == inits_.end() && !job_file_) {
        // An ordinary model trained by Jobflow: its checkpoint also holds
        // the optimizer's state of each weight ("<weight>-momentum", Adam's
        // "-m" and "-v"), which a train load restores (restore_progress).
        const size_t dash = name.rfind('-');
        const std::string suffix = dash == std::string::npos ? "" : name.substr(dash + 1);
        auto w = dash == std::string::npos ? inits_.end() : inits_.find(name.substr(0, dash));
        if (w != inits_.end() && (suffix == "momentum" || suffix == "m" || suffix == "v")) {
          if (w->second.shape() != v.shape() || w->second.dtype() != v.dtype())
            fail(what_, "checkpoint variable '" + name + "' is " + spec_str({v.shape(), v.dtype()}) +
                            " but the model's '" + w->first + "' is " + spec_str({w->second.shape(), w->second.dtype()}));
          ckpt_state_[name] = v;
          continue;
        }
      }
      if (it == inits_.end())
        fail(what_, "checkpoint '" + opts_.checkpoint + "' has variable '" + name + "', which the model does not have");
      if (it->second.shape() != v.shape() || it->second.dtype() != v.dtype())
        fail(what_, "checkpoint variable '" + name + "' is " + spec_str({v.shape(), v.dtype()}) + " but the model has " +
                        spec_str({it->second.shape(), it->second.dtype()}));
      it->second = v;
    }
  }

  // Placeholders: graph inputs that are not initializers.
  void read_inputs() {
    for (const auto& i : g_.input()) {
      if (inits_.count(i.name())) continue;
      in_names_.push_back(i.name());
      in_dim_names_.emplace_back();
      // A sequence or optional: its packed form (jobflow/sequence.h).
      in_types_.push_back(seq_type_of(i.type(), "input '" + i.name() + "'", "non-tensor input"));
      if (!in_types_.back().is_tensor()) in_specs_.push_back({{kDynamic}, DType::UInt8});
      else in_specs_.push_back(input_spec(P_, i, &in_dim_names_.back()));
    }
  }

  // Job type and loss; a loss added at load adds its labels or targets
  // placeholder.
  void choose_type() {
    if (meta(ou::kJobType) == "train") type_ = JobType::Train;
    else if (!meta(ou::kJobType).empty() && meta(ou::kJobType) != "predict")
      fail(what_, "jobflow.job_type is \"" + meta(ou::kJobType) + "\" (train or predict)");
    if (opts_.type) type_ = *opts_.type;
    if (inspect_) type_ = JobType::Predict;
    file_loss_ = job_file_ && !meta(ou::kLoss).empty();
    added_loss_ = type_ == JobType::Train && !file_loss_;
    if (!added_loss_) return;
    if (opts_.loss.empty() || opts_.optimizer.empty())
      fail_option(opts_.loss.empty() ? "loss" : "optimizer", what_,
                  "loading as a train job needs LoadOptions.loss and LoadOptions.optimizer");
    if (opts_.loss != "sparse_softmax_cross_entropy" && opts_.loss != "mse")
      fail_option("loss", what_, "loss \"" + opts_.loss + "\" is not sparse_softmax_cross_entropy or mse");
    loss_output_ = opts_.loss_output;
    const ValueInfoProto* vi = nullptr;
    for (const auto& o : g_.output())
      if (loss_output_.empty() ? true : o.name() == loss_output_) {
        vi = &o;
        break;
      }
    if (!vi) fail_option("loss_output", what_, "loss_output '" + loss_output_ + "' is not a graph output");
    loss_output_ = vi->name();
    const TensorSpec loss_out_spec = input_spec(P_, *vi);
    if (loss_out_spec.shape.empty())
      fail_option("loss", what_, "output '" + loss_output_ + "' is a scalar; a loss needs a batch");
    if (!is_floating(loss_out_spec.dtype))
      fail_option("loss", what_,
                  "loss " + opts_.loss + " needs a float output; '" + loss_output_ + "' is " + spec_str(loss_out_spec));
    if (opts_.loss == "sparse_softmax_cross_entropy") {
      in_names_.push_back("labels");
      in_specs_.push_back({{loss_out_spec.shape[0]}, DType::Int32});
    } else {
      in_names_.push_back("targets");
      in_specs_.push_back(loss_out_spec);
    }
    in_dim_names_.emplace_back();
  }

  // The job's arguments: as jobflow.input_structure nests them, or one
  // Numpy placeholder per graph input.
  std::vector<PlaceholderSpec> placeholder_specs() {
    std::vector<PlaceholderSpec> specs;
    if (!(job_file_ && !meta(ou::kInputStructure).empty() && !added_loss_)) {
      for (size_t i = 0; i < in_names_.size(); ++i) {
        specs.push_back(Numpy::Placeholder(in_specs_[i].shape, in_specs_[i].dtype, in_names_[i]));
        specs.back().dim_names = in_dim_names_[i];
      }
      return specs;
    }
    int n = 0;
    std::vector<int> idx;
    const Structure s = structure_of(ou::kInputStructure, &n, &idx);
    std::sort(idx.begin(), idx.end());
    for (int i = 0; i < n; ++i)
      if (idx[i] != i) fail(what_, "jobflow.input_structure leaves do not index the inputs 0..n-1");
    if (n != static_cast<int>(in_names_.size()))
      fail(what_, "jobflow.input_structure has " + std::to_string(n) + " leaves but the graph has " +
                      std::to_string(in_names_.size()) + " inputs");
    if (s.kind != Structure::Kind::Tuple) fail(what_, "jobflow.input_structure must be a tuple of the arguments");
    for (auto& c : s.children) specs.push_back(spec_from_structure(c, in_names_, in_specs_, what_));
    name_dims(specs);
    in_struct_ = s;
    have_in_struct_ = true;
    return specs;
  }

  // The leaves of a structured job file's placeholders get their dims' names.
  void name_dims(std::vector<PlaceholderSpec>& specs) const {
    for (auto& p : specs) {
      if (p.kind == Structure::Kind::Tuple) {
        name_dims(p.children);
        continue;
      }
      for (size_t i = 0; i < in_names_.size(); ++i)
        if (in_names_[i] == p.name && !in_dim_names_[i].empty()) {
          std::vector<std::string> n = in_dim_names_[i];
          if (p.leaf == Structure::Leaf::ListListNumpy && !n.empty()) n.erase(n.begin());
          p.dim_names = n;
        }
    }
  }

  FunctionConfig config() {
    FunctionConfig cfg;
    name_ = opts_.name;
    if (name_.empty()) name_ = meta(ou::kJobName);
    if (name_.empty()) name_ = g_.name();
    if (name_.empty()) name_ = file_stem(what_);
    cfg.name(name_);
    cfg.max_in_flight(opts_.max_in_flight == 0 ? 1 : opts_.max_in_flight);
    if (opts_.num_threads < 0) fail(what_, "num_threads must be >= 0, got " + std::to_string(opts_.num_threads));
    cfg.num_threads(opts_.num_threads);
    const std::string precision = opts_.precision.empty() ? meta(ou::kPrecision) : opts_.precision;
    if (precision != "" && precision != "fp32" && precision != "bf16") {
      if (!opts_.precision.empty()) fail_option("precision", what_, "precision is \"" + precision + "\" (fp32 or bf16)");
      fail(what_, "jobflow.precision is \"" + precision + "\" (fp32 or bf16)");
    }
    cfg.enable_auto_mixed_precision(precision == "bf16");
    Device d;
    std::string why;
    if (!parse_device(opts_.device.empty() ? "cpu" : opts_.device, &d, &why)) fail(what_, why);
    cfg.default_placement(d.tag);
    if (!meta(ou::kSeed).empty()) {
      try {
        cfg.seed(static_cast<uint64_t>(std::stoull(meta(ou::kSeed))));
      } catch (...) {
        fail(what_, "jobflow.seed is not a number");
      }
    }
    // The returns the job declares its accuracy (not when a loss given at
    // load replaces the returns); finish() checks them against the returns.
    if (job_file_ && !added_loss_ && !meta(ou::kAccuracy).empty()) {
      const std::vector<std::string> ab = split_list(meta(ou::kAccuracy));
      int idx[2] = {-1, -1};
      for (size_t i = 0; i < ab.size() && i < 2; ++i) {
        size_t used = 0;
        try {
          idx[i] = std::stoi(ab[i], &used);
        } catch (...) {
          used = 0;
        }
        if (used != ab[i].size()) idx[i] = -1;
      }
      if (ab.size() != 2 || idx[0] < 0 || idx[1] < 0)
        fail(what_, "jobflow.accuracy is \"" + meta(ou::kAccuracy) + "\", not two return indices \"LABELS,LOGITS\"");
      cfg.accuracy(idx[0], idx[1]);
    }
    return cfg;
  }

  static std::mutex& naming_mutex() {
    static std::mutex m;
    return m;
  }

  // The prefix of an ordinary model's variables in the session
  // (JobDefinition::variable_scope). Its initializers keep their names, so
  // that session::variable(name) finds them and a train and a predict
  // element loading one model file at start share its weights, unless the
  // session holds other values under some of those names: exporters name
  // initializers by counters ("onnx::Conv_650"), so different models often
  // share names, and sharing would run one model with the other's weights
  // (or fail on a shape). Then the model's variables get a scope of their
  // own. Job files share by name as OneFlow's jobs do (docs/elements.md).
  std::string variable_scope() const {
    if (job_file_ || inspect_) return "";
    auto& store = internal::VariableStore::get();
    std::vector<std::pair<std::shared_ptr<internal::VariableEntry>, const Tensor*>> found;
    for (const auto& [n, t] : inits_)
      if (is_floating(t.dtype()))
        if (auto e = store.find(n)) found.emplace_back(std::move(e), &t);
    if (found.empty()) return "";
    bool same = true;
    {
      std::vector<internal::VariableEntry*> entries;
      for (auto& f : found) entries.push_back(f.first.get());
      internal::HeldVariables held(entries, false);  // a train step may be writing them
      for (auto& [e, t] : found)
        if (!e->initialized || e->spec != TensorSpec{t->shape(), t->dtype()} || !e->value.equal(*t)) {
          same = false;
          break;
        }
    }
    if (same) return "";
    return new_scope();
  }

  // "<job name>#<n>:", n counting the scopes of the process; a prefix that
  // keeps a variable name a valid checkpoint folder (no '/', no '..').
  std::string new_scope() const {
    static std::atomic<int> scopes{0};
    std::string s;
    for (char c : name_) s += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ? c : '_';
    return s + "#" + std::to_string(++scopes) + ":";
  }

  // The prefix of the job's own session names (JobDefinition::
  // variable_scope): its variables' scope, or for an ordinary train model
  // whose variables keep their names, a scope of its own when a step
  // counter of its name exists already (two models exported under one
  // graph name, torch_jit, would count each other's steps).
  std::string job_scope(const std::string& var_scope) const {
    if (!var_scope.empty() || job_file_ || inspect_ || type_ != JobType::Train) return var_scope;
    return internal::VariableStore::get().find(session::train_step_variable(name_)) ? new_scope() : "";
  }

  // The variables the optimizer trains: jobflow.trainable, or for an
  // ordinary model (and a Jobflow predict file trained with a loss given at
  // load, which has no jobflow.trainable) the float weights of its ops.
  void choose_trainable(Importer& I) {
    const bool file_trainable =
        job_file_ && !(type_ == JobType::Train && !file_loss_ && meta(ou::kTrainable).empty());
    if (file_trainable) {
      for (auto& n : split_list(meta(ou::kTrainable))) I.trainable.insert(n);
    } else {
      for (auto& n : param_inputs(g_))
        if (inits_.count(n) && is_floating(inits_[n].dtype())) I.trainable.insert(n);
    }
  }

  void make_optimizer() {
    if (type_ != JobType::Train || inspect_) return;
    try {
      if (file_loss_) {
        optimizer::Scheduler sched;
        if (!meta(ou::kSchedule).empty()) sched = ou::schedule_from_text(meta(ou::kSchedule));
        opt_ = ou::optimizer_from_text(opts_.optimizer.empty() ? meta(ou::kOptimizer) : opts_.optimizer, sched);
      } else {
        opt_ = ou::optimizer_from_text(opts_.optimizer, optimizer::Scheduler());
      }
    } catch (const Error& e) {
      // LoadOptions.optimizer replaces the file's; the file is at fault only for its own.
      if (!opts_.optimizer.empty()) fail_option("optimizer", what_, std::string("optimizer: ") + e.what());
      fail(what_, std::string("optimizer: ") + e.what());
    }
    if (!opt_) fail(what_, "no optimizer");
  }

  // Placeholders and initializers as values, then every node through its
  // import row (inspect: with the specs of its inputs and outputs).
  void import_graph(Importer& I, detail::JobBuilder& B, BuildResult& R) {
    for (size_t i = 0; i < in_names_.size(); ++i) {
      I.values[in_names_[i]].blob = B.input(static_cast<int>(i));
      if (i < in_types_.size()) I.values[in_names_[i]].type = in_types_[i];
    }
    for (auto& [n, t] : inits_) {
      if (I.values.count(n)) continue;
      Value v;
      v.konst = t;
      v.variable = is_floating(t.dtype());
      v.type = init_types_[n];  // a string tensor is packed
      I.values[n] = v;
    }
    auto spec_of = [&](const std::string& name) {
      auto it = I.values.find(name);
      if (name.empty() || it == I.values.end()) return TensorSpec{};
      const Value& v = it->second;
      return v.blob.defined() ? v.blob.spec() : TensorSpec{v.konst.shape(), v.konst.dtype()};
    };
    for (int k = 0; k < g_.node_size(); ++k) {
      const NodeProto& n = g_.node(k);
      I.run_node(n, k);
      if (!inspect_) continue;
      onnx_import::NodeShapes ns;
      ns.op_type = n.op_type();
      for (const auto& a : n.attribute())
        if (a.type() == AttributeProto::INT) ns.ints[a.name()] = a.i();
      for (const auto& in : n.input()) ns.inputs.push_back(spec_of(in));
      for (const auto& o : n.output()) ns.outputs.push_back(spec_of(o));
      R.analysis.nodes.push_back(std::move(ns));
    }
    I.node = nullptr;
  }

  // A graph output as a blob, in the dtype the graph declares for it.
  Blob output_blob(Importer& I, const std::string& name, const ValueInfoProto* vi) {
    auto b = I.bad_outputs.find(name);
    if (b != I.bad_outputs.end()) throw Unsupported("[onnx.load] " + what_ + ": " + b->second, {{b->second, {name}}});
    if (!I.values.count(name)) fail(what_, "graph output '" + name + "' is not defined");
    Blob bl = I.blob_of(name);
    if (vi && vi->type().has_tensor_type()) {
      const int32_t et = vi->type().tensor_type().elem_type();
      if (et != 0) {
        try {
          DType want = ou::from_onnx_dtype(et, "output");
          if (want != bl.dtype()) bl = cast(bl, want);
        } catch (const Error&) {
        }
      }
    }
    return bl;
  }

  // The returns and their structure; the objective of a train job.
  void outputs(Importer& I, detail::JobBuilder& B) {
    if (job_file_ && !meta(ou::kOutputStructure).empty() && !added_loss_) {
      for (const auto& o : g_.output()) outs_.push_back(output_blob(I, o.name(), &o)), out_names_.push_back(o.name());
      int n = 0;
      std::vector<int> idx;
      out_struct_ = structure_of(ou::kOutputStructure, &n, &idx);
      if (n != static_cast<int>(outs_.size()))
        fail(what_, "jobflow.output_structure has " + std::to_string(n) + " leaves but the graph has " +
                        std::to_string(outs_.size()) + " outputs");
      for (int i : idx)
        if (i < 0 || i >= n) fail(what_, "jobflow.output_structure has a bad leaf index");
    } else if (added_loss_) {
      Blob y = output_blob(I, loss_output_, nullptr);
      Blob target = B.input(static_cast<int>(in_names_.size()) - 1);
      Blob l;
      if (opts_.loss == "sparse_softmax_cross_entropy") {
        if (y.ndim() != 2)
          fail_option("loss", what_,
                      "sparse_softmax_cross_entropy needs a (batch, classes) output, got " + spec_str(y.spec()));
        l = nn::sparse_softmax_cross_entropy_with_logits(target, y);
      } else {
        l = reduce_mean(square(sub(y, target)));
      }
      if (!inspect_) detail::set_objective(l, opt_);
      outs_.push_back(l);
      out_names_.push_back("loss");
      out_struct_.kind = Structure::Kind::Leaf;
      out_struct_.index = 0;
    } else {
      for (const auto& o : g_.output()) outs_.push_back(output_blob(I, o.name(), &o)), out_names_.push_back(o.name());
      if (outs_.size() == 1) {
        out_struct_.kind = Structure::Kind::Leaf;
        out_struct_.index = 0;
      } else {
        out_struct_.kind = Structure::Kind::Tuple;
        for (size_t i = 0; i < outs_.size(); ++i) {
          Structure c;
          c.kind = Structure::Kind::Leaf;
          c.index = static_cast<int>(i);
          out_struct_.children.push_back(c);
        }
      }
    }
    if (file_loss_ && type_ == JobType::Train && !inspect_) {
      auto it = I.values.find(meta(ou::kLoss));
      if (it == I.values.end() || !it->second.blob.defined())
        fail(what_, "jobflow.loss names '" + meta(ou::kLoss) + "', which is not a tensor of the graph");
      detail::set_objective(it->second.blob, opt_);
    }
  }

  // What inspect reports: the job's interface, without compiling it.
  Signature analysis_signature() const {
    Signature s;
    s.job_name = name_;
    s.type = type_;
    s.input_names = in_names_;
    s.inputs = in_specs_;
    for (auto& n : in_dim_names_)
      if (!n.empty()) s.input_dim_names = in_dim_names_;
    s.input_structure.kind = Structure::Kind::Tuple;
    if (have_in_struct_) {
      s.input_structure = in_struct_;
    } else {
      for (size_t i = 0; i < in_names_.size(); ++i) {
        Structure c;
        c.kind = Structure::Kind::Leaf;
        c.index = static_cast<int>(i);
        s.input_structure.children.push_back(c);
      }
    }
    for (auto& b : outs_) s.outputs.push_back(b.spec());
    s.output_names = out_names_;
    s.output_structure = out_struct_;
    s.callback = meta(ou::kCallback) == "1";
    return s;
  }

  // The step the saved job had reached (the checkpoint's step variable,
  // else the file's jobflow.step, else 0: a train job's step is a session
  // variable, so a job loaded again starts where its file or checkpoint
  // says, not where an earlier load of it stopped), and the optimizer state
  // saved with it (after finish() created the state variables).
  void restore_progress(CompiledJob& job) {
    int64_t step = 0;
    if (job_file_ && !meta(ou::kStep).empty()) {
      try {
        size_t used = 0;
        step = std::stoll(meta(ou::kStep), &used);
        if (used != meta(ou::kStep).size() || step < 0) throw Error("");
      } catch (...) {
        fail(what_, "jobflow.step is not a non-negative integer: \"" + meta(ou::kStep) + "\"");
      }
    }
    if (auto it = ckpt_steps_.find(session::train_step_variable(name_)); it != ckpt_steps_.end()) step = it->second;
    if (type_ == JobType::Train || step > 0) job.set_steps_run(step);  // schedules, dropout masks, Adam continue
    if (type_ != JobType::Train) return;
    for (const auto& n : split_list(meta(ou::kState))) {
      auto it = inits_.find(n);
      if (it == inits_.end()) fail(what_, "jobflow.optimizer_state names '" + n + "', which is not an initializer");
      if (session::has_variable(n)) session::assign(n, it->second);
    }
    for (const auto& [n, t] : ckpt_state_) {
      const std::string v = var_scope_ + n;
      if (session::has_variable(v)) session::assign(v, t);
    }
  }
};

BuildResult build(Parsed& P, const LoadOptions& opts, bool inspect) { return Build(P, opts, inspect).run(); }

std::shared_ptr<CompiledJob> load_impl(const std::string& bytes, const LoadOptions& options, const std::string& what,
                                       const std::string& base_dir) {
  Parsed P;
  try {
    parse_model(bytes, options, what, base_dir, P);
    return build(P, options, false).job;
  } catch (const Unsupported& e) {
    const std::string m = e.what();
    if (m.rfind("[onnx.load]", 0) == 0) throw;
    throw Unsupported("[onnx.load] " + what + ": " + m, e.ops);
  } catch (const Error& e) {
    const std::string m = e.what();
    if (m.rfind("[onnx.load]", 0) == 0) throw;
    // Engine errors (shape inference of an op) get the file prefix.
    throw Error("[onnx.load] " + what + ": " + m);
  } catch (const std::exception& e) {
    throw Error("[onnx.load] " + what + ": " + e.what());
  }
}

}  // namespace

std::shared_ptr<CompiledJob> load(const std::string& path, const LoadOptions& options) {
  return load_impl(read_file_capped(path, options.max_file_bytes), options, path, base_dir_of(path));
}

std::shared_ptr<CompiledJob> load_bytes(const std::string& bytes, const LoadOptions& options, const std::string& what) {
  // No folder: bytes from memory may not reference external data (they
  // would otherwise read files relative to the working directory).
  return load_impl(bytes, options, what, "");
}

std::vector<std::string> supported_ops() { return importable_ops(); }

}  // namespace jobflow::onnx

namespace jobflow::onnx_import {

Analysis analyze(const std::string& path) {
  onnx::LoadOptions opts;
  using namespace jobflow::onnx;
  onnx::Parsed P;
  const std::string bytes = onnx::read_file_capped(path, opts.max_file_bytes);
  onnx::parse_model(bytes, opts, path, onnx::base_dir_of(path), P);
  auto R = onnx::build(P, opts, true);
  Analysis A = std::move(R.analysis);
  A.opset = P.opset;
  for (auto& [k, v] : P.meta) {
    if (k.rfind("jobflow.", 0) == 0) A.metadata.emplace_back(k, v);
    // The analysis builds the graph as a predict job; report what the file says.
    if (k == onnx_util::kJobType) A.signature.type = v == "train" ? JobType::Train : JobType::Predict;
  }
  for (const auto& t : P.model.graph().initializer()) {
    // Parameters are the float weights; int64 shapes/axes are not.
    if (t.data_type() != ::onnx::TensorProto::FLOAT && t.data_type() != ::onnx::TensorProto::DOUBLE &&
        t.data_type() != ::onnx::TensorProto::FLOAT16 && t.data_type() != ::onnx::TensorProto::BFLOAT16)
      continue;
    int64_t n = 0;  // (read and checked by the build above)
    if (checked_numel(Shape(t.dims().begin(), t.dims().end()), &n)) A.parameters += n;
  }
  std::map<std::string, int64_t> counts;
  for (const auto& n : P.model.graph().node()) counts[n.op_type()]++;
  A.op_counts.assign(counts.begin(), counts.end());
  return A;
}

}  // namespace jobflow::onnx_import

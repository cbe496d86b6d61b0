// jobflow::onnx::save(): a job's forward graph as a standard ONNX model
// (opset 17) plus the jobflow.* metadata that makes it a job file
// (docs/job-files.md). Each node is written by the export row of its kind
// (registry.h; the rows are in engine/src/ops/*_onnx.cpp).
//
// Tensor names: placeholders keep their names ("images"), variables are
// initializers named by the variable ("conv1-weight"), every other value is
// named by its blob ("<node name>/out<i>"). Graph outputs are the job's
// returns in flat order; a return that is a placeholder, a variable or
// returned twice goes through an Identity named "output<i>".
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "exporter.h"
#include "jobflow/checkpoint_io.h"
#include "jobflow/optimizer.h"
#include "onnx/onnx_util.h"
#include "state_ops.h"

namespace jobflow::onnx {

namespace fs = std::filesystem;

void Exporter::fail(const std::string& what) const {
  throw Error("[onnx.save] job '" + job_.signature().job_name + "': " + what);
}

void Exporter::no_form(const std::string& why) const {
  fail("op '" + std::string(node_->op->name()) + "' (node '" + node_->name + "') has no ONNX form" +
       (why.empty() ? "" : ": " + why));
}

bool Exporter::train() const { return def_.optimizer != nullptr && job_.signature().type == JobType::Train; }

std::string Exporter::fresh(const std::string& base) {
  std::string n = base;
  for (int k = 1; used_names_.count(n); ++k) n = base + "_" + std::to_string(k);
  used_names_.insert(n);
  return n;
}

bool Exporter::float_attr_exact(double v) const {
  return in_spec(0).dtype != DType::Float64 || std::isnan(v) || static_cast<double>(static_cast<float>(v)) == v;
}

void Exporter::check_param(const char* k, double v) const {
  if (!float_attr_exact(v))
    no_form(std::string("its ") + k + " = " + onnx_util::number_to_text(v) +
            " is not exactly a float32 (the type of ONNX's attribute) and the data is float64");
}

NodeProto* Exporter::add(const std::string& type, std::vector<std::string> inputs, std::vector<std::string> outputs,
                         const std::string& name) {
  NodeProto* n = gp_->add_node();
  n->set_op_type(type);
  n->set_name(name);
  for (auto& i : inputs) n->add_input(i);
  for (auto& o : outputs) n->add_output(o);
  return n;
}

NodeProto* Exporter::add_jobflow(const std::string& type, std::vector<std::string> inputs,
                                 std::vector<std::string> outputs, const std::string& name, FunctionBody define) {
  NodeProto* n = add(type, std::move(inputs), std::move(outputs), name);
  n->set_domain(kJobflowDomain);
  if (functions_.insert(type).second) {
    if (functions_.size() == 1) {
      auto* os = model_->add_opset_import();
      os->set_domain(kJobflowDomain);
      os->set_version(kJobflowOpset);
    }
    ::onnx::FunctionProto* f = model_->add_functions();
    f->set_domain(kJobflowDomain);
    f->set_name(type);
    auto* os = f->add_opset_import();
    os->set_domain("");
    os->set_version(opts_.opset);
    define(*f);
  }
  return n;
}

NodeProto* Exporter::add_to(::onnx::FunctionProto& f, const std::string& type, std::vector<std::string> inputs,
                            std::vector<std::string> outputs) {
  NodeProto* n = f.add_node();
  n->set_op_type(type);
  for (auto& i : inputs) n->add_input(i);
  for (auto& o : outputs) n->add_output(o);
  return n;
}

void Exporter::set_ref(NodeProto* n, const char* k, AttributeProto::AttributeType type, const char* ref) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(type);
  a->set_ref_attr_name(ref);
}

NodeProto* Exporter::add_as(const std::string& type) {
  std::vector<std::string> ins, outs;
  for (size_t i = 0; i < num_inputs(); ++i) ins.push_back(in(static_cast<int>(i)));
  for (size_t i = 0; i < num_outputs(); ++i) outs.push_back(out(static_cast<int>(i)));
  return add(type, ins, outs, name());
}

void Exporter::set_int(NodeProto* n, const char* k, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(AttributeProto::INT);
  a->set_i(v);
}
void Exporter::set_float(NodeProto* n, const char* k, double v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(AttributeProto::FLOAT);
  a->set_f(static_cast<float>(v));
}
void Exporter::set_ints(NodeProto* n, const char* k, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void Exporter::set_string(NodeProto* n, const char* k, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(AttributeProto::STRING);
  a->set_s(v);
}
void Exporter::set_tensor(NodeProto* n, const char* k, const Tensor& t) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(AttributeProto::TENSOR);
  onnx_util::tensor_to_proto(t, "", a->mutable_t());
}

std::string Exporter::int64_init(const std::string& base, const std::vector<int64_t>& v) {
  const std::string name = fresh(base);
  onnx_util::tensor_to_proto(Tensor::from<int64_t>({static_cast<int64_t>(v.size())}, v), name, gp_->add_initializer());
  return name;
}

std::string Exporter::constant(const std::string& base, const Tensor& t) {
  const std::string name = fresh(base);
  set_tensor(add("Constant", {}, {name}, name), "value", t);
  return name;
}

Tensor Exporter::scalar_of(DType dt, double v) { return Tensor::scalar<double>(v).astype(dt); }

Tensor Exporter::filled(const Shape& s, DType dt, double v) {
  Tensor t(s, dt);
  const Tensor one = scalar_of(dt, v);
  for (int64_t i = 0; i < t.numel(); ++i)
    std::memcpy(static_cast<char*>(t.raw()) + i * dtype_size(dt), one.raw(), dtype_size(dt));
  return t;
}

void Exporter::only_first_output() const {
  for (size_t k = 1; k < node_->outputs.size(); ++k) {
    const int b = node_->outputs[k];
    if (kept_blobs_.count(b)) no_form("its output " + std::to_string(k) + " is returned");
    for (int c : consumers_[b])
      if (c < static_cast<int>(live_.size()) && live_[c]) no_form("its output " + std::to_string(k) + " is used");
  }
}

bool Exporter::fold_bias_add(bool conv, std::string* bias, std::string* y) {
  if (node_->outputs.size() != 1) return false;
  const int out = node_->outputs[0];
  if (kept_blobs_.count(out)) return false;
  int reader = -1, n = 0;
  for (int c : consumers_[out])
    if (c < static_cast<int>(live_.size()) && live_[c]) ++n, reader = c;
  if (n != 1) return false;
  const Node& b = g_->nodes[reader];
  if (b.op->kind() != OpKind::BiasAdd || b.inputs[0] != out) return false;
  const int64_t rank = static_cast<int64_t>(spec(out).shape.size());
  int64_t axis = b.op->attr_int("axis");
  if (axis < 0) axis += rank;
  if (axis != 1 || rank != (conv ? 4 : 2)) return false;
  const TensorSpec& bs = spec(b.inputs[1]);
  if (bs.dtype != spec(out).dtype || bs.shape != Shape{spec(out).shape[1]}) return false;
  // A fused bias_add+relu keeps its relu after the folded bias.
  if (b.op->attr_int("relu")) return false;
  // The bias must be available where the Gemm/Conv goes: a graph input or
  // initializer (placeholder, variable), or computed before it.
  const int bp = g_->blobs[b.inputs[1]].producer;
  const int self = g_->blobs[out].producer;
  const OpKind bk = bp >= 0 ? g_->nodes[bp].op->kind() : OpKind::Placeholder;
  const bool source = bk == OpKind::Variable || bk == OpKind::Placeholder;
  if (!source && bp >= self) return false;
  *bias = names_[b.inputs[1]];
  *y = names_[b.outputs[0]];
  folded_[reader] = 1;
  return true;
}

void Exporter::export_node(int index) {
  node_ = &g_->nodes[index];
  const ExportRow* row = find_export(node_->op->kind());
  if (!row) no_form();
  row->fn(*this);
  node_ = nullptr;
}

void Exporter::add_metadata(::onnx::ModelProto& m) {
  const Signature& sig = job_.signature();
  auto put = [&](const char* k, const std::string& v) {
    auto* p = m.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  };
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
    return s;
  };
  put(onnx_util::kVersion, "1");
  put(onnx_util::kJobType, sig.type == JobType::Train ? "train" : "predict");
  put(onnx_util::kJobName, sig.job_name);
  put(onnx_util::kInputStructure, onnx_util::structure_to_text(sig.input_structure));
  put(onnx_util::kOutputStructure, onnx_util::structure_to_text(sig.output_structure));
  put(onnx_util::kCallback, sig.callback ? "1" : "0");
  if (sig.accuracy_labels >= 0)
    put(onnx_util::kAccuracy, std::to_string(sig.accuracy_labels) + "," + std::to_string(sig.accuracy_logits));
  if (sig.type == JobType::Train) {
    if (def_.loss < 0 || !def_.optimizer) fail("train job without a loss or optimizer in its definition");
    put(onnx_util::kLoss, names_[def_.loss]);
    put(onnx_util::kOptimizer, onnx_util::optimizer_to_text(*def_.optimizer));
    put(onnx_util::kSchedule, onnx_util::schedule_to_text(def_.optimizer->scheduler()));
    std::vector<std::string> trainable;
    for (const std::string& n : def_.trainable) trainable.push_back(def_.saved_name(n));
    put(onnx_util::kTrainable, join(trainable));
    std::vector<std::string> state;
    for (size_t i = def_.forward_nodes; i < g_->nodes.size(); ++i)
      if (auto* v = dynamic_cast<const internal::VariableOp*>(g_->nodes[i].op.get())) state.push_back(def_.saved_name(v->entry()->name));
    std::sort(state.begin(), state.end());
    state.erase(std::unique(state.begin(), state.end()), state.end());
    put(onnx_util::kState, join(state));
  }
  put(onnx_util::kStep, std::to_string(job_.steps_run()));
  put(onnx_util::kSeed, std::to_string(def_.seed));
  put(onnx_util::kDevice, def_.default_device);
  if (def_.bf16) put(onnx_util::kPrecision, "bf16");
}

::onnx::ModelProto Exporter::run(const std::string& path) {
  if (!def_.graph) fail("the job has no definition to export (was it defined with global_function or loaded?)");
  g_ = def_.graph.get();
  const Signature& sig = job_.signature();
  const size_t F = std::min(def_.forward_nodes, g_->nodes.size());

  ::onnx::ModelProto m;
  model_ = &m;
  m.set_ir_version(8);  // opset 17
  m.set_producer_name(opts_.producer);
  m.set_producer_version("1");
  m.set_model_version(1);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(opts_.opset);
  gp_ = m.mutable_graph();
  gp_->set_name(sig.job_name);

  // Live forward nodes: what the returns, the loss and stateful forward ops
  // (moving statistics) depend on. The compiler's fusion leaves the nodes it
  // absorbed in the graph, dead.
  consumers_ = g_->consumers();
  live_.assign(F, 0);
  folded_.assign(F, 0);
  std::vector<int> stack;
  auto push_blob = [&](int b) {
    const int p = g_->blobs[b].producer;
    if (p >= static_cast<int>(F)) fail("a return depends on a node outside the forward graph");
    if (p >= 0) stack.push_back(p);
  };
  for (int b : def_.outputs) push_blob(b), kept_blobs_.insert(b);
  if (def_.loss >= 0) push_blob(def_.loss), kept_blobs_.insert(def_.loss);
  for (int b : def_.inputs) push_blob(b);
  for (size_t i = 0; i < F; ++i)
    if (g_->nodes[i].op->has_side_effects()) stack.push_back(static_cast<int>(i));
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (live_[n]) continue;
    live_[n] = 1;
    for (int b : g_->nodes[n].inputs) push_blob(b);
  }

  // Names.
  names_.assign(g_->blobs.size(), "");
  for (size_t i = 0; i < def_.inputs.size(); ++i) {
    const std::string& n = i < sig.input_names.size() ? sig.input_names[i] : g_->blobs[def_.inputs[i]].name;
    if (used_names_.count(n)) fail("two placeholders named '" + n + "'");
    names_[def_.inputs[i]] = n;
    used_names_.insert(n);
  }
  for (size_t i = 0; i < F; ++i) {
    if (!live_[i]) continue;
    const Node& nd = g_->nodes[i];
    if (auto* v = dynamic_cast<const internal::VariableOp*>(nd.op.get())) {
      const std::string vn = def_.saved_name(v->entry()->name);
      if (used_names_.count(vn)) fail("variable '" + vn + "' has the name of another tensor");
      used_names_.insert(vn);
      names_[nd.outputs[0]] = vn;
      vars_[vn] = v->entry();
    }
  }
  // Optimizer state (and any other variable of the train step) travels too.
  if (sig.type == JobType::Train)
    for (size_t i = F; i < g_->nodes.size(); ++i)
      if (auto* v = dynamic_cast<const internal::VariableOp*>(g_->nodes[i].op.get())) {
        const std::string vn = def_.saved_name(v->entry()->name);
        if (vars_.count(vn)) continue;
        if (used_names_.count(vn)) fail("variable '" + vn + "' has the name of another tensor");
        used_names_.insert(vn);
        vars_[vn] = v->entry();
      }
  for (size_t i = 0; i < F; ++i) {
    if (!live_[i]) continue;
    const Node& nd = g_->nodes[i];
    if (nd.op->kind() == OpKind::Placeholder || nd.op->kind() == OpKind::Variable) continue;
    for (int b : nd.outputs) names_[b] = fresh(g_->blobs[b].name.empty() ? nd.name + "/out" : g_->blobs[b].name);
  }

  // Graph inputs; a dynamic dim is a dim_param of its name in the
  // signature, or a dim of unknown size when unnamed.
  auto set_type = [&](::onnx::ValueInfoProto* vi, const std::string& name, const TensorSpec& s, size_t input) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx_util::to_onnx_dtype(s.dtype));
    auto* sh = tt->mutable_shape();
    for (size_t d = 0; d < s.shape.size(); ++d) {
      if (s.shape[d] >= 0) {
        sh->add_dim()->set_dim_value(s.shape[d]);
        continue;
      }
      if (input == SIZE_MAX) {  // an output or intermediate value: a dim of unknown size
        sh->add_dim();
        continue;
      }
      std::string p = input < sig.input_dim_names.size() && d < sig.input_dim_names[input].size()
                          ? sig.input_dim_names[input][d]
                          : "";
      auto* dim = sh->add_dim();  // unnamed: a dim of unknown size
      if (!p.empty()) dim->set_dim_param(p);
    }
  };
  for (size_t i = 0; i < def_.inputs.size(); ++i) set_type(gp_->add_input(), names_[def_.inputs[i]], g_->blobs[def_.inputs[i]].spec, i);

  // Nodes.
  for (size_t i = 0; i < F; ++i) {
    if (!live_[i] || folded_[i]) continue;
    const Node& nd = g_->nodes[i];
    if (nd.op->kind() == OpKind::Placeholder || nd.op->kind() == OpKind::Variable) continue;
    export_node(static_cast<int>(i));
  }

  // Outputs.
  std::set<std::string> out_names;
  std::set<std::string> graph_inputs;
  for (int b : def_.inputs) graph_inputs.insert(names_[b]);
  for (size_t k = 0; k < def_.outputs.size(); ++k) {
    const int b = def_.outputs[k];
    std::string n = names_[b];
    if (graph_inputs.count(n) || vars_.count(n) || out_names.count(n)) {
      const std::string id = fresh("output" + std::to_string(k));
      add("Identity", {n}, {id}, id);
      n = id;
    }
    out_names.insert(n);
    set_type(gp_->add_output(), n, g_->blobs[b].spec, SIZE_MAX);
  }
  // Shapes of the intermediate values the graph produces.
  std::set<std::string> produced;
  for (const auto& n : gp_->node())
    for (const auto& o : n.output()) produced.insert(o);
  for (size_t i = 0; i < F; ++i) {
    if (!live_[i] || folded_[i]) continue;
    const Node& nd = g_->nodes[i];
    if (nd.op->kind() == OpKind::Placeholder || nd.op->kind() == OpKind::Variable) continue;
    for (int b : nd.outputs)
      if (produced.count(names_[b]) && !out_names.count(names_[b]))
        set_type(gp_->add_value_info(), names_[b], g_->blobs[b].spec, SIZE_MAX);
  }

  // Variables: current values (initialized first when never used).
  internal::VariableStore::get().sync_all();
  std::map<std::string, Tensor> values;
  for (auto& [name, e] : vars_) {
    internal::VariableStore::get().ensure_initialized(*e);
    values[name] = e->value;
  }
  if (opts_.checkpoint_dir.empty()) {
    for (auto& [name, t] : values) onnx_util::tensor_to_proto(t, name, gp_->add_initializer());
  } else {
    const fs::path rel(opts_.checkpoint_dir);
    if (rel.is_absolute() || rel.has_root_name())
      fail("checkpoint_dir '" + opts_.checkpoint_dir + "' must be relative to the file's folder");
    for (const auto& part : rel)
      if (part == "..") fail("checkpoint_dir '" + opts_.checkpoint_dir + "' must stay inside the file's folder");
    const fs::path dir = fs::path(path).parent_path() / rel;
    checkpoint_io::save(dir.string(), values);
    for (auto& [name, t] : values) {
      TensorProto* p = gp_->add_initializer();
      p->set_name(name);
      p->set_data_type(onnx_util::to_onnx_dtype(t.dtype()));
      for (int64_t d : t.shape()) p->add_dims(d);
      p->set_data_location(TensorProto::EXTERNAL);
      auto kv = [&](const char* k, const std::string& v) {
        auto* e = p->add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      kv("location", (rel / name / "out").generic_string());
      kv("offset", "0");
      kv("length", std::to_string(t.nbytes()));
    }
  }

  add_metadata(m);
  return m;
}

namespace {

void write_atomically(const std::string& path, const std::string& bytes) {
  static std::atomic<int> counter{0};
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("[onnx.save] cannot create " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error("[onnx.save] cannot write " + tmp + ": " + std::strerror(e));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error("[onnx.save] cannot write " + tmp + ": " + std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error("[onnx.save] cannot rename " + tmp + " to " + path + ": " + std::strerror(e));
  }
}

}  // namespace

void save(const CompiledJob& job, const std::string& path, const SaveOptions& options) {
  if (path.empty()) throw Error("[onnx.save] empty path");
  if (options.opset < 17) throw Error("[onnx.save] opset " + std::to_string(options.opset) + " is not supported (17 or later)");
  Exporter ex(job, options);
  const ::onnx::ModelProto m = ex.run(path);
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw Error("[onnx.save] cannot serialize the model for " + path);
  write_atomically(path, bytes);
}

}  // namespace jobflow::onnx

// The last stage of a load: the job built from a checked model
// (importer.h lists the stages): graph inputs that are not initializers
// become placeholders, float initializers session variables (get_variable +
// session::assign), the rest constants read at load time; each node goes
// through its import row; then the signature, loss, optimizer and the
// jobflow.* metadata of a job file.
#include <algorithm>
#include <filesystem>
#include <map>
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

BuildResult build(Parsed& P, const LoadOptions& opts, bool inspect) {
  const ModelProto& m = P.model;
  const GraphProto& g = m.graph();
  const std::string& what = P.what;
  auto meta = [&](const char* k) -> std::string {
    auto it = P.meta.find(k);
    return it == P.meta.end() ? "" : it->second;
  };
  const bool job_file = !meta(ou::kVersion).empty() || !meta(ou::kJobType).empty();

  // Initializers (validated and read; a checkpoint may override them).
  std::map<std::string, Tensor> inits;
  for (const auto& t : g.initializer())
    inits[t.name()] = read_tensor(t, P.base_dir, opts.max_tensor_bytes, "initializer '" + t.name() + "'", t.name());
  if (!opts.checkpoint.empty() && !inspect) {
    for (auto& [name, v] : checkpoint_io::load(opts.checkpoint)) {
      auto it = inits.find(name);
      if (it == inits.end())
        fail(what, "checkpoint '" + opts.checkpoint + "' has variable '" + name + "', which the model does not have");
      if (it->second.shape() != v.shape() || it->second.dtype() != v.dtype())
        fail(what, "checkpoint variable '" + name + "' is " + spec_str({v.shape(), v.dtype()}) + " but the model has " +
                       spec_str({it->second.shape(), it->second.dtype()}));
      it->second = v;
    }
  }

  // Placeholders: graph inputs that are not initializers.
  std::vector<std::string> in_names;
  std::vector<TensorSpec> in_specs;
  for (const auto& i : g.input()) {
    if (inits.count(i.name())) continue;
    in_names.push_back(i.name());
    in_specs.push_back(input_spec(P, i));
  }

  // Job type, loss, optimizer.
  JobType type = JobType::Predict;
  if (meta(ou::kJobType) == "train") type = JobType::Train;
  else if (!meta(ou::kJobType).empty() && meta(ou::kJobType) != "predict")
    fail(what, "jobflow.job_type is \"" + meta(ou::kJobType) + "\" (train or predict)");
  if (opts.type) type = *opts.type;
  if (inspect) type = JobType::Predict;
  const bool file_loss = job_file && !meta(ou::kLoss).empty();
  const bool added_loss = type == JobType::Train && !file_loss;
  if (added_loss) {
    if (opts.loss.empty() || opts.optimizer.empty())
      fail(what, "loading as a train job needs LoadOptions.loss and LoadOptions.optimizer");
    if (opts.loss != "sparse_softmax_cross_entropy" && opts.loss != "mse")
      fail(what, "loss \"" + opts.loss + "\" is not sparse_softmax_cross_entropy or mse");
  }
  std::string loss_output = opts.loss_output;
  TensorSpec loss_out_spec;
  if (added_loss) {
    const ValueInfoProto* vi = nullptr;
    for (const auto& o : g.output())
      if (loss_output.empty() ? true : o.name() == loss_output) {
        vi = &o;
        break;
      }
    if (!vi) fail(what, "loss_output '" + loss_output + "' is not a graph output");
    loss_output = vi->name();
    loss_out_spec = input_spec(P, *vi);
    if (loss_out_spec.shape.empty()) fail(what, "output '" + loss_output + "' is a scalar; a loss needs a batch");
    if (opts.loss == "sparse_softmax_cross_entropy") {
      in_names.push_back("labels");
      in_specs.push_back({{loss_out_spec.shape[0]}, DType::Int32});
    } else {
      in_names.push_back("targets");
      in_specs.push_back(loss_out_spec);
    }
  }

  std::vector<PlaceholderSpec> specs;
  Structure in_struct;
  bool have_in_struct = false;
  if (job_file && !meta(ou::kInputStructure).empty() && !added_loss) {
    Structure s;
    try {
      s = ou::structure_from_text(meta(ou::kInputStructure));
    } catch (const Error& e) {
      fail(what, std::string("jobflow.input_structure: ") + e.what());
    }
    int n = 0;
    std::vector<int> idx;
    count_leaves(s, n, idx);
    std::sort(idx.begin(), idx.end());
    for (int i = 0; i < n; ++i)
      if (idx[i] != i) fail(what, "jobflow.input_structure leaves do not index the inputs 0..n-1");
    if (n != static_cast<int>(in_names.size()))
      fail(what, "jobflow.input_structure has " + std::to_string(n) + " leaves but the graph has " +
                     std::to_string(in_names.size()) + " inputs");
    if (s.kind != Structure::Kind::Tuple) fail(what, "jobflow.input_structure must be a tuple of the arguments");
    for (auto& c : s.children) specs.push_back(spec_from_structure(c, in_names, in_specs, what));
    in_struct = s;
    have_in_struct = true;
  } else {
    for (size_t i = 0; i < in_names.size(); ++i) specs.push_back(Numpy::Placeholder(in_specs[i].shape, in_specs[i].dtype, in_names[i]));
  }
  (void)have_in_struct;

  FunctionConfig cfg;
  std::string name = opts.name;
  if (name.empty()) name = meta(ou::kJobName);
  if (name.empty()) name = g.name();
  if (name.empty()) name = file_stem(what);
  cfg.name(name);
  cfg.max_in_flight(opts.max_in_flight == 0 ? 1 : opts.max_in_flight);
  if (opts.num_threads < 0) fail(what, "num_threads must be >= 0, got " + std::to_string(opts.num_threads));
  cfg.num_threads(opts.num_threads);
  {
    Device d;
    std::string why;
    if (!parse_device(opts.device.empty() ? "cpu" : opts.device, &d, &why)) fail(what, why);
    cfg.default_placement(d.tag);
  }
  if (!meta(ou::kSeed).empty()) {
    try {
      cfg.seed(static_cast<uint64_t>(std::stoull(meta(ou::kSeed))));
    } catch (...) {
      fail(what, "jobflow.seed is not a number");
    }
  }

  Importer I(what, opts, m, P.base_dir);
  I.opset = P.opset;
  I.inspect_mode = inspect;
  I.train = type == JobType::Train;
  I.job_file = job_file;
  // A Jobflow predict file trained with a loss given at load (LoadOptions)
  // has no jobflow.trainable: like an ordinary model, its float weights are.
  const bool file_trainable = job_file && !(type == JobType::Train && !file_loss && meta(ou::kTrainable).empty());
  if (file_trainable) {
    for (auto& n : split_list(meta(ou::kTrainable))) I.trainable.insert(n);
  } else {
    for (auto& n : param_inputs(g))
      if (inits.count(n) && is_floating(inits[n].dtype())) I.trainable.insert(n);
  }

  std::shared_ptr<optimizer::Optimizer> opt;
  if (type == JobType::Train && !inspect) {
    try {
      if (file_loss) {
        optimizer::Scheduler sched;
        if (!meta(ou::kSchedule).empty()) sched = ou::schedule_from_text(meta(ou::kSchedule));
        opt = ou::optimizer_from_text(opts.optimizer.empty() ? meta(ou::kOptimizer) : opts.optimizer, sched);
      } else {
        opt = ou::optimizer_from_text(opts.optimizer, optimizer::Scheduler());
      }
    } catch (const Error& e) {
      fail(what, std::string("optimizer: ") + e.what());
    }
    if (!opt) fail(what, "no optimizer");
  }

  detail::JobBuilder B(type, cfg, specs);
  B.enter();
  BuildResult R;
  std::vector<Blob> outs;
  Structure out_struct;
  try {
    for (size_t i = 0; i < in_names.size(); ++i) I.values[in_names[i]].blob = B.input(static_cast<int>(i));
    for (auto& [n, t] : inits) {
      if (I.values.count(n)) continue;
      Value v;
      v.konst = t;
      v.variable = is_floating(t.dtype());
      I.values[n] = v;
    }
    for (int k = 0; k < g.node_size(); ++k) {
      const NodeProto& n = g.node(k);
      const size_t before = I.values.size();
      (void)before;
      I.run_node(n, k);
      if (inspect) {
        onnx_import::NodeShapes ns;
        ns.op_type = n.op_type();
        for (const auto& a : n.attribute())
          if (a.type() == AttributeProto::INT) ns.ints[a.name()] = a.i();
        for (const auto& in : n.input()) {
          TensorSpec s;
          auto it = I.values.find(in);
          if (!in.empty() && it != I.values.end())
            s = it->second.blob.defined() ? it->second.blob.spec() : TensorSpec{it->second.konst.shape(), it->second.konst.dtype()};
          ns.inputs.push_back(s);
        }
        for (const auto& o : n.output()) {
          TensorSpec s;
          auto it = I.values.find(o);
          if (!o.empty() && it != I.values.end())
            s = it->second.blob.defined() ? it->second.blob.spec() : TensorSpec{it->second.konst.shape(), it->second.konst.dtype()};
          ns.outputs.push_back(s);
        }
        R.analysis.nodes.push_back(std::move(ns));
      }
    }
    I.node = nullptr;
    auto out_blob = [&](const std::string& name, const ValueInfoProto* vi) {
      auto b = I.bad_outputs.find(name);
      if (b != I.bad_outputs.end())
        throw Unsupported("[onnx.load] " + what + ": " + b->second, {{b->second, {name}}});
      auto it = I.values.find(name);
      if (it == I.values.end()) fail(what, "graph output '" + name + "' is not defined");
      Value& v = it->second;
      Blob bl;
      if (v.blob.defined()) bl = v.blob;
      else if (v.variable && !inspect) {
        bl = get_variable(name, v.konst.shape(), v.konst.dtype(), zeros_initializer(), I.trainable.count(name) > 0);
        session::assign(name, v.konst);
        v.blob = bl;
      } else {
        bl = constant(v.konst, name);
      }
      if (vi && vi->type().has_tensor_type()) {
        const int32_t et = vi->type().tensor_type().elem_type();
        if (et != 0 && et != TensorProto::BOOL) {
          try {
            DType want = ou::from_onnx_dtype(et, "output");
            if (want != bl.dtype()) bl = cast(bl, want);
          } catch (const Error&) {
          }
        }
      }
      return bl;
    };
    if (job_file && !meta(ou::kOutputStructure).empty() && !added_loss) {
      for (const auto& o : g.output()) outs.push_back(out_blob(o.name(), &o));
      try {
        out_struct = ou::structure_from_text(meta(ou::kOutputStructure));
      } catch (const Error& e) {
        fail(what, std::string("jobflow.output_structure: ") + e.what());
      }
      int n = 0;
      std::vector<int> idx;
      count_leaves(out_struct, n, idx);
      if (n != static_cast<int>(outs.size()))
        fail(what, "jobflow.output_structure has " + std::to_string(n) + " leaves but the graph has " +
                       std::to_string(outs.size()) + " outputs");
      for (int i : idx)
        if (i < 0 || i >= n) fail(what, "jobflow.output_structure has a bad leaf index");
    } else if (added_loss) {
      Blob y = out_blob(loss_output, nullptr);
      Blob l;
      if (opts.loss == "sparse_softmax_cross_entropy") {
        if (y.ndim() != 2) fail(what, "sparse_softmax_cross_entropy needs a (batch, classes) output, got " + spec_str(y.spec()));
        l = nn::sparse_softmax_cross_entropy_with_logits(B.input(static_cast<int>(in_names.size()) - 1), y);
      } else {
        l = reduce_mean(square(sub(y, B.input(static_cast<int>(in_names.size()) - 1))));
      }
      if (!inspect) detail::set_objective(l, opt);
      outs.push_back(l);
      out_struct.kind = Structure::Kind::Leaf;
      out_struct.index = 0;
    } else {
      for (const auto& o : g.output()) outs.push_back(out_blob(o.name(), &o));
      if (outs.size() == 1) {
        out_struct.kind = Structure::Kind::Leaf;
        out_struct.index = 0;
      } else {
        out_struct.kind = Structure::Kind::Tuple;
        for (size_t i = 0; i < outs.size(); ++i) {
          Structure c;
          c.kind = Structure::Kind::Leaf;
          c.index = static_cast<int>(i);
          out_struct.children.push_back(c);
        }
      }
    }
    if (file_loss && type == JobType::Train && !inspect) {
      auto it = I.values.find(meta(ou::kLoss));
      if (it == I.values.end() || !it->second.blob.defined())
        fail(what, "jobflow.loss names '" + meta(ou::kLoss) + "', which is not a tensor of the graph");
      detail::set_objective(it->second.blob, opt);
    }
  } catch (...) {
    B.leave();
    throw;
  }
  B.leave();

  if (inspect) {
    Signature& s = R.analysis.signature;
    s.job_name = name;
    s.type = type;
    s.input_names = in_names;
    s.inputs = in_specs;
    int next = 0;
    s.input_structure.kind = Structure::Kind::Tuple;
    if (have_in_struct) s.input_structure = in_struct;
    else
      for (size_t i = 0; i < in_names.size(); ++i) {
        Structure c;
        c.kind = Structure::Kind::Leaf;
        c.index = next++;
        s.input_structure.children.push_back(c);
      }
    for (auto& b : outs) s.outputs.push_back(b.spec());
    s.output_structure = out_struct;
    s.callback = meta(ou::kCallback) == "1";
    return R;
  }

  R.job = B.finish(outs, out_struct, meta(ou::kCallback) == "1");

  // The step the saved job had reached.
  if (job_file && !meta(ou::kStep).empty()) {
    int64_t step = 0;
    try {
      size_t used = 0;
      step = std::stoll(meta(ou::kStep), &used);
      if (used != meta(ou::kStep).size() || step < 0) throw Error("");
    } catch (...) {
      fail(what, "jobflow.step is not a non-negative integer: \"" + meta(ou::kStep) + "\"");
    }
    if (step > 0) R.job->set_steps_run(step);  // schedules, dropout masks, Adam continue from here
  }
  // Optimizer state saved with the job (after finish() created it).
  if (type == JobType::Train) {
    for (const auto& n : split_list(meta(ou::kState))) {
      auto it = inits.find(n);
      if (it == inits.end()) fail(what, "jobflow.optimizer_state names '" + n + "', which is not an initializer");
      if (session::has_variable(n)) session::assign(n, it->second);
    }
  }
  return R;
}

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
    int64_t n = 1;
    for (int64_t d : t.dims()) n *= d;
    A.parameters += n;
  }
  std::map<std::string, int64_t> counts;
  for (const auto& n : P.model.graph().node()) counts[n.op_type()]++;
  A.op_counts.assign(counts.begin(), counts.end());
  return A;
}

}  // namespace jobflow::onnx_import

// The `jobflow` command-line tool: job files (ONNX) from the shell.
//
//   jobflow inspect FILE
//   jobflow export [--all | NAME...] --out DIR [--checkpoint DIR] [--external SUBDIR]
//   jobflow run FILE [--data IDX_DIR | --input FILE.{idx,npy} ...] [--out DIR] [--batches N] [--checkpoint DIR]
//               [--precision fp32|bf16]
//   jobflow onnx-test DIR... [-v] [--min-pass N]
//   jobflow --help | --version
//
// docs/job-files.md describes the file format and every command.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include <jobflow/jobflow.h>
#include <jobflow/models/seeds.h>
#include <jobflow/onnx.h>

#include "onnx/conformance.h"

#ifndef JOBFLOW_VERSION
#define JOBFLOW_VERSION "0.1.0"
#endif

namespace {

namespace flow = jobflow;
namespace fs = std::filesystem;
namespace models = jobflow::models;

const char* kUsage =
    "usage: jobflow COMMAND [ARGS]\n"
    "\n"
    "Job files are job functions saved as ONNX models (docs/job-files.md).\n"
    "\n"
    "commands:\n"
    "  inspect FILE               signature, ops, parameters and FLOPs per call of a job file\n"
    "                             or an ONNX model\n"
    "  export [--all | NAME...] --out DIR [--checkpoint DIR] [--external SUBDIR]\n"
    "                             writes the built-in example jobs as DIR/NAME.onnx:\n"
    "                             lenet_train lenet_eval lenet_predict mlp_train mlp_eval mlp_predict\n"
    "                             (batch 100; train: SGD lr 0.1, momentum 0). --checkpoint: the\n"
    "                             variables come from that OneFlow checkpoint; --external: the\n"
    "                             variables are written as a checkpoint in DIR/SUBDIR that the\n"
    "                             files point into (ONNX external data)\n"
    "  run FILE [--data DIR | --input FILE ...] [--out DIR] [--batches N] [--checkpoint DIR]\n"
    "      [--precision fp32|bf16]\n"
    "                             runs a predict job over the Fashion-MNIST test set (--data, default\n"
    "                             $JOBFLOW_DATA or /usr/share/datasets/fashion-mnist) or over NumPy\n"
    "                             .npy or IDX files (--input, one per placeholder in order: split\n"
    "                             into calls along dim 0 when the placeholder's batch is fixed and\n"
    "                             smaller, passed whole when it is dynamic); prints the accuracy\n"
    "                             when the job returns (labels, logits) or logits of the test set.\n"
    "                             --out DIR: writes every output as DIR/<output name>.npy, the\n"
    "                             calls' results concatenated along dim 0. A sequence input (an\n"
    "                             ONNX seq or optional) is a folder of 0.npy, 1.npy, ... (its items;\n"
    "                             \"none\" for an optional without a value); a sequence output is\n"
    "                             written as DIR/<name>/<item>.npy (per call: <call>/<item>.npy).\n"
    "                             A string input is a .npy of str or bytes (passed whole); a string\n"
    "                             output is written as a .npy of str.\n"
    "                             --precision bf16:\n"
    "                             convolutions in bfloat16 where it is faster (AMX, or AVX512_BF16\n"
    "                             dot products at least 0.75x the float32 FMA rate; float32 with a\n"
    "                             notice elsewhere); default: the file's jobflow.precision, else fp32\n"
    "  onnx-test DIR... [-v] [--min-pass N]\n"
    "                             runs ONNX backend test cases (folders with model.onnx and\n"
    "                             test_data_set_*); fails when a case fails, when fewer than N\n"
    "                             pass, or when a case is skipped for a reason that is not an\n"
    "                             unsupported op, attribute, input form or dtype (or values of\n"
    "                             random draws, which no runtime reproduces)\n"
    "  --help, --version\n";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "jobflow: %s (try jobflow --help)\n", msg.c_str());
  std::exit(2);
}

// ---------------------------------------------------------------- export

struct Example {
  const char* name;
  models::Net net;
  char kind;  // 't'rain, 'e'val, 'p'redict
};
const Example kExamples[] = {
    {"lenet_train", models::Net::LeNet, 't'}, {"lenet_eval", models::Net::LeNet, 'e'},
    {"lenet_predict", models::Net::LeNet, 'p'}, {"mlp_train", models::Net::MLP, 't'},
    {"mlp_eval", models::Net::MLP, 'e'},     {"mlp_predict", models::Net::MLP, 'p'},
};

int cmd_export(const std::vector<std::string>& args) {
  std::vector<std::string> names;
  std::string out, checkpoint, external;
  bool all = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) usage_error("export: " + a + " needs a value");
      return args[++i];
    };
    if (a == "--all") all = true;
    else if (a == "--out" || a == "-o") out = value();
    else if (a.rfind("--out=", 0) == 0) out = a.substr(6);
    else if (a == "--checkpoint") checkpoint = value();
    else if (a.rfind("--checkpoint=", 0) == 0) checkpoint = a.substr(13);
    else if (a == "--external") external = value();
    else if (a.rfind("--external=", 0) == 0) external = a.substr(11);
    else if (!a.empty() && a[0] == '-') usage_error("export: unknown option '" + a + "'");
    else names.push_back(a);
  }
  if (out.empty()) usage_error("export: --out DIR is required");
  if (all == !names.empty()) usage_error("export: give --all or job names (not both)");
  std::vector<const Example*> todo;
  for (const auto& e : kExamples)
    if (all || std::find(names.begin(), names.end(), e.name) != names.end()) todo.push_back(&e);
  for (const auto& n : names)
    if (std::none_of(std::begin(kExamples), std::end(kExamples), [&](const Example& e) { return n == e.name; }))
      usage_error("export: unknown job '" + n +
                  "' (lenet_train, lenet_eval, lenet_predict, mlp_train, mlp_eval, mlp_predict)");

  fs::create_directories(out);
  if (!checkpoint.empty()) flow::CheckPoint().load(checkpoint);
  for (const Example* e : todo) {
    std::shared_ptr<flow::CompiledJob> job = e->kind == 't'   ? models::train_job(e->net, e->name)
                                             : e->kind == 'e' ? models::eval_job(e->net, e->name)
                                                              : models::predict_job(e->net, e->name);
    const std::string path = (fs::path(out) / (std::string(e->name) + ".onnx")).string();
    flow::onnx::SaveOptions so;
    // One checkpoint folder per file: files stay independent.
    if (!external.empty()) so.checkpoint_dir = external + "/" + e->name;
    flow::onnx::save(*job, path, so);
    std::printf("%s: %s\n", path.c_str(), job->signature().str().c_str());
  }
  return 0;
}

// ---------------------------------------------------------------- inspect

int cmd_inspect(const std::vector<std::string>& args) {
  if (args.size() != 1) usage_error("inspect takes one FILE");
  std::cout << flow::onnx::inspect(args[0]).str();
  std::cout.flush();
  return 0;
}

// ---------------------------------------------------------------- run

class Progress {
 public:
  Progress(int64_t total, int64_t per_batch)
      : total_(total), per_(per_batch), tty_(::isatty(2)), t0_(std::chrono::steady_clock::now()) {}
  // On a terminal the bar redraws in place; otherwise only the last state is printed.
  void update(int64_t done) {
    if (!tty_ && done != total_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const int width = 30;
    const int fill = total_ > 0 ? static_cast<int>(width * done / total_) : width;
    std::string bar(static_cast<size_t>(fill), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r[%s] %lld/%lld batches, %.0f samples/s", bar.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total_), s > 0 ? done * per_ / s : 0.0);
    if (done == total_) std::fprintf(stderr, " (%.2f s)\n", s);
    std::fflush(stderr);
  }

 private:
  int64_t total_, per_;
  bool tty_;
  std::chrono::steady_clock::time_point t0_;
};

int64_t argmax_row(const flow::Tensor& logits, int64_t i) {
  const int64_t C = logits.dim(1);
  int64_t best = 0;
  for (int64_t c = 1; c < C; ++c)
    if (logits.at(i * C + c) > logits.at(i * C + best)) best = c;
  return best;
}

bool is_logits(const flow::TensorSpec& s, int64_t B) {
  return s.shape.size() == 2 && s.shape[0] == B && flow::is_floating(s.dtype);
}
bool is_labels(const flow::TensorSpec& s, int64_t B) {
  return s.shape.size() == 1 && s.shape[0] == B && !flow::is_floating(s.dtype);
}

// A file name for an output: letters, digits, '.', '-' and '_' kept, any
// other character '_'.
std::string file_name_of(const std::string& name) {
  std::string r = name.empty() ? "output" : name;
  for (char& c : r)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  if (r == "." || r == "..") r = "_";
  return r;
}

// Tensors concatenated along dim 0 (scalars stacked into a vector).
flow::Tensor concat_dim0(const std::vector<flow::Tensor>& parts) {
  if (parts.size() == 1) return parts[0];
  const flow::Tensor& p0 = parts[0];
  flow::Shape s = p0.shape();
  const bool scalars = s.empty();
  if (scalars) s = {0};
  s[0] = 0;
  for (const auto& p : parts) {
    flow::Shape rest(p.shape().begin() + (scalars ? 0 : 1), p.shape().end());
    if (p.dtype() != p0.dtype() || rest != flow::Shape(p0.shape().begin() + (scalars ? 0 : 1), p0.shape().end()))
      throw flow::Error("run: the calls' results " + flow::spec_str({p0.shape(), p0.dtype()}) + " and " +
                        flow::spec_str({p.shape(), p.dtype()}) + " do not concatenate along dim 0");
    s[0] += scalars ? 1 : p.dim(0);
  }
  flow::Tensor out(s, p0.dtype());
  size_t off = 0;
  for (const auto& p : parts) {
    std::memcpy(static_cast<char*>(out.raw()) + off, p.raw(), p.nbytes());
    off += p.nbytes();
  }
  return out;
}

// One placeholder's calls from a whole tensor (.npy or IDX): converted to
// the placeholder's dtype (IDX uint8 images to float as x / 255), then split
// along dim 0 when the placeholder's batch is fixed and smaller than the
// rows given, else passed whole.
std::vector<flow::Tensor> calls_of(flow::Tensor all, const flow::TensorSpec& spec, const std::string& what, bool idx,
                                   bool exact) {
  if (all.dtype() != spec.dtype) {
    if (idx && all.dtype() == flow::DType::UInt8 && flow::is_floating(spec.dtype)) {
      flow::Tensor f(all.shape(), flow::DType::Float32);
      const uint8_t* p = all.data<uint8_t>();
      float* q = f.data<float>();
      for (int64_t i = 0; i < all.numel(); ++i) q[i] = p[i] / 255.0f;
      all = f.dtype() == spec.dtype ? f : f.astype(spec.dtype);
    } else {
      all = all.astype(spec.dtype);
    }
  }
  if (spec.shape.empty() || spec.shape[0] < 0 || all.ndim() == 0 || !flow::is_static(spec.shape)) return {all};
  const int64_t B = spec.shape[0];
  const int64_t row = flow::numel(flow::Shape(spec.shape.begin() + 1, spec.shape.end()));
  if (all.numel() == flow::numel(spec.shape)) return {all.reshape(spec.shape)};
  if (all.numel() % std::max<int64_t>(row, 1) != 0 || all.numel() / std::max<int64_t>(row, 1) != all.dim(0))
    throw flow::Error("run: " + what + ": " + flow::shape_str(all.shape()) + " does not split into rows of " +
                      std::to_string(row) + " elements for placeholder " + flow::spec_str(spec));
  const int64_t rows = all.dim(0);
  if (exact && rows % B != 0)
    throw flow::Error("run: " + what + ": " + std::to_string(rows) + " rows do not split into calls of " +
                      std::to_string(B) + " (placeholder " + flow::spec_str(spec) + ")");
  const int64_t n = rows / B;
  if (n == 0) throw flow::Error("run: " + what + ": " + std::to_string(rows) + " rows, fewer than one batch of " + std::to_string(B));
  std::vector<flow::Tensor> out;
  const size_t bytes = static_cast<size_t>(B * row) * flow::dtype_size(spec.dtype);
  for (int64_t i = 0; i < n; ++i) {
    flow::Tensor t(spec.shape, spec.dtype);
    std::memcpy(t.raw(), static_cast<const char*>(all.raw()) + i * bytes, bytes);
    out.push_back(std::move(t));
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

// The items' dtype in a packed value's type as inspect() words it
// ("sequence(float32, rank 1)", "optional(tensor(int64))").
flow::DType items_dtype(const std::string& type) {
  const size_t open = type.rfind('(');
  const size_t end = type.find_first_of(",)", open);
  return flow::dtype_from_name(type.substr(open + 1, end - open - 1));
}

// Whether a packed value's type (as inspect() words it) is a string tensor.
bool is_string_type(const std::string& type) { return type.rfind("tensor(string", 0) == 0; }

// A sequence or optional input from `arg`: a folder of 0.npy, 1.npy, ...
// (the items), one .npy (an optional tensor's value) or "none".
flow::Tensor packed_input(const std::string& arg, const std::string& name, const std::string& type) {
  const flow::DType elem = items_dtype(type);
  const bool optional = type.rfind("optional(", 0) == 0;
  if (arg == "none") {
    if (!optional) throw flow::Error("run: input '" + name + "' is a " + type + ", which always has a value");
    return flow::pack_none(elem);
  }
  std::vector<flow::Tensor> items;
  if (fs::is_directory(arg)) {
    for (int k = 0;; ++k) {
      const fs::path p = fs::path(arg) / (std::to_string(k) + ".npy");
      if (!fs::exists(p)) break;
      flow::Tensor t = flow::data::read_npy(p.string());
      if (t.dtype() != elem) t = t.astype(elem);
      items.push_back(std::move(t));
    }
    // Files that are not 0.npy, 1.npy, ... in a row would be left out unseen.
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(arg)) files += e.is_regular_file() ? 1 : 0;
    if (files != items.size())
      throw flow::Error("run: input '" + name + "': " + arg + " holds " + std::to_string(files) + " files; a " + type +
                        " is read from 0.npy, 1.npy, ... only (found " + std::to_string(items.size()) + " of them)");
    if (type.rfind("optional(tensor(", 0) == 0 && items.size() != 1)
      throw flow::Error("run: input '" + name + "' is a " + type + ": one item (0.npy) or \"none\", " + arg + " holds " +
                        std::to_string(items.size()));
  } else if (optional && type.rfind("optional(tensor(", 0) == 0 && ends_with(arg, ".npy")) {
    flow::Tensor t = flow::data::read_npy(arg);
    items.push_back(t.dtype() == elem ? t : t.astype(elem));
  } else {
    throw flow::Error("run: input '" + name + "' is a " + type + ": give a folder of its items as 0.npy, 1.npy, ..." +
                      (optional ? std::string(", one .npy for an optional tensor, or \"none\"") : std::string()));
  }
  return flow::pack_sequence(items, elem);
}

int cmd_run(const std::vector<std::string>& args) {
  std::string file, data, checkpoint, out_dir, precision;
  std::vector<std::string> inputs;
  int64_t max_batches = -1;
  bool use_data = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) usage_error("run: " + a + " needs a value");
      return args[++i];
    };
    if (a == "--data") data = value(), use_data = true;
    else if (a.rfind("--data=", 0) == 0) data = a.substr(7), use_data = true;
    else if (a == "--input") inputs.push_back(value());
    else if (a.rfind("--input=", 0) == 0) inputs.push_back(a.substr(8));
    else if (a == "--out" || a == "-o") out_dir = value();
    else if (a.rfind("--out=", 0) == 0) out_dir = a.substr(6);
    else if (a == "--batches") max_batches = std::atoll(value().c_str());
    else if (a.rfind("--batches=", 0) == 0) max_batches = std::atoll(a.substr(10).c_str());
    else if (a == "--checkpoint") checkpoint = value();
    else if (a == "--precision") precision = value();
    else if (a.rfind("--precision=", 0) == 0) precision = a.substr(12);
    else if (!a.empty() && a[0] == '-') usage_error("run: unknown option '" + a + "'");
    else if (file.empty()) file = a;
    else usage_error("run: one FILE only");
  }
  if (file.empty()) usage_error("run: FILE is required");
  if (use_data && !inputs.empty()) usage_error("run: --data and --input exclude each other");
  flow::onnx::LoadOptions lo;
  lo.checkpoint = checkpoint;
  if (!precision.empty() && precision != "fp32" && precision != "bf16")
    usage_error("run: --precision is fp32 or bf16, got '" + precision + "'");
  lo.precision = precision;
  auto job = flow::onnx::load(file, lo);
  const flow::Signature& sig = job->signature();
  // Sequences and optionals (packed uint8 tensors): which, when the job
  // has a uint8 rank-1 value at all.
  std::map<std::string, std::string> packed;
  bool maybe_packed = false;
  for (const auto* specs : {&sig.inputs, &sig.outputs})
    for (const auto& t : *specs) maybe_packed = maybe_packed || (t.dtype == flow::DType::UInt8 && t.shape.size() == 1);
  if (maybe_packed)
    for (auto& [n, t] : flow::onnx::inspect(file).packed) packed[n] = t;
  if (sig.type != flow::JobType::Predict)
    throw flow::Error("run: " + file + " is a train job; jobflow run runs predict jobs");
  if (sig.inputs.empty() && inputs.empty() && use_data) throw flow::Error("run: " + file + " takes no inputs");
  // The batch of a call, as far as it is known before the call.
  const int64_t B = sig.inputs.empty() || sig.inputs[0].shape.empty() ? 1 : sig.inputs[0].shape[0];

  // Feeds: one list of calls per placeholder; test labels when known.
  std::vector<std::vector<flow::Tensor>> feeds(sig.inputs.size());
  std::vector<flow::Tensor> truth;
  if (!inputs.empty() || sig.inputs.empty()) {
    if (inputs.size() != sig.inputs.size())
      throw flow::Error("run: " + file + " takes " + std::to_string(sig.inputs.size()) + " inputs (" +
                        sig.str() + "), " + std::to_string(inputs.size()) + " --input files given");
    for (size_t k = 0; k < inputs.size(); ++k) {
      auto seq = packed.find(sig.input_names[k]);
      if (seq != packed.end() && is_string_type(seq->second)) {  // a string tensor: a .npy of str or bytes, whole
        const flow::UnpackedStrings s = flow::data::read_npy_strings(inputs[k]);
        feeds[k] = {flow::pack_strings(s.items, s.shape)};
        continue;
      }
      if (seq != packed.end()) {
        feeds[k] = {packed_input(inputs[k], sig.input_names[k], seq->second)};
        continue;
      }
      const bool npy = ends_with(inputs[k], ".npy");
      feeds[k] = calls_of(npy ? flow::data::read_npy(inputs[k]) : flow::data::read_idx(inputs[k]), sig.inputs[k],
                          inputs[k], !npy, npy || !out_dir.empty());
    }
  } else {
    if (B < 0)
      throw flow::Error("run: " + file + " has a dynamic batch (" + sig.str() + "); give its inputs with --input");
    // Fashion-MNIST test set: images for a float placeholder, labels for an
    // integer one.
    auto mnist = flow::data::load_mnist(B, B, data);
    for (size_t k = 0; k < sig.inputs.size(); ++k) {
      const auto& s = sig.inputs[k];
      if (flow::is_floating(s.dtype)) {
        if (flow::numel(s.shape) != B * 28 * 28)
          throw flow::Error("run: placeholder '" + sig.input_names[k] + "' " + flow::spec_str(s) +
                            " does not take Fashion-MNIST images (" + std::to_string(B) + " x 28 x 28)");
        for (auto& t : mnist.test.images) feeds[k].push_back(s.dtype == t.dtype() ? t.reshape(s.shape) : t.astype(s.dtype).reshape(s.shape));
      } else if (is_labels(s, B)) {
        for (auto& t : mnist.test.labels) feeds[k].push_back(t.dtype() == s.dtype ? t : t.astype(s.dtype));
      } else {
        throw flow::Error("run: placeholder '" + sig.input_names[k] + "' " + flow::spec_str(s) +
                          " is neither images nor labels; use --input");
      }
    }
    truth = mnist.test.labels;
  }
  // Calls: inputs split into batches give one call per batch (the same
  // count for all of them); inputs passed whole go with every call.
  int64_t n = 1;
  for (size_t k = 0; k < feeds.size(); ++k) {
    const int64_t m = static_cast<int64_t>(feeds[k].size());
    if (m == 1) continue;
    if (n > 1 && m != n)
      throw flow::Error("run: --input '" + inputs.at(k) + "' splits into " + std::to_string(m) + " calls, another input into " +
                        std::to_string(n));
    n = m;
  }
  if (max_batches >= 0) n = std::min(n, max_batches);

  // What to score: (labels, logits) returns, or logits against the test labels.
  int labels_out = -1, logits_out = -1;
  for (size_t k = 0; k < sig.outputs.size(); ++k) {
    if (labels_out < 0 && is_labels(sig.outputs[k], B)) labels_out = static_cast<int>(k);
    else if (logits_out < 0 && is_logits(sig.outputs[k], B)) logits_out = static_cast<int>(k);
  }
  const bool score = out_dir.empty() && B > 0 && logits_out >= 0 && (labels_out >= 0 || !truth.empty());

  std::printf("%s\n", sig.str().c_str());
  // Samples per call: the batch, or for a dynamic one the rows given.
  int64_t per_call = B > 0 ? B : 1;
  if (B < 0 && !feeds.empty() && !feeds[0].empty() && feeds[0][0].ndim() > 0) per_call = feeds[0][0].dim(0);
  Progress bar(n, per_call);
  int64_t correct = 0, total = 0;
  std::vector<flow::Tensor> last;
  std::vector<std::vector<flow::Tensor>> results(sig.outputs.size());
  for (int64_t i = 0; i < n; ++i) {
    std::vector<flow::Tensor> in;
    for (auto& f : feeds) in.push_back(f.size() == 1 ? f[0] : f[i]);
    last = job->run(std::move(in));
    if (!out_dir.empty())
      for (size_t k = 0; k < last.size(); ++k) results[k].push_back(last[k]);
    if (score) {
      const flow::Tensor& logits = last[logits_out];
      const flow::Tensor& labels = labels_out >= 0 ? last[labels_out] : truth[i];
      for (int64_t r = 0; r < B; ++r) correct += argmax_row(logits, r) == static_cast<int64_t>(labels.at(r));
      total += B;
    }
    bar.update(i + 1);
  }
  if (n == 0) std::fprintf(stderr, "no batches to run\n");
  if (!out_dir.empty()) {
    fs::create_directories(out_dir);
    std::set<std::string> used;
    for (size_t k = 0; k < results.size(); ++k) {
      if (results[k].empty()) continue;
      const std::string base =
          file_name_of(k < sig.output_names.size() ? sig.output_names[k] : "output" + std::to_string(k));
      std::string name = base;
      for (int dup = 1; !used.insert(name).second; ++dup) name = base + "_" + std::to_string(dup);
      if (k < sig.output_names.size() && packed.count(sig.output_names[k]) &&
          is_string_type(packed[sig.output_names[k]])) {
        // Strings: one .npy, the calls' results concatenated along dim 0.
        flow::UnpackedStrings all;
        for (size_t c = 0; c < results[k].size(); ++c) {
          flow::UnpackedStrings u = flow::unpack_strings(results[k][c], "output '" + sig.output_names[k] + "'");
          if (c == 0) {
            all = std::move(u);
            continue;
          }
          if (u.shape.empty() || u.shape.size() != all.shape.size() ||
              !std::equal(u.shape.begin() + 1, u.shape.end(), all.shape.begin() + 1))
            throw flow::Error("run: output '" + sig.output_names[k] + "' is " + flow::shape_str(u.shape) + " in call " +
                              std::to_string(c) + " and " + flow::shape_str(all.shape) +
                              " before: cannot join them along dim 0");
          all.shape[0] += u.shape[0];
          all.items.insert(all.items.end(), u.items.begin(), u.items.end());
        }
        const std::string path = (fs::path(out_dir) / (name + ".npy")).string();
        flow::data::write_npy_strings(path, all);
        std::printf("%s: %s strings\n", path.c_str(), flow::shape_str(all.shape).c_str());
        continue;
      }
      if (k < sig.output_names.size() && packed.count(sig.output_names[k])) {
        // A sequence: its items, per call when there were several.
        for (size_t c = 0; c < results[k].size(); ++c) {
          fs::path dir = fs::path(out_dir) / name;
          if (results[k].size() > 1) dir /= std::to_string(c);
          const flow::UnpackedSequence u = flow::unpack_sequence(results[k][c], "output '" + sig.output_names[k] + "'");
          // The folder holds this run's items only (an optional without a
          // value: no folder, as `none` is given).
          fs::remove_all(dir);
          if (!u.none) fs::create_directories(dir);
          for (size_t j = 0; j < u.items.size(); ++j)
            flow::data::write_npy((dir / (std::to_string(j) + ".npy")).string(), u.items[j]);
          std::printf("%s: %s, %s\n", dir.string().c_str(), packed[sig.output_names[k]].c_str(),
                      u.none ? "no value" : (std::to_string(u.items.size()) + " items").c_str());
        }
        continue;
      }
      const flow::Tensor t = concat_dim0(results[k]);
      const std::string path = (fs::path(out_dir) / (name + ".npy")).string();
      flow::data::write_npy(path, t);
      std::printf("%s: %s\n", path.c_str(), flow::spec_str({t.shape(), t.dtype()}).c_str());
    }
  } else if (score && total > 0) {
    std::printf("accuracy: %.2f%% (%lld/%lld)\n", correct * 100.0 / total, static_cast<long long>(correct),
                static_cast<long long>(total));
  } else if (!last.empty()) {
    for (size_t k = 0; k < last.size(); ++k) {
      auto seq = k < sig.output_names.size() ? packed.find(sig.output_names[k]) : packed.end();
      if (seq == packed.end()) {
        std::printf("output %zu (last batch): %s\n", k, last[k].str().c_str());
        continue;
      }
      if (is_string_type(seq->second)) {
        const flow::UnpackedStrings u = flow::unpack_strings(last[k], "output " + std::to_string(k));
        std::printf("output %zu (last batch): %s strings", k, flow::shape_str(u.shape).c_str());
        for (size_t j = 0; j < u.items.size() && j < 8; ++j) std::printf("%s\"%s\"", j ? ", " : " ", u.items[j].c_str());
        std::printf("%s\n", u.items.size() > 8 ? ", ..." : "");
        continue;
      }
      const flow::UnpackedSequence u = flow::unpack_sequence(last[k], "output " + std::to_string(k));
      std::printf("output %zu (last batch): %s, %s\n", k, seq->second.c_str(),
                  u.none ? "no value" : (std::to_string(u.items.size()) + " items").c_str());
      for (size_t j = 0; j < u.items.size(); ++j) std::printf("  item %zu: %s\n", j, u.items[j].str().c_str());
    }
  }
  return 0;
}

// ---------------------------------------------------------------- onnx-test

int cmd_onnx_test(const std::vector<std::string>& args) {
  std::vector<std::string> dirs;
  bool verbose = false;
  int min_pass = -1;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-v" || a == "--verbose") {
      verbose = true;
    } else if (a == "--min-pass") {
      if (i + 1 >= args.size()) usage_error("onnx-test: --min-pass needs a number");
      const std::string& n = args[++i];
      if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 9)
        usage_error("onnx-test: --min-pass needs a number, got '" + n + "'");
      min_pass = std::stoi(n);
    } else if (!a.empty() && a[0] == '-') {
      usage_error("onnx-test: unknown option '" + a + "'");
    } else {
      dirs.push_back(a);
    }
  }
  if (dirs.empty()) usage_error("onnx-test: give one or more test folders");
  return jobflow::onnx::run_onnx_tests(dirs, std::cout, verbose, min_pass);
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("jobflow %s (job files: ONNX opset 17, jobflow.version 1)\n", JOBFLOW_VERSION);
    return 0;
  }
  for (const auto& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  if (cmd == "inspect") return cmd_inspect(args);
  if (cmd == "export") return cmd_export(args);
  if (cmd == "run") return cmd_run(args);
  if (cmd == "onnx-test") return cmd_onnx_test(args);
  usage_error("unknown command '" + cmd + "'");
} catch (const std::exception& e) {
  std::fprintf(stderr, "\njobflow: %s\n", e.what());
  return 1;
}

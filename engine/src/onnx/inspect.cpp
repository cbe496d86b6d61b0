// jobflow::onnx::inspect: what `jobflow inspect` prints for a job file or an
// ONNX model — signature, op counts, parameters and forward FLOPs per call.
//
// FLOPs (forward, one call): Conv / ConvTranspose / Gemm / MatMul count
// 2 per multiply-add; every other op counts 1 per output element (a rough
// measure of elementwise work); shape-only ops (Reshape, Flatten, Squeeze,
// Unsqueeze, Identity, Constant, Shape, Size, Cast) count 0.
#include <set>
#include <sstream>

#include "import_internal.h"
#include "jobflow/onnx.h"

namespace jobflow::onnx {

namespace {
int64_t node_flops(const onnx_import::NodeShapes& n) {
  static const std::set<std::string> free_ops = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Constant",
                                                 "Shape", "Size", "Cast", "ConstantOfShape", "Dropout", "Range"};
  if (free_ops.count(n.op_type)) return 0;
  for (const auto& s : n.inputs)
    if (!is_static(s.shape)) return -1;  // dims known per call
  for (const auto& s : n.outputs)
    if (!is_static(s.shape)) return -1;
  auto out_elems = [&]() -> int64_t {
    int64_t s = 0;
    for (auto& o : n.outputs) s += numel(o.shape);
    return s;
  };
  if (n.outputs.empty() || (n.outputs[0].shape.empty() && n.op_type != "ReduceSum")) return out_elems();
  const Shape& y = n.outputs[0].shape;
  if (n.op_type == "Conv" && n.inputs.size() >= 2) {
    const Shape& w = n.inputs[1].shape;  // (K, C/g, k...)
    int64_t per = 1;
    for (size_t i = 1; i < w.size(); ++i) per *= w[i];
    return 2 * numel(y) * per + (n.inputs.size() > 2 ? numel(y) : 0);
  }
  if (n.op_type == "ConvTranspose" && n.inputs.size() >= 2) {
    const Shape& x = n.inputs[0].shape;
    const Shape& w = n.inputs[1].shape;  // (C, K/g, k...)
    int64_t per = 1;
    for (size_t i = 1; i < w.size(); ++i) per *= w[i];
    return 2 * numel(x) * per;
  }
  if ((n.op_type == "Gemm" || n.op_type == "MatMul") && n.inputs.size() >= 2) {
    const Shape& a = n.inputs[0].shape;
    if (a.empty()) return out_elems();
    int64_t K = a.back();
    if (n.op_type == "Gemm") {
      auto it = n.ints.find("transA");
      if (it != n.ints.end() && it->second && a.size() == 2) K = a[0];
    }
    return 2 * numel(y) * K + (n.op_type == "Gemm" && n.inputs.size() > 2 ? numel(y) : 0);
  }
  return out_elems();
}
}  // namespace

Inspection inspect(const std::string& path) {
  onnx_import::Analysis a;
  try {
    a = onnx_import::analyze(path);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // e.g. bad_alloc from a hostile file: an Error naming the file
    throw Error("[onnx.inspect] " + path + ": " + e.what());
  }
  Inspection r;
  r.signature = a.signature;
  r.op_counts = a.op_counts;
  r.parameters = a.parameters;
  r.opset = a.opset;
  r.metadata = a.metadata;
  r.packed = a.packed;
  for (auto& n : a.nodes) {
    const int64_t f = node_flops(n);
    if (f < 0 || r.flops < 0) r.flops = -1;
    else r.flops += f;
  }
  return r;
}

std::string Inspection::str() const {
  std::ostringstream o;
  o << signature.str() << "\n";
  if (!packed.empty()) {
    o << "packed values (sequences and optionals: jobflow/sequence.h; strings: jobflow/strings.h):";
    for (auto& [n, t] : packed) o << " " << n << " = " << t << ";";
    o << "\n";
  }
  o << "opset: " << opset << "\n";
  o << "parameters: " << parameters << "\n";
  if (flops >= 0) o << "forward FLOPs per call: " << flops << "\n";
  else o << "forward FLOPs per call: depends on the shapes of the call\n";
  o << "ops:";
  if (op_counts.empty()) o << " (none)";
  o << "\n";
  for (auto& [op, n] : op_counts) o << "  " << op << " x" << n << "\n";
  if (!metadata.empty()) {
    o << "metadata:\n";
    for (auto& [k, v] : metadata) o << "  " << k << " = " << v << "\n";
  }
  return o.str();
}

}  // namespace jobflow::onnx

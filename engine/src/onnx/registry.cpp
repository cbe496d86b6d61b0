// The ONNX op registry: the families' rows, gathered once (registry.h).
#include "registry.h"

#include <algorithm>
#include <array>
#include <map>
#include <utility>

namespace jobflow::onnx {
namespace {

struct Registry {
  std::map<std::pair<std::string, std::string>, ImportRow> imports;  // (domain, op type)
  std::array<ExportRow, kOpKindCount> exports{};

  Registry() {
    OpRows rows;
    for (auto family : {elementwise_onnx_rows, activation_onnx_rows, linalg_onnx_rows, reduce_onnx_rows,
                        shape_onnx_rows, indexing_onnx_rows, nn_onnx_rows, conv_onnx_rows,
                        logic_onnx_rows, math_onnx_rows, resize_onnx_rows, rnn_onnx_rows,
                        detection_onnx_rows, control_onnx_rows, sequence_onnx_rows, text_onnx_rows,
                        strings_onnx_rows, random_onnx_rows, deferred_onnx_rows, quant_onnx_rows, training_onnx_rows})
      family(rows);
    // Two rows for one key would make one of them dead: refused at the
    // first use (every ONNX test loads the registry).
    for (ImportRow& r : rows.imports) {
      const std::string key = r.domain.empty() ? r.op_type : r.domain + "." + r.op_type;
      if (!imports.emplace(std::make_pair(r.domain, r.op_type), r).second)
        throw Error("[onnx] two import rows for " + key);
    }
    for (const ExportRow& r : rows.exports) {
      ExportRow& slot = exports[static_cast<size_t>(r.kind)];
      if (slot.fn) throw Error(std::string("[onnx] two export rows for ") + op_name(r.kind));
      slot = r;
    }
  }
};

const Registry& registry() {
  static const Registry r;
  return r;
}

}  // namespace

const ImportRow* find_import(const std::string& domain, const std::string& op_type) {
  const std::string d = domain == "ai.onnx" ? "" : domain;
  auto it = registry().imports.find({d, op_type});
  return it == registry().imports.end() ? nullptr : &it->second;
}

const ExportRow* find_export(OpKind k) {
  const ExportRow& r = registry().exports[static_cast<size_t>(k)];
  return r.fn ? &r : nullptr;
}

std::vector<std::string> importable_ops() {
  std::vector<std::string> r;
  for (const auto& [key, row] : registry().imports) r.push_back(key.first.empty() ? key.second : key.first + "." + key.second);
  std::sort(r.begin(), r.end());
  return r;
}

}  // namespace jobflow::onnx

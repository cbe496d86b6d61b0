// ONNX rows of the string ops (ops/strings.cpp) (registry.h): StringNormalizer,
// and the string forms of Cast, CastLike (import_string_cast, called by their
// rows in elementwise_onnx.cpp) and TfIdfVectorizer (text_onnx.cpp). String
// tensors are packed (jobflow/strings.h); the importer tracks them as
// SeqType::Kind::Strings. The string ops have no export: save() refuses a
// job holding one, naming the op.
#include "jobflow/strings.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"

namespace jobflow::onnx {
namespace {

void op_string_normalizer(Importer& I) {
  const SeqType& t = I.type_of(0);
  if (!t.is_strings()) I.err("input '" + I.iname(0) + "' must be a string tensor, got " + spec_str(I.spec(0)));
  if (t.rank != -1 && t.rank != 1 && t.rank != 2)
    I.err("input '" + I.iname(0) + "' has rank " + std::to_string(t.rank) + "; StringNormalizer takes (C,) or (1, C)");
  str::NormalizeOptions o;
  const std::string action = I.attr_s("case_change_action", "NONE");
  if (action == "NONE") o.case_change = str::CaseChange::None;
  else if (action == "LOWER") o.case_change = str::CaseChange::Lower;
  else if (action == "UPPER") o.case_change = str::CaseChange::Upper;
  else I.err("case_change_action is \"" + action + "\" (NONE, LOWER or UPPER)");
  o.case_sensitive = I.attr_i("is_case_sensitive", 0) != 0;
  o.locale = I.attr_s("locale", "en_US");
  if (const auto* a = I.attr("stopwords", AttributeProto::STRINGS)) o.stopwords.assign(a->strings().begin(), a->strings().end());
  Blob y;
  try {
    y = str::normalize(I.in(0), o);
  } catch (const Error& e) {
    I.err(e.what());
  }
  I.out_seq(0, y, strings_type(t.rank));
}

}  // namespace

void import_string_cast(Importer& I, std::optional<DType> to) {
  const SeqType& t = I.type_of(0);
  if (t.is_strings()) {
    if (!to) {  // strings to strings
      I.out_seq(0, identity(I.in(0)), t);
      return;
    }
    if (t.rank < 0) I.unsupported(I.node->op_type() + "(strings of unknown rank)");
    I.out(0, str::parse(I.in(0), *to, t.rank));
    return;
  }
  // Numbers to strings (float16/bfloat16 with their own shortest digits).
  I.out_seq(0, str::format(I.in(0)), strings_type(static_cast<int>(I.spec(0).shape.size())));
}

void strings_onnx_rows(OpRows& r) { r.import_op("StringNormalizer", op_string_normalizer).takes_strings(); }

}  // namespace jobflow::onnx

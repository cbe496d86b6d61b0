// ONNX rows of tfidf_vectorizer (ops/text.cpp) (registry.h): TfIdfVectorizer
// over int32/int64 token ids (pool_int64s). The string form (pool_strings)
// needs string tensors, which the engine does not have: refused at load as
// "TfIdfVectorizer(pool_strings)".
#include "onnx/exporter.h"
#include "onnx/importer.h"

namespace jobflow::onnx {
namespace {

void op_tfidf_vectorizer(Importer& I) {
  if (I.has_attr("pool_strings")) I.unsupported("TfIdfVectorizer(pool_strings)");
  text::NgramOptions o;
  o.min_gram_length = I.attr_i("min_gram_length", 1);
  o.max_gram_length = I.attr_i("max_gram_length", 1);
  o.max_skip_count = I.attr_i("max_skip_count", 0);
  const std::string mode = I.attr_s("mode", "");
  if (mode == "TF") o.mode = text::NgramMode::TF;
  else if (mode == "IDF") o.mode = text::NgramMode::IDF;
  else if (mode == "TFIDF") o.mode = text::NgramMode::TFIDF;
  else I.err("mode is \"" + mode + "\" (TF, IDF or TFIDF)");
  o.ngram_counts = I.attr_ints("ngram_counts", {});
  o.ngram_indexes = I.attr_ints("ngram_indexes", {});
  o.pool = I.attr_ints("pool_int64s", {});
  if (const auto* w = I.attr("weights", AttributeProto::FLOATS)) o.weights.assign(w->floats().begin(), w->floats().end());
  Blob x = I.in(0), y;
  try {
    y = text::tfidf_vectorizer(x, o);
  } catch (const Error& e) {
    I.err(e.what());
  }
  I.out(0, y);
}

void export_tfidf_vectorizer(Exporter& E) {
  const Primitive& p = E.op();
  NodeProto* n = E.add_as("TfIdfVectorizer");
  for (const char* k : {"min_gram_length", "max_gram_length", "max_skip_count"}) Exporter::set_int(n, k, p.attr_int(k));
  Exporter::set_string(n, "mode", p.attr_string("mode"));
  for (const char* k : {"ngram_counts", "ngram_indexes", "pool_int64s"}) Exporter::set_ints(n, k, p.attr_ints(k));
  const std::vector<double> w = p.attr_doubles("weights");
  if (!w.empty()) {
    auto* a = n->add_attribute();
    a->set_name("weights");
    a->set_type(AttributeProto::FLOATS);
    for (double v : w) a->add_floats(static_cast<float>(v));
  }
}

}  // namespace

void text_onnx_rows(OpRows& r) {
  r.import_op("TfIdfVectorizer", op_tfidf_vectorizer);
  r.export_op(OpKind::TfIdfVectorizer, export_tfidf_vectorizer);
}

}  // namespace jobflow::onnx

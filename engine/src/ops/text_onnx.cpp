// ONNX rows of tfidf_vectorizer (ops/text.cpp) (registry.h): TfIdfVectorizer
// over int32/int64 token ids (pool_int64s), or over string tokens
// (pool_strings): each token is looked up (str::lookup, ops/strings.cpp) in
// the pool's distinct strings, the pool written as those positions, and the
// ids counted the same way (a token outside the pool gets -1, which no pooled
// n-gram holds). Export writes the id form only: a job made from the string
// form holds string_lookup, which has no export.
#include <map>

#include "onnx/exporter.h"
#include "onnx/importer.h"

namespace jobflow::onnx {
namespace {

void op_tfidf_vectorizer(Importer& I) {
  text::NgramOptions o;
  std::vector<std::string> vocabulary;  // pool_strings' distinct strings, in order
  if (const auto* ps = I.attr("pool_strings", AttributeProto::STRINGS)) {
    if (I.has_attr("pool_int64s")) I.err("has both pool_strings and pool_int64s");
    if (!I.type_of(0).is_strings()) I.err("pool_strings needs string tokens, got " + spec_str(I.spec(0)));
    std::map<std::string, int64_t> at;
    for (const std::string& s : ps->strings()) {
      auto it = at.emplace(s, static_cast<int64_t>(vocabulary.size())).first;
      if (it->second == static_cast<int64_t>(vocabulary.size())) vocabulary.push_back(s);
      o.pool.push_back(it->second);
    }
  } else if (I.type_of(0).is_strings()) {
    I.err("string tokens need pool_strings, the model gives pool_int64s");
  } else {
    o.pool = I.attr_ints("pool_int64s", {});
  }
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
  if (const auto* w = I.attr("weights", AttributeProto::FLOATS)) o.weights.assign(w->floats().begin(), w->floats().end());
  const int rank = I.type_of(0).rank;
  if (I.type_of(0).is_strings() && rank != 1 && rank != 2)
    I.err("string tokens must be (C,) or (N, C), got rank " + std::to_string(rank));
  Blob x = I.in(0), y;
  try {
    if (I.type_of(0).is_strings()) x = str::lookup(x, vocabulary, rank);
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
  r.import_op("TfIdfVectorizer", op_tfidf_vectorizer).takes_strings();
  r.export_op(OpKind::TfIdfVectorizer, export_tfidf_vectorizer);
}

}  // namespace jobflow::onnx

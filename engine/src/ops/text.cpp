// Text features: n-gram counts of token ids (ONNX TfIdfVectorizer over
// int32/int64 tokens, what sklearn-onnx writes for CountVectorizer and
// TfidfVectorizer after tokenization).
//
// For each row of x (1-D: one row), every n-gram of the lengths asked for,
// its items `skip + 1` tokens apart for each skip up to max_skip (a 1-gram
// once per position), is looked up in the pool; the output's coordinate
// ngram_indexes[j] of the j-th pooled n-gram holds its count (TF), 1 or 0
// times its weight (IDF), or the count times its weight (TFIDF).
#include <algorithm>
#include <map>

#include "jobflow/ops.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

const char* mode_name(text::NgramMode m) {
  switch (m) {
    case text::NgramMode::TF: return "TF";
    case text::NgramMode::IDF: return "IDF";
    case text::NgramMode::TFIDF: return "TFIDF";
  }
  return "?";
}

class TfIdfVectorizer final : public Primitive {
 public:
  explicit TfIdfVectorizer(text::NgramOptions o) : o_(std::move(o)) {
    // The pool by n-gram length: n -> (n-gram -> pool index j).
    const int64_t lengths = static_cast<int64_t>(o_.ngram_counts.size());
    for (int64_t n = 1; n <= lengths; ++n) {
      const int64_t from = o_.ngram_counts[n - 1];
      const int64_t to = n < lengths ? o_.ngram_counts[n] : static_cast<int64_t>(o_.pool.size());
      auto& m = pool_[n];
      for (int64_t at = from; at + n <= to; at += n) {
        std::vector<int64_t> key(o_.pool.begin() + at, o_.pool.begin() + at + n);
        if (!m.emplace(key, static_cast<int64_t>(next_++)).second) {
          std::string g;
          for (int64_t v : key) g += (g.empty() ? "" : ", ") + std::to_string(v);
          op_error("tfidf_vectorizer", "the pool holds the " + std::to_string(n) + "-gram (" + g +
                                           ") twice: its count would go to one coordinate only");
        }
      }
    }
    for (int64_t k : o_.ngram_indexes) out_size_ = std::max(out_size_, k + 1);
  }
  OpKind kind() const override { return OpKind::TfIdfVectorizer; }
  bool differentiable_input(int) const override { return false; }
  Attrs attributes() const override {
    return {{"min_gram_length", o_.min_gram_length}, {"max_gram_length", o_.max_gram_length},
            {"max_skip_count", o_.max_skip_count},   {"mode", std::string(mode_name(o_.mode))},
            {"ngram_counts", o_.ngram_counts},       {"ngram_indexes", o_.ngram_indexes},
            {"pool_int64s", o_.pool},                {"weights", o_.weights}};
  }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("tfidf_vectorizer", in, 1);
    const TensorSpec& x = in[0];
    if (x.dtype != DType::Int32 && x.dtype != DType::Int64)
      op_error("tfidf_vectorizer", "x must hold int32 or int64 token ids, got " + spec_str(x));
    if (x.shape.size() != 1 && x.shape.size() != 2)
      op_error("tfidf_vectorizer", "x must be 1-D (tokens) or 2-D (rows of tokens), got " + spec_str(x));
    if (x.shape.size() == 1) return {{{out_size_}, DType::Float32}};
    return {{{x.shape[0], out_size_}, DType::Float32}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const Tensor& x = in[0];
    const int64_t rows = x.ndim() == 2 ? x.dim(0) : 1, len = x.dim(-1);
    float* y = out[0].data<float>();
    std::fill(y, y + out[0].numel(), 0.f);
    std::vector<int64_t> tokens(static_cast<size_t>(len)), counts(next_);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < len; ++i)
        tokens[i] = x.dtype() == DType::Int64 ? x.data<int64_t>()[r * len + i] : x.data<int32_t>()[r * len + i];
      std::fill(counts.begin(), counts.end(), 0);
      std::vector<int64_t> key;
      // Only lengths the pool holds, and skips that fit the row, can match.
      const int64_t top = std::min<int64_t>(o_.max_gram_length, static_cast<int64_t>(o_.ngram_counts.size()));
      for (int64_t n = o_.min_gram_length; n <= top; ++n) {
        auto p = pool_.find(n);
        if (p == pool_.end() || p->second.empty() || n > len) continue;
        const int64_t skips = n == 1 ? 0 : std::min(o_.max_skip_count, (len - 1) / (n - 1) - 1);
        for (int64_t s = 0; s <= skips; ++s)
          for (int64_t i = 0; i + (n - 1) * (s + 1) < len; ++i) {
            key.clear();
            for (int64_t k = 0; k < n; ++k) key.push_back(tokens[i + k * (s + 1)]);
            auto it = p->second.find(key);
            if (it != p->second.end()) ++counts[it->second];
          }
      }
      float* row = y + r * out_size_;
      for (size_t j = 0; j < counts.size(); ++j) {
        if (counts[j] == 0) continue;
        const double w = o_.weights.empty() ? 1.0 : o_.weights[j];
        const double v = o_.mode == text::NgramMode::TF    ? static_cast<double>(counts[j])
                         : o_.mode == text::NgramMode::IDF ? w
                                                          : static_cast<double>(counts[j]) * w;
        row[o_.ngram_indexes[j]] = static_cast<float>(v);
      }
    }
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

 private:
  text::NgramOptions o_;
  std::map<int64_t, std::map<std::vector<int64_t>, int64_t>> pool_;
  size_t next_ = 0;
  int64_t out_size_ = 0;
};

}  // namespace

namespace text {

Blob tfidf_vectorizer(Blob x, const NgramOptions& o, const std::string& name) {
  const char* op = "tfidf_vectorizer";
  if (o.min_gram_length < 1 || o.max_gram_length < o.min_gram_length)
    op_error(op, "gram lengths must satisfy 1 <= min (" + std::to_string(o.min_gram_length) + ") <= max (" +
                     std::to_string(o.max_gram_length) + ")");
  if (o.max_skip_count < 0) op_error(op, "max_skip_count must not be negative, got " + std::to_string(o.max_skip_count));
  if (o.ngram_counts.empty()) op_error(op, "ngram_counts must give the start of each n-gram length in the pool");
  int64_t grams = 0;
  const int64_t pool = static_cast<int64_t>(o.pool.size()), lengths = static_cast<int64_t>(o.ngram_counts.size());
  for (int64_t n = 1; n <= lengths; ++n) {
    const int64_t from = o.ngram_counts[n - 1], to = n < lengths ? o.ngram_counts[n] : pool;
    if (from < 0 || to < from || to > pool || (to - from) % n != 0)
      op_error(op, "ngram_counts " + std::to_string(n - 1) + " .. " + std::to_string(n) + " (" + std::to_string(from) +
                       " .. " + std::to_string(to) + ") is not a whole number of " + std::to_string(n) +
                       "-grams of the pool of " + std::to_string(pool) + " ids");
    grams += (to - from) / n;
  }
  if (static_cast<int64_t>(o.ngram_indexes.size()) != grams)
    op_error(op, "ngram_indexes has " + std::to_string(o.ngram_indexes.size()) + " entries, the pool holds " +
                     std::to_string(grams) + " n-grams");
  for (int64_t k : o.ngram_indexes)
    if (k < 0 || k > (int64_t{1} << 31)) op_error(op, "ngram_indexes holds " + std::to_string(k) + ", out of range");
  if (!o.weights.empty() && static_cast<int64_t>(o.weights.size()) != grams)
    op_error(op, "weights has " + std::to_string(o.weights.size()) + " entries, the pool holds " + std::to_string(grams) +
                     " n-grams");
  return internal::add_node(std::make_shared<TfIdfVectorizer>(o), {x}, name)[0];
}

}  // namespace text
}  // namespace jobflow

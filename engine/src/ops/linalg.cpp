// matmul and bias_add: float32 GEMM on oneDNN's sgemm, float64 on OpenBLAS;
// bias and relu fused into it when the compiler finds matmul -> bias_add ->
// relu. (oneDNN's sgemm picks its AVX-512 kernels here, about 2x OpenBLAS
// with the OPENBLAS_CORETYPE=Haswell these machines set: see
// docs/performance.md. oneDNN has no double GEMM.)
#include <cblas.h>
#include <dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <type_traits>
#include <vector>

#include "cpu/dnnl_kernels.h"
#include "jobflow/ops.h"
#include "kernel_util.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, const T* B, T* C, T beta) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: C = beta * C (BLAS refuses leading dimensions of 0)
    if (beta == T(0)) std::fill(C, C + M * N, T(0));
    return;
  }
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  if constexpr (std::is_same_v<T, float>) {
    if (cpu::matmul_f32_on_primitive(ta, tb, M, N, K)) {
      cpu::matmul_f32(ta, tb, M, N, K, A, B, C, beta != 0.f);
      return;
    }
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
    if (st != dnnl_success)
      op_error("matmul", "oneDNN sgemm failed (status " + std::to_string(static_cast<int>(st)) + ") for M=" +
                             std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
  } else
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0, A, lda,
                B, ldb, beta, C, N);
}

// Multiply-adds below which a bf16 plan's matrix product stays float32.
constexpr int64_t kBf16MinWork = int64_t{1} << 18;

// C (.., M, N) = op(A) (.., M, K) x op(B) (.., K, N) [+ bias (N,)] [relu]

class MatMul final : public Primitive {
 public:
  MatMul(bool ta, bool tb, bool bias = false, bool relu = false) : ta_(ta), tb_(tb), bias_(bias), relu_(relu) {}
  OpKind kind() const override { return OpKind::MatMul; }
  Attrs attributes() const override {
    return {{"transpose_a", int64_t{ta_}}, {"transpose_b", int64_t{tb_}}, {"bias", int64_t{bias_}},
            {"relu", int64_t{relu_}}};
  }

  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("matmul", in, bias_ ? 3 : 2);
    const auto &a = in[0], &b = in[1];
    expect_float("matmul", a, "a");
    expect_same_dtype("matmul", a, b);
    if (a.shape.size() < 2 || a.shape.size() != b.shape.size())
      op_error("matmul", "operands must both be 2-D, or batched with the same rank; got " + spec_str(a) + " and " +
                             spec_str(b));
    const size_t r = a.shape.size();
    for (size_t i = 0; i + 2 < r; ++i)
      if (!dims_agree(a.shape[i], b.shape[i]))
        op_error("matmul", "batch dimensions differ: " + shape_str(a.shape) + " vs " + shape_str(b.shape));
    const int64_t M = ta_ ? a.shape[r - 1] : a.shape[r - 2], Ka = ta_ ? a.shape[r - 2] : a.shape[r - 1];
    const int64_t Kb = tb_ ? b.shape[r - 1] : b.shape[r - 2], N = tb_ ? b.shape[r - 2] : b.shape[r - 1];
    if (!dims_agree(Ka, Kb))
      op_error("matmul", "inner dimensions differ: " + shape_str(a.shape) + (ta_ ? "^T" : "") + " x " +
                             shape_str(b.shape) + (tb_ ? "^T" : "") + " (" + std::to_string(Ka) + " vs " +
                             std::to_string(Kb) + ")");
    if (bias_ && (!shapes_agree(in[2].shape, Shape{N}) || in[2].dtype != a.dtype))
      op_error("matmul", "bias must be " + spec_str({{N}, a.dtype}) + ", got " + spec_str(in[2]));
    Shape out = merge_shapes(Shape(a.shape.begin(), a.shape.end() - 2), Shape(b.shape.begin(), b.shape.end() - 2));
    out.push_back(M);
    out.push_back(N);
    return {{out, a.dtype}};
  }

  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override {
    kern::dispatch_float(in[0].dtype(), "matmul", [&](auto z) {
      using T = decltype(z);
      const Tensor &a = in[0], &b = in[1];
      const int r = a.ndim();
      const int64_t M = out[0].dim(-2), N = out[0].dim(-1), K = ta_ ? a.dim(r - 2) : a.dim(r - 1);
      const int64_t batch = numel(Shape(a.shape().begin(), a.shape().end() - 2));
      T* C = out[0].data<T>();
      const T* bias = bias_ ? in[2].data<T>() : nullptr;
      for (int64_t i = 0; i < batch; ++i) {
        T* c = C + i * M * N;
        if (bias)
          for (int64_t m = 0; m < M; ++m) std::memcpy(c + m * N, bias, sizeof(T) * N);
        // bf16 plans (mixed precision; in predict plans the layout pass has
        // already taken products with variable weights): float32 operands
        // converted to bf16, float32 accumulation, for products big enough
        // to pay for the conversions.
        if constexpr (std::is_same_v<T, float>)
          if (ctx.bf16 && M * N * K >= kBf16MinWork) {
            cpu::matmul_bf16(ta_, tb_, M, N, K, a.data<T>() + i * M * K, b.data<T>() + i * K * N, c, bias != nullptr);
            continue;
          }
        gemm<T>(ta_, tb_, M, N, K, a.data<T>() + i * M * K, b.data<T>() + i * K * N, c, bias ? T(1) : T(0));
      }
      if (relu_) {
        const int64_t n = out[0].numel();
#pragma omp parallel for if (n > kern::kParallelGrain)
        for (int64_t i = 0; i < n; ++i) C[i] = std::max(C[i], T(0));
      }
    });
  }

  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    Blob dc = relu_ ? internal::relu_grad(cot[0], outs[0]) : cot[0];
    std::vector<Blob> g;
    for (int arg : argnums) {
      if (arg == 2) {
        g.push_back(internal::bias_grad(dc, -1));
        continue;
      }
      const Blob &a = in[0], &b = in[1];
      if (arg == 0) {
        if (!ta_) g.push_back(matmul(dc, b, false, !tb_));
        else g.push_back(tb_ ? matmul(b, dc, true, true) : matmul(b, dc, false, true));
      } else {
        if (!tb_) g.push_back(ta_ ? matmul(a, dc, false, false) : matmul(a, dc, true, false));
        else g.push_back(ta_ ? matmul(dc, a, true, true) : matmul(dc, a, true, false));
      }
    }
    return g;
  }

  std::shared_ptr<Primitive> with_bias() const override {
    return bias_ || relu_ ? nullptr : std::make_shared<MatMul>(ta_, tb_, true, false);
  }
  std::shared_ptr<Primitive> with_relu() const override {
    return relu_ ? nullptr : std::make_shared<MatMul>(ta_, tb_, bias_, true);
  }

 private:
  bool ta_, tb_, bias_, relu_;
};

// y = x + bias broadcast along `axis` [relu].
class BiasAdd final : public Primitive {
 public:
  BiasAdd(int axis, bool relu = false) : axis_(axis), relu_(relu) {}
  OpKind kind() const override { return OpKind::BiasAdd; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}, {"relu", int64_t{relu_}}}; }
  int axis() const { return axis_; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("bias_add", in, 2);
    expect_float("bias_add", in[0], "x");
    expect_same_dtype("bias_add", in[0], in[1]);
    const int r = static_cast<int>(in[0].shape.size());
    const int ax = kern::norm_axis("bias_add", axis_, r);
    if (!shapes_agree(in[1].shape, Shape{in[0].shape[ax]}))
      op_error("bias_add", "bias must have shape (" + std::to_string(in[0].shape[ax]) + ",) for x " +
                               spec_str(in[0]) + " along axis " + std::to_string(axis_) + ", got " + spec_str(in[1]));
    return {in[0]};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), "bias_add", [&](auto z) {
      using T = decltype(z);
      const int ax = kern::norm_axis("bias_add", axis_, in[0].ndim());
      const int64_t C = in[0].dim(ax);
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < ax; ++i) outer *= in[0].dim(i);
      for (int i = ax + 1; i < in[0].ndim(); ++i) inner *= in[0].dim(i);
      const T* x = in[0].data<T>();
      const T* b = in[1].data<T>();
      T* y = out[0].data<T>();
      const bool relu = relu_;
#pragma omp parallel for collapse(2) if (outer * C * inner > kern::kParallelGrain)
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t base = (o * C + c) * inner;
          const T bc = b[c];
          for (int64_t i = 0; i < inner; ++i) {
            T v = x[base + i] + bc;
            y[base + i] = relu ? std::max(v, T(0)) : v;
          }
        }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>& outs, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    Blob d = relu_ ? internal::relu_grad(cot[0], outs[0]) : cot[0];
    std::vector<Blob> g;
    for (int arg : argnums) g.push_back(arg == 0 ? d : internal::bias_grad(d, axis_));
    return g;
  }
  std::shared_ptr<Primitive> with_relu() const override {
    return relu_ ? nullptr : std::make_shared<BiasAdd>(axis_, true);
  }

 private:
  int axis_;
  bool relu_;
};

// sum of dy over every axis but `axis` (the gradient of bias_add).
class BiasGrad final : public Primitive {
 public:
  explicit BiasGrad(int axis) : axis_(axis) {}
  OpKind kind() const override { return OpKind::BiasGrad; }
  Attrs attributes() const override { return {{"axis", int64_t{axis_}}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("bias_grad", in, 1);
    const int ax = kern::norm_axis("bias_grad", axis_, static_cast<int>(in[0].shape.size()));
    return {{{in[0].shape[ax]}, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    kern::dispatch_float(in[0].dtype(), "bias_grad", [&](auto z) {
      using T = decltype(z);
      const int ax = kern::norm_axis("bias_grad", axis_, in[0].ndim());
      const int64_t C = in[0].dim(ax);
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < ax; ++i) outer *= in[0].dim(i);
      for (int i = ax + 1; i < in[0].ndim(); ++i) inner *= in[0].dim(i);
      const T* dy = in[0].data<T>();
      T* db = out[0].data<T>();
#pragma omp parallel for if (outer * C * inner > kern::kParallelGrain)
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t o = 0; o < outer; ++o) {
          const T* p = dy + (o * C + c) * inner;
          for (int64_t i = 0; i < inner; ++i) s += p[i];
        }
        db[c] = static_cast<T>(s);
      }
    });
  }
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>&) const override {
    // d(sum over other axes)/d dy = broadcast of the cotangent along axis.
    const int r = in[0].ndim();
    const int ax = kern::norm_axis("bias_grad", axis_, r);
    Shape s(r, 1);
    s[ax] = in[0].shape()[ax];
    return {broadcast_to(reshape(cot[0], s), in[0].shape())};
  }

 private:
  int axis_;
};

// ===========================================================================
// einsum (ONNX Einsum)

// Labels: a letter is its character code; the k-th dim of the ellipsis
// (right-aligned across operands) is kEllipsis + k.
constexpr int kEllipsis = 256;
// 52 letters and the ellipsis' dims at most; operands (infer() checks).
constexpr size_t kMaxLabels = 64, kMaxOperands = 16;
using kern::check_rank;

struct EinsumSpec {
  std::vector<std::vector<int>> ins;  // each operand's label per dim
  std::vector<int> out;
  int ellipsis = 0;  // dims of the broadcast ellipsis
};

bool einsum_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// One term ("ij", "...ij", "") as labels; `dots` is where the ellipsis is
// (-1: none).
std::vector<int> einsum_term(const std::string& eq, const std::string& t, int* dots) {
  std::vector<int> r;
  *dots = -1;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.compare(i, 3, "...") == 0) {
      if (*dots >= 0) op_error("einsum", "equation '" + eq + "': '...' twice in the term '" + t + "'");
      *dots = static_cast<int>(r.size());
      i += 2;
    } else if (einsum_letter(t[i])) {
      r.push_back(static_cast<unsigned char>(t[i]));
    } else {
      op_error("einsum", "equation '" + eq + "': '" + std::string(1, t[i]) + "' is not a letter, ',', '->' or '...'");
    }
  }
  return r;
}

EinsumSpec parse_einsum(const std::string& equation, const std::vector<Shape>& shapes) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t b = 0;;) {
    const size_t e = lhs.find(',', b);
    terms.push_back(lhs.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  if (terms.size() != shapes.size())
    op_error("einsum", "equation '" + equation + "' has " + std::to_string(terms.size()) + " input terms for " +
                           std::to_string(shapes.size()) + " operands");
  EinsumSpec sp;
  std::vector<int> dots(terms.size());
  for (size_t k = 0; k < terms.size(); ++k) {
    sp.ins.push_back(einsum_term(equation, terms[k], &dots[k]));
    const int rank = static_cast<int>(shapes[k].size()), letters = static_cast<int>(sp.ins[k].size());
    if (dots[k] < 0 ? rank != letters : rank < letters)
      op_error("einsum", "equation '" + equation + "': the term '" + terms[k] + "' does not fit operand " +
                             std::to_string(k) + " of shape " + shape_str(shapes[k]));
    if (dots[k] >= 0) sp.ellipsis = std::max(sp.ellipsis, rank - letters);
  }
  for (size_t k = 0; k < terms.size(); ++k) {  // the ellipsis dims, right-aligned
    if (dots[k] < 0) continue;
    const int e = static_cast<int>(shapes[k].size() - sp.ins[k].size());
    std::vector<int> l;
    for (int i = 0; i < e; ++i) l.push_back(kEllipsis + sp.ellipsis - e + i);
    sp.ins[k].insert(sp.ins[k].begin() + dots[k], l.begin(), l.end());
  }
  if (arrow != std::string::npos) {
    int d = -1;
    sp.out = einsum_term(equation, eq.substr(arrow + 2), &d);
    if (d >= 0) {
      std::vector<int> l;
      for (int i = 0; i < sp.ellipsis; ++i) l.push_back(kEllipsis + i);
      sp.out.insert(sp.out.begin() + d, l.begin(), l.end());
    }
    std::set<int> seen;
    for (int l : sp.out) {
      if (!seen.insert(l).second) op_error("einsum", "equation '" + equation + "': the output repeats a label");
      bool found = false;
      for (auto& in : sp.ins) found = found || std::find(in.begin(), in.end(), l) != in.end();
      if (!found) op_error("einsum", "equation '" + equation + "': an output label appears in no input");
    }
  } else {  // implicit: the ellipsis, then the letters seen once, in order
    std::map<int, int> count;
    for (auto& in : sp.ins)
      for (int l : in) count[l]++;
    for (int i = 0; i < sp.ellipsis; ++i) sp.out.push_back(kEllipsis + i);
    for (auto [l, c] : count)
      if (l < kEllipsis && c == 1) sp.out.push_back(l);
  }
  return sp;
}

// The size of every label (ellipsis dims broadcast; letters must agree).
std::map<int, int64_t> einsum_sizes(const std::string& eq, const EinsumSpec& sp, const std::vector<Shape>& shapes) {
  std::map<int, int64_t> size;
  for (size_t k = 0; k < sp.ins.size(); ++k)
    for (size_t d = 0; d < sp.ins[k].size(); ++d) {
      const int l = sp.ins[k][d];
      const int64_t n = shapes[k][d];
      auto it = size.find(l);
      if (it == size.end()) {
        size[l] = n;
      } else if (!dims_agree(it->second, n)) {
        if (l >= kEllipsis && (it->second == 1 || n == 1)) it->second = std::max(it->second, n);
        else
          op_error("einsum", "equation '" + eq + "': a label has sizes " + std::to_string(it->second) + " and " +
                                 std::to_string(n));
      } else if (it->second < 0) {
        it->second = n;
      }
    }
  return size;
}

class Einsum final : public Primitive {
 public:
  explicit Einsum(std::string equation) : eq_(std::move(equation)) {}
  OpKind kind() const override { return OpKind::Einsum; }
  Attrs attributes() const override { return {{"equation", eq_}}; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    if (in.empty() || in.size() > kMaxOperands)
      op_error("einsum", "takes 1 to " + std::to_string(kMaxOperands) + " operands, got " + std::to_string(in.size()));
    std::vector<Shape> shapes;
    for (auto& s : in) {
      check_rank("einsum", s.shape);
      expect_not_bool("einsum", s, "operand");
      if (s.dtype != in[0].dtype) op_error("einsum", "operands " + spec_str(in[0]) + " and " + spec_str(s) + " differ in dtype");
      shapes.push_back(s.shape);
    }
    const EinsumSpec sp = parse_einsum(eq_, shapes);
    auto size = einsum_sizes(eq_, sp, shapes);
    Shape out;
    for (int l : sp.out) out.push_back(size[l]);
    check_rank("einsum", out);
    return {{out, in[0].dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    std::vector<Shape> shapes;
    for (auto& t : in) shapes.push_back(t.shape());
    const EinsumSpec sp = parse_einsum(eq_, shapes);
    auto size = einsum_sizes(eq_, sp, shapes);
    std::vector<int> labels = sp.out;  // output labels, then the summed ones
    for (auto& [l, n] : size)
      if (std::find(sp.out.begin(), sp.out.end(), l) == sp.out.end()) labels.push_back(l);
    const size_t L = labels.size(), O = sp.out.size(), K = in.size();
    std::vector<int64_t> n(L), stride(K * L, 0);
    for (size_t j = 0; j < L; ++j) n[j] = size[labels[j]];
    for (size_t k = 0; k < K; ++k) {
      int64_t acc = 1;
      for (int d = static_cast<int>(shapes[k].size()) - 1; d >= 0; --d) {
        const size_t j = std::find(labels.begin(), labels.end(), sp.ins[k][d]) - labels.begin();
        if (shapes[k][d] != 1 || n[j] == 1) stride[k * L + j] += acc;  // a broadcast dim of 1 stays put
        acc *= shapes[k][d];
      }
    }
    int64_t outs = 1, sums = 1;
    for (size_t j = 0; j < L; ++j) (j < O ? outs : sums) *= n[j];
    kern::dispatch_all(in[0].dtype(), [&](auto z) {
      using T = decltype(z);
      if constexpr (!std::is_same_v<T, bool>) {
        using Acc = std::conditional_t<std::is_floating_point_v<T>, double,
                                       std::conditional_t<std::is_unsigned_v<T>, uint64_t, int64_t>>;
        T* y = static_cast<T*>(out[0].raw());
#pragma omp parallel for if (outs * sums * static_cast<int64_t>(K) > kern::kParallelGrain)
        for (int64_t o = 0; o < outs; ++o) {
          int64_t b[kMaxOperands] = {}, ix[kMaxLabels] = {};
          for (int64_t q = o, j = static_cast<int64_t>(O) - 1; j >= 0; --j) {
            const int64_t v = q % n[j];
            q /= n[j];
            for (size_t k = 0; k < K; ++k) b[k] += v * stride[k * L + j];
          }
          Acc acc = 0;
          for (int64_t s = 0; s < sums; ++s) {
            Acc prod = 1;
            for (size_t k = 0; k < K; ++k) {
              int64_t off = b[k];
              for (size_t j = O; j < L; ++j) off += ix[j] * stride[k * L + j];
              prod *= static_cast<Acc>(static_cast<const T*>(in[k].raw())[off]);
            }
            acc += prod;
            for (size_t j = L; j-- > O;) {  // the next summed index
              if (++ix[j] < n[j]) break;
              ix[j] = 0;
            }
          }
          y[o] = static_cast<T>(acc);
        }
      }
    });
  }
  // d operand k = einsum(dy and the other operands -> operand k's labels),
  // the labels only operand k has (summed away) broadcast back.
  std::vector<Blob> vjp(const std::vector<Blob>& in, const std::vector<Blob>&, const std::vector<Blob>& cot,
                        const std::vector<int>& argnums) const override {
    std::vector<Shape> shapes;
    for (auto& b : in) shapes.push_back(b.shape());
    const EinsumSpec sp = parse_einsum(eq_, shapes);
    auto size = einsum_sizes(eq_, sp, shapes);
    std::map<int, char> ch;  // labels as letters, the ellipsis dims as unused ones
    std::string spare;
    for (char c = 'a'; c <= 'z'; ++c) spare += c;
    for (char c = 'A'; c <= 'Z'; ++c) spare += c;
    for (auto& [l, n] : size)
      if (l < kEllipsis) {
        ch[l] = static_cast<char>(l);
        spare.erase(std::remove(spare.begin(), spare.end(), static_cast<char>(l)), spare.end());
      }
    for (auto& [l, n] : size)
      if (l >= kEllipsis) {
        if (spare.empty()) op_error("einsum", "no gradient for '" + eq_ + "': too many labels");
        ch[l] = spare.back();
        spare.pop_back();
      }
    auto term = [&](const std::vector<int>& ls) {
      std::string t;
      for (int l : ls) t += ch[l];
      return t;
    };
    std::vector<Blob> r;
    for (int k : argnums) {
      const auto& mine = sp.ins[static_cast<size_t>(k)];
      for (size_t d = 0; d < mine.size(); ++d)
        if (std::count(mine.begin(), mine.end(), mine[d]) > 1 || shapes[k][d] != size[mine[d]])
          op_error("einsum", "no gradient for operand " + std::to_string(k) + " of '" + eq_ +
                                 "': it repeats a label or broadcasts a dim");
      std::string lhs = term(sp.out);
      std::vector<Blob> ops{cot[0]};
      std::set<int> elsewhere(sp.out.begin(), sp.out.end());
      for (size_t j = 0; j < in.size(); ++j)
        if (static_cast<int>(j) != k) {
          lhs += ',';  // (not "," + term(): GCC 12 warns -Wrestrict on that, wrongly)
          lhs += term(sp.ins[j]);
          ops.push_back(in[j]);
          elsewhere.insert(sp.ins[j].begin(), sp.ins[j].end());
        }
      std::vector<int> kept;
      std::vector<int64_t> dropped;
      for (size_t d = 0; d < mine.size(); ++d) {
        if (elsewhere.count(mine[d])) kept.push_back(mine[d]);
        else dropped.push_back(static_cast<int64_t>(d));
      }
      Blob g = internal::add_node(std::make_shared<Einsum>(lhs + "->" + term(kept)), ops)[0];
      if (!dropped.empty()) g = broadcast_to(unsqueeze(g, dropped), shapes[k]);
      r.push_back(g);
    }
    return r;
  }

 private:
  std::string eq_;
};

// ===========================================================================
// det (ONNX Det)

// The determinants of the (..., n, n) matrices of x, by LU decomposition with
// partial pivoting in float64. No gradient (vjp() is Primitive's error).
class Det final : public Primitive {
 public:
  OpKind kind() const override { return OpKind::Det; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    expect_inputs("det", in, 1);
    const TensorSpec& x = in[0];
    expect_float("det", x, "x");
    check_rank("det", x.shape);
    if (x.shape.size() < 2 || !dims_agree(x.shape[x.shape.size() - 1], x.shape[x.shape.size() - 2]))
      op_error("det", "x must be (..., n, n), got " + spec_str(x));
    return {{Shape(x.shape.begin(), x.shape.end() - 2), x.dtype}};
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
    const int64_t n = in[0].dim(-1), count = out[0].numel();
    kern::dispatch_float(in[0].dtype(), "det", [&](auto z) {
      using T = decltype(z);
      const T* x = in[0].data<T>();
      T* y = out[0].data<T>();
#pragma omp parallel for if (count * n * n * n > kern::kParallelGrain)
      for (int64_t b = 0; b < count; ++b) {
        std::vector<double> a(x + b * n * n, x + (b + 1) * n * n);
        double det = 1;
        for (int64_t c = 0; c < n && det != 0; ++c) {
          int64_t p = c;
          for (int64_t r = c + 1; r < n; ++r)
            if (std::fabs(a[r * n + c]) > std::fabs(a[p * n + c])) p = r;
          if (a[p * n + c] == 0) {
            det = 0;
            break;
          }
          if (p != c) {
            for (int64_t k = 0; k < n; ++k) std::swap(a[p * n + k], a[c * n + k]);
            det = -det;
          }
          det *= a[c * n + c];
          for (int64_t r = c + 1; r < n; ++r) {
            const double f = a[r * n + c] / a[c * n + c];
            for (int64_t k = c; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
          }
        }
        y[b] = static_cast<T>(det);
      }
    });
  }
};

}  // namespace

Blob matmul(Blob a, Blob b, bool transpose_a, bool transpose_b, const std::string& name) {
  return internal::add_node(std::make_shared<MatMul>(transpose_a, transpose_b), {a, b}, name)[0];
}

namespace nn {
Blob bias_add(Blob x, Blob bias, int axis, const std::string& name) {
  return internal::add_node(std::make_shared<BiasAdd>(axis), {x, bias}, name)[0];
}
}  // namespace nn

namespace math {
Blob det(Blob x, const std::string& name) { return internal::add_node(std::make_shared<Det>(), {x}, name)[0]; }
}  // namespace math

Blob einsum(const std::string& equation, const std::vector<Blob>& operands, const std::string& name) {
  return internal::add_node(std::make_shared<Einsum>(equation), operands, name)[0];
}

namespace internal {
Blob bias_grad(Blob dy, int axis) { return add_node(std::make_shared<BiasGrad>(axis), {dy})[0]; }
}  // namespace internal

}  // namespace jobflow

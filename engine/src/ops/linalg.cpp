// matmul and bias_add: float32 GEMM on oneDNN's sgemm, float64 on OpenBLAS;
// bias and relu fused into it when the compiler finds matmul -> bias_add ->
// relu. (oneDNN's sgemm picks its AVX-512 kernels here, about 2x OpenBLAS
// with the OPENBLAS_CORETYPE=Haswell these machines set: see
// docs/performance.md. oneDNN has no double GEMM.)
#include <cblas.h>
#include <dnnl.h>

#include <algorithm>
#include <cstring>

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
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
    if (st != dnnl_success)
      op_error("matmul", "oneDNN sgemm failed (status " + std::to_string(static_cast<int>(st)) + ") for M=" +
                             std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
  } else
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0, A, lda,
                B, ldb, beta, C, N);
}

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

  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const override {
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

}  // namespace

Blob matmul(Blob a, Blob b, bool transpose_a, bool transpose_b, const std::string& name) {
  return internal::add_node(std::make_shared<MatMul>(transpose_a, transpose_b), {a, b}, name)[0];
}

namespace nn {
Blob bias_add(Blob x, Blob bias, int axis, const std::string& name) {
  return internal::add_node(std::make_shared<BiasAdd>(axis), {x, bias}, name)[0];
}
}  // namespace nn

namespace internal {
Blob bias_grad(Blob dy, int axis) { return add_node(std::make_shared<BiasGrad>(axis), {dy})[0]; }
}  // namespace internal

}  // namespace jobflow

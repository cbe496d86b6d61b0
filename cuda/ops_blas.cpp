// matmul on cuBLAS: C (.., M, N) = op(A) (.., M, K) x op(B) (.., K, N)
// [+ bias (N,)] [relu], float32 (cublasSgemm) and float64 (cublasDgemm),
// batched over the leading dims with the strided-batched calls.
//
// Row-major on a column-major library: a row-major (R, C) matrix is the
// column-major (C, R) matrix of the same bytes, its transpose. So the
// row-major product C = op(A) op(B) is computed as the column-major product
// C^T = op(B)^T op(A)^T: cuBLAS gets B first and A second, with m = N,
// n = M, and each operand keeps its own transpose flag and its row-major
// leading dimension (A: ta ? M : K, B: tb ? K : N, C: N).
#include <climits>

#include "ops.h"

namespace jobflow::cuda {
namespace {

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

struct Gemm {
  bool ta, tb;
  int64_t batch, M, N, K;
};

Gemm gemm_of(const Primitive& p, const std::vector<Tensor>& in) {
  Gemm g;
  g.ta = p.attr_int("transpose_a") != 0;
  g.tb = p.attr_int("transpose_b") != 0;
  const Tensor &a = in[0], &b = in[1];
  const int r = a.ndim();
  g.M = g.ta ? a.dim(r - 1) : a.dim(r - 2);
  g.K = g.ta ? a.dim(r - 2) : a.dim(r - 1);
  g.N = g.tb ? b.dim(r - 2) : b.dim(r - 1);
  g.batch = 1;
  for (int i = 0; i + 2 < r; ++i) g.batch *= a.dim(i);
  return g;
}

void run_matmul(Launch& L) {
  const Gemm g = gemm_of(L.p, L.in);
  const bool bias = L.p.attr_int("bias") != 0, relu = L.p.attr_int("relu") != 0;
  const DType t = L.in[0].dtype();
  const size_t es = dtype_size(t);
  const cudaStream_t s = L.stream();
  if (g.batch * g.M * g.N == 0) return;
  if (g.K == 0) {  // empty sum: zeros (then the bias)
    L.check(cudaMemsetAsync(L.o(0), 0, static_cast<size_t>(g.batch * g.M * g.N) * es, s));
  } else {
    cublasHandle_t h = L.c.blas();
    const cublasOperation_t opA = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int m = static_cast<int>(g.N), n = static_cast<int>(g.M), kk = static_cast<int>(g.K);
    const int lda = static_cast<int>(g.ta ? g.M : g.K), ldb = static_cast<int>(g.tb ? g.K : g.N), ldc = m;
    const long long sA = g.M * g.K, sB = g.K * g.N, sC = g.M * g.N;
    if (t == DType::Float32) {
      const float one = 1.f, zero = 0.f;
      if (g.batch == 1)
        L.check(cublasSgemm(h, opB, opA, m, n, kk, &one, L.i<float>(1), ldb, L.i<float>(0), lda, &zero, L.o<float>(0),
                            ldc));
      else
        L.check(cublasSgemmStridedBatched(h, opB, opA, m, n, kk, &one, L.i<float>(1), ldb, sB, L.i<float>(0), lda, sA,
                                          &zero, L.o<float>(0), ldc, sC, static_cast<int>(g.batch)));
    } else {
      const double one = 1.0, zero = 0.0;
      if (g.batch == 1)
        L.check(cublasDgemm(h, opB, opA, m, n, kk, &one, L.i<double>(1), ldb, L.i<double>(0), lda, &zero,
                            L.o<double>(0), ldc));
      else
        L.check(cublasDgemmStridedBatched(h, opB, opA, m, n, kk, &one, L.i<double>(1), ldb, sB, L.i<double>(0), lda,
                                          sA, &zero, L.o<double>(0), ldc, sC, static_cast<int>(g.batch)));
    }
  }
  // Epilogue: bias along N (the rows of C are (batch * M) of N), then relu.
  if (bias)
    L.check(k::bias_add(dt(t), L.o(0), L.i(2), L.o(0), g.batch * g.M, g.N, 1, relu, s));
  else if (relu)
    L.check(k::unary(k::Un::Relu, dt(t), L.o(0), L.o(0), g.batch * g.M * g.N, 0.0, s));
}

}  // namespace

void add_blas_ops(OpTable& t) {
  OpDef d;
  d.accepts = [](const Primitive& p, const std::vector<Tensor>& in) {
    if (!is_float(in[0].dtype()) || in[0].dtype() != in[1].dtype()) return false;
    const Gemm g = gemm_of(p, in);
    // The 32-bit cuBLAS API; bigger operands run on the CPU.
    return fits_int(g.M) && fits_int(g.N) && fits_int(g.K) && fits_int(g.batch) && fits_int(g.M * g.K) &&
           fits_int(g.K * g.N) && fits_int(g.M * g.N);
  };
  d.run = run_matmul;
  t[OpKind::MatMul] = d;
}

}  // namespace jobflow::cuda

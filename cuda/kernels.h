// cuda/kernels.h — launchers of the backend's own CUDA kernels (internal).
//
// Plain C++ (no CUDA syntax) so that the host-side .cpp files, compiled by
// the C++ compiler, can call into the .cu files compiled by nvcc. Every
// launcher takes device pointers, enqueues its kernels on `s` and returns
// cudaGetLastError() (launch errors; execution errors surface at the next
// synchronization). Nothing here allocates, synchronizes or throws.
//
// Types: `DT` mirrors jobflow::DType (context.h converts). Layouts: every
// tensor is dense row-major; the host side collapses shapes into the small
// views below (at most kMaxRank dims), the kernels never see a Shape.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace jobflow::cuda::k {

enum class DT : int { F32, F64, I32, I64, I8, U8 };
inline constexpr int kMaxRank = 16;

// out = f(a, b) under numpy broadcasting, collapsed like cpu/broadcast.h: nd
// dims (outermost first) and each operand's element stride along them (0 =
// broadcast). na / nb: element counts of a and b (fast paths when an operand
// is a single element or already has the output's size).
struct BView {
  int nd = 1;
  int64_t dim[kMaxRank] = {1};
  int64_t sa[kMaxRank] = {0};
  int64_t sb[kMaxRank] = {0};
};
enum class Bin : int { Add, Sub, Mul, Div, EqMask };
cudaError_t binary(Bin op, DT t, const void* a, const void* b, void* out, int64_t n, int64_t na, int64_t nb,
                   const BView& v, cudaStream_t s);

enum class Un : int { Neg, Exp, Log, Sqrt, Rsqrt, Square, Sigmoid, Tanh, Relu, AddScalar, MulScalar };
// y = f(x) elementwise; `scalar` for AddScalar / MulScalar. x may equal y.
cudaError_t unary(Un op, DT t, const void* x, void* y, int64_t n, double scalar, cudaStream_t s);

// Activation gradients from the activation's output y (same shapes):
// relu: dy * (y > 0); sigmoid: dy * y * (1 - y); tanh: dy * (1 - y^2).
enum class Act : int { Relu, Sigmoid, Tanh };
cudaError_t act_grad(Act a, DT t, const void* dy, const void* y, void* dx, int64_t n, cudaStream_t s);

// out = in[0] + in[1] + ... (k inputs, summed left to right like the CPU).
// `ins` is a host array of k device pointers.
cudaError_t add_n(DT t, const void* const* ins, int k, void* out, int64_t n, cudaStream_t s);

// numpy astype (float -> narrow int goes through int64, as on the CPU).
cudaError_t cast(DT from, DT to, const void* x, void* y, int64_t n, cudaStream_t s);
cudaError_t fill(DT t, void* y, int64_t n, double value, cudaStream_t s);

// y = x + bias[c] [relu] on x viewed as (outer, C, inner). x may equal y.
cudaError_t bias_add(DT t, const void* x, const void* bias, void* y, int64_t outer, int64_t C, int64_t inner, bool relu,
                     cudaStream_t s);

// Reductions on a collapsed layout (the CPU's RedPlan): nk kept and nr
// reduced groups, outermost first, with their element strides in x; count
// = elements folded into each output. Sums of floats accumulate in double,
// of integers in int64; max propagates NaN.
struct RView {
  int nk = 0, nr = 0;
  int64_t kdim[kMaxRank] = {}, kstr[kMaxRank] = {};
  int64_t rdim[kMaxRank] = {}, rstr[kMaxRank] = {};
  int64_t count = 1;
  bool inner_reduced = false;
};
enum class Red : int { Sum, Mean, Max };
cudaError_t reduce(Red op, DT t, const void* x, void* y, const RView& v, int64_t n_out, cudaStream_t s);
// Index (int32) of the first maximum along the middle axis of (outer, n, inner); NaN wins.
cudaError_t argmax(DT t, const void* x, int32_t* y, int64_t outer, int64_t n, int64_t inner, cudaStream_t s);

// y[i] = x[offset(i)] where i runs over nd dims and x advances by str[d]
// along dim d (0 where x is broadcast): broadcast_to and transpose.
struct SView {
  int nd = 1;
  int64_t dim[kMaxRank] = {1};
  int64_t str[kMaxRank] = {0};
};
cudaError_t strided_copy(DT t, const void* x, void* y, const SView& v, int64_t n, cudaStream_t s);

// softmax / log_softmax along the middle axis of (outer, C, inner), and
// their gradients from the forward output y:
//   softmax: dx = y * (dy - sum(dy * y));  log_softmax: dx = dy - exp(y) * sum(dy).
cudaError_t softmax(DT t, bool log, const void* x, void* y, int64_t outer, int64_t C, int64_t inner, cudaStream_t s);
cudaError_t softmax_grad(DT t, bool log, const void* y, const void* dy, void* dx, int64_t outer, int64_t C,
                         int64_t inner, cudaStream_t s);

// Sparse softmax cross-entropy on logits (B, C) and labels (B,) of type
// `lt` (I32 or I64, already range-checked): loss (B,), prob (B, C); and its
// gradient dx = (prob - onehot(label)) * dloss[b].
cudaError_t xent(DT t, DT lt, const void* labels, const void* logits, void* loss, void* prob, int64_t B, int64_t C,
                 cudaStream_t s);
cudaError_t xent_grad(DT t, DT lt, const void* prob, const void* labels, const void* dloss, void* dx, int64_t B,
                      int64_t C, cudaStream_t s);

// w -= lr * g; with momentum m != 0: v = m * v - lr * g; w += v.
cudaError_t sgd(DT t, void* w, const void* g, void* v, int64_t n, double lr, double momentum, cudaStream_t s);

// NCHW float32 helpers of the cuDNN paths (planes = N * C):
// dst[p, h, w] = src[p, h + dh, w + dw], or `pad` outside src (explicit
// padding when dh, dw < 0; cropping when > 0).
cudaError_t window_copy(const float* src, float* dst, int64_t planes, int64_t Hs, int64_t Ws, int64_t Hd, int64_t Wd,
                        int64_t dh, int64_t dw, float pad, cudaStream_t s);
struct PoolGeom {
  int64_t planes, H, W, OH, OW, kh, kw, sh, sw, pt, pl;
};
// Average pooling's dx (padding excluded from each window's count).
cudaError_t avg_pool_grad(const PoolGeom& g, const float* dy, float* dx, cudaStream_t s);
// Max pooling's dx without a workspace: each dy goes to the first NaN of
// its window in x, else its first maximum (row-major order; padding never
// wins), as on the CPU.
cudaError_t max_pool_grad_from_x(const PoolGeom& g, const float* dy, const float* x, float* dx, cudaStream_t s);

}  // namespace jobflow::cuda::k

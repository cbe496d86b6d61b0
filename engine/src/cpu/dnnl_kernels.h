// cpu/dnnl_kernels.h — raw-pointer 2-D convolution and pooling kernels on oneDNN.
//
// Every function takes plain float32 buffers owned by the caller: activations
// are NCHW, convolution weights OIHW (for groups > 1 the O dimension is split
// into `groups` consecutive blocks, i.e. the usual PyTorch/ONNX layout), bias
// and its gradient are [K]. The functions never allocate those tensors. They do
// keep a process-wide cache of oneDNN primitives (one per distinct parameter
// set), together with any internal scratch buffers, so that steady-state calls
// do no heap allocation and no primitive creation.
//
// Output spatial sizes must be consistent with the other parameters:
//   OH == (H + pad_top + pad_bottom - ((R - 1) * dil_h + 1)) / stride_h + 1
// (same for pooling with kh and no dilation). "Ceil mode" pooling is expressed
// by the caller through a larger pad_bottom / pad_right.
//
// Errors (bad parameters, oneDNN failures) are reported as std::runtime_error
// whose message starts with "[conv2d]" or "[pool2d]" and lists the shapes.
//
// All functions are thread-safe and take no lock: each calling thread has
// its own cache of primitives and its own stream, so calls from two threads
// (two jobs) run at the same time. Each call is parallelised by OpenMP with
// the calling thread's thread count.
#pragma once

#include <cstddef>
#include <cstdint>

namespace jobflow::cpu {

struct Conv2dParams {
  int64_t N, C, H, W;  // input
  int64_t K, R, S;     // out channels, kernel h, kernel w (weights are K x C/groups x R x S, OIHW)
  int64_t OH, OW;      // output spatial
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t dil_h = 1, dil_w = 1;  // 1 = no dilation (converted to oneDNN's 0-based dilation inside)
  int64_t groups = 1;
};

// The memory order of a convolution's activations (train plans' layout
// pass, compiler/train_layout.cpp): plain NCHW, or nChw16c (oneDNN's
// aBcd16b: channels in blocks of 16, innermost), which needs the tensor's
// channel count to be a multiple of 16. `src` is x (forward, backward
// weights) or dx (backward data); `dst` is y or dy.
struct ConvFormats {
  bool src_blocked = false, dst_blocked = false;
};

// y = conv(x, w) (+ bias[K] if bias != nullptr), then relu if fuse_relu.
// bf16 (all three): compute in bfloat16 with float32 accumulation on
// converted copies of the inputs; every buffer given stays float32 (a train
// job's float32 master weights and gradients). Needs AVX512_BF16 or AMX.
void conv2d_forward(const Conv2dParams& p, const float* x, const float* w, const float* bias, float* y,
                    bool fuse_relu = false, bool bf16 = false, ConvFormats f = {});
// dx = gradient of the convolution w.r.t. its input; dx is overwritten.
void conv2d_backward_data(const Conv2dParams& p, const float* w, const float* dy, float* dx, bool bf16 = false,
                          ConvFormats f = {});
// dw (and dbias = sum of dy over N, OH, OW when non-null) are overwritten.
void conv2d_backward_weights(const Conv2dParams& p, const float* x, const float* dy, float* dw,
                             float* dbias /*nullable*/, bool bf16 = false, ConvFormats f = {});

enum class PoolKind { Max, AvgIncludePad, AvgExcludePad };

struct Pool2dParams {
  int64_t N, C, H, W, OH, OW, kh, kw, sh, sw, pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  PoolKind kind = PoolKind::Max;
};

// Bytes the forward must keep for the backward (max-pool argmax indices:
// a byte per output, the maximum's position in its window; an int32,
// 4-byte aligned, for windows of more than 256 taps); 0 for average
// pooling. The buffer needs no particular initialisation.
size_t pool2d_workspace_bytes(const Pool2dParams& p);
// Max pooling runs Jobflow's own loops (cpu/simd_kernels.h): each output
// is its window's first maximum, or its first NaN (NaN propagates, as in
// PyTorch and cuDNN), and the backward sends dy there. Average pooling
// runs oneDNN's.
// workspace may be null when not training (inference primitive, no indices);
// for PoolKind::Max with a later pool2d_backward it must hold
// pool2d_workspace_bytes(p) bytes.
// blocked (all three): x, y, dy, dx in nChw16c (ConvFormats); only for
// pool2d_own_max_2x2(p) with C a multiple of 16, and the backward must be
// given the same `blocked` as the forward that filled the workspace.
void pool2d_forward(const Pool2dParams& p, const float* x, float* y, void* workspace /*may be null*/,
                    bool blocked = false);
// dx is overwritten. workspace: the one filled by pool2d_forward (Max only;
// ignored for average pooling).
void pool2d_backward(const Pool2dParams& p, const float* dy, const void* workspace, float* dx, bool blocked = false);
// Whether max pooling with these params runs on Jobflow's own 2x2 stride-2
// loop (cpu/simd_kernels.h), which pool2d_backward_relu_masked needs.
bool pool2d_own_max_2x2(const Pool2dParams& p);
// pool2d_backward followed by relu's gradient at the pooling's input, in
// one pass: dy counts only where the forward's output y is > 0. Only for
// pool2d_own_max_2x2(p).
void pool2d_backward_relu_masked(const Pool2dParams& p, const float* dy, const void* workspace, const float* y,
                                 float* dx, bool blocked = false);

// c[M,N] = op(a)[M,K] * op(b)[K,N] (+ c when accumulate), row-major float32
// buffers, op() transposing when ta / tb (a stored K x M, b stored N x K):
// computed in bfloat16 with float32 accumulation (oneDNN's matmul; AMX
// where the CPU has it). Needs AVX512_BF16 or AMX.
void matmul_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, const float* b, float* c,
                 bool accumulate);
// The same in float32 on oneDNN's matmul primitive, on the caller's buffers
// as they are (no conversion). matmul_f32_on_primitive: where it beats
// oneDNN's sgemm, which runs the other float32 products: a (M, K) times a
// transposed b with M >= 32 and at least 2^20 multiply-adds, where oneDNN
// runs AVX-512 (brgemm). Zen 5, 2 threads, M x N x K: 100 x 512 x 3136
// (LeNet's dense layer forward in train plans) 2.0-2.4 -> 1.55-1.8 ms,
// 100 x 512 x 784 0.48 -> 0.39, 32 x 512 x 3136 0.84 -> 0.56; the other
// transpositions and M = 1 or 8 were the same or slower.
bool matmul_f32_on_primitive(bool ta, bool tb, int64_t M, int64_t N, int64_t K);
void matmul_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, const float* b, float* c,
                bool accumulate);

// ---- Tuning knobs (benchmarks and tests; the defaults are the measured best) ----

// How the convolution primitives see their tensors:
//   Plain   - directly on the caller's NCHW / OIHW buffers, no reorders
//             (oneDNN then uses its im2col + GEMM implementation);
//   Blocked - oneDNN picks its preferred (blocked, e.g. nChw16c) layouts and
//             the kernels reorder to/from the caller's buffers through cached
//             internal buffers (oneDNN's direct JIT kernels);
//   Auto    - (default) Blocked, except backward-data with groups == 1 and
//             C < 16: blocked layouts pad the input channels to 16, so the
//             direct kernel does up to 16x redundant work there.
// Measured on LeNet shapes (N=100, 2 AVX-512 cores) Blocked is 2-3x faster
// than Plain for everything except conv1 (C=1) backward-data, where Plain is
// ~5x faster; the numbers are listed in dnnl_kernels.cpp.
enum class ConvLayout { Plain, Blocked, Auto };
enum class ConvPass { Forward = 0, BackwardData = 1, BackwardWeights = 2 };
void set_conv_layout(ConvPass pass, ConvLayout layout);
ConvLayout conv_layout(ConvPass pass);

// Name of the oneDNN implementation the cached primitive for these params uses
// (e.g. "jit:avx512_core", "gemm:jit"); creates the cache entry if needed.
const char* conv2d_impl_name(const Conv2dParams& p, ConvPass pass, bool has_bias);

// Whether a float32 pass with these formats runs on Jobflow's Winograd
// kernel instead of oneDNN's (train plans' stride-1 3x3 and 5x5
// convolutions with nChw16c activations on both sides, where
// Winograd::worthwhile; see dnnl_kernels.cpp; for backward data, the
// mirrored convolution that computes dx).
bool conv2d_on_winograd(const Conv2dParams& p, ConvPass pass, ConvFormats f);

// Drops every cached primitive (e.g. after changing the layout knobs; the cache
// key includes the layout, so this is only needed to free memory).
void clear_dnnl_cache();

}  // namespace jobflow::cpu

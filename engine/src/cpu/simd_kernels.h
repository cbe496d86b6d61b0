// cpu/simd_kernels.h — element-wise kernels of Jobflow's own for the predict
// plans' oneDNN chains (cpu/layout_ops.h): in AVX2 + FMA on CPUs whose
// oneDNN kernels are AVX2 at most (own_avx2_kernels()), and the few that
// beat oneDNN 2.6 on AVX-512 too (swish, bfloat16 channel-wise ops), in
// AVX-512 where the CPU has it. (Named avx2_kernels.* before the AVX-512
// ones joined.)
#pragma once

#include <cstddef>
#include <cstdint>

namespace jobflow::cpu {

// The CPU runs AVX2 and FMA, and oneDNN has no AVX-512 kernels here: where
// these kernels (and cpu/winograd.h) replace oneDNN's.
bool own_avx2_kernels();
// The CPU runs AVX512F: the channels-last kernels below (gap_nhwc,
// max_pool_nhwc, nchw_to_nhwc's RGB path) and the wider forms of the others.
bool own_avx512_kernels();

// y[i] = y[i] * sigmoid(y[i]) = y[i] / (1 + exp(-y[i])), in place, n
// floats, parallel with the calling thread's OpenMP count. exp by range
// reduction to [-ln 2 / 2, ln 2 / 2] and a polynomial (degree 6 in AVX2,
// a fitted degree 5 in AVX-512: cpu/avx512_math.h; relative error about
// 1e-7 and 2.5e-7); NaN stays NaN.
//
// Why: oneDNN 2.6's swish post-op on AVX2 cost a convolution 1.2 ms on
// efficientnet_b0's 96 x 112 x 112 expansion (the convolution alone 0.55);
// this loop after the convolution costs 0.5 (measured on the 2-core AMD
// EPYC, Zen 3).
void swish_inplace(float* y, int64_t n);
// The same over n bfloat16 values (computed in float32, rounded to nearest
// even); needs AVX512_BF16 (own_swish(true)).
//
// Why, on AVX-512 CPUs too: oneDNN 2.6's swish there (post-op or its own
// eltwise primitive) cost efficientnet_b0's 16 -> 96 expansion at 112 x 112,
// batch 8, one thread, 8.2 ms in bf16 on top of the convolution's 1.6
// (float32: 7.3 on top of 4.4); on the 2-core Zen 5.
void swish_inplace_bf16(uint16_t* y, int64_t n);
// Whether swish_inplace (bf16 = false: AVX2 and FMA, AVX-512 used where
// present) or swish_inplace_bf16 (AVX512_BF16) runs on this CPU.
bool own_swish(bool bf16);
// Whether the bfloat16 kernels here run on this CPU (AVX512_BF16, with
// AVX512BW and VL).
bool own_bf16_kernels();
// y[p * n + k] = bf16(x[p * n + k] * s[k]) (mul) or bf16(x[p * n + k] +
// s[k]) for p < pixels, k < n: the same n scales for each of `pixels` runs
// of n values, all three bfloat16, computed in float32 (s widened once)
// and rounded to nearest even; one thread (the caller parallelises).
// Needs own_bf16_kernels().
void bf16_channel_op(const uint16_t* x, const uint16_t* s, uint16_t* y, int64_t n, int64_t pixels, bool mul);

// y (N, C, H, W) row-major from x (N, C, H, W) channels-last (nhwc), float32,
// HW = H x W pixels per image: blocks of 16 pixels x 16 channels
// transposed in registers, parallel over images, channel blocks and pixel
// blocks with the calling thread's OpenMP count. `stream`: whole aligned
// lines of y are written past the cache (a map nothing reads soon: no read
// for ownership of lines about to be overwritten). Needs
// own_avx512_kernels().
//
// Why: oneDNN 2.6's reorder moved ssdlite320's returned 672 x 20 x 20
// feature map out of channels-last at 20 GB/s (0.10 ms at batch 1, 0.94
// at batch 8: 2.4% of the call).
void nhwc_to_nchw(const float* x, int64_t N, int64_t C, int64_t HW, float* y, bool stream);

// A step after a small 1x1 convolution's sums (small_1x1): max(v, 0),
// min(max(v, alpha), beta), sigmoid, v * sigmoid(v), hardswish (v *
// min(max(v + 3, 0), 6) / 6) or alpha * v + beta.
struct SmallStep {
  enum Kind { Relu, Clip, Logistic, Swish, HardSwish, Linear } kind;
  float alpha = 0.f, beta = 0.f;
};
// y[n][k] = steps(b[k] + sum over c of x[n][c] * w[c][k]) for n < N, k < K:
// a 1x1 convolution of 1 x 1 images (a squeeze-and-excitation's reduce and
// expand, channels-last and row-major alike), x rows of C floats, w packed
// [C][Kp] (Kp = K rounded up to 16; columns from K on anything finite), b
// [Kp] (zeros for no bias), y rows of K floats. On the calling thread, sums in
// c order (the same bits at any thread count): for up to about a million
// multiply-adds (LayoutConv::small_steps). Needs own_avx512_kernels().
//
// Why: oneDNN 2.6 ran each of efficientnet_b0's 32 such convolutions in
// 6-18 us at batch 1 (a parallel region and its primitive around a few
// thousand multiply-adds): 0.35 ms of its 7 ms call.
void small_1x1(const float* x, int64_t N, int64_t C, const float* w, int64_t K, const float* b,
               const SmallStep* steps, int n_steps, float* y);

// y[j] = w0[j] * row[i0[j]] + w1[j] * row[i1[j]] for j < n: one output row
// of a linear interpolation along a row (ops/resize.cpp's bilinear path),
// on the calling thread; indices inside row. AVX-512 gathers 16 at a time
// where the CPU has them (a product and a fused multiply-add per element:
// results may differ from the scalar form's in the last bit).
void lerp_row(const float* row, const int32_t* i0, const int32_t* i1, const float* w0, const float* w1, float* y,
              int64_t n);

// Max or average pooling (the average over the window's elements inside
// the input: ONNX's count_include_pad=0) of x (N, C, H, W) into y (N, C,
// OH, OW), both nChw8c float32 with CB = ceil(C / 8) channel blocks (padded
// channels are pooled like the others). A global average pool is the
// window (H, W) with stride 1 and no pads. Parallel over images, channel
// blocks and rows.
//
// Why: oneDNN 2.6's jit:avx2 pooling took 0.97 ms for resnet18's 3x3/2 max
// pool (64 x 112 x 112), this loop 0.26 (ONNX Runtime 0.37). A NaN in a
// max pooling's window is its output (as in max_pool_nhwc).
struct Pool8cParams {
  int64_t N, CB, H, W, OH, OW, kh, kw, sh, sw, pad_top, pad_left;
  bool max;
};
void pool_nchw8c(const Pool8cParams& p, const float* x, float* y);

// The mean over the HW pixels of each image and channel of x (N, HW, C)
// channels-last float32 into y (N, C). Needs AVX-512 (own_avx512_kernels()).
// Each image's pixels go in kGapChunks runs of consecutive pixels (rows),
// summed into partial sums side by side and added in order: the bits do not
// depend on the thread count, and at batch 1 each thread reads the rows it
// likely wrote (the kernels before it split images into bands of rows).
//
// Why: oneDNN 2.6's pooling splits a channels-last image over channels, so
// each thread reads every pixel (half of them from the other core's cache):
// efficientnet_b0's squeeze-and-excitation pools took 6% of its batch-1
// call (0.066 ms for 32 x 112 x 112).
constexpr int64_t kGapChunks = 8;
void gap_nhwc(const float* x, int64_t N, int64_t HW, int64_t C, float* y);

// Max pooling of x (N, C, H, W) channels-last float32 into y (N, C, OH,
// OW) channels-last: windows kh x kw, strides sh x sw, pads pt/pl (padding
// never wins); a NaN in a window is the output, as in max_pool_2x2 and
// max_pool_plain. Needs own_max_pool_nhwc(). Parallel over output rows.
//
// Why: oneDNN 2.6's channels-last max pool took 0.13 ms for resnet18's 3x3
// stride-2 pool (64 x 112 x 112) on the 2-core Xeon, ONNX Runtime 0.10.
struct PoolNhwcParams {
  int64_t N, C, H, W, OH, OW, kh, kw, sh, sw, pt, pl;
};
void max_pool_nhwc(const PoolNhwcParams& p, const float* x, float* y);
// The same on bfloat16 data (a bf16 plan's chain): each maximum is one of
// the inputs, stored back bit for bit. Needs AVX512BW and AVX512VL.
// Blocked formats pool the same way: nChw16c (or nChw8c) is N x ceil(C /
// 16) channels-last images of 16 (8) channels.
void max_pool_nhwc(const PoolNhwcParams& p, const uint16_t* x, uint16_t* y);
// Whether max_pool_nhwc runs on this CPU (AVX512F, BW and VL, both types;
// elsewhere it throws, and the layout pass pools such blobs as written).
bool own_max_pool_nhwc();

// Max pooling of any window, strides and pads (smaller than the window)
// on plain NCHW float32: x has `planes` (N * C) planes of H x W, y of OH x
// OW. Each output is its window's first maximum, or its first NaN (a NaN
// in the window is the output, as in PyTorch and cuDNN; padding never
// wins; windows of fewer than 2^31 taps, as pool2d_* check). idx
// (nullable, for training) receives the position of that
// input in its window (row * kw + column), max_pool_plain_index_bytes(p)
// bytes each: a uint8 for windows of up to 256 taps (what oneDNN's
// workspace held), an int32 beyond; max_pool_plain_backward adds each dy to
// dx there (dx overwritten, zeros elsewhere). With AVX-512, 16 outputs a
// vector at strides 1 and 2; plain loops otherwise. Parallel over rows
// (backward: planes) with the calling thread's OpenMP count.
//
// Why: oneDNN 2.6's max pooling, which ran these before, drops a NaN (the
// window's largest number is its output: checked for every position of a
// NaN in a 3x3 window), while Jobflow's other pooling kernels and cuDNN
// (CUDNN_PROPAGATE_NAN) keep it: one job gave different answers on
// different layouts, and a diverging training run's NaN could vanish.
struct MaxPoolPlainParams {
  int64_t planes, H, W, OH, OW, kh, kw, sh, sw, pt, pl;
};
size_t max_pool_plain_index_bytes(const MaxPoolPlainParams& p);
void max_pool_plain(const MaxPoolPlainParams& p, const float* x, float* y, void* idx);
void max_pool_plain_backward(const MaxPoolPlainParams& p, const float* dy, const void* idx, float* dx);

// Max pooling with a 2x2 window and stride 2, no padding, on plain NCHW
// float32: x has `planes` (N * C) planes of H x W, y of OH x OW with
// 2 * OH <= H and 2 * OW <= W (a last odd row or column is not read).
// idx (nullable) receives one byte per output, the position of the
// window's first maximum (0..3: row * 2 + column), or of its first NaN
// (a NaN in the window is the output); max_pool_2x2_backward
// scatters dy through it into dx (overwritten, zeros elsewhere). AVX-512
// where the CPU has it, plain loops otherwise; parallel over rows with the
// calling thread's OpenMP count.
//
// Why: oneDNN 2.6's pooling on plain NCHW (jit:avx512_core) took 1.28 ms
// for LeNet's first pooling in a train step (100 x 32 x 28 x 28) and 1.42
// for its gradient, 8-10 GB/s, on the 2-core Xeon (AMX), with activations
// in NCHW; the nChw16c form serves train plans' blocked chains
// (compiler/train_layout.cpp).
//
// pixel = 16: nChw16c (planes = N * C / 16, each pixel 16 channels, one
// index byte per channel), the train plans' blocked activations.
struct MaxPool2x2Params {
  int64_t planes, H, W, OH, OW;
  int64_t pixel = 1;  // floats per pixel: 1 (NCHW) or 16 (nChw16c)
};
void max_pool_2x2(const MaxPool2x2Params& p, const float* x, float* y, uint8_t* idx);
// mask (nullable, the forward's output y): dy counts only where y > 0
// (relu's gradient at the pooling's input folded in).
void max_pool_2x2_backward(const MaxPool2x2Params& p, const float* dy, const uint8_t* idx, float* dx,
                           const float* mask = nullptr);
// x (N, C, H, W) row-major float32 into channels-last y, whose pixel
// (n, h, w) starts at y + ((n * Hy + h) * Wy + w) * C: a plain copy
// (Hy = H, Wy = W), or the inside of a padded one (y at its first inside
// pixel, Hy and Wy its padded size). Parallel over rows with the calling
// thread's OpenMP count.
//
// Why: oneDNN 2.6's reorder took 0.098 ms for ssdlite320's 3 x 320 x 320
// image (jit:uni) on the 2-core Xeon with AMX, this loop about a quarter
// of that (mobilenet_v2's 3 x 224 x 224: 0.025 ms); the layout pass uses
// it for inputs of at most 4 channels, where the transposition is a
// scatter of a few values per pixel. Three channels (RGB) with AVX-512:
// 16 pixels at a time, three permutes per 48 values instead of 48 scalar
// stores.
void nchw_to_nhwc(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, float* y, int64_t Hy, int64_t Wy);
// y[i] = x[i] rounded to bfloat16 (vcvtneps2bf16: nearest even, denormals
// to zero) for i < n; one thread. Needs own_bf16_kernels().
void floats_to_bf16(const float* x, int64_t n, uint16_t* y);
// x (N, C, H, W) into bfloat16 channels-last y as nchw_to_nhwc does (each
// row rounded by floats_to_bf16): a bf16 plan's first convolution on the
// image (oneDNN's reorder into bf16 channels-last took
// several times as long). Needs own_bf16_kernels().
void nchw_to_nhwc_bf16(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, uint16_t* y, int64_t Hy,
                       int64_t Wy);

// Tests: false makes max_pool_2x2 (and its backward) and max_pool_plain
// run their plain loops on AVX-512 CPUs too, so both paths are checked on
// one machine. Process-wide; the default is true.
void set_pool_vectors(bool on);

}  // namespace jobflow::cpu

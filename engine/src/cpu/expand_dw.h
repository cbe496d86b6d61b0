// cpu/expand_dw.h — a 1x1 "expansion" convolution and the depthwise
// convolution that alone reads its output, computed together row by row,
// float32 channels-last on AVX-512, for predict plans (compiler/layout.cpp
// through LayoutConv). The inverted residual blocks of mobilenet_v2,
// efficientnet_b0 and ssdlite320's backbone start with this pair.
//
// Why: in those networks the expanded tensor between the two (96 channels
// at 112x112 in mobilenet_v2: 4.8 MB per image) is written to memory by
// the 1x1 convolution and read back by the depthwise one, which then does
// almost no arithmetic per byte: both layers are bound by that traffic,
// not by their kernels (docs/performance.md: a faster depthwise kernel
// alone changed nothing in the networks). oneDNN 2.6 fuses the pair only
// with AVX2 (its "dw" post-op; on AVX-512 it chains its two kernels
// through a full-size buffer). Here each thread keeps the R expanded rows
// the next output row needs (R x W x E floats: 129 KB for that layer) and
// computes each expanded row once, just before the depthwise convolution
// reads it from cache; the expanded tensor never reaches memory.
//
// Computes y = act2(dw(act1(x * w1 + b1)) + b2), each act a clamp (relu,
// relu6, clip), hardswish, swish or nothing. x: (N, C, H, W) channels-last (oneDNN's
// acdb); y: (N, E, OH, OW) channels-last. Sums run in the same order at
// any thread count (each output element is computed by one thread).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/dnnl_kernels.h"

namespace jobflow::cpu {

// What follows a stage: nothing, min(hi, max(lo, v)), hardswish
// (oneDNN's v * min(max(v + 3, 0), 6) / 6) or swish (v * sigmoid(v)).
struct Activation {
  enum Kind { None, Clamp, HardSwish, Swish } kind = None;
  float lo = 0.f, hi = 0.f;
};

class ExpandDepthwise {
 public:
  // The CPU has AVX-512 (AVX512F).
  static bool supported();
  // The bfloat16 kernel's instructions too (AVX512_BF16, AVX512BW, VL).
  static bool supports_bf16();
  // Shapes this kernel computes: a convolution p (square weights of 1x1
  // to 7x7, stride 1 or 2, one group, no dilation, pads smaller than the
  // weights) whose output feeds the depthwise convolution dw (groups =
  // channels = p.K, 3x3 or 5x5, stride 1 or 2, no dilation, pads smaller
  // than the weights). p is mostly a 1x1 expansion; a network's first
  // convolution (3x3, stride 2, on the image) followed by a depthwise one
  // fits too.
  static bool fits(const Conv2dParams& p, const Conv2dParams& dw);
  // The expanded rows each thread keeps at most: R rows of the padded
  // width ((OW - 1) x stride + R pixels) x E rounded up to 16 floats.
  static size_t ring_bytes(const Conv2dParams& p, const Conv2dParams& dw);

  // A projection pw after dw: a 1x1 convolution (stride 1, no pads, one
  // group) of dw's output.
  static bool fits_projection(const Conv2dParams& dw, const Conv2dParams& pw);

  // Whether the projection pw may add the first convolution's output (after
  // its activation) as its residual, read from the kept rows: a block whose
  // shortcut starts before the first convolution's output goes to the
  // depthwise one (mobilenet_v3's first block, after its 3x3 stem: stem ->
  // depthwise -> projection + stem). The depthwise convolution keeps the
  // size (stride 1), pw gives back the first convolution's channels, a
  // multiple of 16 (the kept rows' pixels are then pw's output pixels apart).
  static bool fits_expanded_residual(const Conv2dParams& p, const Conv2dParams& dw, const Conv2dParams& pw);

  // Whether dw may be a max pool instead (max_pool below): the kept rows
  // hold their padding as zeros, which is the pool's -infinity only where
  // the first convolution's activation a1 never goes below zero (relu, a
  // clip from 0 up): then every window's maximum is a real pixel's.
  static bool fits_max_pool(const Conv2dParams& p, const Conv2dParams& pool, const Activation& a1);

  // a1, a2: what follows the expansion and the depthwise convolution. pw
  // (optional): a projection of the depthwise output computed row by row
  // with it (a3 after it, a residual added before a3), so the depthwise
  // output never reaches memory either; y is then pw's output.
  // add_expanded (with pw, fits_expanded_residual): the residual is the
  // first convolution's output, which then never reaches memory at all.
  //
  // bf16: x, y and res are bfloat16 (the run() overload for them); the
  // first convolution and the projection sum pairs of bfloat16 products in
  // float32 (AVX512_BF16 dot products, weights rounded to bfloat16 once);
  // the expanded rows, the depthwise convolution and every activation stay
  // float32; the depthwise output is rounded to bfloat16 where it is
  // stored (y, or the row the projection reads), as oneDNN's bf16 kernels
  // round theirs.
  //
  // max_pool: the second stage is a max pool of dw's window, stride and
  // pads (fits_max_pool; no weights, a2 None, no projection, no means):
  // resnet's 7x7 stem and the 3x3 pool after it, whose 112x112x64 output
  // then never reaches memory.
  ExpandDepthwise(const Conv2dParams& p, const Conv2dParams& dw, Activation a1, Activation a2,
                  const Conv2dParams* pw = nullptr, Activation a3 = {}, bool add_expanded = false, bool bf16 = false,
                  bool max_pool = false);
  // Whether run() reads x with p's padding as zeros around it (p larger
  // than 1x1, or padded), and the height and width x has (pads included).
  bool padded_input() const;
  void input_dims(int64_t* h, int64_t* w) const;
  // w1: (E, C, R1, S1) row-major (p's weights as OIHW), b1: [E] or null;
  // w2: (E, R, S) (the depthwise weights as OIHW), b2: [E] or null;
  // w3: (K, E) (the projection's OIHW), b3: [K] or null, with a projection.
  // With max_pool, w2 and b2 are null.
  // Packed and kept.
  void set_weights(const float* w1, const float* b1, const float* w2, const float* b2, const float* w3 = nullptr,
                   const float* b3 = nullptr);
  // x: channels-last, input_dims() high and wide (p's padding included,
  // zeros, when padded_input()). Parallel over images, bands of output
  // rows or groups of channels with the calling thread's OpenMP count.
  // With a projection, y = act3(pw(...) + res): res (pw's output shape,
  // channels-last, not y itself) or null; with one the work is always
  // split into bands of rows. With add_expanded, res is null (the kernel
  // has the residual).
  // means (or null; not with a projection): each image's channel means of
  // y, [N][E] float32 (a squeeze-and-excitation's global pool, computed
  // while y is written: summed along each output row, then the rows in
  // order, at any thread count; in a bf16 kernel the float32 outputs
  // before their rounding to bfloat16).
  void run(const float* x, float* y, const float* res = nullptr, float* means = nullptr) const;
  // The same with bfloat16 data (a bf16 kernel), y and res bfloat16 or,
  // for an output that leaves the bf16 chain (a return), float32.
  void run(const uint16_t* x, uint16_t* y, const uint16_t* res = nullptr, float* means = nullptr) const;
  void run(const uint16_t* x, float* y, const float* res = nullptr, float* means = nullptr) const;

 private:
  template <typename XT, typename YT>
  void run_as(const XT* x, YT* y, const YT* res, float* means) const;

  Conv2dParams p_, dw_;
  int64_t Ep_;  // E rounded up to 16
  Activation a1_, a2_;
  bool projects_ = false;
  Conv2dParams pw_{};
  int64_t Kp_ = 0;  // pw's K rounded up to 16
  Activation a3_;
  bool add_expanded_ = false;
  bool max_pool_ = false;
  std::vector<float> packed_;  // w1 [R1*S1*C][Ep], b1 [Ep], w2 [R*S][Ep], b2 [Ep], [w3 [Ep][Kp], b3 [Kp]], from a 64-byte line
  bool bf16_ = false;
  std::vector<float> pairs_;   // bf16: w1 and w3 as bfloat16 pairs (set_weights), from a 64-byte line
};

}  // namespace jobflow::cpu

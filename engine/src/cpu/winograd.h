// cpu/winograd.h — stride-1 convolutions by Winograd's minimal filtering,
// F(4x4, 3x3) for 3x3 weights and F(2x2, 5x5) for 5x5 ones, float32 on
// AVX2 + FMA, for predict plans (compiler/layout.cpp through LayoutConv).
//
// Why: on CPUs without AVX-512, oneDNN 2.6 has only its direct kernel for
// float32 convolutions (jit:avx2; its Winograd kernel needs AVX-512), and
// ONNX Runtime's MLAS runs the same direct algorithm at the same speed
// (resnet18's 3x3 convolutions within 5% of each other). Both variants
// work on 6x6 input tiles (the same interpolation points 0, +-1, +-2 and
// infinity, so the same input transform): F(4x4, 3x3) computes a 4x4
// output tile with 36 multiplications per input/output channel pair
// instead of 144, F(2x2, 5x5) a 2x2 tile with 36 instead of 100. Per tile
// block, the input tiles are transformed (V = B^T d B), multiplied with the
// transformed weights (U = G g G^T, made once per weight version) as 36
// small matrix products V[a] (tiles x C) * U[a] (C x K), and the products
// transformed back (Y = A^T M A) with the bias, a residual and a clamp
// (relu, relu6) applied on the way out.
//
// Memory: activations in oneDNN's channel-blocked nChw8c (aBcd8b), the
// format oneDNN's AVX2 kernels choose, so the kernel sits in a chain of
// oneDNN kernels without reorders. Channels must be multiples of 8.
//
// Accuracy: the transforms scale by up to 8 (A^T) and 1/24 (G); against
// the direct convolution the largest difference is 4e-6 to 1.4e-5 of the
// output's largest magnitude on resnet18's shapes (64-512 channels), and
// tests/unit/test_layout.cpp bounds it by 2e-6 sqrt(C) (3x3) and
// 4e-6 sqrt(C) (5x5).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/dnnl_kernels.h"

namespace jobflow::cpu {

class Winograd {
 public:
  // The CPU runs AVX2 and FMA.
  static bool supported();
  // supported(), and oneDNN has no AVX-512 kernels here (with AVX-512 its
  // direct kernel is twice as wide and has its own Winograd): where the
  // layout pass uses this kernel.
  static bool preferred();
  // A shape this kernel computes: 3x3 or 5x5 weights, stride 1, no
  // dilation, one group, input and output channels multiples of 8, pads
  // smaller than the weights.
  static bool fits(const Conv2dParams& p);
  // Whether it beats oneDNN's direct AVX2 kernel for p (measured on an AMD
  // EPYC Zen 3, see the .cpp): enough tiles per byte of transformed weights.
  static bool worthwhile(const Conv2dParams& p);

  explicit Winograd(const Conv2dParams& p);
  // w: the weights (K, C, R, R), float32 row-major; transformed and kept.
  void set_weights(const float* w);
  // x: the input (N, C, H, W) in nChw8c; y: the output (N, K, OH, OW) in
  // nChw8c. y = clamp(conv(x) + bias + res, lo, hi): bias [K] or null, res
  // (nChw8c like y, may be y itself) or null. Parallel over tile blocks
  // with the calling thread's OpenMP count.
  void run(const float* x, float* y, const float* bias, const float* res, float lo, float hi) const;

 private:
  Conv2dParams p_;
  int64_t m_;  // output tile: 4 (3x3 weights) or 2 (5x5)
  int64_t tiles_h_, tiles_w_;
  std::vector<float> u_;  // [36][K in blocks of 16 (8 for a last odd block)][C][block]
  mutable std::vector<float> scratch_;  // per thread: V [36][TB][C] and M [36][TB][K]
};

}  // namespace jobflow::cpu

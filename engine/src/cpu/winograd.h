// cpu/winograd.h — stride-1 convolutions by Winograd's minimal filtering,
// F(4x4, 3x3) for 3x3 weights and F(2x2, 5x5) for 5x5 ones, float32 on
// AVX2 + FMA (8 lanes) or AVX-512 (16 lanes), for predict plans
// (compiler/layout.cpp through LayoutConv) and for all three passes of
// train plans' nChw16c convolutions (cpu/dnnl_kernels.cpp,
// conv2d_on_winograd): forward, input gradient (a convolution of dy by the
// turned weights) and weight gradient (backward_weights).
//
// Why: on CPUs without AVX-512, oneDNN 2.6 has only its direct kernel for
// float32 convolutions (jit:avx2; its Winograd kernel needs AVX-512), and
// ONNX Runtime's MLAS runs the same direct algorithm at the same speed
// (resnet18's 3x3 convolutions within 5% of each other). With AVX-512,
// oneDNN runs F(2x2, 3x3) at batch 1 (16 multiplications per 4 outputs
// where this kernel needs 36 per 16) and its direct kernel on the
// 512-channel layers; this kernel ran resnet18's 3x3 layers 1.5-2.3x
// faster than those (winograd.cpp). Both variants
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
// Memory: activations in oneDNN's channel-blocked nChw8c (aBcd8b) at 8
// lanes or nChw16c (aBcd16b) at 16, the formats oneDNN's AVX2 and AVX-512
// kernels choose, so the kernel sits in a chain of oneDNN kernels without
// reorders. Channels must be multiples of 8 (16 for 16 lanes). The block
// of work is compiled once per instruction set (cpu/winograd_block.h).
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
  // Where the layout pass uses this kernel: supported(), on CPUs where
  // oneDNN has no AVX-512 kernels (its AVX2 direct kernel is the
  // alternative) and on CPUs with AVX-512 (16 lanes; against oneDNN's
  // AVX-512 Winograd F(2x2, 3x3) and direct kernels, see the .cpp).
  static bool preferred();
  // A shape this kernel computes: 3x3 or 5x5 weights, stride 1, no
  // dilation, one group, input and output channels multiples of 8, pads
  // smaller than the weights.
  static bool fits(const Conv2dParams& p);
  // Whether it beats oneDNN's kernels for p (measured on an AMD EPYC Zen 3
  // and a Xeon with AVX-512, see the .cpp): enough tiles per byte of
  // transformed weights; with AVX-512, channels in multiples of 16.
  static bool worthwhile(const Conv2dParams& p);

  // The vector width it runs p at by default: 16 lanes (AVX-512,
  // activations in nChw16c) where the CPU has AVX512F, oneDNN runs its
  // AVX-512 kernels and both channel counts are multiples of 16, else 8
  // (AVX2, nChw8c).
  static int lanes_for(const Conv2dParams& p);
  // lanes: 8, 16 (the CPU must have AVX512F, channels multiples of 16) or
  // 0 for lanes_for(p).
  explicit Winograd(const Conv2dParams& p, int lanes = 0);
  int lanes() const { return lanes_; }
  // w: the weights (K, C, R, R), float32 row-major; transformed and kept.
  void set_weights(const float* w);
  // For the input gradient of a stride-1 convolution (train plans,
  // cpu::conv2d_backward_data): w are that convolution's weights (C, K, R,
  // R) with this kernel's C and K, the gradient's, swapped; each filter is
  // used turned by 180 degrees (dx = conv(dy, w turned, pads R - 1 - pad)).
  void set_backward_data_weights(const float* w);
  // x: the input (N, C, H, W) in nChw<lanes>c; y: the output (N, K, OH, OW)
  // in the same format. y = clamp(conv(x) + bias + res, lo, hi): bias [K] or
  // null, res (formatted like y, may be y itself) or null. With
  // res_channels_last, res is channels-last (acdb) instead, and K a multiple
  // of the lanes (resnet18's first residual: the max pool's output, which
  // follows the stem's channels-last format). Parallel over tile blocks
  // with the calling thread's OpenMP count.
  void run(const float* x, float* y, const float* bias, const float* res, float lo, float hi,
           bool res_channels_last = false) const;
  // The weight gradient of this convolution (train plans' backward
  // weights): x (N, C, H, W) and dy (N, K, OH, OW) in nChw<lanes>c; dw
  // (K, C, R, R) row-major and, unless null, db (K) (dy's sums) are
  // overwritten. The weights set, if any, are not used. The products are
  // summed in the transformed domain (winograd_block.inc), each thread
  // over its own run of tiles, then turned into dw once.
  void backward_weights(const float* x, const float* dy, float* dw, float* db) const;
  // The bytes of each thread's transformed-domain sums in
  // backward_weights (dU: 36 x C x K floats).
  static int64_t weight_gradient_bytes(const Conv2dParams& p);

 private:
  void transform_weights(const float* w, bool turned);

  Conv2dParams p_;
  int64_t m_;  // output tile: 4 (3x3 weights) or 2 (5x5)
  int lanes_;  // 8 (x, y in nChw8c) or 16 (nChw16c)
  int64_t tiles_h_, tiles_w_;
  std::vector<float> u_;  // [36][K in blocks of 16 (8 for a last odd block)][C][block]
  mutable std::vector<float> scratch_;  // per thread: V [36][TB][C] and M [36][TB][K] (backward_weights: V, D [36][TB][K] and dU [36][K][C])
};

}  // namespace jobflow::cpu

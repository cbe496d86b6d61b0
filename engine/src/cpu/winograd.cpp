// cpu/winograd.cpp — F(4x4, 3x3) and F(2x2, 5x5) convolutions on AVX2 or
// AVX-512 (see winograd.h): the weight transform and the split into tile
// blocks; a block's work is wino::<isa>::block() (winograd_block.inc). The
// weight gradient of train plans (backward_weights) runs the same tiles
// through wino::<isa>::weight_gradient_block() and turns its sums into
// weights by G^T dU G.
//
// Transforms of F(4x4, 3x3) (Lavin and Gray, "Fast Algorithms for
// Convolutional Neural Networks", 2015; interpolation points 0, +-1, +-2,
// infinity). F(2x2, 5x5) on the same points has the same B^T, the first two
// rows of A^T (with the infinity column in its last row: 0 1 -1 2 -2 1) and
// G's rows extended to five powers (weight_matrix()):
//
//   B^T = | 4  0 -5  0  1  0 |   G = |  1/4     0     0  |   A^T = | 1  1  1  1  1  0 |
//         | 0 -4 -4  1  1  0 |       | -1/6  -1/6  -1/6 |         | 0  1 -1  2 -2  0 |
//         | 0  4 -4 -1  1  0 |       | -1/6   1/6  -1/6 |         | 0  1  1  4  4  0 |
//         | 0 -2 -1  2  1  0 |       | 1/24  1/12   1/6 |         | 0  1 -1  8 -8  1 |
//         | 0  2 -1 -2  1  0 |       | 1/24 -1/12   1/6 |
//         | 0  4  0 -5  0  1 |       |    0     0     1  |
//
// Work is split into blocks of TB output tiles (4x4 or 2x2 pixels of one
// image).
// Per block: the input transform writes V[a][t][c] (a = 6x6 position, t =
// tile of the block, c = input channel), 36 matrix products M[a] = V[a] U[a]
// run on a register-blocked kernel (8 lanes: 6 tiles x 16 output channels;
// 16 lanes: 12 tiles x 32; the transformed weights of those channels for
// one position, C x 16 or C x 32 floats, stay in L1 across the block's
// tiles), and the output transform
// reads M[a][t][k] for the 36 positions and writes the 4x4 tile. Blocks are
// sized so V and M of a block stay in the core's L2 cache unless that would
// make them too few tiles for the weights they read (kMinBlock), and run in
// parallel (one V/M scratch per thread).
//
// When it pays (worthwhile()), measured on the 2-core AMD EPYC (Zen 3,
// AVX2; load average 17 from other processes) against oneDNN 2.6's
// jit:avx2 direct kernel with the same bias and relu, one thread,
// resnet18's 3x3 shapes, fastest of 20-40 calls by CPU time, ms:
//                        batch 1: direct  Winograd    batch 8: direct  Winograd
//   56x56,  64 ->  64             2.6-2.7   1.4-1.5             24.0     18.1
//   28x28, 128 -> 128             2.7-3.0   1.3-1.6             23.9     15.4
//   14x14, 256 -> 256             2.9       2.0-2.4             23.2     15.7
//    7x7,  512 -> 512             4.3-5.6   4.1-6.6 (not used)  26.8     18.5
// F(2x2, 5x5), LeNet's second convolution (32 -> 64 channels, 14x14, batch
// 100): direct 22-25 ms, Winograd 18-22 (its transforms serve 4 outputs
// each instead of 16, so the gain is smaller).
// The kernel loses where the transformed weights (36 * C * K floats, 4x the
// direct kernel's for 3x3) are large for the tiles they serve: resnet18's
// 7x7 stage at batch 1 (4 tiles, 37.7 MB of weights per call).
// The largest difference from the direct kernel on those shapes was 4e-6
// to 1.4e-5 of the output's largest magnitude.
#include "cpu/winograd.h"

#include "cpu/winograd_block.h"

#include "cpu/aligned.h"

#include "cpu/isa.h"
#include "cpu/simd_kernels.h"

#include <omp.h>

#include <algorithm>
#include <stdexcept>

namespace jobflow::cpu {

namespace {

using wino::kAlpha;
constexpr int64_t kL2Budget = 512 * 1024;  // bytes of V and M per block
// Fewest tiles per block: each block reads all 36 C K transformed weights,
// which for 256 channels and more come from L3 (measured: 12 tiles per
// block ran resnet18's 14x14 stage at batch 1 at the direct kernel's speed,
// 18-24 at 1.4-1.6x).
constexpr int64_t kMinBlock = 24;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// G (6 x r) for r x r weights: row i is scale_i (1, p_i, p_i^2, ...,
// p_i^(r-1)) for the points 0, 1, -1, 2, -2, and (0, ..., 0, 1) for
// infinity.
void weight_matrix(int64_t r, double G[6][5]) {
  static const double pts[5] = {0, 1, -1, 2, -2}, scale[5] = {1.0 / 4, -1.0 / 6, -1.0 / 6, 1.0 / 24, 1.0 / 24};
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j) G[i][j] = 0;
  for (int i = 0; i < 5; ++i) {
    double pw = 1;
    for (int j = 0; j < r; ++j, pw *= pts[i]) G[i][j] = scale[i] * pw;
  }
  G[5][r - 1] = 1;
}

// The 16-lane kernel's condition: the CPU has AVX512F and oneDNN runs its
// AVX-512 kernels (ONEDNN_MAX_CPU_ISA may cap them at AVX2: then the chain
// around this kernel is nChw8c, and so is this kernel).
bool avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && !avx2_at_most();
  return yes;
}


}  // namespace

bool Winograd::supported() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

bool Winograd::preferred() { return supported() && (own_avx2_kernels() || avx512()); }

bool Winograd::fits(const Conv2dParams& p) {
  return (p.R == 3 || p.R == 5) && p.S == p.R && p.stride_h == 1 && p.stride_w == 1 && p.dil_h == 1 &&
         p.dil_w == 1 && p.groups == 1 && p.C % 8 == 0 && p.K % 8 == 0 && p.pad_top < p.R && p.pad_left < p.R &&
         p.OH > 0 && p.OW > 0 && p.OH == p.H + p.pad_top + p.pad_bottom - (p.R - 1) &&
         p.OW == p.W + p.pad_left + p.pad_right - (p.S - 1);
}

bool Winograd::worthwhile(const Conv2dParams& p) {
  const int64_t m = p.R == 3 ? 4 : 2;
  const int64_t tiles = p.N * ceil_div(p.OH, m) * ceil_div(p.OW, m);
  // Transformed weights (36 C K floats, 4x the direct kernel's for 3x3) are
  // read once per tile block: with few tiles they cost more than the
  // multiplications save (resnet18's 7x7 stage at batch 1: 4 tiles, even).
  // With AVX-512 only at 16 lanes: oneDNN's kernels around it use nChw16c,
  // and an 8-lane layer would sit between two reorders.
  // Against oneDNN's AVX-512 kernels, the transformed weights must also be
  // small for the tiles: at most 128 KB per tile (resnet18 at batch 1: the
  // 56x56 and 28x28 layers, 3 and 48 KB, ran 1.2-1.9x faster in the
  // network; the 14x14 ones, 590 KB, 1.5x slower than oneDNN's F(2x2, 3x3),
  // which reads a quarter of those bytes; batch 8: the 7x7 ones, 1.2 MB,
  // 1.45x slower than its direct kernel).
  if (avx512() && (lanes_for(p) != 16 || kAlpha * 4 * p.C * p.K > (int64_t(128) << 10) * tiles)) return false;
  return fits(p) && p.C >= 32 && p.K >= 32 && tiles >= 12;
}

int Winograd::lanes_for(const Conv2dParams& p) {
  return avx512() && p.C % 16 == 0 && p.K % 16 == 0 ? 16 : 8;
}

Winograd::Winograd(const Conv2dParams& p, int lanes) : p_(p), m_(p.R == 3 ? 4 : 2), lanes_(lanes ? lanes : lanes_for(p)) {
  if (lanes_ != 8 && lanes_ != 16) throw std::invalid_argument("Winograd: lanes must be 8 or 16");
  if (lanes_ == 16 && lanes_for(p) != 16) throw std::invalid_argument("Winograd: 16 lanes need AVX512F and channels in multiples of 16");
  tiles_h_ = ceil_div(p.OH, m_);
  tiles_w_ = ceil_div(p.OW, m_);
}

void Winograd::set_weights(const float* w) { transform_weights(w, false); }

void Winograd::set_backward_data_weights(const float* w) { transform_weights(w, true); }

void Winograd::transform_weights(const float* w, bool turned) {
  const int64_t C = p_.C, K = p_.K, r = p_.R;
  float* u = align64(u_, static_cast<size_t>(kAlpha * C * K));
  double G[6][5];
  weight_matrix(r, G);
  // (Train plans transform their weights at every step: in parallel.)
#pragma omp parallel for schedule(static) if (K * C >= 1024)
  for (int64_t k = 0; k < K; ++k) {
    const int64_t k0 = k / 16 * 16, nb = std::min<int64_t>(16, K - k0);
    for (int64_t c = 0; c < C; ++c) {
      // Filter (k, c): w[k][c], or (turned) w[c][k] rotated by 180 degrees.
      const float* g = w + (turned ? c * K + k : k * C + c) * r * r;
      const int64_t last = r * r - 1;
      double gg[6][5] = {};  // G g
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < r; ++j)
          for (int l = 0; l < r; ++l) gg[i][j] += G[i][l] * g[turned ? last - (l * r + j) : l * r + j];
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) {  // (G g) G^T
          double v = 0;
          for (int l = 0; l < r; ++l) v += gg[i][l] * G[j][l];
          u[(i * 6 + j) * C * K + C * k0 + c * nb + (k - k0)] = static_cast<float>(v);
        }
    }
  }
}

void Winograd::run(const float* x, float* y, const float* bias, const float* res, float lo, float hi,
                   bool res_channels_last) const {
  if (res && res_channels_last && p_.K % lanes_ != 0)
    throw std::invalid_argument("Winograd::run: a channels-last residual with channels not a multiple of the lanes");
  wino::Geometry g{p_.N, p_.C, p_.H, p_.W, p_.K, p_.OH, p_.OW, p_.pad_top, p_.pad_left, tiles_h_, tiles_w_, m_};
  g.res_nhwc = res && res_channels_last;
  const int64_t T = g.N * g.th * g.tw;
  const int threads = std::max(1, omp_get_max_threads());
  const int64_t rows = lanes_ == 16 ? wino::avx512::kRows : wino::avx2::kRows;
  const wino::BlockFn block = lanes_ == 16 ? wino::avx512::block : wino::avx2::block;
  // Tiles per block: at most what keeps V and M of a block within the L2
  // budget, though at least kMinBlock (each block reads all the
  // transformed weights) rounded to the product kernel's rows; at least
  // one block per thread, and blocks in multiples of the threads
  // (resnet18's 28x28 stage at batch 1: 49 tiles in 3 blocks of 24 left
  // one thread two thirds of the work). Blocks are as even as they come,
  // a multiple of the kernel's rows where that keeps their count.
  int64_t tb_max = kL2Budget / (kAlpha * 4 * (g.C + g.K));
  tb_max = std::clamp<int64_t>(tb_max / rows * rows, ceil_div(kMinBlock, rows) * rows, 120);
  int64_t blocks = std::max<int64_t>(ceil_div(T, tb_max), std::min<int64_t>(threads, ceil_div(T, rows)));
  if (blocks > threads) blocks = ceil_div(blocks, threads) * threads;
  int64_t tbs = ceil_div(T, blocks);  // block stride (tiles)
  if (const int64_t whole = ceil_div(tbs, rows) * rows; ceil_div(T, whole) == blocks) tbs = whole;
  blocks = ceil_div(T, tbs);
  const int64_t per_thread = kAlpha * tbs * (g.C + g.K);  // floats: a multiple of 16, so every V and M is 64-byte aligned
  float* scratch = align64(scratch_, static_cast<size_t>(per_thread * threads));
  const float* u = align64(u_);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* V = scratch + per_thread * omp_get_thread_num();
    float* M = V + kAlpha * tbs * g.C;
    const int64_t t0 = blk * tbs;
    block(g, x, u, V, M, t0, std::min(tbs, T - t0), tbs, y, bias, res, lo, hi);
  }
}

int64_t Winograd::weight_gradient_bytes(const Conv2dParams& p) {
  return kAlpha * p.C * p.K * static_cast<int64_t>(sizeof(float));
}

void Winograd::backward_weights(const float* x, const float* dy, float* dw, float* db) const {
  const int64_t C = p_.C, K = p_.K, r = p_.R;
  wino::Geometry g{p_.N, C, p_.H, p_.W, K, p_.OH, p_.OW, p_.pad_top, p_.pad_left, tiles_h_, tiles_w_, m_};
  const int64_t T = g.N * g.th * g.tw;
  const int threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), T)));
  const wino::WeightGradientFn block = lanes_ == 16 ? wino::avx512::weight_gradient_block : wino::avx2::weight_gradient_block;
  // Each thread sums its own run of tiles into its own dU, in blocks whose
  // V and D stay within the L2 budget (each block reads and writes the
  // thread's dU, 36 C K floats: the larger the block, the fewer passes).
  const int64_t tbs = std::clamp<int64_t>(kL2Budget / (kAlpha * 4 * (C + K)), 8, 120);
  const int64_t dus = kAlpha * C * K, per_thread = kAlpha * tbs * (C + K) + dus;  // multiples of 16 floats
  float* scratch = align64(scratch_, static_cast<size_t>(per_thread * threads));
#pragma omp parallel num_threads(threads)
  {
    const int64_t id = omp_get_thread_num(), n = omp_get_num_threads();
    float* V = scratch + per_thread * id;
    float* D = V + kAlpha * tbs * C;
    float* du = D + kAlpha * tbs * K;
    std::fill(du, du + dus, 0.f);
    const int64_t end = T * (id + 1) / n;
    for (int64_t t0 = T * id / n; t0 < end; t0 += tbs) block(g, x, dy, V, D, t0, std::min(tbs, end - t0), tbs, du);
#pragma omp barrier
    // The threads' sums into the first one's, then dg = G^T dU G per
    // filter.
    float* du0 = scratch + kAlpha * tbs * (C + K);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < dus; i += 16)
      for (int64_t j = 1; j < n; ++j) {
        const float* o = scratch + per_thread * j + kAlpha * tbs * (C + K) + i;
        for (int l = 0; l < 16; ++l) du0[i + l] += o[l];
      }
    double G[6][5];
    weight_matrix(r, G);
#pragma omp for schedule(static)
    for (int64_t kc = 0; kc < K * C; ++kc) {
      double gu[5][6] = {};  // G^T dU
      for (int l = 0; l < r; ++l)
        for (int j = 0; j < 6; ++j)
          for (int i = 0; i < 6; ++i) gu[l][j] += G[i][l] * du0[(i * 6 + j) * K * C + kc];
      float* out = dw + kc * r * r;  // (K, C, r, r): filter k * C + c
      for (int l = 0; l < r; ++l)
        for (int m = 0; m < r; ++m) {  // (G^T dU) G
          double v = 0;
          for (int j = 0; j < 6; ++j) v += gu[l][j] * G[j][m];
          out[l * r + m] = static_cast<float>(v);
        }
    }
    if (db) {  // the bias gradient: dy summed over images and pixels, per channel block
      const int64_t KB = K / lanes_, HW = g.OH * g.OW;
#pragma omp for schedule(static)
      for (int64_t kb = 0; kb < KB; ++kb) {
        double acc[16] = {};
        for (int64_t im = 0; im < g.N; ++im) {
          float part[16] = {};
          const float* p = dy + (im * KB + kb) * HW * lanes_;
          for (int64_t px = 0; px < HW; ++px)
            for (int l = 0; l < lanes_; ++l) part[l] += p[px * lanes_ + l];
          for (int l = 0; l < lanes_; ++l) acc[l] += part[l];
        }
        for (int l = 0; l < lanes_; ++l) db[kb * lanes_ + l] = static_cast<float>(acc[l]);
      }
    }
  }
}

}  // namespace jobflow::cpu

// cpu/winograd.cpp — F(4x4, 3x3) and F(2x2, 5x5) convolutions on AVX2 (see
// winograd.h).
//
// Transforms of F(4x4, 3x3) (Lavin and Gray, "Fast Algorithms for
// Convolutional Neural Networks", 2015; interpolation points 0, +-1, +-2,
// infinity). F(2x2, 5x5) on the same points has the same B^T, the first two
// rows of A^T (with the infinity column in its last row: 0 1 -1 2 -2 1) and
// G's rows extended to five powers (set_weights()):
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
// run on a 6x16 register-blocked kernel (6 tiles x 16 output channels, the
// transformed weights of one 16-channel block for one position, C x 16
// floats, stay in L1 across the block's tiles), and the output transform
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

#include "cpu/aligned.h"

#include "cpu/simd_kernels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

namespace jobflow::cpu {

namespace {

constexpr int kAlpha = 36;  // 6x6 positions
constexpr int64_t kL2Budget = 512 * 1024;  // bytes of V and M per block
// Fewest tiles per block: each block reads all 36 C K transformed weights,
// which for 256 channels and more come from L3 (measured: 12 tiles per
// block ran resnet18's 14x14 stage at batch 1 at the direct kernel's speed,
// 18-24 at 1.4-1.6x).
constexpr int64_t kMinBlock = 24;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }


// ---------------------------------------------------------------- kernels

#define JF_AVX2 __attribute__((target("avx2,fma")))

// B^T z for six vectors (one row or column of a 6x6 input tile), as
// values: arrays of vectors made GCC copy them through memory.
#define JF_BT6(z0, z1, z2, z3, z4, z5, r0, r1, r2, r3, r4, r5)                          \
  do {                                                                                  \
    const __m256 four_ = _mm256_set1_ps(4.f), five_ = _mm256_set1_ps(5.f);             \
    const __m256 s12_ = _mm256_add_ps(z1, z2), d12_ = _mm256_sub_ps(z1, z2);            \
    const __m256 s34_ = _mm256_add_ps(z3, z4), d43_ = _mm256_sub_ps(z4, z3);            \
    const __m256 d31_ = _mm256_sub_ps(z3, z1), d42_ = _mm256_sub_ps(z4, z2);            \
    r0 = _mm256_fnmadd_ps(five_, z2, _mm256_fmadd_ps(four_, z0, z4));                   \
    r1 = _mm256_fnmadd_ps(four_, s12_, s34_);                                           \
    r2 = _mm256_fmadd_ps(four_, d12_, d43_);                                            \
    r3 = _mm256_fmadd_ps(_mm256_set1_ps(2.f), d31_, d42_);                              \
    r4 = _mm256_fnmadd_ps(_mm256_set1_ps(2.f), d31_, d42_);                             \
    r5 = _mm256_fnmadd_ps(five_, z3, _mm256_fmadd_ps(four_, z1, z5));                   \
  } while (0)

// A^T m for six vectors: four results.
#define JF_AT6(m0, m1, m2, m3, m4, m5, o0, o1, o2, o3)                                  \
  do {                                                                                  \
    const __m256 s12_ = _mm256_add_ps(m1, m2), d12_ = _mm256_sub_ps(m1, m2);            \
    const __m256 s34_ = _mm256_add_ps(m3, m4), d34_ = _mm256_sub_ps(m3, m4);            \
    o0 = _mm256_add_ps(_mm256_add_ps(m0, s12_), s34_);                                  \
    o1 = _mm256_fmadd_ps(_mm256_set1_ps(2.f), d34_, d12_);                              \
    o2 = _mm256_fmadd_ps(_mm256_set1_ps(4.f), s34_, s12_);                              \
    o3 = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.f), d34_, d12_), m5);           \
  } while (0)

// The first two rows of A^T (F(2x2, 5x5) uses the same six points, with
// infinity in its last output).
#define JF_AT2(m0, m1, m2, m3, m4, m5, o0, o1)                                          \
  do {                                                                                  \
    o0 = _mm256_add_ps(_mm256_add_ps(m0, _mm256_add_ps(m1, m2)), _mm256_add_ps(m3, m4)); \
    o1 = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(2.f), _mm256_sub_ps(m3, m4), _mm256_sub_ps(m1, m2)), m5); \
  } while (0)

// M (R x 8*NV, row stride ldm) = V (R x C, row stride C) * U (C x 8*NV).
template <int R, int NV>
JF_AVX2 void gemm_kernel(const float* v, int64_t C, const float* u, float* m, int64_t ldm) {
  __m256 acc[R][NV];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int q = 0; q < NV; ++q) acc[r][q] = _mm256_setzero_ps();
  for (int64_t c = 0; c < C; ++c) {
    __m256 w[NV];
#pragma GCC unroll 2
    for (int q = 0; q < NV; ++q) w[q] = _mm256_load_ps(u + (c * NV + q) * 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 b = _mm256_broadcast_ss(v + r * C + c);
#pragma GCC unroll 2
      for (int q = 0; q < NV; ++q) acc[r][q] = _mm256_fmadd_ps(b, w[q], acc[r][q]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int q = 0; q < NV; ++q) _mm256_storeu_ps(m + r * ldm + q * 8, acc[r][q]);
}

using GemmFn = void (*)(const float*, int64_t, const float*, float*, int64_t);
template <int NV>
constexpr GemmFn kGemm[7] = {nullptr,
                             gemm_kernel<1, NV>,
                             gemm_kernel<2, NV>,
                             gemm_kernel<3, NV>,
                             gemm_kernel<4, NV>,
                             gemm_kernel<5, NV>,
                             gemm_kernel<6, NV>};

struct Geometry {
  int64_t N, C, H, W, K, OH, OW, pt, pl, th, tw;
  int64_t m;  // output tile (4 for 3x3 weights, 2 for 5x5)
};

// V[a][i][c] for the tiles t0 .. t0 + tb - 1 (i = t - t0), row stride C,
// position stride tbs * C.
JF_AVX2 void input_transform(const Geometry& g, const float* x, int64_t t0, int64_t tb, int64_t tbs, float* V) {
  const int64_t CB = g.C / 8, per_image = g.th * g.tw, pos = tbs * g.C;
  for (int64_t i = 0; i < tb; ++i) {
    const int64_t t = t0 + i, n = t / per_image, ty = (t % per_image) / g.tw, tx = t % g.tw;
    const int64_t ih0 = ty * g.m - g.pt, iw0 = tx * g.m - g.pl;
    const bool inside = ih0 >= 0 && iw0 >= 0 && ih0 + 6 <= g.H && iw0 + 6 <= g.W;
    for (int64_t cb = 0; cb < CB; ++cb) {
      const float* plane = x + (n * CB + cb) * g.H * g.W * 8;
      // Columns (tmp = B^T d), then rows (V = tmp B).
      alignas(32) float tmp[6][6][8];
      for (int c = 0; c < 6; ++c) {
        __m256 z[6];
        const int64_t w = iw0 + c;
        for (int r = 0; r < 6; ++r) {
          const int64_t h = ih0 + r;
          z[r] = (inside || (h >= 0 && h < g.H && w >= 0 && w < g.W)) ? _mm256_loadu_ps(plane + (h * g.W + w) * 8)
                                                                       : _mm256_setzero_ps();
        }
        __m256 r0, r1, r2, r3, r4, r5;
        JF_BT6(z[0], z[1], z[2], z[3], z[4], z[5], r0, r1, r2, r3, r4, r5);
        _mm256_store_ps(tmp[0][c], r0);
        _mm256_store_ps(tmp[1][c], r1);
        _mm256_store_ps(tmp[2][c], r2);
        _mm256_store_ps(tmp[3][c], r3);
        _mm256_store_ps(tmp[4][c], r4);
        _mm256_store_ps(tmp[5][c], r5);
      }
      float* out = V + i * g.C + cb * 8;
      for (int r = 0; r < 6; ++r) {
        __m256 v0, v1, v2, v3, v4, v5;
        JF_BT6(_mm256_load_ps(tmp[r][0]), _mm256_load_ps(tmp[r][1]), _mm256_load_ps(tmp[r][2]),
               _mm256_load_ps(tmp[r][3]), _mm256_load_ps(tmp[r][4]), _mm256_load_ps(tmp[r][5]), v0, v1, v2, v3, v4, v5);
        float* o = out + r * 6 * pos;
        _mm256_store_ps(o, v0);
        _mm256_store_ps(o + pos, v1);
        _mm256_store_ps(o + 2 * pos, v2);
        _mm256_store_ps(o + 3 * pos, v3);
        _mm256_store_ps(o + 4 * pos, v4);
        _mm256_store_ps(o + 5 * pos, v5);
      }
    }
  }
}

// Y tiles (M x M) from M[a][i][k] (row stride K, position stride tbs * K),
// with bias, residual and clamp.
template <int TM>
JF_AVX2 void output_transform(const Geometry& g, const float* M, int64_t t0, int64_t tb, int64_t tbs, float* y,
                              const float* bias, const float* res, float lo, float hi) {
  const int64_t KB = g.K / 8, per_image = g.th * g.tw, pos = tbs * g.K;
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  for (int64_t i = 0; i < tb; ++i) {
    const int64_t t = t0 + i, n = t / per_image, ty = (t % per_image) / g.tw, tx = t % g.tw;
    const int64_t oh0 = ty * TM, ow0 = tx * TM;
    const int64_t rows = std::min<int64_t>(TM, g.OH - oh0), cols = std::min<int64_t>(TM, g.OW - ow0);
    for (int64_t kb = 0; kb < KB; ++kb) {
      const float* in = M + i * g.K + kb * 8;
      alignas(32) float tmp[TM][6][8];  // A^T m, per column
      for (int c = 0; c < 6; ++c) {
        const float* col = in + c * pos;
        const __m256 m0 = _mm256_load_ps(col), m1 = _mm256_load_ps(col + 6 * pos), m2 = _mm256_load_ps(col + 12 * pos);
        const __m256 m3 = _mm256_load_ps(col + 18 * pos), m4 = _mm256_load_ps(col + 24 * pos);
        const __m256 m5 = _mm256_load_ps(col + 30 * pos);
        __m256 o[TM];
        if constexpr (TM == 4) JF_AT6(m0, m1, m2, m3, m4, m5, o[0], o[1], o[2], o[3]);
        else JF_AT2(m0, m1, m2, m3, m4, m5, o[0], o[1]);
        for (int r = 0; r < TM; ++r) _mm256_store_ps(tmp[r][c], o[r]);
      }
      const __m256 b = bias ? _mm256_loadu_ps(bias + kb * 8) : _mm256_setzero_ps();
      const int64_t plane = (n * KB + kb) * g.OH * g.OW * 8;
      for (int r = 0; r < rows; ++r) {  // rows: Y = tmp A
        const __m256 m0 = _mm256_load_ps(tmp[r][0]), m1 = _mm256_load_ps(tmp[r][1]), m2 = _mm256_load_ps(tmp[r][2]);
        const __m256 m3 = _mm256_load_ps(tmp[r][3]), m4 = _mm256_load_ps(tmp[r][4]), m5 = _mm256_load_ps(tmp[r][5]);
        __m256 o[TM];
        if constexpr (TM == 4) JF_AT6(m0, m1, m2, m3, m4, m5, o[0], o[1], o[2], o[3]);
        else JF_AT2(m0, m1, m2, m3, m4, m5, o[0], o[1]);
        for (int c = 0; c < cols; ++c) {
          const int64_t off = plane + ((oh0 + r) * g.OW + ow0 + c) * 8;
          __m256 v = _mm256_add_ps(o[c], b);
          if (res) v = _mm256_add_ps(v, _mm256_loadu_ps(res + off));
          v = _mm256_min_ps(_mm256_max_ps(v, vlo), vhi);
          _mm256_storeu_ps(y + off, v);
        }
      }
    }
  }
}

}  // namespace

bool Winograd::supported() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

bool Winograd::preferred() { return own_avx2_kernels(); }

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
  return fits(p) && p.C >= 32 && p.K >= 32 && tiles >= 12;
}

Winograd::Winograd(const Conv2dParams& p) : p_(p), m_(p.R == 3 ? 4 : 2) {
  tiles_h_ = ceil_div(p.OH, m_);
  tiles_w_ = ceil_div(p.OW, m_);
}

void Winograd::set_weights(const float* w) {
  const int64_t C = p_.C, K = p_.K, r = p_.R;
  float* u = align64(u_, static_cast<size_t>(kAlpha * C * K));
  // G: row i is scale_i (1, p_i, p_i^2, ..., p_i^(r-1)) for the points 0,
  // 1, -1, 2, -2, and (0, ..., 0, 1) for infinity.
  static const double pts[5] = {0, 1, -1, 2, -2}, scale[5] = {1.0 / 4, -1.0 / 6, -1.0 / 6, 1.0 / 24, 1.0 / 24};
  double G[6][5] = {};
  for (int i = 0; i < 5; ++i) {
    double pw = 1;
    for (int j = 0; j < r; ++j, pw *= pts[i]) G[i][j] = scale[i] * pw;
  }
  G[5][r - 1] = 1;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t k0 = k / 16 * 16, nb = std::min<int64_t>(16, K - k0);
    for (int64_t c = 0; c < C; ++c) {
      const float* g = w + (k * C + c) * r * r;
      double gg[6][5] = {};  // G g
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < r; ++j)
          for (int l = 0; l < r; ++l) gg[i][j] += G[i][l] * g[l * r + j];
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) {  // (G g) G^T
          double v = 0;
          for (int l = 0; l < r; ++l) v += gg[i][l] * G[j][l];
          u[(i * 6 + j) * C * K + C * k0 + c * nb + (k - k0)] = static_cast<float>(v);
        }
    }
  }
}

void Winograd::run(const float* x, float* y, const float* bias, const float* res, float lo, float hi) const {
  const Geometry g{p_.N, p_.C, p_.H, p_.W, p_.K, p_.OH, p_.OW, p_.pad_top, p_.pad_left, tiles_h_, tiles_w_, m_};
  const int64_t T = g.N * g.th * g.tw;
  const int threads = std::max(1, omp_get_max_threads());
  // Tiles per block: V and M of a block within the L2 budget, but at least
  // kMinBlock (each block reads all the transformed weights), a multiple of
  // the kernel's 6 rows, and at least one block per thread.
  int64_t tb_max = kL2Budget / (kAlpha * 4 * (g.C + g.K));
  tb_max = std::clamp<int64_t>(tb_max / 6 * 6, kMinBlock, 120);
  int64_t blocks = std::max<int64_t>(ceil_div(T, tb_max), std::min<int64_t>(threads, ceil_div(T, 6)));
  const int64_t tbs = ceil_div(ceil_div(T, blocks), 6) * 6;  // block stride (tiles), a multiple of 6
  blocks = ceil_div(T, tbs);
  const int64_t per_thread = kAlpha * tbs * (g.C + g.K) + 16;
  float* scratch = align64(scratch_, static_cast<size_t>(per_thread * threads));
  const float* u = align64(u_);
  const int64_t C = g.C, K = g.K;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* V = scratch + per_thread * omp_get_thread_num();
    float* M = V + kAlpha * tbs * C;
    const int64_t t0 = blk * tbs, tb = std::min(tbs, T - t0);
    input_transform(g, x, t0, tb, tbs, V);
    for (int a = 0; a < kAlpha; ++a) {
      const float* va = V + a * tbs * C;
      float* ma = M + a * tbs * K;
      const float* ua = u + a * C * K;
      for (int64_t k0 = 0; k0 < K; k0 += 16) {
        const int64_t nb = std::min<int64_t>(16, K - k0);
        const float* ub = ua + C * k0;
        for (int64_t i = 0; i < tb; i += 6) {
          const int rows = static_cast<int>(std::min<int64_t>(6, tb - i));
          (nb == 16 ? kGemm<2> : kGemm<1>)[rows](va + i * C, C, ub, ma + i * K + k0, K);
        }
      }
    }
    if (g.m == 4) output_transform<4>(g, M, t0, tb, tbs, y, bias, res, lo, hi);
    else output_transform<2>(g, M, t0, tb, tbs, y, bias, res, lo, hi);
  }
}

}  // namespace jobflow::cpu

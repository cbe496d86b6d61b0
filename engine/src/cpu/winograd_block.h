// cpu/winograd_block.h — one block of output tiles of the Winograd kernel
// (cpu/winograd.h), compiled once per instruction set: winograd_avx2.cpp
// (8 lanes, activations in nChw8c) and winograd_avx512.cpp (16 lanes,
// nChw16c), each from the same source (winograd_block.inc) under its own
// `#pragma GCC target`, so neither leaks into the other.
#pragma once

#include <cstdint>

namespace jobflow::cpu::wino {

constexpr int kAlpha = 36;  // 6x6 positions

struct Geometry {
  int64_t N, C, H, W, K, OH, OW, pt, pl, th, tw;
  int64_t m;  // output tile (4 for 3x3 weights, 2 for 5x5)
  bool res_nhwc = false;  // the residual channels-last (acdb), not in y's format
};

// Tiles t0 .. t0 + tb - 1 of y = clamp(conv(x) + bias + res, lo, hi): the
// input transform into V [36][tbs][C], the 36 products M[a] = V[a] U[a]
// into M [36][tbs][K], the output transform with the epilogue into y. u:
// the transformed weights [36][K in blocks of 16][C][16] (a last block of
// 8 output channels: [C][8]; 8 lanes only). x, y in nChw<lanes>c, res too
// or channels-last (g.res_nhwc).
using BlockFn = void (*)(const Geometry& g, const float* x, const float* u, float* V, float* M, int64_t t0,
                         int64_t tb, int64_t tbs, float* y, const float* bias, const float* res, float lo, float hi);

// The weight gradient's share of tiles t0 .. t0 + tb - 1: the input
// transform into V [36][tbs][C], dy's tiles transformed by A into
// D [36][tbs][K] (dy in y's format), and du [36][K][C] += the sum over
// the tiles of D[a][t][k] V[a][t][c].
using WeightGradientFn = void (*)(const Geometry& g, const float* x, const float* dy, float* V, float* D, int64_t t0,
                                  int64_t tb, int64_t tbs, float* du);

namespace avx2 {
constexpr int kLanes = 8, kRows = 6;  // rows: tiles per matrix-product kernel call
void block(const Geometry& g, const float* x, const float* u, float* V, float* M, int64_t t0, int64_t tb, int64_t tbs,
           float* y, const float* bias, const float* res, float lo, float hi);
void weight_gradient_block(const Geometry& g, const float* x, const float* dy, float* V, float* D, int64_t t0,
                           int64_t tb, int64_t tbs, float* du);
}  // namespace avx2

namespace avx512 {
constexpr int kLanes = 16, kRows = 12;
void block(const Geometry& g, const float* x, const float* u, float* V, float* M, int64_t t0, int64_t tb, int64_t tbs,
           float* y, const float* bias, const float* res, float lo, float hi);
void weight_gradient_block(const Geometry& g, const float* x, const float* dy, float* V, float* D, int64_t t0,
                           int64_t tb, int64_t tbs, float* du);
}  // namespace avx512

}  // namespace jobflow::cpu::wino

// cpu/expand_dw.cpp — see expand_dw.h.
#include "cpu/expand_dw.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "cpu/aligned.h"
#include "cpu/avx512_math.h"
#include "cpu/simd_kernels.h"

namespace jobflow::cpu {
namespace {

constexpr int kMaxR = 5;   // depthwise window rows
constexpr int kMaxR1 = 7;  // first convolution's window rows


// The activation of one vector (a branch the predictor learns: one kind
// per call).
__attribute__((target("avx512f"))) inline __m512 activate(__m512 v, const Activation& a, __m512 lo, __m512 hi) {
  switch (a.kind) {
    case Activation::Clamp: return clamp16(v, lo, hi);
    case Activation::HardSwish: return hardswish16(v);
    case Activation::Swish: return swish16(v);
    default: return v;
  }
}

// Every pixel's sums start at the bias of its NV vectors of channels.
template <int NV, int PX>
__attribute__((target("avx512f"), always_inline)) inline void bias_init(__m512 (&acc)[PX][NV], const float* b) {
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const __m512 bv = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 8
    for (int p = 0; p < PX; ++p) acc[p][v] = bv;
  }
}

// PX pixels times NV vectors of 16 output channels of the first
// convolution: e[p][v] = act(b[v] + sum over its R1 input rows r and the
// SC = S1 x C values k of each pixel's window in that row of
// x[r][p * ps + k] * w[r * SC + k][v]). xr[r]: row r at the tile's first
// pixel's window; ps: floats between pixels (stride x C). w, b, e start at
// the tile's first channel; w and e rows are Ep floats apart. 24
// accumulators at most (6 x 4), the weights of one k in 4 more registers.
//
// The same tile serves the projection after the depthwise convolution
// (R1 = 1, the depthwise row as x): there e rows are ld floats apart (the
// output's K channels), `valid` channels of the tile exist (masked stores),
// and res (rows ld apart, or null) is added before the activation.
template <int NV, int PX>
__attribute__((target("avx512f"))) void expand_tile(const float* const* xr, int R1, int64_t SC, int64_t ps,
                                                    const float* w, int64_t Ep, const float* b, float* e, int64_t ld,
                                                    int64_t valid, const float* res, const Activation& a) {
  const __m512 lo = _mm512_set1_ps(a.lo), hi = _mm512_set1_ps(a.hi);
  __m512 acc[PX][NV];
  bias_init<NV, PX>(acc, b);
  for (int r = 0; r < R1; ++r) {
    const float* x = xr[r];
    const float* wr = w + r * SC * Ep;
    for (int64_t k = 0; k < SC; ++k) {
      __m512 wv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_ps(wr + k * Ep + 16 * v);
#pragma GCC unroll 8
      for (int p = 0; p < PX; ++p) {
        const __m512 xv = _mm512_set1_ps(x[p * ps + k]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[p][v] = _mm512_fmadd_ps(xv, wv[v], acc[p][v]);
      }
    }
  }
  __mmask16 m[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) m[v] = lanes(valid - 16 * v);
#pragma GCC unroll 8
  for (int p = 0; p < PX; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 r = acc[p][v];
      if (res) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m[v], res + p * ld + 16 * v));
      _mm512_mask_storeu_ps(e + p * ld + 16 * v, m[v], activate(r, a, lo, hi));
    }
}

// The same tile with bfloat16 inputs and weights (the bf16 kernel): pairs
// of adjacent k (two channels of a pixel, or a channel of two window
// pixels) in one AVX512_BF16 dot product, summed in float32 (vdpbf16ps:
// half the instructions of the float32 FMAs). w: pairs [R1][SCh][Ep][2]
// (SCh = SC rounded up to even / 2; w starts at the tile's first channel's
// pair); an odd SC's last k is paired with a zero, not with the next
// pixel's first value (an infinite neighbour times a zero weight would give
// NaN). Output e and residual res float32 or bfloat16 (rounded to nearest
// even, as oneDNN's bf16 kernels store).
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 load16(__mmask16 m, const T* p) {
  if constexpr (sizeof(T) == 4) {
    return _mm512_maskz_loadu_ps(m, p);
  } else {
    const __m512i w = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, w, 16));
  }
}

// acc[p][v] += the dot products of pixel p's bfloat16 pair at x + p * ps
// (Last: its one value there, paired with a zero) with the 16 channel pairs
// of vector v at w + 32 * v.
using unaligned_u32 = uint32_t __attribute__((may_alias, aligned(2)));
template <int NV, int PX, bool Last>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) inline void dot_pairs(
    __m512 (&acc)[PX][NV], const uint16_t* w, const uint16_t* x, int64_t ps) {
  __m512i wv[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_si512(w + 32 * v);
#pragma GCC unroll 8
  for (int p = 0; p < PX; ++p) {
    uint32_t two;
    if constexpr (Last)
      two = x[p * ps];
    else
      two = *reinterpret_cast<const unaligned_u32*>(x + p * ps);
    const __m512i xv = _mm512_set1_epi32(static_cast<int>(two));
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[p][v] = _mm512_dpbf16_ps(acc[p][v], (__m512bh)xv, (__m512bh)wv[v]);
  }
}

template <int NV, int PX, typename OT, typename RT>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void expand_tile_bf16(
    const uint16_t* const* xr, int R1, int64_t SC, int64_t ps, const uint16_t* w, int64_t Ep, const float* b, OT* e,
    int64_t ld, int64_t valid, const RT* res, const Activation& a) {
  const __m512 lo = _mm512_set1_ps(a.lo), hi = _mm512_set1_ps(a.hi);
  const int64_t SCh = (SC + 1) / 2;
  __m512 acc[PX][NV];
  bias_init<NV, PX>(acc, b);
  for (int r = 0; r < R1; ++r) {
    const uint16_t* x = xr[r];
    const uint16_t* wr = w + r * SCh * Ep * 2;
    // Pairs, each pixel's broadcast straight from memory (vpbroadcastd
    // with a memory operand: a load, no trip through a general register),
    // then an odd SC's last value with a zero.
    for (int64_t k = 0; k < SC / 2; ++k) dot_pairs<NV, PX, false>(acc, wr + k * Ep * 2, x + 2 * k, ps);
    if (SC % 2) dot_pairs<NV, PX, true>(acc, wr + (SC / 2) * Ep * 2, x + SC - 1, ps);
  }
  __mmask16 m[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) m[v] = lanes(valid - 16 * v);
#pragma GCC unroll 8
  for (int p = 0; p < PX; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 r = acc[p][v];
      if (res) r = _mm512_add_ps(r, load16(m[v], res + p * ld + 16 * v));
      r = activate(r, a, lo, hi);
      if constexpr (sizeof(OT) == 4)
        _mm512_mask_storeu_ps(e + p * ld + 16 * v, m[v], r);
      else
        _mm256_mask_storeu_epi16(e + p * ld + 16 * v, m[v], (__m256i)_mm512_cvtneps_pbh(r));
    }
}

// A tile function: float32 (expand_tile) or bfloat16 (expand_tile_bf16)
// inputs XT and weights, output OT, residual RT.
template <typename XT, typename OT, typename RT>
using Tile = void (*)(const XT* const*, int, int64_t, int64_t, const XT*, int64_t, const float*, OT*, int64_t, int64_t,
                      const RT*, const Activation&);

// Pixels per tile: 6 with 4 vectors (24 sums), 8 with 3 or fewer.
template <int NV>
constexpr int kPx = NV == 4 ? 6 : 8;

template <int NV, int PX, typename XT, typename OT, typename RT>
constexpr Tile<XT, OT, RT> tile_of() {
  if constexpr (sizeof(XT) == 4)
    return expand_tile<NV, PX>;
  else
    return expand_tile_bf16<NV, PX, OT, RT>;
}

template <int NV, typename XT, typename OT, typename RT>
constexpr Tile<XT, OT, RT> tile_for(int px) {
  switch (px) {
    case 1: return tile_of<NV, 1, XT, OT, RT>();
    case 2: return tile_of<NV, 2, XT, OT, RT>();
    case 3: return tile_of<NV, 3, XT, OT, RT>();
    case 4: return tile_of<NV, 4, XT, OT, RT>();
    case 5: return tile_of<NV, 5, XT, OT, RT>();
    case 6: return tile_of<NV, 6, XT, OT, RT>();
    case 7: return tile_of<NV, kPx<NV> >= 7 ? 7 : 6, XT, OT, RT>();
    default: return tile_of<NV, kPx<NV>, XT, OT, RT>();
  }
}

template <typename XT, typename OT, typename RT>
Tile<XT, OT, RT> tile(int nv, int px) {
  switch (nv) {
    case 1: return tile_for<1, XT, OT, RT>(px);
    case 2: return tile_for<2, XT, OT, RT>(px);
    case 3: return tile_for<3, XT, OT, RT>(px);
    default: return tile_for<4, XT, OT, RT>(px);
  }
}

int px_of(int nv) { return nv == 4 ? kPx<4> : kPx<3>; }

// One output row of the first convolution (W1 pixels) into channels
// [e0, e1) of one kept row (pixels Ep floats apart), from its R1 input
// rows xr (padded: every window inside). Channel tiles outside, pixels
// inside: a tile's weights (R1 x SC x 64 floats) stay in L1 while the
// row's pixels pass.
//
// For the projection: e (and res, or null) rows ld floats apart, channels
// from K on not written (ld = Ep, K = e1 for the expansion).
//
// XT: float32 inputs and weights, or bfloat16 ones (weights as pairs, see
// expand_tile_bf16); OT, RT: the output's and the residual's types.
template <typename XT, typename OT, typename RT>
void expand_row(const XT* const* xr, int R1, int64_t SC, int64_t ps, int64_t W1, const XT* w, const float* b,
                int64_t Ep, int64_t e0, int64_t e1, OT* e, int64_t ld, int64_t K, const RT* res, const Activation& a) {
  constexpr int64_t per = sizeof(XT) == 4 ? 1 : 2;  // weight values per channel and k (a bf16 pair)
  // Channel tiles of at most 4 vectors, as even as they come (144
  // channels: 3 x 48, not 64 + 64 + 16).
  const int64_t vecs = (e1 - e0) / 16, tiles = (vecs + 3) / 4;
  const XT* at[kMaxR1];
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t v0 = vecs * t / tiles, v1 = vecs * (t + 1) / tiles;
    const int nv = static_cast<int>(v1 - v0);
    const int64_t n0 = e0 + 16 * v0;
    // Pixel tiles as even as they come (7 pixels: 3 + 4, not 6 + 1: a
    // 1-pixel tile loads 4 weight vectors per 4 FMAs).
    const int64_t ptiles = (W1 + px_of(nv) - 1) / px_of(nv);
    for (int64_t t = 0; t < ptiles; ++t) {
      const int64_t ix = W1 * t / ptiles;
      const int px = static_cast<int>(W1 * (t + 1) / ptiles - ix);  // <= px_of(nv): tile() has that tile
      for (int r = 0; r < R1; ++r) at[r] = xr[r] + ix * ps;
      tile<XT, OT, RT>(nv, px)(at, R1, SC, ps, w + n0 * per, Ep, b + n0, e + ix * ld + n0, ld, K - n0,
                               res ? res + ix * ld + n0 : nullptr, a);
    }
  }
}

// 16 values stored in the lanes of m: float32 as they are, or rounded to
// bfloat16 with AVX512F alone as vcvtneps2bf16 rounds (nearest even, a NaN
// stays a quiet NaN, a denormal becomes zero), so that one depthwise
// template serves both kernels.
__attribute__((target("avx512f"))) inline void store16(float* p, __mmask16 m, __m512 v) {
  _mm512_mask_storeu_ps(p, m, v);
}
__attribute__((target("avx512f"))) inline void store16(uint16_t* p, __mmask16 m, __m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i high = _mm512_maskz_srli_epi32(0xFFFF, u, 16);
  const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
  __m512i r = _mm512_maskz_srli_epi32(0xFFFF, _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, high, _mm512_set1_epi32(0x40));
  // A denormal becomes a signed zero, as vcvtneps2bf16 makes it.
  const __mmask16 tiny = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7F800000));
  r = _mm512_mask_and_epi32(r, tiny, high, _mm512_set1_epi32(0x8000));
  _mm512_mask_cvtepi32_storeu_epi16(p, m, r);
}

// B output pixels of one row and 16 channels (c0): B independent sums hide
// the FMA latency, each input vector of a row is loaded once for every
// pixel and tap that reads it. rows[r]: the expanded input row of tap r
// at the first pixel's window (null: a row of padding); pixels SW apart.
// Sum: the outputs (after the activation, before any rounding to
// bfloat16) are added to *sum, pixel by pixel.
template <int R, int B, int SW, typename OT, bool Sum>
__attribute__((target("avx512f"))) inline void dw_pixels(const float* const* rows, int64_t Ep, int64_t c0,
                                                         const __m512* wt, __m512 bv, OT* y, int64_t E, __mmask16 m,
                                                         const Activation& a, __m512 l, __m512 h, __m512* sum) {
  __m512 acc[B];
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j) acc[j] = bv;
#pragma GCC unroll 5
  for (int r = 0; r < R; ++r) {
    if (!rows[r]) continue;
    const float* rp = rows[r] + c0;
    __m512 in[(B - 1) * SW + R];
#pragma GCC unroll 20
    for (int i = 0; i < (B - 1) * SW + R; ++i) {
      in[i] = _mm512_load_ps(rp + i * Ep);
      // Kept in a register: GCC would fold the load into each FMA that
      // reads it (three loads per vector at stride 1, where the load ports
      // bound the loop: 1.45 -> 1.08 us per 56-pixel, 144-channel row).
      asm("" : "+v"(in[i]));
    }
#pragma GCC unroll 5
    for (int s = 0; s < R; ++s)
#pragma GCC unroll 8
      for (int j = 0; j < B; ++j) acc[j] = _mm512_fmadd_ps(in[j * SW + s], wt[r * R + s], acc[j]);
  }
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j) {
    const __m512 v = activate(acc[j], a, l, h);
    if constexpr (Sum) *sum = _mm512_add_ps(*sum, v);
    store16(y + j * E + c0, m, v);
  }
}

// max(acc, v) where a NaN is the maximum (as max_pool2d has it: a NaN in
// the window is the output). max_ps gives its second operand when either
// is NaN: a NaN kept stays; a NaN read is taken by the mask.
__attribute__((target("avx512f"))) inline __m512 max_nan(__m512 acc, __m512 v) {
  return _mm512_mask_mov_ps(_mm512_maskz_max_ps(0xFFFF, v, acc), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}

// B output pixels of a max pool over the kept rows (ExpandDepthwise's
// max_pool): the maximum of each window's taps, rows of padding (null)
// left out, the zero pixels of the rows' padding in (the pool's -infinity
// where the first stage is never negative: fits_max_pool).
template <int R, int B, int SW, typename OT>
__attribute__((target("avx512f"))) inline void max_pixels(const float* const* rows, int64_t Ep, int64_t c0, OT* y,
                                                          int64_t E, __mmask16 m) {
  __m512 acc[B];
  bool first = true;
#pragma GCC unroll 5
  for (int r = 0; r < R; ++r) {
    if (!rows[r]) continue;
    const float* rp = rows[r] + c0;
#pragma GCC unroll 8
    for (int j = 0; j < B; ++j) {
      __m512 v = _mm512_load_ps(rp + j * SW * Ep);
#pragma GCC unroll 5
      for (int s = 1; s < R; ++s) v = max_nan(v, _mm512_load_ps(rp + (j * SW + s) * Ep));
      acc[j] = first ? v : max_nan(acc[j], v);
    }
    first = false;
  }
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j) store16(y + j * E + c0, m, acc[j]);
}

// B output pixels of the second stage: the depthwise convolution, or with
// Max the max pool.
template <int R, int B, int SW, typename OT, bool Sum, bool Max>
__attribute__((target("avx512f"))) inline void stage_pixels(const float* const* rows, int64_t Ep, int64_t c0,
                                                            const __m512* wt, __m512 bv, OT* y, int64_t E,
                                                            __mmask16 m, const Activation& a, __m512 l, __m512 h,
                                                            __m512* sum) {
  if constexpr (Max)
    max_pixels<R, B, SW, OT>(rows, Ep, c0, y, E, m);
  else
    dw_pixels<R, B, SW, OT, Sum>(rows, Ep, c0, wt, bv, y, E, m, a, l, h, sum);
}

// One output row of the depthwise convolution, channels [e0, e1), from the
// R expanded rows it reads (null: a row of padding), each with its left
// and right padding as zero pixels: every window lies inside its rows.
// Taps in the order r, then s, at every pixel.
// OT: float32 or bfloat16 output. rsum (or null): each channel's sum over
// the row's pixels, left to right, into rsum[e0, e1). Max: a row of the
// max pool instead (w, b, a unused; no sums).
template <int R, int B, int SW, typename OT, bool Sum, bool Max = false>
__attribute__((target("avx512f"))) void dw_row_as(const float* const* rows, int64_t Ep, int64_t e0, int64_t e1,
                                                  int64_t E, int64_t OW, const float* w, const float* b, OT* y,
                                                  const Activation& a, float* rsum) {
  static_assert(!(Sum && Max), "no channel sums of a max pool");
  const __m512 l = _mm512_set1_ps(a.lo), h = _mm512_set1_ps(a.hi);
  for (int64_t c0 = e0; c0 < e1; c0 += 16) {
    const __mmask16 m = lanes(E - c0);
    __m512 sum = _mm512_setzero_ps();
    __m512 wt[R * R];
    __m512 bv = _mm512_setzero_ps();
    if constexpr (!Max) {
#pragma GCC unroll 25
      for (int t = 0; t < R * R; ++t) wt[t] = _mm512_load_ps(w + t * Ep + c0);
      bv = _mm512_load_ps(b + c0);
    }
    const float* at[R];
    int64_t ox = 0;
    auto step = [&](int64_t px) {
      for (int r = 0; r < R; ++r) at[r] = rows[r] ? rows[r] + ox * SW * Ep : nullptr;
      ox += px;
    };
    while (ox + B <= OW) {
      OT* yo = y + ox * E;
      step(B);
      stage_pixels<R, B, SW, OT, Sum, Max>(at, Ep, c0, wt, bv, yo, E, m, a, l, h, &sum);
    }
    if (ox + B / 2 <= OW && B / 2 >= 1) {
      OT* yo = y + ox * E;
      step(B / 2);
      stage_pixels<R, (B / 2 > 0 ? B / 2 : 1), SW, OT, Sum, Max>(at, Ep, c0, wt, bv, yo, E, m, a, l, h, &sum);
    }
    while (ox < OW) {
      OT* yo = y + ox * E;
      step(1);
      stage_pixels<R, 1, SW, OT, Sum, Max>(at, Ep, c0, wt, bv, yo, E, m, a, l, h, &sum);
    }
    if constexpr (Sum) _mm512_store_ps(rsum + c0, sum);
  }
}

// One output row of the max pool (dw_row's form; w, b, a and rsum unused).
template <int R, int B, int SW, typename OT>
__attribute__((target("avx512f"))) void max_row(const float* const* rows, int64_t Ep, int64_t e0, int64_t e1,
                                                int64_t E, int64_t OW, const float* w, const float* b, OT* y,
                                                const Activation& a, float*) {
  dw_row_as<R, B, SW, OT, false, true>(rows, Ep, e0, e1, E, OW, w, b, y, a, nullptr);
}

// dw_row_as, with the row's sums or without.
template <int R, int B, int SW, typename OT>
__attribute__((target("avx512f"))) void dw_row(const float* const* rows, int64_t Ep, int64_t e0, int64_t e1,
                                               int64_t E, int64_t OW, const float* w, const float* b, OT* y,
                                               const Activation& a, float* rsum) {
  if (rsum)
    dw_row_as<R, B, SW, OT, true>(rows, Ep, e0, e1, E, OW, w, b, y, a, rsum);
  else
    dw_row_as<R, B, SW, OT, false>(rows, Ep, e0, e1, E, OW, w, b, y, a, nullptr);
}

}  // namespace

bool ExpandDepthwise::supported() { return own_avx512_kernels(); }

bool ExpandDepthwise::supports_bf16() {
  return supported() && own_bf16_kernels();
}

bool ExpandDepthwise::fits(const Conv2dParams& p, const Conv2dParams& dw) {
  if (p.R != p.S || p.R < 1 || p.R > kMaxR1 || p.stride_h != p.stride_w || p.stride_h < 1 || p.stride_h > 2 ||
      p.groups != 1 || p.dil_h != 1 || p.dil_w != 1 || p.OH <= 0 || p.OW <= 0)
    return false;
  for (int64_t pad : {p.pad_top, p.pad_left, p.pad_bottom, p.pad_right})
    if (pad < 0 || pad >= p.R) return false;
  // (Every window inside the padded input: C++'s division truncates
  // toward zero, so a too-small input would still give one output row.)
  if (p.H + p.pad_top + p.pad_bottom < p.R || p.W + p.pad_left + p.pad_right < p.S ||
      p.OH != (p.H + p.pad_top + p.pad_bottom - p.R) / p.stride_h + 1 ||
      p.OW != (p.W + p.pad_left + p.pad_right - p.S) / p.stride_w + 1)
    return false;
  if (dw.groups != dw.C || dw.K != dw.C || dw.C != p.K || dw.N != p.N || dw.H != p.OH || dw.W != p.OW)
    return false;
  if (dw.R != dw.S || (dw.R != 3 && dw.R != 5) || dw.stride_h != dw.stride_w || dw.stride_h < 1 || dw.stride_h > 2 ||
      dw.dil_h != 1 || dw.dil_w != 1)
    return false;
  for (int64_t pad : {dw.pad_top, dw.pad_left, dw.pad_bottom, dw.pad_right})
    if (pad < 0 || pad >= dw.R) return false;
  return dw.H + dw.pad_top + dw.pad_bottom >= dw.R && dw.W + dw.pad_left + dw.pad_right >= dw.S &&
         dw.OH == (dw.H + dw.pad_top + dw.pad_bottom - dw.R) / dw.stride_h + 1 &&
         dw.OW == (dw.W + dw.pad_left + dw.pad_right - dw.S) / dw.stride_w + 1 && dw.OH > 0 && dw.OW > 0;
}

bool ExpandDepthwise::fits_max_pool(const Conv2dParams& p, const Conv2dParams& pool, const Activation& a1) {
  // (Both bounds: a clip whose max is below its min gives the max.)
  return fits(p, pool) && a1.kind == Activation::Clamp && a1.lo >= 0.f && a1.hi >= 0.f;
}

size_t ExpandDepthwise::ring_bytes(const Conv2dParams& p, const Conv2dParams& dw) {
  const int64_t Wp = std::max(dw.pad_left + p.OW, (dw.OW - 1) * dw.stride_w + dw.R);
  return static_cast<size_t>(dw.R * Wp * ((p.K + 15) / 16 * 16)) * sizeof(float);
}

bool ExpandDepthwise::fits_projection(const Conv2dParams& dw, const Conv2dParams& pw) {
  return pw.R == 1 && pw.S == 1 && pw.stride_h == 1 && pw.stride_w == 1 && pw.groups == 1 && pw.dil_h == 1 &&
         pw.dil_w == 1 && !pw.pad_top && !pw.pad_left && !pw.pad_bottom && !pw.pad_right && pw.N == dw.N &&
         pw.C == dw.K && pw.H == dw.OH && pw.W == dw.OW && pw.OH == dw.OH && pw.OW == dw.OW && pw.K > 0;
}

bool ExpandDepthwise::fits_expanded_residual(const Conv2dParams& p, const Conv2dParams& dw, const Conv2dParams& pw) {
  return fits(p, dw) && fits_projection(dw, pw) && dw.stride_h == 1 && dw.stride_w == 1 && dw.OH == p.OH &&
         dw.OW == p.OW && pw.K == p.K && p.K % 16 == 0;
}

ExpandDepthwise::ExpandDepthwise(const Conv2dParams& p, const Conv2dParams& dw, Activation a1, Activation a2,
                                 const Conv2dParams* pw, Activation a3, bool add_expanded, bool bf16,
                                 bool max_pool)
    : p_(p), dw_(dw), Ep_((p.K + 15) / 16 * 16), a1_(a1), a2_(a2), projects_(pw != nullptr), a3_(a3),
      add_expanded_(add_expanded), max_pool_(max_pool), bf16_(bf16) {
  if (max_pool && (pw || a2.kind != Activation::None || !fits_max_pool(p, dw, a1)))
    throw std::invalid_argument(
        "ExpandDepthwise: a max pool after a first stage that can go below zero, with an activation or a projection");
  if (bf16 && !supports_bf16()) throw std::invalid_argument("ExpandDepthwise: bfloat16 on a CPU without AVX512_BF16");
  if (!fits(p, dw)) throw std::invalid_argument("ExpandDepthwise: shapes it does not compute");
  if (pw) {
    if (!fits_projection(dw, *pw)) throw std::invalid_argument("ExpandDepthwise: a projection it does not compute");
    pw_ = *pw;
    Kp_ = (pw->K + 15) / 16 * 16;
  }
  if (add_expanded && !(pw && fits_expanded_residual(p, dw, *pw)))
    throw std::invalid_argument("ExpandDepthwise: the first convolution's output as a residual it cannot add");
}

bool ExpandDepthwise::padded_input() const {
  return p_.R > 1 || p_.pad_top || p_.pad_left || p_.pad_bottom || p_.pad_right;
}

void ExpandDepthwise::input_dims(int64_t* h, int64_t* w) const {
  *h = p_.pad_top + p_.H + p_.pad_bottom;
  *w = p_.pad_left + p_.W + p_.pad_right;
}

void ExpandDepthwise::set_weights(const float* w1, const float* b1, const float* w2, const float* b2,
                                  const float* w3, const float* b3) {
  const int64_t C = p_.C, E = p_.K, RS1 = p_.R * p_.S, K1 = RS1 * C, RS = dw_.R * dw_.S;
  if (projects_ && !w3) throw std::invalid_argument("ExpandDepthwise::set_weights: the projection's weights are missing");
  if (!max_pool_ && !w2) throw std::invalid_argument("ExpandDepthwise::set_weights: the depthwise weights are missing");
  // One buffer, each part on 64-byte lines: [R1][S1][C][Ep], [Ep],
  // [R*S][Ep], [Ep], then the projection's [Ep][Kp] (rows from E on and
  // columns from K on zero), [Kp].
  packed_.clear();
  float* w1p = align64(packed_, static_cast<size_t>((K1 + RS + 2) * Ep_ + (Ep_ + 1) * Kp_));
  float* b1p = w1p + K1 * Ep_;
  float* w2p = b1p + Ep_;
  float* b2p = w2p + RS * Ep_;
  if (projects_) {
    float* w3p = b2p + Ep_;
    float* b3p = w3p + Ep_ * Kp_;
    for (int64_t k = 0; k < pw_.K; ++k) {
      for (int64_t e = 0; e < E; ++e) w3p[e * Kp_ + k] = w3[k * E + e];
      if (b3) b3p[k] = b3[k];
    }
  }
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < RS1; ++t) w1p[(t * C + c) * Ep_ + e] = w1[(e * C + c) * RS1 + t];
    for (int64_t t = 0; w2 && t < RS; ++t) w2p[t * Ep_ + e] = w2[e * RS + t];
    if (b1) b1p[e] = b1[e];
    if (b2) b2p[e] = b2[e];
  }
  if (!bf16_) return;
  // bfloat16 pairs (expand_tile_bf16) of the float32 packing above: the
  // first convolution's [R1][SCh][Ep][2] (SC = S1 x C values k of a window
  // row, SCh = (SC + 1) / 2 pairs, an odd SC's last pair with a zero), the
  // projection's [Ep / 2][Kp][2]: laid out in float32, then rounded in
  // one pass (cpu::floats_to_bf16, vcvtneps2bf16 as the tiles store).
  const int64_t R1 = p_.R, SC = p_.S * C, SCh = (SC + 1) / 2;
  const size_t n1 = static_cast<size_t>(R1 * SCh * Ep_ * 2), n3 = static_cast<size_t>(projects_ ? Ep_ * Kp_ : 0);
  std::vector<float> laid(n1 + n3, 0.f);
  for (int64_t r = 0; r < R1; ++r)
    for (int64_t k = 0; k < SC; ++k)
      for (int64_t e = 0; e < Ep_; ++e) laid[((r * SCh + k / 2) * Ep_ + e) * 2 + k % 2] = w1p[(r * SC + k) * Ep_ + e];
  const float* w3p = b2p + Ep_;
  for (int64_t e = 0; projects_ && e < Ep_; ++e)
    for (int64_t k = 0; k < Kp_; ++k) laid[n1 + ((e / 2) * Kp_ + k) * 2 + e % 2] = w3p[e * Kp_ + k];
  pairs_.clear();
  floats_to_bf16(laid.data(), static_cast<int64_t>(laid.size()),
                 reinterpret_cast<uint16_t*>(align64(pairs_, (laid.size() + 1) / 2)));
}

void ExpandDepthwise::run(const float* x, float* y, const float* res, float* means) const {
  if (bf16_) throw std::invalid_argument("ExpandDepthwise::run: float32 data for the bfloat16 kernel");
  run_as(x, y, res, means);
}

void ExpandDepthwise::run(const uint16_t* x, uint16_t* y, const uint16_t* res, float* means) const {
  if (!bf16_) throw std::invalid_argument("ExpandDepthwise::run: bfloat16 data for the float32 kernel");
  run_as(x, y, res, means);
}

void ExpandDepthwise::run(const uint16_t* x, float* y, const float* res, float* means) const {
  if (!bf16_) throw std::invalid_argument("ExpandDepthwise::run: bfloat16 data for the float32 kernel");
  run_as(x, y, res, means);
}

template <typename XT, typename YT>
void ExpandDepthwise::run_as(const XT* x, YT* y, const YT* res, float* means) const {
  if (res && !projects_) throw std::invalid_argument("ExpandDepthwise::run: a residual without a projection");
  if (means && projects_)
    throw std::invalid_argument("ExpandDepthwise::run: channel means of a depthwise output the projection reads");
  if (means && max_pool_) throw std::invalid_argument("ExpandDepthwise::run: channel means of a max pool");
  if (res && add_expanded_)
    throw std::invalid_argument("ExpandDepthwise::run: a residual where the first convolution's output is added");
  if (projects_ && (static_cast<const void*>(res) == y || static_cast<const void*>(x) == y))
    throw std::invalid_argument("ExpandDepthwise::run: the output in place of the input or the residual");
  // The first convolution's output (the depthwise input) is H x W here;
  // its input, x, is Hx x Wx (padded when padded_input()).
  const int64_t N = p_.N, C = p_.C, H = p_.OH, W = p_.OW, E = p_.K, Ep = Ep_;
  const int64_t R1 = p_.R, s1 = p_.stride_h, SC = p_.S * C, ps = s1 * C;
  int64_t Hx, Wx;
  input_dims(&Hx, &Wx);
  const int64_t R = dw_.R, sh = dw_.stride_h, sw = dw_.stride_w, pt = dw_.pad_top, OH = dw_.OH, OW = dw_.OW;
  // Expanded rows with their left padding (pl) and the right padding the
  // last window reaches (at most pad_right).
  const int64_t pl = dw_.pad_left, Wp = std::max(pl + W, (OW - 1) * sw + R);
  // Work items: images, each cut into `parts` when there are fewer images
  // than threads: into bands of output rows (each band recomputes the R -
  // stride expanded rows it shares with the band above) or into groups
  // of channels (multiples of 16: a depthwise convolution's channels are
  // independent, so a group expands only its own and nothing is computed
  // twice, but the groups may be uneven).
  const int64_t threads = omp_get_max_threads();
  const int64_t vecs = Ep / 16;
  const int64_t parts = std::max<int64_t>(1, (threads + N - 1) / N);
  // Bands where the busiest thread's share is within 25% of an even one
  // (the tallest band's expanded rows, halo included, against H / parts),
  // or anyway less than with groups (the widest group's vectors against
  // vecs / parts; 144 channels in 2 groups: 5 against 4.5). Bands keep
  // each thread on its own rows of x and y: with groups both threads read
  // all of x and write every pixel, and choosing by the estimate alone
  // made mobilenet_v2 and ssdlite320 at batch 1 5-8% slower (their
  // 112x112 to 40x40 layers went to groups).
  const double band_load = static_cast<double>(std::min(H, ((OH + parts - 1) / parts - 1) * sh + R)) * parts / H;
  const double group_load = static_cast<double>((vecs + parts - 1) / parts) * parts / vecs;
  // With a projection every thread needs all channels of a depthwise row:
  // bands (fuses_projection() takes tall images only).
  const bool by_rows = parts > 1 && (projects_ || band_load <= 1.25 || band_load < group_load);
  const int64_t bands = by_rows ? parts : 1, groups = by_rows ? 1 : std::min(parts, vecs);
  const int64_t items = N * bands * groups;
  if (packed_.empty()) throw std::logic_error("ExpandDepthwise::run before set_weights");
  const float* w1 = align64(packed_);
  const float* b1 = w1 + R1 * SC * Ep;
  const float* w2 = b1 + Ep;
  const float* b2 = w2 + R * dw_.S * Ep;
  // (The depthwise row goes to the projection as XT, or is y.)
  const auto dw = max_pool_ ? (R == 3 ? (sw == 1 ? max_row<3, 8, 1, YT> : max_row<3, 8, 2, YT>)
                                      : (sw == 1 ? max_row<5, 4, 1, YT> : max_row<5, 4, 2, YT>))
                 : R == 3 ? (sw == 1 ? dw_row<3, 8, 1, YT> : dw_row<3, 6, 2, YT>)
                          : (sw == 1 ? dw_row<5, 4, 1, YT> : dw_row<5, 4, 2, YT>);
  const auto dw_in = R == 3 ? (sw == 1 ? dw_row<3, 8, 1, XT> : dw_row<3, 6, 2, XT>)
                            : (sw == 1 ? dw_row<5, 4, 1, XT> : dw_row<5, 4, 2, XT>);
  const float* w3 = b2 + Ep;
  const float* b3 = w3 + Ep * Kp_;
  // The first and last convolutions' weights as the tiles read them: the
  // float32 ones, or bfloat16 pairs (set_weights).
  const XT *w1x, *w3x;
  if constexpr (sizeof(XT) == 4) {
    w1x = w1, w3x = w3;
  } else {
    w1x = reinterpret_cast<const uint16_t*>(align64(pairs_));
    w3x = w1x + R1 * ((SC + 1) / 2) * Ep * 2;
  }
  const int64_t K3 = pw_.K;
  // With means: each depthwise output row's channel sums, [N][OH][Ep],
  // added up row after row below (the same order at any thread count).
  // (Per calling thread, kept: every entry is written before it is read.)
  thread_local std::vector<float> sums_buf;
  float* row_sums = means ? align64(sums_buf, static_cast<size_t>(N * OH * Ep)) : nullptr;
#pragma omp parallel for schedule(static)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t n = it / (bands * groups), band = it / groups % bands, g = it % groups;
    const int64_t e0 = 16 * (vecs * g / groups), e1 = 16 * (vecs * (g + 1) / groups);
    const int64_t oy0 = OH * band / bands, oy1 = OH * (band + 1) / bands;
    // Rows on 64-byte lines (every vector load and store within one
    // line), each with its padding as zero pixels on both sides.
    thread_local std::vector<float> ring_buf;
    float* ring = align64(ring_buf, static_cast<size_t>(R * Wp * Ep + (projects_ ? OW * Ep : 0)));
    // With a projection, the depthwise row (all Ep channels: the padding
    // ones come out 0, their projection weights are 0 too) goes here, then
    // through the projection into y.
    XT* drow = reinterpret_cast<XT*>(ring + R * Wp * Ep);
    // With groups (small images at batch 1), chunks of at most 64 channels
    // (as even as they come), each through every row of the item: a
    // chunk's first-stage weights (up to 7 x 7 x C x 64 floats; 40 KB for
    // a 160-channel 1x1) stay in cache for all its rows, where whole-width
    // rows re-read all of them (614 KB for mobilenet_v2's 160 -> 960
    // expansion) for every 7-pixel row. Otherwise (bands, whole images)
    // one chunk: x's rows would come from memory once per chunk
    // (ssdlite320 and mobilenet_v2 at batch 1 were 3-5% slower with chunks
    // everywhere).
    const int64_t gvecs = (e1 - e0) / 16, chunks = groups > 1 ? (gvecs + 3) / 4 : 1;
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t c0 = e0 + 16 * (gvecs * ch / chunks), c1 = e0 + 16 * (gvecs * (ch + 1) / chunks);
      int64_t held[kMaxR];  // the input row each ring slot holds (-1: none)
      std::fill(held, held + kMaxR, -1);
      const float* rows[kMaxR];
      for (int64_t oy = oy0; oy < oy1; ++oy) {
        for (int64_t r = 0; r < R; ++r) {
          const int64_t iy = oy * sh - pt + r;
          if (iy < 0 || iy >= H) {
            rows[r] = nullptr;
            continue;
          }
          // R consecutive rows fall in R different slots.
          const int64_t slot = iy % R;
          float* e = ring + slot * Wp * Ep;
          if (held[slot] != iy) {
            for (int64_t ix = 0; ix < pl; ++ix) std::fill(e + ix * Ep + c0, e + ix * Ep + c1, 0.f);
            for (int64_t ix = pl + W; ix < Wp; ++ix) std::fill(e + ix * Ep + c0, e + ix * Ep + c1, 0.f);
            const XT* xr[kMaxR1];
            for (int64_t q = 0; q < R1; ++q) xr[q] = x + ((n * Hx + iy * s1 + q) * Wx) * C;
            expand_row<XT, float, float>(xr, static_cast<int>(R1), SC, ps, W, w1x, b1, Ep, c0, c1, e + pl * Ep, Ep, c1,
                                         nullptr, a1_);
            held[slot] = iy;
          }
          rows[r] = e;
        }
        if (!projects_) {
          dw(rows, Ep, c0, c1, E, OW, w2, b2, y + (n * OH + oy) * OW * E, a2_,
             row_sums ? row_sums + (n * OH + oy) * Ep : nullptr);
          continue;
        }
        dw_in(rows, Ep, 0, Ep, Ep, OW, w2, b2, drow, a2_, nullptr);
        const XT* in[1] = {drow};
        const int64_t at = (n * OH + oy) * OW * K3;
        // Over the E real channels only: a padding channel holds act(0)
        // times zero weights, but from an infinite input NaN, which its zero
        // projection weight would carry into every output channel.
        // With add_expanded the residual is expanded row oy (the depthwise
        // convolution keeps the size, so its taps read that row): its
        // pixels are Ep = K3 floats apart, as pw's output's.
        if (add_expanded_)
          expand_row<XT, YT, float>(in, 1, E, Ep, OW, w3x, b3, Kp_, 0, Kp_, y + at, K3, K3,
                                    ring + (oy % R) * Wp * Ep + pl * Ep, a3_);
        else
          expand_row<XT, YT, YT>(in, 1, E, Ep, OW, w3x, b3, Kp_, 0, Kp_, y + at, K3, K3, res ? res + at : nullptr, a3_);
      }
    }
  }
  if (means) {
    const float count = static_cast<float>(OH * OW);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t e = 0; e < E; ++e) {
        float sum = 0.f;
        for (int64_t oy = 0; oy < OH; ++oy) sum += row_sums[(n * OH + oy) * Ep + e];
        means[n * E + e] = sum / count;
      }
  }
}

}  // namespace jobflow::cpu

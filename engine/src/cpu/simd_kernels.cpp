// cpu/simd_kernels.cpp — see simd_kernels.h.
#include "cpu/simd_kernels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "cpu/avx512_math.h"
#include "cpu/isa.h"

namespace jobflow::cpu {

bool own_avx512_kernels() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

bool own_avx2_kernels() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && avx2_at_most();
  return ok;
}

namespace {

__attribute__((target("avx2,fma"))) void swish_span(float* y, int64_t n) {
  const __m256 log2e = _mm256_set1_ps(1.44269504f), ln2 = _mm256_set1_ps(0.693147181f);
  const __m256 one = _mm256_set1_ps(1.f), lo = _mm256_set1_ps(-87.f), hi = _mm256_set1_ps(87.f);
  const __m256 c2 = _mm256_set1_ps(1.f / 2), c3 = _mm256_set1_ps(1.f / 6), c4 = _mm256_set1_ps(1.f / 24);
  const __m256 c5 = _mm256_set1_ps(1.f / 120), c6 = _mm256_set1_ps(1.f / 720);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(y + i);
    // e = exp(t), t = -x clamped to +-87 (exp stays finite; NaN -> lo,
    // and x / (1 + e) keeps the NaN of x).
    const __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), lo), hi);
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(t, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_fnmadd_ps(k, ln2, t);
    __m256 q = _mm256_fmadd_ps(c6, r, c5);
    q = _mm256_fmadd_ps(q, r, c4);
    q = _mm256_fmadd_ps(q, r, c3);
    q = _mm256_fmadd_ps(q, r, c2);
    q = _mm256_fmadd_ps(q, r, one);
    q = _mm256_fmadd_ps(q, r, one);
    const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    const __m256 e = _mm256_mul_ps(q, _mm256_castsi256_ps(scale));
    _mm256_storeu_ps(y + i, _mm256_div_ps(x, _mm256_add_ps(one, e)));
  }
  for (; i < n; ++i) y[i] = y[i] / (1.f + std::exp(-y[i]));
}

// AVX-512 helpers: 16 bfloat16 values widened to float32 / rounded back to
// nearest even (what oneDNN's bf16 kernels store); lanes() is in
// cpu/avx512_math.h. The maskz forms throughout: GCC 12 warns about the
// undefined vector the plain ones start from.

__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 load_bf16(__mmask16 m, const uint16_t* p) {
  const __m512i w = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, w, 16));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline void store_bf16(uint16_t* p, __mmask16 m,
                                                                                        __m512 v) {
  _mm256_mask_storeu_epi16(p, m, (__m256i)_mm512_cvtneps_pbh(v));
}

__attribute__((target("avx512f"))) void swish_span512(float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, swish16(_mm512_maskz_loadu_ps(m, y + i)));
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void swish_span_bf16(uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    store_bf16(y + i, m, swish16(load_bf16(m, y + i)));
  }
}

// AVX512BW and VL (max_pool_2x2's byte loads and stores).
bool has_avx512bw() {
  static const bool yes = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
}

std::atomic<bool> g_pool_vectors{true};  // set_pool_vectors()

// In chunks of 16 KiB elements (below that one thread does it all).
template <typename T, typename Span>
void in_chunks(T* y, int64_t n, Span span) {
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 1 || omp_get_max_threads() == 1) {
    span(y, n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) span(y + c * kChunk, std::min(kChunk, n - c * kChunk));
}

__attribute__((target("avx2,fma"))) void pool_row(const Pool8cParams& p, const float* x, float* y, int64_t oh) {
  const int64_t h0 = oh * p.sh - p.pad_top, h_lo = std::max<int64_t>(h0, 0), h_hi = std::min(h0 + p.kh, p.H);
  for (int64_t ow = 0; ow < p.OW; ++ow) {
    const int64_t w0 = ow * p.sw - p.pad_left, w_lo = std::max<int64_t>(w0, 0), w_hi = std::min(w0 + p.kw, p.W);
    __m256 acc = p.max ? _mm256_set1_ps(-INFINITY) : _mm256_setzero_ps();
    for (int64_t h = h_lo; h < h_hi; ++h) {
      const float* row = x + (h * p.W) * 8;
      if (p.max) {
        // max_ps gives its second operand when either is NaN: a NaN kept
        // stays, a NaN read is blended in (a NaN in the window is the
        // output, as in max_pool_nhwc and cuDNN).
        for (int64_t w = w_lo; w < w_hi; ++w) {
          const __m256 v = _mm256_loadu_ps(row + w * 8);
          acc = _mm256_blendv_ps(_mm256_max_ps(v, acc), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
      } else {
        for (int64_t w = w_lo; w < w_hi; ++w) acc = _mm256_add_ps(acc, _mm256_loadu_ps(row + w * 8));
      }
    }
    if (!p.max) {
      const int64_t n = std::max<int64_t>(1, (h_hi - h_lo) * (w_hi - w_lo));
      acc = _mm256_mul_ps(acc, _mm256_set1_ps(1.f / static_cast<float>(n)));
    }
    _mm256_storeu_ps(y + (oh * p.OW + ow) * 8, acc);
  }
}

// Whether a window's running maximum `best` gives way to `v`: a larger
// value, or the window's first NaN (NaN propagates, as in PyTorch and
// cuDNN: a NaN anywhere in the window is the output, and its gradient
// goes there).
inline bool takes(float v, float best) { return v > best || (std::isnan(v) && !std::isnan(best)); }

__attribute__((target("avx512f"))) inline __mmask16 takes16(__m512 v, __m512 best) {
  return _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
         (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
}

// One output row of max_pool_2x2 from input rows r0, r1.
void max2x2_row(const float* r0, const float* r1, float* y, uint8_t* idx, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ++ow) {
    const float v[4] = {r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
    int best = 0;
    for (int k = 1; k < 4; ++k)
      if (takes(v[k], v[best])) best = k;
    y[ow] = v[best];
    if (idx) idx[ow] = static_cast<uint8_t>(best);
  }
}

void max2x2_row_grad(const float* dy, const uint8_t* idx, const float* mask, float* d0, float* d1, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ++ow) {
    const int k = idx[ow];
    const float g = !mask || mask[ow] > 0.f ? dy[ow] : 0.f;
    d0[2 * ow] = k == 0 ? g : 0.f;
    d0[2 * ow + 1] = k == 1 ? g : 0.f;
    d1[2 * ow] = k == 2 ? g : 0.f;
    d1[2 * ow + 1] = k == 3 ? g : 0.f;
  }
}

// 16 outputs per step: the 32 inputs of each row split into even and odd
// columns (vpermt2ps), compared in window order so ties keep the first.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void max2x2_row512(const float* r0, const float* r1, float* y,
                                                                        uint8_t* idx, int64_t OW) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow), pairs = 2 * n;
    const __mmask16 lo = lanes(pairs), hi = pairs > 16 ? lanes(pairs - 16) : 0, m = lanes(n);
    const float* a = r0 + 2 * ow;
    const float* b = r1 + 2 * ow;
    const __m512 a0 = _mm512_maskz_loadu_ps(lo, a), a1 = _mm512_maskz_loadu_ps(hi, a + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(lo, b), b1 = _mm512_maskz_loadu_ps(hi, b + 16);
    __m512 best = _mm512_permutex2var_ps(a0, even, a1);
    __m512i k = _mm512_setzero_si512();
    const __m512 cand[3] = {_mm512_permutex2var_ps(a0, odd, a1), _mm512_permutex2var_ps(b0, even, b1),
                            _mm512_permutex2var_ps(b0, odd, b1)};
    for (int c = 0; c < 3; ++c) {
      const __mmask16 gt = takes16(cand[c], best);
      best = _mm512_mask_mov_ps(best, gt, cand[c]);
      k = _mm512_mask_mov_epi32(k, gt, _mm512_set1_epi32(c + 1));
    }
    _mm512_mask_storeu_ps(y + ow, m, best);
    if (idx) _mm_mask_storeu_epi8(idx + ow, m, _mm512_maskz_cvtepi32_epi8(0xFFFF, k));
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void max2x2_row_grad512(const float* dy, const uint8_t* idx,
                                                                             const float* mask, float* d0, float* d1,
                                                                             int64_t OW) {
  // Output column j of a row pair: even j from lane j/2 of the first
  // register, odd j from lane j/2 of the second.
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow), pairs = 2 * n;
    const __mmask16 lo = lanes(pairs), hi = pairs > 16 ? lanes(pairs - 16) : 0, m = lanes(n);
    __mmask16 take = m;
    if (mask) take = _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, mask + ow), zero, _CMP_GT_OQ);
    const __m512 g = _mm512_maskz_loadu_ps(take, dy + ow);
    const __m512i k = _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_maskz_loadu_epi8(m, idx + ow));
    __m512 part[4];
    for (int c = 0; c < 4; ++c)
      part[c] = _mm512_mask_mov_ps(zero, _mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(c)), g);
    float* rows[2] = {d0 + 2 * ow, d1 + 2 * ow};
    for (int r = 0; r < 2; ++r) {
      _mm512_mask_storeu_ps(rows[r], lo, _mm512_permutex2var_ps(part[2 * r], first, part[2 * r + 1]));
      _mm512_mask_storeu_ps(rows[r] + 16, hi, _mm512_permutex2var_ps(part[2 * r], second, part[2 * r + 1]));
    }
  }
}

// nChw16c: a row of OW output pixels from input rows r0, r1 (16 floats a
// pixel); comparisons per channel, in window order.
void max2x2_row_c16(const float* r0, const float* r1, float* y, uint8_t* idx, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ++ow) {
    const float* v[4] = {r0 + 32 * ow, r0 + 32 * ow + 16, r1 + 32 * ow, r1 + 32 * ow + 16};
    for (int c = 0; c < 16; ++c) {
      int best = 0;
      for (int k = 1; k < 4; ++k)
        if (takes(v[k][c], v[best][c])) best = k;
      y[16 * ow + c] = v[best][c];
      if (idx) idx[16 * ow + c] = static_cast<uint8_t>(best);
    }
  }
}

void max2x2_row_grad_c16(const float* dy, const uint8_t* idx, const float* mask, float* d0, float* d1, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ++ow) {
    float* v[4] = {d0 + 32 * ow, d0 + 32 * ow + 16, d1 + 32 * ow, d1 + 32 * ow + 16};
    for (int c = 0; c < 16; ++c) {
      const int64_t o = 16 * ow + c;
      const float g = !mask || mask[o] > 0.f ? dy[o] : 0.f;
      for (int k = 0; k < 4; ++k) v[k][c] = idx[o] == k ? g : 0.f;
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void max2x2_row_c16_512(const float* r0, const float* r1,
                                                                             float* y, uint8_t* idx, int64_t OW) {
  for (int64_t ow = 0; ow < OW; ++ow) {
    __m512 best = _mm512_loadu_ps(r0 + 32 * ow);
    __m512i k = _mm512_setzero_si512();
    const __m512 cand[3] = {_mm512_loadu_ps(r0 + 32 * ow + 16), _mm512_loadu_ps(r1 + 32 * ow),
                            _mm512_loadu_ps(r1 + 32 * ow + 16)};
    for (int c = 0; c < 3; ++c) {
      const __mmask16 gt = takes16(cand[c], best);
      best = _mm512_mask_mov_ps(best, gt, cand[c]);
      k = _mm512_mask_mov_epi32(k, gt, _mm512_set1_epi32(c + 1));
    }
    _mm512_storeu_ps(y + 16 * ow, best);
    if (idx) _mm_storeu_si128(reinterpret_cast<__m128i*>(idx + 16 * ow), _mm512_maskz_cvtepi32_epi8(0xFFFF, k));
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void max2x2_row_grad_c16_512(const float* dy,
                                                                                  const uint8_t* idx,
                                                                                  const float* mask, float* d0,
                                                                                  float* d1, int64_t OW) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t ow = 0; ow < OW; ++ow) {
    __mmask16 take = 0xFFFF;
    if (mask) take = _mm512_cmp_ps_mask(_mm512_loadu_ps(mask + 16 * ow), zero, _CMP_GT_OQ);
    const __m512 g = _mm512_maskz_loadu_ps(take, dy + 16 * ow);
    const __m512i k =
        _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(idx + 16 * ow)));
    float* v[4] = {d0 + 32 * ow, d0 + 32 * ow + 16, d1 + 32 * ow, d1 + 32 * ow + 16};
    for (int c = 0; c < 4; ++c)
      _mm512_storeu_ps(v[c], _mm512_mask_mov_ps(zero, _mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(c)), g));
  }
}

}  // namespace

void set_pool_vectors(bool on) { g_pool_vectors.store(on, std::memory_order_relaxed); }

void max_pool_2x2(const MaxPool2x2Params& p, const float* x, float* y, uint8_t* idx) {
  const bool wide = g_pool_vectors.load(std::memory_order_relaxed) && own_avx512_kernels() && has_avx512bw();
  const int64_t rows = p.planes * p.OH, px = p.pixel, row_in = p.W * px, row_out = p.OW * px;
#pragma omp parallel for schedule(static) if (rows * row_out > 16384 && omp_get_max_threads() > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t q = r / p.OH, oh = r % p.OH;
    const float* r0 = x + (q * p.H + 2 * oh) * row_in;
    float* yr = y + r * row_out;
    uint8_t* ir = idx ? idx + r * row_out : nullptr;
    if (px == 16) {
      if (wide) max2x2_row_c16_512(r0, r0 + row_in, yr, ir, p.OW);
      else max2x2_row_c16(r0, r0 + row_in, yr, ir, p.OW);
    } else if (wide) {
      max2x2_row512(r0, r0 + p.W, yr, ir, p.OW);
    } else {
      max2x2_row(r0, r0 + p.W, yr, ir, p.OW);
    }
  }
}

void max_pool_2x2_backward(const MaxPool2x2Params& p, const float* dy, const uint8_t* idx, float* dx,
                           const float* mask) {
  const bool wide = g_pool_vectors.load(std::memory_order_relaxed) && own_avx512_kernels() && has_avx512bw();
  // Inputs outside every window (a last odd row or column) get no gradient.
  const bool uncovered = p.H != 2 * p.OH || p.W != 2 * p.OW;
  const int64_t rows = p.planes * p.OH, px = p.pixel, row_in = p.W * px, row_out = p.OW * px;
#pragma omp parallel for schedule(static) if (rows * row_out > 16384 && omp_get_max_threads() > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t q = r / p.OH, oh = r % p.OH;
    float* plane = dx + q * p.H * row_in;
    float* d0 = plane + 2 * oh * row_in;
    if (uncovered) {
      if (p.W != 2 * p.OW) {
        std::fill(d0 + row_in - px, d0 + row_in, 0.f);
        std::fill(d0 + 2 * row_in - px, d0 + 2 * row_in, 0.f);
      }
      if (oh == p.OH - 1) std::fill(plane + 2 * p.OH * row_in, plane + p.H * row_in, 0.f);
    }
    const float* mr = mask ? mask + r * row_out : nullptr;
    const float* g = dy + r * row_out;
    const uint8_t* ir = idx + r * row_out;
    if (px == 16) {
      if (wide) max2x2_row_grad_c16_512(g, ir, mr, d0, d0 + row_in, p.OW);
      else max2x2_row_grad_c16(g, ir, mr, d0, d0 + row_in, p.OW);
    } else if (wide) {
      max2x2_row_grad512(g, ir, mr, d0, d0 + p.W, p.OW);
    } else {
      max2x2_row_grad(g, ir, mr, d0, d0 + p.W, p.OW);
    }
  }
}

void pool_nchw8c(const Pool8cParams& p, const float* x, float* y) {
  const int64_t planes = p.N * p.CB, in_plane = p.H * p.W * 8, out_plane = p.OH * p.OW * 8;
  const int64_t work = planes * p.OH * p.OW * p.kh * p.kw;
#pragma omp parallel for collapse(2) schedule(static) if (work > 65536 && omp_get_max_threads() > 1)
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t oh = 0; oh < p.OH; ++oh) pool_row(p, x + q * in_plane, y + q * out_plane, oh);
}

bool own_bf16_kernels() {
  static const bool yes = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return yes;
}

bool own_swish(bool bf16) {
  static const bool f32 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return bf16 ? own_bf16_kernels() : f32;
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void bf16_channel_op(const uint16_t* x,
                                                                                     const uint16_t* s, uint16_t* y,
                                                                                     int64_t n, int64_t pixels,
                                                                                     bool mul) {
  // (A call per pixel, each widening the scales again, took efficientnet_b0's
  // first squeeze-and-excitation mul, 32 channels at 112x112, 0.3 ms.)
  thread_local std::vector<float> wide;
  if (wide.size() < static_cast<size_t>(n + 16)) wide.resize(static_cast<size_t>(n + 16));
  float* sf = wide.data();
  for (int64_t k = 0; k < n; k += 16) _mm512_storeu_ps(sf + k, load_bf16(lanes(n - k), s + k));
  for (int64_t p = 0; p < pixels; ++p, x += n, y += n)
    for (int64_t k = 0; k < n; k += 16) {
      const __mmask16 m = lanes(n - k);
      const __m512 v = load_bf16(m, x + k), sv = _mm512_loadu_ps(sf + k);
      store_bf16(y + k, m, mul ? _mm512_mul_ps(v, sv) : _mm512_add_ps(v, sv));
    }
}

void swish_inplace(float* y, int64_t n) {
  if (own_avx512_kernels()) in_chunks(y, n, swish_span512);
  else in_chunks(y, n, swish_span);
}

void swish_inplace_bf16(uint16_t* y, int64_t n) { in_chunks(y, n, swish_span_bf16); }

namespace {

__attribute__((target("avx512f"))) inline __m512 small_step(__m512 v, const SmallStep& s) {
  switch (s.kind) {
    case SmallStep::Relu: return _mm512_maskz_max_ps(0xFFFF, _mm512_setzero_ps(), v);  // (a NaN stays NaN)
    case SmallStep::Clip: return clamp16(v, _mm512_set1_ps(s.alpha), _mm512_set1_ps(s.beta));
    case SmallStep::Logistic: return sigmoid16(v);
    case SmallStep::Swish: return swish16(v);
    case SmallStep::HardSwish: return hardswish16(v);
    default: return _mm512_fmadd_ps(v, _mm512_set1_ps(s.alpha), _mm512_set1_ps(s.beta));
  }
}

// Outputs [k0, k0 + 16 NV) of row n.
template <int NV>
__attribute__((target("avx512f"))) void small_1x1_block(const float* x, int64_t C, const float* w, int64_t Kp,
                                                        int64_t K, const float* b, const SmallStep* steps,
                                                        int n_steps, int64_t k0, float* y) {
  __m512 acc[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_loadu_ps(b + k0 + 16 * v);
  for (int64_t c = 0; c < C; ++c) {
    const __m512 xv = _mm512_set1_ps(x[c]);
    const float* wr = w + c * Kp + k0;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[v] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(wr + 16 * v), acc[v]);
  }
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    __m512 r = acc[v];
    for (int i = 0; i < n_steps; ++i) r = small_step(r, steps[i]);
    _mm512_mask_storeu_ps(y + k0 + 16 * v, lanes(K - k0 - 16 * v), r);
  }
}

}  // namespace

namespace {

// r[j] = column j of the 16 x 16 matrix whose rows r held (the maskz forms:
// GCC 12 warns about the undefined vector the plain ones start from).
__attribute__((target("avx512f"))) inline void transpose16x16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_maskz_unpacklo_ps(0xFFFF, r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_maskz_unpackhi_ps(0xFFFF, r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i + 0] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xFF, a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xFF, a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xFF, b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xFF, b, d));
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_maskz_shuffle_f32x4(0xFFFF, r[8 * i + j], r[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_maskz_shuffle_f32x4(0xFFFF, r[8 * i + j], r[8 * i + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_maskz_shuffle_f32x4(0xFFFF, t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_maskz_shuffle_f32x4(0xFFFF, t[j], t[8 + j], 0xdd);
  }
}

// Pixels [p0, p0 + 16) x channels [c0, c0 + 16) of one image (those inside).
__attribute__((target("avx512f"))) void nhwc_to_nchw_tile(const float* x, int64_t C, int64_t HW, int64_t p0,
                                                          int64_t c0, float* y, bool stream) {
  const int64_t np = std::min<int64_t>(16, HW - p0), nc = std::min<int64_t>(16, C - c0);
  const __mmask16 cm = lanes(nc), pm = lanes(np);
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = i < np ? _mm512_maskz_loadu_ps(cm, x + (p0 + i) * C + c0) : _mm512_setzero_ps();
  transpose16x16(r);
  for (int j = 0; j < nc; ++j) {
    float* to = y + (c0 + j) * HW + p0;
    if (stream && np == 16 && (reinterpret_cast<uintptr_t>(to) & 63) == 0)
      _mm512_stream_ps(to, r[j]);
    else
      _mm512_mask_storeu_ps(to, pm, r[j]);
  }
}

}  // namespace

void nhwc_to_nchw(const float* x, int64_t N, int64_t C, int64_t HW, float* y, bool stream) {
  if (!own_avx512_kernels()) throw std::logic_error("nhwc_to_nchw on a CPU without AVX512F");
  const int64_t cb = (C + 15) / 16, pb = (HW + 15) / 16;
  // Items of one channel block and up to 8 pixel blocks (128 pixels).
  const int64_t pc = (pb + 7) / 8, items = N * cb * pc;
#pragma omp parallel for schedule(static) if (N * C * HW >= (int64_t{1} << 15))
  for (int64_t it = 0; it < items; ++it) {
    const int64_t n = it / (cb * pc), c0 = 16 * (it / pc % cb), q = it % pc;
    for (int64_t b = 8 * q; b < std::min(pb, 8 * (q + 1)); ++b)
      nhwc_to_nchw_tile(x + n * HW * C, C, HW, 16 * b, c0, y + n * C * HW, stream);
    if (stream) _mm_sfence();  // the streamed lines in order before the caller reads y
  }
}

namespace {
__attribute__((target("avx512f"))) void lerp_row512(const float* row, const int32_t* i0, const int32_t* i1,
                                                    const float* w0, const float* w1, float* y, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 a = _mm512_i32gather_ps(_mm512_loadu_si512(i0 + j), row, 4);
    const __m512 b = _mm512_i32gather_ps(_mm512_loadu_si512(i1 + j), row, 4);
    _mm512_storeu_ps(y + j, _mm512_fmadd_ps(_mm512_loadu_ps(w0 + j), a, _mm512_mul_ps(_mm512_loadu_ps(w1 + j), b)));
  }
  for (; j < n; ++j) y[j] = w0[j] * row[i0[j]] + w1[j] * row[i1[j]];
}
}  // namespace

void lerp_row(const float* row, const int32_t* i0, const int32_t* i1, const float* w0, const float* w1, float* y,
              int64_t n) {
  if (own_avx512_kernels()) return lerp_row512(row, i0, i1, w0, w1, y, n);
  for (int64_t j = 0; j < n; ++j) y[j] = w0[j] * row[i0[j]] + w1[j] * row[i1[j]];
}

void small_1x1(const float* x, int64_t N, int64_t C, const float* w, int64_t K, const float* b,
               const SmallStep* steps, int n_steps, float* y) {
  if (!own_avx512_kernels()) throw std::logic_error("small_1x1 on a CPU without AVX512F");
  if (!b) throw std::invalid_argument("small_1x1: no bias (pass Kp zeros for none)");
  const int64_t Kp = (K + 15) / 16 * 16;
  for (int64_t n = 0; n < N; ++n) {
    int64_t k0 = 0;
    for (; k0 + 64 <= Kp; k0 += 64) small_1x1_block<4>(x + n * C, C, w, Kp, K, b, steps, n_steps, k0, y + n * K);
    for (; k0 < Kp; k0 += 16) small_1x1_block<1>(x + n * C, C, w, Kp, K, b, steps, n_steps, k0, y + n * K);
  }
}

namespace {

// 16 pixels of three channel rows a, b, c interleaved into d (48 floats):
// each output vector takes its values of a and b with one two-source
// permutation and blends in those of c (the scalar scatter stored one
// float per instruction: ssdlite320's 3 x 320 x 320 image took about
// 0.07 ms on 2 threads).
__attribute__((target("avx512f"))) inline void interleave3x16(const float* a, const float* b, const float* c, float* d) {
  const __m512 va = _mm512_loadu_ps(a), vb = _mm512_loadu_ps(b), vc = _mm512_loadu_ps(c);
  // Output element i of vector k is channel (16k + i) % 3 of pixel (16k + i) / 3.
  alignas(64) static constexpr int32_t kAB[3][16] = {
      {0, 16, 0, 1, 17, 0, 2, 18, 0, 3, 19, 0, 4, 20, 0, 5},
      {21, 0, 6, 22, 0, 7, 23, 0, 8, 24, 0, 9, 25, 0, 10, 26},
      {0, 11, 27, 0, 12, 28, 0, 13, 29, 0, 14, 30, 0, 15, 31, 0}};
  alignas(64) static constexpr int32_t kC[3][16] = {{0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0},
                                                    {0, 5, 0, 0, 6, 0, 0, 7, 0, 0, 8, 0, 0, 9, 0, 0},
                                                    {10, 0, 0, 11, 0, 0, 12, 0, 0, 13, 0, 0, 14, 0, 0, 15}};
  constexpr __mmask16 kTakeC[3] = {0x4924, 0x2492, 0x9249};
  for (int k = 0; k < 3; ++k) {
    const __m512 ab = _mm512_permutex2var_ps(va, _mm512_load_si512(kAB[k]), vb);
    const __m512 cc = _mm512_maskz_permutexvar_ps(0xFFFF, _mm512_load_si512(kC[k]), vc);
    _mm512_storeu_ps(d + 16 * k, _mm512_mask_blend_ps(kTakeC[k], ab, cc));
  }
}

__attribute__((target("avx512f"))) void rgb_row_to_nhwc(const float* a, const float* b, const float* c, int64_t W,
                                                      float* d) {
  int64_t w = 0;
  for (; w + 16 <= W; w += 16) interleave3x16(a + w, b + w, c + w, d + 3 * w);
  for (; w < W; ++w) {
    d[3 * w] = a[w];
    d[3 * w + 1] = b[w];
    d[3 * w + 2] = c[w];
  }
}

// Up to 8 vectors of channels from c0 (of C): their masks into m, `init`
// into each accumulator; returns how many vectors hold channels.
__attribute__((target("avx512f"))) inline int channel_block(int64_t C, int64_t c0, __mmask16* m, __m512* acc,
                                                            __m512 init) {
  for (int v = 0; v < 8; ++v) {
    m[v] = lanes(std::max<int64_t>(0, C - c0 - 16 * v));
    acc[v] = init;
  }
  return static_cast<int>(std::min<int64_t>(8, (C - c0 + 15) / 16));
}

// Sums pixels [p0, p1) of x (pixels C floats apart) into part[0, C).
__attribute__((target("avx512f"))) void gap_chunk(const float* x, int64_t p0, int64_t p1, int64_t C, float* part) {
  for (int64_t c0 = 0; c0 < C; c0 += 128) {
    __mmask16 m[8];
    __m512 acc[8];
    const int nv = channel_block(C, c0, m, acc, _mm512_setzero_ps());
    const float* xp = x + p0 * C + c0;
    if (nv == 8 && m[7] == 0xffff) {
      for (int64_t q = p0; q < p1; ++q, xp += C)
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_loadu_ps(xp + 16 * v));
    } else {
      for (int64_t q = p0; q < p1; ++q, xp += C)
        for (int v = 0; v < nv; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_maskz_loadu_ps(m[v], xp + 16 * v));
    }
    for (int v = 0; v < nv; ++v) _mm512_mask_storeu_ps(part + c0 + 16 * v, m[v], acc[v]);
  }
}

// 16 values of a max pooling's data: float32, or bfloat16 widened
// exactly (a maximum is one of the inputs, so it is stored back exactly by
// dropping the low half again; a NaN keeps its bits).
__attribute__((target("avx512f"))) inline __m512 pool_load(__mmask16 m, const float* p) {
  return _mm512_maskz_loadu_ps(m, p);
}
__attribute__((target("avx512f"))) inline void pool_store(float* p, __mmask16 m, __m512 v) {
  _mm512_mask_storeu_ps(p, m, v);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 pool_load(__mmask16 m, const uint16_t* p) {
  return load_bf16(m, p);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void pool_store(uint16_t* p, __mmask16 m, __m512 v) {
  _mm512_mask_cvtepi32_storeu_epi16(p, m, _mm512_maskz_srli_epi32(0xFFFF, _mm512_castps_si512(v), 16));
}

// One output row of max_pool_nhwc. T: float (AVX512F) or bfloat16 bits
// (AVX512BW and VL too; the caller checks).
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void max_pool_nhwc_row(const PoolNhwcParams& p, const T* x,
                                                                             T* y, int64_t oh) {
  const int64_t C = p.C;
  const int64_t h0 = oh * p.sh - p.pt, h_lo = std::max<int64_t>(h0, 0), h_hi = std::min(h0 + p.kh, p.H);
  const __m512 lowest = _mm512_set1_ps(-INFINITY);
  for (int64_t ow = 0; ow < p.OW; ++ow) {
    const int64_t w0 = ow * p.sw - p.pl, w_lo = std::max<int64_t>(w0, 0), w_hi = std::min(w0 + p.kw, p.W);
    T* yo = y + (oh * p.OW + ow) * C;
    for (int64_t c0 = 0; c0 < C; c0 += 128) {
      __mmask16 m[8];
      __m512 acc[8];
      const int nv = channel_block(C, c0, m, acc, lowest);
      for (int64_t h = h_lo; h < h_hi; ++h)
        for (int64_t w = w_lo; w < w_hi; ++w) {
          const T* xp = x + (h * p.W + w) * C + c0;
          for (int v = 0; v < nv; ++v) {
            const __m512 a = pool_load(m[v], xp + 16 * v);
            // max_ps gives its second operand when either is NaN: a NaN
            // kept stays; a NaN read is taken by the mask.
            acc[v] = _mm512_mask_mov_ps(_mm512_maskz_max_ps(0xFFFF, a, acc[v]), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
          }
        }
      for (int v = 0; v < nv; ++v) pool_store(yo + c0 + 16 * v, m[v], acc[v]);
    }
  }
}

template <typename T>
void max_pool_nhwc_as(const PoolNhwcParams& p, const T* x, T* y) {
  const int64_t rows = p.N * p.OH;
#pragma omp parallel for schedule(static) if (rows * p.OW * p.C * p.kh * p.kw > 65536 && omp_get_max_threads() > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r / p.OH;
    max_pool_nhwc_row<T>(p, x + n * p.H * p.W * p.C, y + n * p.OH * p.OW * p.C, r % p.OH);
  }
}

// The bits i < 16 with 0 <= start + i < n.
inline __mmask16 in_range(int64_t start, int64_t n) {
  const int64_t lo = std::max<int64_t>(0, -start), hi = std::min<int64_t>(16, n - start);
  if (hi <= lo) return 0;
  return static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
}

// Window column `start` (lane 0's input column) of a block of
// max_pool_plain_row: each lane's column, the lanes whose column is inside
// the input (and an output), and the masks of the one (stride 1) or two
// (stride 2) loads from start.
__attribute__((target("avx512f"))) inline void plain_column(int64_t start, __m512i step, __m512i width, __mmask16 out,
                                                            int64_t sw, int64_t W, __m512i* col, __mmask16* valid,
                                                            __mmask16* lo, __mmask16* hi) {
  *col = _mm512_add_epi32(step, _mm512_set1_epi32(static_cast<int>(start)));
  *valid = out & _mm512_cmpge_epi32_mask(*col, _mm512_setzero_si512()) & _mm512_cmplt_epi32_mask(*col, width);
  *lo = sw == 1 ? *valid : in_range(start, W);
  *hi = in_range(start + 16, W);
}

// One output row of max_pool_plain, 16 outputs at a time (strides 1 and
// 2 across). Lane j of a block reads column (ow0 + j) * sw + s - pl of
// each window column s: contiguous at stride 1, the even values of 32
// at stride 2; lanes whose column is padding take nothing. I: the index
// type (void: no indices), each index the winner's position in its window.
template <typename I, int B>
__attribute__((target("avx512f"))) void max_pool_plain_row(const MaxPoolPlainParams& p, const float* xp, float* yo,
                                                           I* io, int64_t oh) {
  constexpr bool Train = !std::is_void_v<I>;
  const int64_t h0 = oh * p.sh - p.pt, h_lo = std::max<int64_t>(h0, 0), h_hi = std::min(h0 + p.kh, p.H);
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i zero = _mm512_setzero_si512(), width = _mm512_set1_epi32(static_cast<int>(p.W));
  const __m512i step = p.sw == 1 ? lane : _mm512_add_epi32(lane, lane);
  // B (up to 4) blocks of 16 outputs side by side: each block's running
  // maximum is a chain (compare, mask, move) through every window pixel,
  // so one block at a time waited on it (2.2x oneDNN's time).
  for (int64_t ow0 = 0; ow0 < p.OW; ow0 += 16 * B) {
    __mmask16 out[B], unset[B];
    __m512 best[B];
    __m512i at[B];
#pragma GCC unroll 4
    for (int k = 0; k < B; ++k) {
      out[k] = lanes(std::max<int64_t>(0, p.OW - ow0 - 16 * k));
      unset[k] = out[k];  // lanes that have not read a pixel yet
      best[k] = _mm512_set1_ps(-INFINITY);
      at[k] = zero;
    }
    const int64_t col0 = ow0 * p.sw - p.pl;  // lane 0's column at s = 0
    for (int64_t h = h_lo; h < h_hi; ++h) {
      const float* row = xp + h * p.W;
      for (int64_t s = 0; s < p.kw; ++s) {
        const __m512i tap = _mm512_set1_epi32(static_cast<int>((h - h0) * p.kw + s));
#pragma GCC unroll 4
        for (int k = 0; k < B; ++k) {
          const int64_t start = col0 + 16 * p.sw * k + s;
          __m512i col;
          __mmask16 valid, lo, hi;
          plain_column(start, step, width, out[k], p.sw, p.W, &col, &valid, &lo, &hi);
          __m512 v;
          if (p.sw == 1) {
            v = _mm512_maskz_loadu_ps(lo, row + start);
          } else {
            const __m512 a = _mm512_maskz_loadu_ps(lo, row + start);
            const __m512 b = _mm512_maskz_loadu_ps(hi, row + start + 16);
            v = _mm512_permutex2var_ps(a, even, b);
          }
          const __mmask16 take = valid & (takes16(v, best[k]) | unset[k]);
          unset[k] &= static_cast<__mmask16>(~valid);
          best[k] = _mm512_mask_mov_ps(best[k], take, v);
          if constexpr (Train) at[k] = _mm512_mask_mov_epi32(at[k], take, tap);
        }
      }
    }
#pragma GCC unroll 4
    for (int k = 0; k < B; ++k) {
      _mm512_mask_storeu_ps(yo + ow0 + 16 * k, out[k], best[k]);
      if constexpr (std::is_same_v<I, uint8_t>)
        _mm512_mask_cvtepi32_storeu_epi8(io + ow0 + 16 * k, out[k], at[k]);
      else if constexpr (std::is_same_v<I, int32_t>)
        _mm512_mask_storeu_epi32(io + ow0 + 16 * k, out[k], at[k]);
    }
  }
}

}  // namespace

void max_pool_nhwc(const PoolNhwcParams& p, const float* x, float* y) {
  if (!own_max_pool_nhwc()) throw std::invalid_argument("max_pool_nhwc: needs AVX512F, AVX512BW and AVX512VL");
  max_pool_nhwc_as(p, x, y);
}

bool own_max_pool_nhwc() { return own_avx512_kernels() && has_avx512bw(); }

void max_pool_nhwc(const PoolNhwcParams& p, const uint16_t* x, uint16_t* y) {
  if (!own_max_pool_nhwc()) throw std::invalid_argument("max_pool_nhwc: needs AVX512F, AVX512BW and AVX512VL");
  max_pool_nhwc_as(p, x, y);
}

namespace {

template <typename I>
void max_pool_plain_as(const MaxPoolPlainParams& p, const float* x, float* y, I* idx) {
  const int64_t rows = p.planes * p.OH;
  // (The vector rows count columns in int32 lanes: rows of up to 2^30.)
  const bool vectors = g_pool_vectors.load(std::memory_order_relaxed) && own_avx512_kernels() &&
                       (p.sw == 1 || p.sw == 2) && p.W + p.pl + p.kw + 64 * p.sw <= (int64_t{1} << 30);
#pragma omp parallel for schedule(static) if (rows * p.OW * p.kh * p.kw > 65536 && omp_get_max_threads() > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t q = r / p.OH, oh = r % p.OH;
    const float* xp = x + q * p.H * p.W;
    float* yo = y + r * p.OW;
    I* io = nullptr;
    if constexpr (!std::is_void_v<I>) io = idx + r * p.OW;
    if (vectors) {
      const int64_t blocks = (p.OW + 15) / 16;
      if (blocks >= 4) max_pool_plain_row<I, 4>(p, xp, yo, io, oh);
      else if (blocks >= 2) max_pool_plain_row<I, 2>(p, xp, yo, io, oh);
      else max_pool_plain_row<I, 1>(p, xp, yo, io, oh);
      continue;
    }
    const int64_t h0 = oh * p.sh - p.pt, h_lo = std::max<int64_t>(h0, 0), h_hi = std::min(h0 + p.kh, p.H);
    for (int64_t ow = 0; ow < p.OW; ++ow) {
      const int64_t w0 = ow * p.sw - p.pl, w_lo = std::max<int64_t>(w0, 0), w_hi = std::min(w0 + p.kw, p.W);
      // The window's first pixel inside the input starts the search (every
      // window holds one: pads are smaller than the window).
      int64_t bh = h_lo, bw = w_lo;
      float bv = xp[h_lo * p.W + w_lo];
      for (int64_t h = h_lo; h < h_hi; ++h)
        for (int64_t w = w_lo; w < w_hi; ++w)
          if (takes(xp[h * p.W + w], bv)) bv = xp[h * p.W + w], bh = h, bw = w;
      yo[ow] = bv;
      if constexpr (!std::is_void_v<I>) io[ow] = static_cast<I>((bh - h0) * p.kw + (bw - w0));
    }
  }
}

template <typename I>
void max_pool_plain_backward_as(const MaxPoolPlainParams& p, const float* dy, const I* idx, float* dx) {
  const int64_t HW = p.H * p.W, OHW = p.OH * p.OW;
  // Each window position's offset from the window's corner in the plane
  // (a division per output took twice the time of the scatter); positions
  // of larger windows (int32 indices) are divided out.
  int64_t off[256];
  const bool table = p.kh * p.kw <= 256;
  for (int64_t t = 0; table && t < p.kh * p.kw; ++t) off[t] = t / p.kw * p.W + t % p.kw;
#pragma omp parallel for schedule(static) if (p.planes * HW > 65536 && omp_get_max_threads() > 1)
  for (int64_t q = 0; q < p.planes; ++q) {
    float* dxp = dx + q * HW;
    std::fill(dxp, dxp + HW, 0.f);
    const float* dyp = dy + q * OHW;
    const I* ip = idx + q * OHW;
    for (int64_t oh = 0; oh < p.OH; ++oh) {
      // (The corner may lie in the padding; the position found never does.)
      const int64_t row = (oh * p.sh - p.pt) * p.W - p.pl;
      for (int64_t ow = 0; ow < p.OW; ++ow) {
        const int64_t t = static_cast<int64_t>(ip[oh * p.OW + ow]);
        dxp[row + ow * p.sw + (table ? off[t] : t / p.kw * p.W + t % p.kw)] += dyp[oh * p.OW + ow];
      }
    }
  }
}

}  // namespace

size_t max_pool_plain_index_bytes(const MaxPoolPlainParams& p) { return p.kh * p.kw <= 256 ? 1 : 4; }

void max_pool_plain(const MaxPoolPlainParams& p, const float* x, float* y, void* idx) {
  if (!idx)
    max_pool_plain_as<void>(p, x, y, nullptr);
  else if (max_pool_plain_index_bytes(p) == 1)
    max_pool_plain_as(p, x, y, static_cast<uint8_t*>(idx));
  else
    max_pool_plain_as(p, x, y, static_cast<int32_t*>(idx));
}

void max_pool_plain_backward(const MaxPoolPlainParams& p, const float* dy, const void* idx, float* dx) {
  if (max_pool_plain_index_bytes(p) == 1)
    max_pool_plain_backward_as(p, dy, static_cast<const uint8_t*>(idx), dx);
  else
    max_pool_plain_backward_as(p, dy, static_cast<const int32_t*>(idx), dx);
}

void gap_nhwc(const float* x, int64_t N, int64_t HW, int64_t C, float* y) {
  const int64_t chunks = std::min(HW, kGapChunks);
  // Partial sums [N][chunks][C], on the calling thread's buffer (every
  // thread of the region reads it).
  thread_local std::vector<float> part_buf;
  part_buf.resize(static_cast<size_t>(N * chunks * C));
  float* part = part_buf.data();
  const float inv = 1.f / static_cast<float>(HW);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t it = 0; it < N * chunks; ++it) {
      const int64_t n = it / chunks, k = it % chunks;
      gap_chunk(x + n * HW * C, HW * k / chunks, HW * (k + 1) / chunks, C, part + it * C);
    }
#pragma omp for schedule(static)
    for (int64_t nc = 0; nc < N * C; ++nc) {
      const int64_t n = nc / C, c = nc % C;
      float s = 0.f;
      for (int64_t k = 0; k < chunks; ++k) s += part[(n * chunks + k) * C + c];
      y[nc] = s * inv;
    }
  }
}

void nchw_to_nhwc(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, float* y, int64_t Hy, int64_t Wy) {
  const bool avx512 = own_avx512_kernels();
#pragma omp parallel for schedule(static)
  for (int64_t nh = 0; nh < N * H; ++nh) {
    const int64_t n = nh / H, h = nh % H;
    float* d = y + (n * Hy + h) * Wy * C;
    if (C == 3 && avx512) {
      const float* s = x + (n * C * H + h) * W;
      rgb_row_to_nhwc(s, s + H * W, s + 2 * H * W, W, d);
      continue;
    }
    for (int64_t c = 0; c < C; ++c) {
      const float* s = x + ((n * C + c) * H + h) * W;
      for (int64_t w = 0; w < W; ++w) d[w * C + c] = s[w];
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void floats_to_bf16(const float* x, int64_t n,
                                                                                    uint16_t* y) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    store_bf16(y + i, m, _mm512_maskz_loadu_ps(m, x + i));
  }
}

void nchw_to_nhwc_bf16(const float* x, int64_t N, int64_t C, int64_t H, int64_t W, uint16_t* y, int64_t Hy,
                       int64_t Wy) {
  if (!own_bf16_kernels()) throw std::logic_error("nchw_to_nhwc_bf16 on a CPU without AVX512_BF16");
#pragma omp parallel for schedule(static)
  for (int64_t nh = 0; nh < N * H; ++nh) {
    const int64_t n = nh / H, h = nh % H;
    // The row channels-last in float32 (as nchw_to_nhwc makes it), then
    // rounded into y.
    thread_local std::vector<float> row;
    if (row.size() < static_cast<size_t>(W * C)) row.resize(static_cast<size_t>(W * C));
    if (C == 3) {
      const float* s = x + (n * C * H + h) * W;
      rgb_row_to_nhwc(s, s + H * W, s + 2 * H * W, W, row.data());
    } else {
      for (int64_t c = 0; c < C; ++c) {
        const float* s = x + ((n * C + c) * H + h) * W;
        for (int64_t w = 0; w < W; ++w) row[w * C + c] = s[w];
      }
    }
    floats_to_bf16(row.data(), W * C, y + (n * Hy + h) * Wy * C);
  }
}

}  // namespace jobflow::cpu

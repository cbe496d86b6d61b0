// cpu/winograd_avx2.cpp — wino::avx2::block(): the Winograd kernel's block
// on AVX2 + FMA, 8 lanes, nChw8c (winograd_block.h).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "cpu/winograd_block.h"

// Everything defined from here on is compiled for avx2,fma (the headers
// above are not: nothing of the standard library gets these instructions).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace jobflow::cpu::wino::avx2 {
namespace {

using Vec = __m256;
inline Vec vset1(float v) { return _mm256_set1_ps(v); }
inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vload(const float* p) { return _mm256_load_ps(p); }
inline Vec vloadu(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, Vec v) { _mm256_store_ps(p, v); }
inline void vstoreu(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vbcast(const float* p) { return _mm256_broadcast_ss(p); }
inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec vsub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec vmin(Vec a, Vec b) { return _mm256_min_ps(a, b); }
inline Vec vmax(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline Vec vfmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vfnmadd(Vec a, Vec b, Vec c) { return _mm256_fnmadd_ps(a, b, c); }

}  // namespace

#include "cpu/winograd_block.inc"

}  // namespace jobflow::cpu::wino::avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// cpu/aligned.h — 64-byte-aligned float buffers inside std::vector<float>
// (Jobflow's own kernels: cpu/winograd.cpp, cpu/expand_dw.cpp), so every
// vector load and store of a row stays within one cache line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace jobflow::cpu {

// n floats from the first 64-byte line inside v, which grows (zeroed) to
// hold them when it is too small.
inline float* align64(std::vector<float>& v, size_t n) {
  if (v.size() < n + 16) v.assign(n + 16, 0.f);
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
}
// The same start, of a buffer filled before.
inline const float* align64(const std::vector<float>& v) {
  return reinterpret_cast<const float*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
}

}  // namespace jobflow::cpu

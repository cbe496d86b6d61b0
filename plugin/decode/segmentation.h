// Semantic segmentation post-processing in plain C++: per-class scores to a
// class map (jobdecode mode=segmentation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace jobflow::decode {

// The best class of each pixel of (C, H, W) row-major scores (the first
// one on ties) into `out` (H * W bytes). C must be at most 256.
void argmax_map(const float* scores, size_t classes, size_t height, size_t width, uint8_t* out);

// The class ids that occur in a map of n bytes, ascending.
std::vector<unsigned> classes_present(const uint8_t* map, size_t n);

}  // namespace jobflow::decode

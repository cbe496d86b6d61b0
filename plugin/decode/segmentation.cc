// Class maps: see segmentation.h.
#include "decode/segmentation.h"

#include <algorithm>

namespace jobflow::decode {

void argmax_map(const float* scores, size_t classes, size_t height, size_t width, uint8_t* out) {
  const size_t plane = height * width;
  std::vector<float> best(scores, scores + plane);
  std::fill(out, out + plane, uint8_t{0});
  for (size_t c = 1; c < classes && c < 256; ++c) {
    const float* s = scores + c * plane;
    for (size_t i = 0; i < plane; ++i) {
      if (s[i] > best[i]) {
        best[i] = s[i];
        out[i] = static_cast<uint8_t>(c);
      }
    }
  }
}

std::vector<unsigned> classes_present(const uint8_t* map, size_t n) {
  bool seen[256] = {};
  for (size_t i = 0; i < n; ++i) seen[map[i]] = true;
  std::vector<unsigned> out;
  for (unsigned c = 0; c < 256; ++c)
    if (seen[c]) out.push_back(c);
  return out;
}

}  // namespace jobflow::decode

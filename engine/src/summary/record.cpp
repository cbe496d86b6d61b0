// TFRecord framing and CRC-32C: the container of TensorBoard event files.
// Needs no protobuf (always built; tests/unit/test_summary.cpp).
#include "jobflow/summary.h"

#include <array>

namespace jobflow::summary {
namespace {

// Byte-wise table of the reflected Castagnoli polynomial 0x1EDC6F41.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void append_record(std::string& out, std::string_view data) {
  const size_t start = out.size();
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(crc32c(out.data() + start, 8)), 4);
  out.append(data);
  put_le(out, masked_crc32c(crc32c(data.data(), data.size())), 4);
}

}  // namespace jobflow::summary

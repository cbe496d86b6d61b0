// jobflow/strings.h — string tensors (ONNX's tensor(string)) as the engine
// carries them.
//
// Like a sequence (jobflow/sequence.h), a string tensor travels as ONE
// uint8 tensor of rank 1 holding all of it (its "packed" form), so plans,
// plan caches, control flow, job arguments and returns move it unchanged;
// only the string ops (ops.h, namespace str) read inside it. Its size in
// bytes depends on the strings, so each op making one is sized by its data.
//
// The packed form, little-endian int64 words, then the characters:
//   word 0   kStringsMagic
//   word 1   the rank r (at most 8)
//   then the r dims
//   then each element's length in bytes, row-major
//   then the elements' bytes back to back, padded to 8 bytes at the end.
// Strings are bytes (ONNX says UTF-8); only the ops that change case decode
// them, and refuse invalid UTF-8 naming the element.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jobflow/tensor.h"

namespace jobflow {

inline constexpr int64_t kStringsMagic = 0x525453574a46;  // "FJWSTR"

// The packed form of `items` laid out as `shape` (row-major; the count must
// be the shape's element count, checked).
Tensor pack_strings(const std::vector<std::string>& items, const Shape& shape);

struct UnpackedStrings {
  Shape shape;
  std::vector<std::string> items;  // row-major
};
// Reads a packed string tensor; a tensor that is not one (wrong dtype,
// magic, sizes) throws Error naming `what`.
UnpackedStrings unpack_strings(const Tensor& packed, const std::string& what);
// Whether `t` is a packed string tensor (uint8 rank 1 with the magic word).
bool is_packed_strings(const Tensor& t);

// UTF-8 to code points; false, with the offset of the first bad byte, where
// `s` is not valid UTF-8 (overlong forms and surrogates included).
bool utf8_decode(const std::string& s, std::u32string* out, size_t* bad_at);
std::string utf8_encode(const std::u32string& code_points);

}  // namespace jobflow

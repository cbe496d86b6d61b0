// jobflow/sequence.h — sequences of tensors and optional values (ONNX's
// seq(tensor) and optional(...) types) as the engine carries them.
//
// A job's values are tensors. A sequence is carried as ONE uint8 tensor of
// rank 1 holding the whole list (its "packed" form), so every part of the
// engine that moves tensors (plans, plan caches, If branches, Loop carried
// values, job arguments and returns) moves sequences unchanged; only the
// sequence ops (ops.h, namespace seq) read inside it. Its length in bytes
// depends on the items, so each op making one is sized by its data
// (docs/architecture.md, segments).
//
// The packed form, little-endian int64 words, then the items' bytes:
//   word 0   kSequenceMagic
//   word 1   the items' dtype (DType's value)
//   word 2   the item count n, or -1 for an optional without a value
//   then per item: its rank r, then its r dims
//   then each item's bytes in row-major order, padded to 8 bytes.
// An optional with a value is a sequence of one item (optional(tensor)) or
// the sequence itself (optional(seq)); the importer knows which.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jobflow/tensor.h"

namespace jobflow {

inline constexpr int64_t kSequenceMagic = 0x51455357464a;  // "JFWSEQ"

// The packed form of `items`, each of dtype `elem` (checked; an empty list
// packs to an empty sequence of `elem`).
Tensor pack_sequence(const std::vector<Tensor>& items, DType elem);
// An optional without a value, of items of `elem`.
Tensor pack_none(DType elem);

struct UnpackedSequence {
  DType elem = DType::Float32;
  bool none = false;           // an optional without a value
  std::vector<Tensor> items;   // copies
};
// Reads a packed sequence; a tensor that is not one (wrong dtype, magic,
// sizes) throws Error naming `what`.
UnpackedSequence unpack_sequence(const Tensor& packed, const std::string& what);
// Whether `t` is a packed sequence (uint8 rank 1 with the magic word).
bool is_packed_sequence(const Tensor& t);

}  // namespace jobflow

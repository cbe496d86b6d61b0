// jobflow/checkpoint_io.h — OneFlow's on-disk checkpoint layout.
//
// The layout written by OneFlow 0.2–0.4 (flow.train.CheckPoint().save(dir),
// flow.checkpoint.save):
//
//   dir/<variable-name>/out     raw little-endian bytes of the whole tensor,
//                               row-major, no header
//   dir/<variable-name>/meta    VariableMetaInfo in protobuf text format
//   dir/snapshot_done           empty; marks the checkpoint complete
//
// `meta` is exactly what Python's text_format.MessageToString writes for
// oneflow.VariableMetaInfo { ShapeProto shape; DataType data_type; }, e.g.
// for a (32, 1) float32 variable:
//
//   shape {
//     dim: 32
//     dim: 1
//   }
//   data_type: kFloat
//
// (a scalar has an empty "shape {\n}\n"). DType <-> OneFlow DataType:
// Float32 kFloat, Float64 kDouble, Int32 kInt32, Int64 kInt64, Int8 kInt8
// (kChar also reads as Int8), UInt8 kUInt8. The parser also accepts the
// numeric enum values and any whitespace layout of the same text.
//
// Variable names may contain '-' and '.', but not '/', "..", NUL, nor be
// empty, "." or "snapshot_done".
//
// Atomic save. save() writes into a fresh sibling folder
// dir + ".tmp-<pid>-<n>" (every file and folder fsync'ed, snapshot_done
// written last), then swaps it in:
//   * on Linux, with renameat2(RENAME_EXCHANGE): tmp and dir trade places in
//     one atomic step, so `dir` always names a complete checkpoint (the old
//     one before the swap, the new one after); the old one, now at the tmp
//     name, is then removed;
//   * where the file system cannot exchange (or dir did not exist), with
//     plain renames: dir -> dir + ".old-<pid>-<n>", then tmp -> dir, then the
//     old one is removed. The one window is between those two renames,
//     where `dir` does not exist. load()/load_variable() handle it: when
//     `dir` is missing they fall back to the newest sibling
//     dir + ".old-*" that has snapshot_done (the previous complete
//     checkpoint).
// A crash before the swap leaves the old checkpoint untouched plus a stale
// tmp folder, which load ignores and later saves delete (when the process
// that made it is gone). An exception during save (bad name, I/O error)
// removes the tmp folder and leaves `dir` untouched.
//
// save() replaces an existing `dir` only when it is a checkpoint (has
// snapshot_done) or is empty; it refuses to delete any other folder.
// Concurrent saves to the same `dir` are not supported.
//
// Errors are jobflow::Error, "[CheckPoint.save] ...", "[CheckPoint.load] ..."
// or "[CheckPoint.load_variable] ...", naming the path (and errno text for
// system-call failures).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "jobflow/tensor.h"

namespace jobflow::checkpoint_io {

// Writes `vars` as a complete checkpoint at `dir` (atomically; see above).
// Creates the parent folders when needed.
void save(const std::string& dir, const std::map<std::string, Tensor>& vars);

// Reads every variable folder (a sub-folder holding an `out` file) of the
// checkpoint at `dir`. Requires dir/snapshot_done; every variable needs its
// `meta`, and its `out` must hold exactly numel * dtype_size bytes.
std::map<std::string, Tensor> load(const std::string& dir);

// The shape and dtype a job defines for a variable, if any.
using SpecOf = std::function<std::optional<std::pair<Shape, DType>>(const std::string& name)>;
// What load_any() found.
struct Contents {
  std::map<std::string, Tensor> typed;  // with their shape and dtype
  // Folders without `meta` whose variable no job defines (yet): the bytes
  // of `out` as a (nbytes,) UInt8 tensor, to be typed when a job defines
  // the variable.
  std::map<std::string, Tensor> untyped;
};
// As load(), and also OneFlow 0.2/0.3 checkpoints, which wrote `out`
// without `meta`: such a variable is read with the spec `spec_of` gives
// (its `out` must hold exactly that many bytes; the error names the
// variable, the expected and the found sizes), or kept untyped when
// `spec_of` knows none. A variable that has `meta` is read by it; when
// `spec_of` also knows it, the caller checks the two agree.
Contents load_any(const std::string& dir, const SpecOf& spec_of);

// Reads one variable, for checkpoints whose `meta` may be missing (OneFlow
// 0.2's legacy format): the expectation gives the shape and dtype then.
// When `meta` exists it must agree with the expectation. Requires
// dir/snapshot_done, like load().
Tensor load_variable(const std::string& dir, const std::string& name, const Shape& expect_shape,
                     DType expect_dtype);

// The text save() writes into `meta` (exposed for tests and tools).
std::string meta_text(const Shape& shape, DType dtype);

}  // namespace jobflow::checkpoint_io

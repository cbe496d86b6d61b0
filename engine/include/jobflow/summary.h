// jobflow/summary.h — TensorBoard event files: training a person can watch.
//
// A FileWriter writes the files `tensorboard --logdir DIR` reads while they
// grow: one file per writer, named as TensorBoard's own writers name them,
//
//   DIR/events.out.tfevents.<seconds>.<hostname>.<pid>.<n>
//
// holding TFRecord-framed `Event` protocol buffers: first a file_version
// record ("brain.Event:2"), then one Event per scalar() or scalars() call
// (wall time, step, a Summary of scalar values). The file is flushed at
// every flush() (and when the writer is destroyed), so a reader sees each
// step as soon as it is written:
//
//   flow::summary::FileWriter w("runs/lenet");
//   w.scalar("loss", 0.42, step);
//   w.flush();
//
// A train job can log itself: FunctionConfig::summary_dir(dir) writes the
// mean of the returned loss and the learning rate used, at every step:
//
//   auto config = flow::function_config().summary_dir("runs/lenet");
//   auto train_job = flow::global_function(flow::Train, config, ...);
//
// The GStreamer element jobfunction does the same with its property
// summary-dir (docs/elements.md). Writing needs protobuf: a build without
// it (meson option onnx disabled, or no protoc) has the API, and a writer's
// construction throws an error that says so. The record framing below does
// not need protobuf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jobflow::summary {

// CRC-32C (Castagnoli, the checksum of TFRecord files) of `n` bytes,
// continuing from `crc` (0 to start). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(uint32_t crc);
// Appends one TFRecord to `out`: the length (uint64, little-endian), the
// masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data.
void append_record(std::string& out, std::string_view data);

class FileWriter {
 public:
  // Creates `logdir` (and its parents) when missing and a new event file in
  // it; writes the file_version record. Throws jobflow::Error naming the
  // folder or file when either cannot be made.
  explicit FileWriter(const std::string& logdir);
  ~FileWriter();  // flushes and closes; never throws
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // One Event at `step` with one scalar (stored as float32, TensorBoard's
  // simple_value). Buffered until flush().
  void scalar(const std::string& tag, double value, int64_t step);
  // One Event at `step` with several scalars.
  void scalars(const std::vector<std::pair<std::string, double>>& values, int64_t step);
  // Hands what was written to the file (readers see it). Throws on a write
  // error (disk full), naming the file.
  void flush();
  // The event file's path.
  const std::string& path() const;
  // Thread safety: every member may be called from any thread; calls are
  // serialized by the writer.

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace jobflow::summary

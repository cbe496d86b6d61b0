// jobflow/data.h — IDX files and the (Fashion-)MNIST loader.
//
// read_idx() reads one IDX file (the format MNIST and Fashion-MNIST ship
// in), plain or gzip-compressed. load_mnist() is the engine's counterpart of
// OneFlow's flow.data.load_mnist: the four standard files, split into
// batches of float32 images in [0, 1] and int32 labels.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "jobflow/strings.h"
#include "jobflow/tensor.h"

namespace jobflow::data {

// Reads an IDX file into a Tensor, gunzipping it transparently when the
// file starts with the gzip magic (1f 8b).
//
// Layout: two zero bytes, a type code, the rank, then `rank` big-endian
// uint32 dims, then the elements, big-endian, row-major. Type codes and the
// dtype they load as:
//   0x08 unsigned byte -> UInt8     0x0C int32  -> Int32
//   0x09 signed byte   -> Int8      0x0D float  -> Float32
//   0x0B int16         -> Int32 (widened; the engine has no int16 dtype)
//   0x0E double        -> Float64
//
// Everything is validated before the tensor is allocated: the magic, the
// type code, the rank (1..8), the dims product (no overflow) against the
// file's real size (for gzip: the uncompressed size). Errors are
// jobflow::Error with a message "[read_idx] <path>: <what is wrong>", e.g.
// "[read_idx] x.idx: truncated file: expected 7850 bytes, got 7000".
Tensor read_idx(const std::string& path);

// NumPy's .npy files (format versions 1.0, 2.0 and 3.0): one array, C
// order, little-endian. Element types and the dtype they load as:
//   <f4 float32, <f8 float64, <i4 int32, <i8 int64, |i1 int8, |u1 uint8,
//   |b1 bool (any nonzero byte is true)
// (a '=' or '|' byte order marker is read as little-endian). A 0-d array
// loads as a scalar tensor (shape ()). Errors: "[read_npy] <path>: <what>"
// (a Fortran-order array, another element type, a truncated file). The
// header and the size are validated before the tensor is allocated.
Tensor read_npy(const std::string& path);
// Writes `t` as a version 1.0 .npy file (C order, little-endian), atomically
// (a temporary file renamed into place). "[write_npy] <path>: ..." on errors.
void write_npy(const std::string& path, const Tensor& t);
// String arrays in .npy files (NumPy's <Un, UTF-32, and |Sn, bytes; NULs at
// the end of an element are padding, as NumPy reads them): the strings as
// UTF-8 and their shape (more than 2^20 elements of width 0 are refused:
// they take no bytes in the file but memory when read). write_npy_strings
// writes <Un when every string is UTF-8, else |Sn.
UnpackedStrings read_npy_strings(const std::string& path);
void write_npy_strings(const std::string& path, const UnpackedStrings& strings);

// A split of a dataset into batches, in file order.
struct Dataset {
  std::vector<Tensor> images;  // each (B, 1, H, W) float32 in [0, 1]
  std::vector<Tensor> labels;  // each (B,) int32
};

// The same samples in a new order (a permutation drawn from `seed`), cut
// into batches of the same size: for reshuffling the training set every
// epoch (seed = epoch). Images and labels stay paired.
Dataset shuffled(const Dataset& d, uint64_t seed);

struct Mnist {
  Dataset train, test;
};

// The folder load_mnist("") uses: $JOBFLOW_DATA when set and non-empty,
// otherwise /usr/share/datasets/fashion-mnist (Debian's
// dataset-fashion-mnist package).
std::string default_mnist_dir();

// Loads train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte from `dir` (each either
// plain or with a .gz suffix; the plain one wins when both exist).
//
// Images become float32 x / 255.0f, shaped (B, 1, 28, 28); labels int32,
// shaped (B,). Each split is cut into full batches in file order; the
// remainder (N % B samples) is dropped. test_batch == 0 means "same as
// train_batch"; dir == "" means default_mnist_dir().
//
// A missing folder or file is an Error naming the path and saying
// "install it with: apt-get install dataset-fashion-mnist". The four files
// are decoded in parallel; the whole set loads in a fraction of a second.
Mnist load_mnist(int64_t train_batch, int64_t test_batch = 0, const std::string& dir = "");

// The order shuffled(d, seed) puts d's n samples in (sample k of the result
// is sample order[k] of d, counted across batches).
std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed);

// One split held once, as the IDX files store it (a quarter of the float32
// batches' memory), batches made on demand: for training loops that need
// little memory. batch(i) equals load_mnist's batch i, and
// batch(i, shuffled_order(n, seed)) equals shuffled(load_mnist(...), seed)'s.
struct RawSplit {
  Tensor images;       // (N, H, W) uint8
  Tensor labels;       // (N,) uint8
  int64_t batch_size = 0;
  // Full batches (the remainder N % batch_size is dropped, as load_mnist does).
  int64_t batches() const;
  // The samples a batch covers: batches() * batch_size.
  int64_t samples() const { return batches() * batch_size; }
  // Batch i: images (B, 1, H, W) float32 x / 255.0f, labels (B,) int32; the
  // samples order[i * B .. i * B + B) when `order` is given (samples()
  // long, e.g. shuffled_order(samples(), epoch)), else i * B .. i * B + B.
  // "[RawSplit::batch] ..." for an index or order out of range.
  std::pair<Tensor, Tensor> batch(int64_t i, const std::vector<int64_t>& order = {}) const;
};
struct RawMnist {
  RawSplit train, test;
};
// load_mnist's files, checks and errors, held as RawSplits.
RawMnist load_mnist_raw(int64_t train_batch, int64_t test_batch = 0, const std::string& dir = "");

}  // namespace jobflow::data

// Tests for jobflow/data.h: read_idx on files written here (plain and gzip,
// several element types), its error messages, and load_mnist on the real
// Debian Fashion-MNIST files when they are installed.
#include "jobflow/data.h"

#include <algorithm>
#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "errors.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using jobflow::DType;
using jobflow::Error;
using jobflow::Tensor;
using jobflow::data::read_idx;
using jobflow::testing::expect_error;
using jobflow::testing::TempDir;

namespace {

void put_be32(std::vector<unsigned char>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(v >> s));
}

// IDX bytes: header + big-endian elements of `elem` bytes each.
std::vector<unsigned char> idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const void* data,
                                     size_t elem) {
  std::vector<unsigned char> b = {0, 0, type, static_cast<unsigned char>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    put_be32(b, d);
    n *= d;
  }
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < elem; ++k) b.push_back(p[i * elem + (elem - 1 - k)]);  // host LE -> BE
  return b;
}

void write_plain(const std::string& path, const std::vector<unsigned char>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  ASSERT_TRUE(f.good());
}

void write_gz(const std::string& path, const std::vector<unsigned char>& b) {
  gzFile g = gzopen(path.c_str(), "wb");
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(gzwrite(g, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  ASSERT_EQ(gzclose(g), Z_OK);
}

std::vector<unsigned char> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

// ------------------------------------------------------------ round trips

TEST(ReadIdx, UByteRoundTripPlainAndGz) {
  TempDir d;
  std::vector<uint8_t> v(2 * 3 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 37 + 1);
  const auto b = idx_bytes(0x08, {2, 3, 5}, v.data(), 1);
  write_plain(d / "u.idx", b);
  write_gz(d / "u.idx.gz", b);
  for (const char* name : {"u.idx", "u.idx.gz"}) {
    Tensor t = read_idx(d / name);
    EXPECT_EQ(t.dtype(), DType::UInt8) << name;
    EXPECT_EQ(t.shape(), (jobflow::Shape{2, 3, 5})) << name;
    EXPECT_EQ(t.to_vector<uint8_t>(), v) << name;
  }
}

TEST(ReadIdx, FloatRoundTripPlainAndGz) {
  TempDir d;
  std::vector<float> v = {0.0f, -1.5f, 3.25f, 1e-30f, -7e20f, 42.0f};
  const auto b = idx_bytes(0x0D, {6}, v.data(), 4);
  write_plain(d / "f.idx", b);
  write_gz(d / "f.idx.gz", b);
  for (const char* name : {"f.idx", "f.idx.gz"}) {
    Tensor t = read_idx(d / name);
    EXPECT_EQ(t.dtype(), DType::Float32) << name;
    EXPECT_EQ(t.shape(), (jobflow::Shape{6})) << name;
    EXPECT_TRUE(t.equal(Tensor::from<float>({6}, v))) << name;
  }
}

TEST(ReadIdx, OtherTypes) {
  TempDir d;
  std::vector<int8_t> s8 = {-128, -1, 0, 127};
  write_plain(d / "s8", idx_bytes(0x09, {2, 2}, s8.data(), 1));
  EXPECT_TRUE(read_idx(d / "s8").equal(Tensor::from<int8_t>({2, 2}, s8)));

  std::vector<int16_t> s16 = {-32768, -2, 5, 32767};
  write_gz(d / "s16.gz", idx_bytes(0x0B, {4}, s16.data(), 2));
  EXPECT_TRUE(read_idx(d / "s16.gz").equal(Tensor::from<int32_t>({4}, {-32768, -2, 5, 32767})));

  std::vector<int32_t> s32 = {INT32_MIN, -1, 0, 123456789};
  write_plain(d / "s32", idx_bytes(0x0C, {1, 4}, s32.data(), 4));
  EXPECT_TRUE(read_idx(d / "s32").equal(Tensor::from<int32_t>({1, 4}, s32)));

  std::vector<double> f64 = {3.141592653589793, -2.5e-300};
  write_gz(d / "f64.gz", idx_bytes(0x0E, {2, 1, 1}, f64.data(), 8));
  EXPECT_TRUE(read_idx(d / "f64.gz").equal(Tensor::from<double>({2, 1, 1}, f64)));
}

TEST(ReadIdx, ZeroSizedDim) {
  TempDir d;
  write_plain(d / "z", idx_bytes(0x08, {0, 28}, nullptr, 1));
  Tensor t = read_idx(d / "z");
  EXPECT_EQ(t.shape(), (jobflow::Shape{0, 28}));
  EXPECT_EQ(t.numel(), 0);
}

// ----------------------------------------------------------------- errors

TEST(ReadIdx, TruncatedPlain) {
  TempDir d;
  std::vector<uint8_t> v(100, 7);
  auto b = idx_bytes(0x08, {10, 10}, v.data(), 1);  // 12 + 100 = 112 bytes
  b.resize(90);
  write_plain(d / "t.idx", b);
  expect_error([&] { read_idx(d / "t.idx"); }, "[read_idx] " + (d / "t.idx") + ": ",
               {"truncated file: expected 112 bytes", "got 90"});
}

TEST(ReadIdx, TruncatedGzPayload) {
  TempDir d;
  std::vector<uint8_t> v(100, 7);
  auto b = idx_bytes(0x08, {10, 10}, v.data(), 1);
  b.resize(60);  // a complete gzip stream of a too-short file
  write_gz(d / "t.gz", b);
  expect_error([&] { read_idx(d / "t.gz"); }, "[read_idx] " + (d / "t.gz") + ": ",
               {"truncated file: expected 112 bytes", "got 60"});
}

TEST(ReadIdx, TruncatedGzStream) {
  TempDir d;
  std::vector<uint8_t> v(5000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((i * 7919) >> 3);
  write_gz(d / "full.gz", idx_bytes(0x08, {50, 100}, v.data(), 1));
  auto gz = read_all(d / "full.gz");
  gz.resize(gz.size() / 2);  // the compressed stream itself is cut
  write_plain(d / "cut.gz", gz);
  expect_error([&] { read_idx(d / "cut.gz"); }, "[read_idx] " + (d / "cut.gz") + ": ",
               {"truncated file: expected 5012 bytes", "got "});
}

TEST(ReadIdx, TrailingData) {
  TempDir d;
  std::vector<uint8_t> v(4, 1);
  auto b = idx_bytes(0x08, {4}, v.data(), 1);
  b.push_back(9);
  write_plain(d / "x", b);
  expect_error([&] { read_idx(d / "x"); }, "[read_idx] ", {"expected 12", "trailing data"});
  write_gz(d / "x.gz", b);
  expect_error([&] { read_idx(d / "x.gz"); }, "[read_idx] ", {"expected 12", "trailing data"});
}

TEST(ReadIdx, BadMagic) {
  TempDir d;
  write_plain(d / "m1", {0x12, 0x34, 0x08, 0x01, 0, 0, 0, 0});
  expect_error([&] { read_idx(d / "m1"); }, "[read_idx] " + (d / "m1") + ": ", {"bad magic 0x12340801"});
  write_plain(d / "m2", {0, 0, 0x0A, 0x01, 0, 0, 0, 0});
  expect_error([&] { read_idx(d / "m2"); }, "[read_idx] ", {"bad magic", "unknown element type code 0x0A"});
  write_plain(d / "m3", {0, 0, 0x08, 0x09});
  expect_error([&] { read_idx(d / "m3"); }, "[read_idx] ", {"rank 9 is out of range 1..8"});
  write_gz(d / "m4.gz", {0, 0, 0x08, 0x00});
  expect_error([&] { read_idx(d / "m4.gz"); }, "[read_idx] ", {"rank 0 is out of range 1..8"});
  write_plain(d / "m5", {0, 0});
  expect_error([&] { read_idx(d / "m5"); }, "[read_idx] ", {"truncated file"});
}

TEST(ReadIdx, HugeDimsAreRejectedBeforeAllocating) {
  TempDir d;
  // Claims 4e9 * 4e9 doubles: must fail on the size check, not allocate.
  std::vector<unsigned char> b = {0, 0, 0x0E, 2};
  put_be32(b, 4000000000u);
  put_be32(b, 4000000000u);
  write_plain(d / "h", b);
  expect_error([&] { read_idx(d / "h"); }, "[read_idx] ", {"too large"});
  // The bytes in the file fit, the int32 tensor int16 widens to does not
  // (2^31 * 2^30 elements: 2^62 bytes of int16, 2^63 of int32).
  std::vector<unsigned char> w = {0, 0, 0x0B, 2};
  put_be32(w, 0x80000000u);
  put_be32(w, 0x40000000u);
  write_plain(d / "w", w);
  expect_error([&] { read_idx(d / "w"); }, "[read_idx] ", {"dims (2147483648, 1073741824) are too large: the byte size"});
  std::vector<unsigned char> c = {0, 0, 0x08, 1};
  put_be32(c, 3000000000u);  // 3 GB of bytes claimed, 8 present
  write_gz(d / "h.gz", c);
  expect_error([&] { read_idx(d / "h.gz"); }, "[read_idx] ", {"truncated file: expected 3000000008 bytes", "got 8"});
}

TEST(ReadIdx, MissingFile) {
  expect_error([] { read_idx("/nonexistent/x.idx"); }, "[read_idx] /nonexistent/x.idx: ", {"cannot open"});
}

// ------------------------------------------------------------ load_mnist

TEST(LoadMnist, MissingFolderSaysHowToInstall) {
  expect_error([] { jobflow::data::load_mnist(100, 0, "/nonexistent/mnist"); }, "[load_mnist] /nonexistent/mnist",
               {"apt-get install dataset-fashion-mnist"});
  TempDir d;  // exists but empty
  expect_error([&] { jobflow::data::load_mnist(100, 0, d.path()); },
               "[load_mnist] " + (d / "train-images-idx3-ubyte"), {"apt-get install dataset-fashion-mnist"});
}

TEST(LoadMnist, SmallSyntheticSet) {
  TempDir d;
  // 7 train / 5 test images of 28x28; batch 3 (train) and 2 (test).
  auto make = [&](const std::string& prefix, uint32_t n, bool gz) {
    std::vector<uint8_t> px(n * 28 * 28), lb(n);
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i % 256);
    for (uint32_t i = 0; i < n; ++i) lb[i] = static_cast<uint8_t>(i % 10);
    auto ib = idx_bytes(0x08, {n, 28, 28}, px.data(), 1);
    auto lbb = idx_bytes(0x08, {n}, lb.data(), 1);
    if (gz) {
      write_gz(d / (prefix + "-images-idx3-ubyte.gz"), ib);
      write_gz(d / (prefix + "-labels-idx1-ubyte.gz"), lbb);
    } else {
      write_plain(d / (prefix + "-images-idx3-ubyte"), ib);
      write_plain(d / (prefix + "-labels-idx1-ubyte"), lbb);
    }
  };
  make("train", 7, true);
  make("t10k", 5, false);
  auto m = jobflow::data::load_mnist(3, 2, d.path());
  ASSERT_EQ(m.train.images.size(), 2u);  // 7 / 3, remainder dropped
  ASSERT_EQ(m.test.images.size(), 2u);   // 5 / 2
  EXPECT_EQ(m.train.images[1].shape(), (jobflow::Shape{3, 1, 28, 28}));
  EXPECT_EQ(m.train.labels[1].shape(), (jobflow::Shape{3}));
  EXPECT_EQ(m.train.labels[1].dtype(), DType::Int32);
  EXPECT_EQ(m.train.labels[1].to_vector<int32_t>(), (std::vector<int32_t>{3, 4, 5}));
  // Pixel k of batch 1 is byte (3*784 + k) % 256, scaled by 1/255 in float32.
  const float* p = m.train.images[1].data<float>();
  for (int k : {0, 1, 100, 2351}) EXPECT_EQ(p[k], static_cast<float>((3 * 784 + k) % 256) / 255.0f);
  EXPECT_EQ(m.test.images[0].shape(), (jobflow::Shape{2, 1, 28, 28}));

  expect_error([&] { jobflow::data::load_mnist(8, 2, d.path()); }, "[load_mnist] ",
               {"train batch size 8 is larger than the 7 train samples"});
  expect_error([&] { jobflow::data::load_mnist(0, 2, d.path()); }, "[load_mnist] ", {"must be positive"});
}

TEST(LoadMnistRaw, BatchesEqualLoadMnistsInOrderAndShuffled) {
  TempDir d;
  // 11 train / 5 test images of 28x28 with distinct bytes and labels.
  auto make = [&](const std::string& prefix, uint32_t n) {
    std::vector<uint8_t> px(n * 28 * 28), lb(n);
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 7 + i / 784) % 256);
    for (uint32_t i = 0; i < n; ++i) lb[i] = static_cast<uint8_t>(i % 10);
    write_plain(d / (prefix + "-images-idx3-ubyte"), idx_bytes(0x08, {n, 28, 28}, px.data(), 1));
    write_plain(d / (prefix + "-labels-idx1-ubyte"), idx_bytes(0x08, {n}, lb.data(), 1));
  };
  make("train", 11);
  make("t10k", 5);
  const auto m = jobflow::data::load_mnist(3, 2, d.path());
  const auto raw = jobflow::data::load_mnist_raw(3, 2, d.path());
  EXPECT_EQ(raw.train.images.dtype(), DType::UInt8);  // held as stored
  EXPECT_EQ(raw.train.images.shape(), (jobflow::Shape{11, 28, 28}));
  ASSERT_EQ(raw.train.batches(), 3);  // 11 / 3, remainder dropped
  ASSERT_EQ(raw.train.samples(), 9);
  ASSERT_EQ(raw.test.batches(), 2);
  for (int64_t i = 0; i < 3; ++i) {
    const auto [img, lab] = raw.train.batch(i);
    EXPECT_TRUE(img.equal(m.train.images[i])) << i;
    EXPECT_TRUE(lab.equal(m.train.labels[i])) << i;
  }
  const auto [timg, tlab] = raw.test.batch(1);
  EXPECT_TRUE(timg.equal(m.test.images[1]));
  EXPECT_TRUE(tlab.equal(m.test.labels[1]));
  // An epoch's order: the batches of shuffled(load_mnist, seed).
  for (uint64_t seed : {0u, 5u}) {
    const auto s = jobflow::data::shuffled(m.train, seed);
    const std::vector<int64_t> order = jobflow::data::shuffled_order(raw.train.samples(), seed);
    for (int64_t i = 0; i < 3; ++i) {
      const auto [img, lab] = raw.train.batch(i, order);
      EXPECT_TRUE(img.equal(s.images[i])) << seed << " " << i;
      EXPECT_TRUE(lab.equal(s.labels[i])) << seed << " " << i;
    }
  }
  expect_error([&] { raw.train.batch(3); }, "[RawSplit::batch] ", {"batch 3 of 3"});
  expect_error([&] { raw.train.batch(0, {0, 1}); }, "[RawSplit::batch] ", {"an order of 2 samples for 9"});
  expect_error([&] { jobflow::data::load_mnist_raw(12, 2, d.path()); }, "[load_mnist] ",
               {"train batch size 12 is larger than the 11 train samples"});
}

TEST(LoadMnist, RealFashionMnist) {
  const std::string dir = jobflow::data::default_mnist_dir();
  if (!fs::is_directory(dir))
    GTEST_SKIP() << dir << " is missing; install it with: apt-get install dataset-fashion-mnist";
  const auto t0 = std::chrono::steady_clock::now();
  auto m = jobflow::data::load_mnist(100);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("load_mnist(100) from %s: %.3f s\n", dir.c_str(), secs);  // reported, not asserted

  ASSERT_EQ(m.train.images.size(), 600u);
  ASSERT_EQ(m.train.labels.size(), 600u);
  ASSERT_EQ(m.test.images.size(), 100u);  // test_batch 0 = same as train
  ASSERT_EQ(m.test.labels.size(), 100u);
  EXPECT_EQ(m.train.images[0].shape(), (jobflow::Shape{100, 1, 28, 28}));
  EXPECT_EQ(m.train.images[0].dtype(), DType::Float32);
  EXPECT_EQ(m.train.labels[0].shape(), (jobflow::Shape{100}));
  EXPECT_EQ(m.train.labels[0].dtype(), DType::Int32);
  // Fashion-MNIST's first training sample is an ankle boot (class 9); the
  // first test sample too.
  EXPECT_EQ(m.train.labels[0].data<int32_t>()[0], 9);
  EXPECT_EQ(m.test.labels[0].data<int32_t>()[0], 9);

  float lo = 1, hi = 0;
  int64_t counts[10] = {};
  for (const auto& b : m.train.images)
    for (float v : b.to_vector<float>()) lo = std::min(lo, v), hi = std::max(hi, v);
  for (const auto* split : {&m.train.labels, &m.test.labels})
    for (const auto& b : *split)
      for (int32_t l : b.to_vector<int32_t>()) {
        ASSERT_GE(l, 0);
        ASSERT_LE(l, 9);
        ++counts[l];
      }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
  for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[c], 7000) << "class " << c;  // 6000 train + 1000 test

  // Batch size that does not divide 60000: the remainder is dropped.
  auto m2 = jobflow::data::load_mnist(7000, 3000);
  EXPECT_EQ(m2.train.images.size(), 8u);
  EXPECT_EQ(m2.test.images.size(), 3u);
  EXPECT_TRUE(m2.train.labels[0].to_vector<int32_t>()[0] == 9);
}

TEST(Shuffled, KeepsImageLabelPairsAndEverySample) {
  using jobflow::Tensor;
  jobflow::data::Dataset d;
  for (int b = 0; b < 3; ++b) {
    Tensor img({2, 1, 2, 2}, jobflow::Float);
    Tensor lab({2}, jobflow::Int32);
    for (int k = 0; k < 2; ++k) {
      const int id = b * 2 + k;
      lab.data<int32_t>()[k] = id;
      for (int p = 0; p < 4; ++p) img.data<float>()[k * 4 + p] = static_cast<float>(id * 10 + p);
    }
    d.images.push_back(img);
    d.labels.push_back(lab);
  }
  auto s0 = jobflow::data::shuffled(d, 0), s1 = jobflow::data::shuffled(d, 1);
  std::vector<int> seen, order0, order1;
  for (size_t b = 0; b < 3; ++b) {
    ASSERT_EQ(s0.images[b].shape(), (jobflow::Shape{2, 1, 2, 2}));
    for (int k = 0; k < 2; ++k) {
      const int id = s0.labels[b].data<int32_t>()[k];
      for (int p = 0; p < 4; ++p) EXPECT_EQ(s0.images[b].data<float>()[k * 4 + p], id * 10 + p) << "pair broken";
      seen.push_back(id);
      order0.push_back(id);
      order1.push_back(s1.labels[b].data<int32_t>()[k]);
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_NE(order0, order1);  // different epochs, different orders
  EXPECT_EQ(d.labels[0].data<int32_t>()[0], 0);  // the input is untouched
}

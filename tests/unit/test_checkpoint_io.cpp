// Tests for jobflow/checkpoint_io.h: OneFlow's checkpoint folder layout,
// bit-exact round trips, the meta text, completeness checks, and that a
// failed or crashed save never damages the existing checkpoint.
#include "jobflow/checkpoint_io.h"

#include "checkpoint_io_testing.h"
#include "errors.h"
#include "temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

namespace fs = std::filesystem;
namespace ckpt = jobflow::checkpoint_io;
using jobflow::DType;
using jobflow::Error;
using jobflow::Shape;
using jobflow::Tensor;
using jobflow::testing::expect_error;
using jobflow::testing::TempDir;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spit(const std::string& path, const std::string& s) {
  std::ofstream f(path, std::ios::binary);
  f << s;
}

// Siblings of `dir` in its parent other than dir itself (tmp/old leftovers).
std::vector<std::string> siblings(const std::string& dir) {
  std::vector<std::string> out;
  const std::string base = fs::path(dir).filename().string();
  for (const auto& e : fs::directory_iterator(fs::path(dir).parent_path())) {
    const std::string n = e.path().filename().string();
    if (n != base && n.rfind(base, 0) == 0) out.push_back(n);
  }
  return out;
}

std::map<std::string, Tensor> sample_vars(float bias) {
  std::vector<float> w(6);
  for (int i = 0; i < 6; ++i) w[i] = bias + 0.1f * static_cast<float>(i);
  return {
      {"conv1-weight", Tensor::from<float>({2, 3}, w)},
      {"fc.bias", Tensor::from<float>({3}, {bias, -bias, 0.5f})},
      {"step", Tensor::from<int64_t>({1}, {static_cast<int64_t>(bias * 10)})},
  };
}

void expect_same(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, v] : a) {
    ASSERT_TRUE(b.count(k)) << k;
    EXPECT_TRUE(v.equal(b.at(k))) << k << ": " << v.str() << " vs " << b.at(k).str();
  }
}

}  // namespace

TEST(CheckpointIo, RoundTripBitExact) {
  TempDir d;
  std::vector<float> f = {0.0f, -0.0f, 1.0f / 3.0f, std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::infinity(), std::nanf("0x123"), -1e38f, 7.0f};
  std::vector<double> g = {M_PI, -M_E, std::numeric_limits<double>::denorm_min(), 1e308, std::nan("0x456"), 0.1};
  std::vector<int32_t> n = {INT32_MIN, -1, 0, 1, INT32_MAX, 42};
  std::map<std::string, Tensor> vars = {
      {"w", Tensor::from<float>({2, 4}, f)},
      {"d.x-y", Tensor::from<double>({3, 1, 2}, g)},
      {"ids", Tensor::from<int32_t>({6}, n)},
      {"scalar", Tensor::scalar<float>(2.5f)},
      {"u8", Tensor::from<uint8_t>({3}, {0, 128, 255})},
      {"i8", Tensor::from<int8_t>({2}, {-128, 127})},
      {"i64", Tensor::from<int64_t>({2}, {INT64_MIN, INT64_MAX})},
  };
  const std::string dir = d / "ckpt";
  ckpt::save(dir, vars);
  EXPECT_TRUE(fs::is_regular_file(dir + "/snapshot_done"));
  EXPECT_EQ(fs::file_size(dir + "/snapshot_done"), 0u);
  // `out` is the raw little-endian bytes of the tensor.
  EXPECT_EQ(slurp(dir + "/w/out"), std::string(static_cast<const char*>(vars["w"].raw()), 32));
  auto back = ckpt::load(dir);
  expect_same(vars, back);
  EXPECT_TRUE(siblings(dir).empty());

  // load_variable agrees (meta present, expectation matches).
  EXPECT_TRUE(ckpt::load_variable(dir, "d.x-y", {3, 1, 2}, DType::Float64).equal(vars["d.x-y"]));
}

TEST(CheckpointIo, MetaTextFormat) {
  TempDir d;
  const std::string dir = d / "c";
  ckpt::save(dir, {{"w", Tensor({32, 1}, DType::Float32)},
                   {"b", Tensor({10}, DType::Float64)},
                   {"n", Tensor({2, 3, 4}, DType::Int32)},
                   {"s", Tensor({}, DType::Int64)},
                   {"u", Tensor({1}, DType::UInt8)},
                   {"c", Tensor({1}, DType::Int8)}});
  // Exactly protobuf's text_format.MessageToString(VariableMetaInfo).
  EXPECT_EQ(slurp(dir + "/w/meta"), "shape {\n  dim: 32\n  dim: 1\n}\ndata_type: kFloat\n");
  EXPECT_EQ(slurp(dir + "/b/meta"), "shape {\n  dim: 10\n}\ndata_type: kDouble\n");
  EXPECT_EQ(slurp(dir + "/n/meta"), "shape {\n  dim: 2\n  dim: 3\n  dim: 4\n}\ndata_type: kInt32\n");
  EXPECT_EQ(slurp(dir + "/s/meta"), "shape {\n}\ndata_type: kInt64\n");
  EXPECT_EQ(slurp(dir + "/u/meta"), "shape {\n  dim: 1\n}\ndata_type: kUInt8\n");
  EXPECT_EQ(slurp(dir + "/c/meta"), "shape {\n  dim: 1\n}\ndata_type: kInt8\n");
  EXPECT_EQ(ckpt::meta_text({32, 1}, DType::Float32), "shape {\n  dim: 32\n  dim: 1\n}\ndata_type: kFloat\n");
}

TEST(CheckpointIo, ReadsOtherMetaSpellings) {
  TempDir d;
  const std::string dir = d / "c";
  ckpt::save(dir, {{"a", Tensor({2, 2}, DType::Float32)}, {"b", Tensor({3}, DType::Int32)}});
  // One-line form, numeric enum, a later version's extra `stride` field.
  spit(dir + "/a/meta", "shape { dim: 2 dim: 2 } stride { dim: 2 dim: 1 } data_type: 2");
  spit(dir + "/b/meta", "# comment\nshape {\n  dim: 3\n}\ndata_type: kInt32\n");
  auto m = ckpt::load(dir);
  EXPECT_EQ(m["a"].shape(), (Shape{2, 2}));
  EXPECT_EQ(m["a"].dtype(), DType::Float32);
  EXPECT_EQ(m["b"].dtype(), DType::Int32);
  // A 16-bit type read over 12 bytes of int32 is a size error; six bytes as
  // OneFlow's number for kFloat16 (9) load as float16.
  spit(dir + "/b/meta", "shape {\n  dim: 3\n}\ndata_type: kFloat16\n");
  expect_error([&] { ckpt::load(dir); }, "[CheckPoint.load] ", {"variable 'b'", "expected 6 bytes for (3,) float16"});
  spit(dir + "/b/meta", "shape {\n  dim: 6\n}\ndata_type: 9\n");
  EXPECT_EQ(ckpt::load(dir)["b"].dtype(), DType::Float16);
  spit(dir + "/b/meta", "shape {\n  dim: 3\n}\ndata_type: kTensorBuffer\n");
  expect_error([&] { ckpt::load(dir); }, "[CheckPoint.load] ", {"variable 'b'", "unsupported data_type 'kTensorBuffer'"});
}

TEST(CheckpointIo, LoadRequiresSnapshotDone) {
  TempDir d;
  const std::string dir = d / "c";
  ckpt::save(dir, sample_vars(1));
  fs::remove(dir + "/snapshot_done");
  expect_error([&] { ckpt::load(dir); }, "[CheckPoint.load] " + dir + " is not a complete checkpoint (no snapshot_done)",
               {});
  expect_error([&] { ckpt::load_variable(dir, "fc.bias", {3}, DType::Float32); },
               "[CheckPoint.load_variable] " + dir + " is not a complete checkpoint (no snapshot_done)", {});
  expect_error([&] { ckpt::load(d / "missing"); }, "[CheckPoint.load] " + (d / "missing") + " does not exist", {});
}

TEST(CheckpointIo, SizeMismatchNamesTheVariable) {
  TempDir d;
  const std::string dir = d / "c";
  ckpt::save(dir, sample_vars(1));
  spit(dir + "/fc.bias/out", std::string(10, 'x'));  // 12 bytes expected
  expect_error([&] { ckpt::load(dir); }, "[CheckPoint.load] " + dir + ": variable 'fc.bias'",
               {"has 10 bytes, expected 12", "(3,) float32"});
}

// A `meta` whose dims multiply past 64 bits (issue 14): named, never a
// wrapped size compared with the file's.
TEST(CheckpointIo, MetaWhoseSizeOverflowsNamesTheVariableAndDims) {
  TempDir d;
  const std::string dir = d / "c";
  ckpt::save(dir, sample_vars(1));
  spit(dir + "/fc.bias/meta", "shape { dim: 1099511627776 dim: 1099511627776 } data_type: kFloat");
  expect_error([&] { ckpt::load(dir); }, "[CheckPoint.load] " + dir + ": variable 'fc.bias': ",
               {"(1099511627776, 1099511627776) float32: the element count overflows 64 bits"});
  // 2^62 floats: the count fits, the bytes (2^64) do not; wrapped, they would be 0.
  spit(dir + "/fc.bias/meta", "shape { dim: 4611686018427387904 } data_type: kFloat");
  spit(dir + "/fc.bias/out", "");
  expect_error([&] { ckpt::load(dir); }, "[CheckPoint.load] " + dir + ": variable 'fc.bias': ",
               {"(4611686018427387904,) float32: the byte size"});
}

TEST(CheckpointIo, LoadVariableWithoutMeta) {
  TempDir d;
  const std::string dir = d / "c";
  auto vars = sample_vars(2);
  ckpt::save(dir, vars);
  fs::remove(dir + "/conv1-weight/meta");
  // load() cannot know the shape: it says so and points to load_variable.
  expect_error([&] { ckpt::load(dir); }, "[CheckPoint.load] ", {"variable 'conv1-weight' has no meta", "load_variable"});
  // With the expectation it loads bit-exactly (any shape with the same size).
  EXPECT_TRUE(ckpt::load_variable(dir, "conv1-weight", {2, 3}, DType::Float32).equal(vars["conv1-weight"]));
  EXPECT_TRUE(ckpt::load_variable(dir, "conv1-weight", {6}, DType::Int32).defined());
  expect_error([&] { ckpt::load_variable(dir, "conv1-weight", {4, 3}, DType::Float32); },
               "[CheckPoint.load_variable] " + dir + ": variable 'conv1-weight'",
               {"has 24 bytes, expected 48", "(4, 3) float32"});
  // With meta present, a different expectation is reported with both sides.
  expect_error([&] { ckpt::load_variable(dir, "fc.bias", {4}, DType::Float32); },
               "[CheckPoint.load_variable] " + dir + ": variable 'fc.bias'",
               {"meta says (3,) float32", "expected (4,) float32"});
  expect_error([&] { ckpt::load_variable(dir, "fc.bias", {3}, DType::Int32); },
               "[CheckPoint.load_variable] ", {"meta says (3,) float32", "expected (3,) int32"});
  expect_error([&] { ckpt::load_variable(dir, "nope", {3}, DType::Int32); }, "[CheckPoint.load_variable] ",
               {"no variable 'nope'"});
}

TEST(CheckpointIo, RejectsBadNames) {
  TempDir d;
  for (const char* bad : {"a/b", "..", "../x", "a..b", "", ".", "snapshot_done"}) {
    expect_error([&] { ckpt::save(d / "c", {{bad, Tensor({1}, DType::Float32)}}); }, "[CheckPoint.save] ",
                 {"invalid variable name"});
    EXPECT_FALSE(fs::exists(d / "c")) << bad;
    EXPECT_TRUE(siblings(d / "c").empty()) << bad;
  }
  expect_error([&] { ckpt::load_variable(d / "c", "../etc", {1}, DType::Float32); }, "[CheckPoint.load_variable] ",
               {"invalid variable name '../etc'"});
}

TEST(CheckpointIo, OverwriteReplacesAtomically) {
  TempDir d;
  const std::string dir = d / "c";
  ckpt::save(dir, sample_vars(1));
  auto v2 = sample_vars(2);
  v2.erase("step");  // the new checkpoint has fewer variables: no leftovers
  ckpt::save(dir + "/", v2);  // trailing slash is fine
  expect_same(v2, ckpt::load(dir));
  EXPECT_TRUE(siblings(dir).empty());
}

TEST(CheckpointIo, OverwriteWithPlainRenames) {
  // The fallback used where RENAME_EXCHANGE is unsupported.
  TempDir d;
  const std::string dir = d / "c";
  if (!ckpt::testing::kEnabled) GTEST_SKIP() << "built without -Dtest_hooks=true";
  ckpt::save(dir, sample_vars(1));
  ckpt::testing::force_plain_rename(true);
  auto v2 = sample_vars(3);
  ckpt::save(dir, v2);
  ckpt::testing::force_plain_rename(false);
  expect_same(v2, ckpt::load(dir));
  EXPECT_TRUE(siblings(dir).empty());
}

TEST(CheckpointIo, FailedSaveMidwayKeepsOldCheckpoint) {
  TempDir d;
  const std::string dir = d / "c";
  auto v1 = sample_vars(1);
  ckpt::save(dir, v1);
  // "a" and "b" are written first (map order), then "z/bad" throws.
  std::map<std::string, Tensor> v2 = {{"a", Tensor({1000}, DType::Float32)},
                                      {"b", Tensor({10}, DType::Int32)},
                                      {"z/bad", Tensor({1}, DType::Float32)}};
  expect_error([&] { ckpt::save(dir, v2); }, "[CheckPoint.save] ", {"invalid variable name 'z/bad'"});
  expect_same(v1, ckpt::load(dir));
  EXPECT_TRUE(siblings(dir).empty());  // the tmp folder was removed
  // An undefined tensor fails the same way.
  expect_error([&] { ckpt::save(dir, {{"e", Tensor()}}); }, "[CheckPoint.save] ", {"'e' is an empty Tensor"});
  expect_same(v1, ckpt::load(dir));
}

TEST(CheckpointIo, CrashLeftoversNeverDamageTheCheckpoint) {
  TempDir d;
  const std::string dir = d / "c";
  auto v1 = sample_vars(1);
  ckpt::save(dir, v1);
  // A save that died while writing (pid 999999999 cannot exist): a partial
  // tmp folder without snapshot_done.
  const std::string stale = dir + ".tmp-999999999-0";
  fs::create_directories(stale + "/fc.bias");
  spit(stale + "/fc.bias/out", "junk");
  expect_same(v1, ckpt::load(dir));  // ignored by load
  // The next save succeeds and clears the stale leftover.
  auto v2 = sample_vars(2);
  ckpt::save(dir, v2);
  expect_same(v2, ckpt::load(dir));
  EXPECT_TRUE(siblings(dir).empty());
}

TEST(CheckpointIo, CrashBetweenRenamesFallsBackToOld) {
  // The fallback path's one window: dir renamed to dir.old-*, the new one
  // not yet renamed in. load() must find the complete old checkpoint.
  TempDir d;
  const std::string dir = d / "c";
  auto v1 = sample_vars(1);
  ckpt::save(dir, v1);
  fs::rename(dir, dir + ".old-999999999-0");
  fs::create_directories(dir + ".tmp-999999999-1");  // the new one, unfinished
  expect_same(v1, ckpt::load(dir));
  EXPECT_TRUE(ckpt::load_variable(dir, "fc.bias", {3}, DType::Float32).equal(v1["fc.bias"]));
  // An old sibling without snapshot_done is never used.
  fs::remove(dir + ".old-999999999-0/snapshot_done");
  expect_error([&] { ckpt::load(dir); }, "[CheckPoint.load] " + dir + " does not exist", {});
  // Saving again repairs everything.
  auto v2 = sample_vars(5);
  ckpt::save(dir, v2);
  expect_same(v2, ckpt::load(dir));
  EXPECT_TRUE(siblings(dir).empty());
}

TEST(CheckpointIo, RefusesToReplaceNonCheckpointFolder) {
  TempDir d;
  const std::string dir = d / "precious";
  fs::create_directories(dir);
  spit(dir + "/notes.txt", "keep me");
  expect_error([&] { ckpt::save(dir, sample_vars(1)); }, "[CheckPoint.save] " + dir,
               {"is not a checkpoint (no snapshot_done); refusing to replace it"});
  EXPECT_EQ(slurp(dir + "/notes.txt"), "keep me");
  // An empty folder is fine, and so are missing parent folders.
  fs::create_directories(d / "empty");
  ckpt::save(d / "empty", sample_vars(1));
  ckpt::save(d / "x/y/z", sample_vars(1));
  expect_same(sample_vars(1), ckpt::load(d / "x/y/z"));
}

TEST(CheckpointIo, SaveErrorsNameThePathAndErrno) {
  TempDir d0;
  spit(d0 / "file", "not a folder");
  expect_error([&] { ckpt::save(d0 / "file/c", sample_vars(1)); }, "[CheckPoint.save] " + (d0 / "file"),
               {"cannot create folder"});
  expect_error([&] { ckpt::save(d0 / "file", sample_vars(1)); }, "[CheckPoint.save] " + (d0 / "file"),
               {"exists and is not a folder"});
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions are not enforced";
  TempDir d;
  fs::create_directories(d / "ro");
  fs::permissions(d / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  expect_error([&] { ckpt::save(d / "ro/c", sample_vars(1)); }, "[CheckPoint.save] " + (d / "ro/c"),
               {"Permission denied"});
  fs::permissions(d / "ro", fs::perms::owner_all);
}

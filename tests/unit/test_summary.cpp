// TensorBoard event files (summary.h): CRC-32C and TFRecord framing against
// known values, the file a FileWriter makes, and FunctionConfig::summary_dir.
// The values inside the Event protos are checked by TensorBoard's own reader
// in tests/summary/test_tensorboard_events.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <jobflow/jobflow.h>
#include <jobflow/summary.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "errors.h"
#include "temp_dir.h"

namespace flow = jobflow;
namespace fs = std::filesystem;
using flow::Blob;
using flow::Tensor;
using flow::testing::error_of;

namespace {

std::string tmpdir(const std::string& name) { return flow::testing::test_tmp_path("summary_" + name).string(); }

std::string bytes_of(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

uint64_t le(const std::string& s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// Splits a TFRecord file into its records, checking both CRCs of each.
std::vector<std::string> read_records(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t at = 0;
  while (at < all.size()) {
    EXPECT_LE(at + 12, all.size()) << "a truncated header in " << path;
    if (at + 12 > all.size()) break;
    const uint64_t n = le(all, at, 8);
    EXPECT_EQ(le(all, at + 8, 4), flow::summary::masked_crc32c(flow::summary::crc32c(all.data() + at, 8)));
    EXPECT_LE(at + 12 + n + 4, all.size()) << "a truncated record in " << path;
    if (at + 12 + n + 4 > all.size()) break;
    std::string data = all.substr(at + 12, n);
    EXPECT_EQ(le(all, at + 12 + n, 4), flow::summary::masked_crc32c(flow::summary::crc32c(data.data(), data.size())));
    out.push_back(std::move(data));
    at += 12 + n + 4;
  }
  return out;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// True in a build that writes event files (protobuf and protoc).
bool can_write(std::string* why) {
  try {
    flow::summary::FileWriter w(tmpdir("probe"));
    return true;
  } catch (const flow::Error& e) {
    *why = e.what();
    return false;
  }
}

}  // namespace

TEST(Crc32c, KnownValues) {
  using flow::summary::crc32c;
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC catalogue's check value
  // RFC 3720 (iSCSI) B.4 test vectors.
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string inc;
  for (int i = 0; i < 32; ++i) inc.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), inc.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c("", 0), 0u);
  // Continuing a CRC over a second piece equals the CRC of the whole.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

TEST(Crc32c, Mask) {
  using flow::summary::masked_crc32c;
  EXPECT_EQ(masked_crc32c(0), 0xA282EAD8u);
  // ((c >> 15) | (c << 17)) + 0xa282ead8, modulo 2^32, written out.
  EXPECT_EQ(masked_crc32c(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xA282EAD8u);
  EXPECT_EQ(masked_crc32c(0xFFFFFFFFu), 0xA282EAD7u);  // rotation keeps all ones; + mask wraps
}

TEST(TFRecord, FramingOfKnownData) {
  std::string out;
  flow::summary::append_record(out, "hello");
  // length 5, masked CRC-32C of the length, "hello", masked CRC-32C of it
  // (computed independently with Python's crcmod 'crc-32c').
  const std::string want = bytes_of({0x05, 0, 0, 0, 0, 0, 0, 0, 0xea, 0xb2, 0x04, 0x3e}) + "hello" +
                           bytes_of({0xbb, 0x1f, 0x1c, 0x19});
  EXPECT_EQ(out, want);
  // Records append; an empty record is 16 bytes.
  flow::summary::append_record(out, "");
  ASSERT_EQ(out.size(), want.size() + 16);
  EXPECT_EQ(le(out, want.size(), 8), 0u);
  EXPECT_EQ(le(out, want.size() + 12, 4), flow::summary::masked_crc32c(0));
}

TEST(FileWriter, NamesAndFramesItsFile) {
  std::string why;
  if (!can_write(&why)) GTEST_SKIP() << why;
  const std::string dir = tmpdir("writer") + "/nested/run";  // made with its parents
  std::string path;
  {
    flow::summary::FileWriter w(dir);
    path = w.path();
    EXPECT_EQ(fs::path(path).parent_path(), fs::path(dir));
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const std::regex name("events\\.out\\.tfevents\\.[0-9]{10}\\." + std::string(host) + "\\." +
                          std::to_string(getpid()) + "\\.[0-9]+");
    EXPECT_TRUE(std::regex_match(fs::path(path).filename().string(), name)) << path;
    // The version record is in the file before anything else is written.
    std::vector<std::string> first = read_records(path);
    ASSERT_EQ(first.size(), 1u);
    EXPECT_NE(first[0].find("brain.Event:2"), std::string::npos);
    w.scalar("loss", 0.5, 1);
    w.scalars({{"loss", 0.25}, {"learning_rate", 0.1}}, 2);
    w.flush();  // readers see both events now, with the writer still open
    std::vector<std::string> recs = read_records(path);
    ASSERT_EQ(recs.size(), 3u);
    EXPECT_NE(recs[1].find("loss"), std::string::npos);
    EXPECT_NE(recs[2].find("learning_rate"), std::string::npos);
    EXPECT_EQ(recs[2].find("brain.Event"), std::string::npos);  // a summary, not a version record
  }
  // A second writer in the same folder makes its own file.
  flow::summary::FileWriter w2(dir);
  EXPECT_NE(w2.path(), path);
  EXPECT_EQ(event_files(dir).size(), 2u);
}

TEST(FileWriter, ErrorsNameTheFolder) {
  const std::string base = tmpdir("blocked");
  fs::create_directories(base);
  std::ofstream(base + "/file") << "x";
  const std::string e = error_of([&] { flow::summary::FileWriter w(base + "/file"); });
  EXPECT_EQ(e.rfind("[summary.FileWriter] ", 0), 0u) << e;
  EXPECT_NE(e.find(base + "/file"), std::string::npos) << e;
  const std::string empty = error_of([&] { flow::summary::FileWriter w(""); });
  EXPECT_EQ(empty.rfind("[summary.FileWriter] ", 0), 0u) << empty;
}

namespace {
flow::optimizer::PiecewiseConstantScheduler schedule() { return {{2}, {0.1, 0.05}}; }
}  // namespace

TEST(SummaryDir, TrainJobWritesOneEventPerStep) {
  std::string why;
  if (!can_write(&why)) GTEST_SKIP() << why;
  flow::session::reset();
  const std::string dir = tmpdir("train");
  auto train = flow::global_function(
      flow::Train, flow::function_config().name("summary_train").summary_dir(dir),
      {flow::Numpy::Placeholder({2, 3}), flow::Numpy::Placeholder({2, 2})}, [](Blob x, Blob t) -> flow::Numpy {
        auto y = flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5), .bias_initializer = flow::zeros_initializer(), .name = "sd"});
        auto loss = flow::reduce_sum(flow::square(y - t), {1});
        flow::optimizer::SGD(schedule(), 0).minimize(loss);
        return loss;
      });
  ASSERT_EQ(event_files(dir).size(), 1u);  // made at definition, with the version record
  flow::CheckPoint().init();
  Tensor x = Tensor::from<float>({2, 3}, {1, 2, 3, 0, 1, 0});
  Tensor t({2, 2}, flow::Float);
  for (int i = 0; i < 3; ++i) train(x, t);
  train.async(x, t)([](Tensor) {});  // the worker thread's path writes too
  train.sync();
  std::vector<std::string> recs = read_records(event_files(dir)[0]);
  ASSERT_EQ(recs.size(), 5u);  // version + 4 steps, each visible without closing the writer
  for (size_t i = 1; i < recs.size(); ++i) {
    EXPECT_NE(recs[i].find("loss"), std::string::npos);
    EXPECT_NE(recs[i].find("learning_rate"), std::string::npos);
  }
}

TEST(SummaryDir, RefusesWhatItCannotLog) {
  flow::session::reset();
  const std::string dir = tmpdir("refused");
  std::string e = error_of([&] {
    flow::global_function(flow::Predict, flow::function_config().name("sd_predict").summary_dir(dir),
                          {flow::Numpy::Placeholder({2, 3})}, [](Blob x) -> flow::Numpy { return x; });
  });
  EXPECT_EQ(e.rfind("[global_function] summary_dir(\"" + dir + "\"): job 'sd_predict' is a predict job", 0), 0u) << e;
  e = error_of([&] {
    flow::global_function(flow::Train, flow::function_config().name("sd_noloss").summary_dir(dir),
                          {flow::Numpy::Placeholder({2, 3})}, [](Blob x) -> flow::Numpy {
                            auto y = flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5), .bias_initializer = flow::zeros_initializer(), .name = "sd2"});
                            flow::optimizer::SGD(schedule(), 0).minimize(flow::reduce_mean(y));
                            return y;
                          });
  });
  EXPECT_NE(e.find("train job 'sd_noloss' does not return its loss"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir));  // refused before any file was made
}

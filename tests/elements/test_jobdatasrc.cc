// jobdatasrc: caps, values, EOS, shuffle, seeking, errors and state cycles.
// Most tests use a tiny IDX data set written to a temporary folder (37
// train and 23 test images of 4x5, image i has pixel p = (7 i + p) % 256,
// label i % 10), so they run everywhere; the Fashion-MNIST tests skip when
// Debian's dataset-fashion-mnist is not installed.
#include <gtest/gtest.h>

#include <glib/gstdio.h>
#include <gst/check/gstharness.h>
#include <gst/gst.h>

#include <jobflow/data.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "jobflow_meta.h"
#include "jobsink.h"
#include "tensor_caps.h"

namespace {

using jobflow::DType;
using jobflow::Shape;
using jobflow::Tensor;
using jobflow::TensorSpec;

constexpr int kRows = 4, kCols = 5, kTrainN = 37, kTestN = 23;
const char* kFashion = "/usr/share/datasets/fashion-mnist";

std::string g_dir;  // the fixture data set

void write_be32(FILE* f, uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  fwrite(b, 1, 4, f);
}

void write_idx(const std::string& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  const unsigned char head[4] = {0, 0, 0x08, static_cast<unsigned char>(dims.size())};
  fwrite(head, 1, 4, f);
  for (uint32_t d : dims) write_be32(f, d);
  fwrite(data.data(), 1, data.size(), f);
  fclose(f);
}

uint8_t pixel(int i, int p) { return static_cast<uint8_t>((7 * i + p) % 256); }

void write_split(const std::string& dir, const char* prefix, int n) {
  std::vector<uint8_t> img, lbl;
  for (int i = 0; i < n; ++i) {
    for (int p = 0; p < kRows * kCols; ++p) img.push_back(pixel(i, p));
    lbl.push_back(static_cast<uint8_t>(i % 10));
  }
  write_idx(dir + "/" + prefix + "-images-idx3-ubyte", {uint32_t(n), kRows, kCols}, img);
  write_idx(dir + "/" + prefix + "-labels-idx1-ubyte", {uint32_t(n)}, lbl);
}

class GstEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    gst_init(nullptr, nullptr);
    GstElementFactory* f = gst_element_factory_find("jobdatasrc");
    ASSERT_NE(f, nullptr) << "jobdatasrc not found: GST_PLUGIN_PATH=" << (g_getenv("GST_PLUGIN_PATH") ?: "");
    gst_object_unref(f);
    GError* err = nullptr;
    gchar* dir = g_dir_make_tmp("jobdatasrc-XXXXXX", &err);
    ASSERT_NE(dir, nullptr) << err->message;
    g_dir = dir;
    g_free(dir);
    write_split(g_dir, "train", kTrainN);
    write_split(g_dir, "t10k", kTestN);
  }
  void TearDown() override {
    for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                          "t10k-labels-idx1-ubyte"})
      g_remove((g_dir + "/" + f).c_str());
    g_rmdir(g_dir.c_str());
  }
};
const auto* const env = ::testing::AddGlobalTestEnvironment(new GstEnvironment);

/* A batch as tensors, decoded with the caps the harness saw. */
struct Batch {
  GstBuffer* buf = nullptr;
  std::vector<Tensor> t;  // images, labels
};

GstHarness* start_src(const char* props) {
  GstHarness* h = gst_harness_new("jobdatasrc");
  // Properties as gst-launch writes them.
  gchar** kv = g_strsplit(props, " ", -1);
  for (gchar** p = kv; *p; ++p) {
    if (!**p) continue;
    gchar** pair = g_strsplit(*p, "=", 2);
    gst_util_set_object_arg(G_OBJECT(h->element), pair[0], pair[1]);
    g_strfreev(pair);
  }
  g_strfreev(kv);
  gst_harness_play(h);
  return h;
}

std::vector<TensorSpec> current_specs(GstHarness* h) {
  GstCaps* caps = gst_pad_get_current_caps(h->sinkpad);
  std::vector<TensorSpec> specs;
  std::string err;
  EXPECT_TRUE(jobflow::gst::specs_from_caps(caps, &specs, &err)) << err;
  if (caps) gst_caps_unref(caps);
  return specs;
}

/* Every buffer until EOS (fails the test on a timeout). */
std::vector<Batch> pull_all(GstHarness* h) {
  std::vector<Batch> out;
  for (;;) {
    GstBuffer* b = nullptr;
    if (!gst_harness_pull_until_eos(h, &b)) {
      ADD_FAILURE() << "no EOS";
      break;
    }
    if (!b) break;
    Batch batch;
    batch.buf = b;
    std::string err;
    EXPECT_TRUE(jobflow::gst::tensors_from_buffer(b, current_specs(h), &batch.t, &err)) << err;
    out.push_back(std::move(batch));
  }
  return out;
}

void free_all(std::vector<Batch>& v) {
  for (auto& b : v) {
    b.t.clear();
    gst_buffer_unref(b.buf);
  }
  v.clear();
}

/* The fixture sample index a (B, 1, 4, 5) image row holds. */
int sample_id(const Tensor& images, int k) {
  const float* p = images.data<float>() + k * kRows * kCols;
  return static_cast<int>(std::lround(p[0] * 255.0f)) / 7;
}

std::vector<int> ids(const std::vector<Batch>& v) {
  std::vector<int> out;
  for (const auto& b : v)
    for (int k = 0; k < b.t[0].dim(0); ++k) out.push_back(sample_id(b.t[0], k));
  return out;
}

std::string props(const std::string& extra) { return "location=" + g_dir + " " + extra; }

TEST(JobDataSrc, Caps) {
  GstHarness* h = start_src(props("batch-size=4").c_str());
  GstBuffer* b = gst_harness_pull(h);
  ASSERT_NE(b, nullptr);
  GstCaps* caps = gst_pad_get_current_caps(h->sinkpad);
  const GstStructure* st = gst_caps_get_structure(caps, 0);
  EXPECT_STREQ(gst_structure_get_name(st), "other/tensors");
  EXPECT_STREQ(gst_structure_get_string(st, "format"), "static");
  EXPECT_STREQ(gst_structure_get_string(st, "dimensions"), "5:4:1:4,4");
  EXPECT_STREQ(gst_structure_get_string(st, "types"), "float32,int32");
  int n = 0, fn = 0, fd = 0;
  EXPECT_TRUE(gst_structure_get_int(st, "num_tensors", &n));
  EXPECT_EQ(n, 2);
  ASSERT_TRUE(gst_structure_get_fraction(st, "framerate", &fn, &fd));
  EXPECT_EQ(fn * 4, 1000 * fd);  // one sample per ms of stream time
  gst_caps_unref(caps);
  EXPECT_EQ(gst_buffer_n_memory(b), 2u);
  JobflowTensorMeta* meta = jobflow_buffer_get_tensor_meta(b);
  ASSERT_NE(meta, nullptr);
  std::vector<TensorSpec> specs;
  ASSERT_TRUE(jobflow::gst::specs_from_meta(meta, &specs));
  EXPECT_EQ(specs, (std::vector<TensorSpec>{{{4, 1, kRows, kCols}, DType::Float32}, {{4}, DType::Int32}}));
  EXPECT_NE(jobflow_tensor_meta_get_by_id(meta, g_quark_from_string("labels")), nullptr);
  gst_buffer_unref(b);
  gst_harness_teardown(h);
}

TEST(JobDataSrc, ValuesTimestampsAndOffsets) {
  GstHarness* h = start_src(props("set=test batch-size=5").c_str());
  auto v = pull_all(h);
  ASSERT_EQ(v.size(), size_t(kTestN / 5));  // 23 samples: 4 full batches, the rest skipped
  for (size_t b = 0; b < v.size(); ++b) {
    const GstBuffer* buf = v[b].buf;
    EXPECT_EQ(GST_BUFFER_OFFSET(buf), b * 5);
    EXPECT_EQ(GST_BUFFER_OFFSET_END(buf), b * 5 + 5);
    EXPECT_EQ(GST_BUFFER_PTS(buf), b * 5 * GST_MSECOND);
    EXPECT_EQ(GST_BUFFER_DURATION(buf), 5 * GST_MSECOND);
    const Tensor& img = v[b].t[0];
    const Tensor& lbl = v[b].t[1];
    EXPECT_EQ(img.shape(), (Shape{5, 1, kRows, kCols}));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(img.raw()) % 64, 0u) << "images not 64-byte aligned";
    for (int k = 0; k < 5; ++k) {
      const int i = static_cast<int>(b) * 5 + k;
      EXPECT_EQ(lbl.data<int32_t>()[k], i % 10);
      for (int p = 0; p < kRows * kCols; ++p)
        ASSERT_FLOAT_EQ(img.data<float>()[k * kRows * kCols + p], pixel(i, p) / 255.0f) << i << " " << p;
    }
  }
  free_all(v);
  gst_harness_teardown(h);
}

TEST(JobDataSrc, EosAfterEpochsTimesBatches) {
  GstHarness* h = start_src(props("batch-size=4 epochs=3").c_str());
  auto v = pull_all(h);
  ASSERT_EQ(v.size(), 3u * (kTrainN / 4));
  // Stream offsets run on across epochs; epoch 2 starts with sample 0 again.
  for (size_t b = 0; b < v.size(); ++b) EXPECT_EQ(GST_BUFFER_OFFSET(v[b].buf), b * 4);
  EXPECT_EQ(sample_id(v[9].t[0], 0), 0);
  free_all(v);
  gst_harness_teardown(h);

  h = start_src(props("batch-size=4 epochs=2 num-samples=10").c_str());
  v = pull_all(h);
  ASSERT_EQ(v.size(), 2u * 2u);  // 10 samples: 2 batches per epoch
  EXPECT_EQ(ids(v), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7}));
  free_all(v);
  gst_harness_teardown(h);
}

TEST(JobDataSrc, ShuffleIsADeterministicPermutation) {
  auto run = [](const std::string& p) {
    GstHarness* h = start_src(props(p).c_str());
    auto v = pull_all(h);
    std::vector<int> out = ids(v);
    std::vector<int> labels;
    for (const auto& b : v)
      for (int k = 0; k < 4; ++k) labels.push_back(b.t[1].data<int32_t>()[k]);
    free_all(v);
    gst_harness_teardown(h);
    // Images and labels stay paired.
    for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(labels[i], out[i] % 10);
    return out;
  };
  const auto a = run("batch-size=4 epochs=2 num-samples=36 shuffle=true seed=5");
  const auto b = run("batch-size=4 epochs=2 num-samples=36 shuffle=true seed=5");
  const auto c = run("batch-size=4 epochs=2 num-samples=36 shuffle=true seed=6");
  ASSERT_EQ(a.size(), 72u);
  EXPECT_EQ(a, b) << "same seed, different order";
  EXPECT_NE(a, c) << "different seeds, same order";
  std::vector<int> e1(a.begin(), a.begin() + 36), e2(a.begin() + 36, a.end());
  EXPECT_NE(e1, e2) << "epochs are not reshuffled";
  std::vector<int> identity(36);
  for (int i = 0; i < 36; ++i) identity[i] = i;
  EXPECT_NE(e1, identity);
  std::sort(e1.begin(), e1.end());
  std::sort(e2.begin(), e2.end());
  EXPECT_EQ(e1, identity);
  EXPECT_EQ(e2, identity);
}

/* A pipeline `jobdatasrc ! jobsink`; returns the sink (owned by the pipeline). */
GstElement* pipeline(const std::string& src_props, const std::string& sink_props, GstElement** sink) {
  std::string desc = "jobdatasrc " + src_props + " ! jobsink name=out " + sink_props;
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(desc.c_str(), &err);
  EXPECT_NE(p, nullptr) << (err ? err->message : "");
  if (err) g_error_free(err);
  *sink = gst_bin_get_by_name(GST_BIN(p), "out");
  gst_object_unref(*sink);  // the bin keeps it
  return p;
}

int first_id(GstSample* s) {
  std::vector<Tensor> t;
  std::string err;
  EXPECT_TRUE(jobflow_sample_to_tensors(s, &t, &err)) << err;
  return t.empty() ? -1 : sample_id(t[0], 0);
}

TEST(JobDataSrc, SeekToSampleIndex) {
  GstElement* sink;
  GstElement* p = pipeline(props("batch-size=4 epochs=2"), "max-results=1", &sink);
  ASSERT_EQ(gst_element_set_state(p, GST_STATE_PAUSED), GST_STATE_CHANGE_ASYNC);
  ASSERT_EQ(gst_element_get_state(p, nullptr, nullptr, 10 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);

  gint64 dur = 0;
  ASSERT_TRUE(gst_element_query_duration(p, GST_FORMAT_DEFAULT, &dur));
  EXPECT_EQ(dur, 2 * 36);
  ASSERT_TRUE(gst_element_query_duration(p, GST_FORMAT_TIME, &dur));
  EXPECT_EQ(dur, 2 * 36 * static_cast<gint64>(GST_MSECOND));

  struct Case {
    GstFormat format;
    gint64 value;
    guint64 offset;
  } cases[] = {{GST_FORMAT_DEFAULT, 10, 10}, {GST_FORMAT_BUFFERS, 2, 8}, {GST_FORMAT_TIME, 21 * GST_MSECOND, 21},
               {GST_FORMAT_DEFAULT, 40, 40}};
  for (const Case& c : cases) {
    ASSERT_NE(gst_element_set_state(p, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    ASSERT_TRUE(gst_element_seek_simple(p, c.format, static_cast<GstSeekFlags>(GST_SEEK_FLAG_FLUSH), c.value))
        << gst_format_get_name(c.format);
    ASSERT_EQ(gst_element_get_state(p, nullptr, nullptr, 10 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
    gst_element_set_state(p, GST_STATE_PLAYING);
    GstSample* s = job_sink_try_pull_result(sink, 10 * GST_SECOND);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(GST_BUFFER_OFFSET(gst_sample_get_buffer(s)), c.offset) << gst_format_get_name(c.format);
    // Position p of the stream is sample p % 36 (no shuffle).
    EXPECT_EQ(first_id(s), static_cast<int>(c.offset % 36));
    gst_sample_unref(s);
  }
  // Seeking past the end: EOS.
  ASSERT_NE(gst_element_set_state(p, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  ASSERT_TRUE(gst_element_seek_simple(p, GST_FORMAT_DEFAULT, GST_SEEK_FLAG_FLUSH, 70));
  gst_element_set_state(p, GST_STATE_PLAYING);
  EXPECT_EQ(job_sink_try_pull_result(sink, 10 * GST_SECOND), nullptr);
  EXPECT_TRUE(job_sink_is_eos(sink));
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(p);
}

/* Sets `p` to PLAYING and returns the first error on its bus. */
GError* expect_error(GstElement* p, gchar** debug) {
  gst_element_set_state(p, GST_STATE_PLAYING);
  GstBus* bus = gst_element_get_bus(p);
  GstMessage* m = gst_bus_timed_pop_filtered(bus, 10 * GST_SECOND, GST_MESSAGE_ERROR);
  gst_object_unref(bus);
  GError* err = nullptr;
  if (m) {
    gst_message_parse_error(m, &err, debug);
    gst_message_unref(m);
  }
  gst_element_set_state(p, GST_STATE_NULL);
  return err;
}

TEST(JobDataSrc, MissingLocationNamesThePropertyAndThePackage) {
  GstElement* sink;
  GstElement* p = pipeline("location=/nonexistent/fashion", "", &sink);
  GError* err = expect_error(p, nullptr);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(err->code, GST_RESOURCE_ERROR_NOT_FOUND);
  std::string msg = err->message;
  EXPECT_NE(msg.find("location=\"/nonexistent/fashion\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << msg;
  g_error_free(err);
  gst_object_unref(p);
}

TEST(JobDataSrc, MissingFileNamesTheFile) {
  gchar* empty = g_dir_make_tmp("jobdatasrc-empty-XXXXXX", nullptr);
  ASSERT_NE(empty, nullptr);
  GstElement* sink;
  GstElement* p = pipeline(std::string("location=") + empty + " set=test", "", &sink);
  GError* err = expect_error(p, nullptr);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->domain, GST_RESOURCE_ERROR);
  EXPECT_NE(std::string(err->message).find("t10k-images-idx3-ubyte"), std::string::npos) << err->message;
  g_error_free(err);
  gst_object_unref(p);
  g_rmdir(empty);
  g_free(empty);
}

TEST(JobDataSrc, CorruptFileIsAStreamError) {
  gchar* dir = g_dir_make_tmp("jobdatasrc-bad-XXXXXX", nullptr);
  ASSERT_NE(dir, nullptr);
  const std::string d = dir;
  write_split(d, "t10k", 5);
  // Truncate the images: the header promises more than is there.
  write_idx(d + "/t10k-images-idx3-ubyte", {5, kRows, kCols}, std::vector<uint8_t>(7, 1));
  GstElement* sink;
  GstElement* p = pipeline("location=" + d + " set=test batch-size=1", "", &sink);
  GError* err = expect_error(p, nullptr);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->domain, GST_STREAM_ERROR);
  EXPECT_NE(std::string(err->message).find("t10k-images-idx3-ubyte"), std::string::npos) << err->message;
  g_error_free(err);
  gst_object_unref(p);
  g_remove((d + "/t10k-images-idx3-ubyte").c_str());
  g_remove((d + "/t10k-labels-idx1-ubyte").c_str());
  g_rmdir(dir);
  g_free(dir);
}

TEST(JobDataSrc, BatchLargerThanTheSetNamesBatchSize) {
  GstElement* sink;
  GstElement* p = pipeline(props("set=test batch-size=100"), "", &sink);
  GError* err = expect_error(p, nullptr);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(err->code, GST_RESOURCE_ERROR_SETTINGS);
  EXPECT_NE(std::string(err->message).find("batch-size=100"), std::string::npos) << err->message;
  g_error_free(err);
  gst_object_unref(p);
}

TEST(JobDataSrc, PlayingNullPlayingCycles) {
  GstElement* sink;
  GstElement* p = pipeline(props("batch-size=4 num-samples=12"), "max-results=1", &sink);
  for (int cycle = 0; cycle < 3; ++cycle) {
    ASSERT_NE(gst_element_set_state(p, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    int n = 0;
    while (GstSample* s = job_sink_try_pull_result(sink, 10 * GST_SECOND)) {
      EXPECT_EQ(first_id(s), 4 * n);
      gst_sample_unref(s);
      ++n;
    }
    EXPECT_EQ(n, 3) << "cycle " << cycle;
    EXPECT_TRUE(job_sink_is_eos(sink));
    ASSERT_EQ(gst_element_set_state(p, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  }
  // Stopping while the source is blocked on a full sink.
  for (int cycle = 0; cycle < 3; ++cycle) {
    ASSERT_NE(gst_element_set_state(p, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    GstSample* s = job_sink_try_pull_result(sink, 10 * GST_SECOND);
    ASSERT_NE(s, nullptr);
    gst_sample_unref(s);
    g_usleep(20000);  // let the source fill the queue and block
    ASSERT_EQ(gst_element_set_state(p, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  }
  gst_object_unref(p);
}

TEST(JobDataSrc, StateChangesWithoutStreaming) {
  GstElement* src = gst_element_factory_make("jobdatasrc", nullptr);
  ASSERT_NE(src, nullptr);
  g_object_set(src, "location", g_dir.c_str(), nullptr);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(gst_element_set_state(src, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
    EXPECT_EQ(gst_element_set_state(src, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  }
  gst_object_unref(src);
}

/* ---- Debian's Fashion-MNIST ---- */

bool have_fashion(const char* prefix) {
  for (const char* kind : {"images-idx3", "labels-idx1"}) {
    std::string base = std::string(kFashion) + "/" + prefix + "-" + kind + "-ubyte";
    if (!g_file_test(base.c_str(), G_FILE_TEST_EXISTS) && !g_file_test((base + ".gz").c_str(), G_FILE_TEST_EXISTS))
      return false;
  }
  return true;
}

std::string fashion_file(const char* prefix, const char* kind) {
  std::string base = std::string(kFashion) + "/" + prefix + "-" + kind + "-ubyte";
  return g_file_test(base.c_str(), G_FILE_TEST_EXISTS) ? base : base + ".gz";
}

TEST(JobDataSrcFashion, TestSetMatchesReadIdx) {
  if (!have_fashion("t10k")) GTEST_SKIP() << "apt-get install dataset-fashion-mnist";
  Tensor images = jobflow::data::read_idx(fashion_file("t10k", "images-idx3"));
  Tensor labels = jobflow::data::read_idx(fashion_file("t10k", "labels-idx1"));
  GstHarness* h = start_src("set=test batch-size=100");  // the default location
  auto v = pull_all(h);
  ASSERT_EQ(v.size(), 100u);
  const uint8_t* px = images.data<uint8_t>();
  const uint8_t* lb = labels.data<uint8_t>();
  int counts[10] = {0};
  for (size_t b = 0; b < v.size(); ++b) {
    ASSERT_EQ(v[b].t[0].shape(), (Shape{100, 1, 28, 28}));
    const float* img = v[b].t[0].data<float>();
    const int32_t* lbl = v[b].t[1].data<int32_t>();
    for (int k = 0; k < 100; ++k) {
      const size_t i = b * 100 + k;
      ASSERT_EQ(lbl[k], lb[i]) << i;
      ASSERT_GE(lbl[k], 0);
      ASSERT_LT(lbl[k], 10);
      counts[lbl[k]]++;
    }
    if (b == 0) {
      for (int p = 0; p < 100 * 784; ++p) ASSERT_FLOAT_EQ(img[p], px[p] / 255.0f) << p;
    }
  }
  for (int c : counts) EXPECT_EQ(c, 1000);  // Fashion-MNIST's test set is balanced
  free_all(v);
  gst_harness_teardown(h);
}

TEST(JobDataSrcFashion, TrainSetFirstBatchAndShuffle) {
  if (!have_fashion("train")) GTEST_SKIP() << "apt-get install dataset-fashion-mnist";
  Tensor labels = jobflow::data::read_idx(fashion_file("train", "labels-idx1"));
  GstHarness* h = start_src("batch-size=100 shuffle=true seed=1");
  GstBuffer* b = gst_harness_pull(h);
  ASSERT_NE(b, nullptr);
  std::vector<Tensor> t;
  std::string err;
  ASSERT_TRUE(jobflow::gst::tensors_from_buffer(b, current_specs(h), &t, &err)) << err;
  int same = 0;
  for (int k = 0; k < 100; ++k) {
    EXPECT_GE(t[1].data<int32_t>()[k], 0);
    EXPECT_LT(t[1].data<int32_t>()[k], 10);
    same += t[1].data<int32_t>()[k] == labels.data<uint8_t>()[k];
  }
  EXPECT_LT(same, 50) << "shuffle=true looks like file order";
  gint64 dur = 0;
  ASSERT_TRUE(gst_element_query_duration(h->element, GST_FORMAT_DEFAULT, &dur));
  EXPECT_EQ(dur, 60000);
  t.clear();
  gst_buffer_unref(b);
  gst_harness_teardown(h);
}

}  // namespace

// jobdecode element tests (GstHarness, isolated registry).
#include <gtest/gtest.h>

#include <gst/check/gstharness.h>
#include <glib/gstdio.h>
#include <gst/gst.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gstjobdecode.h"
#include "static_element_env.h"

namespace {

JOBFLOW_STATIC_ELEMENT_TEST_ENV(jobflow_register_jobdecode);

class JobDecode : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = g_dir_make_tmp("jobdecode-XXXXXX", nullptr);
    ASSERT_NE(dir_, nullptr);
    labels_ = std::string(dir_) + "/fashion.txt";
    ASSERT_TRUE(g_file_set_contents(labels_.c_str(), "T-shirt\nTrouser\nPullover\n", -1, nullptr));
    bus_ = gst_bus_new();
  }
  void TearDown() override {
    if (h_) gst_harness_teardown(h_);
    g_remove(labels_.c_str());
    g_rmdir(dir_);
    g_free(dir_);
    gst_bus_set_flushing(bus_, TRUE);
    gst_object_unref(bus_);
  }
  // jobdecode configured by `setup` before it starts (labels load in
  // READY->PAUSED, and the harness starts the element).
  void start(const std::function<void(GstElement*)>& setup, const char* caps) {
    GstElement* e = gst_element_factory_make("jobdecode", nullptr);
    ASSERT_NE(e, nullptr);
    setup(e);
    gst_element_set_bus(e, bus_);
    h_ = gst_harness_new_with_element(e, "sink", "src");
    gst_object_unref(e);
    gst_harness_set_src_caps_str(h_, caps);
  }
  std::string push_and_pull(const std::vector<float>& scores, GstClockTime pts = 0) {
    GstBuffer* b = gst_buffer_new_allocate(nullptr, scores.size() * 4, nullptr);
    gst_buffer_fill(b, 0, scores.data(), scores.size() * 4);
    GST_BUFFER_PTS(b) = pts;
    GST_BUFFER_DURATION(b) = GST_SECOND / 30;
    EXPECT_EQ(gst_harness_push(h_, b), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(h_);
    if (!out) return "<none>";
    EXPECT_EQ(GST_BUFFER_PTS(out), pts);
    EXPECT_EQ(GST_BUFFER_DURATION(out), GST_SECOND / 30);
    std::string text(gst_buffer_get_size(out), '\0');
    gst_buffer_extract(out, 0, text.data(), text.size());
    gst_buffer_unref(out);
    return text;
  }
  gchar* dir_ = nullptr;
  std::string labels_;
  GstBus* bus_ = nullptr;
  GstHarness* h_ = nullptr;
};

const char* kOneRow = "other/tensors,format=static,num_tensors=1,dimensions=(string)3:1,types=float32,framerate=30/1";

}  // namespace

TEST_F(JobDecode, TopKLabelsFromLogits) {
  start([&](GstElement* e) { g_object_set(e, "labels", labels_.c_str(), "top-k", 2u, nullptr); }, kOneRow);
  // softmax(1, 3, 2) = (0.090, 0.665, 0.245)
  EXPECT_EQ(push_and_pull({1.f, 3.f, 2.f}), "Trouser (0.67), Pullover (0.24)");
  GstCaps* caps = gst_pad_get_current_caps(h_->sinkpad);
  ASSERT_NE(caps, nullptr);
  GstCaps* want = gst_caps_from_string("text/x-raw,format=utf8");
  EXPECT_TRUE(gst_caps_is_equal(caps, want));
  gst_caps_unref(want);
  gst_caps_unref(caps);

  // The same on the bus, for applications.
  GstMessage* m = gst_bus_pop_filtered(bus_, GST_MESSAGE_ELEMENT);
  ASSERT_NE(m, nullptr);
  const GstStructure* s = gst_message_get_structure(m);
  EXPECT_TRUE(gst_structure_has_name(s, JOBFLOW_LABELS_MESSAGE_NAME));
  const GValue* labels = gst_structure_get_value(s, "labels");
  const GValue* scores = gst_structure_get_value(s, "scores");
  const GValue* indices = gst_structure_get_value(s, "indices");
  ASSERT_EQ(gst_value_array_get_size(labels), 2u);
  EXPECT_STREQ(g_value_get_string(gst_value_array_get_value(labels, 0)), "Trouser");
  EXPECT_STREQ(g_value_get_string(gst_value_array_get_value(labels, 1)), "Pullover");
  EXPECT_NEAR(g_value_get_double(gst_value_array_get_value(scores, 0)), 0.66524, 1e-4);
  EXPECT_NEAR(g_value_get_double(gst_value_array_get_value(scores, 1)), 0.24473, 1e-4);
  EXPECT_EQ(g_value_get_int(gst_value_array_get_value(indices, 0)), 1);
  guint64 ts = 1;
  EXPECT_TRUE(gst_structure_get_uint64(s, "timestamp", &ts));
  EXPECT_EQ(ts, 0u);
  EXPECT_STREQ(gst_structure_get_string(s, "text"), "Trouser (0.67), Pullover (0.24)");
  gst_message_unref(m);
}

TEST_F(JobDecode, OneLinePerRowAndNoSoftmax) {
  start([&](GstElement* e) { g_object_set(e, "labels", labels_.c_str(), "softmax", FALSE, nullptr); },
        "other/tensors,format=static,num_tensors=1,dimensions=(string)3:2,types=float32");
  EXPECT_EQ(push_and_pull({0.1f, 0.2f, 0.7f, 0.9f, 0.05f, 0.05f}), "Pullover (0.70)\nT-shirt (0.90)");
  for (int i = 0; i < 2; ++i) {
    GstMessage* m = gst_bus_pop_filtered(bus_, GST_MESSAGE_ELEMENT);
    ASSERT_NE(m, nullptr);
    guint frame = 9;
    EXPECT_TRUE(gst_structure_get_uint(gst_message_get_structure(m), "frame", &frame));
    EXPECT_EQ(frame, static_cast<guint>(i));
    gst_message_unref(m);
  }
}

TEST_F(JobDecode, ThresholdAndIndexLabels) {
  // No labels file: the class indices are the labels.
  start([](GstElement* e) { g_object_set(e, "top-k", 3u, "threshold", 0.2, nullptr); }, kOneRow);
  EXPECT_EQ(push_and_pull({1.f, 3.f, 2.f}), "1 (0.67), 2 (0.24)");
}

TEST_F(JobDecode, MissingLabelsFileNamesTheProperty) {
  GstElement* e = gst_element_factory_make("jobdecode", nullptr);
  const std::string missing = std::string(dir_) + "/no-such-labels.txt";
  g_object_set(e, "labels", missing.c_str(), nullptr);
  gst_element_set_bus(e, bus_);
  EXPECT_EQ(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  GstMessage* m = gst_bus_pop_filtered(bus_, GST_MESSAGE_ERROR);
  ASSERT_NE(m, nullptr);
  GError* err = nullptr;
  gst_message_parse_error(m, &err, nullptr);
  EXPECT_TRUE(g_error_matches(err, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND));
  EXPECT_NE(std::string(err->message).find("'labels'"), std::string::npos) << err->message;
  EXPECT_NE(std::string(err->message).find(missing), std::string::npos) << err->message;
  g_error_free(err);
  gst_message_unref(m);
  gst_element_set_state(e, GST_STATE_NULL);
  gst_object_unref(e);
}

TEST_F(JobDecode, RefusesWrongCaps) {
  GstElement* e = gst_element_factory_make("jobdecode", nullptr);
  GstPad* sink = gst_element_get_static_pad(e, "sink");
  for (const char* ok : {"other/tensors,format=static,num_tensors=1,dimensions=(string)10:4,types=float32",
                         "other/tensors,format=static,num_tensors=1,dimensions=(string)10,types=float64"}) {
    GstCaps* c = gst_caps_from_string(ok);
    EXPECT_TRUE(gst_pad_query_accept_caps(sink, c)) << ok;
    gst_caps_unref(c);
  }
  for (const char* bad : {"other/tensors,format=static,num_tensors=1,dimensions=(string)10,types=int32",
                          "other/tensors,format=static,num_tensors=2,dimensions=(string)10.10,types=float32.float32",
                          "video/x-raw"}) {
    GstCaps* c = gst_caps_from_string(bad);
    EXPECT_FALSE(gst_pad_query_accept_caps(sink, c)) << bad;
    gst_caps_unref(c);
  }
  gst_object_unref(sink);
  gst_object_unref(e);
}

TEST_F(JobDecode, BufferOfTheWrongSizeIsAStreamError) {
  start([](GstElement*) {}, kOneRow);
  GstBuffer* b = gst_buffer_new_allocate(nullptr, 8, nullptr);
  gst_buffer_memset(b, 0, 0, 8);
  EXPECT_EQ(gst_harness_push(h_, b), GST_FLOW_ERROR);
  GstMessage* m = gst_bus_pop_filtered(bus_, GST_MESSAGE_ERROR);
  ASSERT_NE(m, nullptr);
  GError* err = nullptr;
  gst_message_parse_error(m, &err, nullptr);
  EXPECT_TRUE(g_error_matches(err, GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT));
  g_error_free(err);
  gst_message_unref(m);
}

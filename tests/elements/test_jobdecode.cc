// jobdecode element tests (GstHarness, isolated registry).
#include <gtest/gtest.h>

#include <gst/check/gstharness.h>
#include <glib/gstdio.h>
#include <gst/gst.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gst/video/video.h>
#include <onnx/onnx_pb.h>

#include "gstjobdecode.h"
#include "jobflow_analytics.h"
#include "jobflow_frame_meta.h"
#include "jobflow_meta.h"
#include "jobmux_meta.h"
#include "static_element_env.h"

namespace {

JOBFLOW_STATIC_ELEMENT_TEST_ENV(jobflow_register_jobdecode);

// A tensor's bytes.
template <class T>
std::string bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
std::string f32(const std::vector<float>& v) { return bytes(v); }

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
    for (const std::string& f : files_) g_remove(f.c_str());
    g_remove(labels_.c_str());
    g_rmdir(dir_);
    g_free(dir_);
    if (last_) gst_message_unref(last_);
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
  // A file in the test's folder (removed in TearDown).
  std::string file(const std::string& name, const std::string& contents) {
    const std::string path = std::string(dir_) + "/" + name;
    EXPECT_TRUE(g_file_set_contents(path.c_str(), contents.data(), static_cast<gssize>(contents.size()), nullptr));
    files_.push_back(path);
    return path;
  }
  // Pushes one buffer with a memory per tensor (bytes(...) of each), with a
  // JobflowFrameMeta when `frame` is set; returns the output buffer (or null).
  GstBuffer* push_tensors(const std::vector<std::string>& tensors, GstBuffer* frame = nullptr,
                          GstCaps* frame_caps = nullptr, int mw = 0, int mh = 0, double s = 1, double px = 0,
                          double py = 0) {
    GstBuffer* b = gst_buffer_new();
    for (const auto& t : tensors) {
      gpointer data = g_memdup2(t.data(), t.size());
      gst_buffer_append_memory(
          b, gst_memory_new_wrapped(static_cast<GstMemoryFlags>(0), data, t.size(), 0, t.size(), data, g_free));
    }
    GST_BUFFER_PTS(b) = GST_SECOND;
    GST_BUFFER_DURATION(b) = GST_SECOND / 30;
    if (frame) jobflow_buffer_add_frame_meta(b, frame, frame_caps, mw, mh, s, s, px, py);
    EXPECT_EQ(gst_harness_push(h_, b), GST_FLOW_OK);
    return gst_harness_try_pull(h_);
  }
  std::string out_caps() {
    GstCaps* c = gst_pad_get_current_caps(h_->sinkpad);
    if (!c) return "";
    gchar* t = gst_caps_to_string(c);
    std::string r(t);
    g_free(t);
    gst_caps_unref(c);
    return r;
  }
  // The next element message of that name on the bus ("" when none).
  const GstStructure* next_message(const char* name) {
    while (GstMessage* m = gst_bus_pop_filtered(bus_, GST_MESSAGE_ELEMENT)) {
      if (gst_structure_has_name(gst_message_get_structure(m), name)) {
        if (last_) gst_message_unref(last_);
        last_ = m;
        return gst_message_get_structure(m);
      }
      gst_message_unref(m);
    }
    return nullptr;
  }
  // The first error on the bus (domain, code, message).
  std::string error_message(GQuark domain, gint code) {
    GstMessage* m = gst_bus_pop_filtered(bus_, GST_MESSAGE_ERROR);
    if (!m) return "<no error>";
    GError* err = nullptr;
    gst_message_parse_error(m, &err, nullptr);
    std::string text = g_error_matches(err, domain, code) ? err->message : std::string("<other error> ") + err->message;
    g_error_free(err);
    gst_message_unref(m);
    return text;
  }
  gchar* dir_ = nullptr;
  std::string labels_;
  std::vector<std::string> files_;
  GstBus* bus_ = nullptr;
  GstHarness* h_ = nullptr;
  GstMessage* last_ = nullptr;
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

// ---------------------------------------------------------------- frame modes

namespace {

std::string json_of(GstBuffer* b) {
  gchar* t = jobflow_analytics_relation_meta_to_json(jobflow_buffer_get_analytics_relation_meta(b));
  std::string s(t);
  g_free(t);
  return s;
}

const char* kFrameCaps = "video/x-raw, format=(string)RGB, width=(int)320, height=(int)240, framerate=(fraction)30/1";

}  // namespace

TEST_F(JobDecode, Yolov8BoxesGoOnTheFrameInFramePixels) {
  const std::string labels = file("two.txt", "ball\nbox\n");
  start([&](GstElement* e) { gst_util_set_object_arg(G_OBJECT(e), "mode", "boxes");
                             g_object_set(e, "labels", labels.c_str(), "score-threshold", 0.5, nullptr); },
        "other/tensors,format=static,num_tensors=1,dimensions=(string)4:6:1,types=float32,framerate=30/1");
  // (1, 4 + 2, 4): candidates in columns; the model input is the 320x240
  // frame letterboxed into 160x160 (scale 0.5, 20 rows of padding on top)
  const std::vector<float> head = {
      50, 10, 80, 51,    // cx
      50, 10, 20, 50,    // cy
      20, 4, 10, 20,     // w
      10, 4, 30, 10,     // h
      0.1f, 0.2f, 0.7f, 0.1f,  // ball
      0.9f, 0.3f, 0.1f, 0.8f,  // box: the fourth overlaps the first (IoU 0.9): suppressed
  };
  GstBuffer* frame = gst_buffer_new_allocate(nullptr, 320 * 240 * 3, nullptr);
  GstCaps* caps = gst_caps_from_string(kFrameCaps);
  GstBuffer* out = push_tensors({f32(head)}, frame, caps, 160, 160, 0.5, 0, 20);
  ASSERT_NE(out, nullptr);
  // the frame itself (its memory, no copy) with the frame's caps
  EXPECT_EQ(gst_buffer_peek_memory(out, 0), gst_buffer_peek_memory(frame, 0));
  EXPECT_EQ(out_caps(), kFrameCaps);
  EXPECT_EQ(GST_BUFFER_PTS(out), GST_SECOND);
  // box (40, 45)-(60, 55) -> frame (80, 50)-(120, 70); the ball's
  // (75, 5)-(85, 35) -> (150, -30)-(170, 30), clamped to the frame
  EXPECT_EQ(json_of(out), "{\"regions\":["
                          "{\"id\":0,\"label\":\"box\",\"confidence\":0.9,\"x\":80,\"y\":50,\"w\":40,\"h\":20},"
                          "{\"id\":1,\"label\":\"ball\",\"confidence\":0.7,\"x\":150,\"y\":0,\"w\":20,\"h\":30}]}");
  const GstStructure* m = next_message(JOBFLOW_REGIONS_MESSAGE_NAME);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(std::string(gst_structure_get_string(m, "json")), json_of(out));
  gst_buffer_unref(out);
  // the next frame: same caps, no new negotiation
  out = push_tensors({f32(head)}, frame, caps, 160, 160, 0.5, 0, 20);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out_caps(), kFrameCaps);
  gst_buffer_unref(out);
  gst_buffer_unref(frame);
  gst_caps_unref(caps);
}

// The frame modes' output is the frame; it also keeps the tensor buffer's
// own metas (after jobdemux: the source's JobflowMuxMeta; here a reference
// timestamp), but not the tensors' description nor the frame meta.
TEST_F(JobDecode, TheFrameKeepsTheTensorBuffersOtherMetas) {
  start([&](GstElement* e) { gst_util_set_object_arg(G_OBJECT(e), "mode", "boxes"); },
        "other/tensors,format=static,num_tensors=1,dimensions=(string)8:6:1,types=float32,framerate=30/1");
  // (1, 4 + 2, 8) in columns: one box of class 1, seven candidates scoring 0
  std::vector<float> head(6 * 8, 0.f);
  head[0 * 8] = 10, head[1 * 8] = 10, head[2 * 8] = 4, head[3 * 8] = 4, head[5 * 8] = 0.9f;
  GstBuffer* frame = gst_buffer_new_allocate(nullptr, 320 * 240 * 3, nullptr);
  GstCaps* caps = gst_caps_from_string(kFrameCaps);
  GstBuffer* b = gst_buffer_new_memdup(head.data(), head.size() * sizeof(float));
  GST_BUFFER_PTS(b) = GST_SECOND;
  jobflow_buffer_add_frame_meta(b, frame, caps, 320, 240, 1, 1, 0, 0);
  jobflow::gst::add_tensor_meta(b, {{{1, 5, 1}, jobflow::DType::Float32}});
  GstCaps* clock = gst_caps_from_string("timestamp/x-test-source");
  gst_buffer_add_reference_timestamp_meta(b, clock, 7 * GST_SECOND, GST_CLOCK_TIME_NONE);
  ASSERT_EQ(gst_harness_push(h_, b), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h_);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(gst_buffer_peek_memory(out, 0), gst_buffer_peek_memory(frame, 0));
  GstReferenceTimestampMeta* ref = gst_buffer_get_reference_timestamp_meta(out, clock);
  ASSERT_NE(ref, nullptr);
  EXPECT_EQ(ref->timestamp, 7 * GST_SECOND);
  EXPECT_EQ(jobflow_buffer_get_tensor_meta(out), nullptr);
  EXPECT_EQ(jobflow_buffer_get_frame_meta(out), nullptr);
  EXPECT_EQ(json_of(out), "{\"regions\":[{\"id\":0,\"label\":\"1\",\"confidence\":0.9,\"x\":8,\"y\":8,\"w\":4,\"h\":4}]}");
  gst_buffer_unref(out);
  gst_caps_unref(clock);
  gst_caps_unref(caps);
  gst_buffer_unref(frame);
}

TEST_F(JobDecode, BoxesWithoutAFrameStayOnTheTensor) {
  // one label: 5 + 1 values per candidate tell the head's orientation
  // (without labels, the longer of the two dims is the candidates)
  const std::string labels = file("one.txt", "ball\n");
  start([&](GstElement* e) { gst_util_set_object_arg(G_OBJECT(e), "mode", "boxes");
                             gst_util_set_object_arg(G_OBJECT(e), "scheme", "yolov5");
                             g_object_set(e, "labels", labels.c_str(), nullptr); },
        "other/tensors,format=static,num_tensors=1,dimensions=(string)6:2:1,types=float32");
  // (1, 2, 5 + 1): rows cx, cy, w, h, objectness, class 0
  GstBuffer* out = push_tensors({f32({10, 20, 4, 8, 0.8f, 0.75f, 30, 30, 2, 2, 0.2f, 0.5f})});
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out_caps(), "other/tensors, format=(string)static, num_tensors=(int)1, dimensions=(string)6:2:1, "
                        "types=(string)float32");
  EXPECT_EQ(gst_buffer_n_memory(out), 1u);
  EXPECT_EQ(json_of(out), "{\"regions\":[{\"id\":0,\"label\":\"ball\",\"confidence\":0.6,\"x\":8,\"y\":16,\"w\":4,"
                          "\"h\":8}]}");
  gst_buffer_unref(out);
}

TEST_F(JobDecode, SsdWithAnchors) {
  const std::string anchors = file("anchors.txt", "0.5 0.5 0.2 0.2\n0.1 0.1 0.1 0.1\n");
  start([&](GstElement* e) {
          gst_util_set_object_arg(G_OBJECT(e), "mode", "boxes");
          gst_util_set_object_arg(G_OBJECT(e), "scheme", "ssd");
          g_object_set(e, "anchors", anchors.c_str(), "score-threshold", 0.5, nullptr);
        },
        "other/tensors,format=static,num_tensors=2,dimensions=(string)4:2:1.3:2:1,types=float32.float32");
  GstBuffer* frame = gst_buffer_new_allocate(nullptr, 320 * 240 * 3, nullptr);
  GstCaps* caps = gst_caps_from_string(kFrameCaps);
  // a 100x100 model input stretched from the frame would have two scales;
  // here the frame is 320x240 scaled by 0.5 into a 160x120 input
  GstBuffer* out = push_tensors({f32({1, -1, 0, 5 * std::log(2.f), 0, 0, 0, 0}), f32({0, 2, 0, 5, 0, 0})}, frame, caps, 160,
                                120, 0.5, 0, 0);
  ASSERT_NE(out, nullptr);
  // anchor 0: (0.52, 0.48, 0.2, 0.4) of 160x120 = (67.2, 33.6)-(99.2, 81.6) -> frame x2
  EXPECT_EQ(json_of(out), "{\"regions\":[{\"id\":0,\"label\":\"1\",\"confidence\":0.787,\"x\":134,\"y\":67,\"w\":64,"
                          "\"h\":96}]}");
  gst_buffer_unref(out);
  gst_buffer_unref(frame);
  gst_caps_unref(caps);
}

TEST_F(JobDecode, SsdWithoutAnchorsNamesTheProperty) {
  GstElement* e = gst_element_factory_make("jobdecode", nullptr);
  gst_util_set_object_arg(G_OBJECT(e), "mode", "boxes");
  gst_util_set_object_arg(G_OBJECT(e), "scheme", "ssd");
  gst_element_set_bus(e, bus_);
  EXPECT_EQ(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  EXPECT_EQ(error_message(GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS),
            "Property 'anchors' is not set: scheme=ssd needs the anchors file");
  gst_element_set_state(e, GST_STATE_NULL);
  gst_object_unref(e);
}

TEST_F(JobDecode, DetectionsSchemeWithIntegerLabels) {
  start([&](GstElement* e) { gst_util_set_object_arg(G_OBJECT(e), "mode", "boxes");
                             gst_util_set_object_arg(G_OBJECT(e), "scheme", "detections");
                             g_object_set(e, "labels", labels_.c_str(), "score-threshold", 0.5, nullptr); },
        "other/tensors,format=static,num_tensors=3,dimensions=(string)4:2.2.2,types=float32.int64.float32");
  // boxes, labels, scores as torchvision's detection models give them
  GstBuffer* out = push_tensors({f32({10, 20, 30, 40, 12, 22, 30, 40}), bytes(std::vector<gint64>{2, 1}),
                                 f32({0.9f, 0.3f})});
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(json_of(out), "{\"regions\":[{\"id\":0,\"label\":\"Pullover\",\"confidence\":0.9,\"x\":10,\"y\":20,"
                          "\"w\":20,\"h\":20}]}");
  gst_buffer_unref(out);
}

TEST_F(JobDecode, WrongHeadShapeIsAStreamErrorNamingTheScheme) {
  const std::string labels = file("three.txt", "a\nb\nc\n");
  start([&](GstElement* e) { gst_util_set_object_arg(G_OBJECT(e), "mode", "boxes");
                             g_object_set(e, "labels", labels.c_str(), nullptr); },
        "other/tensors,format=static,num_tensors=1,dimensions=(string)4:6:1,types=float32");
  GstBuffer* b = gst_buffer_new_allocate(nullptr, 24 * 4, nullptr);
  gst_buffer_memset(b, 0, 0, 24 * 4);
  EXPECT_EQ(gst_harness_push(h_, b), GST_FLOW_ERROR);
  EXPECT_EQ(error_message(GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT),
            "jobdecode mode=boxes: scheme=yolov8 with 3 labels expects 7 values per candidate, got (1, 6, 4)");
}

// A jobmux batch (jobmux ! jobfunction ! jobdecode): each slot is decoded
// as its own frame, through its own frame's geometry, and its regions go on
// that slot's frame in the JobflowMuxMeta, which becomes the video frame
// (with the video caps) for jobtrack and jobdemux output=frames.
TEST_F(JobDecode, OnAJobmuxBatchEachSlotsRegionsGoOnItsOwnFrame) {
  const std::string labels = file("two.txt", "ball\nbox\n");
  const char* tensor_caps = "other/tensors,format=static,num_tensors=1,dimensions=(string)2:6:3,types=float32";
  start([&](GstElement* e) { gst_util_set_object_arg(G_OBJECT(e), "mode", "boxes");
                             g_object_set(e, "labels", labels.c_str(), "score-threshold", 0.5, nullptr); },
        tensor_caps);
  // (3, 4 + 2, 2): candidates in columns; slot 0 a ball, slot 1 a box, slot 2
  // padding (which must not be decoded, whatever it holds)
  const std::vector<float> head = {
      50, 10, 50, 10, 20, 4, 10, 4, 0.8f, 0.1f, 0.1f, 0.1f,  // slot 0: ball at model (40, 45)-(60, 55)
      30, 10, 40, 10, 8, 4, 6, 4, 0.1f, 0.1f, 0.95f, 0.1f,   // slot 1: box at model (26, 37)-(34, 43)
      50, 50, 50, 50, 9, 9, 9, 9, 0.9f, 0.9f, 0.9f, 0.9f,    // slot 2: padding
  };
  // slot 0: a 320x240 frame letterboxed into 160x160 (scale 0.5, 20 rows on
  // top); slot 1: a 64x64 frame scaled by 2 into 128x128
  GstCaps* caps[2] = {gst_caps_from_string(kFrameCaps),
                      gst_caps_from_string("video/x-raw,format=RGB,width=64,height=64,framerate=10/1")};
  GstBuffer* picture[2] = {gst_buffer_new_allocate(nullptr, 320 * 240 * 3, nullptr),
                           gst_buffer_new_allocate(nullptr, 64 * 64 * 3, nullptr)};
  GstBuffer* batch = gst_buffer_new_memdup(head.data(), head.size() * sizeof(float));
  GST_BUFFER_PTS(batch) = 0;
  JobflowMuxMeta* mm = jobflow_buffer_add_mux_meta(batch, 3);
  mm->valid = 2;
  const guint sources[2] = {5, 2};
  for (int i = 0; i < 2; ++i) {
    GstBuffer* in = gst_buffer_new();  // the slot's tensors as they entered jobmux
    GST_BUFFER_PTS(in) = (i + 1) * GST_SECOND;
    jobflow_buffer_add_frame_meta(in, picture[i], caps[i], i == 0 ? 160 : 128, i == 0 ? 160 : 128,
                                  i == 0 ? 0.5 : 2.0, i == 0 ? 0.5 : 2.0, 0, i == 0 ? 20 : 0);
    GstSegment seg;
    gst_segment_init(&seg, GST_FORMAT_TIME);
    seg.base = i * 10 * GST_SECOND;
    jobflow_mux_meta_set_slot(mm, i, sources[i], in, nullptr, &seg);
    gst_buffer_unref(in);
  }
  ASSERT_EQ(gst_harness_push(h_, batch), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h_);
  ASSERT_NE(out, nullptr);
  // the batch goes on (its tensors, its tensor caps), without regions of its own
  EXPECT_EQ(out_caps(), std::string("other/tensors, format=(string)static, num_tensors=(int)1, "
                                    "dimensions=(string)2:6:3, types=(string)float32"));
  EXPECT_EQ(gst_buffer_get_size(out), head.size() * sizeof(float));
  EXPECT_EQ(jobflow_buffer_get_analytics_relation_meta(out), nullptr);
  const JobflowMuxMeta* om = jobflow_buffer_get_mux_meta(out);
  ASSERT_NE(om, nullptr);
  ASSERT_EQ(om->batch_size, 3u);
  EXPECT_EQ(om->valid, 2u);
  const std::string want[2] = {
      // ball: model (40, 45)-(60, 55) -> frame (80, 50)-(120, 70)
      "{\"regions\":[{\"id\":0,\"label\":\"ball\",\"confidence\":0.8,\"x\":80,\"y\":50,\"w\":40,\"h\":20}]}",
      // box: model (26, 37)-(34, 43) -> frame (13, 18.5)-(17, 21.5)
      "{\"regions\":[{\"id\":0,\"label\":\"box\",\"confidence\":0.95,\"x\":13,\"y\":19,\"w\":4,\"h\":3}]}"};
  for (int i = 0; i < 2; ++i) {
    GstBuffer* f = om->frames[i];
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(om->source_id[i], sources[i]);
    EXPECT_EQ(gst_buffer_peek_memory(f, 0), gst_buffer_peek_memory(picture[i], 0)) << "slot " << i;  // no copy
    EXPECT_TRUE(om->caps[i] && gst_caps_is_equal(om->caps[i], caps[i])) << "slot " << i;
    EXPECT_EQ(GST_BUFFER_PTS(f), (i + 1) * GST_SECOND);
    EXPECT_EQ(om->segments[i].base, i * 10 * GST_SECOND);
    EXPECT_EQ(jobflow_buffer_get_frame_meta(f), nullptr);
    EXPECT_EQ(json_of(f), want[i]) << "slot " << i;
    // one message per frame, with its source and its own times
    const GstStructure* m = next_message(JOBFLOW_REGIONS_MESSAGE_NAME);
    ASSERT_NE(m, nullptr);
    guint source = 0;
    guint64 ts = 0, running = 0;
    EXPECT_TRUE(gst_structure_get_uint(m, "source", &source));
    EXPECT_EQ(source, sources[i]);
    EXPECT_TRUE(gst_structure_get_uint64(m, "timestamp", &ts));
    EXPECT_TRUE(gst_structure_get_uint64(m, "running-time", &running));
    EXPECT_EQ(ts, (i + 1) * GST_SECOND);
    EXPECT_EQ(running, (i + 1) * GST_SECOND + i * 10 * GST_SECOND);
    EXPECT_EQ(std::string(gst_structure_get_string(m, "json")), want[i]);
  }
  EXPECT_EQ(om->frames[2], nullptr);
  EXPECT_EQ(next_message(JOBFLOW_REGIONS_MESSAGE_NAME), nullptr);  // none for the padding
  gst_buffer_unref(out);
  for (int i = 0; i < 2; ++i) {
    gst_buffer_unref(picture[i]);
    gst_caps_unref(caps[i]);
  }
}

TEST_F(JobDecode, ABatchWhoseTensorsAreNotItsSlotsIsAStreamError) {
  start([&](GstElement* e) { gst_util_set_object_arg(G_OBJECT(e), "mode", "boxes"); },
        "other/tensors,format=static,num_tensors=1,dimensions=(string)2:6:2,types=float32");
  GstBuffer* b = gst_buffer_new_allocate(nullptr, 24 * 4, nullptr);
  gst_buffer_memset(b, 0, 0, 24 * 4);
  JobflowMuxMeta* mm = jobflow_buffer_add_mux_meta(b, 3);
  mm->valid = 3;
  EXPECT_EQ(gst_harness_push(h_, b), GST_FLOW_ERROR);
  EXPECT_EQ(error_message(GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT),
            "jobdecode mode=boxes: on a jobmux batch of 3 frames each tensor's dim 0 must be a multiple of 3, got "
            "(2, 6, 2)");
}

TEST_F(JobDecode, TextRegionsAreRotatedBoxesOnTheFrame) {
  start([&](GstElement* e) { gst_util_set_object_arg(G_OBJECT(e), "mode", "text-regions"); },
        "other/tensors,format=static,num_tensors=1,dimensions=(string)60:30:1:1,types=float32");
  std::vector<float> map(30 * 60, 0.f);
  for (int y = 4; y < 10; ++y)
    for (int x = 5; x < 25; ++x) map[y * 60 + x] = 0.9f;
  // the 120x60 frame was scaled by 0.5 into the 60x30 input
  GstBuffer* frame = gst_buffer_new_allocate(nullptr, 120 * 60 * 3, nullptr);
  GstCaps* caps = gst_caps_from_string("video/x-raw,format=RGB,width=120,height=60,framerate=30/1");
  GstBuffer* out = push_tensors({f32(map)}, frame, caps, 60, 30, 0.5, 0, 0);
  ASSERT_NE(out, nullptr);
  // map box: centre (14.5, 6.5), 19 x 5 grown by 2.96875 per side -> frame
  // centre (29, 13), 49.875 x 21.875
  EXPECT_EQ(json_of(out), "{\"regions\":[{\"id\":0,\"label\":\"text\",\"confidence\":0.9,\"x\":4,\"y\":2,"
                          "\"w\":50,\"h\":22}]}");
  gst_buffer_unref(out);
  gst_buffer_unref(frame);
  gst_caps_unref(caps);
}

TEST_F(JobDecode, SegmentationMaskAndMaskVideo) {
  start([&](GstElement* e) { gst_util_set_object_arg(G_OBJECT(e), "mode", "segmentation");
                             g_object_set(e, "mask-video", TRUE, nullptr); },
        "other/tensors,format=static,num_tensors=1,dimensions=(string)2:2:3:1,types=float32");
  // (1, 3, 2, 2) scores: classes 0 1 / 2 0
  const std::vector<float> scores = {0.9f, 0.1f, 0.2f, 0.5f, 0.05f, 0.8f, 0.2f, 0.3f, 0.05f, 0.1f, 0.6f, 0.2f};
  GstBuffer* frame = gst_buffer_new_allocate(nullptr, 4 * 4 * 3, nullptr);
  GstCaps* caps = gst_caps_from_string("video/x-raw,format=RGB,width=4,height=4,framerate=25/1");
  GstBuffer* out = push_tensors({f32(scores)}, frame, caps, 2, 2, 0.5, 0, 0);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out_caps(), "video/x-raw, format=(string)GRAY8, width=(int)4, height=(int)4, framerate=(fraction)25/1");
  EXPECT_EQ(json_of(out), "{\"regions\":[],\"masks\":[{\"id\":0,\"type\":\"semantic\",\"x\":0,\"y\":0,\"w\":4,"
                          "\"h\":4,\"width\":2,\"height\":2,\"region-ids\":[0,1,2]}]}");
  // each map pixel covers 2 x 2 frame pixels (GRAY8 rows padded to 4 bytes)
  GstMapInfo map;
  ASSERT_TRUE(gst_buffer_map(out, &map, GST_MAP_READ));
  const guint8 want[16] = {0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 0, 0, 2, 2, 0, 0};
  EXPECT_EQ(std::vector<guint8>(map.data, map.data + 16), std::vector<guint8>(want, want + 16));
  gst_buffer_unmap(out, &map);
  gst_buffer_unref(out);
  gst_buffer_unref(frame);
  gst_caps_unref(caps);
}

TEST_F(JobDecode, CtcWithADictionaryFile) {
  const std::string dict = file("dict.txt", "a\nb\nc\n");
  start([&](GstElement* e) { gst_util_set_object_arg(G_OBJECT(e), "mode", "ctc");
                             g_object_set(e, "dictionary", dict.c_str(), "softmax", FALSE, nullptr); },
        "other/tensors,format=static,num_tensors=1,dimensions=(string)4:6:2,types=float32");
  // two rows of 6 steps over blank, a, b, c: "aab" and "cb"
  const int best[2][6] = {{1, 1, 0, 1, 2, 2}, {3, 0, 0, 2, 0, 0}};
  std::vector<float> probs(2 * 6 * 4, 0.1f);
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < 6; ++t) probs[(r * 6 + t) * 4 + best[r][t]] = 0.7f;
  GstBuffer* b = gst_buffer_new_memdup(probs.data(), probs.size() * 4);
  ASSERT_EQ(gst_harness_push(h_, b), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h_);
  std::string text(gst_buffer_get_size(out), '\0');
  gst_buffer_extract(out, 0, text.data(), text.size());
  gst_buffer_unref(out);
  EXPECT_EQ(text, "aab\ncb");
  EXPECT_EQ(out_caps(), "text/x-raw, format=(string)utf8");
  const GstStructure* m = next_message(JOBFLOW_TEXT_MESSAGE_NAME);
  ASSERT_NE(m, nullptr);
  EXPECT_STREQ(gst_structure_get_string(m, "text"), "aab");
  double conf = 0;
  EXPECT_TRUE(gst_structure_get_double(m, "confidence", &conf));
  EXPECT_NEAR(conf, 0.7, 1e-6);
}

TEST_F(JobDecode, CtcDictionaryFromTheModelsMetadata) {
  // a recogniser's .onnx with its characters under "character"; the model
  // has one class more than blank + characters: PP-OCR's " "
  onnx::ModelProto model;
  model.set_ir_version(8);
  auto* kv = model.add_metadata_props();
  kv->set_key("character");
  kv->set_value("J\nO\nB");
  std::string bytes_;
  ASSERT_TRUE(model.SerializeToString(&bytes_));
  const std::string path = file("rec.onnx", bytes_);
  start([&](GstElement* e) { gst_util_set_object_arg(G_OBJECT(e), "mode", "ctc");
                             g_object_set(e, "dictionary", path.c_str(), nullptr); },
        "other/tensors,format=static,num_tensors=1,dimensions=(string)5:4:1,types=float32");
  // steps: J, blank, space, O, B (logits)
  const int best[4] = {1, 4, 2, 3};
  std::vector<float> logits(4 * 5, 0.f);
  for (int t = 0; t < 4; ++t) logits[t * 5 + best[t]] = 5.f;
  EXPECT_EQ(push_and_pull(logits, 0), "J OB");
}

TEST_F(JobDecode, CtcDictionaryErrors) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  auto* kv = model.add_metadata_props();
  kv->set_key("vocab");
  kv->set_value("x");
  std::string bytes_;
  ASSERT_TRUE(model.SerializeToString(&bytes_));
  const std::string path = file("other.onnx", bytes_);
  for (const std::string& dict : {std::string(), path}) {
    GstElement* e = gst_element_factory_make("jobdecode", nullptr);
    gst_util_set_object_arg(G_OBJECT(e), "mode", "ctc");
    if (!dict.empty()) g_object_set(e, "dictionary", dict.c_str(), nullptr);
    gst_element_set_bus(e, bus_);
    EXPECT_EQ(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
    if (dict.empty())
      EXPECT_EQ(error_message(GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS),
                "Property 'dictionary' is not set: mode=ctc needs the characters");
    else
      EXPECT_EQ(error_message(GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND),
                "Dictionary (property 'dictionary'): the ONNX model \"" + path +
                    "\" has no metadata key \"character\" (it has: vocab)");
    gst_element_set_state(e, GST_STATE_NULL);
    gst_object_unref(e);
  }
}

TEST_F(JobDecode, FrameModesTakeAnyTensorsLabelsModeOnlyScores) {
  GstElement* e = gst_element_factory_make("jobdecode", nullptr);
  gst_util_set_object_arg(G_OBJECT(e), "mode", "boxes");
  GstPad* sink = gst_element_get_static_pad(e, "sink");
  GstCaps* c = gst_caps_from_string("other/tensors,format=static,num_tensors=3,dimensions=(string)4:2.2.2,"
                                    "types=float32.int64.float32");
  EXPECT_TRUE(gst_pad_query_accept_caps(sink, c));
  gst_util_set_object_arg(G_OBJECT(e), "mode", "labels");
  EXPECT_FALSE(gst_pad_query_accept_caps(sink, c));
  gst_caps_unref(c);
  gst_object_unref(sink);
  gst_object_unref(e);
}

// jobconvert element tests (GstHarness, isolated registry: the element is
// registered statically and no plugin is scanned or loaded).
#include <gtest/gtest.h>

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gstjobconvert.h"
#include "jobflow_frame_meta.h"
#include "static_element_env.h"

namespace {

JOBFLOW_STATIC_ELEMENT_TEST_ENV(jobflow_register_jobconvert);

struct Harness {
  GstHarness* h;
  GstBus* bus;
  explicit Harness(const char* launch) : h(gst_harness_new_parse(launch)), bus(gst_bus_new()) {
    gst_element_set_bus(h->element, bus);
  }
  ~Harness() {
    gst_harness_teardown(h);
    gst_bus_set_flushing(bus, TRUE);
    gst_object_unref(bus);
  }
  GstElement* element() {
    GstElement* e = gst_harness_find_element(h, "jobconvert");
    gst_object_unref(e);  // the bin keeps it
    return e;
  }
  // Output caps field as a string ("" when absent).
  std::string field(const char* name) { return jobflow::test::caps_field(h, name); }
  // The first error on the bus, or null.
  GError* error() {
    GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
    if (!m) return nullptr;
    GError* e = nullptr;
    gst_message_parse_error(m, &e, nullptr);
    gst_message_unref(m);
    return e;
  }
};

GstBuffer* buffer_of(const std::vector<guint8>& bytes, GstClockTime pts = GST_CLOCK_TIME_NONE,
                     GstClockTime duration = GST_CLOCK_TIME_NONE) {
  GstBuffer* b = gst_buffer_new_allocate(nullptr, bytes.size(), nullptr);
  gst_buffer_fill(b, 0, bytes.data(), bytes.size());
  GST_BUFFER_PTS(b) = pts;
  GST_BUFFER_DURATION(b) = duration;
  return b;
}

// A video frame laid out with GStreamer's default strides; `pixel(x, y, c)`.
template <class F>
GstBuffer* video_frame(const char* caps_str, F pixel, GstClockTime pts = 0) {
  GstCaps* caps = gst_caps_from_string(caps_str);
  GstVideoInfo info;
  EXPECT_TRUE(gst_video_info_from_caps(&info, caps));
  gst_caps_unref(caps);
  std::vector<guint8> bytes(GST_VIDEO_INFO_SIZE(&info), 0xEE);  // stride padding is garbage
  const int c = GST_VIDEO_INFO_COMP_PSTRIDE(&info, 0), stride = GST_VIDEO_INFO_PLANE_STRIDE(&info, 0);
  for (int y = 0; y < GST_VIDEO_INFO_HEIGHT(&info); ++y)
    for (int x = 0; x < GST_VIDEO_INFO_WIDTH(&info); ++x)
      for (int ch = 0; ch < c; ++ch) bytes[y * stride + x * c + ch] = pixel(x, y, ch);
  return buffer_of(bytes, pts, GST_SECOND / 30);
}

template <class T>
std::vector<T> values(GstBuffer* b) {
  std::vector<T> v(gst_buffer_get_size(b) / sizeof(T));
  gst_buffer_extract(b, 0, v.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace

TEST(JobConvert, Gray8ToScaledFloatNCHW) {
  // width 3 => rows padded to 4 bytes: the padding must not leak in.
  const char* caps = "video/x-raw,format=GRAY8,width=3,height=2,framerate=30/1";
  Harness t("jobconvert");
  gst_harness_set_src_caps_str(t.h, caps);
  auto px = [](int x, int y, int) { return static_cast<guint8>(y * 100 + x * 7 + 1); };
  ASSERT_EQ(gst_harness_push(t.h, video_frame(caps, px, 5 * GST_SECOND)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(t.h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(t.field("dimensions"), "3:2:1:1");
  EXPECT_EQ(t.field("types"), "float32");
  EXPECT_EQ(t.field("framerate"), "30/1");
  EXPECT_EQ(GST_BUFFER_PTS(out), 5 * GST_SECOND);
  EXPECT_EQ(gst_buffer_n_memory(out), 1u);
  const auto v = values<float>(out);
  ASSERT_EQ(v.size(), 6u);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x) EXPECT_FLOAT_EQ(v[y * 3 + x], px(x, y, 0) / 255.0f) << x << "," << y;
  gst_buffer_unref(out);
}

TEST(JobConvert, RgbLayouts) {
  const char* caps = "video/x-raw,format=RGB,width=2,height=2,framerate=30/1";
  auto px = [](int x, int y, int c) { return static_cast<guint8>(100 * c + 10 * y + x); };
  for (const char* layout : {"nchw", "nhwc"}) {
    Harness t((std::string("jobconvert scale=1 layout=") + layout).c_str());
    gst_harness_set_src_caps_str(t.h, caps);
    ASSERT_EQ(gst_harness_push(t.h, video_frame(caps, px)), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(t.h);
    const auto v = values<float>(out);
    ASSERT_EQ(v.size(), 12u);
    const bool nchw = std::string(layout) == "nchw";
    EXPECT_EQ(t.field("dimensions"), nchw ? "2:2:3:1" : "3:2:2:1");
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 2; ++y)
        for (int x = 0; x < 2; ++x) {
          const size_t i = nchw ? (c * 2 + y) * 2 + x : (y * 2 + x) * 3 + c;
          EXPECT_EQ(v[i], px(x, y, c)) << layout << " c" << c << " y" << y << " x" << x;
        }
    gst_buffer_unref(out);
  }
}

TEST(JobConvert, MeanStdPerChannel) {
  const char* caps = "video/x-raw,format=BGR,width=1,height=1,framerate=30/1";
  Harness t("jobconvert mean=0.5,0.25,0 std=0.5,0.25,2");
  gst_harness_set_src_caps_str(t.h, caps);
  const guint8 bgr[3] = {255, 51, 102};
  ASSERT_EQ(gst_harness_push(t.h, video_frame(caps, [&](int, int, int c) { return bgr[c]; })), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(t.h);
  const auto v = values<float>(out);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_FLOAT_EQ(v[0], (1.0f - 0.5f) / 0.5f);
  EXPECT_FLOAT_EQ(v[1], (0.2f - 0.25f) / 0.25f);
  EXPECT_FLOAT_EQ(v[2], (0.4f - 0.0f) / 2.0f);
  gst_buffer_unref(out);
}

TEST(JobConvert, Uint8PassthroughTransposes) {
  const char* caps = "video/x-raw,format=RGBA,width=2,height=1,framerate=30/1";
  Harness t("jobconvert dtype=uint8");
  gst_harness_set_src_caps_str(t.h, caps);
  ASSERT_EQ(gst_harness_push(t.h, buffer_of({1, 2, 3, 4, 5, 6, 7, 8}, 0)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(t.h);
  EXPECT_EQ(t.field("types"), "uint8");
  EXPECT_EQ(t.field("dimensions"), "2:1:4:1");
  EXPECT_EQ(values<guint8>(out), (std::vector<guint8>{1, 5, 2, 6, 3, 7, 4, 8}));
  gst_buffer_unref(out);
}

TEST(JobConvert, FramesPerTensorBatchesAndAddsLatency) {
  const char* caps = "video/x-raw,format=GRAY8,width=2,height=1,framerate=30/1";
  Harness t("jobconvert frames-per-tensor=2 scale=1");
  gst_harness_set_src_caps_str(t.h, caps);
  const GstClockTime d = GST_SECOND / 30;
  ASSERT_EQ(gst_harness_push(t.h, buffer_of({1, 2, 0, 0}, 0, d)), GST_FLOW_OK);
  EXPECT_EQ(gst_harness_buffers_in_queue(t.h), 0u);
  ASSERT_EQ(gst_harness_push(t.h, buffer_of({3, 4, 0, 0}, d, d)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(t.h);
  EXPECT_EQ(t.field("dimensions"), "2:1:1:2");
  EXPECT_EQ(t.field("framerate"), "15/1");
  EXPECT_EQ(values<float>(out), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(GST_BUFFER_PTS(out), 0u);
  EXPECT_EQ(GST_BUFFER_DURATION(out), 2 * d);
  gst_buffer_unref(out);

  gst_harness_set_upstream_latency(t.h, 10 * GST_MSECOND);
  GstQuery* q = gst_query_new_latency();
  ASSERT_TRUE(gst_pad_peer_query(t.h->sinkpad, q));
  GstClockTime min, max;
  gst_query_parse_latency(q, nullptr, &min, &max);
  EXPECT_EQ(min, 10 * GST_MSECOND + gst_util_uint64_scale_int(GST_SECOND, 1, 30));
  gst_query_unref(q);

  // An incomplete tensor at EOS is dropped.
  ASSERT_EQ(gst_harness_push(t.h, buffer_of({5, 6, 0, 0}, 2 * d, d)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(t.h, gst_event_new_eos()));
  EXPECT_EQ(gst_harness_try_pull(t.h), nullptr);
}

TEST(JobConvert, AudioS16Planar) {
  Harness t("jobconvert frames-per-tensor=2");
  gst_harness_set_src_caps_str(t.h, "audio/x-raw,format=S16LE,layout=interleaved,rate=8000,channels=2");
  // 3 audio frames (L, R): (16384, -32768), (0, 8192), (-16384, 32767)
  const gint16 s[] = {16384, -32768, 0, 8192, -16384, 32767, 1, 2};
  std::vector<guint8> bytes(sizeof s);
  std::memcpy(bytes.data(), s, sizeof s);
  ASSERT_EQ(gst_harness_push(t.h, buffer_of(std::vector<guint8>(bytes.begin(), bytes.begin() + 12), 0)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(t.h);
  EXPECT_EQ(t.field("dimensions"), "2:2");  // (C, F) innermost first
  EXPECT_EQ(t.field("framerate"), "4000/1");
  EXPECT_EQ(values<float>(out), (std::vector<float>{0.5f, 0.0f, -1.0f, 0.25f}));
  EXPECT_EQ(GST_BUFFER_PTS(out), 0u);
  gst_buffer_unref(out);
  // The third frame waits for a fourth; the second tensor's pts is frame 2's.
  ASSERT_EQ(gst_harness_push(t.h, buffer_of(std::vector<guint8>(bytes.begin() + 12, bytes.end()),
                                            gst_util_uint64_scale_int(GST_SECOND, 3, 8000))),
            GST_FLOW_OK);
  out = gst_harness_pull(t.h);
  EXPECT_EQ(GST_BUFFER_PTS(out), gst_util_uint64_scale_int(GST_SECOND, 2, 8000));
  EXPECT_EQ(values<float>(out), (std::vector<float>{-0.5f, 1 / 32768.0f, 32767 / 32768.0f, 2 / 32768.0f}));
  gst_buffer_unref(out);
}

TEST(JobConvert, OctetStreamWithDeclaredDims) {
  Harness t("jobconvert input-dims=3:2 input-type=uint8 scale=0.5");
  gst_harness_set_src_caps_str(t.h, "application/octet-stream");
  // 1.5 units in the first buffer: the adapter re-chunks.
  ASSERT_EQ(gst_harness_push(t.h, buffer_of({2, 4, 6, 8, 10, 12, 14, 16, 18}, 0)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(t.h);
  EXPECT_EQ(t.field("dimensions"), "3:2");
  EXPECT_EQ(values<float>(out), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  gst_buffer_unref(out);
  EXPECT_EQ(gst_harness_try_pull(t.h), nullptr);
}

TEST(JobConvert, RefusesUnsupportedCaps) {
  Harness t("jobconvert");
  GstPad* sink = gst_element_get_static_pad(t.element(), "sink");
  for (const char* ok : {"video/x-raw,format=GRAY8,width=28,height=28,framerate=0/1",
                         "audio/x-raw,format=F32LE,layout=interleaved,rate=16000,channels=1",
                         "application/octet-stream"}) {
    GstCaps* c = gst_caps_from_string(ok);
    EXPECT_TRUE(gst_pad_query_accept_caps(sink, c)) << ok;
    gst_caps_unref(c);
  }
  for (const char* bad : {"video/x-raw,format=NV12,width=28,height=28,framerate=0/1",
                          "audio/x-raw,format=S32LE,layout=interleaved,rate=16000,channels=1",
                          "other/tensors,format=static"}) {
    GstCaps* c = gst_caps_from_string(bad);
    EXPECT_FALSE(gst_pad_query_accept_caps(sink, c)) << bad;
    gst_caps_unref(c);
  }
  gst_object_unref(sink);
}

TEST(JobConvert, PropertyConflictsPostErrorsNamingTheProperty) {
  {
    Harness t("jobconvert dtype=uint8");
    gst_harness_set_src_caps_str(t.h, "audio/x-raw,format=S16LE,layout=interleaved,rate=8000,channels=1");
    EXPECT_EQ(gst_harness_push(t.h, buffer_of({0, 0})), GST_FLOW_NOT_NEGOTIATED);
    GError* e = t.error();
    ASSERT_NE(e, nullptr);
    EXPECT_TRUE(g_error_matches(e, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION));
    EXPECT_NE(std::string(e->message).find("'dtype'"), std::string::npos) << e->message;
    g_error_free(e);
  }
  {
    Harness t("jobconvert");
    gst_harness_set_src_caps_str(t.h, "application/octet-stream");
    GError* e = t.error();
    ASSERT_NE(e, nullptr);
    EXPECT_NE(std::string(e->message).find("'input-dims'"), std::string::npos) << e->message;
    g_error_free(e);
  }
  {
    Harness t("jobconvert mean=0.1,0.2");
    gst_harness_set_src_caps_str(t.h, "video/x-raw,format=RGB,width=2,height=2,framerate=0/1");
    GError* e = t.error();
    ASSERT_NE(e, nullptr);
    EXPECT_NE(std::string(e->message).find("'mean'"), std::string::npos) << e->message;
    g_error_free(e);
  }
}

TEST(JobConvert, InvalidSettingFailsStateChange) {
  GstElement* e = gst_element_factory_make("jobconvert", nullptr);
  ASSERT_NE(e, nullptr);
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(e, bus);
  g_object_set(e, "std", "1,zero", nullptr);
  EXPECT_EQ(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
  ASSERT_NE(m, nullptr);
  GError* err = nullptr;
  gst_message_parse_error(m, &err, nullptr);
  EXPECT_TRUE(g_error_matches(err, GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS));
  EXPECT_NE(std::string(err->message).find("'std'"), std::string::npos) << err->message;
  EXPECT_NE(std::string(err->message).find("1,zero"), std::string::npos) << err->message;
  g_error_free(err);
  gst_message_unref(m);
  gst_element_set_state(e, GST_STATE_NULL);
  gst_bus_set_flushing(bus, TRUE);
  gst_object_unref(bus);
  gst_object_unref(e);
}

namespace {

// Audio of `samples` (interleaved) as one F32LE / S16LE buffer.
GstBuffer* f32_buffer(const std::vector<float>& samples, GstClockTime pts) {
  std::vector<guint8> bytes(samples.size() * 4);
  std::memcpy(bytes.data(), samples.data(), bytes.size());
  return buffer_of(bytes, pts);
}
GstBuffer* s16_buffer(const std::vector<gint16>& samples, GstClockTime pts) {
  std::vector<guint8> bytes(samples.size() * 2);
  std::memcpy(bytes.data(), samples.data(), bytes.size());
  return buffer_of(bytes, pts);
}
GstClockTime at(int sample, int rate) { return gst_util_uint64_scale_int(GST_SECOND, sample, rate); }

}  // namespace

TEST(JobConvert, AudioWindowsOverlapByHop) {
  // A ramp 0, 1, ..., 9 at 8 kHz; windows of 4 samples every 2: [0..3], [2..5], [4..7], [6..9].
  Harness t("jobconvert frames-per-tensor=4 hop=2");
  gst_harness_set_src_caps_str(t.h, "audio/x-raw,format=F32LE,layout=interleaved,rate=8000,channels=1");
  std::vector<float> ramp(10);
  for (int i = 0; i < 10; ++i) ramp[i] = static_cast<float>(i);
  // Uneven buffers: the windows do not follow the buffer boundaries.
  ASSERT_EQ(gst_harness_push(t.h, f32_buffer({ramp.begin(), ramp.begin() + 3}, 0)), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(t.h, f32_buffer({ramp.begin() + 3, ramp.end()}, at(3, 8000))), GST_FLOW_OK);
  EXPECT_EQ(t.field("dimensions"), "4:1");        // (C, F) = (1, 4)
  EXPECT_EQ(t.field("framerate"), "4000/1");      // a window every 2 samples
  ASSERT_EQ(gst_harness_buffers_in_queue(t.h), 4u);
  for (int w = 0; w < 4; ++w) {
    GstBuffer* out = gst_harness_pull(t.h);
    std::vector<float> want(ramp.begin() + 2 * w, ramp.begin() + 2 * w + 4);
    EXPECT_EQ(values<float>(out), want) << "window " << w;
    EXPECT_EQ(GST_BUFFER_PTS(out), at(2 * w, 8000)) << "window " << w;
    EXPECT_EQ(GST_BUFFER_DURATION(out), 4 * at(1, 8000));
    gst_buffer_unref(out);
  }
  // Latency: a window's first sample waits for 3 more.
  GstElement* conv = t.element();
  GstPad* src = gst_element_get_static_pad(conv, "src");
  GstQuery* q = gst_query_new_latency();
  ASSERT_TRUE(gst_pad_query(src, q));
  GstClockTime min = 0;
  gst_query_parse_latency(q, nullptr, &min, nullptr);
  EXPECT_EQ(min, 3 * gst_util_uint64_scale_int(GST_SECOND, 1, 8000));
  gst_query_unref(q);
  gst_object_unref(src);
}

TEST(JobConvert, AudioHopLongerThanTheWindowSkipsAcrossBuffers) {
  // Windows of 2 samples every 5, the samples pushed one per buffer: [0, 1], [5, 6], [10, 11].
  Harness t("jobconvert frames-per-tensor=2 hop=5");
  gst_harness_set_src_caps_str(t.h, "audio/x-raw,format=F32LE,layout=interleaved,rate=1000,channels=1");
  for (int i = 0; i < 13; ++i)
    ASSERT_EQ(gst_harness_push(t.h, f32_buffer({static_cast<float>(i)}, at(i, 1000))), GST_FLOW_OK);
  EXPECT_EQ(t.field("framerate"), "200/1");
  ASSERT_EQ(gst_harness_buffers_in_queue(t.h), 3u);
  for (int w = 0; w < 3; ++w) {
    GstBuffer* out = gst_harness_pull(t.h);
    EXPECT_EQ(values<float>(out), (std::vector<float>{5.0f * w, 5.0f * w + 1}));
    EXPECT_EQ(GST_BUFFER_PTS(out), at(5 * w, 1000));
    gst_buffer_unref(out);
  }
}

TEST(JobConvert, ANewSegmentStartsTheWindowsAfresh) {
  // Windows of 4 samples every 2; 5 samples, then a new segment (concat's
  // next part: pts from 0 again, running time from 1 s), then 4 samples. The
  // old segment gives [0..3] only ([2..5] lacks a sample); no window mixes
  // the two; the new one's windows carry its own pts.
  Harness t("jobconvert frames-per-tensor=4 hop=2");
  gst_harness_set_src_caps_str(t.h, "audio/x-raw,format=F32LE,layout=interleaved,rate=1000,channels=1");
  ASSERT_EQ(gst_harness_push(t.h, f32_buffer({0, 1, 2, 3, 4}, 0)), GST_FLOW_OK);
  GstSegment seg;
  gst_segment_init(&seg, GST_FORMAT_TIME);
  seg.base = GST_SECOND;
  ASSERT_TRUE(gst_harness_push_event(t.h, gst_event_new_segment(&seg)));
  ASSERT_EQ(gst_harness_push(t.h, f32_buffer({10, 11, 12, 13}, 0)), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_buffers_in_queue(t.h), 2u);
  const std::vector<float> want[2] = {{0, 1, 2, 3}, {10, 11, 12, 13}};
  for (int w = 0; w < 2; ++w) {
    GstBuffer* out = gst_harness_pull(t.h);
    EXPECT_EQ(values<float>(out), want[w]) << "window " << w;
    EXPECT_EQ(GST_BUFFER_PTS(out), 0u) << "window " << w;
    gst_buffer_unref(out);
  }
}

TEST(JobConvert, AudioSineWindowsKeepTheirValues) {
  // A sine of period 8 samples, amplitude 0.5 (F32LE stereo, R = -L), windows of one
  // period every half period, channels last: each window is (8, 2) of the sine's values.
  Harness t("jobconvert frames-per-tensor=8 hop=4 layout=nhwc");
  gst_harness_set_src_caps_str(t.h, "audio/x-raw,format=F32LE,layout=interleaved,rate=16000,channels=2");
  std::vector<float> sine;
  for (int i = 0; i < 24; ++i) {
    const float v = static_cast<float>(0.5 * std::sin(2 * G_PI * i / 8));
    sine.push_back(v);
    sine.push_back(-v);
  }
  ASSERT_EQ(gst_harness_push(t.h, f32_buffer(sine, 0)), GST_FLOW_OK);
  EXPECT_EQ(t.field("dimensions"), "2:8");  // (F, C) = (8, 2)
  ASSERT_EQ(gst_harness_buffers_in_queue(t.h), 5u);  // starts 0, 4, 8, 12, 16
  for (int w = 0; w < 5; ++w) {
    GstBuffer* out = gst_harness_pull(t.h);
    std::vector<float> want(sine.begin() + 2 * 4 * w, sine.begin() + 2 * (4 * w + 8));
    EXPECT_EQ(values<float>(out), want) << "window " << w;
    gst_buffer_unref(out);
  }
}

TEST(JobConvert, AudioChannelModes) {
  // S16LE stereo: L = 100 i, R = 300 i.
  std::vector<gint16> stereo;
  for (int i = 0; i < 4; ++i) {
    stereo.push_back(static_cast<gint16>(100 * i));
    stereo.push_back(static_cast<gint16>(300 * i));
  }
  {
    Harness t("jobconvert frames-per-tensor=4 channel-mode=mix scale=1");
    gst_harness_set_src_caps_str(t.h, "audio/x-raw,format=S16LE,layout=interleaved,rate=8000,channels=2");
    ASSERT_EQ(gst_harness_push(t.h, s16_buffer(stereo, 0)), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(t.h);
    EXPECT_EQ(t.field("dimensions"), "4:1");  // (1, 4)
    EXPECT_EQ(values<float>(out), (std::vector<float>{0, 200, 400, 600}));
    gst_buffer_unref(out);
  }
  {
    Harness t("jobconvert frames-per-tensor=4 channel-mode=select channel=1 layout=nhwc");
    gst_harness_set_src_caps_str(t.h, "audio/x-raw,format=S16LE,layout=interleaved,rate=8000,channels=2");
    ASSERT_EQ(gst_harness_push(t.h, s16_buffer(stereo, 0)), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(t.h);
    EXPECT_EQ(t.field("dimensions"), "1:4");  // (4, 1)
    EXPECT_EQ(values<float>(out), (std::vector<float>{0, 300 / 32768.0f, 600 / 32768.0f, 900 / 32768.0f}));
    gst_buffer_unref(out);
  }
}

TEST(JobConvert, OctetRecordsOfFieldsInSlidingWindows) {
  // An IMU-like record: int64 time, float32 x 2, uint8 flag, 7 bytes of padding (24 bytes).
  // Windows of 2 records every record: (2, 4) float32, one mean/std per value.
  Harness t("jobconvert fields=int64,float32:2,uint8 record-size=24 frames-per-tensor=2 hop=1 "
            "mean=0,1,0,0 std=1,1,2,1");
  gst_harness_set_src_caps_str(t.h, "application/octet-stream,framerate=100/1");
  std::vector<guint8> bytes;
  for (int r = 0; r < 3; ++r) {
    guint8 rec[24];
    std::memset(rec, 0xAB, sizeof rec);
    const gint64 time = 1000 + r;
    const float xy[2] = {0.5f * r, -2.0f * r};
    std::memcpy(rec, &time, 8);
    std::memcpy(rec + 8, xy, 8);
    rec[16] = static_cast<guint8>(r);
    bytes.insert(bytes.end(), rec, rec + 24);
  }
  ASSERT_EQ(gst_harness_push(t.h, buffer_of(bytes, 0)), GST_FLOW_OK);
  EXPECT_EQ(t.field("dimensions"), "4:2");
  EXPECT_EQ(t.field("types"), "float32");
  EXPECT_EQ(t.field("framerate"), "100/1");
  ASSERT_EQ(gst_harness_buffers_in_queue(t.h), 2u);
  for (int w = 0; w < 2; ++w) {
    GstBuffer* out = gst_harness_pull(t.h);
    std::vector<float> want;
    for (int r = w; r < w + 2; ++r) {
      want.push_back(1000.0f + r);
      want.push_back(0.5f * r - 1);  // mean 1
      want.push_back(-2.0f * r / 2);  // std 2
      want.push_back(static_cast<float>(r));
    }
    EXPECT_EQ(values<float>(out), want) << "window " << w;
    EXPECT_EQ(GST_BUFFER_PTS(out), w * GST_SECOND / 100);
    gst_buffer_unref(out);
  }
}

TEST(JobConvert, OctetRecordsNativeCopyTheValuesWithoutPadding) {
  Harness t("jobconvert fields=int32:2 record-size=12 dtype=native");
  gst_harness_set_src_caps_str(t.h, "application/octet-stream");
  const gint32 rec[3] = {7, -9, 0x55555555};  // the third int is padding
  std::vector<guint8> bytes(12);
  std::memcpy(bytes.data(), rec, 12);
  ASSERT_EQ(gst_harness_push(t.h, buffer_of(bytes, 0)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(t.h);
  EXPECT_EQ(t.field("dimensions"), "2");
  EXPECT_EQ(t.field("types"), "int32");
  EXPECT_EQ(values<gint32>(out), (std::vector<gint32>{7, -9}));
  gst_buffer_unref(out);
}

TEST(JobConvert, WindowSettingsThatDoNotFitNameTheProperty) {
  struct Case {
    const char* launch;
    const char* caps;
    const char* property;
  };
  const Case cases[] = {
      {"jobconvert channel-mode=select channel=2", "audio/x-raw,format=S16LE,layout=interleaved,rate=8000,channels=2",
       "'channel'"},
      {"jobconvert channel-mode=mix", "video/x-raw,format=GRAY8,width=2,height=2,framerate=0/1", "'channel-mode'"},
      {"jobconvert hop=2", "video/x-raw,format=GRAY8,width=2,height=2,framerate=0/1", "'hop'"},
      {"jobconvert fields=float32:2 record-size=7", "application/octet-stream", "'record-size'"},
      {"jobconvert fields=float32,int8 dtype=native", "application/octet-stream", "'fields'"},
  };
  for (const Case& c : cases) {
    Harness t(c.launch);
    gst_harness_set_src_caps_str(t.h, c.caps);
    GError* e = t.error();
    ASSERT_NE(e, nullptr) << c.launch;
    EXPECT_TRUE(g_error_matches(e, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION)) << c.launch;
    EXPECT_NE(std::string(e->message).find(c.property), std::string::npos) << e->message;
    g_error_free(e);
  }
}

TEST(JobConvert, InvalidFieldsFailTheStateChange) {
  for (const char* launch : {"jobconvert fields=float33", "jobconvert fields=float32:0",
                             "jobconvert fields=uint8 input-dims=4"}) {
    GstElement* e = gst_parse_launch(launch, nullptr);
    ASSERT_NE(e, nullptr);
    GstBus* bus = gst_bus_new();
    gst_element_set_bus(e, bus);
    EXPECT_EQ(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE) << launch;
    GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
    ASSERT_NE(m, nullptr) << launch;
    GError* err = nullptr;
    gst_message_parse_error(m, &err, nullptr);
    EXPECT_TRUE(g_error_matches(err, GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS)) << launch;
    EXPECT_NE(std::string(err->message).find("'fields'"), std::string::npos) << err->message;
    g_error_free(err);
    gst_message_unref(m);
    gst_element_set_state(e, GST_STATE_NULL);
    gst_bus_set_flushing(bus, TRUE);
    gst_object_unref(bus);
    gst_object_unref(e);
  }
}

TEST(JobConvert, LetterboxScalesPadsAndAttachesTheFrame) {
  // a 4x2 frame into an 8x8 input: scale 2, 2 rows of padding above and below
  const char* caps = "video/x-raw,format=GRAY8,width=4,height=2,framerate=30/1";
  Harness t("jobconvert width=8 height=8 resize=letterbox pad-value=100 dtype=uint8");
  gst_harness_set_src_caps_str(t.h, caps);
  GstBuffer* frame = video_frame(caps, [](int, int, int) { return 200; });
  gst_buffer_ref(frame);
  ASSERT_EQ(gst_harness_push(t.h, frame), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(t.h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(t.field("dimensions"), "8:8:1:1");
  const std::vector<guint8> v = values<guint8>(out);
  ASSERT_EQ(v.size(), 64u);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x)
      EXPECT_EQ(v[y * 8 + x], y < 2 || y >= 6 ? 100 : 200) << x << "," << y;
  const JobflowFrameMeta* fm = jobflow_buffer_get_frame_meta(out);
  ASSERT_NE(fm, nullptr);
  EXPECT_EQ(fm->frame, frame);  // the frame itself, not a copy
  EXPECT_EQ(fm->frame_width, 4);
  EXPECT_EQ(fm->model_width, 8);
  EXPECT_DOUBLE_EQ(fm->scale_x, 2.0);
  EXPECT_DOUBLE_EQ(fm->scale_y, 2.0);
  EXPECT_DOUBLE_EQ(fm->pad_x, 0.0);
  EXPECT_DOUBLE_EQ(fm->pad_y, 2.0);
  double x = 8, y = 6;
  jobflow_frame_meta_to_frame(fm, &x, &y);
  EXPECT_DOUBLE_EQ(x, 4);
  EXPECT_DOUBLE_EQ(y, 2);
  gchar* fc = gst_caps_to_string(fm->caps);
  EXPECT_STREQ(fc, "video/x-raw, format=(string)GRAY8, width=(int)4, height=(int)2, framerate=(fraction)30/1");
  g_free(fc);
  gst_buffer_unref(out);
  gst_buffer_unref(frame);
}

TEST(JobConvert, StretchScalesEachAxis) {
  const char* caps = "video/x-raw,format=RGB,width=4,height=4,framerate=30/1";
  Harness t("jobconvert width=2 height=1 attach-frame=false");
  gst_harness_set_src_caps_str(t.h, caps);
  ASSERT_EQ(gst_harness_push(t.h, video_frame(caps, [](int, int, int c) { return c == 0 ? 255 : 0; })), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(t.h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(t.field("dimensions"), "2:1:3:1");
  EXPECT_EQ(values<float>(out), (std::vector<float>{1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(jobflow_buffer_get_frame_meta(out), nullptr);
  gst_buffer_unref(out);
}

// jobbatch / jobunbatch element tests (GstHarness, isolated registry).
#include <gtest/gtest.h>

#include <gst/check/gstharness.h>
#include <gst/gst.h>

#include <string>
#include <vector>

#include "gstjobbatch.h"
#include "gstjobunbatch.h"
#include "static_element_env.h"
#include "tensor_caps.h"

namespace {

gboolean register_elements(GstPlugin* plugin) {
  return jobflow_register_jobbatch(plugin) && jobflow_register_jobunbatch(plugin);
}
JOBFLOW_STATIC_ELEMENT_TEST_ENV(register_elements);
using jobflow::test::buffer_tensor;

constexpr GstClockTime kFrame = GST_SECOND / 30;
// Two tensors per frame: a (1, 2) float32 and a scalar int32 label.
const char* kFrameCaps =
    "other/tensors,format=static,num_tensors=2,dimensions=(string)\"2:1,1\",types=(string)\"float32,int32\","
    "framerate=30/1";

GstBuffer* frame(int i) {
  const float x[2] = {i + 0.5f, -static_cast<float>(i)};
  const gint32 label = 100 + i;
  GstBuffer* b = gst_buffer_new();  // one memory per tensor
  gpointer px = g_memdup2(x, 8), pl = g_memdup2(&label, 4);
  gst_buffer_append_memory(b, gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, px, 8, 0, 8, px, g_free));
  gst_buffer_append_memory(b, gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, pl, 4, 0, 4, pl, g_free));
  GST_BUFFER_PTS(b) = GST_BUFFER_DTS(b) = 1000 * GST_SECOND + i * kFrame;
  GST_BUFFER_DURATION(b) = kFrame;
  GST_BUFFER_OFFSET(b) = i;
  return b;
}


using jobflow::test::caps_field;

std::string dims(std::initializer_list<jobflow::Shape> shapes) {
  std::string s;
  for (const auto& sh : shapes) s += (s.empty() ? "" : ",") + jobflow::gst::dims_to_string(sh);
  return s;
}

void expect_eos(GstHarness* h) {
  for (;;) {
    GstEvent* e = gst_harness_pull_event(h);
    ASSERT_NE(e, nullptr) << "no EOS";
    const bool eos = GST_EVENT_TYPE(e) == GST_EVENT_EOS;
    gst_event_unref(e);
    if (eos) return;
  }
}

}  // namespace

TEST(JobBatch, FullBatchConcatenatesAlongDim0WithMeta) {
  GstHarness* h = gst_harness_new_parse("jobbatch batch-size=3");
  gst_harness_set_src_caps_str(h, kFrameCaps);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(gst_harness_push(h, frame(i)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(caps_field(h, "dimensions"), dims({{3, 2}, {3}}));
  EXPECT_EQ(caps_field(h, "types"), "float32,int32");
  EXPECT_EQ(caps_field(h, "framerate"), "10/1");
  ASSERT_EQ(gst_buffer_n_memory(out), 2u);
  EXPECT_EQ(buffer_tensor<float>(out, 0), (std::vector<float>{0.5f, 0.f, 1.5f, -1.f, 2.5f, -2.f}));
  EXPECT_EQ(buffer_tensor<gint32>(out, 1), (std::vector<gint32>{100, 101, 102}));
  EXPECT_EQ(GST_BUFFER_PTS(out), 1000 * GST_SECOND);
  EXPECT_EQ(GST_BUFFER_DURATION(out), 3 * kFrame);
  const JobflowBatchMeta* meta = jobflow_buffer_get_batch_meta(out);
  ASSERT_NE(meta, nullptr);
  EXPECT_EQ(meta->batch_size, 3u);
  EXPECT_EQ(meta->valid, 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(meta->pts[i], 1000 * GST_SECOND + i * kFrame);
    EXPECT_EQ(meta->offset[i], static_cast<guint64>(i));
  }
  // A copy of the buffer (what a transform element does) keeps the meta.
  GstBuffer* copy = gst_buffer_copy(out);
  EXPECT_NE(jobflow_buffer_get_batch_meta(copy), nullptr);
  gst_buffer_unref(copy);
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

TEST(JobBatch, RoundTripKeepsTimestampsAndValues) {
  GstHarness* h = gst_harness_new_parse("jobbatch batch-size=2 ! jobunbatch");
  gst_harness_set_src_caps_str(h, kFrameCaps);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(gst_harness_push(h, frame(i)), GST_FLOW_OK);
  for (int i = 0; i < 4; ++i) {
    GstBuffer* out = gst_harness_pull(h);
    ASSERT_NE(out, nullptr);
    GstBuffer* in = frame(i);
    EXPECT_EQ(GST_BUFFER_PTS(out), GST_BUFFER_PTS(in));
    EXPECT_EQ(GST_BUFFER_DTS(out), GST_BUFFER_DTS(in));
    EXPECT_EQ(GST_BUFFER_DURATION(out), GST_BUFFER_DURATION(in));
    EXPECT_EQ(GST_BUFFER_OFFSET(out), GST_BUFFER_OFFSET(in));
    EXPECT_EQ(buffer_tensor<float>(out, 0), buffer_tensor<float>(in, 0));
    EXPECT_EQ(buffer_tensor<gint32>(out, 1), buffer_tensor<gint32>(in, 1));
    EXPECT_EQ(jobflow_buffer_get_batch_meta(out), nullptr);
    gst_buffer_unref(in);
    gst_buffer_unref(out);
  }
  EXPECT_EQ(caps_field(h, "dimensions"), dims({{1, 2}, {1}}));
  EXPECT_EQ(caps_field(h, "framerate"), "30/1");
  gst_harness_teardown(h);
}

TEST(JobBatch, EosFlushesAPaddedPartialBatch) {
  GstHarness* h = gst_harness_new_parse("jobbatch batch-size=4");
  gst_harness_set_src_caps_str(h, kFrameCaps);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(gst_harness_push(h, frame(i)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  GstBuffer* out = gst_harness_pull(h);
  ASSERT_NE(out, nullptr);
  const JobflowBatchMeta* meta = jobflow_buffer_get_batch_meta(out);
  ASSERT_NE(meta, nullptr);
  EXPECT_EQ(meta->batch_size, 4u);
  EXPECT_EQ(meta->valid, 2u);
  EXPECT_EQ(meta->pts[2], GST_CLOCK_TIME_NONE);
  EXPECT_EQ(buffer_tensor<float>(out, 0), (std::vector<float>{0.5f, 0.f, 1.5f, -1.f, 0, 0, 0, 0}));
  EXPECT_EQ(buffer_tensor<gint32>(out, 1), (std::vector<gint32>{100, 101, 0, 0}));
  gst_buffer_unref(out);
  expect_eos(h);
  EXPECT_EQ(gst_harness_push(h, frame(5)), GST_FLOW_EOS);
  gst_harness_teardown(h);

  // Through jobunbatch the padding is dropped.
  h = gst_harness_new_parse("jobbatch batch-size=4 ! jobunbatch");
  gst_harness_set_src_caps_str(h, kFrameCaps);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(gst_harness_push(h, frame(i)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  expect_eos(h);
  EXPECT_EQ(gst_harness_buffers_received(h), 2u);
  gst_harness_teardown(h);
}

TEST(JobBatch, MaxLatencyPushesAPartialBatch) {
  GstHarness* h = gst_harness_new_parse("jobbatch batch-size=8 max-latency=50000000");
  gst_harness_set_src_caps_str(h, kFrameCaps);
  const gint64 start = g_get_monotonic_time();
  ASSERT_EQ(gst_harness_push(h, frame(0)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);  // no more frames come: the deadline pushes it
  const gint64 waited_us = g_get_monotonic_time() - start;
  ASSERT_NE(out, nullptr);
  EXPECT_GE(waited_us, 50000);
  EXPECT_EQ(jobflow_buffer_get_batch_meta(out)->valid, 1u);
  EXPECT_EQ(GST_BUFFER_PTS(out), 1000 * GST_SECOND);
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

TEST(JobBatch, AnswersLatencyQuery) {
  const std::vector<std::pair<const char*, GstClockTime>> cases = {
      {"jobbatch batch-size=4", 3 * kFrame},                                  // waits for 3 more frames
      {"jobbatch batch-size=4 max-latency=50000000", 50 * GST_MSECOND}};  // capped
  for (const auto& [launch, extra] : cases) {
    GstHarness* h = gst_harness_new_parse(launch);
    gst_harness_set_src_caps_str(h, kFrameCaps);
    gst_harness_set_upstream_latency(h, 10 * GST_MSECOND);
    // The caps travel through the element's queue: wait until they are out.
    GstEvent* e;
    while ((e = gst_harness_pull_event(h)) && GST_EVENT_TYPE(e) != GST_EVENT_CAPS) gst_event_unref(e);
    ASSERT_NE(e, nullptr);
    gst_event_unref(e);
    GstQuery* q = gst_query_new_latency();
    ASSERT_TRUE(gst_pad_peer_query(h->sinkpad, q));
    GstClockTime min, max;
    gst_query_parse_latency(q, nullptr, &min, &max);
    EXPECT_EQ(min, 10 * GST_MSECOND + extra) << launch;
    gst_query_unref(q);
    gst_harness_teardown(h);
  }
}

TEST(JobBatch, RefusesNonTensorCaps) {
  GstElement* e = gst_element_factory_make("jobbatch", nullptr);
  GstPad* sink = gst_element_get_static_pad(e, "sink");
  GstCaps* c = gst_caps_from_string("video/x-raw,format=GRAY8,width=2,height=2");
  EXPECT_FALSE(gst_pad_query_accept_caps(sink, c));
  gst_caps_unref(c);
  c = gst_caps_from_string(kFrameCaps);
  EXPECT_TRUE(gst_pad_query_accept_caps(sink, c));
  gst_caps_unref(c);
  gst_object_unref(sink);
  gst_object_unref(e);
}

TEST(JobUnbatch, WithoutMetaUsesBatchSizeOrFails) {
  const char* batched = "other/tensors,format=static,num_tensors=1,dimensions=(string)2:4,types=float32";
  const float x[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  auto make = [&] {
    GstBuffer* b = gst_buffer_new_allocate(nullptr, sizeof x, nullptr);
    gst_buffer_fill(b, 0, x, sizeof x);
    GST_BUFFER_PTS(b) = 0;
    GST_BUFFER_DURATION(b) = 4 * kFrame;
    return b;
  };
  {
    GstHarness* h = gst_harness_new_parse("jobunbatch batch-size=2");
    gst_harness_set_src_caps_str(h, batched);
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_tag(gst_tag_list_new_empty())));
    ASSERT_EQ(gst_harness_push(h, make()), GST_FLOW_OK);
    EXPECT_EQ(caps_field(h, "dimensions"), dims({{2, 2}}));
    // The output caps come before the held segment and tag (fatal warnings
    // would catch a misordering too).
    std::vector<GstEventType> order;
    while (GstEvent* e = gst_harness_try_pull_event(h)) {
      order.push_back(GST_EVENT_TYPE(e));
      gst_event_unref(e);
    }
    EXPECT_EQ(order, (std::vector<GstEventType>{GST_EVENT_STREAM_START, GST_EVENT_CAPS, GST_EVENT_SEGMENT,
                                                GST_EVENT_TAG}));
    GstBuffer* a = gst_harness_pull(h);
    GstBuffer* b = gst_harness_pull(h);
    EXPECT_EQ(buffer_tensor<float>(a, 0), (std::vector<float>{0, 1, 2, 3}));
    EXPECT_EQ(buffer_tensor<float>(b, 0), (std::vector<float>{4, 5, 6, 7}));
    EXPECT_EQ(GST_BUFFER_PTS(b), 2 * kFrame);
    EXPECT_EQ(GST_BUFFER_DURATION(b), 2 * kFrame);
    gst_buffer_unref(a);
    gst_buffer_unref(b);
    gst_harness_teardown(h);
  }
  {
    GstHarness* h = gst_harness_new_parse("jobunbatch");
    GstBus* bus = gst_bus_new();
    gst_element_set_bus(h->element, bus);
    gst_harness_set_src_caps_str(h, batched);
    EXPECT_EQ(gst_harness_push(h, make()), GST_FLOW_ERROR);
    GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
    ASSERT_NE(m, nullptr);
    GError* err = nullptr;
    gst_message_parse_error(m, &err, nullptr);
    EXPECT_TRUE(g_error_matches(err, GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT));
    EXPECT_NE(std::string(err->message).find("'batch-size'"), std::string::npos) << err->message;
    g_error_free(err);
    gst_message_unref(m);
    gst_harness_teardown(h);
    gst_bus_set_flushing(bus, TRUE);
    gst_object_unref(bus);
  }
}

TEST(JobBatch, FlushDropsWaitingFrames) {
  GstHarness* h = gst_harness_new_parse("jobbatch batch-size=2");
  gst_harness_set_src_caps_str(h, kFrameCaps);
  ASSERT_EQ(gst_harness_push(h, frame(0)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_start()));
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_stop(TRUE)));
  GstSegment seg;
  gst_segment_init(&seg, GST_FORMAT_TIME);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&seg)));
  ASSERT_EQ(gst_harness_push(h, frame(1)), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(h, frame(2)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  EXPECT_EQ(buffer_tensor<gint32>(out, 1), (std::vector<gint32>{101, 102}));
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

// Caps whose dims fit but whose batch does not (issue 14): about 2^62
// bytes a frame, 4 frames a batch. The product is checked, never wrapped, and the
// error names the tensor and its dims.
TEST(JobBatch, ABatchWhoseSizeOverflowsIsANegotiationError) {
  GstHarness* h = gst_harness_new_parse("jobbatch batch-size=4");
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  gst_harness_set_src_caps_str(
      h, "other/tensors,format=static,num_tensors=1,dimensions=(string)2147483647:2147483647,types=(string)uint8,"
         "framerate=30/1");
  gst_harness_push(h, frame(0));  // refused: what matters is the error
  GstMessage* m = gst_bus_timed_pop_filtered(bus, 30 * GST_SECOND, GST_MESSAGE_ERROR);  // a safety net only
  ASSERT_NE(m, nullptr);
  GError* err = nullptr;
  gst_message_parse_error(m, &err, nullptr);
  EXPECT_TRUE(g_error_matches(err, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION)) << err->message;
  EXPECT_EQ(std::string(err->message),
            "A batch of 4 frames of tensor 0 (2147483647, 2147483647) uint8 is too large: the element count "
            "overflows 64 bits");
  g_error_free(err);
  gst_message_unref(m);
  gst_harness_teardown(h);
  gst_bus_set_flushing(bus, TRUE);
  gst_object_unref(bus);
}

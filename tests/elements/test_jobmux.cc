// jobmux / jobdemux element tests (GstHarness and pads of the test's own,
// isolated registry). Each frame's value says where it came from (100 x
// source + index), so any batch can be checked against its metas, and each
// source's output against what it sent, whatever frames a batch happened to
// combine (that depends on when the mux's task runs).
#include <gtest/gtest.h>

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gstjobdemux.h"
#include "gstjobmux.h"
#include "jobflow_analytics.h"
#include "jobflow_frame_meta.h"
#include "jobflow_meta.h"
#include "static_element_env.h"
#include "tensor_caps.h"

namespace {

gboolean register_elements(GstPlugin* plugin) {
  return jobflow_register_jobmux(plugin) && jobflow_register_jobdemux(plugin);
}
JOBFLOW_STATIC_ELEMENT_TEST_ENV(register_elements);
using jobflow::test::buffer_tensor;

// One frame: a (1, 2) float32 tensor {100 s + i, -(100 s + i)} and a (1,) int32 = i.
const char* kFrameCaps = "other/tensors,format=static,num_tensors=2,dimensions=(string)\"2:1,1\","
                         "types=(string)\"float32,int32\",framerate=%d/1";

std::string frame_caps(int fps) {
  gchar* s = g_strdup_printf(kFrameCaps, fps);
  std::string caps = s;
  g_free(s);
  return caps;
}

GstClockTime frame_pts(int source, int i) { return (10 * source + 1) * GST_SECOND + i * GST_SECOND / 10; }

GstBuffer* frame(int source, int i) {
  const float x[2] = {100.0f * source + i, -(100.0f * source + i)};
  const gint32 index = i;
  GstBuffer* b = gst_buffer_new();
  gpointer px = g_memdup2(x, 8), pi = g_memdup2(&index, 4);
  gst_buffer_append_memory(b, gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, px, 8, 0, 8, px, g_free));
  gst_buffer_append_memory(b, gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, pi, 4, 0, 4, pi, g_free));
  GST_BUFFER_PTS(b) = frame_pts(source, i);
  GST_BUFFER_DTS(b) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_DURATION(b) = GST_SECOND / 10;
  GST_BUFFER_OFFSET(b) = i;
  return b;
}


std::string caps_string(GstCaps* caps, const char* field) {
  const GstStructure* s = gst_caps_get_structure(caps, 0);
  if (const gchar* v = gst_structure_get_string(s, field)) return v;
  if (!gst_structure_has_field(s, field)) return "";
  gchar* t = gst_value_serialize(gst_structure_get_value(s, field));
  std::string v = t;
  g_free(t);
  return v;
}

// A source: a harness feeding one of jobmux's request pads.
GstHarness* add_source(GstElement* mux, int source, int fps) {
  const std::string pad = "sink_" + std::to_string(source);
  GstHarness* h = gst_harness_new_with_element(mux, pad.c_str(), nullptr);
  gst_harness_set_src_caps_str(h, frame_caps(fps).c_str());
  return h;
}

// What one of jobdemux's pads delivered: a sink pad of the test's own.
struct Collected {
  std::vector<GstBuffer*> buffers;
  std::vector<std::string> events;  // type names, in order
  GstCaps* caps = nullptr;
  bool eos = false;
};

class Collector {
 public:
  explicit Collector(GstElement* demux) {
    g_signal_connect(demux, "pad-added", G_CALLBACK(+[](GstElement*, GstPad* pad, gpointer self) {
                       static_cast<Collector*>(self)->link(pad);
                     }),
                     this);
  }
  ~Collector() {
    for (auto& [name, c] : got_) {
      for (GstBuffer* b : c.buffers) gst_buffer_unref(b);
      if (c.caps) gst_caps_unref(c.caps);
    }
    for (GstPad* p : pads_) {
      gst_pad_set_active(p, FALSE);
      gst_object_unref(p);
    }
  }
  // Waits (at most 30 s: a failure, not a timing assumption) until `pred` holds.
  template <class P>
  bool wait(P pred) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::seconds(30), [&] { return pred(got_); });
  }
  bool wait_eos(const std::string& pad) {
    return wait([&](std::map<std::string, Collected>& g) { return g.count(pad) && g[pad].eos; });
  }
  bool wait_buffers(const std::string& pad, size_t n) {
    return wait([&](std::map<std::string, Collected>& g) { return g.count(pad) && g[pad].buffers.size() >= n; });
  }
  std::map<std::string, Collected>& got() { return got_; }
  // Watches `pad` (jobdemux's sink pad) for the EOS of the whole stream.
  void watch_eos(GstPad* pad) {
    gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM,
                      +[](GstPad*, GstPadProbeInfo* info, gpointer self) -> GstPadProbeReturn {
                        if (GST_EVENT_TYPE(GST_PAD_PROBE_INFO_EVENT(info)) == GST_EVENT_EOS) {
                          auto* c = static_cast<Collector*>(self);
                          std::lock_guard<std::mutex> lk(c->mu_);
                          c->stream_eos_ = true;
                          c->cv_.notify_all();
                        }
                        return GST_PAD_PROBE_OK;
                      },
                      this, nullptr);
  }
  bool wait_stream_eos() {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::seconds(30), [&] { return stream_eos_; });
  }

 private:
  void link(GstPad* src) {
    GstPad* sink = gst_pad_new("sink", GST_PAD_SINK);
    gst_pad_set_element_private(sink, this);
    g_object_set_data_full(G_OBJECT(sink), "source-pad", g_strdup(GST_PAD_NAME(src)), g_free);
    gst_pad_set_chain_function(sink, +[](GstPad* pad, GstObject*, GstBuffer* buf) -> GstFlowReturn {
      auto* self = static_cast<Collector*>(gst_pad_get_element_private(pad));
      std::lock_guard<std::mutex> lk(self->mu_);
      self->got_[name_of(pad)].buffers.push_back(buf);
      self->cv_.notify_all();
      return GST_FLOW_OK;
    });
    gst_pad_set_event_function(sink, +[](GstPad* pad, GstObject*, GstEvent* event) -> gboolean {
      auto* self = static_cast<Collector*>(gst_pad_get_element_private(pad));
      std::lock_guard<std::mutex> lk(self->mu_);
      Collected& c = self->got_[name_of(pad)];
      c.events.push_back(GST_EVENT_TYPE_NAME(event));
      if (GST_EVENT_TYPE(event) == GST_EVENT_CAPS) {
        GstCaps* caps;
        gst_event_parse_caps(event, &caps);
        gst_caps_replace(&c.caps, caps);
      }
      if (GST_EVENT_TYPE(event) == GST_EVENT_EOS) c.eos = true;
      if (GST_EVENT_TYPE(event) == GST_EVENT_STREAM_START) c.eos = false;
      self->cv_.notify_all();
      gst_event_unref(event);
      return TRUE;
    });
    gst_pad_set_active(sink, TRUE);
    EXPECT_EQ(gst_pad_link(src, sink), GST_PAD_LINK_OK);
    std::lock_guard<std::mutex> lk(mu_);
    pads_.push_back(sink);
    got_[GST_PAD_NAME(src)];
  }
  static std::string name_of(GstPad* pad) {
    return static_cast<const char*>(g_object_get_data(G_OBJECT(pad), "source-pad"));
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Collected> got_;
  std::vector<GstPad*> pads_;
  bool stream_eos_ = false;
};

// jobmux ! jobdemux in a bin, playing; sources come from add_source().
struct MuxDemux {
  GstElement* bin;
  GstElement* mux;
  GstElement* demux;
  std::unique_ptr<Collector> out;
  explicit MuxDemux(const char* mux_props = "", const char* demux_props = "") {
    const std::string launch = std::string("jobmux name=mux ") + mux_props + " ! jobdemux name=demux " + demux_props;
    GError* err = nullptr;
    bin = gst_parse_launch_full(("bin.( " + launch + " )").c_str(), nullptr, GST_PARSE_FLAG_NONE, &err);
    EXPECT_EQ(err, nullptr) << (err ? err->message : "");
    mux = gst_bin_get_by_name(GST_BIN(bin), "mux");
    demux = gst_bin_get_by_name(GST_BIN(bin), "demux");
    out = std::make_unique<Collector>(demux);
    GstPad* sink = gst_element_get_static_pad(demux, "sink");
    out->watch_eos(sink);
    gst_object_unref(sink);
    EXPECT_NE(gst_element_set_state(bin, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  }
  ~MuxDemux() {
    gst_element_set_state(bin, GST_STATE_NULL);
    out.reset();
    gst_object_unref(mux);
    gst_object_unref(demux);
    gst_object_unref(bin);
  }
};

// Checks one source's output: frames first..last-1 of `source` in order, with their timestamps.
void expect_frames(Collected& c, int source, int first, int last) {
  ASSERT_EQ(c.buffers.size(), static_cast<size_t>(last - first)) << "source " << source;
  for (int i = first; i < last; ++i) {
    GstBuffer* b = c.buffers[i - first];
    EXPECT_EQ(buffer_tensor<float>(b, 0), (std::vector<float>{100.0f * source + i, -(100.0f * source + i)}))
        << "source " << source << " frame " << i;
    EXPECT_EQ(buffer_tensor<gint32>(b, 1), (std::vector<gint32>{i}));
    EXPECT_EQ(GST_BUFFER_PTS(b), frame_pts(source, i));
    EXPECT_EQ(GST_BUFFER_DURATION(b), GST_SECOND / 10);
    EXPECT_EQ(GST_BUFFER_OFFSET(b), static_cast<guint64>(i));
    const JobflowMuxMeta* m = jobflow_buffer_get_mux_meta(b);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->batch_size, 1u);
    EXPECT_EQ(m->source_id[0], static_cast<guint>(source));
  }
}

}  // namespace

TEST(JobMux, BatchesTheSourcesFramesWithTheirMetas) {
  GstElement* mux = gst_element_factory_make("jobmux", nullptr);
  g_object_set(mux, "batch-size", 2, nullptr);
  GstHarness* out = gst_harness_new_with_element(mux, nullptr, "src");
  GstHarness* s0 = add_source(mux, 0, 10);
  GstHarness* s1 = add_source(mux, 1, 25);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(gst_harness_push(s0, frame(0, i)), GST_FLOW_OK);
    ASSERT_EQ(gst_harness_push(s1, frame(1, i)), GST_FLOW_OK);
  }
  ASSERT_TRUE(gst_harness_push_event(s0, gst_event_new_eos()));
  ASSERT_TRUE(gst_harness_push_event(s1, gst_event_new_eos()));
  // 6 frames: 3 full batches; then a source-EOS event per source, then EOS.
  std::map<guint, std::vector<int>> seen;
  for (int b = 0; b < 3; ++b) {
    GstBuffer* batch = gst_harness_pull(out);
    ASSERT_NE(batch, nullptr);
    const JobflowMuxMeta* mm = jobflow_buffer_get_mux_meta(batch);
    const JobflowBatchMeta* bm = jobflow_buffer_get_batch_meta(batch);
    ASSERT_NE(mm, nullptr);
    ASSERT_NE(bm, nullptr);
    EXPECT_EQ(mm->batch_size, 2u);
    EXPECT_EQ(mm->valid, 2u);
    const std::vector<float> x = buffer_tensor<float>(batch, 0);
    const std::vector<gint32> idx = buffer_tensor<gint32>(batch, 1);
    for (guint slot = 0; slot < 2; ++slot) {
      const guint source = mm->source_id[slot];
      const int i = idx[slot];
      EXPECT_EQ(x[2 * slot], 100.0f * source + i) << "slot " << slot;
      EXPECT_EQ(bm->pts[slot], frame_pts(source, i));
      EXPECT_EQ(bm->offset[slot], static_cast<guint64>(i));
      ASSERT_NE(mm->frames[slot], nullptr);
      EXPECT_EQ(GST_BUFFER_PTS(mm->frames[slot]), frame_pts(source, i));
      ASSERT_NE(mm->caps[slot], nullptr);
      EXPECT_EQ(caps_string(mm->caps[slot], "framerate"), source == 0 ? "10/1" : "25/1");
      seen[source].push_back(i);
    }
    gst_buffer_unref(batch);
  }
  EXPECT_EQ(seen[0], (std::vector<int>{0, 1, 2}));  // each source's frames in its order
  EXPECT_EQ(seen[1], (std::vector<int>{0, 1, 2}));
  GstCaps* caps = gst_pad_get_current_caps(out->sinkpad);
  EXPECT_EQ(caps_string(caps, "dimensions"), "2:2,2");  // (2, 2) and (2,)
  EXPECT_EQ(caps_string(caps, "types"), "float32,int32");
  gst_caps_unref(caps);
  std::vector<guint> ended;
  for (;;) {
    GstEvent* e = gst_harness_pull_event(out);
    ASSERT_NE(e, nullptr) << "no EOS";
    if (GST_EVENT_TYPE(e) == GST_EVENT_CUSTOM_DOWNSTREAM &&
        gst_structure_has_name(gst_event_get_structure(e), JOBFLOW_MUX_SOURCE_EOS_EVENT)) {
      guint source = 99;
      gst_structure_get_uint(gst_event_get_structure(e), "source", &source);
      ended.push_back(source);
    }
    const bool eos = GST_EVENT_TYPE(e) == GST_EVENT_EOS;
    gst_event_unref(e);
    if (eos) break;
  }
  std::sort(ended.begin(), ended.end());
  EXPECT_EQ(ended, (std::vector<guint>{0, 1}));
  gst_harness_teardown(s1);
  gst_harness_teardown(s0);
  gst_harness_teardown(out);
  gst_object_unref(mux);
}

TEST(JobMux, MaxLatencyPushesAPaddedPartialBatch) {
  GstElement* mux = gst_element_factory_make("jobmux", nullptr);
  g_object_set(mux, "batch-size", 4, "max-latency", G_GUINT64_CONSTANT(1000000), nullptr);
  GstHarness* out = gst_harness_new_with_element(mux, nullptr, "src");
  GstHarness* s0 = add_source(mux, 3, 10);
  ASSERT_EQ(gst_harness_push(s0, frame(3, 0)), GST_FLOW_OK);
  GstBuffer* batch = gst_harness_pull(out);  // after 1 ms, not 4 frames
  ASSERT_NE(batch, nullptr);
  const JobflowMuxMeta* mm = jobflow_buffer_get_mux_meta(batch);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->valid, 1u);
  EXPECT_EQ(mm->source_id[0], 3u);
  EXPECT_EQ(mm->source_id[1], G_MAXUINT);
  EXPECT_EQ(buffer_tensor<float>(batch, 0), (std::vector<float>{300, -300, 0, 0, 0, 0, 0, 0}));
  gst_buffer_unref(batch);
  gst_harness_teardown(s0);
  gst_harness_teardown(out);
  gst_object_unref(mux);
}

TEST(JobMux, LatencyAddsMaxLatencyToTheSources) {
  GstElement* mux = gst_element_factory_make("jobmux", nullptr);
  g_object_set(mux, "batch-size", 2, "max-latency", G_GUINT64_CONSTANT(5000000), nullptr);
  GstHarness* out = gst_harness_new_with_element(mux, nullptr, "src");
  GstHarness* s0 = add_source(mux, 0, 10);
  GstHarness* s1 = add_source(mux, 1, 10);
  gst_harness_set_upstream_latency(s0, 10 * GST_MSECOND);
  gst_harness_set_upstream_latency(s1, 20 * GST_MSECOND);
  GstQuery* q = gst_query_new_latency();
  ASSERT_TRUE(gst_pad_peer_query(out->sinkpad, q));
  GstClockTime min = 0;
  gst_query_parse_latency(q, nullptr, &min, nullptr);
  EXPECT_EQ(min, 25 * GST_MSECOND);  // the slowest source, plus max-latency
  gst_query_unref(q);
  gst_harness_teardown(s1);
  gst_harness_teardown(s0);
  gst_harness_teardown(out);
  gst_object_unref(mux);
}

TEST(JobMux, SourcesWithOtherTensorsAreRefusedNamingThePad) {
  GstElement* mux = gst_element_factory_make("jobmux", nullptr);
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(mux, bus);
  GstHarness* out = gst_harness_new_with_element(mux, nullptr, "src");
  GstHarness* s0 = add_source(mux, 0, 10);
  GstHarness* s1 = gst_harness_new_with_element(mux, "sink_1", nullptr);
  GstCaps* other = gst_caps_from_string(
      "other/tensors,format=static,num_tensors=1,dimensions=(string)\"3:1\",types=(string)float32,framerate=10/1");
  // A sink pad with the other caps is asked for what the first source gave.
  GstPad* pad = gst_element_get_static_pad(mux, "sink_1");
  GstCaps* asked = gst_pad_query_caps(pad, nullptr);
  EXPECT_EQ(caps_string(asked, "dimensions"), "2:1,1");
  gst_caps_unref(asked);
  gst_object_unref(pad);
  gst_pad_push_event(s1->srcpad, gst_event_new_caps(other));  // refused: its frames are not taken
  gst_caps_unref(other);
  GstSegment seg;
  gst_segment_init(&seg, GST_FORMAT_TIME);
  gst_pad_push_event(s1->srcpad, gst_event_new_segment(&seg));
  EXPECT_EQ(gst_harness_push(s1, frame(1, 0)), GST_FLOW_NOT_NEGOTIATED);
  GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
  ASSERT_NE(m, nullptr);
  GError* err = nullptr;
  gst_message_parse_error(m, &err, nullptr);
  EXPECT_TRUE(g_error_matches(err, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION));
  const std::string msg = err->message;
  EXPECT_NE(msg.find("sink_1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(1, 3) float32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sink_0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(1, 2) float32, (1,) int32"), std::string::npos) << msg;
  g_error_free(err);
  gst_message_unref(m);
  gst_harness_teardown(s1);
  gst_harness_teardown(s0);
  gst_harness_teardown(out);
  gst_bus_set_flushing(bus, TRUE);
  gst_object_unref(bus);
  gst_object_unref(mux);
}

TEST(JobMuxDemux, EachSourceGetsItsFramesInOrderWithItsCaps) {
  MuxDemux md("batch-size=4");
  const int counts[3] = {5, 3, 7};
  const int fps[3] = {10, 25, 30};
  GstHarness* src[3];
  for (int s = 0; s < 3; ++s) src[s] = add_source(md.mux, s, fps[s]);
  for (int i = 0; i < 7; ++i)
    for (int s = 0; s < 3; ++s) {
      if (i < counts[s]) {
        ASSERT_EQ(gst_harness_push(src[s], frame(s, i)), GST_FLOW_OK);
      }
    }
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(gst_harness_push_event(src[s], gst_event_new_eos()));
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(md.out->wait_eos("src_" + std::to_string(s))) << "source " << s;
  auto& got = md.out->got();
  ASSERT_EQ(got.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    Collected& c = got["src_" + std::to_string(s)];
    expect_frames(c, s, 0, counts[s]);  // everything delivered, in order, before EOS
    ASSERT_NE(c.caps, nullptr);
    EXPECT_EQ(caps_string(c.caps, "dimensions"), "2:1,1");
    EXPECT_EQ(caps_string(c.caps, "framerate"), std::to_string(fps[s]) + "/1");
    EXPECT_EQ(c.events.front(), "stream-start");
    EXPECT_EQ(c.events.back(), "eos");
  }
  for (int s = 0; s < 3; ++s) gst_harness_teardown(src[s]);
}

TEST(JobMuxDemux, SourcesJoinAndLeaveWhilePlaying) {
  MuxDemux md("batch-size=2 max-latency=1000000");
  GstHarness* a = add_source(md.mux, 0, 10);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(gst_harness_push(a, frame(0, i)), GST_FLOW_OK);
  ASSERT_TRUE(md.out->wait_buffers("src_0", 3));
  // Source 1 joins; source 0 ends (EOS) while source 1 goes on.
  GstHarness* b = add_source(md.mux, 1, 10);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(gst_harness_push(b, frame(1, i)), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(a, frame(0, 3)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(a, gst_event_new_eos()));
  ASSERT_TRUE(md.out->wait_eos("src_0"));
  ASSERT_TRUE(md.out->wait_buffers("src_1", 2));
  EXPECT_FALSE(md.out->got()["src_1"].eos);
  // Source 2 joins, sends two frames and leaves without EOS (its pad released).
  GstHarness* c = add_source(md.mux, 2, 10);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(gst_harness_push(c, frame(2, i)), GST_FLOW_OK);
  ASSERT_TRUE(md.out->wait_buffers("src_2", 2));
  gst_harness_teardown(c);  // releases sink_2
  ASSERT_TRUE(md.out->wait_eos("src_2"));
  EXPECT_EQ(gst_element_get_static_pad(md.mux, "sink_2"), nullptr);
  // The last source ends: everything it sent arrives, then EOS.
  ASSERT_EQ(gst_harness_push(b, frame(1, 2)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(b, gst_event_new_eos()));
  ASSERT_TRUE(md.out->wait_eos("src_1"));
  auto& got = md.out->got();
  expect_frames(got["src_0"], 0, 0, 4);
  expect_frames(got["src_1"], 1, 0, 3);
  expect_frames(got["src_2"], 2, 0, 2);
  // The mux itself ended (every source left): EOS reached jobdemux.
  ASSERT_TRUE(md.out->wait_stream_eos());
  gst_harness_teardown(b);
  gst_harness_teardown(a);
}

TEST(JobMuxDemux, AFlushDropsOnlyThatSourcesWaitingFrames) {
  MuxDemux md("batch-size=8");  // no latency bound: the frames wait in the batch
  GstHarness* a = add_source(md.mux, 0, 10);
  GstHarness* b = add_source(md.mux, 1, 10);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(gst_harness_push(a, frame(0, i)), GST_FLOW_OK);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(gst_harness_push(b, frame(1, i)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(a, gst_event_new_flush_start()));
  ASSERT_TRUE(gst_harness_push_event(a, gst_event_new_flush_stop(TRUE)));
  GstSegment seg;
  gst_segment_init(&seg, GST_FORMAT_TIME);
  ASSERT_TRUE(gst_harness_push_event(a, gst_event_new_segment(&seg)));
  ASSERT_EQ(gst_harness_push(a, frame(0, 5)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(a, gst_event_new_eos()));
  ASSERT_TRUE(gst_harness_push_event(b, gst_event_new_eos()));
  ASSERT_TRUE(md.out->wait_eos("src_0"));
  ASSERT_TRUE(md.out->wait_eos("src_1"));
  auto& got = md.out->got();
  expect_frames(got["src_0"], 0, 5, 6);  // frames 0..2 were flushed
  expect_frames(got["src_1"], 1, 0, 2);
  for (auto& [name, c] : got)
    for (const std::string& e : c.events) EXPECT_NE(e, "flush-start") << name;  // not forwarded
  gst_harness_teardown(b);
  gst_harness_teardown(a);
}

TEST(JobMux, AFlushingSeekFlushesDownstreamAndEverySource) {
  GstElement* mux = gst_element_factory_make("jobmux", nullptr);
  g_object_set(mux, "batch-size", 4, nullptr);
  GstHarness* out = gst_harness_new_with_element(mux, nullptr, "src");
  GstHarness* s0 = add_source(mux, 0, 10);
  GstHarness* s1 = add_source(mux, 1, 10);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(gst_harness_push(s0, frame(0, i)), GST_FLOW_OK);  // a full batch
  GstBuffer* first = gst_harness_pull(out);
  gst_buffer_unref(first);
  ASSERT_EQ(gst_harness_push(s1, frame(1, 0)), GST_FLOW_OK);  // waits in the next batch
  while (GstEvent* e = gst_harness_try_pull_event(out)) gst_event_unref(e);
  ASSERT_TRUE(gst_harness_push_upstream_event(
      out, gst_event_new_seek(1.0, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, GST_SEEK_TYPE_SET, 0, GST_SEEK_TYPE_NONE, 0)));
  for (GstHarness* s : {s0, s1}) {  // every source was asked to seek, and flushes as a source does
    bool seek = false;
    while (GstEvent* up = gst_harness_try_pull_upstream_event(s)) {
      seek |= GST_EVENT_TYPE(up) == GST_EVENT_SEEK;
      gst_event_unref(up);
    }
    EXPECT_TRUE(seek);
    ASSERT_TRUE(gst_harness_push_event(s, gst_event_new_flush_start()));
    ASSERT_TRUE(gst_harness_push_event(s, gst_event_new_flush_stop(TRUE)));
    GstSegment seg;
    gst_segment_init(&seg, GST_FORMAT_TIME);
    ASSERT_TRUE(gst_harness_push_event(s, gst_event_new_segment(&seg)));
  }
  std::vector<GstEventType> down;
  while (GstEvent* e = gst_harness_try_pull_event(out)) {
    down.push_back(GST_EVENT_TYPE(e));
    gst_event_unref(e);
  }
  EXPECT_EQ(down, (std::vector<GstEventType>{GST_EVENT_FLUSH_START, GST_EVENT_FLUSH_STOP}));
  // After the seek: the frame that waited is gone; new frames come with a new segment.
  for (int i = 10; i < 14; ++i) ASSERT_EQ(gst_harness_push(s1, frame(1, i)), GST_FLOW_OK);
  GstBuffer* batch = gst_harness_pull(out);
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(buffer_tensor<gint32>(batch, 1), (std::vector<gint32>{10, 11, 12, 13}));
  gst_buffer_unref(batch);
  GstEvent* seg = gst_harness_pull_event(out);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(GST_EVENT_TYPE(seg), GST_EVENT_SEGMENT);
  gst_event_unref(seg);
  gst_harness_teardown(s1);
  gst_harness_teardown(s0);
  gst_harness_teardown(out);
  gst_object_unref(mux);
}

TEST(JobMuxDemux, FramesOutputGivesTheFramesAsTheyCame) {
  MuxDemux md("batch-size=2", "output=frames");
  GstHarness* a = add_source(md.mux, 4, 15);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(gst_harness_push(a, frame(4, i)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(a, gst_event_new_eos()));
  ASSERT_TRUE(md.out->wait_eos("src_4"));
  Collected& c = md.out->got()["src_4"];
  expect_frames(c, 4, 0, 3);
  ASSERT_NE(c.caps, nullptr);
  GstCaps* want = gst_caps_from_string(frame_caps(15).c_str());
  EXPECT_TRUE(gst_caps_is_equal(c.caps, want));
  gst_caps_unref(want);
  gst_harness_teardown(a);
}

// The results of a frame carry what rode on the frame into jobmux: its
// JobflowFrameMeta (the video frame and the scaling jobdecode's frame modes
// need), not its tensor meta (the results have their own).
TEST(JobMuxDemux, ResultsKeepTheirFramesFrameMeta) {
  MuxDemux md("batch-size=2");
  GstHarness* a = add_source(md.mux, 0, 10);
  GstHarness* b = add_source(md.mux, 1, 10);
  GstCaps* video = gst_caps_from_string("video/x-raw,format=RGB,width=64,height=48,framerate=10/1");
  GstBuffer* pictures[2][2];
  for (int i = 0; i < 2; ++i)
    for (int s = 0; s < 2; ++s) {
      pictures[s][i] = gst_buffer_new_allocate(nullptr, 64 * 48 * 3, nullptr);
      GstBuffer* f = frame(s, i);
      jobflow_buffer_add_frame_meta(f, pictures[s][i], video, 32, 32, 0.5, 0.5, 0, 4.0 + s);
      jobflow::gst::add_tensor_meta(f, {{{1, 2}, jobflow::DType::Float32}, {{1}, jobflow::DType::Int32}});
      ASSERT_EQ(gst_harness_push(s == 0 ? a : b, f), GST_FLOW_OK);
    }
  for (GstHarness* h : {a, b}) ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  for (int s = 0; s < 2; ++s) {
    const std::string pad = "src_" + std::to_string(s);
    ASSERT_TRUE(md.out->wait_eos(pad));
    Collected& c = md.out->got()[pad];
    expect_frames(c, s, 0, 2);
    for (int i = 0; i < 2; ++i) {
      const JobflowFrameMeta* fm = jobflow_buffer_get_frame_meta(c.buffers[i]);
      ASSERT_NE(fm, nullptr) << pad << " frame " << i;
      EXPECT_EQ(fm->frame, pictures[s][i]);  // the very frame, not a copy
      EXPECT_EQ(fm->frame_width, 64);
      EXPECT_EQ(fm->model_height, 32);
      EXPECT_DOUBLE_EQ(fm->pad_y, 4.0 + s);
      gint metas = 0;
      gpointer state = nullptr;
      while (GstMeta* m = gst_buffer_iterate_meta(c.buffers[i], &state))
        metas += m->info->api == JOBFLOW_TENSOR_META_API_TYPE;
      EXPECT_EQ(metas, 1);  // the results' own
      const JobflowTensorMeta* tm = jobflow_buffer_get_tensor_meta(c.buffers[i]);
      ASSERT_NE(tm, nullptr);
      EXPECT_EQ(tm->tensors[0].dims[1], 2u);
    }
  }
  for (int i = 0; i < 2; ++i)
    for (int s = 0; s < 2; ++s) gst_buffer_unref(pictures[s][i]);
  gst_caps_unref(video);
  gst_harness_teardown(b);
  gst_harness_teardown(a);
}

// A slot whose buffer carries regions (after jobdecode on the batch it is
// the video frame with them): its results carry the regions too, but not
// the frame's GstVideoMeta (a tensor slice has no video layout).
TEST(JobMuxDemux, ResultsCarryTheRegionsOfTheirSlotsFrameButNoVideoMeta) {
  MuxDemux md("batch-size=2");
  GstHarness* a = add_source(md.mux, 0, 10);
  GstBuffer* f = frame(0, 0);
  jobflow_analytics_relation_meta_add_od_mtd(jobflow_buffer_add_analytics_relation_meta(f), g_quark_from_string("car"),
                                             1, 2, 3, 4, 0.5f, nullptr);
  gst_buffer_add_video_meta(f, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_FORMAT_GRAY8, 4, 3);
  ASSERT_EQ(gst_harness_push(a, f), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(a, gst_event_new_eos()));
  ASSERT_TRUE(md.out->wait_eos("src_0"));
  Collected& c = md.out->got()["src_0"];
  expect_frames(c, 0, 0, 1);
  gchar* json = jobflow_analytics_relation_meta_to_json(jobflow_buffer_get_analytics_relation_meta(c.buffers[0]));
  EXPECT_STREQ(json, "{\"regions\":[{\"id\":0,\"label\":\"car\",\"confidence\":0.5,\"x\":1,\"y\":2,\"w\":3,\"h\":4}]}");
  g_free(json);
  EXPECT_EQ(gst_buffer_get_video_meta(c.buffers[0]), nullptr);
  gst_harness_teardown(a);
}

TEST(JobDemux, RefusesBuffersWithoutAMuxMeta) {
  GstHarness* h = gst_harness_new_with_padnames("jobdemux", "sink", nullptr);
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  gst_harness_set_src_caps_str(h, frame_caps(10).c_str());
  EXPECT_EQ(gst_harness_push(h, frame(0, 0)), GST_FLOW_ERROR);
  GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
  ASSERT_NE(m, nullptr);
  GError* err = nullptr;
  gst_message_parse_error(m, &err, nullptr);
  EXPECT_TRUE(g_error_matches(err, GST_STREAM_ERROR, GST_STREAM_ERROR_FORMAT));
  EXPECT_NE(std::string(err->message).find("JobflowMuxMeta"), std::string::npos) << err->message;
  g_error_free(err);
  gst_message_unref(m);
  gst_harness_teardown(h);
  gst_bus_set_flushing(bus, TRUE);
  gst_object_unref(bus);
}

// A meta describing every slot of a batch reaches each frame through its
// registered split function (here JobflowBatchMeta's slot timestamps, as a
// region meta's per-frame regions would).
TEST(JobMuxDemux, RegisteredSplitFunctionsGiveEachFrameItsPartOfABatchMeta) {
  jobflow_meta_split_register(JOBFLOW_BATCH_META_API_TYPE,
                              [](GstBuffer* dest, const GstMeta* meta, guint slot, guint batch_size) -> gboolean {
                                const auto* bm = reinterpret_cast<const JobflowBatchMeta*>(meta);
                                if (bm->batch_size != batch_size || slot >= bm->valid) return FALSE;
                                JobflowBatchMeta* one = jobflow_buffer_add_batch_meta(dest, 1);
                                one->valid = 1;
                                one->pts[0] = bm->pts[slot];
                                one->offset[0] = slot;  // where it was in the batch
                                return TRUE;
                              });
  MuxDemux md("batch-size=2");
  GstHarness* a = add_source(md.mux, 0, 10);
  GstHarness* b = add_source(md.mux, 1, 10);
  ASSERT_EQ(gst_harness_push(a, frame(0, 0)), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(b, frame(1, 0)), GST_FLOW_OK);
  ASSERT_TRUE(md.out->wait_buffers("src_0", 1));
  ASSERT_TRUE(md.out->wait_buffers("src_1", 1));
  guint slots = 0;
  for (int s = 0; s < 2; ++s) {
    GstBuffer* f = md.out->got()["src_" + std::to_string(s)].buffers[0];
    const JobflowBatchMeta* one = jobflow_buffer_get_batch_meta(f);
    ASSERT_NE(one, nullptr);
    EXPECT_EQ(one->batch_size, 1u);
    EXPECT_EQ(one->pts[0], frame_pts(s, 0));
    slots |= 1u << one->offset[0];
  }
  EXPECT_EQ(slots, 3u);  // one frame from slot 0, the other from slot 1
  jobflow_meta_split_register(JOBFLOW_BATCH_META_API_TYPE, nullptr);
  gst_harness_teardown(b);
  gst_harness_teardown(a);
}

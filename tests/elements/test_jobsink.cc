// jobsink: pull-result / try-pull-result, new-result, callbacks, bounded
// queue with drop policy, EOS and state changes. Loads the plugin from the
// build tree (GST_PLUGIN_PATH, private registry: see meson.build).
#include <gtest/gtest.h>

#include <gst/base/gstbasesink.h>
#include <gst/check/gstharness.h>
#include <gst/gst.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "jobsink.h"
#include "tensor_caps.h"

namespace {

using jobflow::DType;
using jobflow::Tensor;
using namespace std::chrono_literals;

class GstEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    gst_init(nullptr, nullptr);
    GstElementFactory* f = gst_element_factory_find("jobsink");
    ASSERT_NE(f, nullptr) << "jobsink not found: GST_PLUGIN_PATH=" << (g_getenv("GST_PLUGIN_PATH") ?: "");
    gst_object_unref(f);
  }
};
const auto* const env = ::testing::AddGlobalTestEnvironment(new GstEnvironment);

constexpr const char* kCaps = "other/tensors,format=static,num_tensors=1,dimensions=(string)3,types=(string)float32";

GstBuffer* result(int i) {
  Tensor t = Tensor::from<float>({3}, {float(i), float(i) + 0.25f, -float(i)});
  GstBuffer* b = jobflow::gst::buffer_from_tensors({t});
  GST_BUFFER_PTS(b) = i * GST_MSECOND;
  GST_BUFFER_DURATION(b) = GST_MSECOND;
  return b;
}

GstHarness* new_sink() {
  GstHarness* h = gst_harness_new("jobsink");
  gst_harness_set_src_caps_str(h, kCaps);
  return h;
}

GstSample* pull(GstHarness* h) {
  GstSample* s = nullptr;
  g_signal_emit_by_name(h->element, "pull-result", &s);
  return s;
}

GstSample* try_pull(GstHarness* h, guint64 timeout) {
  GstSample* s = nullptr;
  g_signal_emit_by_name(h->element, "try-pull-result", timeout, &s);
  return s;
}

int index_of(GstSample* s) {
  std::vector<Tensor> t;
  std::string err;
  EXPECT_TRUE(jobflow_sample_to_tensors(s, &t, &err)) << err;
  if (t.size() != 1) return -1;
  return static_cast<int>(t[0].data<float>()[0]);
}

TEST(JobSink, Defaults) {
  GstElement* sink = gst_element_factory_make("jobsink", nullptr);
  ASSERT_NE(sink, nullptr);
  gboolean emit = TRUE, drop = TRUE, sync = TRUE;
  guint max = 0;
  g_object_get(sink, "emit-signals", &emit, "drop", &drop, "sync", &sync, "max-results", &max, nullptr);
  EXPECT_FALSE(emit);
  EXPECT_FALSE(drop);
  EXPECT_FALSE(sync);
  EXPECT_EQ(max, 16u);
  EXPECT_FALSE(gst_base_sink_get_sync(GST_BASE_SINK(sink)));
  g_object_set(sink, "sync", TRUE, nullptr);
  EXPECT_TRUE(gst_base_sink_get_sync(GST_BASE_SINK(sink)));
  // Not started: pull returns at once.
  EXPECT_EQ(job_sink_pull_result(sink), nullptr);
  gst_object_unref(sink);
}

TEST(JobSink, PullReturnsResultsInOrderIntact) {
  GstHarness* h = new_sink();
  std::vector<const void*> data;
  for (int i = 0; i < 5; ++i) {
    GstBuffer* b = result(i);
    GstMapInfo map;
    ASSERT_TRUE(gst_buffer_map(b, &map, GST_MAP_READ));
    data.push_back(map.data);
    gst_buffer_unmap(b, &map);
    ASSERT_EQ(gst_harness_push(h, b), GST_FLOW_OK);
  }
  for (int i = 0; i < 5; ++i) {
    GstSample* s = pull(h);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(GST_BUFFER_PTS(gst_sample_get_buffer(s)), i * GST_MSECOND);
    EXPECT_NE(gst_sample_get_caps(s), nullptr);
    EXPECT_NE(gst_sample_get_segment(s), nullptr);
    std::vector<Tensor> t;
    std::string err;
    ASSERT_TRUE(jobflow_sample_to_tensors(s, &t, &err)) << err;
    gst_sample_unref(s);  // the tensors keep the memory alive
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t[0].raw(), data[i]) << "copied";
    EXPECT_EQ(t[0].to_vector<float>(), (std::vector<float>{float(i), i + 0.25f, -float(i)}));
  }
  EXPECT_EQ(try_pull(h, 0), nullptr);
  gst_harness_teardown(h);
}

TEST(JobSink, PullBlocksThenReturnsNullAtEos) {
  GstHarness* h = new_sink();
  auto first = std::async(std::launch::async, [&] { return pull(h); });
  EXPECT_EQ(first.wait_for(100ms), std::future_status::timeout) << "pull-result did not block";
  ASSERT_EQ(gst_harness_push(h, result(7)), GST_FLOW_OK);
  ASSERT_EQ(first.wait_for(5s), std::future_status::ready);
  GstSample* s = first.get();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(index_of(s), 7);
  gst_sample_unref(s);

  // A result queued before EOS is still delivered, then NULL.
  ASSERT_EQ(gst_harness_push(h, result(8)), GST_FLOW_OK);
  auto blocked = std::async(std::launch::async, [&] {
    GstSample* a = pull(h);
    GstSample* b = pull(h);
    return std::make_pair(a, b);
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(job_sink_is_eos(h->element));
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  ASSERT_EQ(blocked.wait_for(5s), std::future_status::ready);
  auto [a, b] = blocked.get();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(index_of(a), 8);
  gst_sample_unref(a);
  EXPECT_EQ(b, nullptr);
  EXPECT_TRUE(job_sink_is_eos(h->element));
  gboolean eos = FALSE;
  g_object_get(h->element, "eos", &eos, nullptr);
  EXPECT_TRUE(eos);
  EXPECT_EQ(pull(h), nullptr);  // stays NULL
  gst_harness_teardown(h);
}

TEST(JobSink, PullUnblocksOnStateChangeToReady) {
  GstHarness* h = new_sink();
  auto blocked = std::async(std::launch::async, [&] { return pull(h); });
  EXPECT_EQ(blocked.wait_for(100ms), std::future_status::timeout);
  ASSERT_EQ(gst_element_set_state(h->element, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  ASSERT_EQ(blocked.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(blocked.get(), nullptr);
  EXPECT_EQ(pull(h), nullptr);
  gst_harness_teardown(h);
}

TEST(JobSink, StateChangeUnblocksAFullQueue) {
  GstHarness* h = new_sink();
  g_object_set(h->element, "max-results", 1u, nullptr);
  ASSERT_EQ(gst_harness_push(h, result(0)), GST_FLOW_OK);
  auto push = std::async(std::launch::async, [&] { return gst_harness_push(h, result(1)); });
  EXPECT_EQ(push.wait_for(100ms), std::future_status::timeout) << "render did not block on a full queue";
  ASSERT_EQ(gst_element_set_state(h->element, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  ASSERT_EQ(push.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(push.get(), GST_FLOW_FLUSHING);
  gst_harness_teardown(h);
}

TEST(JobSink, TryPullTimesOut) {
  GstHarness* h = new_sink();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(try_pull(h, 50 * GST_MSECOND), nullptr);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 45ms);
  EXPECT_EQ(try_pull(h, 0), nullptr);
  ASSERT_EQ(gst_harness_push(h, result(3)), GST_FLOW_OK);
  GstSample* s = job_sink_try_pull_result(h->element, 0);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(index_of(s), 3);
  gst_sample_unref(s);
  // A result arriving during the wait is returned.
  auto waiting = std::async(std::launch::async, [&] { return try_pull(h, 5 * GST_SECOND); });
  std::this_thread::sleep_for(30ms);
  ASSERT_EQ(gst_harness_push(h, result(4)), GST_FLOW_OK);
  s = waiting.get();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(index_of(s), 4);
  gst_sample_unref(s);
  gst_harness_teardown(h);
}

struct SignalCount {
  std::atomic<int> results{0};
  std::atomic<int> pulled{0};
  std::atomic<int> eos{0};
};

GstFlowReturn on_new_result(GstElement* sink, gpointer data) {
  auto* c = static_cast<SignalCount*>(data);
  c->results++;
  GstSample* s = nullptr;
  g_signal_emit_by_name(sink, "pull-result", &s);  // no lock is held: pulling here is fine
  if (s) {
    c->pulled++;
    gst_sample_unref(s);
  }
  return GST_FLOW_OK;
}

void on_eos(GstElement*, gpointer data) { static_cast<SignalCount*>(data)->eos++; }

TEST(JobSink, NewResultSignalPerBuffer) {
  GstHarness* h = new_sink();
  SignalCount c;
  g_signal_connect(h->element, "new-result", G_CALLBACK(on_new_result), &c);
  g_signal_connect(h->element, "eos", G_CALLBACK(on_eos), &c);
  // Off by default.
  ASSERT_EQ(gst_harness_push(h, result(0)), GST_FLOW_OK);
  EXPECT_EQ(c.results, 0);
  GstSample* s = pull(h);
  gst_sample_unref(s);
  g_object_set(h->element, "emit-signals", TRUE, nullptr);
  for (int i = 0; i < 40; ++i) ASSERT_EQ(gst_harness_push(h, result(i)), GST_FLOW_OK);
  EXPECT_EQ(c.results, 40);
  EXPECT_EQ(c.pulled, 40);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  EXPECT_EQ(c.eos, 1);
  gst_harness_teardown(h);
}

GstFlowReturn flow_error_on_new_result(GstElement*, gpointer) { return GST_FLOW_ERROR; }

TEST(JobSink, NewResultReturnValueStopsTheStream) {
  GstHarness* h = new_sink();
  g_object_set(h->element, "emit-signals", TRUE, nullptr);
  g_signal_connect(h->element, "new-result", G_CALLBACK(flow_error_on_new_result), nullptr);
  EXPECT_EQ(gst_harness_push(h, result(0)), GST_FLOW_ERROR);
  gst_harness_teardown(h);
}

struct CallbackState {
  std::atomic<int> results{0};
  std::atomic<int> eos{0};
  std::atomic<int> destroyed{0};
  std::vector<int> order;
};

TEST(JobSink, CallbacksStruct) {
  GstHarness* h = new_sink();
  CallbackState st;
  JobSinkCallbacks cb{};
  cb.new_result = [](GstElement* sink, gpointer data) -> GstFlowReturn {
    auto* s = static_cast<CallbackState*>(data);
    s->results++;
    GstSample* r = job_sink_pull_result(sink);
    if (!r) return GST_FLOW_ERROR;
    s->order.push_back(index_of(r));
    gst_sample_unref(r);
    return GST_FLOW_OK;
  };
  cb.eos = [](GstElement*, gpointer data) { static_cast<CallbackState*>(data)->eos++; };
  job_sink_set_callbacks(h->element, &cb, &st, [](gpointer data) { static_cast<CallbackState*>(data)->destroyed++; });
  for (int i = 0; i < 25; ++i) ASSERT_EQ(gst_harness_push(h, result(i)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  EXPECT_EQ(st.results, 25);
  EXPECT_EQ(st.eos, 1);
  ASSERT_EQ(st.order.size(), 25u);
  for (int i = 0; i < 25; ++i) EXPECT_EQ(st.order[i], i);
  EXPECT_EQ(st.destroyed, 0);
  // Replacing the callbacks releases the old user data once.
  job_sink_set_callbacks(h->element, nullptr, nullptr, nullptr);
  EXPECT_EQ(st.destroyed, 1);
  gst_harness_teardown(h);
  EXPECT_EQ(st.destroyed, 1);
}

TEST(JobSink, CallbacksUserDataFreedWithTheSink) {
  std::atomic<int> destroyed{0};
  GstElement* sink = gst_element_factory_make("jobsink", nullptr);
  JobSinkCallbacks cb{};
  job_sink_set_callbacks(sink, &cb, &destroyed, [](gpointer d) { (*static_cast<std::atomic<int>*>(d))++; });
  EXPECT_EQ(destroyed, 0);
  gst_object_unref(sink);
  EXPECT_EQ(destroyed, 1);
}

TEST(JobSink, MaxResultsWithDropKeepsTheNewest) {
  GstHarness* h = new_sink();
  g_object_set(h->element, "max-results", 3u, "drop", TRUE, nullptr);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(gst_harness_push(h, result(i)), GST_FLOW_OK);
  for (int want : {7, 8, 9}) {
    GstSample* s = try_pull(h, 0);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(index_of(s), want);
    gst_sample_unref(s);
  }
  EXPECT_EQ(try_pull(h, 0), nullptr);
  gst_harness_teardown(h);
}

TEST(JobSink, MaxResultsBlocksUpstreamUntilPulled) {
  GstHarness* h = new_sink();
  g_object_set(h->element, "max-results", 2u, nullptr);
  ASSERT_EQ(gst_harness_push(h, result(0)), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(h, result(1)), GST_FLOW_OK);
  auto push = std::async(std::launch::async, [&] { return gst_harness_push(h, result(2)); });
  EXPECT_EQ(push.wait_for(100ms), std::future_status::timeout) << "render did not block on a full queue";
  GstSample* s = pull(h);
  EXPECT_EQ(index_of(s), 0);
  gst_sample_unref(s);
  ASSERT_EQ(push.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(push.get(), GST_FLOW_OK);
  for (int want : {1, 2}) {
    s = try_pull(h, 0);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(index_of(s), want);
    gst_sample_unref(s);
  }
  // Raising max-results unblocks a waiting render too.
  ASSERT_EQ(gst_harness_push(h, result(3)), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(h, result(4)), GST_FLOW_OK);
  push = std::async(std::launch::async, [&] { return gst_harness_push(h, result(5)); });
  EXPECT_EQ(push.wait_for(50ms), std::future_status::timeout);
  g_object_set(h->element, "max-results", 8u, nullptr);
  ASSERT_EQ(push.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(push.get(), GST_FLOW_OK);
  gst_harness_teardown(h);
}

TEST(JobSink, FlushDiscardsQueuedResults) {
  GstHarness* h = new_sink();
  ASSERT_EQ(gst_harness_push(h, result(0)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_start()));
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_stop(TRUE)));
  EXPECT_EQ(try_pull(h, 0), nullptr);
  gst_harness_set_src_caps_str(h, kCaps);  // segment again after the flush
  ASSERT_EQ(gst_harness_push(h, result(1)), GST_FLOW_OK);
  GstSample* s = try_pull(h, GST_SECOND);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(index_of(s), 1);
  gst_sample_unref(s);
  gst_harness_teardown(h);
}

TEST(JobSink, RestartsCleanAfterReady) {
  GstHarness* h = new_sink();
  ASSERT_EQ(gst_harness_push(h, result(0)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  EXPECT_TRUE(job_sink_is_eos(h->element) == FALSE);  // a result is still queued
  for (int cycle = 0; cycle < 3; ++cycle) {
    ASSERT_EQ(gst_element_set_state(h->element, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
    ASSERT_EQ(gst_element_set_state(h->element, GST_STATE_PLAYING), GST_STATE_CHANGE_SUCCESS);
    EXPECT_EQ(try_pull(h, 0), nullptr);  // queue and EOS were reset
    EXPECT_FALSE(job_sink_is_eos(h->element));
    // A new stream (the harness pad is still EOS from the first one).
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_stream_start("restart")));
    gst_harness_set_src_caps_str(h, kCaps);
    ASSERT_EQ(gst_harness_push(h, result(10 + cycle)), GST_FLOW_OK);
    GstSample* s = try_pull(h, GST_SECOND);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(index_of(s), 10 + cycle);
    gst_sample_unref(s);
  }
  gst_harness_teardown(h);
}

TEST(JobSink, CApiRejectsOtherElements) {
  GstElement* other = gst_element_factory_make("jobdatasrc", nullptr);
  ASSERT_NE(other, nullptr);
  // Logs a critical ("... is not a jobsink") and returns NULL.
  EXPECT_EQ(job_sink_try_pull_result(other, 0), nullptr);
  gst_object_unref(other);
}

}  // namespace

// GStreamer's latency tracer on the second stage: a real pipeline
//   appsrc ! jobcrop ! jobfunction ! jobdecode per-region=true ! fakesink
// run with GST_TRACERS="latency(flags=pipeline+element)" and the tracer's
// log written by GStreamer's default log function to a file
// (GST_DEBUG_FILE), read back after the run: each of the three elements must have
// element-latency records with a time, and the pipeline a latency record
// from the source to the sink. Values are not compared with thresholds
// (they depend on the machine). Unlike the other element tests this one
// needs GStreamer's own plugins (appsrc, fakesink, the core tracers), so it
// runs with those three (from the system plugin folder) and the plugin of
// the build tree.
#include <gtest/gtest.h>

#include <gst/gst.h>
#include <gst/video/video.h>
#include <unistd.h>

#include <jobflow/jobflow.h>
#include <jobflow/onnx.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "jobflow_analytics.h"

namespace {

namespace flow = jobflow;
namespace fs = std::filesystem;

fs::path tmp_dir() {
  const char* env = g_getenv("JOBFLOW_TEST_TMP");
  fs::path p = fs::path(env && *env ? env : fs::temp_directory_path().string()) /
               ("jobcrop-latency-" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

// The tracer's log. Read from a file rather than captured by a log function
// of our own: gst_debug_add_log_function drops the list it replaces without
// freeing it (GStreamer 1.22 keeps it for lock-free readers), which
// LeakSanitizer reports.
const fs::path& trace_log() {
  static const fs::path p = tmp_dir() / "trace.log";
  return p;
}

struct Records {
  std::map<std::string, std::vector<guint64>> element_latency;  // element name -> times (ns)
  std::vector<std::string> pipeline_latency;                     // "src-element>sink-element"
};

/* The tracer's records (category GST_TRACER) of the log: each line's text
 * from "element-latency, " or "latency, " on is a GstStructure. */
Records read_records(const fs::path& log) {
  Records r;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("GST_TRACER") == std::string::npos) continue;
    size_t at = line.find(" element-latency, ");
    if (at == std::string::npos) at = line.find(" latency, ");
    if (at == std::string::npos) continue;
    GstStructure* s = gst_structure_from_string(line.c_str() + at + 1, nullptr);
    if (!s) continue;
    guint64 time = 0;
    const bool timed = gst_structure_get_uint64(s, "time", &time);
    if (gst_structure_has_name(s, "element-latency") && timed) {
      r.element_latency[gst_structure_get_string(s, "element")].push_back(time);
    } else if (gst_structure_has_name(s, "latency") && timed) {
      r.pipeline_latency.push_back(std::string(gst_structure_get_string(s, "src-element")) + ">" +
                                   gst_structure_get_string(s, "sink-element"));
    }
    gst_structure_free(s);
  }
  return r;
}

/* GStreamer's system plugins this test needs (appsrc; fakesink; the latency
 * tracer), linked into a folder of their own that becomes the system plugin
 * path: the registry scan then loads these three, not every plugin
 * installed. (With GST_REGISTRY_FORK=no a full scan runs in this process;
 * its thousands of quarks outgrow GLib's first quark table, which GLib
 * drops on purpose for lock-free readers and LeakSanitizer reports.) */
void use_only_needed_system_plugins() {
  const char* dir = g_getenv("JOBFLOW_GST_SYSTEM_PLUGIN_DIR");
  const char* tmp = g_getenv("JOBFLOW_TEST_TMP");
  if (!dir || !*dir) return;  // not run by meson test: the default system path
  const fs::path own = fs::path(tmp && *tmp ? tmp : fs::temp_directory_path().string()) / "latency-system-plugins";
  fs::create_directories(own);
  for (const char* lib : {"libgstapp.so", "libgstcoreelements.so", "libgstcoretracers.so"}) {
    std::error_code ec;
    fs::remove(own / lib, ec);
    fs::create_symlink(fs::path(dir) / lib, own / lib);
  }
  g_setenv("GST_PLUGIN_SYSTEM_PATH_1_0", own.c_str(), TRUE);
}

class TracerEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    use_only_needed_system_plugins();
    g_setenv("GST_TRACERS", "latency(flags=pipeline+element)", TRUE);
    g_setenv("GST_DEBUG", "GST_TRACER:7", TRUE);
    g_setenv("GST_DEBUG_NO_COLOR", "1", TRUE);
    g_setenv("GST_DEBUG_FILE", trace_log().c_str(), TRUE);
    gst_init(nullptr, nullptr);
  }
};
const auto* const tracer_env = ::testing::AddGlobalTestEnvironment(new TracerEnv);


/* A 64x48 RGB frame with two red 8x8 plates (regions). */
GstBuffer* frame(int i) {
  GstVideoInfo info;
  gst_video_info_set_format(&info, GST_VIDEO_FORMAT_RGB, 64, 48);
  GstBuffer* b = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  gst_buffer_memset(b, 0, 0, GST_VIDEO_INFO_SIZE(&info));
  JobflowAnalyticsRelationMeta* m = jobflow_buffer_add_analytics_relation_meta(b);
  jobflow_analytics_relation_meta_add_od_mtd(m, g_quark_from_string("plate"), 4, 4, 8, 8, 0.9f, nullptr);
  jobflow_analytics_relation_meta_add_od_mtd(m, g_quark_from_string("plate"), 30, 20, 8, 8, 0.9f, nullptr);
  GST_BUFFER_PTS(b) = static_cast<GstClockTime>(i) * GST_SECOND / 30;
  GST_BUFFER_DURATION(b) = GST_SECOND / 30;
  return b;
}

TEST(SecondStageLatency, TheLatencyTracerReportsEachElement) {
  const fs::path dir = tmp_dir();
  const std::string job = (dir / "channel_mean.onnx").string();
  {
    auto fn = flow::global_function(flow::Predict, flow::function_config().name("channel_mean"),
                                    {flow::Numpy::Placeholder({4, 3, 8, 16}, flow::Float, "crops")},
                                    [](flow::Blob x) -> flow::Numpy { return flow::reduce_mean(x, {2, 3}); });
    flow::onnx::save(*fn.compiled(), job);
  }
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(
      ("appsrc name=src format=time caps=video/x-raw,format=RGB,width=64,height=48,framerate=30/1 "
       "! jobcrop name=crop label=plate ! jobfunction name=fn job=" + job +
       " ! jobdecode name=dec mode=labels per-region=true softmax=false ! fakesink name=sink sync=false")
          .c_str(),
      &err);
  ASSERT_NE(pipeline, nullptr) << (err ? err->message : "");
  ASSERT_EQ(err, nullptr) << err->message;
  ASSERT_NE(gst_element_set_state(pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  GstElement* src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
  for (int i = 0; i < 8; ++i) {
    GstFlowReturn ret;
    GstBuffer* b = frame(i);
    g_signal_emit_by_name(src, "push-buffer", b, &ret);
    gst_buffer_unref(b);
    ASSERT_EQ(ret, GST_FLOW_OK);
  }
  GstFlowReturn ret;
  g_signal_emit_by_name(src, "end-of-stream", &ret);
  gst_object_unref(src);
  GstBus* bus = gst_element_get_bus(pipeline);
  GstMessage* m = gst_bus_timed_pop_filtered(bus, GST_CLOCK_TIME_NONE,
                                             static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  ASSERT_NE(m, nullptr);
  if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) {
    GError* e = nullptr;
    gchar* dbg = nullptr;
    gst_message_parse_error(m, &e, &dbg);
    ADD_FAILURE() << e->message << " (" << (dbg ? dbg : "") << ")";
    g_error_free(e);
    g_free(dbg);
  }
  gst_message_unref(m);
  gst_object_unref(bus);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(pipeline);

  const Records r = read_records(trace_log());  // the default log function writes each line unbuffered
  for (const char* name : {"crop", "fn", "dec"}) {
    auto it = r.element_latency.find(name);
    ASSERT_NE(it, r.element_latency.end()) << "no element-latency record of " << name << " in " << trace_log();
    EXPECT_FALSE(it->second.empty()) << name;
  }
  EXPECT_NE(std::find(r.pipeline_latency.begin(), r.pipeline_latency.end(), "src>sink"), r.pipeline_latency.end());
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace

// Reads the analytics results (region metas) on the frames of a detection
// pipeline from C++: the frames arrive in jobsink, and each one's
// JobflowAnalyticsRelationMeta (jobflow_analytics.h, libjobflow-gst) gives
// the regions, their track ids and every other result attached to them.
//
//   videotestsrc num-buffers=N pattern=ball ! video/x-raw,width=320,height=240
//     ! videoconvert ! video/x-raw,format=RGB
//     ! jobconvert width=320 height=320 resize=letterbox
//     ! jobfunction job=ball_detector.onnx
//     ! jobdecode mode=boxes labels=ball.labels ! jobtrack ! jobsink name=out
//
// Prints one line per region: "frame F at T s: LABEL #TRACK (SCORE) at X,Y WxH".
// pipelines/apps/read_regions.py prints the same lines from the JSON form
// (the jobflow-regions messages), for applications without the C API.
#include <gst/gst.h>
#include <jobflow_analytics.h>
#include <jobsink.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#ifndef JOBFLOW_JOBS_DIR
#define JOBFLOW_JOBS_DIR "pipelines/jobs"
#endif
#ifndef JOBFLOW_BALL_LABELS
#define JOBFLOW_BALL_LABELS "pipelines/gst/ball.labels"
#endif

namespace {

int usage_error(const char* prog, const std::string& what) {
  std::fprintf(stderr, "%s: %s (try --help)\n", prog, what.c_str());
  return 2;
}

// One frame's regions, one line each.
void print_regions(guint64 frame, GstBuffer* buf) {
  JobflowAnalyticsRelationMeta* meta = jobflow_buffer_get_analytics_relation_meta(buf);
  if (!meta) return;
  const double t = GST_BUFFER_PTS_IS_VALID(buf) ? GST_BUFFER_PTS(buf) / 1e9 : 0.0;
  gpointer state = nullptr;
  JobflowAnalyticsODMtd od;
  while (jobflow_analytics_relation_meta_iterate(meta, &state, jobflow_analytics_od_mtd_get_mtd_type(), &od)) {
    gint x, y, w, h;
    gfloat conf;
    jobflow_analytics_od_mtd_get_location(&od, &x, &y, &w, &h, &conf);
    const GQuark label = jobflow_analytics_od_mtd_get_obj_type(&od);
    char track[32] = "-";
    gpointer related = nullptr;
    JobflowAnalyticsTrackingMtd trk;
    guint64 id;
    if (jobflow_analytics_relation_meta_get_direct_related(meta, od.id, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO,
                                                           jobflow_analytics_tracking_mtd_get_mtd_type(), &related,
                                                           &trk) &&
        jobflow_analytics_tracking_mtd_get_info(&trk, &id, nullptr, nullptr, nullptr))
      g_snprintf(track, sizeof track, "#%" G_GUINT64_FORMAT, id);
    std::printf("frame %llu at %.3f s: %s %s (%.2f) at %d,%d %dx%d\n", static_cast<unsigned long long>(frame), t,
                label ? g_quark_to_string(label) : "", track, conf, x, y, w, h);
  }
}

}  // namespace

int main(int argc, char** argv) {
  gst_init(&argc, &argv);
  const char* prog = "read_regions";
  std::string jobs = JOBFLOW_JOBS_DIR, labels = JOBFLOW_BALL_LABELS;
  unsigned long frames = 30;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name, std::string* out) {
      const std::string prefix = std::string(name) + "=";
      if (a.rfind(prefix, 0) == 0) *out = a.substr(prefix.size());
      else if (a == name && i + 1 < argc) *out = argv[++i];
      else return a == name ? -1 : 0;
      return 1;
    };
    std::string v;
    int got;
    if ((got = value("--jobs", &jobs)) != 0) {
      if (got < 0) return usage_error(prog, "option --jobs needs a value");
    } else if ((got = value("--labels", &labels)) != 0) {
      if (got < 0) return usage_error(prog, "option --labels needs a value");
    } else if ((got = value("--frames", &v)) != 0) {
      char* end = nullptr;
      frames = got > 0 ? std::strtoul(v.c_str(), &end, 10) : 0;
      if (got < 0 || v.empty() || v[0] == '-' || *end != '\0' || frames == 0 || frames > G_MAXINT)
        return usage_error(prog, "--frames needs a whole number >= 1, got '" + v + "'");
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [--frames N] [--jobs DIR] [--labels FILE]\n"
                  "Runs the ball detector on test-pattern frames and prints each region read from the frames'\n"
                  "region metas.\n"
                  "  --frames N     frames of videotestsrc pattern=ball (default 30)\n"
                  "  --jobs DIR     folder with ball_detector.onnx (default %s)\n"
                  "  --labels FILE  the detector's labels (default %s)\n",
                  prog, JOBFLOW_JOBS_DIR, JOBFLOW_BALL_LABELS);
      return 0;
    } else {
      return usage_error(prog, "unknown option '" + a + "'");
    }
  }
  if (GstElementFactory* f = gst_element_factory_find("jobfunction")) {
    gst_object_unref(f);
  } else {
#ifdef JOBFLOW_PLUGIN_DIR
    gst_registry_scan_path(gst_registry_get(), JOBFLOW_PLUGIN_DIR);
#endif
  }

  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(
      "videotestsrc name=src pattern=ball ! video/x-raw,width=320,height=240,framerate=30/1 "
      "! videoconvert ! video/x-raw,format=RGB ! jobconvert width=320 height=320 resize=letterbox "
      "! jobfunction name=detect message-interval=0 "
      "! jobdecode name=decode mode=boxes scheme=yolov8 score-threshold=0.5 message=false "
      "! jobtrack ! jobsink name=out",
      &err);
  if (!pipeline || err) {
    std::fprintf(stderr, "%s: %s (is the jobflow plugin on GST_PLUGIN_PATH?)\n", prog, err ? err->message : "?");
    g_clear_error(&err);
    if (pipeline) gst_object_unref(pipeline);
    return 1;
  }
  GstElement* src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
  GstElement* detect = gst_bin_get_by_name(GST_BIN(pipeline), "detect");
  GstElement* decode = gst_bin_get_by_name(GST_BIN(pipeline), "decode");
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "out");
  g_object_set(src, "num-buffers", static_cast<gint>(frames), nullptr);
  g_object_set(detect, "job", (jobs + "/ball_detector.onnx").c_str(), nullptr);
  g_object_set(decode, "labels", labels.c_str(), nullptr);
  GstBus* bus = gst_element_get_bus(pipeline);

  // The first error on the bus as the program's one error line.
  auto bus_error = [&]() {
    GstMessage* msg = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
    if (!msg) return false;
    GError* e = nullptr;
    gst_message_parse_error(msg, &e, nullptr);
    std::fprintf(stderr, "%s: from %s: %s\n", prog, GST_OBJECT_NAME(GST_MESSAGE_SRC(msg)), e ? e->message : "?");
    g_clear_error(&e);
    gst_message_unref(msg);
    return true;
  };
  int status = 0;
  guint64 frame = 0;
  if (gst_element_set_state(pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    if (!bus_error()) std::fprintf(stderr, "%s: the pipeline does not start\n", prog);
    status = 1;
  }
  while (status == 0) {
    if (GstSample* sample = job_sink_try_pull_result(sink, 100 * GST_MSECOND)) {
      print_regions(frame++, gst_sample_get_buffer(sample));
      gst_sample_unref(sample);
      continue;
    }
    if (job_sink_is_eos(sink)) break;
    if (bus_error()) status = 1;
  }
  if (status == 0) std::printf("%llu frames\n", static_cast<unsigned long long>(frame));
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(bus);
  for (GstElement* e : {src, detect, decode, sink}) gst_object_unref(e);
  gst_object_unref(pipeline);
  return status;
}

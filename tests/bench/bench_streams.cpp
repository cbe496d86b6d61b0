// bench_streams — many streams through one detector: a pipeline against the
// bare engine (issue 13: "the pipeline within 10% of the engine").
//
// Four 640x480 RGB streams (videotestsrc pattern=ball) are letterboxed to
// the detector's 320x320 by jobconvert, batched four frames a call by jobmux,
// run by one jobfunction, decoded into boxes and tracked on the batch
// (jobdecode puts each slot's regions on its frame, jobtrack keeps a
// tracker per source), and split into the streams' frames by jobdemux —
// the order, as pipelines/gst/multi-stream runs it:
//
//   4 x (videotestsrc pattern=ball num-buffers=N ! video/x-raw,format=RGB,width=640,height=480
//          ! jobconvert width=320 height=320 resize=letterbox ! mux.sink_S)
//   jobmux name=mux batch-size=4 ! jobfunction job=ball_detector_x4.onnx
//     ! jobdecode mode=boxes scheme=yolov8 ! jobtrack ! jobdemux name=demux output=frames
//   4 x (demux.src_S ! queue ! fakesink)
//
// and, as case ball_x4_split, the order that splits first (each stream
// decoded and tracked on its own queue's thread, as jobdecode and jobtrack
// had to be run before they took batches):
//   jobmux ! jobfunction ! jobdemux ! 4 x (queue ! jobdecode ! jobtrack ! fakesink)
// and, as case ball_x4_mem, the order fed by four appsrcs with the
// ball pattern's frames drawn once beforehand (64 frames, cycled), as the
// engine's side starts from frames in memory: the pipeline without
// videotestsrc's drawing (1.6 ms of CPU a frame on the 2-core machine,
// docs/performance.md).
//
// frames/s = 4 N frames / seconds from PLAYING to EOS (every frame counted
// at its fakesink). The same job through the engine alone (onnx::load, then
// N calls on batched (4, 3, 320, 320) tensors, each figure the faster of
// CompiledJob::submit with max_in_flight 2 and CompiledJob::run_here back to
// back, as jobfunction calls it), two ways:
//   engine       the tensors made beforehand (jobconvert's own output of the
//                same test pattern, four frames stacked per batch): the job
//                alone, the strictest reference;
//   engine+prep  each call's four tensors made from 640x480 RGB frames in the
//                timed loop (on the caller's thread, while the engine runs
//                the previous call) with jobconvert's tools: GStreamer's
//                video converter with jobconvert's options, then /255 and
//                HWC -> CHW: the same work as the pipeline's jobconverts.
// Neither has the pipeline's decoding and tracking (no engine
// counterpart), nor videotestsrc's drawing (but ball_x4_mem): both stay in
// the pipeline's time, so the ratios are if anything unfair to the pipeline.
// With --model FILE (a batch-4 job with input (4, 3, 320, 320), e.g.
// export_models.py's ssdlite320_b4.onnx: ssdlite320_mobilenet_v3_large's
// backbone) the same again for that job, without jobdecode/jobtrack (its
// outputs are feature maps): jobmux ! jobfunction ! jobdemux (results).
// Prints per case "name engine E engine+prep P pipeline Q frames/s
// pipeline/engine R pipeline/engine+prep S" and the target, then the CPU
// time (all threads, user + system) per frame of each: on a machine shared
// with other work the wall-clock ratio says as much about the scheduler (a
// pipeline has a dozen threads to compete for the cores, the engine two or
// three) as about the pipeline; CPU time per frame is the cost.
//
// usage: bench_streams --jobs DIR --plugin DIR [--frames N] [--repeats N] [--quick] [--model FILE]...
#include <gst/gst.h>
#include <gst/video/video.h>

#include <jobflow/jobflow.h>
#include <jobflow/onnx.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "jobsink.h"

namespace flow = jobflow;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kStreams = 4, kWidth = 640, kHeight = 480, kSize = 320;

struct Options {
  std::string jobs, plugin;
  std::vector<std::string> models;
  int repeats = 3;
  int64_t frames = 300;  // per stream per run
};

/* CPU seconds this process has used (every thread, user + system). */
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "bench_streams: %s\n", what.c_str());
  std::exit(1);
}

GstElement* launch(const std::string& description) {
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(description.c_str(), &err);
  if (!pipeline || err) fail(description + ": " + (err ? err->message : "?"));
  return pipeline;
}

/* Plays `pipeline` to EOS; returns seconds from PLAYING to EOS. */
double play(GstElement* pipeline, const std::string& description,
            const std::function<void(GstElement*)>& feed = nullptr) {
  gst_element_set_state(pipeline, GST_STATE_PAUSED);
  if (feed) feed(pipeline);  // appsrc takes buffers once started
  gst_element_get_state(pipeline, nullptr, nullptr, GST_CLOCK_TIME_NONE);  // prerolled: job loaded
  const auto t0 = Clock::now();
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  GstBus* bus = gst_element_get_bus(pipeline);
  GstMessage* msg = gst_bus_timed_pop_filtered(bus, GST_CLOCK_TIME_NONE,
                                               static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  const double secs = seconds_since(t0);
  if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
    GError* e = nullptr;
    gst_message_parse_error(msg, &e, nullptr);
    fail(description + ": " + e->message);
  }
  gst_message_unref(msg);
  gst_object_unref(bus);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  return secs;
}

/* The four-stream pipeline; counts the frames its fakesinks get. */
double run_pipeline(const std::string& description, int64_t* frames,
                    const std::function<void(GstElement*)>& feed = nullptr) {
  GstElement* pipeline = launch(description);
  std::atomic<int64_t> n{0};
  for (int s = 0; s < kStreams; ++s) {
    GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), ("out" + std::to_string(s)).c_str());
    g_signal_connect(sink, "handoff", G_CALLBACK(+[](GstElement*, GstBuffer*, GstPad*, gpointer user) {
                       static_cast<std::atomic<int64_t>*>(user)->fetch_add(1);
                     }),
                     &n);
    gst_object_unref(sink);
  }
  const double secs = play(pipeline, description, feed);
  gst_object_unref(pipeline);
  *frames = n.load();
  return secs;
}

/* `count` 640x480 RGB frames of videotestsrc's ball pattern, drawn once:
 * the sources of the pipeline cases that start from frames in memory, as
 * the engine's side does. */
std::vector<GstBuffer*> ball_frames(int count) {
  const std::string description = "videotestsrc pattern=ball num-buffers=" + std::to_string(count) +
                                  " ! video/x-raw,format=RGB,width=640,height=480,framerate=30/1"
                                  " ! fakesink name=out0 sync=false signal-handoffs=true";
  GstElement* pipeline = launch(description);
  std::vector<GstBuffer*> frames;
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "out0");
  g_signal_connect(sink, "handoff", G_CALLBACK(+[](GstElement*, GstBuffer* b, GstPad*, gpointer user) {
                     static_cast<std::vector<GstBuffer*>*>(user)->push_back(gst_buffer_ref(b));
                   }),
                   &frames);
  gst_object_unref(sink);
  play(pipeline, description);
  gst_object_unref(pipeline);
  if (frames.size() != static_cast<size_t>(count))
    fail("videotestsrc gave " + std::to_string(frames.size()) + " frames, expected " + std::to_string(count));
  return frames;
}

/* Queues `count` frames (cycling through `frames`, timestamped at 30/s) and
 * EOS into each of the pipeline's appsrcs src0..src3. */
void feed_sources(GstElement* pipeline, const std::vector<GstBuffer*>& frames, int64_t count) {
  for (int s = 0; s < kStreams; ++s) {
    GstElement* src = gst_bin_get_by_name(GST_BIN(pipeline), ("src" + std::to_string(s)).c_str());
    for (int64_t i = 0; i < count; ++i) {
      GstBuffer* b = gst_buffer_copy(frames[static_cast<size_t>(i) % frames.size()]);  // shares the memory
      GST_BUFFER_PTS(b) = gst_util_uint64_scale(static_cast<guint64>(i), GST_SECOND, 30);
      GST_BUFFER_DURATION(b) = GST_SECOND / 30;
      GstFlowReturn ret = GST_FLOW_OK;
      g_signal_emit_by_name(src, "push-buffer", b, &ret);
      gst_buffer_unref(b);
      if (ret != GST_FLOW_OK) fail("appsrc src" + std::to_string(s) + " refused a frame");
    }
    GstFlowReturn ret = GST_FLOW_OK;
    g_signal_emit_by_name(src, "end-of-stream", &ret);
    gst_object_unref(src);
  }
}

/* jobconvert's tensors of `count` test-pattern frames, stacked by four. */
std::vector<flow::Tensor> pattern_batches(int count) {
  const std::string description = "videotestsrc pattern=ball num-buffers=" + std::to_string(count) +
                                  " ! video/x-raw,format=RGB,width=640,height=480,framerate=30/1"
                                  " ! jobconvert width=320 height=320 resize=letterbox ! jobsink name=out max-results=" +
                                  std::to_string(count);
  GstElement* pipeline = launch(description);
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "out");
  std::vector<flow::Tensor> frames;
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  while (GstSample* sample = job_sink_pull_result(sink)) {
    std::vector<flow::Tensor> t;
    std::string error;
    if (!jobflow_sample_to_tensors(sample, &t, &error)) fail(error);
    frames.push_back(t.at(0).clone());
    gst_sample_unref(sample);
  }
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
  if (frames.size() != static_cast<size_t>(count))
    fail("the test pattern gave " + std::to_string(frames.size()) + " tensors, expected " + std::to_string(count));
  std::vector<flow::Tensor> batches;
  const size_t one = frames[0].nbytes();
  for (size_t b = 0; b + kStreams <= frames.size(); b += kStreams) {
    flow::Tensor t({kStreams, 3, kSize, kSize}, flow::Float);
    for (int s = 0; s < kStreams; ++s)
      std::memcpy(static_cast<char*>(t.raw()) + s * one, frames[b + s].raw(), one);
    batches.push_back(t);
  }
  return batches;
}

/* jobconvert's work with jobconvert's tools: GStreamer's video converter
 * with jobconvert's options (bilinear; the 640x480 frame scaled into
 * 320x240 at y = 40 of a 320x320 frame, the border black; one thread), then
 * the bytes /255 from HWC into CHW floats. */
class Letterbox {
 public:
  Letterbox() {
    gst_video_info_set_format(&in_, GST_VIDEO_FORMAT_RGB, kWidth, kHeight);
    gst_video_info_set_format(&out_, GST_VIDEO_FORMAT_RGB, kSize, kSize);
    const int dh = kHeight * kSize / kWidth;
    GstStructure* opts = gst_structure_new(
        "options", GST_VIDEO_CONVERTER_OPT_RESAMPLER_METHOD, GST_TYPE_VIDEO_RESAMPLER_METHOD,
        GST_VIDEO_RESAMPLER_METHOD_LINEAR, GST_VIDEO_CONVERTER_OPT_DEST_X, G_TYPE_INT, 0,
        GST_VIDEO_CONVERTER_OPT_DEST_Y, G_TYPE_INT, (kSize - dh) / 2, GST_VIDEO_CONVERTER_OPT_DEST_WIDTH, G_TYPE_INT,
        kSize, GST_VIDEO_CONVERTER_OPT_DEST_HEIGHT, G_TYPE_INT, dh, GST_VIDEO_CONVERTER_OPT_FILL_BORDER,
        G_TYPE_BOOLEAN, TRUE, GST_VIDEO_CONVERTER_OPT_BORDER_ARGB, G_TYPE_UINT, 0xff000000u,
        GST_VIDEO_CONVERTER_OPT_THREADS, G_TYPE_UINT, 1u, nullptr);
    conv_ = gst_video_converter_new(&in_, &out_, opts);
    if (!conv_) fail("gst_video_converter_new failed");
    scaled_ = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&out_), nullptr);
  }
  ~Letterbox() {
    gst_video_converter_free(conv_);
    gst_buffer_unref(scaled_);
  }
  Letterbox(const Letterbox&) = delete;
  Letterbox& operator=(const Letterbox&) = delete;
  void operator()(GstBuffer* rgb, float* out) {
    GstVideoFrame src, dst;
    gst_video_frame_map(&src, &in_, rgb, GST_MAP_READ);
    gst_video_frame_map(&dst, &out_, scaled_, GST_MAP_READWRITE);
    gst_video_converter_frame(conv_, &src, &dst);
    const auto* p = static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&dst, 0));
    const int stride = GST_VIDEO_FRAME_PLANE_STRIDE(&dst, 0);
    const size_t plane = size_t(kSize) * kSize;
    for (int y = 0; y < kSize; ++y)
      for (int x = 0; x < kSize; ++x)
        for (int c = 0; c < 3; ++c) out[c * plane + size_t(y) * kSize + x] = p[y * stride + x * 3 + c] * (1.f / 255.f);
    gst_video_frame_unmap(&dst);
    gst_video_frame_unmap(&src);
  }

 private:
  GstVideoInfo in_, out_;
  GstVideoConverter* conv_ = nullptr;
  GstBuffer* scaled_ = nullptr;
};

/* The engine alone: `calls` calls, submitted (max_in_flight 2: the next
 * batch is prepared while the engine runs one) or, with `here`, run one
 * after the other on this thread (CompiledJob::run_here, as jobfunction
 * calls the job). With `rgb` (frames of
 * 640x480 RGB), each call's batch is letterboxed from four of them first,
 * on this thread (Letterbox: what jobconvert does in the pipeline). */
double run_engine(const std::string& job_file, const std::vector<flow::Tensor>& batches,
                  const std::vector<GstBuffer*>* rgb, int64_t calls, bool here) {
  Letterbox letterbox;
  flow::onnx::LoadOptions o;
  o.max_in_flight = 2;
  auto job = flow::onnx::load(job_file, o);
  for (int i = 0; i < 5; ++i) job->run({batches[i % batches.size()]});  // warm-up
  std::atomic<int64_t> done{0};
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < calls; ++i) {
    flow::Tensor in = batches[static_cast<size_t>(i) % batches.size()];
    if (rgb) {
      in = flow::Tensor({kStreams, 3, kSize, kSize}, flow::Float);
      for (int s = 0; s < kStreams; ++s)
        letterbox((*rgb)[(i * kStreams + s) % rgb->size()], in.data<float>() + s * 3 * kSize * kSize);
    }
    if (here) {
      job->run_here({in});
      done.fetch_add(1);
    } else {
      job->submit({in}, [&done](flow::CompiledJob::Result, std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
        done.fetch_add(1);
      });
    }
  }
  job->sync();
  const double secs = seconds_since(t0);
  // This thread's OpenMP team would stay with it and slow the pipelines
  // measured next (jobflow::release_calling_thread).
  if (here) flow::release_calling_thread();
  if (done.load() != calls) fail("the engine delivered " + std::to_string(done.load()) + " of " + std::to_string(calls));
  return secs;
}

int run(int argc, char** argv);

}  // namespace

// Any error ends the program with one line and status 1, never an abort.
int main(int argc, char** argv) try {
  return run(argc, argv);
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_streams: %s\n", e.what());
  return 1;
}

namespace {

int run(int argc, char** argv) {
  gst_init(&argc, &argv);
  Options opt;
  const char* usage = "usage: bench_streams --jobs DIR --plugin DIR [--frames N] [--repeats N] [--quick] [--model FILE]...\n";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_streams: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--jobs") opt.jobs = next();
    else if (a == "--plugin") opt.plugin = next();
    else if (a == "--model") opt.models.push_back(next());
    else if (a == "--frames") opt.frames = std::atoll(next().c_str());
    else if (a == "--repeats") opt.repeats = std::atoi(next().c_str());
    else if (a == "--quick") opt.frames = 100;
    else {
      std::fputs(usage, stderr);
      return 2;
    }
  }
  if (opt.jobs.empty() || opt.plugin.empty() || opt.frames < 1 || opt.repeats < 1) {
    std::fputs(usage, stderr);
    return 2;
  }
  if (!gst_registry_scan_path(gst_registry_get(), opt.plugin.c_str()) && !gst_element_factory_find("jobmux")) {
    std::fprintf(stderr, "bench_streams: no jobflow plugin in %s\n", opt.plugin.c_str());
    return 1;
  }
  const std::string detector = (fs::path(opt.jobs) / "ball_detector_x4.onnx").string();
  if (!fs::exists(detector)) fail("no " + detector + " (built with the project)");
  const fs::path labels = fs::temp_directory_path() / ("bench_streams_" + std::to_string(::getpid()) + ".labels");
  std::ofstream(labels) << "ball\n";

  const std::vector<flow::Tensor> batches = pattern_batches(64);
  std::vector<GstBuffer*> rgb;  // 640x480 RGB frames (any picture: the letterbox's cost does not depend on it)
  for (int f = 0; f < 16; ++f) {
    GstBuffer* b = gst_buffer_new_allocate(nullptr, size_t(kWidth) * kHeight * 3, nullptr);
    GstMapInfo m;
    gst_buffer_map(b, &m, GST_MAP_WRITE);
    for (size_t i = 0; i < m.size; ++i) m.data[i] = static_cast<uint8_t>((i * 7 + f * 13) & 0xff);
    gst_buffer_unmap(b, &m);
    rgb.push_back(b);
  }

  // none: the job's outputs per stream; batch: decoded and tracked on the
  // batch, before jobdemux; split: after it, per stream
  enum Decode { kNone, kOnTheBatch, kPerStream };
  const std::string decode_track =
      " ! jobdecode mode=boxes scheme=yolov8 labels=" + labels.string() + " score-threshold=0.5 ! jobtrack";
  auto pipeline = [&](const std::string& job, Decode decode, bool from_memory) {
    std::string d = "jobmux name=mux batch-size=4 ! jobfunction job=" + job + " message-interval=0";
    if (decode == kOnTheBatch) d += decode_track;
    d += std::string(" ! jobdemux name=demux") + (decode == kOnTheBatch ? " output=frames" : "");
    for (int s = 0; s < kStreams; ++s) {
      const std::string S = std::to_string(s);
      if (from_memory)
        d += " appsrc name=src" + S + " format=time max-bytes=0 block=false"
             " caps=video/x-raw,format=RGB,width=640,height=480,framerate=30/1";
      else
        d += " videotestsrc pattern=ball num-buffers=" + std::to_string(opt.frames) +
             " ! video/x-raw,format=RGB,width=640,height=480,framerate=30/1";
      d += " ! jobconvert width=320 height=320 resize=letterbox ! mux.sink_" + S;
      d += " demux.src_" + S + " ! queue" + (decode == kPerStream ? decode_track : "") + " ! fakesink name=out" + S + " sync=false signal-handoffs=true";
    }
    return d;
  };
  // A finished pipeline or engine leaves OpenMP teams spinning for a while
  // (bench_pipeline.cpp's settle()): let them sleep before each measurement.
  auto settle = [] { std::this_thread::sleep_for(std::chrono::seconds(2)); };

  std::printf("bench_streams: %d streams of %dx%d, %lld frames each per run, median of %d runs; frames/s of all "
              "streams together (higher is better)\n",
              kStreams, kWidth, kHeight, static_cast<long long>(opt.frames), opt.repeats);
  struct Case {
    std::string name, job;
    Decode decode;
    bool from_memory = false;  // appsrcs of frames drawn beforehand instead of videotestsrc
  };
  std::vector<Case> cases = {{"ball_x4", detector, kOnTheBatch},
                             {"ball_x4_split", detector, kPerStream},
                             {"ball_x4_mem", detector, kOnTheBatch, true}};
  for (const std::string& m : opt.models) cases.push_back({fs::path(m).stem().string(), m, kNone});
  const std::vector<GstBuffer*> drawn = ball_frames(64);
  const auto feed = [&](GstElement* p) { feed_sources(p, drawn, opt.frames); };
  bool all_met = true;
  for (const Case& c : cases) {
    const int64_t calls = opt.frames;  // four frames a call
    std::vector<double> te, tp, tq, ce, cp, cq;  // seconds; CPU seconds
    for (int r = 0; r < opt.repeats; ++r) {
      // each engine figure: the faster of the two ways to call it
      double t[2][2], cpu[2][2];
      for (int prep = 0; prep < 2; ++prep)
        for (int here = 0; here < 2; ++here) {
          settle();
          const double c0 = cpu_seconds();
          t[prep][here] = run_engine(c.job, batches, prep ? &rgb : nullptr, calls, here);
          cpu[prep][here] = cpu_seconds() - c0;
        }
      const int e_here = t[0][1] < t[0][0], p_here = t[1][1] < t[1][0];
      te.push_back(t[0][e_here]);
      tp.push_back(t[1][p_here]);
      ce.push_back(cpu[0][e_here]);
      cp.push_back(cpu[1][p_here]);
      settle();
      const std::string d = pipeline(c.job, c.decode, c.from_memory);
      const std::function<void(GstElement*)> source = c.from_memory ? std::function<void(GstElement*)>(feed) : nullptr;
      int64_t got = 0;
      if (r == 0) run_pipeline(d, &got, source);  // warm-up (registry, first allocations)
      const double c0 = cpu_seconds();
      tq.push_back(run_pipeline(d, &got, source));
      cq.push_back(cpu_seconds() - c0);
      if (got != kStreams * opt.frames)
        fail(d + ": " + std::to_string(got) + " frames at the sinks, expected " + std::to_string(kStreams * opt.frames));
    }
    const double n = double(kStreams) * opt.frames;
    const double e = n / median(te), p = n / median(tp), q = n / median(tq);
    const bool met = q / p >= 0.9;
    all_met = all_met && met;
    std::printf("%-16s engine %8.1f  engine+prep %8.1f  pipeline %8.1f frames/s  pipeline/engine %.3f  "
                "pipeline/engine+prep %.3f  target >= 0.90 (vs engine+prep): %s  (%s%s)\n",
                c.name.c_str(), e, p, q, q / e, q / p, met ? "MET" : "NOT MET",
                c.decode == kOnTheBatch  ? "jobmux ! jobfunction ! jobdecode ! jobtrack ! jobdemux ! 4 x queue"
                : c.decode == kPerStream ? "jobmux ! jobfunction ! jobdemux ! 4 x (queue ! jobdecode ! jobtrack)"
                                         : "jobmux ! jobfunction ! jobdemux ! 4 x queue",
                c.from_memory ? "; sources: appsrc, frames drawn beforehand" : "; sources: videotestsrc");
    std::printf("%-16s cpu ms/frame: engine %.2f  engine+prep %.2f  pipeline %.2f  (engine+prep/pipeline %.3f)\n",
                c.name.c_str(), median(ce) / n * 1e3, median(cp) / n * 1e3, median(cq) / n * 1e3,
                median(cp) / median(cq));
    std::fflush(stdout);
  }
  for (GstBuffer* b : rgb) gst_buffer_unref(b);
  for (GstBuffer* b : drawn) gst_buffer_unref(b);
  fs::remove(labels);
  return 0;
}

}  // namespace

// The seeds' synchronize_batch_job as a pipeline: evaluates the LeNet
// checkpoint on the Fashion-MNIST test set, taking each result from jobsink
// synchronously (job_sink_pull_result blocks until the next one is queued)
// and computing the accuracy here from the (labels, logits) tensors.
//
// A second thread watches the bus: on an error it stops the pipeline, which
// makes the blocked pull return NULL.
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "app_common.h"

int main(int argc, char** argv) {
  gst_init(&argc, &argv);
  const apps::Options opt = apps::parse(
      argc, argv, "Evaluates a LeNet checkpoint in a GStreamer pipeline, pulling results synchronously.");
  if (!apps::ensure_plugin()) return 1;

  std::string error;
  GstElement* pipeline = apps::make_pipeline(opt, &error);
  if (!pipeline) {
    std::fprintf(stderr, "pull_results: %s\n", error.c_str());
    return 1;
  }
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "out");
  GstBus* bus = gst_element_get_bus(pipeline);

  std::mutex mu;
  std::string bus_error;  // guarded by mu
  // Set by main when the watcher may stop: `done` at once, `deadline` (a
  // monotonic time) after waiting that long for the error that ended the pulls.
  std::atomic<bool> done{false};
  std::atomic<gint64> deadline{0};
  std::thread watcher([&] {
    for (;;) {
      GstMessage* msg = gst_bus_timed_pop_filtered(bus, 100 * GST_MSECOND,
                                                   static_cast<GstMessageType>(GST_MESSAGE_ERROR | GST_MESSAGE_EOS));
      if (msg) {
        const bool is_error = GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR;
        if (is_error) {
          std::lock_guard<std::mutex> lk(mu);
          bus_error = apps::error_text(msg);
        }
        gst_message_unref(msg);
        if (is_error) gst_element_set_state(pipeline, GST_STATE_READY);  // wakes the pull (NULL)
        return;
      }
      if (done || (deadline && g_get_monotonic_time() > deadline)) return;
    }
  });

  apps::Accuracy acc;
  if (gst_element_set_state(pipeline, GST_STATE_PLAYING) != GST_STATE_CHANGE_FAILURE) {
    // NULL at EOS, once every result was taken, or when the pipeline stops.
    while (GstSample* sample = job_sink_pull_result(sink)) {
      const bool ok = acc.add(sample, &error);
      gst_sample_unref(sample);
      if (!ok) break;
    }
  }
  const bool eos = job_sink_is_eos(sink);
  if (eos || !error.empty())
    done = true;
  else  // stopped by an error: the watcher has it or gets it soon
    deadline = g_get_monotonic_time() + 2 * G_USEC_PER_SEC;
  watcher.join();
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(sink);
  gst_object_unref(pipeline);

  if (!error.empty()) {
    std::fprintf(stderr, "pull_results: %s\n", error.c_str());
    return 1;
  }
  std::lock_guard<std::mutex> lk(mu);
  if (!bus_error.empty() || !eos) {
    std::fprintf(stderr, "pull_results: the pipeline failed%s%s\n", bus_error.empty() ? "" : " ",
                 bus_error.c_str());
    return 1;
  }
  acc.print();
  return 0;
}

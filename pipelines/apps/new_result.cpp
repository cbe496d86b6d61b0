// The seeds' async_batch_job as a pipeline: evaluates the LeNet checkpoint
// on the Fashion-MNIST test set with asynchronous results: jobsink calls
// new_result() (job_sink_set_callbacks) from the streaming thread for every
// result, which pulls it and adds it to the accuracy; the main thread just
// waits on the bus for EOS (or an error).
#include <cstdio>
#include <mutex>
#include <string>

#include "app_common.h"

namespace {

struct State {
  std::mutex mu;
  apps::Accuracy acc;  // guarded by mu
  std::string error;   // guarded by mu: the first result that could not be read
};

GstFlowReturn new_result(GstElement* sink, gpointer user_data) {
  auto* st = static_cast<State*>(user_data);
  // A result was just queued: taking it does not block.
  GstSample* sample = job_sink_try_pull_result(sink, 0);
  if (!sample) return GST_FLOW_OK;
  std::lock_guard<std::mutex> lk(st->mu);
  std::string error;
  const bool ok = st->acc.add(sample, &error);
  gst_sample_unref(sample);
  if (ok) return GST_FLOW_OK;
  if (st->error.empty()) st->error = error;
  return GST_FLOW_ERROR;  // stops the stream; the bus gets an error
}

}  // namespace

int main(int argc, char** argv) {
  gst_init(&argc, &argv);
  const apps::Options opt = apps::parse(
      argc, argv, "Evaluates a LeNet checkpoint in a GStreamer pipeline with asynchronous results (callbacks).");
  if (!apps::ensure_plugin()) return 1;

  std::string error;
  GstElement* pipeline = apps::make_pipeline(opt, &error);
  if (!pipeline) {
    std::fprintf(stderr, "new_result: %s\n", error.c_str());
    return 1;
  }
  State st;
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "out");
  JobSinkCallbacks callbacks{};  // zero-initialized, reserved fields included
  callbacks.new_result = new_result;
  job_sink_set_callbacks(sink, &callbacks, &st, nullptr);

  std::string bus_error;
  gst_element_set_state(pipeline, GST_STATE_PLAYING);  // a failure posts an error on the bus
  GstBus* bus = gst_element_get_bus(pipeline);
  GstMessage* msg = gst_bus_timed_pop_filtered(bus, GST_CLOCK_TIME_NONE,
                                               static_cast<GstMessageType>(GST_MESSAGE_ERROR | GST_MESSAGE_EOS));
  // EOS: every result went through new_result() before EOS reached the sink.
  if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) bus_error = apps::error_text(msg);
  gst_message_unref(msg);
  gst_element_set_state(pipeline, GST_STATE_NULL);  // no callback runs after this
  gst_object_unref(bus);
  gst_object_unref(sink);
  gst_object_unref(pipeline);

  std::lock_guard<std::mutex> lk(st.mu);
  if (!st.error.empty()) {
    std::fprintf(stderr, "new_result: %s\n", st.error.c_str());
    return 1;
  }
  if (!bus_error.empty()) {
    std::fprintf(stderr, "new_result: the pipeline failed %s\n", bus_error.c_str());
    return 1;
  }
  st.acc.print();
  return 0;
}

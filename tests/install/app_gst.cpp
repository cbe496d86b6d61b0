// A GStreamer application built outside the tree against an installed
// Jobflow, with `pkg-config --cflags --libs jobflow-gst gstreamer-app-1.0`
// (tests/install/install.sh): appsrc pushes two tensors made with the
// installed tensor_caps.h into the installed plugin's jobsink; the result is
// pulled with jobsink.h's API and its values checked; a region added with
// the installed jobflow_analytics.h is read back as JSON. Prints "ok".
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <jobflow/gst/jobflow_analytics.h>
#include <jobflow/gst/tensor_caps.h>
#include <jobsink.h>  // the same header, as the source tree spells it

#include <cstdio>
#include <string>
#include <vector>

namespace flow = jobflow;

static int fail(const std::string& what) {
  std::fprintf(stderr, "app_gst: %s\n", what.c_str());
  return 1;
}

int main(int argc, char** argv) {
  gst_init(&argc, &argv);
  // appsrc comes from libgstapp, registered here: the test's plugin path
  // holds only the installed jobflow plugin.
  if (!gst_element_register(nullptr, "appsrc", GST_RANK_NONE, GST_TYPE_APP_SRC)) return fail("cannot register appsrc");
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch("appsrc name=src format=time ! jobsink name=out", &err);
  if (!pipeline) return fail(std::string("gst_parse_launch: ") + (err ? err->message : "?"));
  GstElement* src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "out");

  const std::vector<flow::Tensor> in = {flow::Tensor::from<float>({2, 3}, {1, 2, 3, 4, 5, 6}),
                                        flow::Tensor::from<int32_t>({2}, {7, 8})};
  std::vector<flow::TensorSpec> specs;
  for (const auto& t : in) specs.push_back({t.shape(), t.dtype()});
  GstCaps* caps = flow::gst::caps_from_specs(specs);
  g_object_set(src, "caps", caps, nullptr);
  gst_caps_unref(caps);

  if (gst_element_set_state(pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE)
    return fail("the pipeline does not start");
  if (gst_app_src_push_buffer(GST_APP_SRC(src), flow::gst::buffer_from_tensors(in)) != GST_FLOW_OK)
    return fail("push-buffer failed");
  gst_app_src_end_of_stream(GST_APP_SRC(src));

  GstSample* sample = job_sink_pull_result(sink);
  if (!sample) return fail("no result pulled from jobsink");
  std::vector<flow::Tensor> out;
  std::string error;
  if (!jobflow_sample_to_tensors(sample, &out, &error)) return fail("jobflow_sample_to_tensors: " + error);
  gst_sample_unref(sample);
  if (out.size() != 2) return fail("got " + std::to_string(out.size()) + " tensors, expected 2");
  for (size_t i = 0; i < 2; ++i) {
    if (out[i].shape() != in[i].shape() || out[i].dtype() != in[i].dtype())
      return fail("tensor " + std::to_string(i) + " is " + flow::spec_str({out[i].shape(), out[i].dtype()}) +
                  ", expected " + flow::spec_str(specs[i]));
  }
  for (int i = 0; i < 6; ++i)
    if (out[0].data<float>()[i] != float(i + 1)) return fail("tensor 0 element " + std::to_string(i) + " differs");
  if (out[1].data<int32_t>()[0] != 7 || out[1].data<int32_t>()[1] != 8) return fail("tensor 1 differs");
  out.clear();
  if (job_sink_pull_result(sink) != nullptr) return fail("a second result after EOS");
  if (!job_sink_is_eos(sink)) return fail("jobsink is not at EOS");

  GstBuffer* frame = gst_buffer_new();
  JobflowAnalyticsRelationMeta* meta = jobflow_buffer_add_analytics_relation_meta(frame);
  jobflow_analytics_relation_meta_add_od_mtd(meta, g_quark_from_string("car"), 1, 2, 3, 4, 0.5f, nullptr);
  gchar* json = jobflow_analytics_relation_meta_to_json(meta);
  const std::string want = "{\"regions\":[{\"id\":0,\"label\":\"car\",\"confidence\":0.5,\"x\":1,\"y\":2,\"w\":3,\"h\":4}]}";
  const bool same = want == json;
  const std::string got = json;
  g_free(json);
  gst_buffer_unref(frame);
  if (!same) return fail("regions JSON " + got + ", expected " + want);

  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(src);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
  std::printf("ok\n");
  return 0;
}

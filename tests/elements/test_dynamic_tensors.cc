// Shapes known at call time in pipelines: jobfunction with a job whose batch
// is dynamic (its sink caps leave the dims open, new sizes mid-stream
// renegotiate, the src caps follow the results), jobbatch's short-batches,
// and NNStreamer's format=flexible (tensor headers) in and out.
#include <gtest/gtest.h>

#include <gst/app/gstappsrc.h>
#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <unistd.h>

#include <jobflow/jobflow.h>
#include <jobflow/onnx.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gstjobbatch.h"
#include "gstjobfunction.h"
#include "gstjobsink.h"
#include "gstjobunbatch.h"
#include "jobsink.h"
#include "static_element_env.h"
#include "tensor_caps.h"

namespace {

namespace flow = jobflow;
namespace fs = std::filesystem;
using flow::Blob;
using flow::Shape;
using flow::Tensor;
using jobflow::test::caps_field;

gboolean register_elements(GstPlugin* plugin) {
  gboolean ok = jobflow_register_jobfunction(plugin);
  ok &= jobflow_register_jobbatch(plugin);
  ok &= jobflow_register_jobunbatch(plugin);
  ok &= jobflow_register_jobsink(plugin);
  ok &= gst_element_register(plugin, "appsrc", GST_RANK_NONE, GST_TYPE_APP_SRC);
  return ok;
}
JOBFLOW_STATIC_ELEMENT_TEST_ENV(register_elements);

JOBFLOW_ELEMENT_TEST_TMP_ROOT("dynamic-tensors");

/* rows: (x: (batch, 4) float32) -> (softmax(x), x * 2 + 1 summed per row):
 * every row of the outputs depends on its row of x only, with no GEMM whose
 * blocking depends on the batch, so a batch gives exactly its rows' batch-1
 * results. */
const std::string& rows_job() {
  static const std::string path = [] {
    flow::PlaceholderSpec x = flow::Numpy::Placeholder({-1, 4}, flow::Float, "x");
    x.dim_names = {"batch", ""};
    auto job = flow::global_function(flow::Predict, flow::function_config().name("rows"), {x},
                                     [](Blob x) -> std::tuple<flow::Numpy, flow::Numpy> {
                                       return {flow::nn::softmax(x), flow::reduce_sum(x * 2.0 + 1.0, {1})};
                                     });
    const std::string p = (tmp_root() / "rows.onnx").string();
    flow::onnx::save(*job.compiled(), p);
    return p;
  }();
  return path;
}

const char* kFrameCaps = "other/tensors,format=static,num_tensors=1,dimensions=(string)4:1,types=(string)float32,"
                         "framerate=(fraction)30/1";

float value(int frame, int i) { return static_cast<float>((frame * 7 + i * 3) % 11) / 4.0f - 1.0f; }

GstBuffer* frame_buffer(int f, int rows = 1) {
  std::vector<float> v;
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < 4; ++i) v.push_back(value(f + r, i));
  const gsize bytes = v.size() * sizeof(float);
  gpointer p = g_memdup2(v.data(), bytes);
  GstBuffer* b = gst_buffer_new();
  gst_buffer_append_memory(b, gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, p, bytes, 0, bytes, p, g_free));
  GST_BUFFER_PTS(b) = f * GST_SECOND / 30;
  GST_BUFFER_DURATION(b) = GST_SECOND / 30 * rows;
  return b;
}

template <class T>
std::vector<T> memory_values(GstBuffer* b, guint index, size_t skip = 0) {
  GstMemory* m = gst_buffer_peek_memory(b, index);
  GstMapInfo map;
  gst_memory_map(m, &map, GST_MAP_READ);
  std::vector<T> v((map.size - skip) / sizeof(T));
  std::memcpy(v.data(), map.data + skip, map.size - skip);
  gst_memory_unmap(m, &map);
  return v;
}

std::string errors_text(GstBus* bus) {
  std::string r;
  while (GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR)) {
    GError* e = nullptr;
    gst_message_parse_error(m, &e, nullptr);
    r += std::string(e ? e->message : "?") + "\n";
    if (e) g_error_free(e);
    gst_message_unref(m);
  }
  return r;
}

}  // namespace

TEST(FlexibleTensors, HeadersFollowNNStreamersLayout) {
  uint32_t w[32];
  ASSERT_TRUE(jobflow::gst::write_flex_header({{2, 3, 5}, flow::Float}, w));
  EXPECT_EQ(w[0], 0xfeedccedu);  // magic
  EXPECT_EQ(w[1], 0xDE001000u);  // version 1.0
  EXPECT_EQ(w[2], 7u);           // _NNS_FLOAT32
  EXPECT_EQ(w[3], 5u);           // dims innermost first, 0 after the last
  EXPECT_EQ(w[4], 3u);
  EXPECT_EQ(w[5], 2u);
  EXPECT_EQ(w[6], 0u);
  EXPECT_EQ(w[19], 1u);          // flexible
  EXPECT_EQ(w[20], 4u);          // _NNS_TENSOR
  flow::TensorSpec s;
  std::string error;
  ASSERT_TRUE(jobflow::gst::read_flex_header(w, 128, 0, &s, &error)) << error;
  EXPECT_EQ(s, (flow::TensorSpec{{2, 3, 5}, flow::Float}));
  ASSERT_TRUE(jobflow::gst::read_flex_header(w, 128, 4, &s, &error)) << error;  // a rank-4 placeholder
  EXPECT_EQ(s.shape, (Shape{1, 2, 3, 5}));
  w[2] = 3;  // _NNS_UINT16
  ASSERT_TRUE(jobflow::gst::read_flex_header(w, 128, 0, &s, &error)) << error;
  EXPECT_EQ(s.dtype, flow::DType::UInt16);
  w[2] = 10;  // _NNS_FLOAT16
  ASSERT_TRUE(jobflow::gst::read_flex_header(w, 128, 0, &s, &error)) << error;
  EXPECT_EQ(s.dtype, flow::DType::Float16);
  w[2] = 11;  // past NNStreamer's types
  EXPECT_FALSE(jobflow::gst::read_flex_header(w, 128, 0, &s, &error));
  EXPECT_NE(error.find("element type 11 has no Jobflow dtype"), std::string::npos) << error;
  w[2] = 7, w[19] = 2;
  EXPECT_FALSE(jobflow::gst::read_flex_header(w, 128, 0, &s, &error));
  EXPECT_NE(error.find("sparse"), std::string::npos) << error;
  w[0] = 1;
  EXPECT_FALSE(jobflow::gst::read_flex_header(w, 128, 0, &s, &error));
  EXPECT_NE(error.find("header magic is 0x00000001, expected 0xfeedcced"), std::string::npos) << error;
  // A buffer round trip: one memory per tensor, header then data.
  const Tensor a = Tensor::from<float>({2, 2}, {1, 2, 3, 4});
  const Tensor b = Tensor::from<int64_t>({3}, {7, 8, 9});
  GstBuffer* buf = jobflow::gst::flexible_buffer_from_tensors({a, b});
  ASSERT_EQ(gst_buffer_n_memory(buf), 2u);
  EXPECT_EQ(gst_buffer_get_size(buf), 128u + 16u + 128u + 24u);
  std::vector<Tensor> back;
  ASSERT_TRUE(jobflow::gst::tensors_from_flexible_buffer(buf, &back, &error)) << error;
  ASSERT_EQ(back.size(), 2u);
  EXPECT_TRUE(back[0].equal(a));
  EXPECT_TRUE(back[1].equal(b));
  gst_buffer_unref(buf);
}

TEST(JobBatchShort, APartialBatchGoesOutShortUnderItsOwnCaps) {
  GstHarness* h = gst_harness_new_parse("jobbatch batch-size=3 short-batches=true");
  gst_harness_set_src_caps_str(h, kFrameCaps);
  for (int f = 0; f < 4; ++f) ASSERT_EQ(gst_harness_push(h, frame_buffer(f)), GST_FLOW_OK);
  GstBuffer* full = gst_harness_pull(h);
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(caps_field(h, "dimensions"), "4:3");
  gst_buffer_unref(full);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  GstBuffer* last = gst_harness_pull(h);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(caps_field(h, "dimensions"), "4:1");  // renegotiated for one frame
  EXPECT_EQ(caps_field(h, "framerate"), "10/1");
  EXPECT_EQ(gst_buffer_get_size(last), 16u);      // no padding
  const JobflowBatchMeta* meta = jobflow_buffer_get_batch_meta(last);
  ASSERT_NE(meta, nullptr);
  EXPECT_EQ(meta->batch_size, 1u);
  EXPECT_EQ(meta->valid, 1u);
  EXPECT_EQ(memory_values<float>(last, 0), (std::vector<float>{value(3, 0), value(3, 1), value(3, 2), value(3, 3)}));
  gst_buffer_unref(last);
  gst_harness_teardown(h);
  // The default stays padding.
  h = gst_harness_new_parse("jobbatch batch-size=3");
  gst_harness_set_src_caps_str(h, kFrameCaps);
  ASSERT_EQ(gst_harness_push(h, frame_buffer(0)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  GstBuffer* padded = gst_harness_pull(h);
  ASSERT_NE(padded, nullptr);
  EXPECT_EQ(caps_field(h, "dimensions"), "4:3");
  EXPECT_EQ(gst_buffer_get_size(padded), 48u);
  gst_buffer_unref(padded);
  gst_harness_teardown(h);
}

TEST(JobFunctionDynamic, SinkCapsLeaveTheDynamicDimOpenAndNewSizesRenegotiate) {
  GstHarness* h = gst_harness_new_parse(("jobfunction job=\"" + rows_job() + "\"").c_str());
  GstPad* sink = gst_element_get_static_pad(h->element, "sink");
  GstCaps* c = gst_pad_query_caps(sink, nullptr);
  GstCaps* want = gst_caps_from_string(
      "other/tensors,format=static,num_tensors=1,types=(string)float32; other/tensors,format=flexible");
  EXPECT_TRUE(gst_caps_is_equal(c, want)) << gst_caps_to_string(c);
  gst_caps_unref(want);
  gst_caps_unref(c);
  gst_object_unref(sink);
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  for (int rows : {2, 5, 2}) {
    gst_harness_set_src_caps_str(
        h, ("other/tensors,format=static,num_tensors=1,dimensions=(string)4:" + std::to_string(rows) +
            ",types=(string)float32,framerate=(fraction)30/1")
               .c_str());
    ASSERT_EQ(gst_harness_push(h, frame_buffer(10, rows)), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(h);
    ASSERT_NE(out, nullptr) << rows;
    EXPECT_EQ(caps_field(h, "dimensions"), "4:" + std::to_string(rows) + "," + std::to_string(rows)) << rows;
    EXPECT_EQ(memory_values<float>(out, 1).size(), static_cast<size_t>(rows));
    gst_buffer_unref(out);
  }
  EXPECT_EQ(errors_text(bus), "");
  // A static dim that does not fit still names the placeholder.
  gst_harness_set_src_caps_str(h, "other/tensors,format=static,num_tensors=1,dimensions=(string)5:2,types=(string)float32");
  const std::string e = errors_text(bus);
  EXPECT_NE(e.find("placeholder 'x' expects (batch, 4) float32, upstream gives (2, 5) float32"), std::string::npos) << e;
  // Messages still queued hold the element, which holds the bus: flushing
  // drops them, or the element and everything it owns would never be freed.
  gst_bus_set_flushing(bus, TRUE);
  gst_object_unref(bus);
  gst_harness_teardown(h);
}

TEST(JobFunctionDynamic, FlexibleTensorsInAndOut) {
  GstHarness* h = gst_harness_new_parse(("jobfunction job=\"" + rows_job() + "\"").c_str());
  gst_harness_set_sink_caps_str(h, "other/tensors,format=flexible");  // downstream takes only flexible
  gst_harness_set_src_caps_str(h, "other/tensors,format=flexible,framerate=(fraction)30/1");
  for (int rows : {3, 1}) {
    const Tensor x = Tensor::from<float>({rows, 4}, std::vector<float>(4 * rows, 0.5f));
    GstBuffer* in = jobflow::gst::flexible_buffer_from_tensors({x});
    ASSERT_EQ(gst_harness_push(h, in), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(caps_field(h, "format"), "flexible");
    std::vector<Tensor> r;
    std::string error;
    ASSERT_TRUE(jobflow::gst::tensors_from_flexible_buffer(out, &r, &error)) << error;
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].shape(), (Shape{rows, 4}));
    EXPECT_FLOAT_EQ(static_cast<float>(r[0].at(0)), 0.25f);  // softmax of equal values
    EXPECT_EQ(r[1].shape(), (Shape{rows}));
    EXPECT_FLOAT_EQ(static_cast<float>(r[1].at(0)), 8.0f);   // 4 * (0.5 * 2 + 1)
    gst_buffer_unref(out);
  }
  gst_harness_teardown(h);
}

// The check: a dynamic-batch job fed by jobbatch with short last
// batches gives, frame by frame, the results of batch-1 runs.
TEST(JobFunctionDynamic, ShortLastBatchesGiveTheResultsOfBatchOneRuns) {
  constexpr int kFrames = 7;  // batches of 3, 3 and a short 1
  GError* err = nullptr;
  gchar* launch = g_strdup_printf(
      "appsrc name=in format=time caps=\"%s\" ! jobbatch batch-size=3 short-batches=true ! "
      "jobfunction job=\"%s\" ! jobunbatch ! jobsink name=out",
      kFrameCaps, rows_job().c_str());
  GstElement* pipeline = gst_parse_launch(launch, &err);
  g_free(launch);
  ASSERT_NE(pipeline, nullptr) << (err ? err->message : "");
  ASSERT_EQ(err, nullptr) << err->message;
  GstElement* src = gst_bin_get_by_name(GST_BIN(pipeline), "in");
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "out");
  GstBus* bus = gst_element_get_bus(pipeline);
  ASSERT_NE(gst_element_set_state(pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  for (int f = 0; f < kFrames; ++f) ASSERT_EQ(gst_app_src_push_buffer(GST_APP_SRC(src), frame_buffer(f)), GST_FLOW_OK);
  ASSERT_EQ(gst_app_src_end_of_stream(GST_APP_SRC(src)), GST_FLOW_OK);
  auto one = flow::onnx::load(rows_job(), {});
  for (int f = 0; f < kFrames; ++f) {
    GstSample* s = job_sink_try_pull_result(sink, 30 * GST_SECOND);
    ASSERT_NE(s, nullptr) << "frame " << f << ": " << errors_text(bus);
    std::vector<Tensor> got;
    std::string error;
    ASSERT_TRUE(jobflow_sample_to_tensors(s, &got, &error)) << error;
    std::vector<float> v;
    for (int i = 0; i < 4; ++i) v.push_back(value(f, i));
    const auto want = one->run({Tensor::from<float>({1, 4}, v)});
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k)
      EXPECT_TRUE(got[k].equal(want[k])) << "frame " << f << " output " << k << ": " << got[k].str() << " vs "
                                         << want[k].str();
    EXPECT_EQ(GST_BUFFER_PTS(gst_sample_get_buffer(s)), f * GST_SECOND / 30);
    gst_sample_unref(s);
  }
  EXPECT_EQ(job_sink_try_pull_result(sink, 30 * GST_SECOND), nullptr);
  EXPECT_TRUE(job_sink_is_eos(sink));
  EXPECT_EQ(errors_text(bus), "");
  ASSERT_EQ(gst_element_set_state(pipeline, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  gst_object_unref(bus);
  gst_object_unref(src);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
}

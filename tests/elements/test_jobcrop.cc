// jobcrop and the second stage (GstHarness, isolated registry): crops of
// synthetic frames with known colours at known boxes, the fit into the
// model's input, batching and chunks, interval, min-size, QoS drops, the
// results of a second model attached to the regions by
// `jobdecode per-region=true` (CONTAIN / IS_PART_OF), and the whole chain
// jobcrop ! jobfunction ! jobdecode to EOS with a tiny job made here.
#include <gtest/gtest.h>

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <unistd.h>

#include <jobflow/jobflow.h>
#include <jobflow/onnx.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gstjobcrop.h"
#include "gstjobdecode.h"
#include "gstjobfunction.h"
#include "jobflow_analytics.h"
#include "jobflow_crop_meta.h"
#include "static_element_env.h"

namespace {

namespace flow = jobflow;
namespace fs = std::filesystem;

gboolean register_elements(GstPlugin* plugin) {
  gboolean ok = jobflow_register_jobcrop(plugin);
  ok &= jobflow_register_jobdecode(plugin);
  ok &= jobflow_register_jobfunction(plugin);
  return ok;
}
JOBFLOW_STATIC_ELEMENT_TEST_ENV(register_elements);

JOBFLOW_ELEMENT_TEST_TMP_ROOT("jobcrop");

std::string write_file(const char* name, const std::string& text) {
  const fs::path p = tmp_root() / name;
  std::ofstream(p) << text;
  return p.string();
}

/* The second model of these tests: (4, 3, 8, 16) crops -> (4, 3) the mean
 * of each channel, so a crop's best "class" is its dominant colour. */
const std::string& channel_mean_job() {
  static const std::string path = [] {
    const std::string p = (tmp_root() / "channel_mean.onnx").string();
    auto job = flow::global_function(flow::Predict, flow::function_config().name("channel_mean"),
                                     {flow::Numpy::Placeholder({4, 3, 8, 16}, flow::Float, "crops")},
                                     [](flow::Blob x) -> flow::Numpy { return flow::reduce_mean(x, {2, 3}); });
    flow::onnx::save(*job.compiled(), p);
    return p;
  }();
  return path;
}

/* The same with a dynamic batch (-1): jobfunction's caps then fix no
 * dimensions and its results' caps go out with the first result. */
const std::string& channel_mean_dynamic_job() {
  static const std::string path = [] {
    const std::string p = (tmp_root() / "channel_mean_dynamic.onnx").string();
    flow::PlaceholderSpec x = flow::Numpy::Placeholder({-1, 3, 8, 16}, flow::Float, "crops");
    x.dim_names = {"batch", "", "", ""};
    auto job = flow::global_function(flow::Predict, flow::function_config().name("channel_mean_dynamic"), {x},
                                     [](flow::Blob x) -> flow::Numpy { return flow::reduce_mean(x, {2, 3}); });
    flow::onnx::save(*job.compiled(), p);
    return p;
  }();
  return path;
}

/* The same with a dynamic batch and width: (-1, 3, 8, -1), as PP-OCR's
 * recognisers take any width. */
const std::string& channel_mean_any_width_job() {
  static const std::string path = [] {
    const std::string p = (tmp_root() / "channel_mean_any_width.onnx").string();
    flow::PlaceholderSpec x = flow::Numpy::Placeholder({-1, 3, 8, -1}, flow::Float, "crops");
    x.dim_names = {"batch", "", "", "width"};
    auto job = flow::global_function(flow::Predict, flow::function_config().name("channel_mean_any_width"), {x},
                                     [](flow::Blob x) -> flow::Numpy { return flow::reduce_mean(x, {2, 3}); });
    flow::onnx::save(*job.compiled(), p);
    return p;
  }();
  return path;
}

constexpr int kW = 64, kH = 48;
constexpr const char* kVideoCaps = "video/x-raw,format=RGB,width=64,height=48,framerate=30/1";
// (B, C, H, W) = (4, 3, 8, 16), innermost first
constexpr const char* kModelCaps =
    "other/tensors,format=static,num_tensors=1,dimensions=16:8:3:4,types=float32,framerate=30/1";

struct Box {
  const char* label;
  int x, y, w, h;
  std::array<guint8, 3> rgb;
};

/* A 64x48 RGB frame of grey (10, 10, 10) with each box painted in its
 * colour and added as a region (an ODMtd, confidence 0.9) in order. */
GstBuffer* make_frame(const std::vector<Box>& boxes, GstClockTime pts = 0) {
  GstVideoInfo info;
  gst_video_info_set_format(&info, GST_VIDEO_FORMAT_RGB, kW, kH);
  GstBuffer* b = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  GstMapInfo map;
  gst_buffer_map(b, &map, GST_MAP_WRITE);
  const int stride = GST_VIDEO_INFO_PLANE_STRIDE(&info, 0);
  std::memset(map.data, 10, map.size);
  for (const Box& box : boxes)
    for (int y = std::max(box.y, 0); y < std::min(box.y + box.h, kH); ++y)
      for (int x = std::max(box.x, 0); x < std::min(box.x + box.w, kW); ++x)
        for (int c = 0; c < 3; ++c) map.data[y * stride + x * 3 + c] = box.rgb[static_cast<size_t>(c)];
  gst_buffer_unmap(b, &map);
  if (!boxes.empty()) {
    JobflowAnalyticsRelationMeta* m = jobflow_buffer_add_analytics_relation_meta(b);
    for (const Box& box : boxes)
      jobflow_analytics_relation_meta_add_od_mtd(m, g_quark_from_string(box.label), box.x, box.y, box.w, box.h, 0.9f,
                                                 nullptr);
  }
  GST_BUFFER_PTS(b) = pts;
  GST_BUFFER_DURATION(b) = GST_SECOND / 30;
  return b;
}

/* A jobcrop harness: frames in, crops out; downstream caps kModelCaps. */
GstHarness* crop_harness(const char* props, GstBus* bus = nullptr) {
  GstElement* e = gst_element_factory_make("jobcrop", nullptr);
  if (*props) {
    gchar** kv = g_strsplit(props, " ", -1);
    for (gchar** p = kv; *p; ++p) {
      gchar** pair = g_strsplit(*p, "=", 2);
      gst_util_set_object_arg(G_OBJECT(e), pair[0], pair[1]);
      g_strfreev(pair);
    }
    g_strfreev(kv);
  }
  if (bus) gst_element_set_bus(e, bus);
  GstHarness* h = gst_harness_new_with_element(e, "sink", "src");
  gst_object_unref(e);
  gst_harness_set_sink_caps_str(h, kModelCaps);
  gst_harness_set_src_caps_str(h, kVideoCaps);
  return h;
}

/* Slot `slot` of a (4, 3, 8, 16) crops buffer, as [c][y][x]. */
std::vector<float> slot_values(GstBuffer* b, int slot) {
  GstMapInfo map;
  EXPECT_TRUE(gst_buffer_map(b, &map, GST_MAP_READ));
  EXPECT_EQ(map.size, 4u * 3 * 8 * 16 * sizeof(float));
  const float* f = reinterpret_cast<const float*>(map.data) + slot * 3 * 8 * 16;
  std::vector<float> v(f, f + 3 * 8 * 16);
  gst_buffer_unmap(b, &map);
  return v;
}
float at(const std::vector<float>& s, int c, int y, int x) { return s[static_cast<size_t>((c * 8 + y) * 16 + x)]; }

TEST(JobCrop, CropsKnownPixelsIntoTheModelInput) {
  GstHarness* h = crop_harness("label=plate");
  EXPECT_EQ(jobflow::test::caps_field(h, "dimensions"), "16:8:3:4");
  EXPECT_EQ(jobflow::test::caps_field(h, "types"), "float32");
  // a plate of the model's size (16x8: scale 1), a square one (8x8: fills
  // the height, padded on the right), and a car (another label)
  ASSERT_EQ(gst_harness_push(h, make_frame({{"plate", 8, 4, 16, 8, {200, 100, 50}},
                                            {"car", 30, 30, 10, 10, {255, 255, 255}},
                                            {"plate", 40, 20, 8, 8, {0, 255, 0}}},
                                           5 * GST_SECOND)),
            GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(GST_BUFFER_PTS(out), 5 * GST_SECOND);
  const JobflowCropMeta* cm = jobflow_buffer_get_crop_meta(out);
  ASSERT_NE(cm, nullptr);
  EXPECT_EQ(cm->batch_size, 4u);
  ASSERT_EQ(cm->n_crops, 2u);
  EXPECT_TRUE(cm->last);
  EXPECT_EQ(cm->chunk, 0u);
  EXPECT_EQ(cm->model_width, 16);
  EXPECT_EQ(cm->model_height, 8);
  EXPECT_EQ(cm->crops[0].region_id, 0u);
  EXPECT_EQ(cm->crops[1].region_id, 2u);  // the car (id 1) is not cropped
  EXPECT_EQ(cm->crops[1].x, 40);
  EXPECT_EQ(cm->crops[1].y, 20);
  EXPECT_EQ(cm->crops[1].w, 8);
  EXPECT_EQ(cm->crops[1].h, 8);
  EXPECT_DOUBLE_EQ(cm->crops[1].scale_x, 1.0);
  EXPECT_DOUBLE_EQ(cm->crops[1].pad_x, 0.0);
  const std::vector<float> s0 = slot_values(out, 0), s1 = slot_values(out, 1), s2 = slot_values(out, 2);
  const float tol = 1.5f / 255;
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 16; ++x) {
      EXPECT_NEAR(at(s0, 0, y, x), 200 / 255.f, tol);
      EXPECT_NEAR(at(s0, 1, y, x), 100 / 255.f, tol);
      EXPECT_NEAR(at(s0, 2, y, x), 50 / 255.f, tol);
      // the 8x8 green crop at the left, zeros (pad-value 0) to its right
      EXPECT_NEAR(at(s1, 0, y, x), 0.f, tol);
      EXPECT_NEAR(at(s1, 1, y, x), x < 8 ? 1.f : 0.f, tol) << "x=" << x << " y=" << y;
      EXPECT_NEAR(at(s1, 2, y, x), 0.f, tol);
      for (int c = 0; c < 3; ++c) EXPECT_EQ(at(s2, c, y, x), 0.f);  // padding slots are zero
    }
  // the crop maps model pixels back to frame pixels
  double fx = 7.5, fy = 3.5;
  jobflow_crop_to_frame(&cm->crops[1], &fx, &fy);
  EXPECT_DOUBLE_EQ(fx, 47.5);
  EXPECT_DOUBLE_EQ(fy, 23.5);
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

TEST(JobCrop, LetterboxScalesAndNormalises) {
  GstHarness* h = crop_harness("resize=letterbox pad-value=114 mean=0.5 std=0.5");
  // a 32x32 red box: scale 1/4 into 8x8, centred at x 4..11
  ASSERT_EQ(gst_harness_push(h, make_frame({{"plate", 16, 8, 32, 32, {255, 0, 0}}})), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  const JobflowCropMeta* cm = jobflow_buffer_get_crop_meta(out);
  ASSERT_EQ(cm->n_crops, 1u);
  EXPECT_DOUBLE_EQ(cm->crops[0].scale_x, 0.25);
  EXPECT_DOUBLE_EQ(cm->crops[0].scale_y, 0.25);
  EXPECT_DOUBLE_EQ(cm->crops[0].pad_x, 4.0);
  EXPECT_DOUBLE_EQ(cm->crops[0].pad_y, 0.0);
  const std::vector<float> s = slot_values(out, 0);
  const float pad = (114 / 255.f - 0.5f) / 0.5f, tol = 3.f / 255;
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 16; ++x) {
      const bool inside = x >= 4 && x < 12;
      EXPECT_NEAR(at(s, 0, y, x), inside ? 1.f : pad, tol) << "x=" << x << " y=" << y;
      EXPECT_NEAR(at(s, 1, y, x), inside ? -1.f : pad, tol) << "x=" << x << " y=" << y;
    }
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

TEST(JobCrop, DeskewsRotatedRegions) {
  // a 32x8 red bar turned by 0.3 rad about (32, 24), as text-regions gives a text line
  const double cx = 32, cy = 24, hw = 16, hh = 4, r = 0.3;
  GstBuffer* frame = make_frame({});
  GstMapInfo map;
  gst_buffer_map(frame, &map, GST_MAP_WRITE);
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) {
      const double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
      const double lx = dx * std::cos(r) + dy * std::sin(r), ly = -dx * std::sin(r) + dy * std::cos(r);
      if (std::abs(lx) < hw && std::abs(ly) < hh) map.data[y * kW * 3 + x * 3] = 200;
    }
  gst_buffer_unmap(frame, &map);
  JobflowAnalyticsRelationMeta* m = jobflow_buffer_add_analytics_relation_meta(frame);
  jobflow_analytics_relation_meta_add_oriented_od_mtd(m, g_quark_from_string("text"), 16, 20, 32, 8, 0.3f, 0.9f,
                                                      nullptr);
  GstBuffer* again = gst_buffer_ref(frame);
  for (const char* props : {"resize=stretch", "resize=stretch deskew=false"}) {
    GstHarness* h = crop_harness(props);
    ASSERT_EQ(gst_harness_push(h, gst_buffer_ref(again)), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(h);
    const JobflowCropMeta* cm = jobflow_buffer_get_crop_meta(out);
    ASSERT_EQ(cm->n_crops, 1u);
    const JobflowCrop& c = cm->crops[0];
    const std::vector<float> v = slot_values(out, 0);
    if (std::string(props).find("deskew=false") == std::string::npos) {
      EXPECT_FLOAT_EQ(c.rotation, 0.3f);
      EXPECT_EQ(std::vector<int>({c.x, c.y, c.w, c.h}), std::vector<int>({16, 20, 32, 8}));
      EXPECT_DOUBLE_EQ(c.scale_x, 0.5);
      // upright: the bar fills the input (away from its edges)
      for (int y = 2; y < 6; ++y)
        for (int x = 2; x < 14; ++x) {
          EXPECT_NEAR(at(v, 0, y, x), 200 / 255.f, 1.5f / 255) << "x=" << x << " y=" << y;
          EXPECT_NEAR(at(v, 1, y, x), 10 / 255.f, 1.5f / 255) << "x=" << x << " y=" << y;
        }
      // model pixels map back through the rotation
      double fx = 8, fy = 4;
      jobflow_crop_to_frame(&c, &fx, &fy);
      EXPECT_NEAR(fx, 32, 1e-9);
      EXPECT_NEAR(fy, 24, 1e-9);
      fx = 0, fy = 4;  // the middle of the bar's left end
      jobflow_crop_to_frame(&c, &fx, &fy);
      EXPECT_NEAR(fx, 32 - 16 * std::cos(0.3), 1e-5);
      EXPECT_NEAR(fy, 24 - 16 * std::sin(0.3), 1e-5);
    } else {
      // the axis-aligned box around it: its corners are the background, not the bar
      EXPECT_EQ(c.rotation, 0.0);
      EXPECT_LT(c.x, 16);
      EXPECT_GT(c.h, 8);
      EXPECT_LT(at(v, 0, 0, 0), 60 / 255.f);  // mostly background (scaled down from about 2x)
      EXPECT_NEAR(at(v, 0, 4, 8), 200 / 255.f, 1.5f / 255);  // its centre is the bar
    }
    gst_buffer_unref(out);
    gst_harness_teardown(h);
  }
  gst_buffer_unref(again);
  gst_buffer_unref(frame);
}

TEST(JobCrop, BatchesTheCropsOfAFrameInChunksOfTheModelsBatch) {
  GstHarness* h = crop_harness("");
  std::vector<Box> boxes;
  for (int i = 0; i < 6; ++i)
    boxes.push_back({"plate", i * 10, 2, 8, 8, {static_cast<guint8>(40 * i), 0, 0}});
  ASSERT_EQ(gst_harness_push(h, make_frame(boxes, GST_SECOND)), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_buffers_in_queue(h), 2u);
  GstBuffer* a = gst_harness_pull(h);
  GstBuffer* b = gst_harness_pull(h);
  const JobflowCropMeta* ma = jobflow_buffer_get_crop_meta(a);
  const JobflowCropMeta* mb = jobflow_buffer_get_crop_meta(b);
  EXPECT_EQ(ma->n_crops, 4u);
  EXPECT_EQ(ma->chunk, 0u);
  EXPECT_FALSE(ma->last);
  EXPECT_EQ(mb->n_crops, 2u);
  EXPECT_EQ(mb->chunk, 1u);
  EXPECT_TRUE(mb->last);
  EXPECT_EQ(ma->frame, mb->frame);  // the same frame, not copied
  EXPECT_EQ(GST_BUFFER_PTS(a), GST_SECOND);
  EXPECT_EQ(GST_BUFFER_PTS(b), GST_SECOND);
  for (guint i = 0; i < 4; ++i) EXPECT_EQ(ma->crops[i].region_id, i);
  for (guint i = 0; i < 2; ++i) EXPECT_EQ(mb->crops[i].region_id, 4 + i);
  // crop i is red 40 * i: slot 1 of the second chunk is region 5 (red 200)
  EXPECT_NEAR(at(slot_values(b, 1), 0, 3, 3), 200 / 255.f, 1.5f / 255);
  EXPECT_NEAR(at(slot_values(a, 3), 0, 3, 3), 120 / 255.f, 1.5f / 255);
  gst_buffer_unref(a);
  gst_buffer_unref(b);
  gst_harness_teardown(h);
}

/* The dimensions of every caps event the harness received so far, in order. */
std::vector<std::string> caps_dims(GstHarness* h) {
  std::vector<std::string> dims;
  while (GstEvent* e = gst_harness_try_pull_event(h)) {
    if (GST_EVENT_TYPE(e) == GST_EVENT_CAPS) {
      GstCaps* caps;
      gst_event_parse_caps(e, &caps);
      dims.push_back(gst_structure_get_string(gst_caps_get_structure(caps, 0), "dimensions"));
    }
    gst_event_unref(e);
  }
  return dims;
}

TEST(JobCrop, DynamicWidthGivesEachTensorTheWidthOfItsWidestCrop) {
  GstHarness* h = crop_harness("dynamic-width=true width=48 height=8 batch-size=2");
  // downstream takes any width (a job with a dynamic width fixes none)
  gst_harness_set_sink_caps_str(h, "other/tensors,format=static,num_tensors=1,types=float32,framerate=30/1");
  caps_dims(h);  // the caps of the configuration: 48 wide
  // at height 8: a 8x8 square is 8 wide, a 40x8 line 40, a 16x4 line 32:
  // rounded up to multiples of 32 and at least `width` (48), a tensor with
  // the first two is 64 wide, one with the third 48
  ASSERT_EQ(gst_harness_push(h, make_frame({{"line", 0, 0, 8, 8, {0, 0, 255}},
                                            {"line", 10, 10, 40, 8, {255, 0, 0}},
                                            {"line", 20, 30, 16, 4, {0, 255, 0}}})),
            GST_FLOW_OK);
  ASSERT_EQ(gst_harness_buffers_in_queue(h), 2u);
  GstBuffer* a = gst_harness_pull(h);
  GstBuffer* b = gst_harness_pull(h);
  EXPECT_EQ(caps_dims(h), (std::vector<std::string>{"64:8:3:2", "48:8:3:2"}));
  EXPECT_EQ(gst_buffer_get_size(a), 2u * 3 * 8 * 64 * sizeof(float));
  EXPECT_EQ(gst_buffer_get_size(b), 2u * 3 * 8 * 48 * sizeof(float));
  const JobflowCropMeta* ma = jobflow_buffer_get_crop_meta(a);
  const JobflowCropMeta* mb = jobflow_buffer_get_crop_meta(b);
  ASSERT_TRUE(ma && mb);
  EXPECT_EQ(ma->model_width, 64);
  EXPECT_EQ(mb->model_width, 48);
  ASSERT_EQ(ma->n_crops, 2u);
  ASSERT_EQ(mb->n_crops, 1u);
  // every crop fills the height at its own aspect (scale 1, 1, 2), padded on the right
  EXPECT_DOUBLE_EQ(ma->crops[0].scale_x, 1.0);
  EXPECT_DOUBLE_EQ(ma->crops[1].scale_y, 1.0);
  EXPECT_DOUBLE_EQ(mb->crops[0].scale_x, 2.0);
  EXPECT_DOUBLE_EQ(mb->crops[0].scale_y, 2.0);
  auto pixel = [](GstBuffer* buf, int width, int slot, int c, int y, int x) {
    GstMapInfo map;
    EXPECT_TRUE(gst_buffer_map(buf, &map, GST_MAP_READ));
    const float v = reinterpret_cast<const float*>(map.data)[((slot * 3 + c) * 8 + y) * width + x];
    gst_buffer_unmap(buf, &map);
    return v;
  };
  const float tol = 1.5f / 255;
  for (int x : {0, 7, 8, 39, 40, 63}) {
    EXPECT_NEAR(pixel(a, 64, 0, 2, 4, x), x < 8 ? 1.f : 0.f, tol) << "x=" << x;   // blue, 8 wide
    EXPECT_NEAR(pixel(a, 64, 1, 0, 4, x), x < 40 ? 1.f : 0.f, tol) << "x=" << x;  // red, 40 wide
  }
  for (int x : {0, 31, 32, 47})
    EXPECT_NEAR(pixel(b, 48, 0, 1, 7, x), x < 32 ? 1.f : 0.f, tol) << "x=" << x;  // green, 32 wide
  gst_buffer_unref(a);
  gst_buffer_unref(b);
  // a frame of one square crop: the least width again, no new caps
  ASSERT_EQ(gst_harness_push(h, make_frame({{"line", 0, 0, 8, 8, {0, 0, 255}}}, GST_SECOND)), GST_FLOW_OK);
  GstBuffer* c = gst_harness_pull(h);
  EXPECT_EQ(caps_dims(h), std::vector<std::string>{});
  EXPECT_EQ(jobflow_buffer_get_crop_meta(c)->model_width, 48);
  gst_buffer_unref(c);
  gst_harness_teardown(h);
}

TEST(JobCrop, FramesWithoutCropsPassAsEmptyGapBuffers) {
  GstHarness* h = crop_harness("label=plate");
  // the first buffer under new caps is a tensor all the same (all padding),
  // so that the model's first result sets the caps after it
  ASSERT_EQ(gst_harness_push(h, make_frame({}, 0)), GST_FLOW_OK);
  GstBuffer* first = gst_harness_pull(h);
  EXPECT_FALSE(GST_BUFFER_FLAG_IS_SET(first, GST_BUFFER_FLAG_GAP));
  EXPECT_EQ(gst_buffer_get_size(first), 4u * 3 * 8 * 16 * sizeof(float));
  EXPECT_EQ(jobflow_buffer_get_crop_meta(first)->n_crops, 0u);
  EXPECT_TRUE(jobflow_buffer_get_crop_meta(first)->last);
  EXPECT_EQ(at(slot_values(first, 0), 0, 0, 0), 0.f);
  gst_buffer_unref(first);
  ASSERT_EQ(gst_harness_push(h, make_frame({}, GST_SECOND)), GST_FLOW_OK);                                  // no meta
  ASSERT_EQ(gst_harness_push(h, make_frame({{"car", 0, 0, 8, 8, {1, 2, 3}}}, 2 * GST_SECOND)), GST_FLOW_OK);  // no plate
  for (GstClockTime pts : {GstClockTime(GST_SECOND), GstClockTime(2 * GST_SECOND)}) {
    GstBuffer* out = gst_harness_pull(h);
    EXPECT_EQ(GST_BUFFER_PTS(out), pts);
    EXPECT_EQ(gst_buffer_get_size(out), 0u);
    EXPECT_TRUE(GST_BUFFER_FLAG_IS_SET(out, GST_BUFFER_FLAG_GAP));
    const JobflowCropMeta* cm = jobflow_buffer_get_crop_meta(out);
    ASSERT_NE(cm, nullptr);
    EXPECT_EQ(cm->n_crops, 0u);
    EXPECT_TRUE(cm->last);
    EXPECT_NE(cm->frame, nullptr);
    gst_buffer_unref(out);
  }
  gst_harness_teardown(h);
}

TEST(JobCrop, IntervalCropsEveryNthFrame) {
  GstHarness* h = crop_harness("interval=3");
  for (int i = 0; i < 7; ++i)
    ASSERT_EQ(gst_harness_push(h, make_frame({{"plate", 4, 4, 16, 8, {9, 9, 9}}}, i * GST_SECOND)), GST_FLOW_OK);
  std::vector<guint> crops;
  for (int i = 0; i < 7; ++i) {
    GstBuffer* out = gst_harness_pull(h);
    EXPECT_EQ(GST_BUFFER_PTS(out), static_cast<GstClockTime>(i) * GST_SECOND);
    crops.push_back(jobflow_buffer_get_crop_meta(out)->n_crops);
    gst_buffer_unref(out);
  }
  EXPECT_EQ(crops, (std::vector<guint>{1, 0, 0, 1, 0, 0, 1}));
  gst_harness_teardown(h);
}

TEST(JobCrop, MinSizeSkipsSmallRegionsAfterClampingToTheFrame) {
  GstHarness* h = crop_harness("min-width=6 min-height=5");
  ASSERT_EQ(gst_harness_push(h, make_frame({{"a", 2, 2, 5, 10, {1, 1, 1}},     // too narrow
                                            {"b", 10, 10, 6, 5, {2, 2, 2}},    // just fits
                                            {"c", 60, 10, 10, 10, {3, 3, 3}},  // 4 wide inside the frame
                                            {"d", -4, 40, 20, 20, {4, 4, 4}}})),  // 16x8 inside
            GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  const JobflowCropMeta* cm = jobflow_buffer_get_crop_meta(out);
  ASSERT_EQ(cm->n_crops, 2u);
  EXPECT_EQ(cm->crops[0].region_id, 1u);
  EXPECT_EQ(cm->crops[1].region_id, 3u);
  EXPECT_EQ(cm->crops[1].x, 0);
  EXPECT_EQ(cm->crops[1].y, 40);
  EXPECT_EQ(cm->crops[1].w, 16);
  EXPECT_EQ(cm->crops[1].h, 8);
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

TEST(JobCrop, DropsFramesThatDownstreamsQosSaysAreLate) {
  GstBus* bus = gst_bus_new();
  GstHarness* h = crop_harness("max-lateness=20000000", bus);
  // downstream: the buffer at 1 s came 0.5 s late -> it is at 1.5 s
  ASSERT_TRUE(gst_harness_push_upstream_event(h, gst_event_new_qos(GST_QOS_TYPE_UNDERFLOW, 0.5, 500 * GST_MSECOND,
                                                                   GST_SECOND)));
  const std::vector<GstClockTime> pts = {GST_SECOND, 1470 * GST_MSECOND, 1490 * GST_MSECOND, 2 * GST_SECOND};
  for (GstClockTime t : pts)
    ASSERT_EQ(gst_harness_push(h, make_frame({{"plate", 4, 4, 16, 8, {9, 9, 9}}}, t)), GST_FLOW_OK);
  std::vector<GstClockTime> out;
  while (GstBuffer* b = gst_harness_try_pull(h)) {
    out.push_back(GST_BUFFER_PTS(b));
    gst_buffer_unref(b);
  }
  // 1 s and 1.47 s are later than 20 ms behind 1.5 s; 1.49 s is not
  EXPECT_EQ(out, (std::vector<GstClockTime>{1490 * GST_MSECOND, 2 * GST_SECOND}));
  std::vector<guint64> dropped;
  while (GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_QOS)) {
    GstFormat format;
    guint64 processed, drops;
    gst_message_parse_qos_stats(m, &format, &processed, &drops);
    EXPECT_EQ(format, GST_FORMAT_BUFFERS);
    dropped.push_back(drops);
    gst_message_unref(m);
  }
  EXPECT_EQ(dropped, (std::vector<guint64>{1, 2}));
  gst_harness_teardown(h);

  // qos=false, or max-lateness=-1: nothing is dropped
  for (const char* props : {"qos=false", "max-lateness=-1"}) {
    h = crop_harness(props);
    ASSERT_TRUE(gst_harness_push_upstream_event(h, gst_event_new_qos(GST_QOS_TYPE_UNDERFLOW, 0.5, 500 * GST_MSECOND,
                                                                     GST_SECOND)));
    ASSERT_EQ(gst_harness_push(h, make_frame({}, GST_SECOND)), GST_FLOW_OK);
    EXPECT_EQ(gst_harness_buffers_in_queue(h), 1u) << props;
    gst_harness_teardown(h);
  }
  gst_bus_set_flushing(bus, TRUE);
  gst_object_unref(bus);
}

TEST(JobCrop, NeedsTheModelsInputSizeAndEnoughChannels) {
  GstBus* bus = gst_bus_new();
  GstElement* e = gst_element_factory_make("jobcrop", nullptr);
  gst_element_set_bus(e, bus);
  GstHarness* h = gst_harness_new_with_element(e, "sink", "src");
  gst_harness_set_src_caps_str(h, kVideoCaps);  // downstream (the harness) fixes nothing
  GstMessage* m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
  ASSERT_NE(m, nullptr);
  GError* err = nullptr;
  gst_message_parse_error(m, &err, nullptr);
  EXPECT_TRUE(g_error_matches(err, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION));
  EXPECT_NE(std::string(err->message).find("set the properties width, height and batch-size"), std::string::npos)
      << err->message;
  g_error_free(err);
  gst_message_unref(m);
  gst_harness_teardown(h);
  gst_object_unref(e);

  // the properties give it: (2, 3, 4, 4) float32 by default
  h = gst_harness_new("jobcrop");
  g_object_set(h->element, "width", 4, "height", 4, "batch-size", 2, nullptr);
  gst_harness_set_src_caps_str(h, kVideoCaps);
  EXPECT_EQ(jobflow::test::caps_field(h, "dimensions"), "4:4:3:2");
  gst_harness_teardown(h);

  // 3 channels of GRAY8 frames
  gst_bus_set_flushing(bus, TRUE);  // the first harness's errors (the caps event is tried again)
  gst_bus_set_flushing(bus, FALSE);
  e = gst_element_factory_make("jobcrop", nullptr);
  gst_element_set_bus(e, bus);
  h = gst_harness_new_with_element(e, "sink", "src");
  gst_harness_set_sink_caps_str(h, kModelCaps);
  gst_harness_set_src_caps_str(h, "video/x-raw,format=GRAY8,width=64,height=48,framerate=30/1");
  m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
  ASSERT_NE(m, nullptr);
  gst_message_parse_error(m, &err, nullptr);
  EXPECT_STREQ(err->message, "jobcrop: the model takes 3 channels, the frames (GRAY8) have 1");
  g_error_free(err);
  gst_message_unref(m);
  gst_harness_teardown(h);
  gst_object_unref(e);
  gst_bus_set_flushing(bus, TRUE);
  gst_object_unref(bus);
}

// ------------------------------------------------ results back on regions

/* A jobdecode per-region=true harness taking (4, 3) float32 scores. */
GstHarness* attach_harness(const char* props) {
  GstHarness* h = gst_harness_new_parse((std::string("jobdecode per-region=true ") + props).c_str());
  gst_harness_set_src_caps_str(h, "other/tensors,format=static,num_tensors=1,dimensions=(string)3:4,types=float32");
  return h;
}

/* What a model would output for `crops`: (4, 3) scores, with the crops'
 * metas (the crop meta with the frame) as jobfunction passes them on. */
GstBuffer* scores_for(GstBuffer* crops, const std::vector<std::array<float, 3>>& scores) {
  std::vector<float> v(12, 0.f);
  for (size_t i = 0; i < scores.size(); ++i)
    for (size_t c = 0; c < 3; ++c) v[i * 3 + c] = scores[i][c];
  GstBuffer* b = gst_buffer_new_memdup(v.data(), v.size() * sizeof(float));
  gst_buffer_copy_into(b, crops, static_cast<GstBufferCopyFlags>(GST_BUFFER_COPY_TIMESTAMPS | GST_BUFFER_COPY_META |
                                                                  GST_BUFFER_COPY_FLAGS),
                       0, static_cast<gsize>(-1));
  return b;
}

/* The label and level of each ClsMtd the region CONTAINs (and that IS_PART_OF it). */
std::vector<std::pair<std::string, float>> classes_of(JobflowAnalyticsRelationMeta* m, guint region) {
  std::vector<std::pair<std::string, float>> out;
  gpointer state = nullptr;
  JobflowAnalyticsClsMtd cls;
  while (jobflow_analytics_relation_meta_get_direct_related(m, region, JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN,
                                                            jobflow_analytics_cls_mtd_get_mtd_type(), &state, &cls)) {
    EXPECT_EQ(jobflow_analytics_relation_meta_get_relation(m, cls.id, region), JOBFLOW_ANALYTICS_REL_TYPE_IS_PART_OF);
    for (gsize i = 0; i < jobflow_analytics_cls_mtd_get_length(&cls); ++i)
      out.emplace_back(g_quark_to_string(jobflow_analytics_cls_mtd_get_quark(&cls, i)),
                       jobflow_analytics_cls_mtd_get_level(&cls, i));
  }
  return out;
}

TEST(JobDecodePerRegion, AttachesClassesAsChildrenOfTheRegions) {
  const std::string labels = write_file("rgb.txt", "red\ngreen\nblue\n");
  GstHarness* crop = crop_harness("label=plate");
  std::vector<Box> boxes = {{"plate", 0, 0, 8, 8, {255, 0, 0}}, {"car", 20, 0, 8, 8, {0, 0, 255}}};
  for (int i = 0; i < 5; ++i) boxes.push_back({"plate", i * 10, 20, 8, 8, {0, 255, 0}});
  ASSERT_EQ(gst_harness_push(crop, make_frame(boxes, 3 * GST_SECOND)), GST_FLOW_OK);  // 6 plates: 2 chunks
  ASSERT_EQ(gst_harness_push(crop, make_frame({}, 4 * GST_SECOND)), GST_FLOW_OK);     // none: a GAP buffer
  GstHarness* h = attach_harness(("mode=labels softmax=false labels=" + labels).c_str());
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  GstBuffer* c0 = gst_harness_pull(crop);
  GstBuffer* c1 = gst_harness_pull(crop);
  GstBuffer* gap = gst_harness_pull(crop);
  ASSERT_EQ(gst_harness_push(h, scores_for(c0, {{0.9f, 0.1f, 0}, {0, 0.8f, 0}, {0, 0.7f, 0}, {0, 0.6f, 0}})),
            GST_FLOW_OK);
  EXPECT_EQ(gst_harness_buffers_in_queue(h), 0u);  // the frame waits for its last chunk
  ASSERT_EQ(gst_harness_push(h, scores_for(c1, {{0, 0.5f, 0}, {0, 0.1f, 0.4f}})), GST_FLOW_OK);
  gst_buffer_unref(c0);
  gst_buffer_unref(c1);
  GstBuffer* frame = gst_harness_pull(h);
  ASSERT_NE(frame, nullptr);
  EXPECT_EQ(GST_BUFFER_PTS(frame), 3 * GST_SECOND);
  EXPECT_EQ(jobflow::test::caps_field(h, "format"), "RGB");  // the frame's caps
  EXPECT_EQ(jobflow_buffer_get_crop_meta(frame), nullptr);
  JobflowAnalyticsRelationMeta* m = jobflow_buffer_get_analytics_relation_meta(frame);
  ASSERT_NE(m, nullptr);
  using C = std::vector<std::pair<std::string, float>>;
  EXPECT_EQ(classes_of(m, 0), (C{{"red", 0.9f}}));
  EXPECT_EQ(classes_of(m, 1), C{});  // the car was not cropped
  EXPECT_EQ(classes_of(m, 2), (C{{"green", 0.8f}}));
  EXPECT_EQ(classes_of(m, 5), (C{{"green", 0.5f}}));
  EXPECT_EQ(classes_of(m, 6), (C{{"blue", 0.4f}}));
  // the pixels are the frame's: region 0 is red
  GstMapInfo map;
  gst_buffer_map(frame, &map, GST_MAP_READ);
  EXPECT_EQ(map.data[0], 255);
  EXPECT_EQ(map.data[1], 0);
  gst_buffer_unmap(frame, &map);
  gchar* json = jobflow_analytics_relation_meta_to_json(m);
  EXPECT_NE(std::string(json).find("\"label\":\"plate\",\"confidence\":0.9,\"x\":0,\"y\":0,\"w\":8,\"h\":8,"
                                   "\"classes\":[{\"label\":\"red\",\"confidence\":0.9}]"),
            std::string::npos)
      << json;
  g_free(json);
  gst_buffer_unref(frame);
  // the frame without crops goes on with nothing added
  ASSERT_EQ(gst_harness_push(h, scores_for(gap, {})), GST_FLOW_OK);
  gst_buffer_unref(gap);
  frame = gst_harness_pull(h);
  EXPECT_EQ(GST_BUFFER_PTS(frame), 4 * GST_SECOND);
  EXPECT_FALSE(GST_BUFFER_FLAG_IS_SET(frame, GST_BUFFER_FLAG_GAP));
  m = jobflow_buffer_get_analytics_relation_meta(frame);
  EXPECT_TRUE(m == nullptr || jobflow_analytics_relation_get_length(m) == 0);
  gst_buffer_unref(frame);
  // one jobflow-regions message per frame
  int messages = 0;
  while (GstMessage* msg = gst_bus_pop_filtered(bus, GST_MESSAGE_ELEMENT)) {
    messages += gst_message_has_name(msg, JOBFLOW_REGIONS_MESSAGE_NAME);
    gst_message_unref(msg);
  }
  EXPECT_EQ(messages, 2);
  gst_harness_teardown(h);
  gst_harness_teardown(crop);
  gst_bus_set_flushing(bus, TRUE);
  gst_object_unref(bus);
}

TEST(JobDecodePerRegion, AFrameWhoseLastChunkWasLostIsNotMixedWithTheNext) {
  GstHarness* crop = crop_harness("");
  std::vector<Box> five;
  for (int i = 0; i < 5; ++i) five.push_back({"plate", i * 10, 0, 8, 8, {1, 1, 1}});
  ASSERT_EQ(gst_harness_push(crop, make_frame(five, GST_SECOND)), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(crop, make_frame({{"plate", 0, 0, 8, 8, {1, 1, 1}}}, 2 * GST_SECOND)), GST_FLOW_OK);
  GstBuffer* first = gst_harness_pull(crop);  // frame 1, chunk 0 of 2
  GstBuffer* lost = gst_harness_pull(crop);   // frame 1, chunk 1: not sent on
  GstBuffer* next = gst_harness_pull(crop);   // frame 2, its only chunk
  GstHarness* h = attach_harness("mode=labels softmax=false");
  ASSERT_EQ(gst_harness_push(h, scores_for(first, {{1, 0, 0}, {1, 0, 0}, {1, 0, 0}, {1, 0, 0}})), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(h, scores_for(next, {{0, 1, 0}})), GST_FLOW_OK);
  GstBuffer* frame = gst_harness_pull(h);
  EXPECT_EQ(GST_BUFFER_PTS(frame), 2 * GST_SECOND);
  JobflowAnalyticsRelationMeta* m = jobflow_buffer_get_analytics_relation_meta(frame);
  EXPECT_EQ(jobflow_analytics_relation_get_length(m), 2u);  // its region and its class only
  EXPECT_EQ(classes_of(m, 0), (std::vector<std::pair<std::string, float>>{{"1", 1.f}}));
  gst_buffer_unref(frame);
  for (GstBuffer* b : {first, lost, next}) gst_buffer_unref(b);
  gst_harness_teardown(h);
  gst_harness_teardown(crop);
}

TEST(JobDecodePerRegion, AttachesCtcTextsAndRefusesBuffersWithoutCrops) {
  const std::string dict = write_file("ab.txt", "a\nb\n");
  GstHarness* crop = crop_harness("");
  ASSERT_EQ(gst_harness_push(crop, make_frame({{"line", 0, 0, 16, 8, {1, 1, 1}}, {"line", 0, 10, 16, 8, {2, 2, 2}}})),
            GST_FLOW_OK);
  GstBuffer* crops = gst_harness_pull(crop);
  // (4, T=3, C=3) probabilities: blank 0, "a" 1, "b" 2
  GstHarness* h = gst_harness_new_parse(("jobdecode per-region=true mode=ctc softmax=false dictionary=" + dict).c_str());
  gst_harness_set_src_caps_str(h, "other/tensors,format=static,num_tensors=1,dimensions=(string)3:3:4,types=float32");
  const float p[4][3][3] = {{{0, 1, 0}, {1, 0, 0}, {0, 0, 1}},  // "ab"
                            {{0, 0, 1}, {0, 0, 1}, {1, 0, 0}},  // "b"
                            {{1, 0, 0}, {1, 0, 0}, {1, 0, 0}},
                            {{1, 0, 0}, {1, 0, 0}, {1, 0, 0}}};
  GstBuffer* in = gst_buffer_new_memdup(p, sizeof p);
  gst_buffer_copy_into(in, crops, static_cast<GstBufferCopyFlags>(GST_BUFFER_COPY_TIMESTAMPS | GST_BUFFER_COPY_META), 0,
                       static_cast<gsize>(-1));
  ASSERT_EQ(gst_harness_push(h, in), GST_FLOW_OK);
  GstBuffer* frame = gst_harness_pull(h);
  JobflowAnalyticsRelationMeta* m = jobflow_buffer_get_analytics_relation_meta(frame);
  std::vector<std::string> texts;
  for (guint region : {0u, 1u}) {
    gpointer state = nullptr;
    JobflowAnalyticsTextMtd txt;
    ASSERT_TRUE(jobflow_analytics_relation_meta_get_direct_related(m, region, JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN,
                                                                   jobflow_analytics_text_mtd_get_mtd_type(), &state,
                                                                   &txt));
    EXPECT_EQ(jobflow_analytics_relation_meta_get_relation(m, txt.id, region), JOBFLOW_ANALYTICS_REL_TYPE_IS_PART_OF);
    texts.push_back(jobflow_analytics_text_mtd_get_text(&txt));
  }
  EXPECT_EQ(texts, (std::vector<std::string>{"ab", "b"}));
  gst_buffer_unref(frame);
  gst_buffer_unref(crops);

  // a tensor buffer that did not come from jobcrop
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  EXPECT_EQ(gst_harness_push(h, gst_buffer_new_memdup(p, sizeof p)), GST_FLOW_ERROR);
  GstMessage* msg = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
  ASSERT_NE(msg, nullptr);
  GError* err = nullptr;
  gst_message_parse_error(msg, &err, nullptr);
  EXPECT_STREQ(err->message, "jobdecode per-region=true takes jobcrop's crops: this buffer has no JobflowCropMeta");
  g_error_free(err);
  gst_message_unref(msg);
  gst_harness_teardown(h);
  gst_harness_teardown(crop);
  gst_bus_set_flushing(bus, TRUE);
  gst_object_unref(bus);
}

TEST(JobDecodePerRegion, AttachesBoxesInsideTheRegionsInFramePixels) {
  GstHarness* crop = crop_harness("resize=letterbox");
  // a 32x16 region: scale 0.5 into the 16x8 input, no padding
  ASSERT_EQ(gst_harness_push(crop, make_frame({{"car", 10, 20, 32, 16, {1, 1, 1}}})), GST_FLOW_OK);
  GstBuffer* crops = gst_harness_pull(crop);
  // scheme=detections: boxes (4, 1, 4) x1 y1 x2 y2 in model pixels, scores (4, 1)
  GstHarness* h = gst_harness_new_parse("jobdecode per-region=true mode=boxes scheme=detections");
  gst_harness_set_src_caps_str(h, "other/tensors,format=static,num_tensors=2,dimensions=(string)4:1:4.1:4,"
                                  "types=float32.float32");
  const float boxes[4][4] = {{2, 2, 10, 6}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};
  const float scores[4] = {0.8f, 0, 0, 0};
  GstBuffer* in = gst_buffer_new();
  gpointer b = g_memdup2(boxes, sizeof boxes), sc = g_memdup2(scores, sizeof scores);
  gst_buffer_append_memory(in, gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, b, sizeof boxes, 0, sizeof boxes, b,
                                                      g_free));
  gst_buffer_append_memory(in, gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, sc, sizeof scores, 0, sizeof scores,
                                                      sc, g_free));
  gst_buffer_copy_into(in, crops, static_cast<GstBufferCopyFlags>(GST_BUFFER_COPY_TIMESTAMPS | GST_BUFFER_COPY_META), 0,
                       static_cast<gsize>(-1));
  ASSERT_EQ(gst_harness_push(h, in), GST_FLOW_OK);
  GstBuffer* frame = gst_harness_pull(h);
  JobflowAnalyticsRelationMeta* m = jobflow_buffer_get_analytics_relation_meta(frame);
  gpointer state = nullptr;
  JobflowAnalyticsODMtd child;
  ASSERT_TRUE(jobflow_analytics_relation_meta_get_direct_related(m, 0, JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN,
                                                                 jobflow_analytics_od_mtd_get_mtd_type(), &state,
                                                                 &child));
  gint x, y, w, hh;
  gfloat conf;
  jobflow_analytics_od_mtd_get_location(&child, &x, &y, &w, &hh, &conf);
  // model (2, 2)-(10, 6) at scale 0.5 from (10, 20): frame (14, 24)-(30, 32)
  EXPECT_EQ(std::vector<gint>({x, y, w, hh}), std::vector<gint>({14, 24, 16, 8}));
  EXPECT_FLOAT_EQ(conf, 0.8f);
  EXPECT_EQ(jobflow_analytics_relation_meta_get_relation(m, child.id, 0), JOBFLOW_ANALYTICS_REL_TYPE_IS_PART_OF);
  gchar* json = jobflow_analytics_relation_meta_to_json(m);
  EXPECT_NE(std::string(json).find("\"children\":[1]"), std::string::npos) << json;
  EXPECT_NE(std::string(json).find("\"parent\":0"), std::string::npos) << json;
  g_free(json);
  gst_buffer_unref(frame);
  gst_buffer_unref(crops);

  // a rotated region (deskewed crop): the box turns with it about its centre
  GstBuffer* rotated = make_frame({});
  jobflow_analytics_relation_meta_add_oriented_od_mtd(jobflow_buffer_add_analytics_relation_meta(rotated),
                                                      g_quark_from_string("car"), 16, 16, 32, 16, 0.3f, 0.9f, nullptr);
  ASSERT_EQ(gst_harness_push(crop, rotated), GST_FLOW_OK);
  crops = gst_harness_pull(crop);
  in = gst_buffer_new();
  b = g_memdup2(boxes, sizeof boxes);
  sc = g_memdup2(scores, sizeof scores);
  gst_buffer_append_memory(in, gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, b, sizeof boxes, 0, sizeof boxes, b,
                                                      g_free));
  gst_buffer_append_memory(in, gst_memory_new_wrapped(GST_MEMORY_FLAG_READONLY, sc, sizeof scores, 0, sizeof scores,
                                                      sc, g_free));
  gst_buffer_copy_into(in, crops, static_cast<GstBufferCopyFlags>(GST_BUFFER_COPY_TIMESTAMPS | GST_BUFFER_COPY_META), 0,
                       static_cast<gsize>(-1));
  ASSERT_EQ(gst_harness_push(h, in), GST_FLOW_OK);
  frame = gst_harness_pull(h);
  m = jobflow_buffer_get_analytics_relation_meta(frame);
  state = nullptr;
  ASSERT_TRUE(jobflow_analytics_relation_meta_get_direct_related(m, 0, JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN,
                                                                 jobflow_analytics_od_mtd_get_mtd_type(), &state,
                                                                 &child));
  gfloat r;
  jobflow_analytics_od_mtd_get_oriented_location(&child, &x, &y, &w, &hh, &r, nullptr);
  // model centre (6, 4) is 4 px left of the crop's centre (32, 24) before the turn
  const double ccx = 32 - 4 * std::cos(0.3), ccy = 24 - 4 * std::sin(0.3);
  EXPECT_EQ(std::vector<gint>({x, y, w, hh}), std::vector<gint>({static_cast<gint>(std::lround(ccx - 8)),
                                                                 static_cast<gint>(std::lround(ccy - 4)), 16, 8}));
  EXPECT_FLOAT_EQ(r, 0.3f);
  gst_buffer_unref(frame);
  gst_buffer_unref(crops);
  gst_harness_teardown(h);
  gst_harness_teardown(crop);
}

// ------------------------------------------------ the whole second stage

TEST(SecondStage, CropRunDecodeDeliversEveryFrameWithItsResultsAtEos) {
  const std::string labels = write_file("rgb2.txt", "red\ngreen\nblue\n");
  GstHarness* h = gst_harness_new_parse(("jobcrop label=plate ! jobfunction name=fn job=" + channel_mean_job() +
                                         " ! jobdecode mode=labels per-region=true softmax=false labels=" + labels)
                                            .c_str());
  gst_harness_set_src_caps_str(h, kVideoCaps);
  // frame i: i + 1 plates (frames 4 and 5: two chunks); frame 2 has none
  const std::array<guint8, 3> colours[3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}};
  std::vector<std::vector<Box>> frames;
  for (int i = 0; i < 6; ++i) {
    std::vector<Box> boxes;
    if (i != 2)
      for (int k = 0; k <= i; ++k) boxes.push_back({"plate", k * 10, 4, 8, 8, colours[(i + k) % 3]});
    boxes.push_back({"car", 0, 30, 16, 16, {255, 255, 255}});
    frames.push_back(boxes);
    ASSERT_EQ(gst_harness_push(h, make_frame(boxes, static_cast<GstClockTime>(i) * GST_SECOND / 30)), GST_FLOW_OK);
  }
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  const char* names[3] = {"red", "green", "blue"};
  for (int i = 0; i < 6; ++i) {
    GstBuffer* frame = gst_harness_pull(h);
    ASSERT_NE(frame, nullptr) << "frame " << i;
    EXPECT_EQ(GST_BUFFER_PTS(frame), static_cast<GstClockTime>(i) * GST_SECOND / 30);
    JobflowAnalyticsRelationMeta* m = jobflow_buffer_get_analytics_relation_meta(frame);
    ASSERT_NE(m, nullptr);
    for (guint id = 0; id < frames[static_cast<size_t>(i)].size(); ++id) {
      const auto classes = classes_of(m, id);
      if (std::string(frames[static_cast<size_t>(i)][id].label) == "car") {
        EXPECT_TRUE(classes.empty());
        continue;
      }
      ASSERT_EQ(classes.size(), 1u) << "frame " << i << " region " << id;
      EXPECT_EQ(classes[0].first, names[(i + static_cast<int>(id)) % 3]) << "frame " << i << " region " << id;
      // an 8x8 crop in a 16x8 input, padded with zeros: the mean is half
      EXPECT_NEAR(classes[0].second, 0.5f, 1e-3f);
    }
    gst_buffer_unref(frame);
  }
  GstEvent* e;
  bool eos = false;
  while (!eos && (e = gst_harness_pull_event(h))) {
    eos = GST_EVENT_TYPE(e) == GST_EVENT_EOS;
    gst_event_unref(e);
  }
  EXPECT_TRUE(eos);
  EXPECT_EQ(gst_harness_buffers_in_queue(h), 0u);
  // the model ran once per chunk (4 crops): frames 0, 1, 3 once, frames 4
  // and 5 (5 and 6 plates) twice, frame 2 (no plate) not at all
  GstElement* fn = gst_bin_get_by_name(GST_BIN(h->element), "fn");
  ASSERT_NE(fn, nullptr);
  guint64 steps = 0;
  g_object_get(fn, "steps", &steps, nullptr);
  EXPECT_EQ(steps, 7u);
  gst_object_unref(fn);
  gst_harness_teardown(h);
}

TEST(SecondStage, AJobWithADynamicBatchTakesTheSizeFromTheProperties) {
  const std::string labels = write_file("rgb3.txt", "red\ngreen\nblue\n");
  GstBus* bus = gst_bus_new();
  // max-batch=1: one call per jobcrop buffer (adaptive batching would merge
  // the queued ones, as many calls as the timing gives).
  GstHarness* h = gst_harness_new_parse(("jobcrop label=plate width=16 height=8 batch-size=2 ! jobfunction name=fn "
                                         "max-batch=1 job=" +
                                         channel_mean_dynamic_job() +
                                         " ! jobdecode mode=labels per-region=true softmax=false labels=" + labels)
                                            .c_str());
  gst_element_set_bus(h->element, bus);
  gst_harness_set_src_caps_str(h, kVideoCaps);
  // no plate in the first frame (its tensor primes the caps), three in the
  // second (two buffers of 2), none in the third (a GAP buffer)
  ASSERT_EQ(gst_harness_push(h, make_frame({}, 0)), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(h, make_frame({{"plate", 0, 0, 8, 8, {0, 0, 255}},
                                            {"plate", 10, 0, 8, 8, {255, 0, 0}},
                                            {"plate", 20, 0, 8, 8, {0, 255, 0}}},
                                           GST_SECOND)),
            GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(h, make_frame({}, 2 * GST_SECOND)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  std::vector<std::string> got;
  for (int i = 0; i < 3; ++i) {
    GstBuffer* frame = gst_harness_pull(h);
    ASSERT_NE(frame, nullptr) << i;
    EXPECT_EQ(GST_BUFFER_PTS(frame), static_cast<GstClockTime>(i) * GST_SECOND);
    JobflowAnalyticsRelationMeta* m = jobflow_buffer_get_analytics_relation_meta(frame);
    for (guint id = 0; m && id < 3 && i == 1; ++id) {
      const auto classes = classes_of(m, id);
      ASSERT_EQ(classes.size(), 1u) << id;
      got.push_back(classes[0].first);
    }
    gst_buffer_unref(frame);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"blue", "red", "green"}));
  guint64 steps = 0;
  GstElement* fn = gst_bin_get_by_name(GST_BIN(h->element), "fn");
  g_object_get(fn, "steps", &steps, nullptr);
  gst_object_unref(fn);
  EXPECT_EQ(steps, 3u);  // the priming tensor and the second frame's two
  EXPECT_EQ(gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR), nullptr);
  gst_harness_teardown(h);
  gst_bus_set_flushing(bus, TRUE);
  gst_object_unref(bus);
}

TEST(SecondStage, DynamicWidthRunsAJobOfAnyWidthAndResultsReachTheirRegions) {
  const std::string labels = write_file("rgb4.txt", "red\ngreen\nblue\n");
  GstBus* bus = gst_bus_new();
  GstHarness* h = gst_harness_new_parse(("jobcrop dynamic-width=true height=8 batch-size=2 ! jobfunction name=fn "
                                         "max-batch=1 job=" +
                                         channel_mean_any_width_job() +
                                         " ! jobdecode mode=labels per-region=true softmax=false labels=" + labels)
                                            .c_str());
  gst_element_set_bus(h->element, bus);
  gst_harness_set_src_caps_str(h, kVideoCaps);
  // lines of several widths, so the tensors' widths change between calls
  const std::vector<std::vector<Box>> frames = {
      {{"line", 0, 0, 8, 8, {0, 0, 255}}, {"line", 10, 10, 40, 8, {255, 0, 0}}, {"line", 20, 30, 16, 4, {0, 255, 0}}},
      {{"line", 0, 20, 60, 8, {0, 255, 0}}},
      {{"line", 0, 0, 8, 8, {255, 0, 0}}, {"line", 30, 30, 8, 8, {0, 0, 255}}}};
  for (size_t i = 0; i < frames.size(); ++i)
    ASSERT_EQ(gst_harness_push(h, make_frame(frames[i], static_cast<GstClockTime>(i) * GST_SECOND)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  const char* want[3][3] = {{"blue", "red", "green"}, {"green"}, {"red", "blue"}};
  for (size_t i = 0; i < frames.size(); ++i) {
    GstBuffer* frame = gst_harness_pull(h);
    ASSERT_NE(frame, nullptr) << i;
    EXPECT_EQ(GST_BUFFER_PTS(frame), static_cast<GstClockTime>(i) * GST_SECOND);
    JobflowAnalyticsRelationMeta* m = jobflow_buffer_get_analytics_relation_meta(frame);
    ASSERT_NE(m, nullptr);
    for (guint id = 0; id < frames[i].size(); ++id) {
      const auto classes = classes_of(m, id);
      ASSERT_EQ(classes.size(), 1u) << "frame " << i << " region " << id;
      EXPECT_EQ(classes[0].first, want[i][id]) << "frame " << i << " region " << id;
    }
    gst_buffer_unref(frame);
  }
  guint64 steps = 0;
  GstElement* fn = gst_bin_get_by_name(GST_BIN(h->element), "fn");
  g_object_get(fn, "steps", &steps, nullptr);
  gst_object_unref(fn);
  EXPECT_EQ(steps, 4u);  // frame 0 in two calls (2 + 1 crops), frames 1 and 2 in one
  EXPECT_EQ(gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR), nullptr);
  gst_harness_teardown(h);
  gst_bus_set_flushing(bus, TRUE);
  gst_object_unref(bus);
}

}  // namespace

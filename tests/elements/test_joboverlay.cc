// joboverlay element tests (GstHarness, isolated registry): the pixels at
// known box edges on RGB, BGRx and I420 frames, masks, captions.
#include <gtest/gtest.h>

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gstjoboverlay.h"
#include "jobflow_analytics.h"
#include "static_element_env.h"

namespace {

JOBFLOW_STATIC_ELEMENT_TEST_ENV(jobflow_register_joboverlay);

class JobOverlay : public ::testing::Test {
 protected:
  void TearDown() override {
    if (out_) gst_buffer_unref(out_);
    if (h_) gst_harness_teardown(h_);
  }
  // A black frame of `format` through joboverlay (configured by `props`),
  // with the regions `add` puts on it; keeps the output mapped as `frame_`.
  template <class F>
  void run(const char* format, int w, int h, const char* props, F add) {
    h_ = gst_harness_new_parse((std::string("joboverlay ") + props).c_str());
    const std::string caps = std::string("video/x-raw,format=") + format + ",width=" + std::to_string(w) +
                             ",height=" + std::to_string(h) + ",framerate=30/1";
    gst_harness_set_src_caps_str(h_, caps.c_str());
    GstCaps* c = gst_caps_from_string(caps.c_str());
    ASSERT_TRUE(gst_video_info_from_caps(&info_, c));
    gst_caps_unref(c);
    GstBuffer* b = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info_), nullptr);
    GstVideoFrame f;
    ASSERT_TRUE(gst_video_frame_map(&f, &info_, b, GST_MAP_WRITE));
    for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&f); ++p) {
      const bool chroma = GST_VIDEO_INFO_IS_YUV(&info_) && p > 0;
      const int rows = GST_VIDEO_FRAME_COMP_HEIGHT(&f, p);
      memset(GST_VIDEO_FRAME_PLANE_DATA(&f, p), chroma ? 128 : (GST_VIDEO_INFO_IS_YUV(&info_) ? 16 : 0),
             static_cast<size_t>(GST_VIDEO_FRAME_PLANE_STRIDE(&f, p)) * rows);
    }
    gst_video_frame_unmap(&f);
    add(jobflow_buffer_add_analytics_relation_meta(b));
    ASSERT_EQ(gst_harness_push(h_, b), GST_FLOW_OK);
    out_ = gst_harness_pull(h_);
    ASSERT_NE(out_, nullptr);
  }
  // R, G, B (packed RGB formats) or Y (I420) at (x, y).
  std::vector<int> pixel(int x, int y) {
    GstVideoFrame f;
    EXPECT_TRUE(gst_video_frame_map(&f, &info_, out_, GST_MAP_READ));
    const guint8* row = static_cast<const guint8*>(GST_VIDEO_FRAME_PLANE_DATA(&f, 0)) +
                        static_cast<size_t>(y) * GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0);
    std::vector<int> v;
    switch (GST_VIDEO_FRAME_FORMAT(&f)) {
      case GST_VIDEO_FORMAT_RGB: v = {row[3 * x], row[3 * x + 1], row[3 * x + 2]}; break;
      case GST_VIDEO_FORMAT_BGRx: v = {row[4 * x + 2], row[4 * x + 1], row[4 * x]}; break;
      default: v = {row[x]}; break;
    }
    gst_video_frame_unmap(&f);
    return v;
  }
  static bool near(const std::vector<int>& a, const std::vector<int>& b, int tol = 2) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::abs(a[i] - b[i]) > tol) return false;
    return true;
  }
  static std::vector<int> color(const char* label) {
    guint8 c[3];
    jobflow_overlay_label_color(label, c);
    return {c[0], c[1], c[2]};
  }
  GstHarness* h_ = nullptr;
  GstBuffer* out_ = nullptr;
  GstVideoInfo info_;
};

const std::vector<int> kBlack = {0, 0, 0};

// A car at (10, 20), 30 x 16: the outline covers columns 10-11 and 38-39,
// rows 20-21 and 34-35.
void car(JobflowAnalyticsRelationMeta* m) {
  jobflow_analytics_relation_meta_add_od_mtd(m, g_quark_from_string("car"), 10, 20, 30, 16, 0.9f, nullptr);
}

}  // namespace

TEST_F(JobOverlay, BoxEdgesOnRgb) {
  run("RGB", 64, 48, "show-labels=false show-confidence=false", car);
  const auto c = color("car");
  for (int y : {24, 28, 31}) {
    EXPECT_TRUE(near(pixel(9, y), kBlack)) << y;
    EXPECT_TRUE(near(pixel(10, y), c)) << y;
    EXPECT_TRUE(near(pixel(11, y), c)) << y;
    EXPECT_TRUE(near(pixel(12, y), kBlack)) << y;
    EXPECT_TRUE(near(pixel(37, y), kBlack)) << y;
    EXPECT_TRUE(near(pixel(38, y), c)) << y;
    EXPECT_TRUE(near(pixel(39, y), c)) << y;
    EXPECT_TRUE(near(pixel(40, y), kBlack)) << y;
  }
  for (int x : {15, 25}) {
    EXPECT_TRUE(near(pixel(x, 19), kBlack)) << x;  // no caption above: nothing to write
    EXPECT_TRUE(near(pixel(x, 20), c)) << x;
    EXPECT_TRUE(near(pixel(x, 21), c)) << x;
    EXPECT_TRUE(near(pixel(x, 22), kBlack)) << x;
    EXPECT_TRUE(near(pixel(x, 33), kBlack)) << x;
    EXPECT_TRUE(near(pixel(x, 35), c)) << x;
    EXPECT_TRUE(near(pixel(x, 36), kBlack)) << x;
  }
}

TEST_F(JobOverlay, CaptionAboveTheBoxInTheLabelsColour) {
  run("RGB", 64, 48, "font-desc=\"Sans 6\"", car);
  // the caption's background is the label's colour, just above the box's
  // top-left corner; the text on it is dark or light
  const auto c = color("car");
  EXPECT_TRUE(near(pixel(10, 19), c));
  EXPECT_TRUE(near(pixel(10, 12), c));
  int ink = 0;
  for (int x = 11; x < 30; ++x)
    for (int y = 10; y < 20; ++y) ink += !near(pixel(x, y), c, 40);
  EXPECT_GT(ink, 5) << "no text drawn on the caption";
  EXPECT_TRUE(near(pixel(62, 12), kBlack));
}

TEST_F(JobOverlay, BoxEdgesOnBgrxWithAWiderLine) {
  run("BGRx", 64, 48, "line-width=3 show-labels=false show-confidence=false", car);
  const auto c = color("car");
  EXPECT_TRUE(near(pixel(9, 28), kBlack));
  EXPECT_TRUE(near(pixel(10, 28), c));
  EXPECT_TRUE(near(pixel(12, 28), c));
  EXPECT_TRUE(near(pixel(13, 28), kBlack));
  EXPECT_TRUE(near(pixel(37, 28), c));
  EXPECT_TRUE(near(pixel(36, 28), kBlack));
}

TEST_F(JobOverlay, BoxEdgesOnI420) {
  run("I420", 64, 48, "show-labels=false show-confidence=false", car);
  // the luma plane: the outline's columns are lit, their neighbours black (16)
  EXPECT_EQ(pixel(9, 28)[0], 16);
  EXPECT_GT(pixel(10, 28)[0], 16 + 30);
  EXPECT_GT(pixel(11, 28)[0], 16 + 30);
  EXPECT_EQ(pixel(12, 28)[0], 16);
  EXPECT_GT(pixel(39, 28)[0], 16 + 30);
  EXPECT_EQ(pixel(40, 28)[0], 16);
}

TEST_F(JobOverlay, ColoursDifferPerLabel) {
  EXPECT_NE(color("car"), color("person"));
  EXPECT_EQ(color("car"), color("car"));
}

TEST_F(JobOverlay, MaskPaintsRegionsNotBackground) {
  run("RGB", 16, 16, "mask-alpha=1.0", [](JobflowAnalyticsRelationMeta* m) {
    // 2 x 2 mask: 0 1 / 1 0, over the frame's top-left 8 x 8
    GstBuffer* mask = gst_buffer_new_allocate(nullptr, 4, nullptr);
    const guint8 ids[4] = {0, 1, 1, 0};
    gst_buffer_fill(mask, 0, ids, 4);
    gsize offset[GST_VIDEO_MAX_PLANES] = {0};
    gint stride[GST_VIDEO_MAX_PLANES] = {2};  // packed rows
    gst_buffer_add_video_meta_full(mask, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_FORMAT_GRAY8, 2, 2, 1, offset, stride);
    guint present[2] = {0, 1};
    jobflow_analytics_relation_meta_add_segmentation_mtd(m, mask, JOBFLOW_SEGMENTATION_TYPE_SEMANTIC, 2, present, 0,
                                                         0, 8, 8, nullptr);
    gst_buffer_unref(mask);
  });
  const auto c = color("1");
  EXPECT_TRUE(near(pixel(1, 1), kBlack));
  EXPECT_TRUE(near(pixel(5, 1), c));
  EXPECT_TRUE(near(pixel(1, 5), c));
  EXPECT_TRUE(near(pixel(5, 5), kBlack));
  EXPECT_TRUE(near(pixel(12, 12), kBlack));  // outside the mask's rectangle
}

TEST_F(JobOverlay, FramesWithoutResultsPassUnchanged) {
  run("RGB", 16, 16, "", [](JobflowAnalyticsRelationMeta*) {});
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) ASSERT_TRUE(near(pixel(x, y), kBlack, 0));
}

namespace {

// A plate at (20, 40), 60 x 16, that a recogniser read as "AB-123" (a
// TextMtd it CONTAINs), its track 7, and a text of the whole frame.
void plate_with_texts(JobflowAnalyticsRelationMeta* m) {
  JobflowAnalyticsODMtd od;
  jobflow_analytics_relation_meta_add_od_mtd(m, g_quark_from_string("plate"), 20, 40, 60, 16, 0.9f, &od);
  JobflowAnalyticsTextMtd text;
  jobflow_analytics_relation_meta_add_text_mtd(m, "AB-123", 0.8f, &text);
  jobflow_analytics_relation_meta_set_parent(m, text.id, od.id);
  JobflowAnalyticsTrackingMtd track;
  jobflow_analytics_relation_meta_add_tracking_mtd(m, 7, 0, &track);
  jobflow_analytics_relation_meta_set_relation(m, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO, od.id, track.id);
  jobflow_analytics_relation_meta_add_text_mtd(m, "CAM 1", 1.0f, nullptr);
}

}  // namespace

// The text read in a region goes below it, the frame's own text at the top
// left, the track id in the caption above the box; each can be turned off.
TEST_F(JobOverlay, TextsAndTrackIdsAreWritten) {
  run("RGB", 128, 96, "show-labels=false show-confidence=false font-desc=\"Sans 8\"", plate_with_texts);
  auto ink = [&](int x0, int y0, int x1, int y1) {
    int n = 0;
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) n += !near(pixel(x, y), kBlack, 40);
    return n;
  };
  EXPECT_GT(ink(20, 57, 100, 80), 10) << "no text below the plate";
  EXPECT_GT(ink(0, 0, 60, 14), 10) << "no frame text at the top left";
  EXPECT_GT(ink(20, 26, 60, 39), 10) << "no caption (#7) above the plate";
  EXPECT_EQ(ink(90, 0, 128, 30), 0) << "ink away from every text";
}

TEST_F(JobOverlay, ShowTextAndShowTrackIdsOffWriteNeither) {
  run("RGB", 128, 96, "show-labels=false show-confidence=false show-text=false show-track-ids=false",
      plate_with_texts);
  int n = 0;
  for (int y = 0; y < 96; ++y)
    for (int x = 0; x < 128; ++x) {
      const bool outline = y >= 40 && y < 56 && x >= 20 && x < 80;
      if (!outline) n += !near(pixel(x, y), kBlack, 0);
    }
  EXPECT_EQ(n, 0) << "pixels written outside the plate's box";
}

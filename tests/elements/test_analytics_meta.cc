// The analytics metas of libjobflow-gst (jobflow_analytics.h,
// jobflow_frame_meta.h): entries, relations, copies, the video scale
// transform, and the JSON form.
#include <gtest/gtest.h>

#include <gst/gst.h>
#include <gst/video/video.h>

#include <cmath>
#include <string>

#include "jobflow_analytics.h"
#include "jobflow_frame_meta.h"

namespace {

class GstEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    gst_init(nullptr, nullptr);
    g_log_set_always_fatal(static_cast<GLogLevelFlags>(G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING));
  }
};
const auto* const env = ::testing::AddGlobalTestEnvironment(new GstEnv);

std::string json_of(GstBuffer* b) {
  gchar* t = jobflow_analytics_relation_meta_to_json(jobflow_buffer_get_analytics_relation_meta(b));
  std::string s(t);
  g_free(t);
  return s;
}

}  // namespace

TEST(AnalyticsMeta, RegionsWithAttributesAndRelations) {
  GstBuffer* buf = gst_buffer_new();
  EXPECT_EQ(jobflow_buffer_get_analytics_relation_meta(buf), nullptr);
  JobflowAnalyticsRelationMeta* m = jobflow_buffer_add_analytics_relation_meta(buf);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(jobflow_buffer_get_or_add_analytics_relation_meta(buf), m);

  JobflowAnalyticsODMtd car, plate;
  ASSERT_TRUE(jobflow_analytics_relation_meta_add_od_mtd(m, g_quark_from_string("car"), 10, 20, 100, 50, 0.9f, &car));
  ASSERT_TRUE(jobflow_analytics_relation_meta_add_oriented_od_mtd(m, g_quark_from_string("plate"), 40, 50, 30, 10,
                                                                  0.5f, 0.8f, &plate));
  JobflowAnalyticsTrackingMtd trk;
  ASSERT_TRUE(jobflow_analytics_relation_meta_add_tracking_mtd(m, 7, 1000, &trk));
  EXPECT_TRUE(jobflow_analytics_tracking_mtd_update_last_seen(&trk, 5000));
  JobflowAnalyticsTextMtd txt;
  ASSERT_TRUE(jobflow_analytics_relation_meta_add_text_mtd(m, "AB-123", 0.75f, &txt));
  float levels[2] = {0.6f, 0.3f};
  GQuark classes[2] = {g_quark_from_string("red"), g_quark_from_string("blue")};
  JobflowAnalyticsClsMtd color;
  ASSERT_TRUE(jobflow_analytics_relation_meta_add_cls_mtd(m, 2, levels, classes, &color));
  EXPECT_EQ(jobflow_analytics_relation_get_length(m), 5u);
  EXPECT_EQ(car.id, 0u);
  EXPECT_EQ(color.id, 4u);

  EXPECT_TRUE(jobflow_analytics_relation_meta_set_relation(m, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO, car.id, trk.id));
  EXPECT_TRUE(jobflow_analytics_relation_meta_set_relation(m, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO, car.id, color.id));
  EXPECT_TRUE(jobflow_analytics_relation_meta_set_relation(m, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO, plate.id, txt.id));
  EXPECT_TRUE(jobflow_analytics_relation_meta_set_parent(m, plate.id, car.id));
  EXPECT_FALSE(jobflow_analytics_relation_meta_set_relation(m, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO, car.id, 99));
  EXPECT_FALSE(jobflow_analytics_relation_meta_set_relation(m, JOBFLOW_ANALYTICS_REL_TYPE_ANY, car.id, trk.id));
  EXPECT_EQ(jobflow_analytics_relation_meta_get_relation(m, plate.id, car.id), JOBFLOW_ANALYTICS_REL_TYPE_IS_PART_OF);
  EXPECT_EQ(jobflow_analytics_relation_meta_get_relation(m, car.id, plate.id), JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN);
  EXPECT_EQ(jobflow_analytics_relation_meta_get_relation(m, trk.id, car.id), JOBFLOW_ANALYTICS_REL_TYPE_NONE);

  // reading back
  gint x, y, w, h;
  gfloat conf, r;
  EXPECT_TRUE(jobflow_analytics_od_mtd_get_location(&car, &x, &y, &w, &h, &conf));
  EXPECT_EQ(x, 10);
  EXPECT_EQ(w, 100);
  EXPECT_FLOAT_EQ(conf, 0.9f);
  EXPECT_STREQ(g_quark_to_string(jobflow_analytics_od_mtd_get_obj_type(&plate)), "plate");
  EXPECT_TRUE(jobflow_analytics_od_mtd_get_oriented_location(&plate, &x, &y, &w, &h, &r, &conf));
  EXPECT_FLOAT_EQ(r, 0.5f);
  // the rotated plate's axis-aligned box: centre (55, 55), half extents 15cos + 5sin, 15sin + 5cos
  EXPECT_TRUE(jobflow_analytics_od_mtd_get_location(&plate, &x, &y, &w, &h, nullptr));
  EXPECT_EQ(x, static_cast<gint>(std::floor(55 - (15 * std::cos(0.5) + 5 * std::sin(0.5)))));
  EXPECT_EQ(y, static_cast<gint>(std::floor(55 - (15 * std::sin(0.5) + 5 * std::cos(0.5)))));
  EXPECT_FALSE(jobflow_analytics_od_mtd_get_location(&trk, &x, &y, &w, &h, nullptr));  // not a region
  guint64 id;
  GstClockTime first, last;
  gboolean lost = TRUE;
  EXPECT_TRUE(jobflow_analytics_tracking_mtd_get_info(&trk, &id, &first, &last, &lost));
  EXPECT_EQ(id, 7u);
  EXPECT_EQ(first, 1000u);
  EXPECT_EQ(last, 5000u);
  EXPECT_FALSE(lost);
  EXPECT_STREQ(jobflow_analytics_text_mtd_get_text(&txt), "AB-123");
  EXPECT_EQ(jobflow_analytics_text_mtd_get_length(&txt), 6u);
  EXPECT_EQ(jobflow_analytics_cls_mtd_get_length(&color), 2u);
  EXPECT_EQ(jobflow_analytics_cls_mtd_get_index_by_quark(&color, classes[1]), 1);
  EXPECT_EQ(jobflow_analytics_cls_mtd_get_index_by_quark(&color, g_quark_from_string("green")), -1);
  EXPECT_FLOAT_EQ(jobflow_analytics_cls_mtd_get_level(&color, 0), 0.6f);
  EXPECT_STREQ(jobflow_analytics_mtd_type_get_name(jobflow_analytics_mtd_get_mtd_type(&trk)), "object-tracking");

  // iterating: by type, in the order added
  gpointer state = nullptr;
  JobflowAnalyticsMtd it;
  std::string seen;
  while (jobflow_analytics_relation_meta_iterate(m, &state, jobflow_analytics_od_mtd_get_mtd_type(), &it))
    seen += std::to_string(it.id) + ",";
  EXPECT_EQ(seen, "0,1,");
  state = nullptr;
  size_t all = 0;
  while (jobflow_analytics_relation_meta_iterate(m, &state, JOBFLOW_ANALYTICS_MTD_TYPE_ANY, &it)) ++all;
  EXPECT_EQ(all, 5u);
  // the car's track
  state = nullptr;
  ASSERT_TRUE(jobflow_analytics_relation_meta_get_direct_related(
      m, car.id, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO, jobflow_analytics_tracking_mtd_get_mtd_type(), &state, &it));
  EXPECT_EQ(it.id, trk.id);
  EXPECT_FALSE(jobflow_analytics_relation_meta_get_direct_related(
      m, car.id, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO, jobflow_analytics_tracking_mtd_get_mtd_type(), &state, &it));
  // the plate's text through the car: car CONTAIN plate RELATE_TO text
  GArray* path = nullptr;
  EXPECT_TRUE(jobflow_analytics_relation_meta_exist(
      m, car.id, txt.id, JOBFLOW_INF_RELATION_SPAN,
      static_cast<JobflowAnalyticsRelTypes>(JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN | JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO),
      &path));
  ASSERT_NE(path, nullptr);
  ASSERT_EQ(path->len, 3u);
  EXPECT_EQ(g_array_index(path, guint, 1), plate.id);
  g_array_unref(path);
  EXPECT_FALSE(jobflow_analytics_relation_meta_exist(m, car.id, txt.id, 1, JOBFLOW_ANALYTICS_REL_TYPE_ANY, nullptr));
  EXPECT_FALSE(jobflow_analytics_relation_meta_exist(m, txt.id, car.id, -1, JOBFLOW_ANALYTICS_REL_TYPE_ANY, nullptr));

  EXPECT_EQ(json_of(buf),
            "{\"regions\":["
            "{\"id\":0,\"label\":\"car\",\"confidence\":0.9,\"x\":10,\"y\":20,\"w\":100,\"h\":50,"
            "\"track\":{\"id\":7,\"first-seen\":1000,\"last-seen\":5000,\"lost\":false},"
            "\"classes\":[{\"label\":\"red\",\"confidence\":0.6},{\"label\":\"blue\",\"confidence\":0.3}],"
            "\"children\":[1]},"
            "{\"id\":1,\"label\":\"plate\",\"confidence\":0.8,\"x\":40,\"y\":50,\"w\":30,\"h\":10,\"rotation\":0.5,"
            "\"text\":\"AB-123\",\"text-confidence\":0.75,\"parent\":0}]}");

  // a copy (e.g. gst_buffer_make_writable) has the same entries, independent of the original
  GstBuffer* copy = gst_buffer_copy(buf);
  JobflowAnalyticsRelationMeta* cm = jobflow_buffer_get_analytics_relation_meta(copy);
  ASSERT_NE(cm, nullptr);
  EXPECT_NE(cm, m);
  EXPECT_EQ(json_of(copy), json_of(buf));
  jobflow_analytics_relation_meta_add_text_mtd(cm, "only in the copy", 1.f, nullptr);
  EXPECT_EQ(jobflow_analytics_relation_get_length(m), 5u);
  EXPECT_NE(json_of(copy).find("\"texts\":[{\"id\":5,\"text\":\"only in the copy\",\"confidence\":1}]"),
            std::string::npos)
      << json_of(copy);
  gst_buffer_unref(copy);
  gst_buffer_unref(buf);
}

TEST(AnalyticsMeta, EmptyAndLooseResultsInJson) {
  gchar* empty = jobflow_analytics_relation_meta_to_json(nullptr);
  EXPECT_STREQ(empty, "{\"regions\":[]}");
  g_free(empty);
  GstBuffer* buf = gst_buffer_new();
  JobflowAnalyticsRelationMeta* m = jobflow_buffer_add_analytics_relation_meta(buf);
  jobflow_analytics_relation_meta_add_one_cls_mtd(m, 0.25f, g_quark_from_string("indoor"), nullptr);
  GstBuffer* mask = gst_buffer_new_allocate(nullptr, 4 * 2, nullptr);
  gst_buffer_memset(mask, 0, 1, 8);
  gst_buffer_add_video_meta(mask, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_FORMAT_GRAY8, 4, 2);
  guint ids[2] = {0, 1};
  JobflowAnalyticsSegmentationMtd seg;
  ASSERT_TRUE(jobflow_analytics_relation_meta_add_segmentation_mtd(m, mask, JOBFLOW_SEGMENTATION_TYPE_SEMANTIC, 2, ids,
                                                                   -5, 0, 40, 20, &seg));
  gst_buffer_unref(mask);  // the meta holds its own reference
  gint mx, my;
  guint mw, mh;
  GstBuffer* got = jobflow_analytics_segmentation_mtd_get_mask(&seg, &mx, &my, &mw, &mh);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(gst_buffer_get_size(got), 8u);
  EXPECT_EQ(mx, -5);
  EXPECT_EQ(mw, 40u);
  gst_buffer_unref(got);
  gsize index = 9;
  EXPECT_TRUE(jobflow_analytics_segmentation_mtd_get_region_index(&seg, &index, 1));
  EXPECT_EQ(index, 1u);
  EXPECT_EQ(jobflow_analytics_segmentation_mtd_get_region_count(&seg), 2u);
  EXPECT_EQ(json_of(buf),
            "{\"regions\":[],\"classes\":[{\"id\":0,\"classes\":[{\"label\":\"indoor\",\"confidence\":0.25}]}],"
            "\"masks\":[{\"id\":1,\"type\":\"semantic\",\"x\":-5,\"y\":0,\"w\":40,\"h\":20,\"width\":4,\"height\":2,"
            "\"region-ids\":[0,1]}]}");
  gst_buffer_unref(buf);
}

TEST(AnalyticsMeta, VideoScaleTransformScalesTheBoxes) {
  GstBuffer* in = gst_buffer_new();
  JobflowAnalyticsRelationMeta* m = jobflow_buffer_add_analytics_relation_meta(in);
  jobflow_analytics_relation_meta_add_od_mtd(m, g_quark_from_string("ball"), 10, 20, 30, 40, 1.f, nullptr);
  GstVideoInfo a, b;
  gst_video_info_set_format(&a, GST_VIDEO_FORMAT_RGB, 320, 240);
  gst_video_info_set_format(&b, GST_VIDEO_FORMAT_RGB, 640, 120);
  GstVideoMetaTransform t = {&a, &b};
  GstBuffer* out = gst_buffer_new();
  const GstMetaInfo* info = jobflow_analytics_relation_meta_get_info();
  ASSERT_TRUE(info->transform_func(out, reinterpret_cast<GstMeta*>(m), in, gst_video_meta_transform_scale_get_quark(),
                                   &t));
  JobflowAnalyticsRelationMeta* om = jobflow_buffer_get_analytics_relation_meta(out);
  ASSERT_NE(om, nullptr);
  JobflowAnalyticsODMtd od;
  ASSERT_TRUE(jobflow_analytics_relation_meta_get_od_mtd(om, 0, &od));
  gint x, y, w, h;
  jobflow_analytics_od_mtd_get_location(&od, &x, &y, &w, &h, nullptr);
  EXPECT_EQ(x, 20);
  EXPECT_EQ(y, 10);
  EXPECT_EQ(w, 60);
  EXPECT_EQ(h, 20);
  gst_buffer_unref(out);
  gst_buffer_unref(in);
}

TEST(AnalyticsMeta, RegionsMessage) {
  GstBuffer* buf = gst_buffer_new();
  GST_BUFFER_PTS(buf) = 2 * GST_SECOND;
  JobflowAnalyticsRelationMeta* m = jobflow_buffer_add_analytics_relation_meta(buf);
  jobflow_analytics_relation_meta_add_od_mtd(m, g_quark_from_string("ball"), 1, 2, 3, 4, 0.5f, nullptr);
  GstSegment seg;
  gst_segment_init(&seg, GST_FORMAT_TIME);
  seg.base = GST_SECOND;
  GstMessage* msg = jobflow_analytics_regions_message_new(nullptr, buf, &seg);
  const GstStructure* s = gst_message_get_structure(msg);
  EXPECT_TRUE(gst_structure_has_name(s, JOBFLOW_REGIONS_MESSAGE_NAME));
  guint64 ts = 0, rt = 0;
  EXPECT_TRUE(gst_structure_get_uint64(s, "timestamp", &ts));
  EXPECT_TRUE(gst_structure_get_uint64(s, "running-time", &rt));
  EXPECT_EQ(ts, 2 * GST_SECOND);
  EXPECT_EQ(rt, 3 * GST_SECOND);
  EXPECT_STREQ(gst_structure_get_string(s, "json"),
               "{\"regions\":[{\"id\":0,\"label\":\"ball\",\"confidence\":0.5,\"x\":1,\"y\":2,\"w\":3,\"h\":4}]}");
  gst_message_unref(msg);
  gst_buffer_unref(buf);
}

TEST(FrameMeta, CarriesTheFrameAndMapsBack) {
  GstBuffer* frame = gst_buffer_new_allocate(nullptr, 320 * 240 * 3, nullptr);
  GstCaps* caps = gst_caps_from_string("video/x-raw,format=RGB,width=320,height=240,framerate=30/1");
  GstBuffer* tensor = gst_buffer_new();
  // 320x240 letterboxed into 320x320: scale 1, 40 rows of padding on top
  JobflowFrameMeta* fm = jobflow_buffer_add_frame_meta(tensor, frame, caps, 320, 320, 1.0, 1.0, 0.0, 40.0);
  ASSERT_NE(fm, nullptr);
  EXPECT_EQ(fm->frame_width, 320);
  EXPECT_EQ(fm->frame_height, 240);
  gst_buffer_unref(frame);  // the meta keeps it
  gst_caps_unref(caps);
  GstBuffer* copy = gst_buffer_copy(tensor);
  JobflowFrameMeta* cm = jobflow_buffer_get_frame_meta(copy);
  ASSERT_NE(cm, nullptr);
  EXPECT_EQ(cm->frame, fm->frame);
  double x = 100, y = 140;
  jobflow_frame_meta_to_frame(cm, &x, &y);
  EXPECT_DOUBLE_EQ(x, 100);
  EXPECT_DOUBLE_EQ(y, 100);
  gst_buffer_unref(copy);
  gst_buffer_unref(tensor);
}

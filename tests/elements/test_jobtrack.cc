// jobtrack element tests (GstHarness, isolated registry): track ids on
// synthetic regions, through a missed detection and crossing objects, the
// line counter and its messages, errors.
#include <gtest/gtest.h>

#include <gst/check/gstharness.h>
#include <gst/gst.h>

#include <string>
#include <vector>

#include "gstjobtrack.h"
#include "gstjobmux.h"
#include "jobflow_analytics.h"
#include "jobmux_meta.h"
#include "static_element_env.h"

namespace {

JOBFLOW_STATIC_ELEMENT_TEST_ENV(jobflow_register_jobtrack);

struct Region {
  int cx, cy, size;
  const char* label = "ball";
};

class JobTrack : public ::testing::Test {
 protected:
  void SetUp() override { bus_ = gst_bus_new(); }
  void TearDown() override {
    if (h_) gst_harness_teardown(h_);
    gst_bus_set_flushing(bus_, TRUE);
    gst_object_unref(bus_);
  }
  void start(const char* props = "") {
    GstElement* e = gst_element_factory_make("jobtrack", nullptr);
    ASSERT_NE(e, nullptr);
    gst_util_set_object_arg(G_OBJECT(e), "min-hits", "1");
    if (*props) {
      gchar** kv = g_strsplit(props, " ", -1);
      for (gchar** p = kv; *p; ++p) {
        gchar** pair = g_strsplit(*p, "=", 2);
        gst_util_set_object_arg(G_OBJECT(e), pair[0], pair[1]);
        g_strfreev(pair);
      }
      g_strfreev(kv);
    }
    gst_element_set_bus(e, bus_);
    h_ = gst_harness_new_with_element(e, "sink", "src");
    element_ = e;
    gst_object_unref(e);
    gst_harness_set_src_caps_str(h_, "video/x-raw,format=RGB,width=320,height=240,framerate=30/1");
  }
  // A buffer with these regions (none: no meta at all) at `pts`.
  static GstBuffer* with_regions(const std::vector<Region>& regions, GstClockTime pts) {
    GstBuffer* b = gst_buffer_new();
    GST_BUFFER_PTS(b) = pts;
    if (!regions.empty()) {
      JobflowAnalyticsRelationMeta* m = jobflow_buffer_add_analytics_relation_meta(b);
      for (const Region& r : regions)
        jobflow_analytics_relation_meta_add_od_mtd(m, g_quark_from_string(r.label), r.cx - r.size / 2,
                                                   r.cy - r.size / 2, r.size, r.size, 0.9f, nullptr);
    }
    return b;
  }
  // The track id of each region of `b` (0 = none); keeps the first
  // region's first-seen/last-seen.
  std::vector<guint64> ids_of(GstBuffer* b) {
    std::vector<guint64> ids;
    JobflowAnalyticsRelationMeta* m = jobflow_buffer_get_analytics_relation_meta(b);
    gpointer state = nullptr;
    JobflowAnalyticsODMtd od;
    while (m && jobflow_analytics_relation_meta_iterate(m, &state, jobflow_analytics_od_mtd_get_mtd_type(), &od)) {
      gpointer s2 = nullptr;
      JobflowAnalyticsTrackingMtd trk;
      guint64 id = 0;
      if (jobflow_analytics_relation_meta_get_direct_related(m, od.id, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO,
                                                             jobflow_analytics_tracking_mtd_get_mtd_type(), &s2,
                                                             &trk)) {
        GstClockTime first, last;
        jobflow_analytics_tracking_mtd_get_info(&trk, &id, &first, &last, nullptr);
        if (ids.empty()) {
          first_seen_ = first;
          last_seen_ = last;
        }
      }
      ids.push_back(id);
    }
    return ids;
  }
  // One frame with these regions; returns the track id of each region in
  // the output (0 = none).
  std::vector<guint64> frame(const std::vector<Region>& regions) {
    EXPECT_EQ(gst_harness_push(h_, with_regions(regions, pts_)), GST_FLOW_OK);
    pts_ += GST_SECOND / 30;
    GstBuffer* out = gst_harness_pull(h_);
    std::vector<guint64> ids = ids_of(out);
    gst_buffer_unref(out);
    return ids;
  }
  // A jobmux batch: per slot its source and its frame's regions (the frame
  // at pts = the slot's source x 1 s + the batch's index / 30 s, as
  // jobdecode leaves them on a batch); returns each slot's track ids.
  std::vector<std::vector<guint64>> batch(const std::vector<std::pair<guint, std::vector<Region>>>& slots) {
    GstBuffer* b = gst_buffer_new();
    JobflowMuxMeta* mm = jobflow_buffer_add_mux_meta(b, static_cast<guint>(slots.size()));
    mm->valid = static_cast<guint>(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
      GstBuffer* f = with_regions(slots[i].second, slots[i].first * GST_SECOND + batches_ * (GST_SECOND / 30));
      jobflow_mux_meta_set_slot(mm, static_cast<guint>(i), slots[i].first, f, nullptr, nullptr);
      gst_buffer_unref(f);
    }
    ++batches_;
    EXPECT_EQ(gst_harness_push(h_, b), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(h_);
    const JobflowMuxMeta* om = jobflow_buffer_get_mux_meta(out);
    EXPECT_EQ(jobflow_buffer_get_analytics_relation_meta(out), nullptr);
    std::vector<std::vector<guint64>> ids;
    for (guint i = 0; om && i < om->valid; ++i) ids.push_back(ids_of(om->frames[i]));
    gst_buffer_unref(out);
    return ids;
  }
  // The element messages of that name posted so far.
  std::vector<GstMessage*> messages(const char* name) {
    std::vector<GstMessage*> out;
    while (GstMessage* m = gst_bus_pop_filtered(bus_, GST_MESSAGE_ELEMENT)) {
      if (gst_structure_has_name(gst_message_get_structure(m), name))
        out.push_back(m);
      else
        gst_message_unref(m);
    }
    return out;
  }
  GstHarness* h_ = nullptr;
  GstElement* element_ = nullptr;
  GstBus* bus_ = nullptr;
  GstClockTime pts_ = 0;
  guint64 batches_ = 0;
  GstClockTime first_seen_ = GST_CLOCK_TIME_NONE, last_seen_ = GST_CLOCK_TIME_NONE;
};

using Ids = std::vector<guint64>;

}  // namespace

TEST_F(JobTrack, IdStableThroughAMissedDetection) {
  start("max-age=5");
  for (int f = 0; f < 12; ++f) {
    const int x = 40 + 8 * f;
    if (f == 5) {
      EXPECT_EQ(frame({}), Ids{});  // the detector missed it
      continue;
    }
    EXPECT_EQ(frame({{x, 100, 30}}), Ids{1}) << "frame " << f;
    EXPECT_EQ(first_seen_, 0u);
    EXPECT_EQ(last_seen_, static_cast<GstClockTime>(f) * (GST_SECOND / 30));
  }
}

TEST_F(JobTrack, CrossingObjectsKeepTheirIds) {
  start("iou-threshold=0.1");
  Ids first;
  for (int f = 0; f <= 20; ++f) {
    // A moves right, B moves left; they overlap around frame 10
    const Ids got = frame({{10 + 10 * f, 100, 30}, {210 - 10 * f, 112, 30}});
    if (f == 0) first = got;
    EXPECT_EQ(got, first) << "frame " << f;
  }
  EXPECT_EQ(first, (Ids{1, 2}));
}

TEST_F(JobTrack, NewTracksWaitForMinHits) {
  start("min-hits=3");
  // the first min-hits frames confirm at once (SORT's warm-up) ...
  for (int f = 0; f < 3; ++f) EXPECT_EQ(frame({{50, 50, 20}}), Ids{1});
  // ... later objects need three frames in a row
  EXPECT_EQ(frame({{50, 50, 20}, {200, 150, 20, "car"}}), (Ids{1, 0}));
  EXPECT_EQ(frame({{50, 50, 20}, {200, 150, 20, "car"}}), (Ids{1, 0}));
  EXPECT_EQ(frame({{50, 50, 20}, {200, 150, 20, "car"}}), (Ids{1, 2}));
}

TEST_F(JobTrack, CountsLineCrossings) {
  start("line=160,0,160,240");
  // right across the vertical line: "in" (negative to positive side) ...
  for (int x = 100; x <= 220; x += 10) frame({{x, 120, 40}});
  // ... and back left: "out"
  for (int x = 220; x >= 100; x -= 10) frame({{x, 120, 40}});
  // a move that passes the line's extension below its end does not count
  for (int x = 100; x <= 220; x += 10) frame({{x, 300, 40, "other"}});
  std::vector<GstMessage*> m = messages(JOBFLOW_LINE_CROSSING_MESSAGE_NAME);
  ASSERT_EQ(m.size(), 2u);
  const GstStructure* s = gst_message_get_structure(m[0]);
  EXPECT_STREQ(gst_structure_get_string(s, "direction"), "in");
  EXPECT_STREQ(gst_structure_get_string(s, "label"), "ball");
  guint64 id = 0, in = 0, out = 9, ts = 0;
  EXPECT_TRUE(gst_structure_get_uint64(s, "track-id", &id));
  EXPECT_TRUE(gst_structure_get_uint64(s, "count-in", &in));
  EXPECT_TRUE(gst_structure_get_uint64(s, "count-out", &out));
  EXPECT_TRUE(gst_structure_get_uint64(s, "timestamp", &ts));
  EXPECT_EQ(id, 1u);
  EXPECT_EQ(in, 1u);
  EXPECT_EQ(out, 0u);
  EXPECT_EQ(ts, 6 * (GST_SECOND / 30));  // the centre reaches x = 160 in the seventh frame
  s = gst_message_get_structure(m[1]);
  EXPECT_STREQ(gst_structure_get_string(s, "direction"), "out");
  for (GstMessage* msg : m) gst_message_unref(msg);
  guint64 count_in = 0, count_out = 0;
  g_object_get(element_, "count-in", &count_in, "count-out", &count_out, nullptr);
  EXPECT_EQ(count_in, 1u);
  EXPECT_EQ(count_out, 1u);
}

TEST_F(JobTrack, RegionsMessageCarriesTheTracks) {
  start("message=true");
  frame({{50, 60, 20}});
  std::vector<GstMessage*> m = messages(JOBFLOW_REGIONS_MESSAGE_NAME);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_STREQ(gst_structure_get_string(gst_message_get_structure(m[0]), "json"),
               "{\"regions\":[{\"id\":0,\"label\":\"ball\",\"confidence\":0.9,\"x\":40,\"y\":50,\"w\":20,\"h\":20,"
               "\"track\":{\"id\":1,\"first-seen\":0,\"last-seen\":0,\"lost\":false}}]}");
  for (GstMessage* msg : m) gst_message_unref(msg);
}

TEST_F(JobTrack, InvalidLineNamesTheProperty) {
  GstElement* e = gst_element_factory_make("jobtrack", nullptr);
  g_object_set(e, "line", "1,2,3", nullptr);
  gst_element_set_bus(e, bus_);
  EXPECT_EQ(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  GstMessage* m = gst_bus_pop_filtered(bus_, GST_MESSAGE_ERROR);
  ASSERT_NE(m, nullptr);
  GError* err = nullptr;
  gst_message_parse_error(m, &err, nullptr);
  EXPECT_TRUE(g_error_matches(err, GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS));
  EXPECT_STREQ(err->message, "Invalid value for property 'line': \"1,2,3\"");
  g_error_free(err);
  gst_message_unref(m);
  gst_element_set_state(e, GST_STATE_NULL);
  gst_object_unref(e);
}

TEST_F(JobTrack, FlushForgetsTheTracks) {
  start();
  EXPECT_EQ(frame({{50, 50, 20}}), Ids{1});
  gst_harness_push_event(h_, gst_event_new_flush_start());
  gst_harness_push_event(h_, gst_event_new_flush_stop(TRUE));
  GstSegment seg;
  gst_segment_init(&seg, GST_FORMAT_TIME);
  gst_harness_push_event(h_, gst_event_new_segment(&seg));
  EXPECT_EQ(frame({{50, 50, 20}}), Ids{1});  // ids count from 1 again
}

// jobmux ! jobfunction ! jobdecode ! jobtrack: the regions of a batch are
// on its slots' frames, and each source has its own tracks. Two sources
// show the same scene mirrored: balls that cross the same place at the
// same time, one per source; one tracker for both would see two balls
// meeting and could swap them, here each keeps id 1 of its own source.
TEST_F(JobTrack, OnAJobmuxBatchEachSourceHasItsOwnTracks) {
  start("line=100,0,100,240 message=true");
  using Slots = std::vector<std::pair<guint, std::vector<Region>>>;
  for (int f = 0; f <= 8; ++f) {
    const auto got = batch(Slots{{3, {{60 + 10 * f, 100, 30}}}, {7, {{140 - 10 * f, 100, 30}}}});
    EXPECT_EQ(got, (std::vector<Ids>{{1}, {1}})) << "batch " << f;
  }
  EXPECT_EQ(first_seen_, 7 * GST_SECOND);  // source 7's frame of the first batch (its slot was read last)
  std::vector<GstMessage*> crossings, regions;
  while (GstMessage* m = gst_bus_pop_filtered(bus_, GST_MESSAGE_ELEMENT))
    (gst_structure_has_name(gst_message_get_structure(m), JOBFLOW_LINE_CROSSING_MESSAGE_NAME) ? crossings : regions)
        .push_back(m);
  // one crossing per source, each saying which, in its own direction: source
  // 3's centre reaches x = 100 in batch 4, source 7's passes it in batch 5
  ASSERT_EQ(crossings.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const GstStructure* s = gst_message_get_structure(crossings[i]);
    guint source = 0;
    guint64 ts = 0;
    EXPECT_TRUE(gst_structure_get_uint(s, "source", &source));
    EXPECT_TRUE(gst_structure_get_uint64(s, "timestamp", &ts));
    EXPECT_EQ(source, i == 0 ? 3u : 7u);
    EXPECT_STREQ(gst_structure_get_string(s, "direction"), i == 0 ? "in" : "out");
    EXPECT_EQ(ts, source * GST_SECOND + (i == 0 ? 4 : 5) * (GST_SECOND / 30));
  }
  // a regions message per frame, with its source
  ASSERT_EQ(regions.size(), 18u);
  for (size_t i = 0; i < regions.size(); ++i) {
    const GstStructure* s = gst_message_get_structure(regions[i]);
    guint source = 0;
    EXPECT_TRUE(gst_structure_has_name(s, JOBFLOW_REGIONS_MESSAGE_NAME));
    EXPECT_TRUE(gst_structure_get_uint(s, "source", &source));
    EXPECT_EQ(source, i % 2 == 0 ? 3u : 7u) << "message " << i;
  }
  for (GstMessage* msg : crossings) gst_message_unref(msg);
  for (GstMessage* msg : regions) gst_message_unref(msg);
}

// A source that leaves jobmux (its jobflow-mux-source-eos event) ends its
// tracks; the others keep theirs, and the source starts afresh when it
// comes back.
TEST_F(JobTrack, ASourceThatLeftJobmuxStartsAfreshWhenItComesBack) {
  start();
  using Slots = std::vector<std::pair<guint, std::vector<Region>>>;
  const Region a{50, 50, 20}, b{200, 150, 20};
  EXPECT_EQ(batch(Slots{{0, {a, b}}, {1, {b}}}), (std::vector<Ids>{{1, 2}, {1}}));
  EXPECT_EQ(batch(Slots{{0, {a, b}}, {1, {b}}}), (std::vector<Ids>{{1, 2}, {1}}));
  ASSERT_TRUE(gst_harness_push_event(
      h_, gst_event_new_custom(GST_EVENT_CUSTOM_DOWNSTREAM,
                               gst_structure_new(JOBFLOW_MUX_SOURCE_EOS_EVENT, "source", G_TYPE_UINT, 0u,
                                                 "released", G_TYPE_BOOLEAN, FALSE, nullptr))));
  EXPECT_EQ(batch(Slots{{1, {b}}}), (std::vector<Ids>{{1}}));
  // source 0 again: its second ball is a new track (id 1), not track 2
  EXPECT_EQ(batch(Slots{{1, {b}}, {0, {b}}}), (std::vector<Ids>{{1}, {1}}));
}

// After jobdemux a frame carries a one-slot JobflowMuxMeta: jobtrack there
// tracks it as its source's, and says the source in its messages.
TEST_F(JobTrack, AFrameAfterJobdemuxIsItsSourcesFrame) {
  start("message=true");
  GstBuffer* b = with_regions({{50, 60, 20}}, 0);
  JobflowMuxMeta* mm = jobflow_buffer_add_mux_meta(b, 1);
  mm->valid = 1;
  jobflow_mux_meta_set_slot(mm, 0, 4, nullptr, nullptr, nullptr);
  ASSERT_EQ(gst_harness_push(h_, b), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h_);
  EXPECT_EQ(ids_of(out), Ids{1});
  gst_buffer_unref(out);
  std::vector<GstMessage*> m = messages(JOBFLOW_REGIONS_MESSAGE_NAME);
  ASSERT_EQ(m.size(), 1u);
  guint source = 0;
  EXPECT_TRUE(gst_structure_get_uint(gst_message_get_structure(m[0]), "source", &source));
  EXPECT_EQ(source, 4u);
  for (GstMessage* msg : m) gst_message_unref(msg);
}

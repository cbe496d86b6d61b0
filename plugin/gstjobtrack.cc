/* jobtrack: see gstjobtrack.h and docs/elements.md. The tracking itself is
 * plain C++ (track/sort.cc); here: the metas, the line counter, the
 * properties and messages. */
#include "gstjobtrack.h"

#include "element_util.h"
#include "gstjobmux.h"
#include "jobflow_analytics.h"
#include "jobmux_meta.h"
#include "track/sort.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <map>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobtrack_debug);
#define GST_CAT_DEFAULT jobtrack_debug

namespace {

namespace trk = jobflow::track;

constexpr guint kDefaultMaxAge = 30;
constexpr guint kDefaultMinHits = 3;
constexpr double kDefaultIouThreshold = 0.3;

struct Line {
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  /* > 0 on one side, < 0 on the other (see docs: "in" is - to +) */
  double side(double x, double y) const { return (y2 - y1) * (x - x1) - (x2 - x1) * (y - y1); }
};

/* "x1,y1,x2,y2" -> Line; false when malformed or of zero length. */
bool parse_line(const std::string& text, Line* out) {
  gchar** parts = g_strsplit(text.c_str(), ",", -1);
  double v[4];
  bool ok = g_strv_length(parts) == 4;
  for (guint i = 0; ok && i < 4; ++i) {
    gchar* end = nullptr;
    gchar* s = g_strstrip(parts[i]);
    v[i] = g_ascii_strtod(s, &end);
    ok = end != s && *end == '\0' && std::isfinite(v[i]);
  }
  g_strfreev(parts);
  if (!ok || (v[0] == v[2] && v[1] == v[3])) return false;
  *out = Line{v[0], v[1], v[2], v[3]};
  return true;
}

struct Settings {
  guint max_age = kDefaultMaxAge;
  guint min_hits = kDefaultMinHits;
  double iou_threshold = kDefaultIouThreshold;
  bool per_label = true;
  std::string line;  // "" = no counting
  bool message = false;
};

/* What jobtrack remembers of a confirmed track. */
struct Seen {
  GstClockTime first = GST_CLOCK_TIME_NONE;
  double cx = 0, cy = 0;  // the centre where it was last matched
  bool placed = false;
};

/* One stream's tracks. Streaming thread only (and start/stop). */
struct State {
  trk::Sort sort;
  std::map<uint64_t, Seen> seen;  // by track id
};

/* The key of frames that did not come through jobmux (jobmux_meta.h's "no source"). */
constexpr guint kNoSource = G_MAXUINT;

struct Impl {
  jobflow::gst::Locked<Settings> settings;
  std::atomic<guint64> count_in{0}, count_out{0};
  std::map<guint, State> streams;  // by jobmux source (kNoSource: one stream)
};

GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE("sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS_ANY);
GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE("src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS_ANY);

enum { PROP_0, PROP_MAX_AGE, PROP_MIN_HITS, PROP_IOU_THRESHOLD, PROP_PER_LABEL, PROP_LINE, PROP_MESSAGE,
       PROP_COUNT_IN, PROP_COUNT_OUT };

}  // namespace

struct _GstJobTrack {
  GstBaseTransform parent;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobTrack, gst_job_track, GST_TYPE_BASE_TRANSFORM)

namespace {

bool check_line(GstJobTrack* self, const Settings& cfg, Line* line) {
  if (cfg.line.empty() || parse_line(cfg.line, line)) return true;
  GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("Invalid value for property 'line': \"%s\"", cfg.line.c_str()),
                    ("expected \"x1,y1,x2,y2\" in frame pixels, two different points"));
  return false;
}

/* Whether the move p -> q crosses the line segment; *in: from its negative
 * side to its positive side. */
bool crosses(const Line& l, double px, double py, double qx, double qy, bool* in) {
  const double sp = l.side(px, py), sq = l.side(qx, qy);
  if ((sp < 0) == (sq < 0)) return false;
  /* the segment's ends on both sides of the move (or on it) */
  const double ta = (qx - px) * (l.y1 - py) - (qy - py) * (l.x1 - px);
  const double tb = (qx - px) * (l.y2 - py) - (qy - py) * (l.x2 - px);
  if (ta * tb > 0) return false;
  *in = sp < 0;
  return true;
}

/* Tracks the regions of one frame (`meta` may be NULL: no regions) with
 * the tracks of its stream; the crossing messages go to `messages`. */
void track_frame(GstJobTrack* self, const Settings& cfg, const Line& line, State& st,
                 JobflowAnalyticsRelationMeta* meta, GstClockTime pts, const GstSegment& segment, guint source,
                 std::vector<GstMessage*>* messages) {
  st.sort.set_params({static_cast<int>(cfg.max_age), static_cast<int>(cfg.min_hits),
                      static_cast<float>(cfg.iou_threshold), cfg.per_label});
  std::vector<trk::Detection> dets;
  std::vector<JobflowAnalyticsODMtd> ods;
  if (meta) {
    gpointer state = nullptr;
    JobflowAnalyticsODMtd od;
    while (jobflow_analytics_relation_meta_iterate(meta, &state, jobflow_analytics_od_mtd_get_mtd_type(), &od)) {
      gint x, y, w, h;
      jobflow_analytics_od_mtd_get_location(&od, &x, &y, &w, &h, nullptr);
      dets.push_back({{static_cast<float>(x), static_cast<float>(y), static_cast<float>(x + w),
                       static_cast<float>(y + h)},
                      static_cast<int>(jobflow_analytics_od_mtd_get_obj_type(&od))});
      ods.push_back(od);
    }
  }
  const std::vector<size_t> idx = st.sort.update(dets);
  for (size_t i = 0; i < dets.size(); ++i) {
    const trk::Track& t = st.sort.tracks()[idx[i]];
    if (!t.confirmed) continue;
    Seen& s = st.seen[t.id];
    if (!GST_CLOCK_TIME_IS_VALID(s.first)) s.first = pts;
    JobflowAnalyticsTrackingMtd tm;
    jobflow_analytics_relation_meta_add_tracking_mtd(meta, t.id, s.first, &tm);
    jobflow_analytics_tracking_mtd_update_last_seen(&tm, pts);
    jobflow_analytics_relation_meta_set_relation(meta, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO, ods[i].id, tm.id);
    const double cx = (dets[i].rect.x1 + dets[i].rect.x2) / 2.0, cy = (dets[i].rect.y1 + dets[i].rect.y2) / 2.0;
    bool in = false;
    if (!cfg.line.empty() && s.placed && crosses(line, s.cx, s.cy, cx, cy, &in)) {
      const guint64 n_in = in ? ++self->impl->count_in : self->impl->count_in.load();
      const guint64 n_out = in ? self->impl->count_out.load() : ++self->impl->count_out;
      const bool timed = segment.format == GST_FORMAT_TIME && GST_CLOCK_TIME_IS_VALID(pts);
      const GstClockTime running = timed ? gst_segment_to_running_time(&segment, GST_FORMAT_TIME, pts)
                                         : GST_CLOCK_TIME_NONE;
      const GQuark label = jobflow_analytics_od_mtd_get_obj_type(&ods[i]);
      GST_DEBUG_OBJECT(self, "track %" G_GUINT64_FORMAT " crossed the line (%s)", t.id, in ? "in" : "out");
      GstStructure* s = gst_structure_new(
          JOBFLOW_LINE_CROSSING_MESSAGE_NAME, "track-id", G_TYPE_UINT64, t.id, "label", G_TYPE_STRING,
          label ? g_quark_to_string(label) : "", "direction", G_TYPE_STRING, in ? "in" : "out", "count-in",
          G_TYPE_UINT64, n_in, "count-out", G_TYPE_UINT64, n_out, "timestamp", G_TYPE_UINT64, pts, "running-time",
          G_TYPE_UINT64, running, nullptr);
      if (source != kNoSource) gst_structure_set(s, "source", G_TYPE_UINT, source, nullptr);
      messages->push_back(gst_message_new_element(GST_OBJECT(self), s));
    }
    s.cx = cx;
    s.cy = cy;
    s.placed = true;
  }
  /* forget the tracks SORT dropped */
  if (st.seen.size() > st.sort.tracks().size()) {
    std::map<uint64_t, Seen> alive;
    for (const trk::Track& t : st.sort.tracks())
      if (t.confirmed && st.seen.count(t.id)) alive[t.id] = st.seen[t.id];
    st.seen.swap(alive);
  }
}

GstFlowReturn transform_ip(GstBaseTransform* trans, GstBuffer* buf) {
  GstJobTrack* self = GST_JOB_TRACK(trans);
  return jobflow::gst::guarded(GST_ELEMENT(self), "Tracking", GST_FLOW_ERROR, [&]() -> GstFlowReturn {
    const Settings cfg = self->impl->settings.copy();
    Line line;
    if (!check_line(self, cfg, &line)) return GST_FLOW_ERROR;
    std::vector<GstMessage*> messages;
    JobflowMuxMeta* mm = jobflow_buffer_get_mux_meta(buf);
    if (mm && !jobflow_buffer_get_analytics_relation_meta(buf)) {
      /* A jobmux batch: the regions are on its slots' frames (jobdecode's
       * frame modes put them there), each source has its own tracks. The
       * batch is writable (in place), so its meta is; a frame shared with
       * another buffer is copied (memory shared) before the tracks go on. */
      for (guint i = 0; i < std::min(mm->valid, mm->batch_size); ++i) {
        if (!mm->frames[i]) continue;
        mm->frames[i] = gst_buffer_make_writable(mm->frames[i]);
        GstBuffer* frame = mm->frames[i];
        const guint source = mm->source_id[i];
        track_frame(self, cfg, line, self->impl->streams[source], jobflow_buffer_get_analytics_relation_meta(frame),
                    GST_BUFFER_PTS(frame), mm->segments[i], source, &messages);
        if (cfg.message)
          messages.push_back(jobflow_mux_regions_message_new(GST_OBJECT(self), frame, &mm->segments[i], source));
      }
    } else {
      /* One frame (after jobdemux: of the source its one-slot meta names) */
      const guint source = mm ? mm->source_id[0] : kNoSource;
      track_frame(self, cfg, line, self->impl->streams[source], jobflow_buffer_get_analytics_relation_meta(buf),
                  GST_BUFFER_PTS(buf), trans->segment, source, &messages);
      if (cfg.message)
        messages.push_back(jobflow_mux_regions_message_new(GST_OBJECT(self), buf, &trans->segment, source));
    }
    for (GstMessage* m : messages) gst_element_post_message(GST_ELEMENT(self), m);
    return GST_FLOW_OK;
  });
}

void reset(GstJobTrack* self) { self->impl->streams.clear(); }

gboolean start(GstBaseTransform* trans) {
  GstJobTrack* self = GST_JOB_TRACK(trans);
  reset(self);
  self->impl->count_in = 0;
  self->impl->count_out = 0;
  Line line;
  return check_line(self, self->impl->settings.copy(), &line);
}

gboolean stop(GstBaseTransform* trans) {
  reset(GST_JOB_TRACK(trans));
  return TRUE;
}

gboolean sink_event(GstBaseTransform* trans, GstEvent* event) {
  if (GST_EVENT_TYPE(event) == GST_EVENT_FLUSH_STOP) reset(GST_JOB_TRACK(trans));  // a seek: the motion is broken
  /* a jobmux source left: its tracks end (when it comes back, it starts afresh) */
  const GstStructure* s = gst_event_get_structure(event);
  guint source;
  if (GST_EVENT_TYPE(event) == GST_EVENT_CUSTOM_DOWNSTREAM && s && gst_structure_has_name(s, JOBFLOW_MUX_SOURCE_EOS_EVENT) &&
      gst_structure_get_uint(s, "source", &source))
    GST_JOB_TRACK(trans)->impl->streams.erase(source);
  return GST_BASE_TRANSFORM_CLASS(gst_job_track_parent_class)->sink_event(trans, event);
}

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_TRACK(object)->impl->settings.with([&](Settings& s) {
    switch (prop_id) {
      case PROP_MAX_AGE: s.max_age = g_value_get_uint(value); break;
      case PROP_MIN_HITS: s.min_hits = g_value_get_uint(value); break;
      case PROP_IOU_THRESHOLD: s.iou_threshold = g_value_get_double(value); break;
      case PROP_PER_LABEL: s.per_label = g_value_get_boolean(value); break;
      case PROP_LINE: {
        const gchar* v = g_value_get_string(value);
        s.line = v ? v : "";
        Line l;
        if (!s.line.empty() && !parse_line(s.line, &l))
          GST_WARNING_OBJECT(object, "line=\"%s\" is not \"x1,y1,x2,y2\": the element will refuse to run", v);
        break;
      }
      case PROP_MESSAGE: s.message = g_value_get_boolean(value); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GstJobTrack* self = GST_JOB_TRACK(object);
  if (prop_id == PROP_COUNT_IN) return g_value_set_uint64(value, self->impl->count_in.load());
  if (prop_id == PROP_COUNT_OUT) return g_value_set_uint64(value, self->impl->count_out.load());
  self->impl->settings.with([&](const Settings& s) {
    switch (prop_id) {
      case PROP_MAX_AGE: g_value_set_uint(value, s.max_age); break;
      case PROP_MIN_HITS: g_value_set_uint(value, s.min_hits); break;
      case PROP_IOU_THRESHOLD: g_value_set_double(value, s.iou_threshold); break;
      case PROP_PER_LABEL: g_value_set_boolean(value, s.per_label); break;
      case PROP_LINE: g_value_set_string(value, s.line.empty() ? nullptr : s.line.c_str()); break;
      case PROP_MESSAGE: g_value_set_boolean(value, s.message); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

}  // namespace

static void gst_job_track_class_init(GstJobTrackClass* klass) {
  GObjectClass* gobject_class = jobflow::gst::init_object_class<GstJobTrack>(klass, set_property, get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass* transform_class = GST_BASE_TRANSFORM_CLASS(klass);
  transform_class->transform_ip = transform_ip;
  transform_class->start = start;
  transform_class->stop = stop;
  transform_class->sink_event = sink_event;

  const auto playing =
      static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING);
  const auto readonly = static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  auto install = [&](guint id, GParamSpec* spec) { g_object_class_install_property(gobject_class, id, spec); };
  install(PROP_MAX_AGE, g_param_spec_uint("max-age", "Maximum age",
                                          "Frames a track lives on without a detection (its id comes back if the "
                                          "object is found again within them)",
                                          0, G_MAXINT, kDefaultMaxAge, playing));
  install(PROP_MIN_HITS, g_param_spec_uint("min-hits", "Minimum hits",
                                           "Consecutive frames a new track must be detected in before it gets an id",
                                           1, G_MAXINT, kDefaultMinHits, playing));
  install(PROP_IOU_THRESHOLD,
          g_param_spec_double("iou-threshold", "IoU threshold",
                              "Least overlap (IoU) of a region with a track's predicted box to continue it", 0.0,
                              1.0, kDefaultIouThreshold, playing));
  install(PROP_PER_LABEL, g_param_spec_boolean("per-label", "Per label",
                                               "Regions only continue tracks of their own label", TRUE, playing));
  install(PROP_LINE, g_param_spec_string("line", "Line",
                                         "Count the tracks whose centre crosses the segment \"x1,y1,x2,y2\" (frame "
                                         "pixels); unset: no counting",
                                         nullptr, playing));
  install(PROP_MESSAGE, g_param_spec_boolean("message", "Message",
                                             "Post a \"" JOBFLOW_REGIONS_MESSAGE_NAME
                                             "\" message (the regions with their tracks as JSON) per frame "
                                             "(each frame of a jobmux batch)",
                                             FALSE, playing));
  install(PROP_COUNT_IN, g_param_spec_uint64("count-in", "Count in",
                                             "Tracks that crossed the line from its negative to its positive side",
                                             0, G_MAXUINT64, 0, readonly));
  install(PROP_COUNT_OUT, g_param_spec_uint64("count-out", "Count out",
                                              "Tracks that crossed the line from its positive to its negative side",
                                              0, G_MAXUINT64, 0, readonly));

  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  gst_element_class_set_static_metadata(element_class, "Jobflow object tracker", "Filter/Analyzer/Video",
                                        "Gives the regions on frames stable track ids (SORT: IoU and a Kalman "
                                        "motion model) and counts line crossings",
                                        "Jobflow");
}

static void gst_job_track_init(GstJobTrack* self) {
  self->impl = new Impl();
  gst_base_transform_set_in_place(GST_BASE_TRANSFORM(self), TRUE);
}

gboolean jobflow_register_jobtrack(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobtrack_debug, "jobtrack", 0, "Jobflow object tracker");
  return gst_element_register(plugin, "jobtrack", GST_RANK_NONE, GST_TYPE_JOB_TRACK);
}

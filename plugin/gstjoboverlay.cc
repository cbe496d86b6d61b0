/* joboverlay: see gstjoboverlay.h and docs/elements.md. */
#include "gstjoboverlay.h"

#include "element_util.h"
#include "jobflow_analytics.h"

#include <cairo.h>
#include <gst/video/video.h>
#include <pango/pangocairo.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(joboverlay_debug);
#define GST_CAT_DEFAULT joboverlay_debug

namespace {

constexpr guint kDefaultLineWidth = 2;
constexpr const char* kDefaultFont = "Sans 10";
constexpr double kDefaultMaskAlpha = 0.5;

struct Settings {
  guint line_width = kDefaultLineWidth;
  std::string font = kDefaultFont;
  bool show_labels = true;
  bool show_confidence = true;
  bool show_track_ids = true;
  bool show_text = true;
  bool show_masks = true;
  double mask_alpha = kDefaultMaskAlpha;
};

struct Impl {
  jobflow::gst::Locked<Settings> settings;
};

#define OVERLAY_FORMATS "{ RGB, BGR, BGRx, RGBx, BGRA, RGBA, I420, NV12 }"
GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE("sink", GST_PAD_SINK, GST_PAD_ALWAYS,
                                                             GST_STATIC_CAPS(GST_VIDEO_CAPS_MAKE(OVERLAY_FORMATS)));
GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE("src", GST_PAD_SRC, GST_PAD_ALWAYS,
                                                            GST_STATIC_CAPS(GST_VIDEO_CAPS_MAKE(OVERLAY_FORMATS)));

enum { PROP_0, PROP_LINE_WIDTH, PROP_FONT_DESC, PROP_SHOW_LABELS, PROP_SHOW_CONFIDENCE, PROP_SHOW_TRACK_IDS,
       PROP_SHOW_TEXT, PROP_SHOW_MASKS, PROP_MASK_ALPHA };

struct Rgb {
  double r, g, b;
};

Rgb color_of(const char* label) {
  guint8 c[3];
  jobflow_overlay_label_color(label, c);
  return {c[0] / 255.0, c[1] / 255.0, c[2] / 255.0};
}

}  // namespace

struct _GstJobOverlay {
  GstVideoFilter parent;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobOverlay, gst_job_overlay, GST_TYPE_VIDEO_FILTER)

extern "C" void jobflow_overlay_label_color(const gchar* label, guint8 rgb[3]) {
  /* FNV-1a of the text -> a hue; saturated, bright */
  guint32 h = 2166136261u;
  for (const guchar* p = reinterpret_cast<const guchar*>(label ? label : ""); *p; ++p) h = (h ^ *p) * 16777619u;
  const double hue = (h % 360u) / 60.0, s = 0.85, v = 0.95;
  const int i = static_cast<int>(hue);
  const double f = hue - i, p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  double r, g, b;
  switch (i) {
    case 0: r = v, g = t, b = p; break;
    case 1: r = q, g = v, b = p; break;
    case 2: r = p, g = v, b = t; break;
    case 3: r = p, g = q, b = v; break;
    case 4: r = t, g = p, b = v; break;
    default: r = v, g = p, b = q; break;
  }
  rgb[0] = static_cast<guint8>(std::lround(r * 255));
  rgb[1] = static_cast<guint8>(std::lround(g * 255));
  rgb[2] = static_cast<guint8>(std::lround(b * 255));
}

namespace {

/* A mask (SegmentationMtd) painted over its frame rectangle, each region
 * id in its colour (the id's text as the label), background (id 0 of a
 * semantic mask) left clear. */
void draw_mask(cairo_t* cr, const JobflowAnalyticsSegmentationMtd* seg, double alpha) {
  gint px, py;
  guint pw, ph;
  GstBuffer* mask = jobflow_analytics_segmentation_mtd_get_mask(seg, &px, &py, &pw, &ph);
  if (!mask) return;
  GstVideoMeta* vm = gst_buffer_get_video_meta(mask);
  GstMapInfo map;
  if (!vm || pw == 0 || ph == 0 || !gst_buffer_map(mask, &map, GST_MAP_READ)) {
    gst_buffer_unref(mask);
    return;
  }
  const bool semantic =
      jobflow_analytics_segmentation_mtd_get_segmentation_type(seg) == JOBFLOW_SEGMENTATION_TYPE_SEMANTIC;
  const int mw = static_cast<int>(vm->width), mh = static_cast<int>(vm->height);
  cairo_surface_t* s = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, mw, mh);
  unsigned char* dst = cairo_image_surface_get_data(s);
  const int dst_stride = cairo_image_surface_get_stride(s);
  guint32 lut[256];
  for (int id = 0; id < 256; ++id) {
    if (semantic && id == 0) {
      lut[id] = 0;
      continue;
    }
    guint8 c[3];
    jobflow_overlay_label_color(std::to_string(id).c_str(), c);
    const guint32 a = static_cast<guint32>(std::lround(alpha * 255));
    lut[id] = (a << 24) | ((c[0] * a / 255) << 16) | ((c[1] * a / 255) << 8) | (c[2] * a / 255);  // premultiplied
  }
  cairo_surface_flush(s);
  for (int y = 0; y < mh; ++y) {
    const guint8* row = map.data + vm->offset[0] + static_cast<size_t>(y) * vm->stride[0];
    auto* out = reinterpret_cast<guint32*>(dst + static_cast<size_t>(y) * dst_stride);
    for (int x = 0; x < mw; ++x) out[x] = lut[row[x]];
  }
  cairo_surface_mark_dirty(s);
  gst_buffer_unmap(mask, &map);
  gst_buffer_unref(mask);
  cairo_save(cr);
  cairo_translate(cr, px, py);
  cairo_scale(cr, static_cast<double>(pw) / mw, static_cast<double>(ph) / mh);
  cairo_set_source_surface(cr, s, 0, 0);
  cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
  cairo_paint(cr);
  cairo_restore(cr);
  cairo_surface_destroy(s);
}

/* A caption box at (x, y) (its top-left), text in black or white. */
void draw_caption(cairo_t* cr, PangoLayout* layout, const std::string& text, const Rgb& c, double x, double y,
                  bool above, int frame_w, int frame_h) {
  pango_layout_set_text(layout, text.c_str(), -1);
  int tw, th;
  pango_layout_get_pixel_size(layout, &tw, &th);
  const double pad = 2;
  double top = above ? y - th - 2 * pad : y;
  if (top < 0) top = above ? y : 0;  // no room above: inside the box
  if (top + th + 2 * pad > frame_h) top = frame_h - th - 2 * pad;
  if (x + tw + 2 * pad > frame_w) x = std::max(0.0, frame_w - tw - 2 * pad);  // keep it in the frame
  cairo_set_source_rgb(cr, c.r, c.g, c.b);
  cairo_rectangle(cr, x, top, tw + 2 * pad, th + 2 * pad);
  cairo_fill(cr);
  const double lum = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b;
  const double ink = lum > 0.55 ? 0.0 : 1.0;
  cairo_set_source_rgb(cr, ink, ink, ink);
  cairo_move_to(cr, x + pad, top + pad);
  pango_cairo_show_layout(cr, layout);
}

/* Draws every result of `meta` into `cr` (a transparent frame-sized layer). */
void draw(cairo_t* cr, JobflowAnalyticsRelationMeta* meta, const Settings& cfg, int frame_w, int frame_h) {
  if (cfg.show_masks) {
    gpointer state = nullptr;
    JobflowAnalyticsSegmentationMtd seg;
    while (jobflow_analytics_relation_meta_iterate(meta, &state, jobflow_analytics_segmentation_mtd_get_mtd_type(),
                                                   &seg))
      draw_mask(cr, &seg, cfg.mask_alpha);
  }
  PangoLayout* layout = pango_cairo_create_layout(cr);
  PangoFontDescription* font = pango_font_description_from_string(cfg.font.c_str());
  pango_layout_set_font_description(layout, font);
  pango_font_description_free(font);
  const double lw = cfg.line_width;
  struct Caption {
    std::string text;
    Rgb color;
    double x, y;
    bool above;
  };
  std::vector<Caption> captions;
  gpointer state = nullptr;
  JobflowAnalyticsODMtd od;
  while (jobflow_analytics_relation_meta_iterate(meta, &state, jobflow_analytics_od_mtd_get_mtd_type(), &od)) {
    gint x, y, w, h;
    gfloat r, conf;
    jobflow_analytics_od_mtd_get_oriented_location(&od, &x, &y, &w, &h, &r, &conf);
    const GQuark q = jobflow_analytics_od_mtd_get_obj_type(&od);
    const char* label = q ? g_quark_to_string(q) : "";
    const Rgb c = color_of(label);
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_set_line_width(cr, lw);
    cairo_save(cr);
    if (r == 0.f) {
      /* crisp: the stroke covers the lw pixels just inside the box */
      cairo_set_antialias(cr, CAIRO_ANTIALIAS_NONE);
      cairo_rectangle(cr, x + lw / 2, y + lw / 2, std::max(0.0, w - lw), std::max(0.0, h - lw));
    } else {
      cairo_translate(cr, x + w / 2.0, y + h / 2.0);
      cairo_rotate(cr, r);
      cairo_rectangle(cr, -w / 2.0 + lw / 2, -h / 2.0 + lw / 2, std::max(0.0, w - lw), std::max(0.0, h - lw));
    }
    cairo_stroke(cr);
    cairo_restore(cr);
    /* the caption: label, confidence, track id; the region's text below */
    std::string top;
    if (cfg.show_labels && *label) top = label;
    if (cfg.show_confidence) {
      gchar num[16];
      g_ascii_formatd(num, sizeof num, "%.2f", conf);
      if (!top.empty()) top += ' ';
      top += num;
    }
    std::string text;
    gpointer rs = nullptr;
    JobflowAnalyticsMtd rel;
    /* its attributes: RELATE_TO (tracks, ...) or CONTAIN (a second stage's results) */
    const auto attributes =
        static_cast<JobflowAnalyticsRelTypes>(JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO | JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN);
    while (jobflow_analytics_relation_meta_get_direct_related(meta, od.id, attributes,
                                                              JOBFLOW_ANALYTICS_MTD_TYPE_ANY, &rs, &rel)) {
      const JobflowAnalyticsMtdType type = jobflow_analytics_mtd_get_mtd_type(&rel);
      guint64 id;
      if (cfg.show_track_ids && type == jobflow_analytics_tracking_mtd_get_mtd_type() &&
          jobflow_analytics_tracking_mtd_get_info(&rel, &id, nullptr, nullptr, nullptr))
        top.append(top.empty() ? "#" : " #").append(std::to_string(id));
      if (cfg.show_text && type == jobflow_analytics_text_mtd_get_mtd_type())
        text.append(text.empty() ? "" : " ").append(jobflow_analytics_text_mtd_get_text(&rel));
    }
    gint bx, by, bw, bh;
    jobflow_analytics_od_mtd_get_location(&od, &bx, &by, &bw, &bh, nullptr);
    if (!top.empty()) captions.push_back({top, c, static_cast<double>(bx), static_cast<double>(by), true});
    if (!text.empty()) captions.push_back({text, c, static_cast<double>(bx), static_cast<double>(by + bh), false});
  }
  if (cfg.show_text) {  /* texts of the whole frame, top left, one under the other */
    double y = 0;
    gpointer ts = nullptr;
    JobflowAnalyticsTextMtd txt;
    while (jobflow_analytics_relation_meta_iterate(meta, &ts, jobflow_analytics_text_mtd_get_mtd_type(), &txt)) {
      bool attached = false;
      gpointer os = nullptr;
      JobflowAnalyticsODMtd o;
      while (!attached &&
             jobflow_analytics_relation_meta_iterate(meta, &os, jobflow_analytics_od_mtd_get_mtd_type(), &o))
        attached = jobflow_analytics_relation_meta_get_relation(meta, o.id, txt.id) != JOBFLOW_ANALYTICS_REL_TYPE_NONE;
      if (attached) continue;
      captions.push_back({jobflow_analytics_text_mtd_get_text(&txt), Rgb{1, 1, 1}, 0, y, false});
      y += 20;
    }
  }
  for (const Caption& c : captions) draw_caption(cr, layout, c.text, c.color, c.x, c.y, c.above, frame_w, frame_h);
  g_object_unref(layout);
}

GstFlowReturn transform_frame_ip(GstVideoFilter* filter, GstVideoFrame* frame) {
  GstJobOverlay* self = GST_JOB_OVERLAY(filter);
  JobflowAnalyticsRelationMeta* meta = jobflow_buffer_get_analytics_relation_meta(frame->buffer);
  if (!meta || jobflow_analytics_relation_get_length(meta) == 0) return GST_FLOW_OK;
  const Settings cfg = self->impl->settings.copy();
  const int w = GST_VIDEO_FRAME_WIDTH(frame), h = GST_VIDEO_FRAME_HEIGHT(frame);
  const int stride = cairo_format_stride_for_width(CAIRO_FORMAT_ARGB32, w);
  GstBuffer* layer = gst_buffer_new_allocate(nullptr, static_cast<gsize>(stride) * h, nullptr);
  GstMapInfo map;
  gst_buffer_map(layer, &map, GST_MAP_WRITE);
  std::memset(map.data, 0, map.size);
  cairo_surface_t* surface = cairo_image_surface_create_for_data(map.data, CAIRO_FORMAT_ARGB32, w, h, stride);
  cairo_t* cr = cairo_create(surface);
  draw(cr, meta, cfg, w, h);
  cairo_destroy(cr);
  cairo_surface_flush(surface);
  cairo_surface_destroy(surface);
  gst_buffer_unmap(layer, &map);
  /* cairo's ARGB32 is premultiplied, in native-endian words: the overlay
   * composition's "RGB" format (BGRA in memory on little-endian) */
  gsize offset[GST_VIDEO_MAX_PLANES] = {0};
  gint strides[GST_VIDEO_MAX_PLANES] = {stride};
  gst_buffer_add_video_meta_full(layer, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_OVERLAY_COMPOSITION_FORMAT_RGB,
                                 static_cast<guint>(w), static_cast<guint>(h), 1, offset, strides);
  GstVideoOverlayRectangle* rect = gst_video_overlay_rectangle_new_raw(
      layer, 0, 0, static_cast<guint>(w), static_cast<guint>(h), GST_VIDEO_OVERLAY_FORMAT_FLAG_PREMULTIPLIED_ALPHA);
  gst_buffer_unref(layer);
  GstVideoOverlayComposition* comp = gst_video_overlay_composition_new(rect);
  gst_video_overlay_rectangle_unref(rect);
  const gboolean ok = gst_video_overlay_composition_blend(comp, frame);
  gst_video_overlay_composition_unref(comp);
  if (!ok) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("Could not blend the drawing onto the %s frame",
                                             gst_video_format_to_string(GST_VIDEO_FRAME_FORMAT(frame))),
                      (nullptr));
    return GST_FLOW_ERROR;
  }
  return GST_FLOW_OK;
}

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_OVERLAY(object)->impl->settings.with([&](Settings& s) {
    switch (prop_id) {
      case PROP_LINE_WIDTH: s.line_width = g_value_get_uint(value); break;
      case PROP_FONT_DESC: {
        const gchar* v = g_value_get_string(value);
        s.font = v && *v ? v : kDefaultFont;
        break;
      }
      case PROP_SHOW_LABELS: s.show_labels = g_value_get_boolean(value); break;
      case PROP_SHOW_CONFIDENCE: s.show_confidence = g_value_get_boolean(value); break;
      case PROP_SHOW_TRACK_IDS: s.show_track_ids = g_value_get_boolean(value); break;
      case PROP_SHOW_TEXT: s.show_text = g_value_get_boolean(value); break;
      case PROP_SHOW_MASKS: s.show_masks = g_value_get_boolean(value); break;
      case PROP_MASK_ALPHA: s.mask_alpha = g_value_get_double(value); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GST_JOB_OVERLAY(object)->impl->settings.with([&](const Settings& s) {
    switch (prop_id) {
      case PROP_LINE_WIDTH: g_value_set_uint(value, s.line_width); break;
      case PROP_FONT_DESC: g_value_set_string(value, s.font.c_str()); break;
      case PROP_SHOW_LABELS: g_value_set_boolean(value, s.show_labels); break;
      case PROP_SHOW_CONFIDENCE: g_value_set_boolean(value, s.show_confidence); break;
      case PROP_SHOW_TRACK_IDS: g_value_set_boolean(value, s.show_track_ids); break;
      case PROP_SHOW_TEXT: g_value_set_boolean(value, s.show_text); break;
      case PROP_SHOW_MASKS: g_value_set_boolean(value, s.show_masks); break;
      case PROP_MASK_ALPHA: g_value_set_double(value, s.mask_alpha); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

}  // namespace

static void gst_job_overlay_class_init(GstJobOverlayClass* klass) {
  GObjectClass* gobject_class = jobflow::gst::init_object_class<GstJobOverlay>(klass, set_property, get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  GST_VIDEO_FILTER_CLASS(klass)->transform_frame_ip = transform_frame_ip;

  const auto playing =
      static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING);
  auto install = [&](guint id, GParamSpec* spec) { g_object_class_install_property(gobject_class, id, spec); };
  install(PROP_LINE_WIDTH, g_param_spec_uint("line-width", "Line width",
                                             "Width of the box outlines in pixels, drawn inside the box", 1, 100,
                                             kDefaultLineWidth, playing));
  install(PROP_FONT_DESC, g_param_spec_string("font-desc", "Font description",
                                              "Pango font of the captions (as textoverlay's font-desc)", kDefaultFont,
                                              playing));
  install(PROP_SHOW_LABELS, g_param_spec_boolean("show-labels", "Show labels", "Write each region's label above it",
                                                 TRUE, playing));
  install(PROP_SHOW_CONFIDENCE, g_param_spec_boolean("show-confidence", "Show confidence",
                                                     "Write each region's confidence after its label", TRUE, playing));
  install(PROP_SHOW_TRACK_IDS, g_param_spec_boolean("show-track-ids", "Show track ids",
                                                    "Write each region's track id (#N) after its label", TRUE,
                                                    playing));
  install(PROP_SHOW_TEXT, g_param_spec_boolean("show-text", "Show text",
                                               "Write the texts read in regions below them (and the frame's texts at "
                                               "the top left)",
                                               TRUE, playing));
  install(PROP_SHOW_MASKS, g_param_spec_boolean("show-masks", "Show masks", "Paint the masks, one colour per region id",
                                                TRUE, playing));
  install(PROP_MASK_ALPHA, g_param_spec_double("mask-alpha", "Mask alpha", "Opacity of the painted masks", 0.0, 1.0,
                                               kDefaultMaskAlpha, playing));

  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  gst_element_class_set_static_metadata(element_class, "Jobflow analytics overlay", "Filter/Editor/Video",
                                        "Draws the regions, labels, track ids, texts and masks on the frames",
                                        "Jobflow");
}

static void gst_job_overlay_init(GstJobOverlay* self) { self->impl = new Impl(); }

gboolean jobflow_register_joboverlay(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(joboverlay_debug, "joboverlay", 0, "Jobflow analytics overlay");
  return gst_element_register(plugin, "joboverlay", GST_RANK_NONE, GST_TYPE_JOB_OVERLAY);
}

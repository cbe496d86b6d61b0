/* jobcrop: see gstjobcrop.h and docs/elements.md#jobcrop.
 *
 * A plain GstElement with a chain function (one frame in, one or more
 * tensor buffers out), not a GstBaseTransform. It works synchronously on
 * the upstream thread and pushes each tensor at once: the one queue is the
 * next jobfunction's (bounded by its max-in-flight), so no frame waits here
 * and nothing queues without bound. The model's input comes from
 * downstream's caps when the video caps arrive (jobfunction answers with
 * its placeholder); the crops are fitted with GStreamer's video converter
 * (bilinear, the same as jobconvert's scaling) into a scratch image of the
 * model's size and then normalised into their slot. QoS events from
 * downstream set the earliest running time worth processing; a frame later
 * than that by more than max-lateness is dropped (a QoS message says so). */
#include "gstjobcrop.h"

#include "element_util.h"
#include "jobflow_analytics.h"
#include "jobflow_crop_meta.h"
#include "jobflow_meta.h"
#include "tensor_caps.h"

#include <gst/video/video.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobcrop_debug);
#define GST_CAT_DEFAULT jobcrop_debug

namespace {

using jobflow::DType;
using jobflow::Shape;
using jobflow::TensorSpec;

enum Layout { kNCHW = 0, kNHWC = 1 };
enum Resize { kPadRight = 0, kLetterbox = 1, kStretch = 2 };

constexpr guint kDefaultInterval = 1;
constexpr gint64 kDefaultMaxLateness = 20 * GST_MSECOND;  // as GstVideoSink's
/* dynamic-width: widths are rounded up to a multiple of this, so that the
 * lines of a video share a few shapes (the job compiles a plan per shape) */
constexpr int kDynamicWidthStep = 32;

struct Settings {
  std::string label;  // "" = every region
  guint interval = kDefaultInterval;
  guint min_width = 0, min_height = 0;
  guint width = 0, height = 0, batch_size = 0;  // 0 = downstream's
  Layout layout = kNCHW;
  Resize resize = kPadRight;
  guint pad_value = 0;
  double scale = 0.0;  // 0 = 1/255
  std::string mean, std_dev;
  bool qos = true;
  gint64 max_lateness = kDefaultMaxLateness;
  bool deskew = true;
  bool dynamic_width = false;
};

/* Built when the video caps arrive; streaming thread only. */
struct State {
  bool configured = false;
  GstVideoInfo vinfo{};
  GstCaps* caps = nullptr;  // the frames' caps (the crop meta's)
  int pixel_stride = 1;     // bytes per pixel of the frames
  int model_w = 0, model_h = 0, channels = 0, batch = 0;
  bool dynamic_width = false;
  int least_w = 0;  // dynamic-width: the narrowest width a buffer gets
  DType dtype = DType::Float32;
  Layout layout = kNCHW;
  Resize resize = kPadRight;
  guint pad_value = 0;
  std::vector<float> lut;  // float32: channels * 256 values
  GstVideoInfo scratch_info{};
  GstBuffer* scratch = nullptr;  // one crop fitted, in the frames' format
  size_t slot_bytes = 0;
  guint64 frames = 0;  // since start / the last flush (interval)
  bool primed = false; // a tensor went out under these caps (see process())
  GstSegment segment{};
};

void clear_state(State* st) {
  gst_clear_caps(&st->caps);
  gst_clear_buffer(&st->scratch);
  *st = State{};
  gst_segment_init(&st->segment, GST_FORMAT_UNDEFINED);
}

struct Impl {
  Impl() { gst_segment_init(&state.segment, GST_FORMAT_UNDEFINED); }
  ~Impl() { clear_state(&state); }
  jobflow::gst::Locked<Settings> settings;
  State state;
  /* QoS: set by downstream's events (any thread), read per frame. */
  std::mutex qos_mu;
  GstClockTime earliest = GST_CLOCK_TIME_NONE;
  double proportion = 1.0;
  guint64 processed = 0, dropped = 0;  // streaming thread
};

GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS,
    GST_STATIC_CAPS("video/x-raw, format=(string){ RGB, BGR, RGBx, BGRx, RGBA, BGRA, GRAY8 }, "
                    "width=(int)[1, MAX], height=(int)[1, MAX], framerate=(fraction)[0/1, MAX]"));

GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS("other/tensors, format=(string)static, num_tensors=(int)1, framerate=(fraction)[0/1, MAX]"));

enum {
  PROP_0,
  PROP_LABEL,
  PROP_INTERVAL,
  PROP_MIN_WIDTH,
  PROP_MIN_HEIGHT,
  PROP_WIDTH,
  PROP_HEIGHT,
  PROP_BATCH_SIZE,
  PROP_LAYOUT,
  PROP_RESIZE,
  PROP_PAD_VALUE,
  PROP_SCALE,
  PROP_MEAN,
  PROP_STD,
  PROP_QOS,
  PROP_MAX_LATENESS,
  PROP_DESKEW,
  PROP_DYNAMIC_WIDTH,
};

GType layout_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {{kNCHW, "Channels first: (B, C, H, W)", "nchw"},
                                      {kNHWC, "Channels last: (B, H, W, C)", "nhwc"},
                                      {0, nullptr, nullptr}};
  return jobflow::gst::enum_type(&type, "GstJobCropLayout", values);
}

GType resize_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {
      {kPadRight, "Keep the aspect ratio, scale to fill the height (or the width), top-left, pad right and bottom",
       "pad-right"},
      {kLetterbox, "Keep the aspect ratio, centre the crop, pad around it", "letterbox"},
      {kStretch, "Scale to the model's width x height, ignoring the aspect ratio", "stretch"},
      {0, nullptr, nullptr}};
  return jobflow::gst::enum_type(&type, "GstJobCropResize", values);
}

/* "0.5, 0.25,0.1" -> {0.5, 0.25, 0.1}; "" -> {}. */
bool parse_doubles(const std::string& text, std::vector<double>* out) {
  out->clear();
  if (text.find_first_not_of(" \t") == std::string::npos) return true;
  gchar** parts = g_strsplit(text.c_str(), ",", -1);
  bool ok = true;
  for (gchar** p = parts; *p && ok; ++p) {
    gchar* s = g_strstrip(*p);
    gchar* end = nullptr;
    const double v = g_ascii_strtod(s, &end);
    ok = end != s && *end == '\0' && std::isfinite(v);
    out->push_back(v);
  }
  g_strfreev(parts);
  return ok;
}

}  // namespace

struct _GstJobCrop {
  GstElement parent;
  GstPad* sinkpad;
  GstPad* srcpad;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobCrop, gst_job_crop, GST_TYPE_ELEMENT)

namespace {

/* ------------------------------------------------------------ caps */

/* The model's input: the properties where set, else downstream's caps —
 * their first fixed format=static structure with dimensions (jobfunction
 * offers its placeholders so, then format=flexible), one rank-4 tensor.
 * Posts CORE/NEGOTIATION naming what is missing. */
bool model_input(GstJobCrop* self, const Settings& cfg, State* st) {
  GstCaps* peer = gst_pad_peer_query_caps(self->srcpad, nullptr);
  std::vector<TensorSpec> specs;
  std::string error;
  bool fixed = false;
  for (guint i = 0; peer && !fixed && i < gst_caps_get_size(peer); ++i) {
    const GstStructure* s = gst_caps_get_structure(peer, i);
    if (!gst_structure_has_field(s, "dimensions") || g_strcmp0(gst_structure_get_string(s, "format"), "static") != 0)
      continue;
    GstCaps* one = gst_caps_new_full(gst_structure_copy(s), nullptr);
    fixed = gst_caps_is_fixed(one) && jobflow::gst::specs_from_caps(one, &specs, &error, {4});
    gst_caps_unref(one);
  }
  gchar* peer_text = peer ? gst_caps_to_string(peer) : g_strdup("none");
  if (peer) gst_caps_unref(peer);
  int b = 0, c = 0, h = 0, w = 0;
  st->dtype = DType::Float32;
  if (fixed && specs.size() == 1 && specs[0].shape.size() == 4) {
    const Shape& s = specs[0].shape;
    b = static_cast<int>(s[0]);
    c = static_cast<int>(cfg.layout == kNCHW ? s[1] : s[3]);
    h = static_cast<int>(cfg.layout == kNCHW ? s[2] : s[1]);
    w = static_cast<int>(cfg.layout == kNCHW ? s[3] : s[2]);
    st->dtype = specs[0].dtype;
  } else if (fixed) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                      ("jobcrop: downstream takes %zu tensor(s) of %s, not one (batch, channels, height, width) tensor",
                       specs.size(), specs.empty() ? "nothing" : jobflow::shape_str(specs[0].shape).c_str()),
                      ("downstream caps: %s", peer_text));
    g_free(peer_text);
    return false;
  }
  if (cfg.batch_size) b = static_cast<int>(cfg.batch_size);
  if (cfg.width) w = static_cast<int>(cfg.width);
  if (cfg.height) h = static_cast<int>(cfg.height);
  if (cfg.dynamic_width && w <= 0) w = h;  // the least width: a square
  if (!c) c = std::min(st->pixel_stride, 3);
  if (b <= 0 || w <= 0 || h <= 0) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                      ("jobcrop: the model's input size is unknown: downstream's caps do not fix one (batch, channels, "
                       "height, width) tensor; set the properties width, height and batch-size"),
                      ("downstream caps: %s", peer_text));
    g_free(peer_text);
    return false;
  }
  g_free(peer_text);
  if (c > st->pixel_stride) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                      ("jobcrop: the model takes %d channels, the frames (%s) have %d", c,
                       gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(&st->vinfo)), st->pixel_stride),
                      ("convert the frames first, e.g. videoconvert ! video/x-raw,format=RGB"));
    return false;
  }
  if (st->dtype != DType::Float32 && st->dtype != DType::UInt8) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                      ("jobcrop: downstream takes %s tensors; jobcrop makes float32 or uint8",
                       jobflow::gst::dtype_to_nns(st->dtype)),
                      (nullptr));
    return false;
  }
  st->batch = b;
  st->channels = c;
  st->model_h = h;
  st->model_w = w;
  return true;
}

Shape tensor_shape(const State& st) {
  return st.layout == kNCHW ? Shape{st.batch, st.channels, st.model_h, st.model_w}
                            : Shape{st.batch, st.model_h, st.model_w, st.channels};
}

/* The model's input width `w`: the scratch image and the slot size for it,
 * and the tensor caps pushed (at configure, and with dynamic-width before a
 * buffer of another width). */
bool set_width(GstJobCrop* self, int w) {
  State& st = self->impl->state;
  st.model_w = w;
  gst_video_info_set_format(&st.scratch_info, GST_VIDEO_INFO_FORMAT(&st.vinfo), static_cast<guint>(st.model_w),
                            static_cast<guint>(st.model_h));
  GST_VIDEO_INFO_FPS_N(&st.scratch_info) = GST_VIDEO_INFO_FPS_N(&st.vinfo);  // the converter wants them equal
  GST_VIDEO_INFO_FPS_D(&st.scratch_info) = GST_VIDEO_INFO_FPS_D(&st.vinfo);
  gst_clear_buffer(&st.scratch);
  st.scratch = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&st.scratch_info), nullptr);
  const TensorSpec spec{tensor_shape(st), st.dtype};
  st.slot_bytes = jobflow::gst::spec_bytes(spec) / static_cast<size_t>(st.batch);
  GstCaps* out = jobflow::gst::caps_from_specs({spec}, GST_VIDEO_INFO_FPS_N(&st.vinfo), GST_VIDEO_INFO_FPS_D(&st.vinfo));
  GST_DEBUG_OBJECT(self, "crops go out as %" GST_PTR_FORMAT, out);
  const bool ok = gst_pad_push_event(self->srcpad, gst_event_new_caps(out));
  gst_caps_unref(out);
  if (!ok) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("jobcrop: downstream refused the crops' tensor caps"),
                      ("%s", jobflow::spec_str(spec).c_str()));
    return false;
  }
  return true;
}

/* Builds the state for the video caps and pushes the tensor caps. */
bool configure(GstJobCrop* self, GstCaps* caps) {
  State& st = self->impl->state;
  const Settings cfg = self->impl->settings.copy();
  GstSegment segment = st.segment;
  const guint64 frames = st.frames;
  clear_state(&st);
  st.segment = segment;
  st.frames = frames;
  if (!gst_video_info_from_caps(&st.vinfo, caps)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Invalid video caps"), ("%" GST_PTR_FORMAT, caps));
    return false;
  }
  st.pixel_stride = GST_VIDEO_INFO_COMP_PSTRIDE(&st.vinfo, 0);
  st.layout = cfg.layout;
  st.resize = cfg.resize;
  st.pad_value = std::min(cfg.pad_value, 255u);
  if (!model_input(self, cfg, &st)) return false;
  std::vector<double> mean, sd;
  if (!parse_doubles(cfg.mean, &mean) || (mean.size() > 1 && mean.size() != static_cast<size_t>(st.channels))) {
    GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("Invalid value for property 'mean': \"%s\"", cfg.mean.c_str()),
                      ("expected one number, or one per channel (%d), comma-separated", st.channels));
    return false;
  }
  if (!parse_doubles(cfg.std_dev, &sd) || (sd.size() > 1 && sd.size() != static_cast<size_t>(st.channels)) ||
      std::find(sd.begin(), sd.end(), 0.0) != sd.end()) {
    GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("Invalid value for property 'std': \"%s\"", cfg.std_dev.c_str()),
                      ("expected one non-zero number, or one per channel (%d), comma-separated", st.channels));
    return false;
  }
  if (st.dtype == DType::Float32) {
    const double scale = cfg.scale != 0.0 ? cfg.scale : 1.0 / 255.0;
    st.lut.resize(static_cast<size_t>(st.channels) * 256);
    for (int c = 0; c < st.channels; ++c) {
      const double m = mean.empty() ? 0.0 : mean.size() == 1 ? mean[0] : mean[static_cast<size_t>(c)];
      const double s = sd.empty() ? 1.0 : sd.size() == 1 ? sd[0] : sd[static_cast<size_t>(c)];
      for (int v = 0; v < 256; ++v) st.lut[static_cast<size_t>(c) * 256 + v] = static_cast<float>((v * scale - m) / s);
    }
  }
  st.caps = gst_caps_ref(caps);
  st.dynamic_width = cfg.dynamic_width;
  st.least_w = st.model_w;
  if (!set_width(self, st.model_w)) return false;
  st.configured = true;
  return true;
}

/* ------------------------------------------------------------ crops */

/* The region `od` as a crop of the frame: its box clamped to the frame,
 * or (deskew, a rotated region) its rotated rectangle; false when it is not
 * to be cropped (label, size, outside the frame). The fit is fit_crop()'s. */
bool region_crop(const State& st, const Settings& cfg, GQuark label, JobflowAnalyticsODMtd* od, JobflowCrop* crop) {
  if (label && jobflow_analytics_od_mtd_get_obj_type(od) != label) return false;
  gint x, y, w, h;
  gfloat r = 0.f;
  if (!jobflow_analytics_od_mtd_get_oriented_location(od, &x, &y, &w, &h, &r, nullptr)) return false;
  *crop = JobflowCrop{};
  crop->region_id = od->id;
  const gint fw = GST_VIDEO_INFO_WIDTH(&st.vinfo), fh = GST_VIDEO_INFO_HEIGHT(&st.vinfo);
  if (r != 0.f && cfg.deskew) {
    const double cx = x + w / 2.0, cy = y + h / 2.0;
    if (w <= 0 || h <= 0 || cx < 0 || cy < 0 || cx > fw || cy > fh) return false;
    crop->x = x;
    crop->y = y;
    crop->w = w;
    crop->h = h;
    crop->rotation = r;
  } else {
    if (!jobflow_analytics_od_mtd_get_location(od, &x, &y, &w, &h, nullptr)) return false;  // around a rotated one
    const gint x0 = std::clamp(x, 0, fw), y0 = std::clamp(y, 0, fh);
    const gint x1 = std::clamp(x + w, 0, fw), y1 = std::clamp(y + h, 0, fh);
    crop->x = x0;
    crop->y = y0;
    crop->w = x1 - x0;
    crop->h = y1 - y0;
  }
  if (crop->w <= 0 || crop->h <= 0) return false;
  return crop->w >= static_cast<gint>(cfg.min_width) && crop->h >= static_cast<gint>(cfg.min_height);
}

/* The fit of `crop` into the model's input (st.model_w x st.model_h). */
void fit_crop(const State& st, JobflowCrop* crop) {
  int dx = 0, dy = 0, dw = st.model_w, dh = st.model_h;
  if (st.resize != kStretch) {
    const double s = std::min(static_cast<double>(st.model_w) / crop->w, static_cast<double>(st.model_h) / crop->h);
    dw = std::clamp(static_cast<int>(std::lround(crop->w * s)), 1, st.model_w);
    dh = std::clamp(static_cast<int>(std::lround(crop->h * s)), 1, st.model_h);
    if (st.resize == kLetterbox) {
      dx = (st.model_w - dw) / 2;
      dy = (st.model_h - dh) / 2;
    }
  }
  crop->scale_x = static_cast<double>(dw) / crop->w;
  crop->scale_y = static_cast<double>(dh) / crop->h;
  crop->pad_x = dx;
  crop->pad_y = dy;
}

/* dynamic-width: the width of a buffer holding `crops`: the natural width
 * of the widest at the model's height, rounded up to kDynamicWidthStep, at
 * least st.least_w. */
int dynamic_width(const State& st, const JobflowCrop* crops, size_t n) {
  int w = st.least_w;
  for (size_t i = 0; i < n; ++i) {
    const double natural = std::ceil(static_cast<double>(st.model_h) * crops[i].w / crops[i].h);
    const double stepped = std::ceil(natural / kDynamicWidthStep) * kDynamicWidthStep;
    w = std::max(w, static_cast<int>(std::min(stepped, static_cast<double>(G_MAXINT / 64))));
  }
  return w;
}

/* A rotated crop into the scratch image: each pixel of the fitted
 * rectangle samples the frame (bilinear, edges repeated) at its place in
 * the rotated rectangle; the rest is pad-value. */
void sample_rotated(const State& st, const GstVideoFrame* frame, const JobflowCrop& c, GstVideoFrame* out) {
  const int fw = GST_VIDEO_FRAME_WIDTH(frame), fh = GST_VIDEO_FRAME_HEIGHT(frame), ps = st.pixel_stride;
  const int fstride = GST_VIDEO_FRAME_PLANE_STRIDE(frame, 0), ostride = GST_VIDEO_FRAME_PLANE_STRIDE(out, 0);
  const auto* src = static_cast<const guint8*>(GST_VIDEO_FRAME_PLANE_DATA(frame, 0));
  auto* dst = static_cast<guint8*>(GST_VIDEO_FRAME_PLANE_DATA(out, 0));
  for (int y = 0; y < st.model_h; ++y) std::memset(dst + static_cast<size_t>(y) * ostride, static_cast<int>(st.pad_value),
                                                   static_cast<size_t>(st.model_w) * ps);
  const int dx = static_cast<int>(c.pad_x), dy = static_cast<int>(c.pad_y);
  const int dw = static_cast<int>(std::lround(c.w * c.scale_x)), dh = static_cast<int>(std::lround(c.h * c.scale_y));
  for (int v = dy; v < dy + dh; ++v) {
    guint8* row = dst + static_cast<size_t>(v) * ostride;
    for (int u = dx; u < dx + dw; ++u) {
      double fx = u + 0.5, fy = v + 0.5;
      jobflow_crop_to_frame(&c, &fx, &fy);
      fx -= 0.5;  // pixel centres
      fy -= 0.5;
      const int x0 = static_cast<int>(std::floor(fx)), y0 = static_cast<int>(std::floor(fy));
      const double ax = fx - x0, ay = fy - y0;
      const int xa = std::clamp(x0, 0, fw - 1), xb = std::clamp(x0 + 1, 0, fw - 1);
      const int ya = std::clamp(y0, 0, fh - 1), yb = std::clamp(y0 + 1, 0, fh - 1);
      const guint8* r0 = src + static_cast<size_t>(ya) * fstride;
      const guint8* r1 = src + static_cast<size_t>(yb) * fstride;
      for (int k = 0; k < ps; ++k) {
        const double top = r0[xa * ps + k] * (1 - ax) + r0[xb * ps + k] * ax;
        const double bottom = r1[xa * ps + k] * (1 - ax) + r1[xb * ps + k] * ax;
        row[u * ps + k] = static_cast<guint8>(std::clamp(std::lround(top * (1 - ay) + bottom * ay), 0L, 255L));
      }
    }
  }
}

/* An axis-aligned crop into the scratch image: GStreamer's video converter
 * crops, scales (bilinear) and places it, and fills the border with
 * pad-value. */
bool convert_crop(const State& st, const GstVideoFrame* frame, const JobflowCrop& c, GstVideoFrame* out) {
  const guint v = st.pad_value;
  GstStructure* opts = gst_structure_new(
      "options", GST_VIDEO_CONVERTER_OPT_RESAMPLER_METHOD, GST_TYPE_VIDEO_RESAMPLER_METHOD,
      GST_VIDEO_RESAMPLER_METHOD_LINEAR, GST_VIDEO_CONVERTER_OPT_SRC_X, G_TYPE_INT, c.x, GST_VIDEO_CONVERTER_OPT_SRC_Y,
      G_TYPE_INT, c.y, GST_VIDEO_CONVERTER_OPT_SRC_WIDTH, G_TYPE_INT, c.w, GST_VIDEO_CONVERTER_OPT_SRC_HEIGHT,
      G_TYPE_INT, c.h, GST_VIDEO_CONVERTER_OPT_DEST_X, G_TYPE_INT, static_cast<int>(c.pad_x),
      GST_VIDEO_CONVERTER_OPT_DEST_Y, G_TYPE_INT, static_cast<int>(c.pad_y), GST_VIDEO_CONVERTER_OPT_DEST_WIDTH,
      G_TYPE_INT, static_cast<int>(std::lround(c.w * c.scale_x)), GST_VIDEO_CONVERTER_OPT_DEST_HEIGHT, G_TYPE_INT,
      static_cast<int>(std::lround(c.h * c.scale_y)), GST_VIDEO_CONVERTER_OPT_FILL_BORDER, G_TYPE_BOOLEAN, TRUE,
      GST_VIDEO_CONVERTER_OPT_BORDER_ARGB, G_TYPE_UINT, 0xff000000u | (v << 16) | (v << 8) | v,
      GST_VIDEO_CONVERTER_OPT_THREADS, G_TYPE_UINT, 1u, nullptr);
  GstVideoConverter* conv = gst_video_converter_new(const_cast<GstVideoInfo*>(&st.vinfo),
                                                    const_cast<GstVideoInfo*>(&st.scratch_info), opts);
  if (!conv) return false;
  gst_video_converter_frame(conv, frame, out);
  gst_video_converter_free(conv);
  return true;
}

/* Fits crop `c` of the mapped frame into the scratch image, then writes
 * it normalised into `dst` (one slot). */
bool write_crop(const State& st, const GstVideoFrame* frame, const JobflowCrop& c, guint8* dst) {
  GstVideoFrame out;
  if (!gst_video_frame_map(&out, const_cast<GstVideoInfo*>(&st.scratch_info), st.scratch, GST_MAP_READWRITE))
    return false;
  if (c.rotation != 0.0) {
    sample_rotated(st, frame, c, &out);
  } else if (!convert_crop(st, frame, c, &out)) {
    gst_video_frame_unmap(&out);
    return false;
  }
  const int w = st.model_w, h = st.model_h, ch = st.channels, ps = st.pixel_stride;
  const int stride = GST_VIDEO_FRAME_PLANE_STRIDE(&out, 0);
  const guint8* src = static_cast<const guint8*>(GST_VIDEO_FRAME_PLANE_DATA(&out, 0));
  const bool nchw = st.layout == kNCHW;
  for (int y = 0; y < h; ++y) {
    const guint8* row = src + static_cast<size_t>(y) * stride;
    for (int x = 0; x < w; ++x) {
      for (int k = 0; k < ch; ++k) {
        const size_t i = nchw ? (static_cast<size_t>(k) * h + y) * w + x : (static_cast<size_t>(y) * w + x) * ch + k;
        const guint8 value = row[x * ps + k];
        if (st.dtype == DType::UInt8)
          dst[i] = value;
        else
          reinterpret_cast<float*>(dst)[i] = st.lut[static_cast<size_t>(k) * 256 + value];
      }
    }
  }
  gst_video_frame_unmap(&out);
  return true;
}

/* ------------------------------------------------------------ QoS */

/* True when the frame is to be dropped: downstream's QoS says it would
 * arrive later than max-lateness. Counts and posts the QoS message. */
bool qos_drop(GstJobCrop* self, const Settings& cfg, GstBuffer* frame) {
  Impl& p = *self->impl;
  State& st = p.state;
  const GstClockTime pts = GST_BUFFER_PTS(frame);
  if (!cfg.qos || cfg.max_lateness < 0 || !GST_CLOCK_TIME_IS_VALID(pts) || st.segment.format != GST_FORMAT_TIME)
    return false;
  const GstClockTime running = gst_segment_to_running_time(&st.segment, GST_FORMAT_TIME, pts);
  GstClockTime earliest;
  double proportion;
  {
    std::lock_guard<std::mutex> lk(p.qos_mu);
    earliest = p.earliest;
    proportion = p.proportion;
  }
  if (!GST_CLOCK_TIME_IS_VALID(running) || !GST_CLOCK_TIME_IS_VALID(earliest) ||
      running + static_cast<GstClockTime>(cfg.max_lateness) >= earliest)
    return false;
  ++p.dropped;
  GST_DEBUG_OBJECT(self, "dropping the frame at running time %" GST_TIME_FORMAT " (downstream is at %" GST_TIME_FORMAT
                         ")", GST_TIME_ARGS(running), GST_TIME_ARGS(earliest));
  const GstClockTime stream = gst_segment_to_stream_time(&st.segment, GST_FORMAT_TIME, pts);
  GstMessage* m = gst_message_new_qos(GST_OBJECT(self), FALSE, running, stream, pts, GST_BUFFER_DURATION(frame));
  const guint64 total = p.processed + p.dropped;
  gst_message_set_qos_values(m, static_cast<gint64>(earliest - running), proportion,
                             static_cast<gint>(1000000 * p.processed / total));
  gst_message_set_qos_stats(m, GST_FORMAT_BUFFERS, p.processed, p.dropped);
  gst_element_post_message(GST_ELEMENT(self), m);
  return true;
}

/* ------------------------------------------------------------ streaming */

/* A tensor buffer with the frame's timestamps. */
GstBuffer* timed_buffer(GstBuffer* tensor, GstBuffer* frame, bool first) {
  gst_buffer_copy_into(tensor, frame, GST_BUFFER_COPY_TIMESTAMPS, 0, static_cast<gsize>(-1));
  if (first && GST_BUFFER_FLAG_IS_SET(frame, GST_BUFFER_FLAG_DISCONT))
    GST_BUFFER_FLAG_SET(tensor, GST_BUFFER_FLAG_DISCONT);
  return tensor;
}

GstFlowReturn process(GstJobCrop* self, GstBuffer* frame) {
  Impl& p = *self->impl;
  State& st = p.state;
  const Settings cfg = p.settings.copy();
  const guint64 index = st.frames++;
  if (qos_drop(self, cfg, frame)) return GST_FLOW_OK;
  ++p.processed;
  /* the regions to crop */
  std::vector<JobflowCrop> crops;
  const bool due = cfg.interval <= 1 || index % cfg.interval == 0;
  JobflowAnalyticsRelationMeta* meta = jobflow_buffer_get_analytics_relation_meta(frame);
  if (due && meta) {
    const GQuark label = cfg.label.empty() ? 0 : g_quark_from_string(cfg.label.c_str());
    gpointer state = nullptr;
    JobflowAnalyticsODMtd od;
    while (jobflow_analytics_relation_meta_iterate(meta, &state, jobflow_analytics_od_mtd_get_mtd_type(), &od)) {
      JobflowCrop c;
      if (region_crop(st, cfg, label, &od, &c)) crops.push_back(c);
    }
  }
  if (crops.empty() && st.primed) {  // the frame alone, past the model
    GstBuffer* gap = timed_buffer(gst_buffer_new(), frame, true);
    GST_BUFFER_FLAG_SET(gap, GST_BUFFER_FLAG_GAP);
    jobflow_buffer_add_crop_meta(gap, frame, st.caps, st.model_w, st.model_h, static_cast<guint>(st.batch), nullptr,
                                 0, 0, TRUE);
    return gst_pad_push(self->srcpad, gap);
  }
  /* The first buffer under new caps is a tensor even without crops (all
   * padding, n_crops 0): a job whose returns have dims known per call gives
   * its output caps with its first result only, and a GAP buffer before
   * them would reach downstream without caps. */
  st.primed = true;
  GstVideoFrame in;
  if (!gst_video_frame_map(&in, &st.vinfo, frame, GST_MAP_READ)) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("jobcrop: could not map the frame as %s",
                                             gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(&st.vinfo))),
                      (nullptr));
    return GST_FLOW_ERROR;
  }
  const size_t batch = static_cast<size_t>(st.batch);
  const size_t chunks = std::max<size_t>(1, (crops.size() + batch - 1) / batch);
  GstFlowReturn ret = GST_FLOW_OK;
  for (size_t k = 0; k < chunks && ret == GST_FLOW_OK; ++k) {
    const size_t first = k * batch, n = std::min(batch, crops.size() - first);
    if (st.dynamic_width) {
      const int w = dynamic_width(st, crops.data() + first, n);
      if (w != st.model_w && !set_width(self, w)) {
        ret = GST_FLOW_NOT_NEGOTIATED;
        break;
      }
    }
    for (size_t i = 0; i < n; ++i) fit_crop(st, &crops[first + i]);
    const Shape shape = tensor_shape(st);
    GstBuffer* out = jobflow::gst::new_tensor_buffer(st.slot_bytes * batch);
    GstMapInfo map;
    gst_buffer_map(out, &map, GST_MAP_WRITE);
    std::memset(map.data + n * st.slot_bytes, 0, (batch - n) * st.slot_bytes);  // padding slots
    bool ok = true;
    for (size_t i = 0; i < n && ok; ++i) ok = write_crop(st, &in, crops[first + i], map.data + i * st.slot_bytes);
    gst_buffer_unmap(out, &map);
    if (!ok) {
      gst_buffer_unref(out);
      GST_ELEMENT_ERROR(self, CORE, FAILED, ("jobcrop: could not scale a crop into the model's input"), (nullptr));
      ret = GST_FLOW_ERROR;
      break;
    }
    timed_buffer(out, frame, k == 0);
    jobflow::gst::add_tensor_meta(out, {TensorSpec{shape, st.dtype}});
    jobflow_buffer_add_crop_meta(out, frame, st.caps, st.model_w, st.model_h, static_cast<guint>(batch),
                                 crops.data() + first, static_cast<guint>(n), static_cast<guint>(k),
                                 k + 1 == chunks);
    ret = gst_pad_push(self->srcpad, out);
  }
  gst_video_frame_unmap(&in);
  return ret;
}

GstFlowReturn chain(GstPad*, GstObject* parent, GstBuffer* frame) {
  GstJobCrop* self = GST_JOB_CROP(parent);
  const GstFlowReturn ret = jobflow::gst::guarded(GST_ELEMENT(self), "Cropping", GST_FLOW_ERROR, [&] {
    if (!self->impl->state.configured) {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No caps before the first buffer"), (nullptr));
      return GST_FLOW_NOT_NEGOTIATED;
    }
    return process(self, frame);
  });
  gst_buffer_unref(frame);
  return ret;
}

void reset_qos(Impl& p) {
  std::lock_guard<std::mutex> lk(p.qos_mu);
  p.earliest = GST_CLOCK_TIME_NONE;
  p.proportion = 1.0;
}

gboolean sink_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobCrop* self = GST_JOB_CROP(parent);
  Impl& p = *self->impl;
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_CAPS: {
      GstCaps* caps;
      gst_event_parse_caps(event, &caps);
      const bool ok = jobflow::gst::guarded(GST_ELEMENT(self), "Caps", false, [&] { return configure(self, caps); });
      gst_event_unref(event);
      return ok;
    }
    case GST_EVENT_SEGMENT:
      gst_event_copy_segment(event, &p.state.segment);
      break;
    case GST_EVENT_FLUSH_STOP:
      p.state.frames = 0;
      gst_segment_init(&p.state.segment, GST_FORMAT_UNDEFINED);
      reset_qos(p);
      break;
    default:
      break;
  }
  return gst_pad_event_default(pad, parent, event);
}

gboolean src_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  Impl& p = *GST_JOB_CROP(parent)->impl;
  if (GST_EVENT_TYPE(event) == GST_EVENT_QOS) {
    GstQOSType type;
    gdouble proportion;
    GstClockTimeDiff diff;
    GstClockTime timestamp;
    gst_event_parse_qos(event, &type, &proportion, &diff, &timestamp);
    std::lock_guard<std::mutex> lk(p.qos_mu);
    p.proportion = proportion;
    /* downstream's running time now: the buffer at `timestamp` came `diff` late */
    if (GST_CLOCK_TIME_IS_VALID(timestamp))
      p.earliest = diff < 0 && static_cast<GstClockTime>(-diff) > timestamp ? 0 : timestamp + diff;
  }
  return gst_pad_event_default(pad, parent, event);  // upstream may drop too
}

GstStateChangeReturn change_state(GstElement* element, GstStateChange transition) {
  GstJobCrop* self = GST_JOB_CROP(element);
  Impl& p = *self->impl;
  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED) {
    clear_state(&p.state);
    reset_qos(p);
    p.processed = p.dropped = 0;
  }
  const GstStateChangeReturn ret = GST_ELEMENT_CLASS(gst_job_crop_parent_class)->change_state(element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) clear_state(&p.state);
  return ret;
}

/* ------------------------------------------------------------- GObject */

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_CROP(object)->impl->settings.with([&](Settings& s) {
    auto str = [&] {
      const gchar* v = g_value_get_string(value);
      return std::string(v ? v : "");
    };
    switch (prop_id) {
      case PROP_LABEL: s.label = str(); break;
      case PROP_INTERVAL: s.interval = g_value_get_uint(value); break;
      case PROP_MIN_WIDTH: s.min_width = g_value_get_uint(value); break;
      case PROP_MIN_HEIGHT: s.min_height = g_value_get_uint(value); break;
      case PROP_WIDTH: s.width = g_value_get_uint(value); break;
      case PROP_HEIGHT: s.height = g_value_get_uint(value); break;
      case PROP_BATCH_SIZE: s.batch_size = g_value_get_uint(value); break;
      case PROP_LAYOUT: s.layout = static_cast<Layout>(g_value_get_enum(value)); break;
      case PROP_RESIZE: s.resize = static_cast<Resize>(g_value_get_enum(value)); break;
      case PROP_PAD_VALUE: s.pad_value = g_value_get_uint(value); break;
      case PROP_SCALE: s.scale = g_value_get_double(value); break;
      case PROP_MEAN: s.mean = str(); break;
      case PROP_STD: s.std_dev = str(); break;
      case PROP_QOS: s.qos = g_value_get_boolean(value); break;
      case PROP_MAX_LATENESS: s.max_lateness = g_value_get_int64(value); break;
      case PROP_DESKEW: s.deskew = g_value_get_boolean(value); break;
      case PROP_DYNAMIC_WIDTH: s.dynamic_width = g_value_get_boolean(value); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GST_JOB_CROP(object)->impl->settings.with([&](const Settings& s) {
    auto str = [&](const std::string& v) { g_value_set_string(value, v.empty() ? nullptr : v.c_str()); };
    switch (prop_id) {
      case PROP_LABEL: str(s.label); break;
      case PROP_INTERVAL: g_value_set_uint(value, s.interval); break;
      case PROP_MIN_WIDTH: g_value_set_uint(value, s.min_width); break;
      case PROP_MIN_HEIGHT: g_value_set_uint(value, s.min_height); break;
      case PROP_WIDTH: g_value_set_uint(value, s.width); break;
      case PROP_HEIGHT: g_value_set_uint(value, s.height); break;
      case PROP_BATCH_SIZE: g_value_set_uint(value, s.batch_size); break;
      case PROP_LAYOUT: g_value_set_enum(value, s.layout); break;
      case PROP_RESIZE: g_value_set_enum(value, s.resize); break;
      case PROP_PAD_VALUE: g_value_set_uint(value, s.pad_value); break;
      case PROP_SCALE: g_value_set_double(value, s.scale); break;
      case PROP_MEAN: str(s.mean); break;
      case PROP_STD: str(s.std_dev); break;
      case PROP_QOS: g_value_set_boolean(value, s.qos); break;
      case PROP_MAX_LATENESS: g_value_set_int64(value, s.max_lateness); break;
      case PROP_DESKEW: g_value_set_boolean(value, s.deskew); break;
      case PROP_DYNAMIC_WIDTH: g_value_set_boolean(value, s.dynamic_width); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

}  // namespace

static void gst_job_crop_class_init(GstJobCropClass* klass) {
  GObjectClass* gobject_class = jobflow::gst::init_object_class<GstJobCrop>(klass, set_property, get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  element_class->change_state = change_state;
  const auto flags = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS);
  const auto ready = static_cast<GParamFlags>(flags | GST_PARAM_MUTABLE_READY);
  const auto playing = static_cast<GParamFlags>(flags | GST_PARAM_MUTABLE_PLAYING);
  auto install = [&](guint id, GParamSpec* spec) { g_object_class_install_property(gobject_class, id, spec); };
  install(PROP_LABEL, g_param_spec_string("label", "Label",
                                          "Crop the regions of this label only (NULL: every region)", nullptr, playing));
  install(PROP_INTERVAL,
          g_param_spec_uint("interval", "Interval",
                            "Crop every this many frames (1: every frame); the others pass without crops", 1,
                            G_MAXUINT, kDefaultInterval, playing));
  install(PROP_MIN_WIDTH, g_param_spec_uint("min-width", "Minimum width",
                                            "Skip regions narrower than this (frame pixels, after clamping to the "
                                            "frame)",
                                            0, G_MAXINT, 0, playing));
  install(PROP_MIN_HEIGHT, g_param_spec_uint("min-height", "Minimum height",
                                             "Skip regions lower than this (frame pixels, after clamping to the frame)",
                                             0, G_MAXINT, 0, playing));
  install(PROP_WIDTH, g_param_spec_uint("width", "Width",
                                        "The model's input width (0: from downstream's caps)", 0, G_MAXINT, 0, ready));
  install(PROP_HEIGHT, g_param_spec_uint("height", "Height", "The model's input height (0: from downstream's caps)", 0,
                                         G_MAXINT, 0, ready));
  install(PROP_BATCH_SIZE,
          g_param_spec_uint("batch-size", "Batch size",
                            "Crops per tensor, its dim 0 (0: from downstream's caps); a frame with more crops gives "
                            "several tensors",
                            0, G_MAXINT, 0, ready));
  install(PROP_LAYOUT, g_param_spec_enum("layout", "Layout", "The tensor's layout", layout_get_type(), kNCHW, ready));
  install(PROP_RESIZE, g_param_spec_enum("resize", "Resize", "How a crop is fitted into the model's input",
                                         resize_get_type(), kPadRight, ready));
  install(PROP_PAD_VALUE, g_param_spec_uint("pad-value", "Pad value",
                                            "The 8-bit value of the padding around a fitted crop (before scale, mean "
                                            "and std)",
                                            0, 255, 0, ready));
  install(PROP_SCALE, g_param_spec_double("scale", "Scale",
                                          "float32 tensors: the factor applied to each 8-bit value first (0: 1/255)",
                                          -G_MAXDOUBLE, G_MAXDOUBLE, 0.0, ready));
  install(PROP_MEAN, g_param_spec_string("mean", "Mean",
                                         "float32 tensors: subtracted after scale; one number or one per channel, "
                                         "comma-separated",
                                         nullptr, ready));
  install(PROP_STD, g_param_spec_string("std", "Std",
                                        "float32 tensors: divides after the mean; one number or one per channel", nullptr,
                                        ready));
  install(PROP_QOS, g_param_spec_boolean("qos", "QoS",
                                         "Drop frames that downstream's QoS events say are late by more than "
                                         "max-lateness",
                                         TRUE, playing));
  install(PROP_MAX_LATENESS,
          g_param_spec_int64("max-lateness", "Maximum lateness",
                             "With qos: ns a frame may be late downstream before it is dropped (-1: never drop)", -1,
                             G_MAXINT64, kDefaultMaxLateness, playing));
  install(PROP_DESKEW, g_param_spec_boolean("deskew", "Deskew",
                                            "Crop a rotated region (text-regions' lines) as its rotated rectangle turned "
                                            "upright (bilinear); false: as the axis-aligned box around it",
                                            TRUE, playing));
  install(PROP_DYNAMIC_WIDTH,
          g_param_spec_boolean("dynamic-width", "Dynamic width",
                               "Give each tensor the width of its widest crop at the model's height (rounded up to "
                               "a multiple of 32, at least width), for models with a dynamic width such as PP-OCR's "
                               "recognisers; new caps when it changes",
                               FALSE, ready));

  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  gst_element_class_set_static_metadata(
      element_class, "Jobflow region cropper", "Filter/Converter/Video/Tensor",
      "Crops the regions of a label from each frame, fits them into a second model's input and batches them into one "
      "tensor (with the frame and the regions in a meta, for jobdecode per-region=true)",
      "Jobflow project");
  gst_type_mark_as_plugin_api(layout_get_type(), static_cast<GstPluginAPIFlags>(0));
  gst_type_mark_as_plugin_api(resize_get_type(), static_cast<GstPluginAPIFlags>(0));
}

static void gst_job_crop_init(GstJobCrop* self) {
  self->impl = new Impl();
  self->sinkpad = jobflow::gst::add_pad(GST_ELEMENT(self), "sink", chain, sink_event, nullptr);
  self->srcpad = jobflow::gst::add_pad(GST_ELEMENT(self), "src", nullptr, src_event, nullptr);
  gst_pad_use_fixed_caps(self->srcpad);
}

gboolean jobflow_register_jobcrop(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobcrop_debug, "jobcrop", 0, "Jobflow region cropper");
  return gst_element_register(plugin, "jobcrop", GST_RANK_NONE, GST_TYPE_JOB_CROP);
}

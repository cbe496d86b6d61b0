/* jobconvert: raw media -> one tensor. See gstjobconvert.h and
 * docs/elements.md. A plain GstElement with a chain function, not a
 * GstBaseTransform: with frames-per-tensor > 1 (and for audio and octet
 * streams, re-chunked through a GstAdapter) it is N:1, and it pushes the
 * tensor caps its settings give without intersecting them with
 * downstream's caps query, so a jobfunction whose job takes other tensors
 * refuses them with an error naming the placeholder (GstBaseTransform would
 * fail the negotiation here first, as a bare not-negotiated). Settings
 * (properties) are copied into the streaming state when caps arrive; they
 * apply from the next caps. */
#include "gstjobconvert.h"

#include "element_util.h"
#include "jobflow_frame_meta.h"
#include "jobflow_meta.h"
#include "tensor_caps.h"

#include <gst/audio/audio.h>
#include <gst/base/gstadapter.h>
#include <gst/video/video.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobconvert_debug);
#define GST_CAT_DEFAULT jobconvert_debug

namespace {

using jobflow::DType;
using jobflow::Shape;
using jobflow::TensorSpec;

enum Layout { kNCHW = 0, kNHWC = 1 };
enum Resize { kStretch = 0, kLetterbox = 1 };
enum OutType { kOutFloat32 = 0, kOutUInt8 = 1, kOutNative = 2 };
enum ChannelMode { kChannelsAll = 0, kChannelsMix = 1, kChannelsSelect = 2 };
enum class Media { None, Video, Audio, Octet };

constexpr guint kDefaultFramesPerTensor = 1;
constexpr double kDefaultScale = 0.0;  // 0 = automatic (see docs)

struct Settings {
  Layout layout = kNCHW;
  OutType dtype = kOutFloat32;
  double scale = kDefaultScale;
  std::string mean;
  std::string std_dev;
  guint frames_per_tensor = kDefaultFramesPerTensor;
  std::string input_dims;
  std::string input_type = "uint8";
  guint hop = 0;  // 0 = frames_per_tensor (windows side by side)
  ChannelMode channel_mode = kChannelsAll;
  guint channel = 0;
  std::string fields;
  guint record_size = 0;  // 0 = the fields' (or input-dims') size
  /* video: the model's input size, and how frames are fitted to it */
  guint width = 0, height = 0;  // 0 = the frame's
  Resize resize = kStretch;
  guint pad_value = 0;
  bool attach_frame = true;
};

/* One field of an octet-stream record: `count` values of `type` at byte
 * `offset` of the record. */
struct Field {
  DType type = DType::UInt8;
  size_t count = 1;
  size_t offset = 0;
};

/* "int64,float32:6" -> fields (offsets packed, little-endian records).
 * False, with *error naming the part, when the text does not parse. */
bool parse_fields(const std::string& text, std::vector<Field>* out, std::string* error) {
  out->clear();
  size_t offset = 0;
  gchar** parts = g_strsplit(text.c_str(), ",", -1);
  bool ok = true;
  for (gchar** p = parts; *p && ok; ++p) {
    std::string part = g_strstrip(*p);
    Field f;
    std::string type = part;
    const size_t colon = part.find(':');
    if (colon != std::string::npos) {
      type = part.substr(0, colon);
      const std::string count = part.substr(colon + 1);
      gchar* end = nullptr;
      const guint64 c = g_ascii_strtoull(count.c_str(), &end, 10);
      if (count.empty() || *end != '\0' || c == 0 || c > (1u << 24)) {
        *error = "count \"" + count + "\" of field \"" + part + "\" is not a whole number >= 1";
        ok = false;
        break;
      }
      f.count = static_cast<size_t>(c);
    }
    if (!jobflow::gst::dtype_from_nns(type, &f.type)) {
      *error = "type \"" + type + "\" of field \"" + part +
               "\" is not one of float16/32/64, bfloat16, int8/16/32/64, uint8/16/32/64, bool";
      ok = false;
      break;
    }
    f.offset = offset;
    offset += f.count * jobflow::dtype_size(f.type);
    out->push_back(f);
  }
  g_strfreev(parts);
  if (ok && out->empty()) {
    *error = "no fields";
    ok = false;
  }
  return ok;
}

/* Everything built from caps + settings; dropped on stop/new caps. */
struct State {
  Media media = Media::None;
  Settings cfg;
  GstVideoInfo vinfo{};
  /* video scaling (width/height set and not the frame's size): frames are
   * converted into `scaled` (of `scaled_info`) first */
  std::shared_ptr<GstVideoConverter> converter;
  std::shared_ptr<GstBuffer> scaled;
  GstVideoInfo scaled_info{};
  std::shared_ptr<GstCaps> caps;  // the input caps (JobflowFrameMeta)
  double scale_x = 1, scale_y = 1, pad_x = 0, pad_y = 0;
  GstAudioInfo ainfo{};
  /* octet-stream: a record of fields (input-dims + input-type: one field) */
  Shape unit_shape;
  DType in_dtype = DType::UInt8;  // the fields' type when they share one
  std::vector<Field> fields;
  size_t record_values = 0;       // values per record (the fields' counts)
  size_t fields_bytes = 0;        // bytes the fields take (unit_bytes - padding)
  size_t unit_bytes = 0;  // bytes of one input unit (frame / audio frame / octet record)
  /* audio and octet windows */
  guint hop = 1;          // units from one window's start to the next
  size_t skip_bytes = 0;  // hop > window: bytes still to drop before the next window
  int in_channels = 1;    // audio: the input's channels (st.channels: the output's)
  /* common */
  int channels = 1;
  bool native = false;           // copy values, no arithmetic
  std::vector<double> mean, inv_std;
  double scale = 1.0;
  std::vector<float> lut;        // 8-bit video: channels * 256 values
  TensorSpec out_spec;
  size_t out_bytes = 0;
  size_t out_frame_bytes = 0;    // video: bytes of one frame in the output
  GstClockTime frame_duration = GST_CLOCK_TIME_NONE;  // one input unit, when known
  /* video batching */
  GstBuffer* pending = nullptr;
  GstMapInfo pending_map{};
  guint filled = 0;
  GstClockTime first_pts = GST_CLOCK_TIME_NONE, first_dts = GST_CLOCK_TIME_NONE, end_ts = GST_CLOCK_TIME_NONE;
};

GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS,
    GST_STATIC_CAPS("video/x-raw, format=(string){ GRAY8, RGB, BGR, RGBA, BGRx }, "
                    "width=(int)[1, MAX], height=(int)[1, MAX], framerate=(fraction)[0/1, MAX]; "
                    "audio/x-raw, format=(string){ S16LE, F32LE }, layout=(string)interleaved, "
                    "rate=(int)[1, MAX], channels=(int)[1, MAX]; "
                    "application/octet-stream"));

GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS("other/tensors, format=(string)static, num_tensors=(int)1, framerate=(fraction)[0/1, MAX]"));

enum { PROP_0, PROP_LAYOUT, PROP_DTYPE, PROP_SCALE, PROP_MEAN, PROP_STD, PROP_FRAMES_PER_TENSOR, PROP_INPUT_DIMS,
       PROP_INPUT_TYPE, PROP_HOP, PROP_CHANNEL_MODE, PROP_CHANNEL, PROP_FIELDS, PROP_RECORD_SIZE, PROP_WIDTH,
       PROP_HEIGHT, PROP_RESIZE, PROP_PAD_VALUE, PROP_ATTACH_FRAME };

GType layout_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {
      {kNCHW, "Channels first: video (N, C, H, W), audio (C, F)", "nchw"},
      {kNHWC, "Channels last: video (N, H, W, C), audio (F, C)", "nhwc"},
      {0, nullptr, nullptr}};
  return jobflow::gst::enum_type(&type, "GstJobConvertLayout", values);
}

GType resize_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {
      {kStretch, "Scale to width x height, ignoring the aspect ratio", "stretch"},
      {kLetterbox, "Keep the aspect ratio, centre the frame and pad the rest with pad-value", "letterbox"},
      {0, nullptr, nullptr}};
  return jobflow::gst::enum_type(&type, "GstJobConvertResize", values);
}

GType dtype_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {
      {kOutFloat32, "float32 with scale, mean and std applied", "float32"},
      {kOutUInt8, "uint8 bytes as they are (8-bit input only)", "uint8"},
      {kOutNative, "the input's element type, values as they are", "native"},
      {0, nullptr, nullptr}};
  return jobflow::gst::enum_type(&type, "GstJobConvertDType", values);
}

GType channel_mode_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {
      {kChannelsAll, "Every channel of the input", "all"},
      {kChannelsMix, "One channel, the mean of the input's channels", "mix"},
      {kChannelsSelect, "One channel, the input's channel number 'channel'", "select"},
      {0, nullptr, nullptr}};
  return jobflow::gst::enum_type(&type, "GstJobConvertChannelMode", values);
}

/* "0.5, 0.25,0.1" -> {0.5, 0.25, 0.1}; "" -> {}. */
bool parse_doubles(const std::string& text, std::vector<double>* out) {
  out->clear();
  gchar** parts = g_strsplit_set(text.c_str(), ",:", -1);
  bool ok = true;
  for (gchar** p = parts; *p; ++p) {
    gchar* s = g_strstrip(*p);
    if (*s == '\0') {
      if (text.find_first_not_of(" \t") == std::string::npos) continue;  // all blank
      ok = false;
      break;
    }
    gchar* end = nullptr;
    double v = g_ascii_strtod(s, &end);
    if (end == s || *end != '\0' || !std::isfinite(v)) {
      ok = false;
      break;
    }
    out->push_back(v);
  }
  g_strfreev(parts);
  return ok;
}

struct Impl {
  Impl() : adapter(gst_adapter_new()) {}
  ~Impl();
  jobflow::gst::Locked<Settings> settings;
  std::atomic<GstClockTime> latency{0};  // what this element adds (LATENCY query)
  /* Streaming thread only (and state changes). */
  State state;
  GstAdapter* adapter;
};

}  // namespace

struct _GstJobConvert {
  GstElement parent;
  GstPad* sinkpad;
  GstPad* srcpad;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobConvert, gst_job_convert, GST_TYPE_ELEMENT)

namespace {

void drop_pending(State* st) {
  if (st->pending) {
    gst_buffer_unmap(st->pending, &st->pending_map);
    gst_buffer_unref(st->pending);
    st->pending = nullptr;
  }
  st->filled = 0;
  st->first_pts = st->first_dts = st->end_ts = GST_CLOCK_TIME_NONE;
}

Impl::~Impl() {
  drop_pending(&state);
  g_object_unref(adapter);
}

void reset_state(GstJobConvert* self) {
  Impl& p = *self->impl;
  drop_pending(&p.state);
  gst_adapter_clear(p.adapter);
  p.state = State{};
  p.latency.store(0);
}

/* Checks mean/std strings; on failure posts a LIBRARY/SETTINGS error naming
 * the property and returns false. */
bool parse_normalisation(GstJobConvert* self, const Settings& cfg, std::vector<double>* mean,
                         std::vector<double>* sd) {
  if (!parse_doubles(cfg.mean, mean)) {
    GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("Invalid value for property 'mean': \"%s\"", cfg.mean.c_str()),
                      ("expected comma-separated numbers, one per channel (or one for all)"));
    return false;
  }
  if (!parse_doubles(cfg.std_dev, sd)) {
    GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("Invalid value for property 'std': \"%s\"", cfg.std_dev.c_str()),
                      ("expected comma-separated numbers, one per channel (or one for all)"));
    return false;
  }
  for (double v : *sd) {
    if (v == 0.0) {
      GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("Invalid value for property 'std': \"%s\"", cfg.std_dev.c_str()),
                        ("a standard deviation of 0 divides by zero"));
      return false;
    }
  }
  return true;
}

bool check_settings(GstJobConvert* self) {
  Settings cfg = self->impl->settings.copy();
  std::vector<double> m, s;
  if (!parse_normalisation(self, cfg, &m, &s)) return false;
  DType t;
  if (!jobflow::gst::dtype_from_nns(cfg.input_type, &t)) {
    GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS,
                      ("Invalid value for property 'input-type': \"%s\"", cfg.input_type.c_str()),
                      ("expected one of float16, float32, float64, bfloat16, int8, int16, int32, int64, uint8, "
                       "uint16, uint32, uint64, bool"));
    return false;
  }
  if (!cfg.input_dims.empty()) {
    Shape shape;
    int64_t count = 0;
    if (!jobflow::gst::dims_from_string(cfg.input_dims, 0, &shape) || !jobflow::checked_numel(shape, &count) ||
        count <= 0) {
      GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS,
                        ("Invalid value for property 'input-dims': \"%s\"", cfg.input_dims.c_str()),
                        ("expected positive dimensions innermost first, e.g. \"28:28:1\""));
      return false;
    }
  }
  if (!cfg.fields.empty()) {
    std::vector<Field> fields;
    std::string error;
    if (!parse_fields(cfg.fields, &fields, &error)) {
      GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("Invalid value for property 'fields': \"%s\"", cfg.fields.c_str()),
                        ("%s; expected TYPE[:COUNT],... e.g. \"int64,float32:6\"", error.c_str()));
      return false;
    }
    if (!cfg.input_dims.empty()) {
      GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS,
                        ("Properties 'fields' (\"%s\") and 'input-dims' (\"%s\") are both set", cfg.fields.c_str(),
                         cfg.input_dims.c_str()),
                        ("an octet-stream record is either fields or one input-dims tensor of input-type"));
      return false;
    }
  }
  return true;
}

/* Video: the model input size and, when it is not the frame's, the
 * converter that scales (stretch) or scales and pads (letterbox) each frame
 * into it — GStreamer's own video converter, bilinear. Sets the geometry
 * JobflowFrameMeta carries. */
bool configure_scaling(GstJobConvert*, State* st) {
  const Settings& cfg = st->cfg;
  const int fw = GST_VIDEO_INFO_WIDTH(&st->vinfo), fh = GST_VIDEO_INFO_HEIGHT(&st->vinfo);
  const int mw = cfg.width ? static_cast<int>(cfg.width) : fw, mh = cfg.height ? static_cast<int>(cfg.height) : fh;
  st->scaled_info = st->vinfo;
  st->scale_x = st->scale_y = 1;
  st->pad_x = st->pad_y = 0;
  if (mw == fw && mh == fh) return true;
  gst_video_info_set_format(&st->scaled_info, GST_VIDEO_INFO_FORMAT(&st->vinfo), static_cast<guint>(mw),
                            static_cast<guint>(mh));
  GST_VIDEO_INFO_FPS_N(&st->scaled_info) = GST_VIDEO_INFO_FPS_N(&st->vinfo);  // the converter wants them equal
  GST_VIDEO_INFO_FPS_D(&st->scaled_info) = GST_VIDEO_INFO_FPS_D(&st->vinfo);
  int dx = 0, dy = 0, dw = mw, dh = mh;
  if (cfg.resize == kLetterbox) {
    const double s = std::min(static_cast<double>(mw) / fw, static_cast<double>(mh) / fh);
    dw = std::max(1, static_cast<int>(std::lround(fw * s)));
    dh = std::max(1, static_cast<int>(std::lround(fh * s)));
    dx = (mw - dw) / 2;
    dy = (mh - dh) / 2;
  }
  st->scale_x = static_cast<double>(dw) / fw;
  st->scale_y = static_cast<double>(dh) / fh;
  st->pad_x = dx;
  st->pad_y = dy;
  const guint v = std::min(cfg.pad_value, 255u);
  GstStructure* opts = gst_structure_new(
      "options", GST_VIDEO_CONVERTER_OPT_RESAMPLER_METHOD, GST_TYPE_VIDEO_RESAMPLER_METHOD,
      GST_VIDEO_RESAMPLER_METHOD_LINEAR, GST_VIDEO_CONVERTER_OPT_DEST_X, G_TYPE_INT, dx,
      GST_VIDEO_CONVERTER_OPT_DEST_Y, G_TYPE_INT, dy, GST_VIDEO_CONVERTER_OPT_DEST_WIDTH, G_TYPE_INT, dw,
      GST_VIDEO_CONVERTER_OPT_DEST_HEIGHT, G_TYPE_INT, dh, GST_VIDEO_CONVERTER_OPT_FILL_BORDER, G_TYPE_BOOLEAN, TRUE,
      GST_VIDEO_CONVERTER_OPT_BORDER_ARGB, G_TYPE_UINT, 0xff000000u | (v << 16) | (v << 8) | v,
      GST_VIDEO_CONVERTER_OPT_THREADS, G_TYPE_UINT, 1u, nullptr);
  st->converter.reset(gst_video_converter_new(&st->vinfo, &st->scaled_info, opts), gst_video_converter_free);
  st->scaled.reset(gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&st->scaled_info), nullptr),
                   [](GstBuffer* b) { gst_buffer_unref(b); });
  return static_cast<bool>(st->converter);
}

/* Builds the state for `caps`; posts an element error and returns false
 * when the caps and the settings do not fit. */
bool configure(GstJobConvert* self, GstCaps* caps) {
  State st;
  st.cfg = self->impl->settings.copy();
  const Settings& cfg = st.cfg;
  const guint n = cfg.frames_per_tensor;
  GstStructure* s = gst_caps_get_structure(caps, 0);
  const gchar* name = gst_structure_get_name(s);
  int fps_n = 0, fps_d = 1;
  std::vector<double> mean, sd;
  if (!parse_normalisation(self, cfg, &mean, &sd)) return false;

  DType in_type = DType::UInt8;
  bool eight_bit = false;
  double auto_scale = 1.0;
  if (g_str_equal(name, "video/x-raw")) {
    if (!gst_video_info_from_caps(&st.vinfo, caps)) {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Invalid video caps"), ("%" GST_PTR_FORMAT, caps));
      return false;
    }
    st.media = Media::Video;
    st.channels = GST_VIDEO_INFO_COMP_PSTRIDE(&st.vinfo, 0);  // bytes per pixel = channels, 8-bit each
    eight_bit = true;
    auto_scale = 1.0 / 255.0;
    fps_n = GST_VIDEO_INFO_FPS_N(&st.vinfo);
    fps_d = GST_VIDEO_INFO_FPS_D(&st.vinfo);
    if (fps_n > 0) st.frame_duration = gst_util_uint64_scale_int(GST_SECOND, fps_d, fps_n);
    st.caps.reset(gst_caps_ref(caps), gst_caps_unref);
    if (!configure_scaling(self, &st)) return false;
    const int64_t c = st.channels, h = GST_VIDEO_INFO_HEIGHT(&st.scaled_info), w = GST_VIDEO_INFO_WIDTH(&st.scaled_info);
    st.out_spec.shape = cfg.layout == kNCHW ? Shape{n, c, h, w} : Shape{n, h, w, c};
  } else if (g_str_equal(name, "audio/x-raw")) {
    if (!gst_audio_info_from_caps(&st.ainfo, caps)) {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Invalid audio caps"), ("%" GST_PTR_FORMAT, caps));
      return false;
    }
    st.media = Media::Audio;
    st.in_channels = GST_AUDIO_INFO_CHANNELS(&st.ainfo);
    if (cfg.channel_mode == kChannelsSelect && cfg.channel >= static_cast<guint>(st.in_channels)) {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                        ("Property 'channel' is %u but the input has %d channel(s)", cfg.channel, st.in_channels),
                        ("channels are numbered from 0 (channel-mode=select)"));
      return false;
    }
    st.channels = cfg.channel_mode == kChannelsAll ? st.in_channels : 1;
    st.unit_bytes = GST_AUDIO_INFO_BPF(&st.ainfo);
    const bool s16 = GST_AUDIO_INFO_FORMAT(&st.ainfo) == GST_AUDIO_FORMAT_S16LE;
    in_type = DType::Float32;
    auto_scale = s16 ? 1.0 / 32768.0 : 1.0;
    fps_n = GST_AUDIO_INFO_RATE(&st.ainfo);
    fps_d = 1;
    st.frame_duration = gst_util_uint64_scale_int(GST_SECOND, 1, fps_n);
    if (s16 && cfg.dtype != kOutFloat32) {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                        ("Property 'dtype' is \"%s\" but S16LE audio has no tensor type of its own",
                         cfg.dtype == kOutUInt8 ? "uint8" : "native"),
                        ("use dtype=float32 (the default) for S16LE audio"));
      return false;
    }
    if (cfg.dtype == kOutUInt8) {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Property 'dtype' is \"uint8\" but the input is F32LE audio"),
                        ("dtype=uint8 needs 8-bit input; use float32 or native"));
      return false;
    }
    const int64_t c = st.channels;
    st.out_spec.shape = cfg.layout == kNCHW ? Shape{c, n} : Shape{n, c};
  } else if (g_str_equal(name, "application/octet-stream")) {
    st.media = Media::Octet;
    if (!cfg.fields.empty()) {
      /* Records of fields: (K,) values per record, one channel per value. */
      std::string error;
      if (!parse_fields(cfg.fields, &st.fields, &error)) {
        GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("Invalid value for property 'fields': \"%s\"", cfg.fields.c_str()),
                          ("%s; expected TYPE[:COUNT],... e.g. \"int64,float32:6\"", error.c_str()));
        return false;
      }
      in_type = st.fields[0].type;
      bool one_type = true;
      for (const Field& f : st.fields) {
        st.record_values += f.count;
        one_type = one_type && f.type == in_type;
      }
      if (!one_type && cfg.dtype != kOutFloat32) {
        GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                          ("Property 'dtype' is \"%s\" but property 'fields' (\"%s\") mixes types",
                           cfg.dtype == kOutUInt8 ? "uint8" : "native", cfg.fields.c_str()),
                          ("records of several types convert to float32 only (dtype=float32)"));
        return false;
      }
      st.unit_shape = {static_cast<int64_t>(st.record_values)};
      st.channels = static_cast<int>(st.record_values);
    } else {
      if (cfg.input_dims.empty()) {
        GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Property 'input-dims' is not set"),
                          ("application/octet-stream carries no shape: set input-dims (innermost first, "
                           "e.g. \"28:28:1\") and input-type, or the record's fields"));
        return false;
      }
      int64_t count = 0;
      if (!jobflow::gst::dims_from_string(cfg.input_dims, 0, &st.unit_shape) ||
          !jobflow::checked_numel(st.unit_shape, &count) || count <= 0) {
        GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS,
                          ("Invalid value for property 'input-dims': \"%s\"", cfg.input_dims.c_str()),
                          ("expected positive dimensions innermost first, e.g. \"28:28:1\""));
        return false;
      }
      if (!jobflow::gst::dtype_from_nns(cfg.input_type, &in_type)) {
        GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS,
                          ("Invalid value for property 'input-type': \"%s\"", cfg.input_type.c_str()),
                          ("expected one of float16/32/64, bfloat16, int8/16/32/64, uint8/16/32/64, bool"));
        return false;
      }
      st.record_values = static_cast<size_t>(count);
      st.fields = {Field{in_type, st.record_values, 0}};
      st.channels = 1;
    }
    int64_t unit_bytes = 0;
    std::string why;
    if (!jobflow::checked_nbytes(st.unit_shape, in_type, &unit_bytes, &why)) {
      GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS,
                        ("Invalid value for property '%s': \"%s\": %s", cfg.fields.empty() ? "input-dims" : "fields",
                         cfg.fields.empty() ? cfg.input_dims.c_str() : cfg.fields.c_str(), why.c_str()),
                        (nullptr));
      return false;
    }
    st.in_dtype = in_type;
    for (const Field& f : st.fields) st.fields_bytes += f.count * jobflow::dtype_size(f.type);
    st.unit_bytes = st.fields_bytes;
    if (cfg.record_size != 0) {
      if (cfg.record_size < st.fields_bytes) {
        GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                          ("Property 'record-size' is %u bytes but the record's values take %zu", cfg.record_size,
                           st.fields_bytes),
                          ("record-size is the whole record, padding included (0 = no padding)"));
        return false;
      }
      st.unit_bytes = cfg.record_size;
    }
    eight_bit = std::all_of(st.fields.begin(), st.fields.end(), [](const Field& f) { return f.type == DType::UInt8; });
    gst_structure_get_fraction(s, "framerate", &fps_n, &fps_d);
    if (fps_n > 0) st.frame_duration = gst_util_uint64_scale_int(GST_SECOND, fps_d, fps_n);
    st.out_spec.shape = st.unit_shape;
    if (n > 1) st.out_spec.shape.insert(st.out_spec.shape.begin(), static_cast<int64_t>(n));
    if (cfg.dtype == kOutUInt8 && !eight_bit) {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                        ("Property 'dtype' is \"uint8\" but property '%s' is \"%s\"",
                         cfg.fields.empty() ? "input-type" : "fields",
                         cfg.fields.empty() ? cfg.input_type.c_str() : cfg.fields.c_str()),
                        ("dtype=uint8 needs 8-bit input; use float32 or native"));
      return false;
    }
  } else {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Unsupported caps %s", name), (nullptr));
    return false;
  }

  if (st.media == Media::Video) in_type = DType::UInt8;
  if (st.media != Media::Audio && cfg.channel_mode != kChannelsAll) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Property 'channel-mode' applies to audio, the input is %s", name),
                      ("set channel-mode=all (the default) for video and octet streams"));
    return false;
  }
  if (st.media == Media::Video && cfg.hop != 0) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Property 'hop' (%u) applies to audio and octet streams, not video",
                                                cfg.hop),
                      ("video frames are grouped frames-per-tensor at a time; use hop=0"));
    return false;
  }
  st.hop = cfg.hop != 0 ? cfg.hop : n;
  st.native = cfg.dtype != kOutFloat32;
  st.out_spec.dtype = st.native ? in_type : DType::Float32;

  /* Normalisation: one value for all channels or one per channel. */
  const size_t c = static_cast<size_t>(st.channels);
  auto per_channel = [&](const std::vector<double>& v, double dflt, const char* prop, const std::string& text,
                         std::vector<double>* out) {
    if (v.empty()) {
      out->assign(c, dflt);
    } else if (v.size() == 1) {
      out->assign(c, v[0]);
    } else if (v.size() == c) {
      *out = v;
    } else {
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                        ("Property '%s' has %zu values (\"%s\") but the input has %zu channel(s)", prop, v.size(),
                         text.c_str(), c),
                        ("give one value, or one per channel in the format's memory order"));
      return false;
    }
    return true;
  };
  std::vector<double> sdv;
  if (!per_channel(mean, 0.0, "mean", cfg.mean, &st.mean)) return false;
  if (!per_channel(sd, 1.0, "std", cfg.std_dev, &sdv)) return false;
  st.inv_std.resize(c);
  for (size_t i = 0; i < c; ++i) st.inv_std[i] = 1.0 / sdv[i];
  st.scale = cfg.scale != 0.0 ? cfg.scale : auto_scale;
  if (st.native && (cfg.scale != 0.0 || !mean.empty() || !sd.empty()))
    GST_ELEMENT_WARNING(self, LIBRARY, SETTINGS,
                        ("Properties 'scale', 'mean' and 'std' are ignored with dtype=%s",
                         cfg.dtype == kOutUInt8 ? "uint8" : "native"),
                        (nullptr));
  if (eight_bit && !st.native) {
    st.lut.resize(c * 256);
    for (size_t ch = 0; ch < c; ++ch)
      for (int v = 0; v < 256; ++v)
        st.lut[ch * 256 + v] = static_cast<float>((v * st.scale - st.mean[ch]) * st.inv_std[ch]);
  }

  int64_t out_bytes = 0;
  std::string why;
  if (!jobflow::checked_nbytes(st.out_spec.shape, st.out_spec.dtype, &out_bytes, &why)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("The output tensor %s is too large: %s",
                                                 jobflow::spec_str(st.out_spec).c_str(), why.c_str()),
                      ("%" GST_PTR_FORMAT, caps));
    return false;
  }
  st.out_bytes = static_cast<size_t>(out_bytes);
  st.out_frame_bytes = st.out_bytes / n;

  /* One tensor per window: video every n frames, audio and octet every hop units. */
  int out_n = 0, out_d = 1;
  if (fps_n > 0)
    gst_util_fraction_multiply(fps_n, fps_d, 1, static_cast<gint>(st.media == Media::Video ? n : st.hop), &out_n,
                               &out_d);
  GstCaps* out_caps = jobflow::gst::caps_from_specs({st.out_spec}, out_n, out_d);
  GST_DEBUG_OBJECT(self, "input %" GST_PTR_FORMAT " -> output %" GST_PTR_FORMAT, caps, out_caps);

  Impl& p = *self->impl;
  drop_pending(&p.state);
  gst_adapter_clear(p.adapter);
  p.state = std::move(st);
  const bool waits = n > 1 && GST_CLOCK_TIME_IS_VALID(p.state.frame_duration);
  p.latency.store(waits ? p.state.frame_duration * (n - 1) : 0);  // the first unit waits for n - 1 more
  const bool ok = gst_pad_push_event(self->srcpad, gst_event_new_caps(out_caps));
  gst_caps_unref(out_caps);
  if (!ok) GST_WARNING_OBJECT(self, "downstream refused the tensor caps");
  return ok;
}

/* One video frame into `dst` (the frame's slot of the output). */
void convert_video(const State& st, const GstVideoFrame* frame, guint8* dst) {
  const int w = GST_VIDEO_FRAME_WIDTH(frame), h = GST_VIDEO_FRAME_HEIGHT(frame);
  const int c = st.channels;
  const int stride = GST_VIDEO_FRAME_PLANE_STRIDE(frame, 0);
  const guint8* src = static_cast<const guint8*>(GST_VIDEO_FRAME_PLANE_DATA(frame, 0));
  const bool nchw = st.cfg.layout == kNCHW;
  if (st.native) {
    for (int y = 0; y < h; ++y) {
      const guint8* row = src + static_cast<size_t>(y) * stride;
      if (!nchw) {
        std::memcpy(dst + static_cast<size_t>(y) * w * c, row, static_cast<size_t>(w) * c);
        continue;
      }
      for (int ch = 0; ch < c; ++ch) {
        guint8* out = dst + (static_cast<size_t>(ch) * h + y) * w;
        for (int x = 0; x < w; ++x) out[x] = row[x * c + ch];
      }
    }
    return;
  }
  float* out = reinterpret_cast<float*>(dst);
  const float* lut = st.lut.data();
  for (int y = 0; y < h; ++y) {
    const guint8* row = src + static_cast<size_t>(y) * stride;
    if (nchw) {
      for (int ch = 0; ch < c; ++ch) {
        float* o = out + (static_cast<size_t>(ch) * h + y) * w;
        const float* l = lut + ch * 256;
        for (int x = 0; x < w; ++x) o[x] = l[row[x * c + ch]];
      }
    } else {
      float* o = out + static_cast<size_t>(y) * w * c;
      for (int x = 0; x < w; ++x)
        for (int ch = 0; ch < c; ++ch) o[x * c + ch] = lut[ch * 256 + row[x * c + ch]];
    }
  }
}

double load_value(const guint8* p, DType t) {
  switch (t) {
    case DType::Float32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::Float64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::Int32: { gint32 v; std::memcpy(&v, p, 4); return v; }
    case DType::Int64: { gint64 v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::Int8: return static_cast<gint8>(*p);
    case DType::UInt8: return *p;
    case DType::Bool: return *p != 0;
    case DType::Int16: { gint16 v; std::memcpy(&v, p, 2); return v; }
    case DType::UInt16: { guint16 v; std::memcpy(&v, p, 2); return v; }
    case DType::UInt32: { guint32 v; std::memcpy(&v, p, 4); return v; }
    case DType::UInt64: { guint64 v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::Float16: { jobflow::float16 v; std::memcpy(&v.bits, p, 2); return static_cast<float>(v); }
    case DType::BFloat16: { jobflow::bfloat16 v; std::memcpy(&v.bits, p, 2); return static_cast<float>(v); }
  }
  return 0.0;
}

/* `frames` octet records into `dst`: (frames, values per record). */
void convert_records(const State& st, const guint8* src, guint frames, guint8* dst) {
  const size_t k = st.record_values;
  if (st.native) {  // one type (configure checked): the fields are the record's first bytes
    for (guint r = 0; r < frames; ++r)
      std::memcpy(dst + r * st.fields_bytes, src + r * st.unit_bytes, st.fields_bytes);
    return;
  }
  float* out = reinterpret_cast<float*>(dst);
  if (st.fields.size() == 1 && st.unit_bytes == st.fields_bytes) {  // contiguous values of one type
    const size_t count = k * frames;
    const size_t esz = jobflow::dtype_size(st.in_dtype);
    if (!st.lut.empty() && st.channels == 1) {
      for (size_t i = 0; i < count; ++i) out[i] = st.lut[src[i]];
      return;
    }
    if (st.channels == 1) {
      const double a = st.scale * st.inv_std[0], b = -st.mean[0] * st.inv_std[0];
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(load_value(src + i * esz, st.in_dtype) * a + b);
      return;
    }
  }
  /* Records of fields: value j of a record is channel j (its own mean/std). */
  for (guint r = 0; r < frames; ++r) {
    const guint8* rec = src + static_cast<size_t>(r) * st.unit_bytes;
    float* o = out + static_cast<size_t>(r) * k;
    size_t j = 0;
    for (const Field& f : st.fields) {
      const size_t esz = jobflow::dtype_size(f.type);
      for (size_t i = 0; i < f.count; ++i, ++j) {
        const size_t ch = st.channels == 1 ? 0 : j;
        o[j] = static_cast<float>((load_value(rec + f.offset + i * esz, f.type) * st.scale - st.mean[ch]) *
                                  st.inv_std[ch]);
      }
    }
  }
}

/* `frames` audio frames (interleaved) or octet records into `dst`. */
void convert_samples(const State& st, const guint8* src, guint frames, guint8* dst) {
  if (st.media == Media::Octet) {
    convert_records(st, src, frames, dst);
    return;
  }
  /* audio, interleaved input (F, IC) -> (C, F) or (F, C), C = IC or 1 */
  const int ic = st.in_channels, c = st.channels;
  const bool nchw = st.cfg.layout == kNCHW;
  const bool s16 = GST_AUDIO_INFO_FORMAT(&st.ainfo) == GST_AUDIO_FORMAT_S16LE;
  const ChannelMode mode = st.cfg.channel_mode;
  auto sample = [&](guint f, int ch) -> double {
    const size_t i = static_cast<size_t>(f) * ic + ch;
    if (s16) {
      gint16 x;
      std::memcpy(&x, src + i * 2, 2);
      return GINT16_FROM_LE(x);
    }
    float x;
    std::memcpy(&x, src + i * 4, 4);
    return x;
  };
  float* out = reinterpret_cast<float*>(dst);
  for (guint f = 0; f < frames; ++f) {
    for (int ch = 0; ch < c; ++ch) {
      double v;
      if (mode == kChannelsAll) {
        v = sample(f, ch);
      } else if (mode == kChannelsSelect) {
        v = sample(f, static_cast<int>(st.cfg.channel));
      } else {
        v = 0.0;
        for (int k = 0; k < ic; ++k) v += sample(f, k);
        v /= ic;
      }
      const float r = st.native ? static_cast<float>(v)
                                : static_cast<float>((v * st.scale - st.mean[ch]) * st.inv_std[ch]);
      out[nchw ? static_cast<size_t>(ch) * frames + f : static_cast<size_t>(f) * c + ch] = r;
    }
  }
}

GstFlowReturn push_pending(GstJobConvert* self) {
  State* st = &self->impl->state;
  GstBuffer* out = st->pending;
  gst_buffer_unmap(out, &st->pending_map);
  st->pending = nullptr;
  GST_BUFFER_PTS(out) = st->first_pts;
  GST_BUFFER_DTS(out) = st->first_dts;
  if (GST_CLOCK_TIME_IS_VALID(st->first_pts) && GST_CLOCK_TIME_IS_VALID(st->end_ts) && st->end_ts >= st->first_pts)
    GST_BUFFER_DURATION(out) = st->end_ts - st->first_pts;
  st->filled = 0;
  st->first_pts = st->first_dts = st->end_ts = GST_CLOCK_TIME_NONE;
  jobflow::gst::add_tensor_meta(out, {st->out_spec});
  return gst_pad_push(self->srcpad, out);
}

GstFlowReturn chain_video(GstJobConvert* self, GstBuffer* buf) {
  State* st = &self->impl->state;
  GstVideoFrame frame;
  if (!gst_video_frame_map(&frame, &st->vinfo, buf, GST_MAP_READ)) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Could not map a video frame"),
                      ("buffer of %" G_GSIZE_FORMAT " bytes for a %d x %d frame", gst_buffer_get_size(buf),
                       GST_VIDEO_INFO_WIDTH(&st->vinfo), GST_VIDEO_INFO_HEIGHT(&st->vinfo)));
    gst_buffer_unref(buf);
    return GST_FLOW_ERROR;
  }
  if (!st->pending) {
    st->pending = jobflow::gst::new_tensor_buffer(st->out_bytes);
    gst_buffer_map(st->pending, &st->pending_map, GST_MAP_WRITE);
    st->first_pts = GST_BUFFER_PTS(buf);
    st->first_dts = GST_BUFFER_DTS(buf);
  }
  guint8* dst = st->pending_map.data + st->out_frame_bytes * st->filled;
  if (st->converter) {
    GstVideoFrame scaled;
    gst_video_frame_map(&scaled, &st->scaled_info, st->scaled.get(), GST_MAP_WRITE);
    gst_video_converter_frame(st->converter.get(), &frame, &scaled);
    convert_video(*st, &scaled, dst);
    gst_video_frame_unmap(&scaled);
  } else {
    convert_video(*st, &frame, dst);
  }
  gst_video_frame_unmap(&frame);
  if (st->cfg.frames_per_tensor == 1 && st->cfg.attach_frame)
    jobflow_buffer_add_frame_meta(st->pending, buf, st->caps.get(), GST_VIDEO_INFO_WIDTH(&st->scaled_info),
                                  GST_VIDEO_INFO_HEIGHT(&st->scaled_info), st->scale_x, st->scale_y, st->pad_x,
                                  st->pad_y);
  if (GST_BUFFER_PTS_IS_VALID(buf)) {
    GstClockTime dur = GST_BUFFER_DURATION_IS_VALID(buf) ? GST_BUFFER_DURATION(buf) : st->frame_duration;
    st->end_ts = GST_CLOCK_TIME_IS_VALID(dur) ? GST_BUFFER_PTS(buf) + dur : GST_CLOCK_TIME_NONE;
  }
  gst_buffer_unref(buf);
  if (++st->filled < st->cfg.frames_per_tensor) return GST_FLOW_OK;
  return push_pending(self);
}

GstFlowReturn chain_adapter(GstJobConvert* self, GstBuffer* buf) {
  State* st = &self->impl->state;
  GstAdapter* adapter = self->impl->adapter;
  gst_adapter_push(adapter, buf);
  const guint n = st->cfg.frames_per_tensor;
  const size_t chunk = st->unit_bytes * n;
  const size_t hop = st->unit_bytes * st->hop;
  GstFlowReturn ret = GST_FLOW_OK;
  for (;;) {
    if (st->skip_bytes > 0) {  // hop > window: the units between two windows
      const size_t k = std::min<size_t>(st->skip_bytes, gst_adapter_available(adapter));
      gst_adapter_flush(adapter, k);
      st->skip_bytes -= k;
      if (st->skip_bytes > 0) break;
    }
    if (ret != GST_FLOW_OK || gst_adapter_available(adapter) < chunk) break;
    guint64 distance = 0;
    GstClockTime pts = gst_adapter_prev_pts(adapter, &distance);
    if (GST_CLOCK_TIME_IS_VALID(pts) && distance > 0) {
      if (st->media == Media::Audio)
        pts += gst_util_uint64_scale_int(distance / st->unit_bytes, GST_SECOND, GST_AUDIO_INFO_RATE(&st->ainfo));
      else if (GST_CLOCK_TIME_IS_VALID(st->frame_duration))
        pts += distance / st->unit_bytes * st->frame_duration;
      else
        pts = GST_CLOCK_TIME_NONE;
    }
    GstBuffer* out = jobflow::gst::new_tensor_buffer(st->out_bytes);
    GstMapInfo map;
    gst_buffer_map(out, &map, GST_MAP_WRITE);
    const guint8* src = static_cast<const guint8*>(gst_adapter_map(adapter, chunk));
    convert_samples(*st, src, n, map.data);
    gst_adapter_unmap(adapter);
    /* The next window starts `hop` units after this one's start. */
    const size_t step = std::min(hop, gst_adapter_available(adapter));
    gst_adapter_flush(adapter, step);
    st->skip_bytes = hop - step;
    gst_buffer_unmap(out, &map);
    GST_BUFFER_PTS(out) = pts;
    if (GST_CLOCK_TIME_IS_VALID(st->frame_duration)) GST_BUFFER_DURATION(out) = st->frame_duration * n;
    jobflow::gst::add_tensor_meta(out, {st->out_spec});
    ret = gst_pad_push(self->srcpad, out);
  }
  return ret;
}

GstFlowReturn chain(GstPad*, GstObject* parent, GstBuffer* buf) {
  GstJobConvert* self = GST_JOB_CONVERT(parent);
  return jobflow::gst::guarded(GST_ELEMENT(self), "Conversion", GST_FLOW_ERROR, [&]() -> GstFlowReturn {
    switch (self->impl->state.media) {
      case Media::Video: return chain_video(self, buf);
      case Media::Audio:
      case Media::Octet: return chain_adapter(self, buf);
      case Media::None: break;
    }
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No caps before the first buffer"), (nullptr));
    gst_buffer_unref(buf);
    return GST_FLOW_NOT_NEGOTIATED;
  });
}

gboolean sink_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobConvert* self = GST_JOB_CONVERT(parent);
  return jobflow::gst::guarded(GST_ELEMENT(self), "Event handling", FALSE, [&]() -> gboolean {
    switch (GST_EVENT_TYPE(event)) {
      case GST_EVENT_CAPS: {
        GstCaps* caps;
        gst_event_parse_caps(event, &caps);
        const bool ok = configure(self, caps);
        gst_event_unref(event);
        return ok;
      }
      case GST_EVENT_EOS:
      case GST_EVENT_FLUSH_STOP:
      case GST_EVENT_SEGMENT:
        /* A new segment is a new timeline (concat's next file, a seek): a
         * window or tensor is never made of units from two of them, and the
         * pts of one begun in the old segment would mean nothing in the new. */
        if (GST_EVENT_TYPE(event) != GST_EVENT_FLUSH_STOP &&
            (self->impl->state.filled > 0 || gst_adapter_available(self->impl->adapter) > 0))
          GST_INFO_OBJECT(self, "%s: dropping %u frame(s) and %" G_GSIZE_FORMAT " byte(s) of an incomplete tensor",
                          GST_EVENT_TYPE_NAME(event), self->impl->state.filled,
                          gst_adapter_available(self->impl->adapter));
        drop_pending(&self->impl->state);
        gst_adapter_clear(self->impl->adapter);
        self->impl->state.skip_bytes = 0;
        break;
      default:
        break;
    }
    return gst_pad_event_default(pad, parent, event);
  });
}

gboolean src_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  GstJobConvert* self = GST_JOB_CONVERT(parent);
  return jobflow::gst::current_caps_latency_query(pad, parent, query, self->sinkpad, self->impl->latency.load());
}

GstStateChangeReturn change_state(GstElement* element, GstStateChange transition) {
  GstJobConvert* self = GST_JOB_CONVERT(element);
  try {
    if (transition == GST_STATE_CHANGE_READY_TO_PAUSED && !check_settings(self)) return GST_STATE_CHANGE_FAILURE;
    GstStateChangeReturn ret = GST_ELEMENT_CLASS(gst_job_convert_parent_class)->change_state(element, transition);
    if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) reset_state(self);
    return ret;
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, STATE_CHANGE, ("State change failed"), ("%s", e.what()));
    return GST_STATE_CHANGE_FAILURE;
  }
}

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_CONVERT(object)->impl->settings.with([&](Settings& s) {
    auto str = [&] {
      const gchar* v = g_value_get_string(value);
      return std::string(v ? v : "");
    };
    switch (prop_id) {
      case PROP_LAYOUT: s.layout = static_cast<Layout>(g_value_get_enum(value)); break;
      case PROP_DTYPE: s.dtype = static_cast<OutType>(g_value_get_enum(value)); break;
      case PROP_SCALE: s.scale = g_value_get_double(value); break;
      case PROP_MEAN: s.mean = str(); break;
      case PROP_STD: s.std_dev = str(); break;
      case PROP_FRAMES_PER_TENSOR: s.frames_per_tensor = g_value_get_uint(value); break;
      case PROP_INPUT_DIMS: s.input_dims = str(); break;
      case PROP_INPUT_TYPE: s.input_type = str(); break;
      case PROP_HOP: s.hop = g_value_get_uint(value); break;
      case PROP_CHANNEL_MODE: s.channel_mode = static_cast<ChannelMode>(g_value_get_enum(value)); break;
      case PROP_CHANNEL: s.channel = g_value_get_uint(value); break;
      case PROP_FIELDS: s.fields = str(); break;
      case PROP_RECORD_SIZE: s.record_size = g_value_get_uint(value); break;
      case PROP_WIDTH: s.width = g_value_get_uint(value); break;
      case PROP_HEIGHT: s.height = g_value_get_uint(value); break;
      case PROP_RESIZE: s.resize = static_cast<Resize>(g_value_get_enum(value)); break;
      case PROP_PAD_VALUE: s.pad_value = g_value_get_uint(value); break;
      case PROP_ATTACH_FRAME: s.attach_frame = g_value_get_boolean(value); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GST_JOB_CONVERT(object)->impl->settings.with([&](const Settings& s) {
    switch (prop_id) {
      case PROP_LAYOUT: g_value_set_enum(value, s.layout); break;
      case PROP_DTYPE: g_value_set_enum(value, s.dtype); break;
      case PROP_SCALE: g_value_set_double(value, s.scale); break;
      case PROP_MEAN: g_value_set_string(value, s.mean.c_str()); break;
      case PROP_STD: g_value_set_string(value, s.std_dev.c_str()); break;
      case PROP_FRAMES_PER_TENSOR: g_value_set_uint(value, s.frames_per_tensor); break;
      case PROP_INPUT_DIMS: g_value_set_string(value, s.input_dims.c_str()); break;
      case PROP_INPUT_TYPE: g_value_set_string(value, s.input_type.c_str()); break;
      case PROP_HOP: g_value_set_uint(value, s.hop); break;
      case PROP_CHANNEL_MODE: g_value_set_enum(value, s.channel_mode); break;
      case PROP_CHANNEL: g_value_set_uint(value, s.channel); break;
      case PROP_FIELDS: g_value_set_string(value, s.fields.c_str()); break;
      case PROP_RECORD_SIZE: g_value_set_uint(value, s.record_size); break;
      case PROP_WIDTH: g_value_set_uint(value, s.width); break;
      case PROP_HEIGHT: g_value_set_uint(value, s.height); break;
      case PROP_RESIZE: g_value_set_enum(value, s.resize); break;
      case PROP_PAD_VALUE: g_value_set_uint(value, s.pad_value); break;
      case PROP_ATTACH_FRAME: g_value_set_boolean(value, s.attach_frame); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

}  // namespace

static void gst_job_convert_class_init(GstJobConvertClass* klass) {
  GObjectClass* gobject_class = jobflow::gst::init_object_class<GstJobConvert>(klass, set_property, get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  element_class->change_state = change_state;

  const auto flags = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  g_object_class_install_property(
      gobject_class, PROP_LAYOUT,
      g_param_spec_enum("layout", "Layout", "Memory order of the output tensor", layout_get_type(), kNCHW, flags));
  g_object_class_install_property(
      gobject_class, PROP_DTYPE,
      g_param_spec_enum("dtype", "Data type",
                        "Element type of the output tensor: float32 applies scale/mean/std; uint8 and native copy "
                        "the input values",
                        dtype_get_type(), kOutFloat32, flags));
  g_object_class_install_property(
      gobject_class, PROP_SCALE,
      g_param_spec_double("scale", "Scale",
                          "Factor applied to every input value before mean/std (0 = automatic: 1/255 for 8-bit "
                          "input, 1/32768 for S16LE, 1 otherwise)",
                          -G_MAXDOUBLE, G_MAXDOUBLE, kDefaultScale, flags));
  g_object_class_install_property(
      gobject_class, PROP_MEAN,
      g_param_spec_string("mean", "Mean",
                          "Comma-separated mean per channel, subtracted after scaling (one value = all channels; "
                          "empty = 0)",
                          "", flags));
  g_object_class_install_property(
      gobject_class, PROP_STD,
      g_param_spec_string("std", "Standard deviation",
                          "Comma-separated standard deviation per channel, divided after the mean (one value = all "
                          "channels; empty = 1)",
                          "", flags));
  g_object_class_install_property(
      gobject_class, PROP_FRAMES_PER_TENSOR,
      g_param_spec_uint("frames-per-tensor", "Frames per tensor",
                        "Video frames (N), audio frames (samples per channel) or octet records per output tensor: "
                        "the window length of audio and octet streams",
                        1, G_MAXINT, kDefaultFramesPerTensor, flags));
  g_object_class_install_property(
      gobject_class, PROP_HOP,
      g_param_spec_uint("hop", "Hop",
                        "Audio and octet streams: audio frames / records from one window's start to the next's "
                        "(0 = frames-per-tensor: windows side by side; less overlaps them, more skips the units "
                        "between them)",
                        0, G_MAXINT, 0, flags));
  g_object_class_install_property(
      gobject_class, PROP_CHANNEL_MODE,
      g_param_spec_enum("channel-mode", "Channel mode",
                        "Audio: every channel (all), their mean as one channel (mix), or channel 'channel' (select)",
                        channel_mode_get_type(), kChannelsAll, flags));
  g_object_class_install_property(
      gobject_class, PROP_CHANNEL,
      g_param_spec_uint("channel", "Channel", "Audio with channel-mode=select: the channel kept (from 0)", 0,
                        G_MAXINT, 0, flags));
  g_object_class_install_property(
      gobject_class, PROP_FIELDS,
      g_param_spec_string("fields", "Fields",
                          "application/octet-stream records: the fields in order as TYPE[:COUNT], comma-separated "
                          "(\"int64,float32:6\"); each value is one channel of mean/std; instead of input-dims",
                          "", flags));
  g_object_class_install_property(
      gobject_class, PROP_RECORD_SIZE,
      g_param_spec_uint("record-size", "Record size",
                        "application/octet-stream: bytes of one record, padding after the values included (0 = "
                        "the values' size)",
                        0, G_MAXINT, 0, flags));
  g_object_class_install_property(
      gobject_class, PROP_INPUT_DIMS,
      g_param_spec_string("input-dims", "Input dimensions",
                          "application/octet-stream only: shape of one unit, innermost first (\"28:28:1\")", "",
                          flags));
  g_object_class_install_property(
      gobject_class, PROP_INPUT_TYPE,
      g_param_spec_string("input-type", "Input type",
                          "application/octet-stream only: element type of the bytes (float16, float32, float64, "
                          "bfloat16, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool)",
                          "uint8", flags));

  g_object_class_install_property(
      gobject_class, PROP_WIDTH,
      g_param_spec_uint("width", "Width", "Video: the tensor's width; frames are scaled to it (0 = the frame's)", 0,
                        G_MAXINT, 0, flags));
  g_object_class_install_property(
      gobject_class, PROP_HEIGHT,
      g_param_spec_uint("height", "Height", "Video: the tensor's height; frames are scaled to it (0 = the frame's)", 0,
                        G_MAXINT, 0, flags));
  g_object_class_install_property(
      gobject_class, PROP_RESIZE,
      g_param_spec_enum("resize", "Resize", "Video: how a frame of another size fits width x height",
                        resize_get_type(), kStretch, flags));
  g_object_class_install_property(
      gobject_class, PROP_PAD_VALUE,
      g_param_spec_uint("pad-value", "Pad value",
                        "Video, resize=letterbox: the 8-bit value of the padding around the frame (before scale, "
                        "mean and std; YOLO models use 114)",
                        0, 255, 0, flags));
  g_object_class_install_property(
      gobject_class, PROP_ATTACH_FRAME,
      g_param_spec_boolean("attach-frame", "Attach frame",
                           "Video, frames-per-tensor=1: attach the frame and the scaling to each tensor "
                           "(JobflowFrameMeta), for jobdecode to put its results on the frame",
                           TRUE, flags));

  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  gst_element_class_set_static_metadata(element_class, "Jobflow tensor converter", "Converter/Tensor",
                                        "Converts raw video, audio or bytes into a tensor (other/tensors) with "
                                        "layout, scaling, normalisation and frame batching",
                                        "Jobflow");
  gst_type_mark_as_plugin_api(layout_get_type(), static_cast<GstPluginAPIFlags>(0));
  gst_type_mark_as_plugin_api(dtype_get_type(), static_cast<GstPluginAPIFlags>(0));
  gst_type_mark_as_plugin_api(channel_mode_get_type(), static_cast<GstPluginAPIFlags>(0));
  gst_type_mark_as_plugin_api(resize_get_type(), static_cast<GstPluginAPIFlags>(0));
}

static void gst_job_convert_init(GstJobConvert* self) {
  self->impl = new Impl();
  self->sinkpad =
      jobflow::gst::add_pad(GST_ELEMENT(self), "sink", chain, sink_event, jobflow::gst::template_caps_query);
  self->srcpad = jobflow::gst::add_pad(GST_ELEMENT(self), "src", nullptr, nullptr, src_query);
}

gboolean jobflow_register_jobconvert(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobconvert_debug, "jobconvert", 0, "Jobflow tensor converter");
  return gst_element_register(plugin, "jobconvert", GST_RANK_NONE, GST_TYPE_JOB_CONVERT);
}

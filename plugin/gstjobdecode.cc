/* jobdecode: see gstjobdecode.h and docs/elements.md. A GstBaseTransform:
 * the base class keeps the segment and answers queries; this file decodes.
 * Files (labels, anchors, dictionary) are read in start() and dropped in
 * stop(); the tensor layout comes from the caps. The numeric work is in
 * plain C++ (the decode/ folder); here are the caps, metas and messages.
 *
 * Text modes (labels, ctc) negotiate as usual: text/x-raw for any tensors.
 * Frame modes (boxes, text-regions, segmentation) learn their output caps
 * from the first buffer (the frame it carries, or the tensor itself):
 * sink_event() accepts the CAPS without negotiating and holds the sticky
 * events that must follow the output caps (segment, tags);
 * submit_input_buffer() works out the caps for the buffer and marks the src
 * pad for reconfiguration, so the base class negotiates them (calling
 * transform_caps, which answers them) before the buffer; the held events
 * then go out, before the buffer. */
#include "gstjobdecode.h"

#include "decode/boxes.h"
#include "decode/segmentation.h"
#include "decode/text.h"
#include "decode_dictionary.h"
#include "element_util.h"
#include "jobflow_analytics.h"
#include "jobflow_crop_meta.h"
#include "jobflow_frame_meta.h"
#include "jobflow_meta.h"
#include "jobmux_meta.h"
#include "tensor_caps.h"

#include <gst/video/video.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobdecode_debug);
#define GST_CAT_DEFAULT jobdecode_debug

namespace {

using jobflow::DType;
using jobflow::Shape;
using jobflow::Tensor;
using jobflow::TensorSpec;
namespace dec = jobflow::decode;

enum Mode { kModeLabels = 0, kModeBoxes = 1, kModeSegmentation = 2, kModeTextRegions = 3, kModeCtc = 4 };
enum Scheme { kSchemeYolov8 = 0, kSchemeYolov5 = 1, kSchemeSsd = 2, kSchemeDetections = 3 };

bool frame_mode(Mode m) { return m == kModeBoxes || m == kModeSegmentation || m == kModeTextRegions; }

constexpr guint kDefaultTopK = 1;
constexpr double kDefaultThreshold = 0.0;
constexpr gboolean kDefaultSoftmax = TRUE;
constexpr gboolean kDefaultMessage = TRUE;
constexpr double kDefaultScoreThreshold = 0.25;
constexpr double kDefaultIouThreshold = 0.45;
constexpr guint kDefaultMaxDetections = 100;
constexpr const char* kDefaultBoxScales = "10,10,5,5";
constexpr double kDefaultBinaryThreshold = 0.3;
constexpr double kDefaultBoxThreshold = 0.6;
constexpr double kDefaultUnclipRatio = 1.5;
constexpr double kDefaultMinSize = 3.0;
constexpr gint kDefaultBlankIndex = 0;
constexpr const char* kDictionaryKey = "character";

struct Settings {
  Mode mode = kModeLabels;
  std::string labels_path;
  guint top_k = kDefaultTopK;
  double threshold = kDefaultThreshold;
  bool softmax = kDefaultSoftmax;
  bool message = kDefaultMessage;
  /* boxes */
  Scheme scheme = kSchemeYolov8;
  double score_threshold = kDefaultScoreThreshold;
  double iou_threshold = kDefaultIouThreshold;
  guint max_detections = kDefaultMaxDetections;
  std::string anchors_path;
  std::string box_scales = kDefaultBoxScales;
  /* text-regions */
  double binary_threshold = kDefaultBinaryThreshold;
  double box_threshold = kDefaultBoxThreshold;
  double unclip_ratio = kDefaultUnclipRatio;
  double min_size = kDefaultMinSize;
  /* segmentation */
  bool mask_video = false;
  /* ctc */
  std::string dictionary_path;
  gint blank_index = kDefaultBlankIndex;
  /* second stage: the input is jobcrop's crops */
  bool per_region = false;
};

/* Streaming thread only (and start/stop). */
struct State {
  Mode mode = kModeLabels;          // fixed from start() to stop()
  bool mask_video = false;          // idem
  bool per_region = false;          // idem
  std::vector<std::string> labels;  // from the labels file (start)
  std::vector<dec::Anchor> anchors;
  float box_scales[4] = {10, 10, 5, 5};
  std::vector<std::string> dictionary;
  /* from the caps */
  std::vector<TensorSpec> specs;
  GstCaps* in_caps = nullptr;
  DType dtype = DType::Float32;     // text modes: the one tensor
  size_t classes = 0;               // innermost dim
  size_t rows = 0;                  // every other element (labels) / leading dims (ctc)
  size_t steps = 0;                 // ctc: time steps per row
  size_t nbytes = 0;
  /* frame modes */
  std::vector<GstEvent*> held;      // sticky events waiting for the output caps
  /* per-region: the frame of the chunks so far, when it has more to come */
  GstBuffer* pending = nullptr;
};

/* The output is a frame (or the input tensors): the frame modes, and every
 * mode per region. */
bool frame_output(const State& st) { return frame_mode(st.mode) || st.per_region; }

void clear_state(State* st) {
  gst_clear_caps(&st->in_caps);
  gst_clear_buffer(&st->pending);
  for (GstEvent* e : st->held) gst_event_unref(e);
  *st = State{};
}

struct Impl {
  ~Impl() {
    clear_state(&state);
    gst_clear_caps(&out_caps);
  }
  jobflow::gst::Locked<Settings> settings;
  State state;
  /* Frame modes: the output caps decided at the last buffer. Set by the
   * streaming thread, read by caps queries from any thread. */
  std::mutex out_caps_mu;
  GstCaps* out_caps = nullptr;
  GstCaps* decided_caps() {  // a reference, or null
    std::lock_guard<std::mutex> lk(out_caps_mu);
    return out_caps ? gst_caps_ref(out_caps) : nullptr;
  }
  void set_decided_caps(GstCaps* caps) {  // caps: null or borrowed
    GstCaps* old;
    {
      std::lock_guard<std::mutex> lk(out_caps_mu);
      old = out_caps;
      out_caps = caps ? gst_caps_ref(caps) : nullptr;
    }
    if (old) gst_caps_unref(old);
  }
};

GstStaticPadTemplate sink_template =
    GST_STATIC_PAD_TEMPLATE("sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS("other/tensors, format=(string)static"));

/* Text in the text modes; in frame modes the frame's video, or the input
 * tensors themselves when no frame came with them. */
GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE("src", GST_PAD_SRC, GST_PAD_ALWAYS,
                            GST_STATIC_CAPS("text/x-raw, format=(string)utf8; video/x-raw; "
                                            "other/tensors, format=(string)static"));

/* What each mode takes (the sink pad answers caps queries with it). */
const char* kScoresCaps =
    "other/tensors, format=(string)static, num_tensors=(int)1, types=(string){ float32, float64 }";

enum {
  PROP_0,
  PROP_MODE,
  PROP_LABELS,
  PROP_TOP_K,
  PROP_THRESHOLD,
  PROP_SOFTMAX,
  PROP_MESSAGE,
  PROP_SCHEME,
  PROP_SCORE_THRESHOLD,
  PROP_IOU_THRESHOLD,
  PROP_MAX_DETECTIONS,
  PROP_ANCHORS,
  PROP_BOX_SCALES,
  PROP_BINARY_THRESHOLD,
  PROP_BOX_THRESHOLD,
  PROP_UNCLIP_RATIO,
  PROP_MIN_SIZE,
  PROP_MASK_VIDEO,
  PROP_DICTIONARY,
  PROP_BLANK_INDEX,
  PROP_PER_REGION,
};

GType mode_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {
      {kModeLabels, "Top-k class labels with their scores (text)", "labels"},
      {kModeBoxes, "Detector output to regions on the frame", "boxes"},
      {kModeSegmentation, "Per-class scores or a class map to a mask on the frame", "segmentation"},
      {kModeTextRegions, "A DB text detector's probability map to rotated regions on the frame", "text-regions"},
      {kModeCtc, "CTC greedy decoding of a text recogniser's scores (text)", "ctc"},
      {0, nullptr, nullptr}};
  return jobflow::gst::enum_type(&type, "GstJobDecodeMode", values);
}

GType scheme_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {
      {kSchemeYolov8, "YOLOv8: (cx, cy, w, h, class scores) per candidate", "yolov8"},
      {kSchemeYolov5, "YOLOv5: (cx, cy, w, h, objectness, class scores) per candidate", "yolov5"},
      {kSchemeSsd, "SSD: box deltas and class scores per anchor (anchors file)", "ssd"},
      {kSchemeDetections, "Boxes (x1, y1, x2, y2), scores and labels as the model gives them", "detections"},
      {0, nullptr, nullptr}};
  return jobflow::gst::enum_type(&type, "GstJobDecodeScheme", values);
}

const char* mode_name(Mode m) {
  GEnumValue* v = g_enum_get_value(G_ENUM_CLASS(g_type_class_peek(mode_get_type())), m);
  return v ? v->value_nick : "?";
}

}  // namespace

struct _GstJobDecode {
  GstBaseTransform parent;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobDecode, gst_job_decode, GST_TYPE_BASE_TRANSFORM)

namespace {

/* ------------------------------------------------------------ files */

/* Reads a file named by `prop` into `text`; posts RESOURCE errors naming
 * the property. */
bool read_file(GstJobDecode* self, const char* what, const char* prop, const std::string& path, std::string* text) {
  gchar* contents = nullptr;
  gsize length = 0;
  GError* err = nullptr;
  if (!g_file_get_contents(path.c_str(), &contents, &length, &err)) {
    if (g_error_matches(err, G_FILE_ERROR, G_FILE_ERROR_NOENT))
      GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("%s \"%s\" (property '%s') does not exist", what, path.c_str(), prop),
                        ("%s", err->message));
    else
      GST_ELEMENT_ERROR(self, RESOURCE, OPEN_READ, ("Could not read %s \"%s\" (property '%s')", what, path.c_str(), prop),
                        ("%s", err->message));
    g_error_free(err);
    return false;
  }
  text->assign(contents, length);
  g_free(contents);
  if (!g_utf8_validate(text->data(), static_cast<gssize>(text->size()), nullptr)) {
    GST_ELEMENT_ERROR(self, RESOURCE, READ, ("%s \"%s\" (property '%s') is not UTF-8 text", what, path.c_str(), prop),
                      (nullptr));
    return false;
  }
  return true;
}

/* Reads the files the settings name: labels (every mode), anchors (ssd),
 * dictionary (ctc). */
bool load_files(GstJobDecode* self, const Settings& cfg) {
  State& st = self->impl->state;
  st.labels.clear();
  if (cfg.labels_path.empty()) {
    GST_INFO_OBJECT(self, "no labels file: class indices are the labels");
  } else {
    std::string text;
    if (!read_file(self, "Labels file", "labels", cfg.labels_path, &text)) return false;
    st.labels = dec::split_lines(text);
    GST_INFO_OBJECT(self, "%zu labels from %s", st.labels.size(), cfg.labels_path.c_str());
  }
  if (cfg.mode == kModeBoxes) {
    std::vector<double> scales;
    gchar** parts = g_strsplit(cfg.box_scales.c_str(), ",", -1);
    bool ok = g_strv_length(parts) == 4;
    for (guint i = 0; ok && parts[i]; ++i) {
      gchar* end = nullptr;
      const double v = g_ascii_strtod(g_strstrip(parts[i]), &end);
      ok = end != parts[i] && *end == '\0' && v != 0.0 && std::isfinite(v);
      st.box_scales[i] = static_cast<float>(v);
    }
    g_strfreev(parts);
    if (!ok) {
      GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("Invalid value for property 'box-scales': \"%s\"", cfg.box_scales.c_str()),
                        ("expected four non-zero numbers \"x,y,w,h\" (the default is %s)", kDefaultBoxScales));
      return false;
    }
    if (cfg.scheme == kSchemeSsd) {
      if (cfg.anchors_path.empty()) {
        GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("Property 'anchors' is not set: scheme=ssd needs the anchors file"),
                          ("one anchor per line, \"cx cy w h\" normalised to the model input"));
        return false;
      }
      std::string text, error;
      if (!read_file(self, "Anchors file", "anchors", cfg.anchors_path, &text)) return false;
      if (!dec::parse_anchors(text, &st.anchors, &error)) {
        GST_ELEMENT_ERROR(self, RESOURCE, READ, ("Anchors file \"%s\" (property 'anchors'): %s", cfg.anchors_path.c_str(),
                                                 error.c_str()),
                          (nullptr));
        return false;
      }
    }
  }
  if (cfg.mode == kModeCtc) {
    if (cfg.dictionary_path.empty()) {
      GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("Property 'dictionary' is not set: mode=ctc needs the characters"),
                        ("a text file with one entry per line, or the recogniser's .onnx file (metadata key \"%s\")",
                         kDictionaryKey));
      return false;
    }
    std::string text, error;
    if (!jobflow::gst::read_dictionary_text(cfg.dictionary_path, kDictionaryKey, &text, &error)) {
      GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("Dictionary (property 'dictionary'): %s", error.c_str()), (nullptr));
      return false;
    }
    st.dictionary = dec::split_lines(text);
    GST_INFO_OBJECT(self, "%zu dictionary entries from %s", st.dictionary.size(), cfg.dictionary_path.c_str());
  }
  return true;
}

std::string label_of(const State& st, size_t index) {
  if (index < st.labels.size()) return st.labels[index];
  return std::to_string(index);
}

void times_of(GstJobDecode* self, GstClockTime pts, GstClockTime* stream, GstClockTime* running) {
  const GstSegment& segment = GST_BASE_TRANSFORM(self)->segment;  // kept by the base class
  const bool timed = segment.format == GST_FORMAT_TIME && GST_CLOCK_TIME_IS_VALID(pts);
  *running = timed ? gst_segment_to_running_time(&segment, GST_FORMAT_TIME, pts) : GST_CLOCK_TIME_NONE;
  *stream = timed ? gst_segment_to_stream_time(&segment, GST_FORMAT_TIME, pts) : GST_CLOCK_TIME_NONE;
}

/* ------------------------------------------------------------ labels */

/* The best `top-k` classes of row r of a scores buffer, best first, with
 * their scores (after softmax when on), stopping below `threshold`. */
std::vector<std::pair<size_t, double>> top_classes(const State& st, const Settings& cfg, const guint8* data, size_t r) {
  const size_t k = std::min<size_t>(cfg.top_k, st.classes);
  std::vector<double> scores(st.classes);
  std::vector<size_t> order(st.classes);
  for (size_t c = 0; c < st.classes; ++c) {
    const size_t i = r * st.classes + c;
    if (st.dtype == DType::Float32) {
      float v;
      std::memcpy(&v, data + i * 4, 4);
      scores[c] = v;
    } else {
      std::memcpy(&scores[c], data + i * 8, 8);
    }
  }
  if (cfg.softmax) {
    const double mx = *std::max_element(scores.begin(), scores.end());
    double sum = 0.0;
    for (double& v : scores) sum += (v = std::exp(v - mx));
    for (double& v : scores) v /= sum;
  }
  std::iota(order.begin(), order.end(), size_t{0});
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](size_t a, size_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  std::vector<std::pair<size_t, double>> best;
  for (size_t j = 0; j < k; ++j) {
    if (cfg.threshold > 0.0 && scores[order[j]] < cfg.threshold) break;
    best.emplace_back(order[j], scores[order[j]]);
  }
  return best;
}

/* Decodes one buffer of scores into `text` (rows joined by newlines) and
 * the rows' bus messages. */
void decode_labels(GstJobDecode* self, const guint8* data, GstClockTime pts, std::string* out_text,
                   std::vector<GstMessage*>* messages) {
  const State& st = self->impl->state;
  const Settings cfg = self->impl->settings.copy();
  GstClockTime running, stream;
  times_of(self, pts, &stream, &running);
  std::string& text = *out_text;
  for (size_t r = 0; r < st.rows; ++r) {
    const std::vector<std::pair<size_t, double>> best = top_classes(st, cfg, data, r);
    GValue labels = G_VALUE_INIT, values = G_VALUE_INIT, indices = G_VALUE_INIT, item = G_VALUE_INIT;
    g_value_init(&labels, GST_TYPE_ARRAY);
    g_value_init(&values, GST_TYPE_ARRAY);
    g_value_init(&indices, GST_TYPE_ARRAY);
    std::string line;
    for (const auto& [c, score] : best) {
      const std::string label = label_of(st, c);
      gchar num[32];
      g_ascii_formatd(num, sizeof num, "%.2f", score);
      if (!line.empty()) line += ", ";
      line += label + " (" + num + ")";
      if (cfg.message) {
        g_value_init(&item, G_TYPE_STRING);
        g_value_set_string(&item, label.c_str());
        gst_value_array_append_and_take_value(&labels, &item);
        item = G_VALUE_INIT;
        g_value_init(&item, G_TYPE_DOUBLE);
        g_value_set_double(&item, score);
        gst_value_array_append_and_take_value(&values, &item);
        item = G_VALUE_INIT;
        g_value_init(&item, G_TYPE_INT);
        g_value_set_int(&item, static_cast<gint>(c));
        gst_value_array_append_and_take_value(&indices, &item);
        item = G_VALUE_INIT;
      }
    }
    if (cfg.message) {
      GstStructure* s = gst_structure_new(JOBFLOW_LABELS_MESSAGE_NAME, "frame", G_TYPE_UINT, static_cast<guint>(r),
                                          "timestamp", G_TYPE_UINT64, pts, "stream-time", G_TYPE_UINT64, stream,
                                          "running-time", G_TYPE_UINT64, running, "text", G_TYPE_STRING,
                                          line.c_str(), nullptr);
      gst_structure_take_value(s, "labels", &labels);
      gst_structure_take_value(s, "scores", &values);
      gst_structure_take_value(s, "indices", &indices);
      messages->push_back(gst_message_new_element(GST_OBJECT(self), s));
    } else {
      g_value_unset(&labels);
      g_value_unset(&values);
      g_value_unset(&indices);
    }
    if (r > 0) text += "\n";
    text += line;
  }
}

/* ------------------------------------------------------------ ctc */

/* One line of text per row of (rows, steps, classes) scores. */
void decode_ctc(GstJobDecode* self, const Tensor& scores, GstClockTime pts, std::string* out_text,
                std::vector<GstMessage*>* messages) {
  const State& st = self->impl->state;
  const Settings cfg = self->impl->settings.copy();
  GstClockTime running, stream;
  times_of(self, pts, &stream, &running);
  const float* data = scores.data<float>();
  /* PP-OCR's recognisers have one class more than blank + dictionary: " " */
  std::vector<std::string> dict = st.dictionary;
  if (st.classes == dict.size() + 2) dict.push_back(" ");
  for (size_t r = 0; r < st.rows; ++r) {
    const dec::CtcResult res =
        dec::ctc_greedy(data + r * st.steps * st.classes, st.steps, st.classes, cfg.blank_index, cfg.softmax);
    const std::string line = dec::ctc_text(res.classes, dict, cfg.blank_index);
    if (cfg.message)
      messages->push_back(gst_message_new_element(
          GST_OBJECT(self),
          gst_structure_new(JOBFLOW_TEXT_MESSAGE_NAME, "frame", G_TYPE_UINT, static_cast<guint>(r), "timestamp",
                            G_TYPE_UINT64, pts, "stream-time", G_TYPE_UINT64, stream, "running-time", G_TYPE_UINT64,
                            running, "text", G_TYPE_STRING, line.c_str(), "confidence", G_TYPE_DOUBLE,
                            static_cast<double>(res.confidence), nullptr)));
    if (r > 0) *out_text += "\n";
    *out_text += line;
  }
}

/* ------------------------------------------------------------ frame modes */

/* Model-input pixels -> output pixels (frame pixels with a frame meta,
 * else unchanged), and the output's size for clamping (0: none). */
struct Geometry {
  const JobflowFrameMeta* frame = nullptr;
  double map_sx = 1, map_sy = 1;  // decoder map pixels -> model pixels (text-regions, segmentation)
  int out_w = 0, out_h = 0;
  void to_output(double* x, double* y) const {
    *x *= map_sx;
    *y *= map_sy;
    if (frame) jobflow_frame_meta_to_frame(frame, x, y);
  }
};

/* Leading dims (all but the last `keep`) multiply to 1: one frame. */
bool one_frame(const Shape& s, size_t keep) {
  if (s.size() < keep) return false;
  int64_t n = 1;
  for (size_t i = 0; i + keep < s.size(); ++i) n *= s[i];
  return n == 1;
}

/* The shape error of a frame-mode tensor. */
[[noreturn]] void shape_error(const char* what, const Shape& s) {
  throw std::runtime_error(std::string(what) + ", got " + jobflow::shape_str(s));
}

/* Decodes the boxes of one frame (model-input pixels). Throws
 * std::runtime_error with a message naming the tensor on a mismatch. */
std::vector<dec::Box> decode_boxes(const State& st, const Settings& cfg, const std::vector<Tensor>& t,
                                   const JobflowFrameMeta* fm) {
  const float thr = static_cast<float>(cfg.score_threshold);
  std::vector<dec::Box> boxes;
  switch (cfg.scheme) {
    case kSchemeYolov8:
    case kSchemeYolov5: {
      const Shape& s = t[0].shape();
      const size_t extra = cfg.scheme == kSchemeYolov8 ? 4 : 5;
      if (s.size() < 2 || !one_frame(s, 2) || s[s.size() - 2] < 1 || s.back() < 1)
        shape_error(cfg.scheme == kSchemeYolov8 ? "scheme=yolov8 needs a (1, 4 + C, N) or (1, N, 4 + C) tensor"
                                                : "scheme=yolov5 needs a (1, N, 5 + C) or (1, 5 + C, N) tensor",
                    s);
      const size_t a = static_cast<size_t>(s[s.size() - 2]), b = static_cast<size_t>(s.back());
      bool channels_first;
      if (!st.labels.empty()) {
        const size_t want = extra + st.labels.size();
        if (a == want && b != want)
          channels_first = true;
        else if (b == want)
          channels_first = false;
        else
          throw std::runtime_error("scheme=" + std::string(cfg.scheme == kSchemeYolov8 ? "yolov8" : "yolov5") +
                                   " with " + std::to_string(st.labels.size()) + " labels expects " +
                                   std::to_string(want) + " values per candidate, got " + jobflow::shape_str(s));
      } else {
        channels_first = a < b;  // there are more candidates than values per candidate
      }
      const float* d = t[0].data<float>();
      const dec::Table table = channels_first ? dec::Table::transposed(d, b, a) : dec::Table::row_major(d, a, b);
      if (table.cols <= extra) shape_error("a detection head needs more values per candidate than the box", s);
      boxes = cfg.scheme == kSchemeYolov8 ? dec::decode_yolov8(table, thr) : dec::decode_yolov5(table, thr);
      break;
    }
    case kSchemeSsd: {
      if (t.size() != 2) throw std::runtime_error("scheme=ssd needs two tensors (box deltas, class scores), got " +
                                                  std::to_string(t.size()));
      const Shape& d = t[0].shape();
      const Shape& c = t[1].shape();
      if (d.size() < 2 || d.back() != 4 || !one_frame(d, 2)) shape_error("scheme=ssd: tensor 0 (box deltas) must be (1, N, 4)", d);
      if (c.size() < 2 || !one_frame(c, 2) || c[c.size() - 2] != d[d.size() - 2])
        shape_error(("scheme=ssd: tensor 1 (class scores) must be (1, N, C) with N = " + std::to_string(d[d.size() - 2]))
                        .c_str(),
                    c);
      const size_t n = static_cast<size_t>(d[d.size() - 2]);
      if (st.anchors.size() != n)
        throw std::runtime_error("scheme=ssd: the anchors file (property 'anchors') has " +
                                 std::to_string(st.anchors.size()) + " anchors, the model " + std::to_string(n));
      dec::SsdParams p;
      std::copy(st.box_scales, st.box_scales + 4, p.scale);
      p.softmax = cfg.softmax;
      p.input_width = fm ? static_cast<float>(fm->model_width) : 1.f;
      p.input_height = fm ? static_cast<float>(fm->model_height) : 1.f;
      boxes = dec::decode_ssd(dec::Table::row_major(t[0].data<float>(), n, 4),
                              dec::Table::row_major(t[1].data<float>(), n, static_cast<size_t>(c.back())), st.anchors,
                              p, thr);
      break;
    }
    case kSchemeDetections: {
      /* boxes: the tensor whose last dim is 4; labels: an integer tensor;
       * scores: the first other one (labels: a second float one) */
      int ib = -1, is = -1, il = -1;
      for (size_t i = 0; i < t.size(); ++i)
        if (ib < 0 && t[i].ndim() >= 2 && t[i].shape().back() == 4) ib = static_cast<int>(i);
      for (size_t i = 0; i < st.specs.size(); ++i) {
        if (static_cast<int>(i) == ib) continue;
        if (!jobflow::is_floating(st.specs[i].dtype) && il < 0)
          il = static_cast<int>(i);
        else if (is < 0)
          is = static_cast<int>(i);
        else if (il < 0)
          il = static_cast<int>(i);
      }
      if (ib < 0 || is < 0)
        throw std::runtime_error("scheme=detections needs a (N, 4) boxes tensor and a (N,) scores tensor (and "
                                 "optionally (N,) labels), got " + std::to_string(t.size()) + " tensor(s)");
      const Shape& bs = t[static_cast<size_t>(ib)].shape();
      const size_t n = static_cast<size_t>(bs[bs.size() - 2]);
      if (!one_frame(bs, 2)) shape_error("scheme=detections: boxes must be (1, N, 4) or (N, 4)", bs);
      if (static_cast<size_t>(t[static_cast<size_t>(is)].numel()) != n ||
          (il >= 0 && static_cast<size_t>(t[static_cast<size_t>(il)].numel()) != n))
        throw std::runtime_error("scheme=detections: " + std::to_string(n) + " boxes but scores " +
                                 jobflow::shape_str(t[static_cast<size_t>(is)].shape()) +
                                 (il >= 0 ? " and labels " + jobflow::shape_str(t[static_cast<size_t>(il)].shape()) : ""));
      boxes = dec::decode_detections(dec::Table::row_major(t[static_cast<size_t>(ib)].data<float>(), n, 4),
                                     t[static_cast<size_t>(is)].data<float>(),
                                     il >= 0 ? t[static_cast<size_t>(il)].data<float>() : nullptr, thr);
      break;
    }
  }
  return dec::nms(std::move(boxes), static_cast<float>(cfg.iou_threshold), cfg.max_detections);
}

/* Adds the boxes as regions to `meta`, in output pixels, clamped to the
 * output; boxes with nothing left are skipped. */
void add_regions(const State& st, const std::vector<dec::Box>& boxes, const Geometry& g,
                 JobflowAnalyticsRelationMeta* meta) {
  for (const dec::Box& b : boxes) {
    double x1 = b.x1, y1 = b.y1, x2 = b.x2, y2 = b.y2;
    g.to_output(&x1, &y1);
    g.to_output(&x2, &y2);
    if (g.out_w > 0) {
      x1 = std::clamp(x1, 0.0, static_cast<double>(g.out_w));
      x2 = std::clamp(x2, 0.0, static_cast<double>(g.out_w));
    }
    if (g.out_h > 0) {
      y1 = std::clamp(y1, 0.0, static_cast<double>(g.out_h));
      y2 = std::clamp(y2, 0.0, static_cast<double>(g.out_h));
    }
    const gint ix = static_cast<gint>(std::lround(x1)), iy = static_cast<gint>(std::lround(y1));
    const gint iw = static_cast<gint>(std::lround(x2)) - ix, ih = static_cast<gint>(std::lround(y2)) - iy;
    if (iw <= 0 || ih <= 0) continue;
    const std::string label = label_of(st, static_cast<size_t>(std::max(b.label, 0)));
    jobflow_analytics_relation_meta_add_od_mtd(meta, g_quark_from_string(label.c_str()), ix, iy, iw, ih, b.score,
                                               nullptr);
  }
}

/* The (H, W) plane of a single-frame map tensor (text-regions,
 * segmentation class maps). */
void plane_of(const Shape& s, size_t* h, size_t* w, const char* what) {
  if (s.size() < 2 || !one_frame(s, 2)) shape_error(what, s);
  *h = static_cast<size_t>(s[s.size() - 2]);
  *w = static_cast<size_t>(s.back());
}

void decode_text_regions(const State& st, const Settings& cfg, const Tensor& t, Geometry g,
                         JobflowAnalyticsRelationMeta* meta) {
  size_t h, w;
  plane_of(t.shape(), &h, &w, "mode=text-regions needs a (1, 1, H, W) probability map");
  dec::DbParams p;
  p.binary_threshold = static_cast<float>(cfg.binary_threshold);
  p.box_threshold = static_cast<float>(cfg.box_threshold);
  p.unclip_ratio = static_cast<float>(cfg.unclip_ratio);
  p.min_size = static_cast<float>(cfg.min_size);
  if (cfg.max_detections) p.max_candidates = cfg.max_detections;
  if (g.frame && g.frame->model_width > 0) {
    g.map_sx = static_cast<double>(g.frame->model_width) / w;
    g.map_sy = static_cast<double>(g.frame->model_height) / h;
  }
  const GQuark label = g_quark_from_string(st.labels.empty() ? "text" : st.labels[0].c_str());
  for (const dec::RotatedBox& b : dec::db_boxes(t.data<float>(), h, w, p)) {
    float c[8];
    dec::corners(b, c);
    double x[4], y[4];
    for (int i = 0; i < 4; ++i) {
      x[i] = c[2 * i];
      y[i] = c[2 * i + 1];
      g.to_output(&x[i], &y[i]);
    }
    const double cx = (x[0] + x[2]) / 2, cy = (y[0] + y[2]) / 2;
    const double bw = std::hypot(x[1] - x[0], y[1] - y[0]), bh = std::hypot(x[3] - x[0], y[3] - y[0]);
    const double angle = b.angle == 0.f ? 0.0 : std::atan2(y[1] - y[0], x[1] - x[0]);
    const gint iw = static_cast<gint>(std::lround(bw)), ih = static_cast<gint>(std::lround(bh));
    if (iw <= 0 || ih <= 0) continue;
    jobflow_analytics_relation_meta_add_oriented_od_mtd(meta, label, static_cast<gint>(std::lround(cx - bw / 2)),
                                                        static_cast<gint>(std::lround(cy - bh / 2)), iw, ih,
                                                        static_cast<gfloat>(angle), b.score, nullptr);
  }
}

/* The class map of a segmentation output: (C, H, W) scores (argmax; C = 1:
 * foreground where > 0.5) or an integer (H, W) map. */
std::vector<uint8_t> class_map(const TensorSpec& spec, const Tensor& t, size_t* h, size_t* w) {
  const Shape& s = t.shape();
  const float* d = t.data<float>();
  if (!jobflow::is_floating(spec.dtype)) {
    plane_of(s, h, w, "mode=segmentation with an integer class map needs a (1, H, W) tensor");
    std::vector<uint8_t> map(*h * *w);
    for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<uint8_t>(std::clamp(d[i], 0.f, 255.f));
    return map;
  }
  if (s.size() < 3 || !one_frame(s, 3)) shape_error("mode=segmentation needs (1, C, H, W) class scores", s);
  const size_t c = static_cast<size_t>(s[s.size() - 3]);
  *h = static_cast<size_t>(s[s.size() - 2]);
  *w = static_cast<size_t>(s.back());
  if (c > 256) shape_error("mode=segmentation supports at most 256 classes", s);
  std::vector<uint8_t> map(*h * *w);
  if (c == 1) {
    for (size_t i = 0; i < map.size(); ++i) map[i] = d[i] > 0.5f ? 1 : 0;
  } else {
    dec::argmax_map(d, c, *h, *w, map.data());
  }
  return map;
}

/* A GRAY8 buffer of the map with a GstVideoMeta (the SegmentationMtd's mask). */
GstBuffer* mask_buffer(const std::vector<uint8_t>& map, size_t h, size_t w) {
  GstBuffer* b = gst_buffer_new_memdup(map.data(), map.size());
  gsize offset[GST_VIDEO_MAX_PLANES] = {0};
  gint stride[GST_VIDEO_MAX_PLANES] = {static_cast<gint>(w)};
  gst_buffer_add_video_meta_full(b, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_FORMAT_GRAY8, static_cast<guint>(w),
                                 static_cast<guint>(h), 1, offset, stride);
  return b;
}

void decode_segmentation(const State& st, const Tensor& t, Geometry g, JobflowAnalyticsRelationMeta* meta,
                         GstBuffer* mask_video) {
  size_t h, w;
  std::vector<uint8_t> map = class_map(st.specs[0], t, &h, &w);
  /* the map covers the model input: (0, 0) - (model w, model h) */
  double x0 = 0, y0 = 0, x1 = static_cast<double>(w), y1 = static_cast<double>(h);
  if (g.frame && g.frame->model_width > 0) {
    g.map_sx = static_cast<double>(g.frame->model_width) / w;
    g.map_sy = static_cast<double>(g.frame->model_height) / h;
  }
  g.to_output(&x0, &y0);
  g.to_output(&x1, &y1);
  std::vector<unsigned> present = dec::classes_present(map.data(), map.size());
  std::vector<guint> ids(present.begin(), present.end());
  GstBuffer* mask = mask_buffer(map, h, w);
  const gint ix = static_cast<gint>(std::lround(x0)), iy = static_cast<gint>(std::lround(y0));
  jobflow_analytics_relation_meta_add_segmentation_mtd(
      meta, mask, JOBFLOW_SEGMENTATION_TYPE_SEMANTIC, ids.size(), ids.data(), ix, iy,
      static_cast<guint>(std::max(0L, std::lround(x1) - ix)), static_cast<guint>(std::max(0L, std::lround(y1) - iy)),
      nullptr);
  gst_buffer_unref(mask);
  if (!mask_video) return;
  /* The mask video: the class of every output pixel (nearest map pixel). */
  GstVideoInfo info;
  GstVideoMeta* vm = gst_buffer_get_video_meta(mask_video);
  const int ow = static_cast<int>(vm->width), oh = static_cast<int>(vm->height);
  gst_video_info_set_format(&info, GST_VIDEO_FORMAT_GRAY8, static_cast<guint>(ow), static_cast<guint>(oh));
  GstMapInfo out;
  gst_buffer_map(mask_video, &out, GST_MAP_WRITE);
  const double sx = (x1 - x0) / w, sy = (y1 - y0) / h;
  for (int y = 0; y < oh; ++y) {
    guint8* row = out.data + static_cast<size_t>(y) * GST_VIDEO_INFO_PLANE_STRIDE(&info, 0);
    const long my = static_cast<long>(std::floor((y + 0.5 - y0) / sy));
    for (int x = 0; x < ow; ++x) {
      const long mx = static_cast<long>(std::floor((x + 0.5 - x0) / sx));
      row[x] = (my >= 0 && mx >= 0 && my < static_cast<long>(h) && mx < static_cast<long>(w))
                   ? map[static_cast<size_t>(my) * w + static_cast<size_t>(mx)]
                   : 0;
    }
  }
  gst_buffer_unmap(mask_video, &out);
}

/* The caps a frame-mode output of `in` has. */
GstCaps* output_caps_for(const State& st, GstBuffer* in) {
  if (st.per_region) {
    const JobflowCropMeta* cm = jobflow_buffer_get_crop_meta(in);
    return gst_caps_ref(cm ? cm->caps : st.in_caps);
  }
  const JobflowFrameMeta* fm = jobflow_buffer_get_frame_meta(in);
  if (st.mode == kModeSegmentation && st.mask_video) {
    int w = 0, h = 0, fps_n = 0, fps_d = 1;
    const GstStructure* s = nullptr;
    if (fm) {
      w = fm->frame_width;
      h = fm->frame_height;
      s = gst_caps_get_structure(fm->caps, 0);
    } else {
      const Shape& sh = st.specs[0].shape;
      if (sh.size() >= 2) {
        h = static_cast<int>(sh[sh.size() - 2]);
        w = static_cast<int>(sh.back());
      }
      s = gst_caps_get_structure(st.in_caps, 0);
    }
    if (!gst_structure_get_fraction(s, "framerate", &fps_n, &fps_d)) fps_n = 0, fps_d = 1;
    return gst_caps_new_simple("video/x-raw", "format", G_TYPE_STRING, "GRAY8", "width", G_TYPE_INT, w, "height",
                               G_TYPE_INT, h, "framerate", GST_TYPE_FRACTION, fps_n, fps_d, nullptr);
  }
  return gst_caps_ref(fm ? fm->caps : st.in_caps);
}

/* ------------------------------------------------------------ per region */

/* Decodes the slots of a crop buffer (jobcrop's crops after the second
 * model) and attaches each crop's results to its region in `frame`'s meta:
 * the region CONTAINs each result and each result IS_PART_OF the region
 * (DL Streamer's gvaclassify relates its results so). labels: a ClsMtd of
 * the top-k classes per crop; ctc: a TextMtd per crop; boxes: ODMtds
 * mapped through the crop to frame pixels. Throws std::runtime_error
 * naming the shape on a mismatch. */
void attach_results(GstJobDecode* self, GstBuffer* inbuf, const JobflowCropMeta* cm, GstBuffer* frame) {
  const State& st = self->impl->state;
  const Settings cfg = self->impl->settings.copy();
  JobflowAnalyticsRelationMeta* meta = jobflow_buffer_get_or_add_analytics_relation_meta(frame);
  if (cm->n_crops == 0) return;  // a frame without crops: its empty GAP buffer
  std::vector<Tensor> views;
  std::string error;
  if (!jobflow::gst::tensors_from_buffer(inbuf, st.specs, &views, &error))
    throw std::runtime_error("the tensor buffer does not match the caps: " + error);
  const size_t batch = cm->batch_size;
  auto per_crop_rows = [&](size_t rows, const Shape& shape) {
    if (batch == 0 || rows % batch != 0)
      throw std::runtime_error("per-region=true: the " + std::to_string(rows) + " rows of " + jobflow::shape_str(shape) +
                               " are not the crops' batch of " + std::to_string(batch) + " (times a whole number)");
    return rows / batch;
  };
  auto child_of = [&](guint region, guint child) { jobflow_analytics_relation_meta_set_parent(meta, child, region); };
  switch (st.mode) {
    case kModeLabels: {
      const size_t per = per_crop_rows(st.rows, st.specs[0].shape);
      const auto* data = static_cast<const guint8*>(views[0].raw());
      for (guint i = 0; i < cm->n_crops; ++i) {
        for (size_t r = 0; r < per; ++r) {
          const auto best = top_classes(st, cfg, data, i * per + r);
          if (best.empty()) continue;
          std::vector<gfloat> levels;
          std::vector<GQuark> quarks;
          for (const auto& [c, score] : best) {
            levels.push_back(static_cast<gfloat>(score));
            quarks.push_back(g_quark_from_string(label_of(st, c).c_str()));
          }
          JobflowAnalyticsClsMtd cls;
          jobflow_analytics_relation_meta_add_cls_mtd(meta, levels.size(), levels.data(), quarks.data(), &cls);
          child_of(cm->crops[i].region_id, cls.id);
        }
      }
      break;
    }
    case kModeCtc: {
      const size_t per = per_crop_rows(st.rows, st.specs[0].shape);
      Tensor t = views[0].dtype() == DType::Float32 ? views[0] : views[0].astype(DType::Float32);
      const float* data = t.data<float>();
      std::vector<std::string> dict = st.dictionary;
      if (st.classes == dict.size() + 2) dict.push_back(" ");
      for (guint i = 0; i < cm->n_crops; ++i) {
        for (size_t r = 0; r < per; ++r) {
          const size_t row = i * per + r;
          const dec::CtcResult res =
              dec::ctc_greedy(data + row * st.steps * st.classes, st.steps, st.classes, cfg.blank_index, cfg.softmax);
          const std::string text = dec::ctc_text(res.classes, dict, cfg.blank_index);
          JobflowAnalyticsTextMtd txt;
          jobflow_analytics_relation_meta_add_text_mtd(meta, text.c_str(), res.confidence, &txt);
          child_of(cm->crops[i].region_id, txt.id);
        }
      }
      break;
    }
    case kModeBoxes: {
      std::vector<Tensor> t;
      for (const Tensor& v : views) {
        if (v.ndim() < 2 || static_cast<size_t>(v.shape()[0]) != batch)
          throw std::runtime_error("per-region=true: each tensor's dim 0 must be the crops' batch of " +
                                   std::to_string(batch) + ", got " + jobflow::shape_str(v.shape()));
        t.push_back(v.dtype() == DType::Float32 ? v : v.astype(DType::Float32));
      }
      JobflowFrameMeta model{};  // decode_boxes reads the model's input size (scheme=ssd)
      model.model_width = cm->model_width;
      model.model_height = cm->model_height;
      for (guint i = 0; i < cm->n_crops; ++i) {
        std::vector<Tensor> slot;
        for (const Tensor& v : t) {
          Shape shape = v.shape();
          shape[0] = 1;
          const size_t bytes = v.nbytes() / batch;
          slot.push_back(Tensor::wrap(static_cast<guint8*>(v.raw()) + i * bytes, shape, DType::Float32, nullptr));
        }
        const JobflowCrop& c = cm->crops[i];
        for (const dec::Box& b : decode_boxes(st, cfg, slot, &model)) {
          const std::string label = label_of(st, static_cast<size_t>(std::max(b.label, 0)));
          JobflowAnalyticsODMtd od;
          if (c.rotation != 0.0) {  // a deskewed crop: the box turns with it, about its centre
            double cx = (b.x1 + b.x2) / 2.0, cy = (b.y1 + b.y2) / 2.0;
            jobflow_crop_to_frame(&c, &cx, &cy);
            const double w = (b.x2 - b.x1) / c.scale_x, h = (b.y2 - b.y1) / c.scale_y;
            const gint iw = static_cast<gint>(std::lround(w)), ih = static_cast<gint>(std::lround(h));
            if (iw <= 0 || ih <= 0) continue;
            jobflow_analytics_relation_meta_add_oriented_od_mtd(
                meta, g_quark_from_string(label.c_str()), static_cast<gint>(std::lround(cx - w / 2)),
                static_cast<gint>(std::lround(cy - h / 2)), iw, ih, static_cast<gfloat>(c.rotation), b.score, &od);
            child_of(c.region_id, od.id);
            continue;
          }
          double x1 = b.x1, y1 = b.y1, x2 = b.x2, y2 = b.y2;
          jobflow_crop_to_frame(&c, &x1, &y1);
          jobflow_crop_to_frame(&c, &x2, &y2);
          x1 = std::clamp(x1, static_cast<double>(c.x), static_cast<double>(c.x + c.w));
          x2 = std::clamp(x2, static_cast<double>(c.x), static_cast<double>(c.x + c.w));
          y1 = std::clamp(y1, static_cast<double>(c.y), static_cast<double>(c.y + c.h));
          y2 = std::clamp(y2, static_cast<double>(c.y), static_cast<double>(c.y + c.h));
          const gint ix = static_cast<gint>(std::lround(x1)), iy = static_cast<gint>(std::lround(y1));
          const gint iw = static_cast<gint>(std::lround(x2)) - ix, ih = static_cast<gint>(std::lround(y2)) - iy;
          if (iw <= 0 || ih <= 0) continue;
          jobflow_analytics_relation_meta_add_od_mtd(meta, g_quark_from_string(label.c_str()), ix, iy, iw, ih, b.score,
                                                     &od);
          child_of(c.region_id, od.id);
        }
      }
      break;
    }
    default:
      throw std::runtime_error("per-region=true decodes mode=labels, ctc or boxes, not this mode");
  }
}

/* The frame a crop buffer's results go on: the one of the chunks before
 * (taken), or a new copy of the crop meta's frame (its memory shared, its
 * metas copied) with the input's timestamps. */
GstBuffer* region_frame(State* st, GstBuffer* input, const JobflowCropMeta* cm) {
  if (cm->chunk == 0) gst_clear_buffer(&st->pending);  // a new frame: what is held is another's (its last chunk was lost)
  GstBuffer* out = std::exchange(st->pending, nullptr);
  if (!out) out = gst_buffer_copy(cm->frame);
  gst_buffer_copy_into(out, input, GST_BUFFER_COPY_TIMESTAMPS, 0, static_cast<gsize>(-1));
  return out;
}

/* ------------------------------------------------------ base transform */

GstCaps* transform_caps(GstBaseTransform* trans, GstPadDirection direction, GstCaps* caps, GstCaps* filter) {
  (void)caps;
  GstJobDecode* self = GST_JOB_DECODE(trans);
  const Mode mode = self->impl->settings.get(&Settings::mode);
  const bool per_region = self->impl->settings.get(&Settings::per_region);
  GstCaps* out;
  if (direction == GST_PAD_SRC) {
    out = gst_caps_from_string(mode == kModeLabels || mode == kModeCtc ? kScoresCaps
                                                                       : "other/tensors, format=(string)static");
  } else if (!frame_mode(mode) && !per_region) {
    out = gst_caps_from_string("text/x-raw, format=(string)utf8");
  } else {
    /* the caps submit_input_buffer() worked out, or anything until then */
    GstCaps* decided = self->impl->decided_caps();
    out = decided ? decided : gst_pad_get_pad_template_caps(GST_BASE_TRANSFORM_SRC_PAD(trans));
  }
  if (filter) {
    GstCaps* tmp = gst_caps_intersect_full(filter, out, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(out);
    out = tmp;
  }
  return out;
}

/* Parses the tensor caps for the mode; posts NEGOTIATION errors. */
bool parse_caps(GstJobDecode* self, GstCaps* incaps) {
  State& st = self->impl->state;
  std::vector<TensorSpec> specs;
  std::string error;
  if (!jobflow::gst::specs_from_caps(incaps, &specs, &error)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Invalid tensor caps: %s", error.c_str()), ("%" GST_PTR_FORMAT, incaps));
    return false;
  }
  auto fail = [&](const std::string& what) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("jobdecode mode=%s %s", mode_name(st.mode), what.c_str()),
                      ("%" GST_PTR_FORMAT, incaps));
    return false;
  };
  const bool floats = std::all_of(specs.begin(), specs.end(), [](const TensorSpec& s) {
    return s.dtype == DType::Float32 || s.dtype == DType::Float64;
  });
  if (st.mode == kModeLabels || st.mode == kModeCtc) {
    if (specs.size() != 1 || !floats) {
      if (st.mode == kModeLabels) {
        GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                          ("jobdecode needs one float32 or float64 tensor of scores, got %zu tensor(s) of %s",
                           specs.size(), specs.empty() ? "nothing" : jobflow::gst::dtype_to_nns(specs[0].dtype)),
                          ("%" GST_PTR_FORMAT, incaps));
        return false;
      }
      return fail("needs one float32 or float64 tensor of (rows, steps, classes) scores, got " +
                  std::to_string(specs.size()) + " tensor(s) of " +
                  (specs.empty() ? "nothing" : jobflow::gst::dtype_to_nns(specs[0].dtype)));
    }
    const Shape& shape = specs[0].shape;
    st.dtype = specs[0].dtype;
    st.classes = shape.empty() ? 1 : static_cast<size_t>(shape.back());
    const size_t total = static_cast<size_t>(jobflow::numel(shape));
    st.nbytes = total * jobflow::dtype_size(st.dtype);
    if (st.mode == kModeCtc) {
      if (shape.size() < 2) return fail("needs (steps, classes) scores, got " + jobflow::shape_str(shape));
      st.steps = static_cast<size_t>(shape[shape.size() - 2]);
      st.rows = st.steps && st.classes ? total / (st.steps * st.classes) : 0;
      const size_t dict = st.dictionary.size();
      if (st.classes != dict + 1 && st.classes != dict + 2)
        GST_ELEMENT_WARNING(self, RESOURCE, READ,
                            ("The dictionary (property 'dictionary') has %zu entries for %zu classes", dict, st.classes),
                            ("expected the blank plus one class per entry (plus one for \" \"); classes without an "
                             "entry decode as U+FFFD"));
    } else {
      st.rows = st.classes ? total / st.classes : 0;
      if (!st.labels.empty() && st.labels.size() < st.classes) {
        const std::string path = self->impl->settings.get(&Settings::labels_path);
        GST_ELEMENT_WARNING(self, RESOURCE, READ,
                            ("Labels file \"%s\" (property 'labels') has %zu labels for %zu classes", path.c_str(),
                             st.labels.size(), st.classes),
                            ("classes without a label are shown by their index"));
      }
    }
  } else if (st.mode == kModeBoxes) {
    const Scheme scheme = self->impl->settings.get(&Settings::scheme);
    const size_t want_min = scheme == kSchemeSsd ? 2 : scheme == kSchemeDetections ? 2 : 1;
    const size_t want_max = scheme == kSchemeSsd ? 2 : scheme == kSchemeDetections ? 3 : 1;
    if (specs.size() < want_min || specs.size() > want_max)
      return fail("scheme=" + std::string(g_enum_get_value(G_ENUM_CLASS(g_type_class_peek(scheme_get_type())), scheme)
                                               ->value_nick) +
                  " takes " + (want_min == want_max ? std::to_string(want_min) : std::to_string(want_min) + " or " +
                                                                                 std::to_string(want_max)) +
                  " tensor(s), got " + std::to_string(specs.size()));
  } else {
    if (specs.size() != 1) return fail("takes one tensor, got " + std::to_string(specs.size()));
    if (st.mode == kModeTextRegions && !floats)
      return fail(std::string("needs a float probability map, got ") + jobflow::gst::dtype_to_nns(specs[0].dtype));
  }
  st.specs = std::move(specs);
  gst_caps_replace(&st.in_caps, incaps);
  GST_DEBUG_OBJECT(self, "mode %s: %" GST_PTR_FORMAT, mode_name(st.mode), incaps);
  return true;
}

gboolean set_caps(GstBaseTransform* trans, GstCaps* incaps, GstCaps*) {
  GstJobDecode* self = GST_JOB_DECODE(trans);
  if (frame_output(self->impl->state)) return TRUE;  // parsed when the CAPS event came
  return parse_caps(self, incaps);
}

void push_held(GstJobDecode* self) {
  State& st = self->impl->state;
  std::vector<GstEvent*> held;
  held.swap(st.held);
  for (GstEvent* e : held) gst_pad_push_event(GST_BASE_TRANSFORM_SRC_PAD(self), e);
}

gboolean sink_event(GstBaseTransform* trans, GstEvent* event) {
  GstJobDecode* self = GST_JOB_DECODE(trans);
  State& st = self->impl->state;
  auto parent = [&] { return GST_BASE_TRANSFORM_CLASS(gst_job_decode_parent_class)->sink_event(trans, event); };
  if (!frame_output(st)) return parent();
  const bool have_out_caps = gst_pad_has_current_caps(GST_BASE_TRANSFORM_SRC_PAD(trans));
  switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_CAPS: {
      GstCaps* caps;
      gst_event_parse_caps(event, &caps);
      const bool ok = jobflow::gst::guarded(GST_ELEMENT(self), "Caps", false, [&] { return parse_caps(self, caps); });
      gst_event_unref(event);
      return ok;  // the output caps follow with the first buffer
    }
    case GST_EVENT_SEGMENT:
      if (have_out_caps) return parent();
      gst_event_copy_segment(event, &trans->segment);
      trans->have_segment = TRUE;
      st.held.push_back(event);
      return TRUE;
    case GST_EVENT_FLUSH_STOP:
      gst_clear_buffer(&st.pending);
      for (GstEvent*& e : st.held)
        if (GST_EVENT_TYPE(e) == GST_EVENT_SEGMENT) gst_clear_event(&e);
      st.held.erase(std::remove(st.held.begin(), st.held.end(), nullptr), st.held.end());
      return parent();
    case GST_EVENT_EOS:
    case GST_EVENT_GAP:
      push_held(self);  // no buffer came: the segment goes out without caps
      return parent();
    default:
      if (!have_out_caps && jobflow::gst::is_sticky(event) && GST_EVENT_TYPE(event) != GST_EVENT_STREAM_START) {
        st.held.push_back(event);
        return TRUE;
      }
      return parent();
  }
}

GstFlowReturn submit_input_buffer(GstBaseTransform* trans, gboolean is_discont, GstBuffer* input) {
  GstJobDecode* self = GST_JOB_DECODE(trans);
  State& st = self->impl->state;
  auto parent_submit = GST_BASE_TRANSFORM_CLASS(gst_job_decode_parent_class)->submit_input_buffer;
  if (!frame_output(st)) return parent_submit(trans, is_discont, input);
  if (!st.in_caps) {
    gst_buffer_unref(input);
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No caps before the first buffer"), (nullptr));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  if (st.per_region) {
    const JobflowCropMeta* cm = jobflow_buffer_get_crop_meta(input);
    if (!cm) {
      gst_buffer_unref(input);
      GST_ELEMENT_ERROR(self, STREAM, FORMAT,
                        ("jobdecode per-region=true takes jobcrop's crops: this buffer has no JobflowCropMeta"),
                        ("put jobcrop before the second model"));
      return GST_FLOW_ERROR;
    }
    if (!cm->last) {
      /* More of this frame's crops follow: their results go on the frame,
       * which goes out with its last chunk (transform()). */
      st.pending = region_frame(&st, input, cm);
      const bool ok = jobflow::gst::guarded(GST_ELEMENT(self), "Decoding", false, [&] {
        try {
          attach_results(self, input, cm, st.pending);
          return true;
        } catch (const std::runtime_error& e) {
          GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("jobdecode mode=%s per-region=true: %s", mode_name(st.mode),
                                                   e.what()),
                            (nullptr));
          return false;
        }
      });
      gst_buffer_unref(input);
      return ok ? GST_FLOW_OK : GST_FLOW_ERROR;
    }
  }
  GstCaps* want = output_caps_for(st, input);
  GstCaps* decided = self->impl->decided_caps();
  if (!decided || !gst_caps_is_equal(want, decided)) {
    GST_DEBUG_OBJECT(self, "output caps %" GST_PTR_FORMAT, want);
    self->impl->set_decided_caps(want);
    gst_base_transform_reconfigure_src(trans);
  }
  if (decided) gst_caps_unref(decided);
  gst_caps_unref(want);
  const GstFlowReturn ret = parent_submit(trans, is_discont, input);
  if (!st.held.empty() && gst_pad_has_current_caps(GST_BASE_TRANSFORM_SRC_PAD(trans))) push_held(self);
  return ret;
}

/* The sink pad takes what transform_caps(SRC) says for the mode (the
 * template takes any tensors). */
gboolean accept_caps(GstBaseTransform* trans, GstPadDirection direction, GstCaps* caps) {
  if (direction == GST_PAD_SINK) {
    GstCaps* allowed = transform_caps(trans, GST_PAD_SRC, caps, nullptr);
    const bool ok = gst_caps_can_intersect(caps, allowed);
    gst_caps_unref(allowed);
    if (!ok) return FALSE;
  }
  return GST_BASE_TRANSFORM_CLASS(gst_job_decode_parent_class)->accept_caps(trans, direction, caps);
}

gboolean start(GstBaseTransform* trans) {
  GstJobDecode* self = GST_JOB_DECODE(trans);
  try {
    clear_state(&self->impl->state);
    self->impl->set_decided_caps(nullptr);
    const Settings cfg = self->impl->settings.copy();
    self->impl->state.mode = cfg.mode;
    self->impl->state.mask_video = cfg.mask_video;
    self->impl->state.per_region = cfg.per_region;
    if (cfg.per_region && (cfg.mode == kModeSegmentation || cfg.mode == kModeTextRegions)) {
      GST_ELEMENT_ERROR(self, LIBRARY, SETTINGS, ("per-region=true decodes mode=labels, ctc or boxes, not mode=%s",
                                                  mode_name(cfg.mode)),
                        (nullptr));
      return FALSE;
    }
    return load_files(self, cfg);
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, STATE_CHANGE, ("Start failed"), ("%s", e.what()));
    return FALSE;
  }
}

gboolean stop(GstBaseTransform* trans) {
  clear_state(&GST_JOB_DECODE(trans)->impl->state);
  GST_JOB_DECODE(trans)->impl->set_decided_caps(nullptr);
  return TRUE;
}

GstFlowReturn prepare_output_buffer(GstBaseTransform* trans, GstBuffer* input, GstBuffer** outbuf) {
  GstJobDecode* self = GST_JOB_DECODE(trans);
  State& st = self->impl->state;
  if (!frame_output(st)) {
    /* The text is as long as it comes out: filled by transform(). */
    *outbuf = gst_buffer_new();
  } else if (st.per_region) {
    const JobflowCropMeta* cm = jobflow_buffer_get_crop_meta(input);  // checked in submit_input_buffer
    if (!cm) return GST_FLOW_ERROR;
    *outbuf = region_frame(&self->impl->state, input, cm);
    return GST_FLOW_OK;
  } else if (st.mode == kModeSegmentation && st.mask_video) {
    GstVideoInfo info;
    GstCaps* decided = self->impl->decided_caps();
    const bool ok = decided && gst_video_info_from_caps(&info, decided);
    if (decided) gst_caps_unref(decided);
    if (!ok) return GST_FLOW_NOT_NEGOTIATED;
    *outbuf = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
    gst_buffer_add_video_meta(*outbuf, GST_VIDEO_FRAME_FLAG_NONE, GST_VIDEO_FORMAT_GRAY8, GST_VIDEO_INFO_WIDTH(&info),
                              GST_VIDEO_INFO_HEIGHT(&info));
  } else if (const JobflowFrameMeta* fm = jobflow_buffer_get_frame_meta(input)) {
    *outbuf = gst_buffer_copy(fm->frame);  // shares the frame's memory; its metas are copied
    /* and the tensor buffer's own (e.g. jobdemux's JobflowMuxMeta: the
     * frame's source), but not the tensors' description nor the frame meta */
    jobflow::gst::copy_metas_except(*outbuf, input, {JOBFLOW_TENSOR_META_API_TYPE, JOBFLOW_FRAME_META_API_TYPE,
                                                     JOBFLOW_ANALYTICS_RELATION_META_API_TYPE});
  } else {
    *outbuf = gst_buffer_copy(input);
  }
  gst_buffer_copy_into(*outbuf, input, GST_BUFFER_COPY_TIMESTAMPS, 0, static_cast<gsize>(-1));
  return GST_FLOW_OK;
}

/* Text modes: the text buffer and the rows' messages. */
GstFlowReturn transform_text(GstJobDecode* self, GstBuffer* inbuf, GstBuffer* outbuf) {
  const State& st = self->impl->state;
  GstMapInfo map;
  if (!gst_buffer_map(inbuf, &map, GST_MAP_READ)) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("Could not map the input buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }
  if (map.size != st.nbytes) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Tensor buffer has %" G_GSIZE_FORMAT " bytes, caps say %zu", map.size,
                                             st.nbytes),
                      (nullptr));
    gst_buffer_unmap(inbuf, &map);
    return GST_FLOW_ERROR;
  }
  std::string text;
  std::vector<GstMessage*> messages;
  try {
    if (st.mode == kModeLabels) {
      decode_labels(self, map.data, GST_BUFFER_PTS(inbuf), &text, &messages);
    } else {
      Tensor t = Tensor::wrap(map.data, st.specs[0].shape, st.dtype, nullptr).astype(DType::Float32);
      decode_ctc(self, t, GST_BUFFER_PTS(inbuf), &text, &messages);
    }
  } catch (const std::exception& e) {
    gst_buffer_unmap(inbuf, &map);
    for (GstMessage* m : messages) gst_message_unref(m);
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("Decoding failed"), ("%s", e.what()));
    return GST_FLOW_ERROR;
  }
  gst_buffer_unmap(inbuf, &map);
  if (!text.empty()) {
    gpointer data = g_memdup2(text.data(), text.size());
    gst_buffer_append_memory(outbuf, gst_memory_new_wrapped(static_cast<GstMemoryFlags>(0), data, text.size(), 0,
                                                            text.size(), data, g_free));
  }
  for (GstMessage* m : messages) gst_element_post_message(GST_ELEMENT(self), m);
  return GST_FLOW_OK;
}

/* Decodes one frame's tensors into `meta`: regions or a mask, in the
 * pixels of the frame `fm` describes (model-input pixels without one). */
void decode_frame(const State& st, const Settings& cfg, const std::vector<Tensor>& t, const JobflowFrameMeta* fm,
                  JobflowAnalyticsRelationMeta* meta, GstBuffer* mask_video) {
  Geometry g;
  g.frame = fm;
  if (fm) {
    g.out_w = fm->frame_width;
    g.out_h = fm->frame_height;
  }
  switch (st.mode) {
    case kModeBoxes:
      add_regions(st, decode_boxes(st, cfg, t, fm), g, meta);
      break;
    case kModeTextRegions:
      decode_text_regions(st, cfg, t[0], g, meta);
      break;
    case kModeSegmentation:
      decode_segmentation(st, t[0], g, meta, mask_video);
      break;
    default:
      break;
  }
}

/* A jobmux batch (the frames of several sources in one buffer, each
 * tensor's dim 0 their slots): each valid slot is decoded as a frame of its
 * own, and its results go on that slot's frame in the JobflowMuxMeta of
 * `outbuf` — the video frame of the slot's JobflowFrameMeta (as jobdecode
 * gives it for one frame; without a frame meta, the slot's buffer as it
 * entered jobmux), which replaces the slot's buffer there, with its caps.
 * jobtrack tracks them per source, jobdemux output=frames pushes them.
 * Throws std::runtime_error naming the shape on a mismatch. */
void decode_batch(GstJobDecode* self, const Settings& cfg, const std::vector<Tensor>& t, GstBuffer* outbuf) {
  const State& st = self->impl->state;
  JobflowMuxMeta* mm = jobflow_buffer_get_mux_meta(outbuf);  // the output's own copy
  const size_t n = mm->batch_size;
  if (st.mode == kModeSegmentation && st.mask_video)
    throw std::runtime_error("mask-video=true outputs one frame per buffer, not a jobmux batch of " +
                             std::to_string(n) + ": put jobdemux before jobdecode");
  for (const Tensor& v : t)
    if (v.ndim() < 1 || v.shape()[0] % static_cast<int64_t>(n) != 0)
      throw std::runtime_error("on a jobmux batch of " + std::to_string(n) + " frames each tensor's dim 0 must be " +
                               "a multiple of " + std::to_string(n) + ", got " + jobflow::shape_str(v.shape()));
  std::vector<GstMessage*> messages;
  for (guint i = 0; i < std::min<guint>(mm->valid, mm->batch_size); ++i) {
    GstBuffer* in = mm->frames[i];
    if (!in) continue;
    std::vector<Tensor> slot;
    for (const Tensor& v : t) {
      Shape shape = v.shape();
      shape[0] /= static_cast<int64_t>(n);
      const size_t bytes = v.nbytes() / n;
      slot.push_back(Tensor::wrap(static_cast<guint8*>(v.raw()) + i * bytes, shape, DType::Float32, nullptr));
    }
    const JobflowFrameMeta* fm = jobflow_buffer_get_frame_meta(in);
    GstBuffer* frame = gst_buffer_copy(fm ? fm->frame : in);  // shares the memory
    if (fm)
      jobflow::gst::copy_metas_except(frame, in, {JOBFLOW_TENSOR_META_API_TYPE, JOBFLOW_FRAME_META_API_TYPE,
                                                  JOBFLOW_ANALYTICS_RELATION_META_API_TYPE});
    gst_buffer_copy_into(frame, in, GST_BUFFER_COPY_TIMESTAMPS, 0, static_cast<gsize>(-1));
    try {
      decode_frame(st, cfg, slot, fm, jobflow_buffer_get_or_add_analytics_relation_meta(frame), nullptr);
    } catch (...) {
      gst_buffer_unref(frame);
      for (GstMessage* m : messages) gst_message_unref(m);
      throw;
    }
    const GstSegment segment = mm->segments[i];
    GstCaps* caps = fm ? fm->caps : mm->caps[i];  // held: replacing the slot's buffer may free `fm`
    if (caps) gst_caps_ref(caps);
    jobflow_mux_meta_set_slot(mm, i, mm->source_id[i], frame, caps, &segment);
    if (caps) gst_caps_unref(caps);
    if (cfg.message)
      messages.push_back(jobflow_mux_regions_message_new(GST_OBJECT(self), frame, &segment, mm->source_id[i]));
    gst_buffer_unref(frame);
  }
  for (GstMessage* m : messages) gst_element_post_message(GST_ELEMENT(self), m);
}

/* A jobmux batch: the buffer has a JobflowMuxMeta and is not a single
 * frame's tensors (which carry their JobflowFrameMeta, also after
 * jobdemux). */
bool is_batch(GstBuffer* buf) { return jobflow_buffer_get_mux_meta(buf) && !jobflow_buffer_get_frame_meta(buf); }

/* Frame modes: the results as metas on the output buffer (on a jobmux
 * batch: on its slots' frames). */
GstFlowReturn transform_frame(GstJobDecode* self, GstBuffer* inbuf, GstBuffer* outbuf) {
  const State& st = self->impl->state;
  const Settings cfg = self->impl->settings.copy();
  std::vector<Tensor> views;
  std::string error;
  if (!jobflow::gst::tensors_from_buffer(inbuf, st.specs, &views, &error)) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Tensor buffer does not match the caps: %s", error.c_str()), (nullptr));
    return GST_FLOW_ERROR;
  }
  std::vector<Tensor> t;
  for (const Tensor& v : views) t.push_back(v.dtype() == DType::Float32 ? v : v.astype(DType::Float32));
  const bool batch = is_batch(inbuf);
  try {
    if (batch) {
      decode_batch(self, cfg, t, outbuf);
    } else {
      decode_frame(st, cfg, t, jobflow_buffer_get_frame_meta(inbuf),
                   jobflow_buffer_get_or_add_analytics_relation_meta(outbuf), st.mask_video ? outbuf : nullptr);
    }
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("jobdecode mode=%s: %s", mode_name(st.mode), e.what()), (nullptr));
    return GST_FLOW_ERROR;
  }
  if (cfg.message && !batch) {
    const JobflowMuxMeta* mm = jobflow_buffer_get_mux_meta(outbuf);  // a frame after jobdemux: its source
    gst_element_post_message(GST_ELEMENT(self),
                             jobflow_mux_regions_message_new(GST_OBJECT(self), outbuf, &GST_BASE_TRANSFORM(self)->segment,
                                                             mm ? mm->source_id[0] : G_MAXUINT));
  }
  return GST_FLOW_OK;
}

/* Per region, the output frame does not take the crop buffer's own metas
 * (the crops and their tensor description); the rest as the base class. */
gboolean transform_meta(GstBaseTransform* trans, GstBuffer* outbuf, GstMeta* meta, GstBuffer* inbuf) {
  if (GST_JOB_DECODE(trans)->impl->state.per_region &&
      (meta->info->api == JOBFLOW_CROP_META_API_TYPE || meta->info->api == JOBFLOW_TENSOR_META_API_TYPE))
    return FALSE;
  return GST_BASE_TRANSFORM_CLASS(gst_job_decode_parent_class)->transform_meta(trans, outbuf, meta, inbuf);
}

/* Per region: the last chunk's results on the frame, which goes out. */
GstFlowReturn transform_regions(GstJobDecode* self, GstBuffer* inbuf, GstBuffer* outbuf) {
  const JobflowCropMeta* cm = jobflow_buffer_get_crop_meta(inbuf);
  try {
    attach_results(self, inbuf, cm, outbuf);
  } catch (const std::runtime_error& e) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("jobdecode mode=%s per-region=true: %s", mode_name(self->impl->state.mode),
                                             e.what()),
                      (nullptr));
    return GST_FLOW_ERROR;
  }
  if (self->impl->settings.get(&Settings::message))
    gst_element_post_message(GST_ELEMENT(self), jobflow_analytics_regions_message_new(
                                                    GST_OBJECT(self), outbuf, &GST_BASE_TRANSFORM(self)->segment));
  return GST_FLOW_OK;
}

GstFlowReturn transform(GstBaseTransform* trans, GstBuffer* inbuf, GstBuffer* outbuf) {
  GstJobDecode* self = GST_JOB_DECODE(trans);
  return jobflow::gst::guarded(GST_ELEMENT(self), "Decoding", GST_FLOW_ERROR, [&] {
    if (self->impl->state.per_region) return transform_regions(self, inbuf, outbuf);
    return frame_mode(self->impl->state.mode) ? transform_frame(self, inbuf, outbuf)
                                              : transform_text(self, inbuf, outbuf);
  });
}

/* ------------------------------------------------------------- GObject */

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_DECODE(object)->impl->settings.with([&](Settings& s) {
    auto str = [&] {
      const gchar* v = g_value_get_string(value);
      return std::string(v ? v : "");
    };
    switch (prop_id) {
      case PROP_MODE: s.mode = static_cast<Mode>(g_value_get_enum(value)); break;
      case PROP_LABELS: s.labels_path = str(); break;
      case PROP_TOP_K: s.top_k = g_value_get_uint(value); break;
      case PROP_THRESHOLD: s.threshold = g_value_get_double(value); break;
      case PROP_SOFTMAX: s.softmax = g_value_get_boolean(value); break;
      case PROP_MESSAGE: s.message = g_value_get_boolean(value); break;
      case PROP_SCHEME: s.scheme = static_cast<Scheme>(g_value_get_enum(value)); break;
      case PROP_SCORE_THRESHOLD: s.score_threshold = g_value_get_double(value); break;
      case PROP_IOU_THRESHOLD: s.iou_threshold = g_value_get_double(value); break;
      case PROP_MAX_DETECTIONS: s.max_detections = g_value_get_uint(value); break;
      case PROP_ANCHORS: s.anchors_path = str(); break;
      case PROP_BOX_SCALES: s.box_scales = str(); break;
      case PROP_BINARY_THRESHOLD: s.binary_threshold = g_value_get_double(value); break;
      case PROP_BOX_THRESHOLD: s.box_threshold = g_value_get_double(value); break;
      case PROP_UNCLIP_RATIO: s.unclip_ratio = g_value_get_double(value); break;
      case PROP_MIN_SIZE: s.min_size = g_value_get_double(value); break;
      case PROP_MASK_VIDEO: s.mask_video = g_value_get_boolean(value); break;
      case PROP_DICTIONARY: s.dictionary_path = str(); break;
      case PROP_BLANK_INDEX: s.blank_index = g_value_get_int(value); break;
      case PROP_PER_REGION: s.per_region = g_value_get_boolean(value); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GST_JOB_DECODE(object)->impl->settings.with([&](const Settings& s) {
    auto str = [&](const std::string& v) { g_value_set_string(value, v.empty() ? nullptr : v.c_str()); };
    switch (prop_id) {
      case PROP_MODE: g_value_set_enum(value, s.mode); break;
      case PROP_LABELS: str(s.labels_path); break;
      case PROP_TOP_K: g_value_set_uint(value, s.top_k); break;
      case PROP_THRESHOLD: g_value_set_double(value, s.threshold); break;
      case PROP_SOFTMAX: g_value_set_boolean(value, s.softmax); break;
      case PROP_MESSAGE: g_value_set_boolean(value, s.message); break;
      case PROP_SCHEME: g_value_set_enum(value, s.scheme); break;
      case PROP_SCORE_THRESHOLD: g_value_set_double(value, s.score_threshold); break;
      case PROP_IOU_THRESHOLD: g_value_set_double(value, s.iou_threshold); break;
      case PROP_MAX_DETECTIONS: g_value_set_uint(value, s.max_detections); break;
      case PROP_ANCHORS: str(s.anchors_path); break;
      case PROP_BOX_SCALES: g_value_set_string(value, s.box_scales.c_str()); break;
      case PROP_BINARY_THRESHOLD: g_value_set_double(value, s.binary_threshold); break;
      case PROP_BOX_THRESHOLD: g_value_set_double(value, s.box_threshold); break;
      case PROP_UNCLIP_RATIO: g_value_set_double(value, s.unclip_ratio); break;
      case PROP_MIN_SIZE: g_value_set_double(value, s.min_size); break;
      case PROP_MASK_VIDEO: g_value_set_boolean(value, s.mask_video); break;
      case PROP_DICTIONARY: str(s.dictionary_path); break;
      case PROP_BLANK_INDEX: g_value_set_int(value, s.blank_index); break;
      case PROP_PER_REGION: g_value_set_boolean(value, s.per_region); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

}  // namespace

static void gst_job_decode_class_init(GstJobDecodeClass* klass) {
  GObjectClass* gobject_class = jobflow::gst::init_object_class<GstJobDecode>(klass, set_property, get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass* transform_class = GST_BASE_TRANSFORM_CLASS(klass);
  transform_class->transform_caps = transform_caps;
  transform_class->set_caps = set_caps;
  transform_class->accept_caps = accept_caps;
  transform_class->sink_event = sink_event;
  transform_class->submit_input_buffer = submit_input_buffer;
  transform_class->start = start;
  transform_class->stop = stop;
  transform_class->prepare_output_buffer = prepare_output_buffer;
  transform_class->transform = transform;
  transform_class->transform_meta = transform_meta;

  const auto flags = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS);
  const auto ready = static_cast<GParamFlags>(flags | GST_PARAM_MUTABLE_READY);
  const auto playing = static_cast<GParamFlags>(flags | GST_PARAM_MUTABLE_PLAYING);
  auto install = [&](guint id, GParamSpec* spec) { g_object_class_install_property(gobject_class, id, spec); };
  install(PROP_MODE, g_param_spec_enum("mode", "Mode", "What to decode the tensors into", mode_get_type(), kModeLabels,
                                       ready));
  install(PROP_LABELS,
          g_param_spec_string("labels", "Labels file",
                              "Path of a UTF-8 text file with one label per line, line i naming class i (unset: the "
                              "class index is the label)",
                              nullptr, ready));
  install(PROP_TOP_K, g_param_spec_uint("top-k", "Top k", "mode=labels: number of best classes reported per row", 1,
                                        G_MAXINT, kDefaultTopK, playing));
  install(PROP_THRESHOLD,
          g_param_spec_double("threshold", "Threshold",
                              "mode=labels: report only classes scoring at least this much (0 = no threshold)", 0.0,
                              G_MAXDOUBLE, kDefaultThreshold, playing));
  install(PROP_SOFTMAX,
          g_param_spec_boolean("softmax", "Softmax",
                               "The scores are logits: apply softmax first (labels: per row; ctc: per step; boxes "
                               "scheme=ssd: per anchor); false when the model outputs probabilities",
                               kDefaultSoftmax, playing));
  install(PROP_MESSAGE,
          g_param_spec_boolean("message", "Message",
                               "Post element messages on the bus: \"" JOBFLOW_LABELS_MESSAGE_NAME
                               "\" / \"" JOBFLOW_TEXT_MESSAGE_NAME "\" per row, \"" JOBFLOW_REGIONS_MESSAGE_NAME
                               "\" per frame in the frame modes (each frame of a jobmux batch)",
                               kDefaultMessage, playing));
  install(PROP_SCHEME, g_param_spec_enum("scheme", "Scheme", "mode=boxes: the layout of the detector's output",
                                         scheme_get_type(), kSchemeYolov8, ready));
  install(PROP_SCORE_THRESHOLD,
          g_param_spec_double("score-threshold", "Score threshold", "mode=boxes: least score of a box", 0.0, 1.0,
                              kDefaultScoreThreshold, playing));
  install(PROP_IOU_THRESHOLD,
          g_param_spec_double("iou-threshold", "IoU threshold",
                              "mode=boxes: a box overlapping a better box of its class by more than this (IoU) is "
                              "dropped (non-maximum suppression)",
                              0.0, 1.0, kDefaultIouThreshold, playing));
  install(PROP_MAX_DETECTIONS,
          g_param_spec_uint("max-detections", "Maximum detections",
                            "mode=boxes: the best boxes kept per frame (top-k); text-regions: regions considered, "
                            "largest first (0 = all)",
                            0, G_MAXINT, kDefaultMaxDetections, playing));
  install(PROP_ANCHORS,
          g_param_spec_string("anchors", "Anchors file",
                              "mode=boxes scheme=ssd: one anchor per line, \"cx cy w h\" normalised to the model input",
                              nullptr, ready));
  install(PROP_BOX_SCALES,
          g_param_spec_string("box-scales", "Box scales",
                              "mode=boxes scheme=ssd: the divisors of the box deltas \"x,y,w,h\"", kDefaultBoxScales,
                              ready));
  install(PROP_BINARY_THRESHOLD,
          g_param_spec_double("binary-threshold", "Binary threshold",
                              "mode=text-regions: map pixels above this are text", 0.0, 1.0, kDefaultBinaryThreshold,
                              playing));
  install(PROP_BOX_THRESHOLD,
          g_param_spec_double("box-threshold", "Box threshold",
                              "mode=text-regions: least mean probability inside a region", 0.0, 1.0,
                              kDefaultBoxThreshold, playing));
  install(PROP_UNCLIP_RATIO,
          g_param_spec_double("unclip-ratio", "Unclip ratio",
                              "mode=text-regions: each region grows by area x ratio / perimeter on every side", 0.0,
                              100.0, kDefaultUnclipRatio, playing));
  install(PROP_MIN_SIZE,
          g_param_spec_double("min-size", "Minimum size",
                              "mode=text-regions: regions with a shorter side (map pixels) are dropped", 0.0,
                              G_MAXDOUBLE, kDefaultMinSize, playing));
  install(PROP_MASK_VIDEO,
          g_param_spec_boolean("mask-video", "Mask video",
                               "mode=segmentation: output a GRAY8 video of the class of every pixel instead of the "
                               "frame",
                               FALSE, ready));
  install(PROP_DICTIONARY,
          g_param_spec_string("dictionary", "Dictionary",
                              "mode=ctc: a UTF-8 file with one entry per line, or the recogniser's .onnx file (its "
                              "metadata key \"character\")",
                              nullptr, ready));
  install(PROP_BLANK_INDEX, g_param_spec_int("blank-index", "Blank index", "mode=ctc: the class of the CTC blank", 0,
                                             G_MAXINT, kDefaultBlankIndex, playing));
  install(PROP_PER_REGION,
          g_param_spec_boolean("per-region", "Per region",
                               "The input is jobcrop's crops after a second model: decode each crop (mode labels, ctc "
                               "or boxes), attach the results to its region on the frame (the region CONTAINs them, "
                               "they are IS_PART_OF it) and output the frame",
                               FALSE, ready));

  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  gst_element_class_set_static_metadata(element_class, "Jobflow tensor decoder", "Converter/Tensor",
                                        "Turns a model's output into labels, texts, regions or masks (metas on the "
                                        "frames) and bus messages",
                                        "Jobflow");
  gst_type_mark_as_plugin_api(mode_get_type(), static_cast<GstPluginAPIFlags>(0));
  gst_type_mark_as_plugin_api(scheme_get_type(), static_cast<GstPluginAPIFlags>(0));
}

static void gst_job_decode_init(GstJobDecode* self) { self->impl = new Impl(); }

gboolean jobflow_register_jobdecode(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobdecode_debug, "jobdecode", 0, "Jobflow tensor decoder");
  return gst_element_register(plugin, "jobdecode", GST_RANK_NONE, GST_TYPE_JOB_DECODE);
}

/* jobdecode: classifier scores -> labels text + bus messages. See
 * gstjobdecode.h and docs/elements.md. A GstBaseTransform: the base class
 * negotiates (the src caps are always text/x-raw, format=utf8), keeps the
 * segment and answers queries; this file decodes. The labels file is read
 * in start() and dropped in stop(); the tensor layout comes from set_caps. */
#include "gstjobdecode.h"

#include "element_util.h"
#include "tensor_caps.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobdecode_debug);
#define GST_CAT_DEFAULT jobdecode_debug

namespace {

using jobflow::DType;

enum Mode { kModeLabels = 0 };

constexpr guint kDefaultTopK = 1;
constexpr double kDefaultThreshold = 0.0;
constexpr gboolean kDefaultSoftmax = TRUE;
constexpr gboolean kDefaultMessage = TRUE;

struct Settings {
  Mode mode = kModeLabels;
  std::string labels_path;
  guint top_k = kDefaultTopK;
  double threshold = kDefaultThreshold;
  bool softmax = kDefaultSoftmax;
  bool message = kDefaultMessage;
};

/* Streaming thread only (and start/stop). */
struct State {
  std::vector<std::string> labels;  // from the labels file (start)
  DType dtype = DType::Float32;
  size_t classes = 0;               // innermost dim
  size_t rows = 0;                  // every other element
  size_t nbytes = 0;
};

struct Impl {
  jobflow::gst::Locked<Settings> settings;
  State state;
};

GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS,
    GST_STATIC_CAPS("other/tensors, format=(string)static, num_tensors=(int)1, "
                    "types=(string){ float32, float64 }"));

GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE("src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS("text/x-raw, format=(string)utf8"));

enum { PROP_0, PROP_MODE, PROP_LABELS, PROP_TOP_K, PROP_THRESHOLD, PROP_SOFTMAX, PROP_MESSAGE };

GType mode_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {{kModeLabels, "Top-k class labels with their scores", "labels"},
                                      {0, nullptr, nullptr}};
  return jobflow::gst::enum_type(&type, "GstJobDecodeMode", values);
}

}  // namespace

struct _GstJobDecode {
  GstBaseTransform parent;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobDecode, gst_job_decode, GST_TYPE_BASE_TRANSFORM)

namespace {

/* Reads the labels file; posts RESOURCE errors naming the property. */
bool load_labels(GstJobDecode* self) {
  const std::string path = self->impl->settings.get(&Settings::labels_path);
  std::vector<std::string>& labels = self->impl->state.labels;
  labels.clear();
  if (path.empty()) {
    GST_INFO_OBJECT(self, "no labels file: class indices are the labels");
    return true;
  }
  gchar* contents = nullptr;
  gsize length = 0;
  GError* err = nullptr;
  if (!g_file_get_contents(path.c_str(), &contents, &length, &err)) {
    const bool missing = g_error_matches(err, G_FILE_ERROR, G_FILE_ERROR_NOENT);
    if (missing)
      GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("Labels file \"%s\" (property 'labels') does not exist", path.c_str()),
                        ("%s", err->message));
    else
      GST_ELEMENT_ERROR(self, RESOURCE, OPEN_READ, ("Could not read labels file \"%s\" (property 'labels')", path.c_str()),
                        ("%s", err->message));
    g_error_free(err);
    return false;
  }
  if (!g_utf8_validate(contents, static_cast<gssize>(length), nullptr)) {
    GST_ELEMENT_ERROR(self, RESOURCE, READ, ("Labels file \"%s\" (property 'labels') is not UTF-8 text", path.c_str()),
                      (nullptr));
    g_free(contents);
    return false;
  }
  std::string text(contents, length);
  g_free(contents);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    labels.push_back(std::move(line));
    pos = end + 1;
  }
  GST_INFO_OBJECT(self, "%zu labels from %s", labels.size(), path.c_str());
  return true;
}

std::string label_of(const State& st, size_t index) {
  if (index < st.labels.size()) return st.labels[index];
  return std::to_string(index);
}

/* Decodes one buffer of scores into `text` (rows joined by newlines) and
 * the rows' bus messages. */
void decode(GstJobDecode* self, const guint8* data, GstClockTime pts, std::string* out_text,
            std::vector<GstMessage*>* messages) {
  const State& st = self->impl->state;
  const Settings cfg = self->impl->settings.copy();
  const GstSegment& segment = GST_BASE_TRANSFORM(self)->segment;  // kept by the base class
  const bool timed = segment.format == GST_FORMAT_TIME;
  const GstClockTime running = timed ? gst_segment_to_running_time(&segment, GST_FORMAT_TIME, pts) : GST_CLOCK_TIME_NONE;
  const GstClockTime stream = timed ? gst_segment_to_stream_time(&segment, GST_FORMAT_TIME, pts) : GST_CLOCK_TIME_NONE;
  std::string& text = *out_text;
  const size_t k = std::min<size_t>(cfg.top_k, st.classes);
  std::vector<double> scores(st.classes);
  std::vector<size_t> order(st.classes);
  for (size_t r = 0; r < st.rows; ++r) {
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
    GValue labels = G_VALUE_INIT, values = G_VALUE_INIT, indices = G_VALUE_INIT, item = G_VALUE_INIT;
    g_value_init(&labels, GST_TYPE_ARRAY);
    g_value_init(&values, GST_TYPE_ARRAY);
    g_value_init(&indices, GST_TYPE_ARRAY);
    std::string line;
    for (size_t j = 0; j < k; ++j) {
      const size_t c = order[j];
      if (cfg.threshold > 0.0 && scores[c] < cfg.threshold) break;
      const std::string label = label_of(st, c);
      gchar num[32];
      g_ascii_formatd(num, sizeof num, "%.2f", scores[c]);
      if (!line.empty()) line += ", ";
      line += label + " (" + num + ")";
      if (cfg.message) {
        g_value_init(&item, G_TYPE_STRING);
        g_value_set_string(&item, label.c_str());
        gst_value_array_append_and_take_value(&labels, &item);
        item = G_VALUE_INIT;
        g_value_init(&item, G_TYPE_DOUBLE);
        g_value_set_double(&item, scores[c]);
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

/* ------------------------------------------------------ base transform */

GstCaps* transform_caps(GstBaseTransform* trans, GstPadDirection direction, GstCaps* caps, GstCaps* filter) {
  (void)caps;
  GstPad* other = direction == GST_PAD_SINK ? GST_BASE_TRANSFORM_SRC_PAD(trans) : GST_BASE_TRANSFORM_SINK_PAD(trans);
  GstCaps* out = gst_pad_get_pad_template_caps(other);  // text for any scores; any scores for text
  if (filter) {
    GstCaps* tmp = gst_caps_intersect_full(filter, out, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(out);
    out = tmp;
  }
  return out;
}

/* The tensor layout from the sink caps. */
gboolean set_caps(GstBaseTransform* trans, GstCaps* incaps, GstCaps*) {
  GstJobDecode* self = GST_JOB_DECODE(trans);
  std::vector<jobflow::TensorSpec> specs;
  std::string error;
  if (!jobflow::gst::specs_from_caps(incaps, &specs, &error)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Invalid tensor caps: %s", error.c_str()), ("%" GST_PTR_FORMAT, incaps));
    return FALSE;
  }
  if (specs.size() != 1 || (specs[0].dtype != DType::Float32 && specs[0].dtype != DType::Float64)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                      ("jobdecode needs one float32 or float64 tensor of scores, got %zu tensor(s) of %s",
                       specs.size(), specs.empty() ? "nothing" : jobflow::gst::dtype_to_nns(specs[0].dtype)),
                      ("%" GST_PTR_FORMAT, incaps));
    return FALSE;
  }
  State& st = self->impl->state;
  const jobflow::Shape& shape = specs[0].shape;
  st.dtype = specs[0].dtype;
  st.classes = shape.empty() ? 1 : static_cast<size_t>(shape.back());
  const size_t total = static_cast<size_t>(jobflow::numel(shape));
  st.rows = st.classes ? total / st.classes : 0;
  st.nbytes = total * jobflow::dtype_size(st.dtype);
  if (!st.labels.empty() && st.labels.size() < st.classes) {
    const std::string path = self->impl->settings.get(&Settings::labels_path);
    GST_ELEMENT_WARNING(self, RESOURCE, READ,
                        ("Labels file \"%s\" (property 'labels') has %zu labels for %zu classes", path.c_str(),
                         st.labels.size(), st.classes),
                        ("classes without a label are shown by their index"));
  }
  GST_DEBUG_OBJECT(self, "%zu row(s) of %zu classes", st.rows, st.classes);
  return TRUE;
}

gboolean start(GstBaseTransform* trans) {
  GstJobDecode* self = GST_JOB_DECODE(trans);
  try {
    self->impl->state = State{};
    return load_labels(self);
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, STATE_CHANGE, ("Start failed"), ("%s", e.what()));
    return FALSE;
  }
}

gboolean stop(GstBaseTransform* trans) {
  GST_JOB_DECODE(trans)->impl->state = State{};
  return TRUE;
}

/* The text is as long as it comes out: a new buffer with the input's
 * timestamps, filled by transform(). */
GstFlowReturn prepare_output_buffer(GstBaseTransform*, GstBuffer* input, GstBuffer** outbuf) {
  *outbuf = gst_buffer_new();
  gst_buffer_copy_into(*outbuf, input, GST_BUFFER_COPY_TIMESTAMPS, 0, static_cast<gsize>(-1));
  return GST_FLOW_OK;
}

GstFlowReturn transform(GstBaseTransform* trans, GstBuffer* inbuf, GstBuffer* outbuf) {
  GstJobDecode* self = GST_JOB_DECODE(trans);
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
    decode(self, map.data, GST_BUFFER_PTS(inbuf), &text, &messages);
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

/* ------------------------------------------------------------- GObject */

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_DECODE(object)->impl->settings.with([&](Settings& s) {
    switch (prop_id) {
      case PROP_MODE: s.mode = static_cast<Mode>(g_value_get_enum(value)); break;
      case PROP_LABELS: {
        const gchar* v = g_value_get_string(value);
        s.labels_path = v ? v : "";
        break;
      }
      case PROP_TOP_K: s.top_k = g_value_get_uint(value); break;
      case PROP_THRESHOLD: s.threshold = g_value_get_double(value); break;
      case PROP_SOFTMAX: s.softmax = g_value_get_boolean(value); break;
      case PROP_MESSAGE: s.message = g_value_get_boolean(value); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  });
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GST_JOB_DECODE(object)->impl->settings.with([&](const Settings& s) {
    switch (prop_id) {
      case PROP_MODE: g_value_set_enum(value, s.mode); break;
      case PROP_LABELS: g_value_set_string(value, s.labels_path.empty() ? nullptr : s.labels_path.c_str()); break;
      case PROP_TOP_K: g_value_set_uint(value, s.top_k); break;
      case PROP_THRESHOLD: g_value_set_double(value, s.threshold); break;
      case PROP_SOFTMAX: g_value_set_boolean(value, s.softmax); break;
      case PROP_MESSAGE: g_value_set_boolean(value, s.message); break;
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
  transform_class->start = start;
  transform_class->stop = stop;
  transform_class->prepare_output_buffer = prepare_output_buffer;
  transform_class->transform = transform;

  const auto flags = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS);
  const auto ready = static_cast<GParamFlags>(flags | GST_PARAM_MUTABLE_READY);
  const auto playing = static_cast<GParamFlags>(flags | GST_PARAM_MUTABLE_PLAYING);
  g_object_class_install_property(
      gobject_class, PROP_MODE,
      g_param_spec_enum("mode", "Mode", "What to decode the tensor into", mode_get_type(), kModeLabels, ready));
  g_object_class_install_property(
      gobject_class, PROP_LABELS,
      g_param_spec_string("labels", "Labels file",
                          "Path of a UTF-8 text file with one label per line, line i naming class i (unset: the "
                          "class index is the label)",
                          nullptr, ready));
  g_object_class_install_property(gobject_class, PROP_TOP_K,
                                  g_param_spec_uint("top-k", "Top k", "Number of best classes reported per row", 1,
                                                    G_MAXINT, kDefaultTopK, playing));
  g_object_class_install_property(
      gobject_class, PROP_THRESHOLD,
      g_param_spec_double("threshold", "Threshold",
                          "Report only classes scoring at least this much (0 = no threshold)", 0.0, G_MAXDOUBLE,
                          kDefaultThreshold, playing));
  g_object_class_install_property(
      gobject_class, PROP_SOFTMAX,
      g_param_spec_boolean("softmax", "Softmax",
                           "Apply softmax to each row first (the input is logits); false when the model already "
                           "outputs probabilities",
                           kDefaultSoftmax, playing));
  g_object_class_install_property(
      gobject_class, PROP_MESSAGE,
      g_param_spec_boolean("message", "Message",
                           "Post a \"" JOBFLOW_LABELS_MESSAGE_NAME "\" element message on the bus for every row",
                           kDefaultMessage, playing));

  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  gst_element_class_set_static_metadata(element_class, "Jobflow tensor decoder", "Converter/Tensor",
                                        "Turns classifier scores into label text and bus messages", "Jobflow");
  gst_type_mark_as_plugin_api(mode_get_type(), static_cast<GstPluginAPIFlags>(0));
}

static void gst_job_decode_init(GstJobDecode* self) { self->impl = new Impl(); }

gboolean jobflow_register_jobdecode(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobdecode_debug, "jobdecode", 0, "Jobflow tensor decoder");
  return gst_element_register(plugin, "jobdecode", GST_RANK_NONE, GST_TYPE_JOB_DECODE);
}

/* jobdecode: classifier scores -> labels text + bus messages. See
 * gstjobdecode.h and docs/elements.md. Settings (properties) live under
 * `lock`; the labels file is read in READY->PAUSED and dropped in
 * PAUSED->READY; the tensor layout is taken from caps. */
#include "gstjobdecode.h"

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

struct State {
  std::vector<std::string> labels;  // from the labels file (start)
  bool configured = false;          // caps seen
  DType dtype = DType::Float32;
  size_t classes = 0;               // innermost dim
  size_t rows = 0;                  // every other element
  size_t nbytes = 0;
  GstSegment segment{};
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
  if (g_once_init_enter(&type)) g_once_init_leave(&type, g_enum_register_static("GstJobDecodeMode", values));
  return type;
}

}  // namespace

struct _GstJobDecode {
  GstElement parent;
  GstPad* sinkpad;
  GstPad* srcpad;
  GMutex lock;  // guards settings
  Settings* settings;
  State* state;
};

G_DEFINE_TYPE(GstJobDecode, gst_job_decode, GST_TYPE_ELEMENT)

namespace {

/* Copies the settings; the lock is released even if the copy throws. */
Settings settings_copy(GstJobDecode* self) {
  g_autoptr(GMutexLocker) locker = g_mutex_locker_new(&self->lock);  // unlocks on return or throw
  return *self->settings;
}

/* Reads the labels file; posts RESOURCE errors naming the property. */
bool load_labels(GstJobDecode* self) {
  const Settings cfg = settings_copy(self);
  self->state->labels.clear();
  if (cfg.labels_path.empty()) {
    GST_INFO_OBJECT(self, "no labels file: class indices are the labels");
    return true;
  }
  gchar* contents = nullptr;
  gsize length = 0;
  GError* err = nullptr;
  if (!g_file_get_contents(cfg.labels_path.c_str(), &contents, &length, &err)) {
    const bool missing = g_error_matches(err, G_FILE_ERROR, G_FILE_ERROR_NOENT);
    if (missing)
      GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND,
                        ("Labels file \"%s\" (property 'labels') does not exist", cfg.labels_path.c_str()),
                        ("%s", err->message));
    else
      GST_ELEMENT_ERROR(self, RESOURCE, OPEN_READ,
                        ("Could not read labels file \"%s\" (property 'labels')", cfg.labels_path.c_str()),
                        ("%s", err->message));
    g_error_free(err);
    return false;
  }
  if (!g_utf8_validate(contents, static_cast<gssize>(length), nullptr)) {
    GST_ELEMENT_ERROR(self, RESOURCE, READ,
                      ("Labels file \"%s\" (property 'labels') is not UTF-8 text", cfg.labels_path.c_str()),
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
    self->state->labels.push_back(std::move(line));
    pos = end + 1;
  }
  GST_INFO_OBJECT(self, "%zu labels from %s", self->state->labels.size(), cfg.labels_path.c_str());
  return true;
}

bool configure(GstJobDecode* self, GstCaps* caps) {
  std::vector<jobflow::TensorSpec> specs;
  std::string error;
  if (!jobflow::gst::specs_from_caps(caps, &specs, &error)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("Invalid tensor caps: %s", error.c_str()), ("%" GST_PTR_FORMAT, caps));
    return false;
  }
  if (specs.size() != 1 || (specs[0].dtype != DType::Float32 && specs[0].dtype != DType::Float64)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                      ("jobdecode needs one float32 or float64 tensor of scores, got %zu tensor(s) of %s",
                       specs.size(), specs.empty() ? "nothing" : jobflow::gst::dtype_to_nns(specs[0].dtype)),
                      ("%" GST_PTR_FORMAT, caps));
    return false;
  }
  State* st = self->state;
  const jobflow::Shape& shape = specs[0].shape;
  st->dtype = specs[0].dtype;
  st->classes = shape.empty() ? 1 : static_cast<size_t>(shape.back());
  const size_t total = static_cast<size_t>(jobflow::numel(shape));
  st->rows = st->classes ? total / st->classes : 0;
  st->nbytes = total * jobflow::dtype_size(st->dtype);
  st->configured = true;
  if (!st->labels.empty() && st->labels.size() < st->classes) {
    const Settings cfg = settings_copy(self);
    GST_ELEMENT_WARNING(self, RESOURCE, READ,
                        ("Labels file \"%s\" (property 'labels') has %zu labels for %zu classes",
                         cfg.labels_path.c_str(), st->labels.size(), st->classes),
                        ("classes without a label are shown by their index"));
  }
  GST_DEBUG_OBJECT(self, "%zu row(s) of %zu classes", st->rows, st->classes);
  GstCaps* out = gst_caps_new_simple("text/x-raw", "format", G_TYPE_STRING, "utf8", nullptr);
  const bool ok = gst_pad_push_event(self->srcpad, gst_event_new_caps(out));
  gst_caps_unref(out);
  return ok;
}

std::string label_of(const State& st, size_t index) {
  if (index < st.labels.size()) return st.labels[index];
  return std::to_string(index);
}

GstFlowReturn chain(GstPad*, GstObject* parent, GstBuffer* buf) {
  GstJobDecode* self = GST_JOB_DECODE(parent);
  State* st = self->state;
  if (!st->configured) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("No caps before the first buffer"), (nullptr));
    gst_buffer_unref(buf);
    return GST_FLOW_NOT_NEGOTIATED;
  }
  try {
    const Settings cfg = settings_copy(self);
    GstMapInfo map;
    if (!gst_buffer_map(buf, &map, GST_MAP_READ)) {
      GST_ELEMENT_ERROR(self, STREAM, FAILED, ("Could not map the input buffer"), (nullptr));
      gst_buffer_unref(buf);
      return GST_FLOW_ERROR;
    }
    if (map.size != st->nbytes) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT, ("Tensor buffer has %" G_GSIZE_FORMAT " bytes, caps say %zu", map.size,
                                               st->nbytes),
                        (nullptr));
      gst_buffer_unmap(buf, &map);
      gst_buffer_unref(buf);
      return GST_FLOW_ERROR;
    }
    const GstClockTime pts = GST_BUFFER_PTS(buf);
    const GstClockTime running = gst_segment_to_running_time(&st->segment, GST_FORMAT_TIME, pts);
    const GstClockTime stream = gst_segment_to_stream_time(&st->segment, GST_FORMAT_TIME, pts);
    const size_t k = std::min<size_t>(cfg.top_k, st->classes);
    std::vector<double> scores(st->classes);
    std::vector<size_t> order(st->classes);
    std::string text;
    std::vector<GstMessage*> messages;
    for (size_t r = 0; r < st->rows; ++r) {
      for (size_t c = 0; c < st->classes; ++c) {
        const size_t i = r * st->classes + c;
        if (st->dtype == DType::Float32) {
          float v;
          std::memcpy(&v, map.data + i * 4, 4);
          scores[c] = v;
        } else {
          std::memcpy(&scores[c], map.data + i * 8, 8);
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
        const std::string label = label_of(*st, c);
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
        messages.push_back(gst_message_new_element(GST_OBJECT(self), s));
      } else {
        g_value_unset(&labels);
        g_value_unset(&values);
        g_value_unset(&indices);
      }
      if (r > 0) text += "\n";
      text += line;
    }
    gst_buffer_unmap(buf, &map);

    GstBuffer* out = gst_buffer_new_allocate(nullptr, text.size(), nullptr);
    gst_buffer_fill(out, 0, text.data(), text.size());
    gst_buffer_copy_into(out, buf, static_cast<GstBufferCopyFlags>(GST_BUFFER_COPY_TIMESTAMPS), 0, -1);
    gst_buffer_unref(buf);
    for (GstMessage* m : messages) gst_element_post_message(GST_ELEMENT(self), m);
    return gst_pad_push(self->srcpad, out);
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("Decoding failed"), ("%s", e.what()));
    return GST_FLOW_ERROR;
  }
}

gboolean sink_event(GstPad* pad, GstObject* parent, GstEvent* event) {
  GstJobDecode* self = GST_JOB_DECODE(parent);
  try {
    switch (GST_EVENT_TYPE(event)) {
      case GST_EVENT_CAPS: {
        GstCaps* caps;
        gst_event_parse_caps(event, &caps);
        const bool ok = configure(self, caps);
        gst_event_unref(event);
        return ok;
      }
      case GST_EVENT_SEGMENT:
        gst_event_copy_segment(event, &self->state->segment);
        break;
      case GST_EVENT_FLUSH_STOP:
        gst_segment_init(&self->state->segment, GST_FORMAT_TIME);
        break;
      default:
        break;
    }
    return gst_pad_event_default(pad, parent, event);
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("Event handling failed"), ("%s", e.what()));
    return FALSE;
  }
}

GstStateChangeReturn change_state(GstElement* element, GstStateChange transition) {
  GstJobDecode* self = GST_JOB_DECODE(element);
  try {
    if (transition == GST_STATE_CHANGE_READY_TO_PAUSED) {
      *self->state = State{};
      gst_segment_init(&self->state->segment, GST_FORMAT_TIME);
      if (!load_labels(self)) return GST_STATE_CHANGE_FAILURE;
    }
    GstStateChangeReturn ret = GST_ELEMENT_CLASS(gst_job_decode_parent_class)->change_state(element, transition);
    if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) *self->state = State{};
    return ret;
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, STATE_CHANGE, ("State change failed"), ("%s", e.what()));
    return GST_STATE_CHANGE_FAILURE;
  }
}

void set_property(GObject* object, guint prop_id, const GValue* value, GParamSpec* pspec) {
  GstJobDecode* self = GST_JOB_DECODE(object);
  g_mutex_lock(&self->lock);
  try {  // std::string may throw; nothing escapes into GObject
    Settings* s = self->settings;
    switch (prop_id) {
      case PROP_MODE: s->mode = static_cast<Mode>(g_value_get_enum(value)); break;
      case PROP_LABELS: {
        const gchar* v = g_value_get_string(value);
        s->labels_path = v ? v : "";
        break;
      }
      case PROP_TOP_K: s->top_k = g_value_get_uint(value); break;
      case PROP_THRESHOLD: s->threshold = g_value_get_double(value); break;
      case PROP_SOFTMAX: s->softmax = g_value_get_boolean(value); break;
      case PROP_MESSAGE: s->message = g_value_get_boolean(value); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
    }
  } catch (const std::exception& e) {
    GST_ERROR_OBJECT(self, "could not set property %s: %s", pspec->name, e.what());
  }
  g_mutex_unlock(&self->lock);
}

void get_property(GObject* object, guint prop_id, GValue* value, GParamSpec* pspec) {
  GstJobDecode* self = GST_JOB_DECODE(object);
  g_mutex_lock(&self->lock);
  const Settings* s = self->settings;
  switch (prop_id) {
    case PROP_MODE: g_value_set_enum(value, s->mode); break;
    case PROP_LABELS: g_value_set_string(value, s->labels_path.empty() ? nullptr : s->labels_path.c_str()); break;
    case PROP_TOP_K: g_value_set_uint(value, s->top_k); break;
    case PROP_THRESHOLD: g_value_set_double(value, s->threshold); break;
    case PROP_SOFTMAX: g_value_set_boolean(value, s->softmax); break;
    case PROP_MESSAGE: g_value_set_boolean(value, s->message); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
  }
  g_mutex_unlock(&self->lock);
}

void finalize(GObject* object) {
  GstJobDecode* self = GST_JOB_DECODE(object);
  delete self->state;
  delete self->settings;
  g_mutex_clear(&self->lock);
  G_OBJECT_CLASS(gst_job_decode_parent_class)->finalize(object);
}

}  // namespace

static void gst_job_decode_class_init(GstJobDecodeClass* klass) {
  GObjectClass* gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  gobject_class->set_property = set_property;
  gobject_class->get_property = get_property;
  gobject_class->finalize = finalize;
  element_class->change_state = change_state;

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

static void gst_job_decode_init(GstJobDecode* self) {
  g_mutex_init(&self->lock);
  self->settings = new Settings();
  self->state = new State();
  gst_segment_init(&self->state->segment, GST_FORMAT_TIME);
  self->sinkpad = gst_pad_new_from_static_template(&sink_template, "sink");
  gst_pad_set_chain_function(self->sinkpad, chain);
  gst_pad_set_event_function(self->sinkpad, sink_event);
  gst_element_add_pad(GST_ELEMENT(self), self->sinkpad);
  self->srcpad = gst_pad_new_from_static_template(&src_template, "src");
  gst_pad_use_fixed_caps(self->srcpad);
  gst_element_add_pad(GST_ELEMENT(self), self->srcpad);
}

gboolean jobflow_register_jobdecode(GstPlugin* plugin) {
  GST_DEBUG_CATEGORY_INIT(jobdecode_debug, "jobdecode", 0, "Jobflow tensor decoder");
  return gst_element_register(plugin, "jobdecode", GST_RANK_NONE, GST_TYPE_JOB_DECODE);
}

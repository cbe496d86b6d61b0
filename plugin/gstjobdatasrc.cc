/* jobdatasrc: see gstjobdatasrc.h and docs/elements.md#jobdatasrc.
 *
 * Settings (properties, a Locked<Settings>) are copied into the streaming
 * State in start(); changes apply from the next READY->PAUSED.
 * start() reads the two IDX files (jobflow::data::read_idx), create()
 * converts one batch at a time, in file order or in a per-epoch
 * permutation drawn from (seed, epoch). Stream positions are sample
 * indices across epochs: position p is sample order(p / per_epoch)[p %
 * per_epoch]; a batch is positions [p, p + B). */
#include "gstjobdatasrc.h"

#include "element_util.h"
#include "jobflow_meta.h"
#include "tensor_caps.h"

#include <jobflow/data.h>

#include <cstring>
#include <algorithm>
#include <exception>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <string>
#include <vector>

GST_DEBUG_CATEGORY_STATIC(jobdatasrc_debug);
#define GST_CAT_DEFAULT jobdatasrc_debug

namespace {

using jobflow::DType;
using jobflow::Tensor;
using jobflow::TensorSpec;

enum DataSet { kTrain = 0, kTest = 1 };

constexpr const char* kDefaultLocation = "/usr/share/datasets/fashion-mnist";
constexpr DataSet kDefaultSet = kTrain;
constexpr guint kDefaultBatchSize = 100;
constexpr guint kDefaultEpochs = 1;
constexpr gboolean kDefaultShuffle = FALSE;
constexpr guint64 kDefaultSeed = 0;
constexpr guint64 kDefaultNumSamples = 0;
/* Stream time of one sample. */
constexpr GstClockTime kSampleDuration = GST_MSECOND;
constexpr const char* kInstallHint = "apt-get install dataset-fashion-mnist";

enum {
  PROP_0,
  PROP_LOCATION,
  PROP_SET,
  PROP_BATCH_SIZE,
  PROP_EPOCHS,
  PROP_SHUFFLE,
  PROP_SEED,
  PROP_NUM_SAMPLES,
  PROP_LABELS,
};

struct Settings {
  std::string location = kDefaultLocation;
  DataSet set = kDefaultSet;
  guint batch_size = kDefaultBatchSize;
  guint epochs = kDefaultEpochs;
  bool shuffle = kDefaultShuffle;
  guint64 seed = kDefaultSeed;
  guint64 num_samples = kDefaultNumSamples;
  bool labels = true;  // stream the labels tensor too (predict jobs take images only)
};

/* Built in start(), dropped in stop(). */
struct State {
  Settings cfg;
  Tensor images;            // (N, H, W) uint8 or float32, as read
  Tensor labels;            // (N,) int32
  int64_t rows = 0, cols = 0;
  int64_t n = 0;            // samples used (num-samples)
  int64_t per_epoch = 0;    // samples streamed per epoch (full batches)
  int64_t total = 0;        // per_epoch * epochs
  std::vector<TensorSpec> specs;
  /* The permutation of the epoch `order_epoch` (shuffle only). */
  int64_t order_epoch = -1;
  std::vector<uint32_t> order;
};

/* The permutation of [0, n) for an epoch: Fisher-Yates over mt19937_64
 * (both fully specified by the C++ standard, so the order is the same on
 * every platform; std::shuffle's is not). */
void draw_order(uint64_t seed, int64_t epoch, int64_t n, std::vector<uint32_t>* out) {
  out->resize(static_cast<size_t>(n));
  std::iota(out->begin(), out->end(), 0u);
  std::mt19937_64 rng(seed ^ (static_cast<uint64_t>(epoch) * 0x9E3779B97F4A7C15ull));
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t j = rng() % static_cast<uint64_t>(i + 1);
    std::swap((*out)[static_cast<size_t>(i)], (*out)[static_cast<size_t>(j)]);
  }
}

std::string find_file(const std::string& dir, const std::string& name) {
  std::string plain = dir + "/" + name;
  if (g_file_test(plain.c_str(), G_FILE_TEST_IS_REGULAR)) return plain;
  std::string gz = plain + ".gz";
  if (g_file_test(gz.c_str(), G_FILE_TEST_IS_REGULAR)) return gz;
  return "";
}

GType data_set_get_type() {
  static GType type = 0;
  static const GEnumValue values[] = {
      {kTrain, "The training split (train-*-ubyte)", "train"},
      {kTest, "The test split (t10k-*-ubyte)", "test"},
      {0, nullptr, nullptr},
  };
  return jobflow::gst::enum_type(&type, "GstJobDataSrcSet", values);
}

/* Where the stream is, for queries from any thread; `total` and `batch`
 * are 0 while stopped. */
struct Position {
  int64_t pos = 0;    // next stream position (sample index across epochs)
  int64_t total = 0;  // positions in the stream
  guint batch = 0;    // batch size of the running stream
};

struct Impl {
  jobflow::gst::Locked<Settings> settings;
  jobflow::gst::Locked<Position> position;
  /* Built in start(), dropped in stop(); the streaming thread's (create
   * and do_seek, serialized by the stream lock). */
  std::unique_ptr<State> state;
};

}  // namespace

struct _GstJobDataSrc {
  GstPushSrc parent;
  Impl* impl;
};

G_DEFINE_TYPE(GstJobDataSrc, gst_job_data_src, GST_TYPE_PUSH_SRC)

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS("other/tensors, format=(string)static, num_tensors=(int)2, types=(string)\"float32,int32\", "
                    "framerate=(fraction)[0/1, MAX]"));

/* ---- properties ---- */

static void gst_job_data_src_set_property(GObject* object, guint id, const GValue* value, GParamSpec* pspec) {
  GST_JOB_DATA_SRC(object)->impl->settings.with([&](Settings& s) {
    switch (id) {
      case PROP_LOCATION: {
        const char* v = g_value_get_string(value);
        s.location = v ? v : "";
        break;
      }
      case PROP_SET: s.set = static_cast<DataSet>(g_value_get_enum(value)); break;
      case PROP_BATCH_SIZE: s.batch_size = g_value_get_uint(value); break;
      case PROP_EPOCHS: s.epochs = g_value_get_uint(value); break;
      case PROP_SHUFFLE: s.shuffle = g_value_get_boolean(value); break;
      case PROP_SEED: s.seed = g_value_get_uint64(value); break;
      case PROP_NUM_SAMPLES: s.num_samples = g_value_get_uint64(value); break;
      case PROP_LABELS: s.labels = g_value_get_boolean(value); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
    }
  });
}

static void gst_job_data_src_get_property(GObject* object, guint id, GValue* value, GParamSpec* pspec) {
  GST_JOB_DATA_SRC(object)->impl->settings.with([&](const Settings& s) {
    switch (id) {
      case PROP_LOCATION: g_value_set_string(value, s.location.c_str()); break;
      case PROP_SET: g_value_set_enum(value, s.set); break;
      case PROP_BATCH_SIZE: g_value_set_uint(value, s.batch_size); break;
      case PROP_EPOCHS: g_value_set_uint(value, s.epochs); break;
      case PROP_SHUFFLE: g_value_set_boolean(value, s.shuffle); break;
      case PROP_SEED: g_value_set_uint64(value, s.seed); break;
      case PROP_NUM_SAMPLES: g_value_set_uint64(value, s.num_samples); break;
      case PROP_LABELS: g_value_set_boolean(value, s.labels); break;
      default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
    }
  });
}

/* ---- start / stop ---- */

/* Reads the files; posts the element error and returns false on failure. */
static bool load(GstJobDataSrc* self, State* st) {
  const Settings& cfg = st->cfg;
  const std::string& loc = cfg.location;
  if (loc.empty() || !g_file_test(loc.c_str(), G_FILE_TEST_IS_DIR)) {
    GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND,
                      ("location=\"%s\": no such folder (the default data set installs with: %s)", loc.c_str(),
                       kInstallHint),
                      ("property location must name a folder holding the IDX files"));
    return false;
  }
  const char* prefix = cfg.set == kTrain ? "train" : "t10k";
  const char* set_name = cfg.set == kTrain ? "train" : "test";
  const std::string img_name = std::string(prefix) + "-images-idx3-ubyte";
  const std::string lbl_name = std::string(prefix) + "-labels-idx1-ubyte";
  const std::string img_path = find_file(loc, img_name);
  const std::string lbl_path = find_file(loc, lbl_name);
  if (img_path.empty() || lbl_path.empty()) {
    const std::string& missing = img_path.empty() ? img_name : lbl_name;
    GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND,
                      ("location=\"%s\" set=%s: %s (or %s.gz) not found (the default data set installs with: %s)",
                       loc.c_str(), set_name, missing.c_str(), missing.c_str(), kInstallHint),
                      (nullptr));
    return false;
  }
  try {
    Tensor images = jobflow::data::read_idx(img_path);
    Tensor labels = jobflow::data::read_idx(lbl_path);
    if (images.ndim() != 3 || (images.dtype() != DType::UInt8 && images.dtype() != DType::Float32)) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT,
                        ("%s: images are %s %s, expected (N, H, W) uint8 or float32", img_path.c_str(),
                         jobflow::shape_str(images.shape()).c_str(), jobflow::dtype_name(images.dtype())),
                        (nullptr));
      return false;
    }
    if (labels.ndim() != 1 || jobflow::is_floating(labels.dtype())) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT,
                        ("%s: labels are %s %s, expected (N,) integers", lbl_path.c_str(),
                         jobflow::shape_str(labels.shape()).c_str(), jobflow::dtype_name(labels.dtype())),
                        (nullptr));
      return false;
    }
    if (labels.dim(0) != images.dim(0)) {
      GST_ELEMENT_ERROR(self, STREAM, FORMAT,
                        ("location=\"%s\" set=%s: %" G_GINT64_FORMAT " images but %" G_GINT64_FORMAT " labels",
                         loc.c_str(), set_name, images.dim(0), labels.dim(0)),
                        (nullptr));
      return false;
    }
    st->images = images;
    st->labels = labels.dtype() == DType::Int32 ? labels : labels.astype(DType::Int32);
  } catch (const jobflow::Error& e) {
    GST_ELEMENT_ERROR(self, STREAM, DECODE, ("location=\"%s\" set=%s: %s", loc.c_str(), set_name, e.what()),
                      (nullptr));
    return false;
  } catch (const std::bad_alloc&) {
    GST_ELEMENT_ERROR(self, RESOURCE, NO_SPACE_LEFT,
                      ("location=\"%s\" set=%s: out of memory reading the data set", loc.c_str(), set_name),
                      (nullptr));
    return false;
  }
  const int64_t available = st->images.dim(0);
  st->rows = st->images.dim(1);
  st->cols = st->images.dim(2);
  st->n = cfg.num_samples > 0 ? std::min<int64_t>(available, static_cast<int64_t>(cfg.num_samples)) : available;
  const int64_t B = cfg.batch_size;
  if (st->n < B) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                      ("batch-size=%u is larger than the %" G_GINT64_FORMAT " samples of set=%s (num-samples=%"
                       G_GUINT64_FORMAT ")",
                       cfg.batch_size, st->n, set_name, cfg.num_samples),
                      (nullptr));
    return false;
  }
  st->per_epoch = st->n / B * B;
  st->total = st->per_epoch * static_cast<int64_t>(cfg.epochs);
  st->specs = {TensorSpec{{B, 1, st->rows, st->cols}, DType::Float32}};
  if (cfg.labels) st->specs.push_back(TensorSpec{{B}, DType::Int32});
  st->order_epoch = -1;
  st->order.clear();
  GST_INFO_OBJECT(self,
                  "%s: %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT " samples of %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                  ", %" G_GINT64_FORMAT " batches of %u per epoch, %u epochs",
                  img_path.c_str(), st->n, available, st->rows, st->cols, st->per_epoch / B, cfg.batch_size,
                  cfg.epochs);
  return true;
}

static gboolean gst_job_data_src_start(GstBaseSrc* bsrc) {
  auto* self = GST_JOB_DATA_SRC(bsrc);
  try {
    Impl& p = *self->impl;
    auto st = std::make_unique<State>();
    st->cfg = p.settings.copy();
    if (!load(self, st.get())) return FALSE;
    const GstClockTime duration = static_cast<GstClockTime>(st->total) * kSampleDuration;
    p.state = std::move(st);
    p.position.with([&](Position& pos) { pos = {0, p.state->total, p.state->cfg.batch_size}; });
    GST_OBJECT_LOCK(self);  // GstBaseSrc's segment is under the object lock
    bsrc->segment.duration = duration;
    GST_OBJECT_UNLOCK(self);
    return TRUE;
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("start failed: %s", e.what()), (nullptr));
    return FALSE;
  }
}

static gboolean gst_job_data_src_stop(GstBaseSrc* bsrc) {
  Impl& p = *GST_JOB_DATA_SRC(bsrc)->impl;
  p.position.exchange(Position{});
  p.state.reset();
  return TRUE;
}

static gboolean gst_job_data_src_negotiate(GstBaseSrc* bsrc) {
  auto* self = GST_JOB_DATA_SRC(bsrc);
  State* st = self->impl->state.get();
  if (!st) return FALSE;
  GstCaps* caps = jobflow::gst::caps_from_specs(st->specs, 1000, static_cast<int>(st->cfg.batch_size));
  GST_DEBUG_OBJECT(self, "caps %" GST_PTR_FORMAT, caps);
  gboolean ok = gst_base_src_set_caps(bsrc, caps);
  gst_caps_unref(caps);
  return ok;
}

/* ---- seeking and queries ---- */

static gboolean gst_job_data_src_is_seekable(GstBaseSrc*) { return TRUE; }

/* Stream time <-> sample index (and batch index) conversions. */
static bool convert(guint batch, GstFormat src_fmt, gint64 src_val, GstFormat dst_fmt, gint64* dst_val) {
  if (src_fmt == dst_fmt || src_val == -1) {
    *dst_val = src_val;
    return true;
  }
  const gint64 B = batch;
  if (B <= 0) return false;
  gint64 samples;
  switch (src_fmt) {
    case GST_FORMAT_TIME: samples = src_val / static_cast<gint64>(kSampleDuration); break;
    case GST_FORMAT_DEFAULT: samples = src_val; break;
    case GST_FORMAT_BUFFERS: samples = src_val * B; break;
    default: return false;
  }
  switch (dst_fmt) {
    case GST_FORMAT_TIME: *dst_val = samples * static_cast<gint64>(kSampleDuration); break;
    case GST_FORMAT_DEFAULT: *dst_val = samples; break;
    case GST_FORMAT_BUFFERS: *dst_val = samples / B; break;
    default: return false;
  }
  return true;
}

/* The running stream's batch size, or the property's while stopped. */
static guint current_batch(GstJobDataSrc* self) {
  const guint running = self->impl->position.get(&Position::batch);
  return running ? running : self->impl->settings.get(&Settings::batch_size);
}

/* DEFAULT (sample) and BUFFERS (batch) seeks become TIME segments. */
static gboolean gst_job_data_src_prepare_seek_segment(GstBaseSrc* bsrc, GstEvent* seek, GstSegment* segment) {
  auto* self = GST_JOB_DATA_SRC(bsrc);
  gdouble rate;
  GstFormat format;
  GstSeekFlags flags;
  GstSeekType start_type, stop_type;
  gint64 start, stop;
  gst_event_parse_seek(seek, &rate, &format, &flags, &start_type, &start, &stop_type, &stop);
  if (rate <= 0.0) {
    GST_WARNING_OBJECT(self, "only forward playback is supported (rate %f)", rate);
    return FALSE;
  }
  if (format != GST_FORMAT_TIME) {
    const guint B = current_batch(self);
    if (!convert(B, format, start, GST_FORMAT_TIME, &start) || !convert(B, format, stop, GST_FORMAT_TIME, &stop)) {
      GST_WARNING_OBJECT(self, "cannot seek in format %s", gst_format_get_name(format));
      return FALSE;
    }
  }
  gboolean update;
  return gst_segment_do_seek(segment, rate, GST_FORMAT_TIME, flags, start_type, start, stop_type, stop, &update);
}

static gboolean gst_job_data_src_do_seek(GstBaseSrc* bsrc, GstSegment* segment) {
  auto* self = GST_JOB_DATA_SRC(bsrc);
  if (segment->format != GST_FORMAT_TIME || segment->rate <= 0.0) return FALSE;
  /* Round up to the next whole sample. */
  const guint64 start = segment->start;
  int64_t p = static_cast<int64_t>((start + kSampleDuration - 1) / kSampleDuration);
  if (self->impl->state) p = std::min(p, self->impl->state->total);
  segment->position = static_cast<guint64>(p) * kSampleDuration;
  segment->time = segment->start;
  self->impl->position.with([&](Position& pos) { pos.pos = p; });
  GST_DEBUG_OBJECT(self, "seek to sample %" G_GINT64_FORMAT, p);
  return TRUE;
}

static gboolean gst_job_data_src_query(GstBaseSrc* bsrc, GstQuery* query) {
  auto* self = GST_JOB_DATA_SRC(bsrc);
  const auto [pos, total, batch] = self->impl->position.copy();
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_DURATION: {
      GstFormat fmt;
      gst_query_parse_duration(query, &fmt, nullptr);
      gint64 v;
      if (!batch || !convert(batch, GST_FORMAT_DEFAULT, total, fmt, &v)) return FALSE;
      gst_query_set_duration(query, fmt, v);
      return TRUE;
    }
    case GST_QUERY_POSITION: {
      GstFormat fmt;
      gst_query_parse_position(query, &fmt, nullptr);
      if (fmt != GST_FORMAT_DEFAULT && fmt != GST_FORMAT_BUFFERS) break;
      gint64 v;
      if (!batch || !convert(batch, GST_FORMAT_DEFAULT, pos, fmt, &v)) return FALSE;
      gst_query_set_position(query, fmt, v);
      return TRUE;
    }
    case GST_QUERY_CONVERT: {
      GstFormat src_fmt, dst_fmt;
      gint64 src_val, dst_val;
      gst_query_parse_convert(query, &src_fmt, &src_val, &dst_fmt, nullptr);
      if (!convert(current_batch(self), src_fmt, src_val, dst_fmt, &dst_val)) return FALSE;
      gst_query_set_convert(query, src_fmt, src_val, dst_fmt, dst_val);
      return TRUE;
    }
    case GST_QUERY_SEEKING: {
      GstFormat fmt;
      gst_query_parse_seeking(query, &fmt, nullptr, nullptr, nullptr);
      if (fmt != GST_FORMAT_TIME && fmt != GST_FORMAT_DEFAULT && fmt != GST_FORMAT_BUFFERS) {
        gst_query_set_seeking(query, fmt, FALSE, -1, -1);
        return TRUE;
      }
      gint64 end = -1;
      if (batch) convert(batch, GST_FORMAT_DEFAULT, total, fmt, &end);
      gst_query_set_seeking(query, fmt, TRUE, 0, end);
      return TRUE;
    }
    default:
      break;
  }
  return GST_BASE_SRC_CLASS(gst_job_data_src_parent_class)->query(bsrc, query);
}

/* ---- streaming ---- */

static bool fill_batch(State* st, int64_t first, float* images, int32_t* labels) {
  const int64_t B = st->cfg.batch_size;
  const int64_t pixels = st->rows * st->cols;
  for (int64_t k = 0; k < B; ++k) {
    const int64_t p = first + k;
    const int64_t epoch = p / st->per_epoch;
    const int64_t in_epoch = p % st->per_epoch;
    int64_t idx = in_epoch;
    if (st->cfg.shuffle) {
      if (st->order_epoch != epoch) {
        draw_order(st->cfg.seed, epoch, st->n, &st->order);
        st->order_epoch = epoch;
      }
      idx = st->order[static_cast<size_t>(in_epoch)];
    }
    float* dst = images + k * pixels;
    if (st->images.dtype() == DType::UInt8) {
      const uint8_t* src = st->images.data<uint8_t>() + idx * pixels;
      for (int64_t i = 0; i < pixels; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
    } else {
      std::memcpy(dst, st->images.data<float>() + idx * pixels, static_cast<size_t>(pixels) * sizeof(float));
    }
    labels[k] = st->labels.data<int32_t>()[idx];
  }
  return true;
}

static GstMemory* alloc_memory(gsize size) {
  GstAllocationParams params;
  gst_allocation_params_init(&params);
  params.align = 63;  // the engine's tensors are 64-byte aligned
  return gst_allocator_alloc(nullptr, size, &params);
}

static GstFlowReturn create_impl(GstPushSrc* psrc, GstBuffer** out) {
  auto* self = GST_JOB_DATA_SRC(psrc);
  GstBaseSrc* bsrc = GST_BASE_SRC(psrc);
  State* st = self->impl->state.get();
  if (!st) return GST_FLOW_FLUSHING;
  const int64_t B = st->cfg.batch_size;
  const int64_t first = self->impl->position.get(&Position::pos);
  if (first + B > st->total) {
    GST_DEBUG_OBJECT(self, "EOS at sample %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT, first, st->total);
    return GST_FLOW_EOS;
  }
  const GstClockTime pts = static_cast<GstClockTime>(first) * kSampleDuration;
  GST_OBJECT_LOCK(self);  // GstBaseSrc's segment is under the object lock
  const guint64 stop = bsrc->segment.stop;
  GST_OBJECT_UNLOCK(self);
  if (GST_CLOCK_TIME_IS_VALID(stop) && pts >= stop) return GST_FLOW_EOS;

  const gsize image_bytes = static_cast<gsize>(B * st->rows * st->cols) * sizeof(float);
  const gsize label_bytes = static_cast<gsize>(B) * sizeof(int32_t);
  GstMemory* mi = alloc_memory(image_bytes);
  GstMemory* ml = alloc_memory(label_bytes);
  GstMapInfo map_i, map_l;
  if (!mi || !ml || !gst_memory_map(mi, &map_i, GST_MAP_WRITE)) {
    if (mi) gst_memory_unref(mi);
    if (ml) gst_memory_unref(ml);
    GST_ELEMENT_ERROR(self, RESOURCE, NO_SPACE_LEFT, ("cannot allocate a batch of %u", st->cfg.batch_size),
                      (nullptr));
    return GST_FLOW_ERROR;
  }
  if (!gst_memory_map(ml, &map_l, GST_MAP_WRITE)) {
    gst_memory_unmap(mi, &map_i);
    gst_memory_unref(mi);
    gst_memory_unref(ml);
    GST_ELEMENT_ERROR(self, RESOURCE, NO_SPACE_LEFT, ("cannot map a batch"), (nullptr));
    return GST_FLOW_ERROR;
  }
  bool ok = true;
  std::string what;
  try {
    fill_batch(st, first, reinterpret_cast<float*>(map_i.data), reinterpret_cast<int32_t*>(map_l.data));
  } catch (const std::exception& e) {
    ok = false;
    what = e.what();
  }
  gst_memory_unmap(mi, &map_i);
  gst_memory_unmap(ml, &map_l);
  if (!ok) {
    gst_memory_unref(mi);
    gst_memory_unref(ml);
    GST_ELEMENT_ERROR(self, CORE, FAILED, ("batch at sample %" G_GINT64_FORMAT ": %s", first, what.c_str()),
                      (nullptr));
    return GST_FLOW_ERROR;
  }

  GstBuffer* buf = gst_buffer_new();
  gst_buffer_append_memory(buf, mi);
  if (st->cfg.labels)
    gst_buffer_append_memory(buf, ml);
  else
    gst_memory_unref(ml);
  GST_BUFFER_PTS(buf) = pts;
  GST_BUFFER_DTS(buf) = pts;
  GST_BUFFER_DURATION(buf) = static_cast<GstClockTime>(B) * kSampleDuration;
  GST_BUFFER_OFFSET(buf) = static_cast<guint64>(first);
  GST_BUFFER_OFFSET_END(buf) = static_cast<guint64>(first + B);
  if (first == 0) GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DISCONT);
  jobflow::gst::add_tensor_meta(buf, st->specs, st->cfg.labels ? std::vector<std::string>{"images", "labels"}
                                                                : std::vector<std::string>{"images"});
  /* Seeks hold the stream lock, as create() does: no seek moved pos since
   * it was read above. The lock is for query readers. */
  self->impl->position.with([&](Position& pos) { pos.pos = first + B; });
  *out = buf;
  return GST_FLOW_OK;
}

static GstFlowReturn gst_job_data_src_create(GstPushSrc* psrc, GstBuffer** out) {
  try {
    return create_impl(psrc, out);
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(psrc, CORE, FAILED, ("jobdatasrc: %s", e.what()), (nullptr));
    return GST_FLOW_ERROR;
  }
}

/* ---- type ---- */

static void gst_job_data_src_class_init(GstJobDataSrcClass* klass) {
  GST_DEBUG_CATEGORY_INIT(jobdatasrc_debug, "jobdatasrc", 0, "Jobflow IDX data set source");
  GObjectClass* gobject_class = jobflow::gst::init_object_class<GstJobDataSrc>(klass, gst_job_data_src_set_property, gst_job_data_src_get_property);
  GstElementClass* element_class = GST_ELEMENT_CLASS(klass);
  GstBaseSrcClass* basesrc_class = GST_BASE_SRC_CLASS(klass);
  GstPushSrcClass* pushsrc_class = GST_PUSH_SRC_CLASS(klass);


  const auto flags =
      static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  g_object_class_install_property(
      gobject_class, PROP_LOCATION,
      g_param_spec_string("location", "Location",
                          "Folder holding the IDX files ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz])",
                          kDefaultLocation, flags));
  g_object_class_install_property(gobject_class, PROP_SET,
                                  g_param_spec_enum("set", "Set", "Which split to stream", data_set_get_type(),
                                                    kDefaultSet, flags));
  g_object_class_install_property(
      gobject_class, PROP_BATCH_SIZE,
      g_param_spec_uint("batch-size", "Batch size",
                        "Samples per buffer (the remainder of an epoch that does not fill a batch is skipped)", 1,
                        G_MAXINT, kDefaultBatchSize, flags));
  g_object_class_install_property(
      gobject_class, PROP_EPOCHS,
      g_param_spec_uint("epochs", "Epochs", "Passes over the data set before EOS", 1, G_MAXINT, kDefaultEpochs,
                        flags));
  g_object_class_install_property(
      gobject_class, PROP_SHUFFLE,
      g_param_spec_boolean("shuffle", "Shuffle",
                           "Stream every epoch in a new random order drawn from (seed, epoch)", kDefaultShuffle,
                           flags));
  g_object_class_install_property(
      gobject_class, PROP_SEED,
      g_param_spec_uint64("seed", "Seed", "Seed of the shuffle (the same seed gives the same order)", 0,
                          G_MAXUINT64, kDefaultSeed, flags));
  g_object_class_install_property(
      gobject_class, PROP_NUM_SAMPLES,
      g_param_spec_uint64("num-samples", "Number of samples",
                          "Use only the first N samples of the set (0 = all)", 0, G_MAXUINT64, kDefaultNumSamples,
                          flags));
  g_object_class_install_property(
      gobject_class, PROP_LABELS,
      g_param_spec_boolean("labels", "Labels",
                           "Stream the labels tensor after the images (false: images only, for predict jobs)", TRUE,
                           flags));

  gst_element_class_set_static_metadata(element_class, "Jobflow data set source", "Source/Tensor",
                                        "Streams an IDX (MNIST-format) data set as batches of image and label "
                                        "tensors",
                                        "Jobflow project");
  gst_element_class_add_static_pad_template(element_class, &src_template);

  basesrc_class->start = gst_job_data_src_start;
  basesrc_class->stop = gst_job_data_src_stop;
  basesrc_class->negotiate = gst_job_data_src_negotiate;
  basesrc_class->is_seekable = gst_job_data_src_is_seekable;
  basesrc_class->prepare_seek_segment = gst_job_data_src_prepare_seek_segment;
  basesrc_class->do_seek = gst_job_data_src_do_seek;
  basesrc_class->query = gst_job_data_src_query;
  pushsrc_class->create = gst_job_data_src_create;
}

static void gst_job_data_src_init(GstJobDataSrc* self) {
  self->impl = new Impl();
  gst_base_src_set_format(GST_BASE_SRC(self), GST_FORMAT_TIME);
  gst_base_src_set_live(GST_BASE_SRC(self), FALSE);
}

gboolean jobflow_register_jobdatasrc(GstPlugin* plugin) {
  return gst_element_register(plugin, "jobdatasrc", GST_RANK_NONE, GST_TYPE_JOB_DATA_SRC);
}

/* JobflowAnalyticsRelationMeta: see jobflow_analytics.h. The entries live
 * in a C++ store owned by the meta; relations are kept per entry as a
 * short list of (other id, type), since a frame's regions relate to few
 * others (the dense matrix upstream uses would grow with the square). */
#include "jobflow_analytics.h"

#include <gst/video/video.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace {

struct MtdDescriptor {
  const char* name;
};
const MtdDescriptor kOD{"object-detection"};
const MtdDescriptor kCls{"classification"};
const MtdDescriptor kTracking{"object-tracking"};
const MtdDescriptor kSegmentation{"segmentation"};
const MtdDescriptor kText{"text"};

JobflowAnalyticsMtdType type_of(const MtdDescriptor& d) { return reinterpret_cast<JobflowAnalyticsMtdType>(&d); }

/* A buffer reference that copies as a reference. */
class BufferRef {
 public:
  BufferRef() = default;
  explicit BufferRef(GstBuffer* b) : b_(b ? gst_buffer_ref(b) : nullptr) {}
  BufferRef(const BufferRef& o) : BufferRef(o.b_) {}
  BufferRef& operator=(const BufferRef& o) {
    if (this != &o) {
      if (o.b_) gst_buffer_ref(o.b_);
      if (b_) gst_buffer_unref(b_);
      b_ = o.b_;
    }
    return *this;
  }
  ~BufferRef() {
    if (b_) gst_buffer_unref(b_);
  }
  GstBuffer* get() const { return b_; }

 private:
  GstBuffer* b_ = nullptr;
};

struct OD {
  GQuark label = 0;
  gint x = 0, y = 0, w = 0, h = 0;
  gfloat r = 0.f, conf = 0.f;
};
struct Cls {
  std::vector<gfloat> levels;
  std::vector<GQuark> quarks;
};
struct Track {
  guint64 id = 0;
  GstClockTime first = GST_CLOCK_TIME_NONE, last = GST_CLOCK_TIME_NONE;
  bool lost = false;
};
struct Seg {
  BufferRef mask;
  JobflowSegmentationType type = JOBFLOW_SEGMENTATION_TYPE_SEMANTIC;
  std::vector<guint> ids;
  gint x = 0, y = 0;
  guint w = 0, h = 0;
};
struct Text {
  std::string text;
  gfloat conf = 0.f;
};

struct Entry {
  JobflowAnalyticsMtdType type = 0;
  std::variant<OD, Cls, Track, Seg, Text> data;
  std::vector<std::pair<guint, int>> rel;  // (other id, relation type) for this -> other
};

struct Store {
  std::vector<Entry> entries;  // id = index
};

}  // namespace

struct _JobflowAnalyticsRelationMeta {
  GstMeta meta;
  Store* store;
};

namespace {

Entry* entry(JobflowAnalyticsRelationMeta* meta, guint id) {
  if (!meta || !meta->store || id >= meta->store->entries.size()) return nullptr;
  return &meta->store->entries[id];
}

template <class T>
T* data_of(const JobflowAnalyticsMtd* h, const MtdDescriptor& d) {
  if (!h) return nullptr;
  Entry* e = entry(h->meta, h->id);
  if (!e || e->type != type_of(d)) return nullptr;
  return &std::get<T>(e->data);
}

template <class T>
gboolean add(JobflowAnalyticsRelationMeta* meta, const MtdDescriptor& d, T value, JobflowAnalyticsMtd* out) {
  g_return_val_if_fail(meta != nullptr && meta->store != nullptr, FALSE);
  Entry e;
  e.type = type_of(d);
  e.data = std::move(value);
  meta->store->entries.push_back(std::move(e));
  if (out) {
    out->id = static_cast<guint>(meta->store->entries.size() - 1);
    out->meta = meta;
  }
  return TRUE;
}

gboolean get_typed(JobflowAnalyticsRelationMeta* meta, guint id, const MtdDescriptor& d, JobflowAnalyticsMtd* rlt) {
  return jobflow_analytics_relation_meta_get_mtd(meta, id, type_of(d), rlt);
}

bool single_relation(JobflowAnalyticsRelTypes t) {
  return t == JOBFLOW_ANALYTICS_REL_TYPE_NONE || t == JOBFLOW_ANALYTICS_REL_TYPE_IS_PART_OF ||
         t == JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN || t == JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO;
}

/* ------------------------------------------------------------ GstMeta */

gboolean meta_init(GstMeta* meta, gpointer, GstBuffer*) {
  reinterpret_cast<JobflowAnalyticsRelationMeta*>(meta)->store = new Store();
  return TRUE;
}

void meta_free(GstMeta* meta, GstBuffer*) {
  auto* m = reinterpret_cast<JobflowAnalyticsRelationMeta*>(meta);
  delete m->store;
  m->store = nullptr;
}

/* Appends src's entries to dst (ids shifted past dst's own), scaling boxes
 * and mask placements by (sx, sy). */
void append_store(Store* dst, const Store& src, double sx, double sy) {
  const guint base = static_cast<guint>(dst->entries.size());
  for (const Entry& e : src.entries) {
    Entry c = e;
    for (auto& [other, type] : c.rel) other += base;
    if (sx != 1.0 || sy != 1.0) {
      if (auto* od = std::get_if<OD>(&c.data)) {
        const double x1 = od->x * sx, y1 = od->y * sy, x2 = (od->x + od->w) * sx, y2 = (od->y + od->h) * sy;
        od->x = static_cast<gint>(std::lround(x1));
        od->y = static_cast<gint>(std::lround(y1));
        od->w = static_cast<gint>(std::lround(x2)) - od->x;
        od->h = static_cast<gint>(std::lround(y2)) - od->y;
      } else if (auto* seg = std::get_if<Seg>(&c.data)) {
        const double x1 = seg->x * sx, y1 = seg->y * sy, x2 = (seg->x + seg->w) * sx, y2 = (seg->y + seg->h) * sy;
        seg->x = static_cast<gint>(std::lround(x1));
        seg->y = static_cast<gint>(std::lround(y1));
        seg->w = static_cast<guint>(std::max<long>(0, std::lround(x2) - seg->x));
        seg->h = static_cast<guint>(std::max<long>(0, std::lround(y2) - seg->y));
      }
    }
    dst->entries.push_back(std::move(c));
  }
}

gboolean meta_transform(GstBuffer* dest, GstMeta* meta, GstBuffer*, GQuark type, gpointer data) {
  auto* src = reinterpret_cast<JobflowAnalyticsRelationMeta*>(meta);
  double sx = 1.0, sy = 1.0;
  if (GST_META_TRANSFORM_IS_COPY(type)) {
    auto* copy = static_cast<GstMetaTransformCopy*>(data);
    if (copy->region) return FALSE;  // a part of the frame: the boxes may not be in it
  } else if (type == gst_video_meta_transform_scale_get_quark()) {
    auto* t = static_cast<GstVideoMetaTransform*>(data);
    if (GST_VIDEO_INFO_WIDTH(t->in_info) <= 0 || GST_VIDEO_INFO_HEIGHT(t->in_info) <= 0) return FALSE;
    sx = static_cast<double>(GST_VIDEO_INFO_WIDTH(t->out_info)) / GST_VIDEO_INFO_WIDTH(t->in_info);
    sy = static_cast<double>(GST_VIDEO_INFO_HEIGHT(t->out_info)) / GST_VIDEO_INFO_HEIGHT(t->in_info);
  } else {
    return FALSE;
  }
  JobflowAnalyticsRelationMeta* dst = jobflow_buffer_get_or_add_analytics_relation_meta(dest);
  if (!dst) return FALSE;
  append_store(dst->store, *src->store, sx, sy);
  return TRUE;
}

/* ------------------------------------------------------------ JSON */

void member_int(JsonBuilder* b, const char* name, gint64 v) {
  json_builder_set_member_name(b, name);
  json_builder_add_int_value(b, v);
}
void member_double(JsonBuilder* b, const char* name, double v) {
  json_builder_set_member_name(b, name);
  json_builder_add_double_value(b, v);
}
void member_string(JsonBuilder* b, const char* name, const char* v) {
  json_builder_set_member_name(b, name);
  json_builder_add_string_value(b, v ? v : "");
}
const char* label_text(GQuark q) { return q ? g_quark_to_string(q) : ""; }
/* Confidences rounded to 4 decimals (float noise is not information). */
double round4(double v) { return std::round(v * 10000.0) / 10000.0; }

void write_classes(JsonBuilder* b, const Cls& c) {
  json_builder_begin_array(b);
  for (size_t i = 0; i < c.levels.size(); ++i) {
    json_builder_begin_object(b);
    member_string(b, "label", label_text(c.quarks[i]));
    member_double(b, "confidence", round4(c.levels[i]));
    json_builder_end_object(b);
  }
  json_builder_end_array(b);
}

void write_mask(JsonBuilder* b, guint id, const Seg& s) {
  json_builder_begin_object(b);
  member_int(b, "id", id);
  member_string(b, "type", s.type == JOBFLOW_SEGMENTATION_TYPE_INSTANCE ? "instance" : "semantic");
  member_int(b, "x", s.x);
  member_int(b, "y", s.y);
  member_int(b, "w", s.w);
  member_int(b, "h", s.h);
  GstVideoMeta* vm = s.mask.get() ? gst_buffer_get_video_meta(s.mask.get()) : nullptr;
  member_int(b, "width", vm ? vm->width : 0);
  member_int(b, "height", vm ? vm->height : 0);
  json_builder_set_member_name(b, "region-ids");
  json_builder_begin_array(b);
  for (guint r : s.ids) json_builder_add_int_value(b, r);
  json_builder_end_array(b);
  json_builder_end_object(b);
}

void write_track(JsonBuilder* b, const Track& t) {
  json_builder_begin_object(b);
  member_int(b, "id", static_cast<gint64>(t.id));
  if (GST_CLOCK_TIME_IS_VALID(t.first)) member_int(b, "first-seen", static_cast<gint64>(t.first));
  if (GST_CLOCK_TIME_IS_VALID(t.last)) member_int(b, "last-seen", static_cast<gint64>(t.last));
  json_builder_set_member_name(b, "lost");
  json_builder_add_boolean_value(b, t.lost);
  json_builder_end_object(b);
}

/* Compact JSON text (jobflow_json_node_to_string). */
void write_string(const char* s, std::string* out) {
  *out += '"';
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(s); *p; ++p) {
    switch (*p) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (*p < 0x20) {
          char u[8];
          g_snprintf(u, sizeof u, "\\u%04x", *p);
          *out += u;
        } else {
          *out += static_cast<char>(*p);
        }
    }
  }
  *out += '"';
}

void write_double(double v, std::string* out) {
  if (!std::isfinite(v)) {
    *out += "null";
    return;
  }
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  for (int digits = 1; digits <= 17; ++digits) {
    char fmt[8];
    g_snprintf(fmt, sizeof fmt, "%%.%dg", digits);
    g_ascii_formatd(buf, sizeof buf, fmt, v);
    if (g_ascii_strtod(buf, nullptr) == v) break;
  }
  *out += buf;
}

void write_node(JsonNode* node, std::string* out) {
  if (!node) {
    *out += "null";
    return;
  }
  switch (json_node_get_node_type(node)) {
    case JSON_NODE_OBJECT: {
      JsonObject* o = json_node_get_object(node);
      *out += '{';
      GList* members = json_object_get_members(o);  // in insertion order
      for (GList* m = members; m; m = m->next) {
        if (m != members) *out += ',';
        const char* name = static_cast<const char*>(m->data);
        write_string(name, out);
        *out += ':';
        write_node(json_object_get_member(o, name), out);
      }
      g_list_free(members);
      *out += '}';
      break;
    }
    case JSON_NODE_ARRAY: {
      JsonArray* a = json_node_get_array(node);
      *out += '[';
      for (guint i = 0; i < json_array_get_length(a); ++i) {
        if (i) *out += ',';
        write_node(json_array_get_element(a, i), out);
      }
      *out += ']';
      break;
    }
    case JSON_NODE_VALUE:
      switch (json_node_get_value_type(node)) {
        case G_TYPE_INT64: *out += std::to_string(json_node_get_int(node)); break;
        case G_TYPE_DOUBLE: write_double(json_node_get_double(node), out); break;
        case G_TYPE_BOOLEAN: *out += json_node_get_boolean(node) ? "true" : "false"; break;
        case G_TYPE_STRING: write_string(json_node_get_string(node), out); break;
        default: *out += "null"; break;
      }
      break;
    case JSON_NODE_NULL:
      *out += "null";
      break;
  }
}

}  // namespace

extern "C" {

GType jobflow_analytics_relation_meta_api_get_type(void) {
  static GType type = 0;
  static const gchar* tags[] = {nullptr};
  if (g_once_init_enter(&type)) g_once_init_leave(&type, gst_meta_api_type_register("JobflowAnalyticsRelationMetaAPI", tags));
  return type;
}

const GstMetaInfo* jobflow_analytics_relation_meta_get_info(void) {
  static const GstMetaInfo* info = nullptr;
  if (g_once_init_enter(&info)) {
    const GstMetaInfo* i =
        gst_meta_register(JOBFLOW_ANALYTICS_RELATION_META_API_TYPE, "JobflowAnalyticsRelationMeta",
                          sizeof(JobflowAnalyticsRelationMeta), meta_init, meta_free, meta_transform);
    g_once_init_leave(&info, i);
  }
  return info;
}

JobflowAnalyticsRelationMeta* jobflow_buffer_add_analytics_relation_meta(GstBuffer* buffer) {
  g_return_val_if_fail(GST_IS_BUFFER(buffer), nullptr);
  return reinterpret_cast<JobflowAnalyticsRelationMeta*>(
      gst_buffer_add_meta(buffer, JOBFLOW_ANALYTICS_RELATION_META_INFO, nullptr));
}

JobflowAnalyticsRelationMeta* jobflow_buffer_get_analytics_relation_meta(GstBuffer* buffer) {
  g_return_val_if_fail(GST_IS_BUFFER(buffer), nullptr);
  return reinterpret_cast<JobflowAnalyticsRelationMeta*>(
      gst_buffer_get_meta(buffer, JOBFLOW_ANALYTICS_RELATION_META_API_TYPE));
}

JobflowAnalyticsRelationMeta* jobflow_buffer_get_or_add_analytics_relation_meta(GstBuffer* buffer) {
  JobflowAnalyticsRelationMeta* m = jobflow_buffer_get_analytics_relation_meta(buffer);
  return m ? m : jobflow_buffer_add_analytics_relation_meta(buffer);
}

gsize jobflow_analytics_relation_get_length(JobflowAnalyticsRelationMeta* meta) {
  g_return_val_if_fail(meta != nullptr, 0);
  return meta->store->entries.size();
}

JobflowAnalyticsRelTypes jobflow_analytics_relation_meta_get_relation(JobflowAnalyticsRelationMeta* meta,
                                                                      guint first, guint second) {
  const Entry* e = entry(meta, first);
  if (!e) return JOBFLOW_ANALYTICS_REL_TYPE_NONE;
  for (const auto& [other, type] : e->rel)
    if (other == second) return static_cast<JobflowAnalyticsRelTypes>(type);
  return JOBFLOW_ANALYTICS_REL_TYPE_NONE;
}

gboolean jobflow_analytics_relation_meta_set_relation(JobflowAnalyticsRelationMeta* meta,
                                                      JobflowAnalyticsRelTypes type, guint first, guint second) {
  Entry* e = entry(meta, first);
  if (!e || !entry(meta, second) || !single_relation(type)) return FALSE;
  auto it = std::find_if(e->rel.begin(), e->rel.end(), [&](const auto& r) { return r.first == second; });
  if (type == JOBFLOW_ANALYTICS_REL_TYPE_NONE) {
    if (it != e->rel.end()) e->rel.erase(it);
  } else if (it != e->rel.end()) {
    it->second = type;
  } else {
    e->rel.emplace_back(second, type);
  }
  return TRUE;
}

gboolean jobflow_analytics_relation_meta_set_parent(JobflowAnalyticsRelationMeta* meta, guint child, guint parent) {
  return jobflow_analytics_relation_meta_set_relation(meta, JOBFLOW_ANALYTICS_REL_TYPE_IS_PART_OF, child, parent) &&
         jobflow_analytics_relation_meta_set_relation(meta, JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN, parent, child);
}

gboolean jobflow_analytics_relation_meta_exist(JobflowAnalyticsRelationMeta* meta, guint first, guint second,
                                               gint max_span, JobflowAnalyticsRelTypes cond_types,
                                               GArray** relations_path) {
  if (!entry(meta, first) || !entry(meta, second)) return FALSE;
  const auto& entries = meta->store->entries;
  /* Breadth first: the shortest chain. */
  std::vector<gint> from(entries.size(), -2), depth(entries.size(), 0);
  std::deque<guint> todo{first};
  from[first] = -1;
  bool found = false;
  while (!todo.empty() && !found) {
    const guint a = todo.front();
    todo.pop_front();
    if (max_span >= 0 && depth[a] >= max_span) continue;
    for (const auto& [b, type] : entries[a].rel) {
      if (!(type & cond_types) || from[b] != -2) continue;
      from[b] = static_cast<gint>(a);
      depth[b] = depth[a] + 1;
      if (b == second) {
        found = true;
        break;
      }
      todo.push_back(b);
    }
  }
  if (found && relations_path) {
    std::vector<guint> path;
    for (gint v = static_cast<gint>(second); v >= 0; v = from[v]) path.push_back(static_cast<guint>(v));
    std::reverse(path.begin(), path.end());
    *relations_path = g_array_sized_new(FALSE, FALSE, sizeof(guint), static_cast<guint>(path.size()));
    g_array_append_vals(*relations_path, path.data(), static_cast<guint>(path.size()));
  }
  return found;
}

gboolean jobflow_analytics_relation_meta_get_mtd(JobflowAnalyticsRelationMeta* meta, guint id,
                                                 JobflowAnalyticsMtdType type, JobflowAnalyticsMtd* rlt) {
  const Entry* e = entry(meta, id);
  if (!e || (type != JOBFLOW_ANALYTICS_MTD_TYPE_ANY && e->type != type)) return FALSE;
  if (rlt) {
    rlt->id = id;
    rlt->meta = meta;
  }
  return TRUE;
}

gboolean jobflow_analytics_relation_meta_iterate(JobflowAnalyticsRelationMeta* meta, gpointer* state,
                                                 JobflowAnalyticsMtdType type, JobflowAnalyticsMtd* rlt) {
  g_return_val_if_fail(meta != nullptr && state != nullptr, FALSE);
  const auto& entries = meta->store->entries;
  for (gsize i = GPOINTER_TO_SIZE(*state); i < entries.size(); ++i) {
    if (type != JOBFLOW_ANALYTICS_MTD_TYPE_ANY && entries[i].type != type) continue;
    *state = GSIZE_TO_POINTER(i + 1);
    if (rlt) {
      rlt->id = static_cast<guint>(i);
      rlt->meta = meta;
    }
    return TRUE;
  }
  *state = GSIZE_TO_POINTER(entries.size());
  return FALSE;
}

gboolean jobflow_analytics_relation_meta_get_direct_related(JobflowAnalyticsRelationMeta* meta, guint id,
                                                            JobflowAnalyticsRelTypes relation_type,
                                                            JobflowAnalyticsMtdType type, gpointer* state,
                                                            JobflowAnalyticsMtd* rlt) {
  g_return_val_if_fail(state != nullptr, FALSE);
  const Entry* e = entry(meta, id);
  if (!e) return FALSE;
  /* state = position in this entry's relation list + 1 */
  for (gsize i = GPOINTER_TO_SIZE(*state); i < e->rel.size(); ++i) {
    const auto& [other, rtype] = e->rel[i];
    if (!(rtype & relation_type)) continue;
    if (type != JOBFLOW_ANALYTICS_MTD_TYPE_ANY && meta->store->entries[other].type != type) continue;
    *state = GSIZE_TO_POINTER(i + 1);
    if (rlt) {
      rlt->id = other;
      rlt->meta = meta;
    }
    return TRUE;
  }
  *state = GSIZE_TO_POINTER(e->rel.size());
  return FALSE;
}

JobflowAnalyticsMtdType jobflow_analytics_mtd_get_mtd_type(const JobflowAnalyticsMtd* instance) {
  const Entry* e = instance ? entry(instance->meta, instance->id) : nullptr;
  return e ? e->type : JOBFLOW_ANALYTICS_MTD_TYPE_ANY;
}

guint jobflow_analytics_mtd_get_id(const JobflowAnalyticsMtd* instance) { return instance ? instance->id : 0; }

const gchar* jobflow_analytics_mtd_type_get_name(JobflowAnalyticsMtdType type) {
  if (type == JOBFLOW_ANALYTICS_MTD_TYPE_ANY) return "ANY";
  return reinterpret_cast<const MtdDescriptor*>(type)->name;
}

/* ---- OD ---- */
JobflowAnalyticsMtdType jobflow_analytics_od_mtd_get_mtd_type(void) { return type_of(kOD); }

gboolean jobflow_analytics_relation_meta_add_od_mtd(JobflowAnalyticsRelationMeta* m, GQuark type, gint x, gint y,
                                                    gint w, gint h, gfloat conf, JobflowAnalyticsODMtd* out) {
  return jobflow_analytics_relation_meta_add_oriented_od_mtd(m, type, x, y, w, h, 0.f, conf, out);
}

gboolean jobflow_analytics_relation_meta_add_oriented_od_mtd(JobflowAnalyticsRelationMeta* m, GQuark type, gint x,
                                                             gint y, gint w, gint h, gfloat r, gfloat conf,
                                                             JobflowAnalyticsODMtd* out) {
  return add(m, kOD, OD{type, x, y, w, h, r, conf}, out);
}

gboolean jobflow_analytics_relation_meta_get_od_mtd(JobflowAnalyticsRelationMeta* meta, guint id,
                                                    JobflowAnalyticsODMtd* rlt) {
  return get_typed(meta, id, kOD, rlt);
}

gboolean jobflow_analytics_od_mtd_get_location(const JobflowAnalyticsODMtd* h, gint* x, gint* y, gint* w, gint* hh,
                                               gfloat* conf) {
  const OD* od = data_of<OD>(h, kOD);
  if (!od) return FALSE;
  gint bx = od->x, by = od->y, bw = od->w, bh = od->h;
  if (od->r != 0.f) {
    const double c = std::abs(std::cos(od->r)), s = std::abs(std::sin(od->r));
    const double cx = od->x + od->w / 2.0, cy = od->y + od->h / 2.0;
    const double ex = (od->w * c + od->h * s) / 2.0, ey = (od->w * s + od->h * c) / 2.0;
    bx = static_cast<gint>(std::floor(cx - ex));
    by = static_cast<gint>(std::floor(cy - ey));
    bw = static_cast<gint>(std::ceil(cx + ex)) - bx;
    bh = static_cast<gint>(std::ceil(cy + ey)) - by;
  }
  if (x) *x = bx;
  if (y) *y = by;
  if (w) *w = bw;
  if (hh) *hh = bh;
  if (conf) *conf = od->conf;
  return TRUE;
}

gboolean jobflow_analytics_od_mtd_get_oriented_location(const JobflowAnalyticsODMtd* h, gint* x, gint* y, gint* w,
                                                        gint* hh, gfloat* r, gfloat* conf) {
  const OD* od = data_of<OD>(h, kOD);
  if (!od) return FALSE;
  if (x) *x = od->x;
  if (y) *y = od->y;
  if (w) *w = od->w;
  if (hh) *hh = od->h;
  if (r) *r = od->r;
  if (conf) *conf = od->conf;
  return TRUE;
}

gboolean jobflow_analytics_od_mtd_get_confidence_lvl(const JobflowAnalyticsODMtd* h, gfloat* conf) {
  const OD* od = data_of<OD>(h, kOD);
  if (!od) return FALSE;
  if (conf) *conf = od->conf;
  return TRUE;
}

GQuark jobflow_analytics_od_mtd_get_obj_type(const JobflowAnalyticsODMtd* h) {
  const OD* od = data_of<OD>(h, kOD);
  return od ? od->label : 0;
}

/* ---- Cls ---- */
JobflowAnalyticsMtdType jobflow_analytics_cls_mtd_get_mtd_type(void) { return type_of(kCls); }

gboolean jobflow_analytics_relation_meta_add_cls_mtd(JobflowAnalyticsRelationMeta* m, gsize length, gfloat* levels,
                                                     GQuark* quarks, JobflowAnalyticsClsMtd* out) {
  g_return_val_if_fail(length == 0 || (levels && quarks), FALSE);
  Cls c;
  c.levels.assign(levels, levels + length);
  c.quarks.assign(quarks, quarks + length);
  return add(m, kCls, std::move(c), out);
}

gboolean jobflow_analytics_relation_meta_add_one_cls_mtd(JobflowAnalyticsRelationMeta* m, gfloat level, GQuark quark,
                                                         JobflowAnalyticsClsMtd* out) {
  return jobflow_analytics_relation_meta_add_cls_mtd(m, 1, &level, &quark, out);
}

gboolean jobflow_analytics_relation_meta_get_cls_mtd(JobflowAnalyticsRelationMeta* meta, guint id,
                                                     JobflowAnalyticsClsMtd* rlt) {
  return get_typed(meta, id, kCls, rlt);
}

gsize jobflow_analytics_cls_mtd_get_length(const JobflowAnalyticsClsMtd* h) {
  const Cls* c = data_of<Cls>(h, kCls);
  return c ? c->levels.size() : 0;
}

gfloat jobflow_analytics_cls_mtd_get_level(const JobflowAnalyticsClsMtd* h, gsize index) {
  const Cls* c = data_of<Cls>(h, kCls);
  g_return_val_if_fail(c && index < c->levels.size(), -1.f);
  return c->levels[index];
}

GQuark jobflow_analytics_cls_mtd_get_quark(const JobflowAnalyticsClsMtd* h, gsize index) {
  const Cls* c = data_of<Cls>(h, kCls);
  g_return_val_if_fail(c && index < c->quarks.size(), 0);
  return c->quarks[index];
}

gint jobflow_analytics_cls_mtd_get_index_by_quark(const JobflowAnalyticsClsMtd* h, GQuark quark) {
  const Cls* c = data_of<Cls>(h, kCls);
  if (!c) return -1;
  for (size_t i = 0; i < c->quarks.size(); ++i)
    if (c->quarks[i] == quark) return static_cast<gint>(i);
  return -1;
}

/* ---- Tracking ---- */
JobflowAnalyticsMtdType jobflow_analytics_tracking_mtd_get_mtd_type(void) { return type_of(kTracking); }

gboolean jobflow_analytics_relation_meta_add_tracking_mtd(JobflowAnalyticsRelationMeta* m, guint64 id,
                                                          GstClockTime first_seen, JobflowAnalyticsTrackingMtd* out) {
  return add(m, kTracking, Track{id, first_seen, first_seen, false}, out);
}

gboolean jobflow_analytics_relation_meta_get_tracking_mtd(JobflowAnalyticsRelationMeta* meta, guint id,
                                                          JobflowAnalyticsTrackingMtd* rlt) {
  return get_typed(meta, id, kTracking, rlt);
}

gboolean jobflow_analytics_tracking_mtd_update_last_seen(JobflowAnalyticsTrackingMtd* h, GstClockTime last_seen) {
  Track* t = data_of<Track>(h, kTracking);
  if (!t) return FALSE;
  t->last = last_seen;
  return TRUE;
}

gboolean jobflow_analytics_tracking_mtd_set_lost(JobflowAnalyticsTrackingMtd* h) {
  Track* t = data_of<Track>(h, kTracking);
  if (!t) return FALSE;
  t->lost = true;
  return TRUE;
}

gboolean jobflow_analytics_tracking_mtd_get_info(const JobflowAnalyticsTrackingMtd* h, guint64* id,
                                                 GstClockTime* first, GstClockTime* last, gboolean* lost) {
  const Track* t = data_of<Track>(h, kTracking);
  if (!t) return FALSE;
  if (id) *id = t->id;
  if (first) *first = t->first;
  if (last) *last = t->last;
  if (lost) *lost = t->lost;
  return TRUE;
}

/* ---- Segmentation ---- */
JobflowAnalyticsMtdType jobflow_analytics_segmentation_mtd_get_mtd_type(void) { return type_of(kSegmentation); }

gboolean jobflow_analytics_relation_meta_add_segmentation_mtd(JobflowAnalyticsRelationMeta* m, GstBuffer* buffer,
                                                              JobflowSegmentationType type, gsize region_count,
                                                              guint* region_ids, gint x, gint y, guint w, guint h,
                                                              JobflowAnalyticsSegmentationMtd* out) {
  g_return_val_if_fail(GST_IS_BUFFER(buffer), FALSE);
  g_return_val_if_fail(region_count == 0 || region_ids != nullptr, FALSE);
  Seg s;
  s.mask = BufferRef(buffer);
  s.type = type;
  s.ids.assign(region_ids, region_ids + region_count);
  s.x = x;
  s.y = y;
  s.w = w;
  s.h = h;
  return add(m, kSegmentation, std::move(s), out);
}

gboolean jobflow_analytics_relation_meta_get_segmentation_mtd(JobflowAnalyticsRelationMeta* meta, guint id,
                                                              JobflowAnalyticsSegmentationMtd* rlt) {
  return get_typed(meta, id, kSegmentation, rlt);
}

GstBuffer* jobflow_analytics_segmentation_mtd_get_mask(const JobflowAnalyticsSegmentationMtd* h, gint* x, gint* y,
                                                       guint* w, guint* hh) {
  const Seg* s = data_of<Seg>(h, kSegmentation);
  if (!s) return nullptr;
  if (x) *x = s->x;
  if (y) *y = s->y;
  if (w) *w = s->w;
  if (hh) *hh = s->h;
  return s->mask.get() ? gst_buffer_ref(s->mask.get()) : nullptr;
}

gsize jobflow_analytics_segmentation_mtd_get_region_count(const JobflowAnalyticsSegmentationMtd* h) {
  const Seg* s = data_of<Seg>(h, kSegmentation);
  return s ? s->ids.size() : 0;
}

guint jobflow_analytics_segmentation_mtd_get_region_id(const JobflowAnalyticsSegmentationMtd* h, gsize index) {
  const Seg* s = data_of<Seg>(h, kSegmentation);
  g_return_val_if_fail(s && index < s->ids.size(), 0);
  return s->ids[index];
}

gboolean jobflow_analytics_segmentation_mtd_get_region_index(const JobflowAnalyticsSegmentationMtd* h, gsize* index,
                                                             guint id) {
  const Seg* s = data_of<Seg>(h, kSegmentation);
  if (!s) return FALSE;
  for (size_t i = 0; i < s->ids.size(); ++i) {
    if (s->ids[i] == id) {
      if (index) *index = i;
      return TRUE;
    }
  }
  return FALSE;
}

JobflowSegmentationType jobflow_analytics_segmentation_mtd_get_segmentation_type(
    const JobflowAnalyticsSegmentationMtd* h) {
  const Seg* s = data_of<Seg>(h, kSegmentation);
  return s ? s->type : JOBFLOW_SEGMENTATION_TYPE_SEMANTIC;
}

/* ---- Text ---- */
JobflowAnalyticsMtdType jobflow_analytics_text_mtd_get_mtd_type(void) { return type_of(kText); }

gboolean jobflow_analytics_relation_meta_add_text_mtd(JobflowAnalyticsRelationMeta* m, const gchar* text,
                                                      gfloat confidence, JobflowAnalyticsTextMtd* out) {
  g_return_val_if_fail(text != nullptr, FALSE);
  return add(m, kText, Text{text, confidence}, out);
}

gboolean jobflow_analytics_relation_meta_get_text_mtd(JobflowAnalyticsRelationMeta* meta, guint id,
                                                      JobflowAnalyticsTextMtd* rlt) {
  return get_typed(meta, id, kText, rlt);
}

const gchar* jobflow_analytics_text_mtd_get_text(const JobflowAnalyticsTextMtd* h) {
  const Text* t = data_of<Text>(h, kText);
  return t ? t->text.c_str() : nullptr;
}

gsize jobflow_analytics_text_mtd_get_length(const JobflowAnalyticsTextMtd* h) {
  const Text* t = data_of<Text>(h, kText);
  return t ? t->text.size() : 0;
}

gfloat jobflow_analytics_text_mtd_get_confidence(const JobflowAnalyticsTextMtd* h) {
  const Text* t = data_of<Text>(h, kText);
  return t ? t->conf : 0.f;
}

/* ---- JSON ---- */
void jobflow_analytics_relation_meta_write_json(JobflowAnalyticsRelationMeta* meta, JsonBuilder* b) {
  g_return_if_fail(JSON_IS_BUILDER(b));
  static const Store empty;
  const Store& st = meta ? *meta->store : empty;
  const auto& entries = st.entries;
  /* Entries some region relates to (or CONTAINs: a second stage's results
   * on the region) are written inside that region. */
  auto attribute = [](int t) {
    return t == JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO || t == JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN;
  };
  std::vector<bool> attached(entries.size(), false);
  for (const Entry& e : entries) {
    if (e.type != type_of(kOD)) continue;
    for (const auto& [other, type] : e.rel)
      if (attribute(type) && entries[other].type != type_of(kOD)) attached[other] = true;
  }
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "regions");
  json_builder_begin_array(b);
  for (guint id = 0; id < entries.size(); ++id) {
    const Entry& e = entries[id];
    if (e.type != type_of(kOD)) continue;
    const OD& od = std::get<OD>(e.data);
    json_builder_begin_object(b);
    member_int(b, "id", id);
    member_string(b, "label", label_text(od.label));
    member_double(b, "confidence", round4(od.conf));
    member_int(b, "x", od.x);
    member_int(b, "y", od.y);
    member_int(b, "w", od.w);
    member_int(b, "h", od.h);
    if (od.r != 0.f) member_double(b, "rotation", round4(od.r));
    std::vector<guint> children;
    bool have_classes = false;
    for (const auto& [other, type] : e.rel) {
      const Entry& o = entries[other];
      if (type == JOBFLOW_ANALYTICS_REL_TYPE_IS_PART_OF && o.type == type_of(kOD)) member_int(b, "parent", other);
      if (type == JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN && o.type == type_of(kOD)) children.push_back(other);
      if (!attribute(type)) continue;
      if (const auto* t = std::get_if<Track>(&o.data)) {
        json_builder_set_member_name(b, "track");
        write_track(b, *t);
      } else if (const auto* tx = std::get_if<Text>(&o.data)) {
        member_string(b, "text", tx->text.c_str());
        member_double(b, "text-confidence", round4(tx->conf));
      } else if (const auto* s = std::get_if<Seg>(&o.data)) {
        json_builder_set_member_name(b, "mask");
        write_mask(b, other, *s);
      } else if (std::holds_alternative<Cls>(o.data)) {
        have_classes = true;
      }
    }
    if (have_classes) {
      /* every class result of the region, in one list */
      json_builder_set_member_name(b, "classes");
      json_builder_begin_array(b);
      for (const auto& [other, type] : e.rel) {
        const auto* c = std::get_if<Cls>(&entries[other].data);
        if (!attribute(type) || !c) continue;
        for (size_t i = 0; i < c->levels.size(); ++i) {
          json_builder_begin_object(b);
          member_string(b, "label", label_text(c->quarks[i]));
          member_double(b, "confidence", round4(c->levels[i]));
          json_builder_end_object(b);
        }
      }
      json_builder_end_array(b);
    }
    if (!children.empty()) {
      json_builder_set_member_name(b, "children");
      json_builder_begin_array(b);
      for (guint c : children) json_builder_add_int_value(b, c);
      json_builder_end_array(b);
    }
    json_builder_end_object(b);
  }
  json_builder_end_array(b);
  /* Results of the whole frame (no region relates to them). */
  auto loose = [&](const MtdDescriptor& d) {
    for (guint id = 0; id < entries.size(); ++id)
      if (entries[id].type == type_of(d) && !attached[id]) return true;
    return false;
  };
  if (loose(kCls)) {
    json_builder_set_member_name(b, "classes");
    json_builder_begin_array(b);
    for (guint id = 0; id < entries.size(); ++id) {
      const auto* c = std::get_if<Cls>(&entries[id].data);
      if (!c || attached[id]) continue;
      json_builder_begin_object(b);
      member_int(b, "id", id);
      json_builder_set_member_name(b, "classes");
      write_classes(b, *c);
      json_builder_end_object(b);
    }
    json_builder_end_array(b);
  }
  if (loose(kText)) {
    json_builder_set_member_name(b, "texts");
    json_builder_begin_array(b);
    for (guint id = 0; id < entries.size(); ++id) {
      const auto* t = std::get_if<Text>(&entries[id].data);
      if (!t || attached[id]) continue;
      json_builder_begin_object(b);
      member_int(b, "id", id);
      member_string(b, "text", t->text.c_str());
      member_double(b, "confidence", round4(t->conf));
      json_builder_end_object(b);
    }
    json_builder_end_array(b);
  }
  if (loose(kSegmentation)) {
    json_builder_set_member_name(b, "masks");
    json_builder_begin_array(b);
    for (guint id = 0; id < entries.size(); ++id) {
      const auto* s = std::get_if<Seg>(&entries[id].data);
      if (s && !attached[id]) write_mask(b, id, *s);
    }
    json_builder_end_array(b);
  }
  if (loose(kTracking)) {
    json_builder_set_member_name(b, "tracks");
    json_builder_begin_array(b);
    for (guint id = 0; id < entries.size(); ++id) {
      const auto* t = std::get_if<Track>(&entries[id].data);
      if (t && !attached[id]) write_track(b, *t);
    }
    json_builder_end_array(b);
  }
  json_builder_end_object(b);
}

gchar* jobflow_analytics_relation_meta_to_json(JobflowAnalyticsRelationMeta* meta) {
  JsonBuilder* b = json_builder_new();
  jobflow_analytics_relation_meta_write_json(meta, b);
  JsonNode* root = json_builder_get_root(b);
  gchar* text = jobflow_json_node_to_string(root);
  json_node_unref(root);
  g_object_unref(b);
  return text;
}

gchar* jobflow_json_node_to_string(JsonNode* node) {
  std::string out;
  write_node(node, &out);
  return g_strdup(out.c_str());
}

GstMessage* jobflow_analytics_regions_message_new(GstObject* src, GstBuffer* buffer, const GstSegment* segment) {
  g_return_val_if_fail(GST_IS_BUFFER(buffer), nullptr);
  const GstClockTime pts = GST_BUFFER_PTS(buffer);
  const bool timed = segment && segment->format == GST_FORMAT_TIME && GST_CLOCK_TIME_IS_VALID(pts);
  const GstClockTime running = timed ? gst_segment_to_running_time(segment, GST_FORMAT_TIME, pts) : GST_CLOCK_TIME_NONE;
  const GstClockTime stream = timed ? gst_segment_to_stream_time(segment, GST_FORMAT_TIME, pts) : GST_CLOCK_TIME_NONE;
  gchar* json = jobflow_analytics_relation_meta_to_json(jobflow_buffer_get_analytics_relation_meta(buffer));
  GstStructure* s = gst_structure_new(JOBFLOW_REGIONS_MESSAGE_NAME, "timestamp", G_TYPE_UINT64, pts, "stream-time",
                                      G_TYPE_UINT64, stream, "running-time", G_TYPE_UINT64, running, "json",
                                      G_TYPE_STRING, json, nullptr);
  g_free(json);
  return gst_message_new_element(src, s);
}

}  // extern "C"

/* Analytics results on buffers: the regions (boxes), classes, track ids,
 * masks and texts that jobdecode, jobtrack and applications attach to
 * video frames, and that joboverlay draws.
 *
 * The API mirrors GStreamer's analytics library (gst-plugins-bad,
 * gst-libs/gst/analytics: GstAnalyticsRelationMeta 1.24, its SegmentationMtd
 * 1.26, the oriented ODMtd 1.28 and TextMtd 1.30) name for name with the
 * prefix `jobflow_` / `Jobflow` / `JOBFLOW_` instead of `gst_` / `Gst` /
 * `GST_`, and registers its own meta API ("JobflowAnalyticsRelationMetaAPI"),
 * so that it cannot collide with the real library once that is loaded in
 * the same process (GStreamer 1.22 has none). Moving to the upstream types
 * later is a rename of these calls (the values of the enums already match).
 *
 * One JobflowAnalyticsRelationMeta per buffer holds any number of
 * "analytics metadata" entries (Mtd), each with an id unique in the meta:
 *
 *   ODMtd            a region: label (GQuark), box x, y, w, h in pixels of
 *                    the frame (top-left corner, size), optional rotation r
 *                    (radians, clockwise, about the box centre: the box is
 *                    the rotated rectangle of size w x h at that centre),
 *                    confidence
 *   ClsMtd           class labels with confidences (a classifier's result)
 *   TrackingMtd      a track id with first/last seen times and a lost flag
 *   SegmentationMtd  a mask (a GstBuffer of one byte per pixel, GRAY8,
 *                    with a GstVideoMeta) of region ids placed at x, y, w, h
 *                    in the frame
 *   TextMtd          a text with its confidence (text recognition)
 *
 * and typed, directed relations between entries:
 *
 *   a IS_PART_OF b / b CONTAIN a   a is a second stage's result on region
 *                                  b: a region found inside it, or the
 *                                  class / text a second model gave it
 *                                  (jobdecode per-region=true); set both
 *                                  with jobflow_analytics_relation_meta_set_parent()
 *   a RELATE_TO b                  region a has the attribute b (its
 *                                  track, class, text or mask); readers
 *                                  take a region's attributes from the
 *                                  entries it RELATEs TO or CONTAINs
 *
 * Example (what `jobdecode mode=boxes` and `jobtrack` do):
 *
 *   JobflowAnalyticsRelationMeta* m = jobflow_buffer_add_analytics_relation_meta(buf);
 *   JobflowAnalyticsODMtd od;
 *   jobflow_analytics_relation_meta_add_od_mtd(m, g_quark_from_string("car"), 10, 20, 40, 30, 0.9f, &od);
 *   JobflowAnalyticsTrackingMtd trk;
 *   jobflow_analytics_relation_meta_add_tracking_mtd(m, 7, GST_BUFFER_PTS(buf), &trk);
 *   jobflow_analytics_relation_meta_set_relation(m, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO, od.id, trk.id);
 *
 * and to read every region with its track:
 *
 *   gpointer state = NULL;
 *   JobflowAnalyticsODMtd od;
 *   while (jobflow_analytics_relation_meta_iterate(m, &state, jobflow_analytics_od_mtd_get_mtd_type(), &od)) {
 *     gint x, y, w, h; gfloat conf;
 *     jobflow_analytics_od_mtd_get_location(&od, &x, &y, &w, &h, &conf);
 *     gpointer s2 = NULL;
 *     JobflowAnalyticsTrackingMtd trk;
 *     if (jobflow_analytics_relation_meta_get_direct_related(m, od.id, JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO,
 *             jobflow_analytics_tracking_mtd_get_mtd_type(), &s2, &trk)) { ... }
 *   }
 *
 * The meta has no tags (as upstream's): elements that copy tag-less metas
 * (GstBaseTransform subclasses such as videoconvert, and queue, tee) keep it;
 * videoscale copies it unchanged (it scales only metas tagged "size"). Its
 * transform function implements the video scale transform (boxes and mask
 * placements scaled) for elements that apply it explicitly.
 *
 * JSON: jobflow_analytics_relation_meta_write_json() writes one buffer's
 * entries into a json-glib JsonBuilder (the schema is in docs/elements.md,
 * "Analytics metadata"). Link libjobflow-gst (pkg-config jobflow-gst). */
#pragma once

#include <gst/gst.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

typedef struct _JobflowAnalyticsRelationMeta JobflowAnalyticsRelationMeta;

/* An entry's type: the address of a static descriptor (as upstream's). */
typedef guintptr JobflowAnalyticsMtdType;
#define JOBFLOW_ANALYTICS_MTD_TYPE_ANY (0)
#define JOBFLOW_INF_RELATION_SPAN -1

/* A handle to one entry (kept on the stack; valid while the meta is). */
typedef struct _JobflowAnalyticsMtd {
  guint id;
  JobflowAnalyticsRelationMeta* meta;
} JobflowAnalyticsMtd;

typedef JobflowAnalyticsMtd JobflowAnalyticsODMtd;
typedef JobflowAnalyticsMtd JobflowAnalyticsClsMtd;
typedef JobflowAnalyticsMtd JobflowAnalyticsTrackingMtd;
typedef JobflowAnalyticsMtd JobflowAnalyticsSegmentationMtd;
typedef JobflowAnalyticsMtd JobflowAnalyticsTextMtd;

/* Same values as GstAnalyticsRelTypes. */
typedef enum {
  JOBFLOW_ANALYTICS_REL_TYPE_NONE = 0,
  JOBFLOW_ANALYTICS_REL_TYPE_IS_PART_OF = (1 << 1),
  JOBFLOW_ANALYTICS_REL_TYPE_CONTAIN = (1 << 2),
  JOBFLOW_ANALYTICS_REL_TYPE_RELATE_TO = (1 << 3),
  JOBFLOW_ANALYTICS_REL_TYPE_LAST = (1 << 4),
  JOBFLOW_ANALYTICS_REL_TYPE_ANY = G_MAXINT
} JobflowAnalyticsRelTypes;

/* Same values as GstSegmentationType. */
typedef enum {
  JOBFLOW_SEGMENTATION_TYPE_SEMANTIC,
  JOBFLOW_SEGMENTATION_TYPE_INSTANCE
} JobflowSegmentationType;

/* ---- the meta ---- */
GType jobflow_analytics_relation_meta_api_get_type(void);
#define JOBFLOW_ANALYTICS_RELATION_META_API_TYPE (jobflow_analytics_relation_meta_api_get_type())
const GstMetaInfo* jobflow_analytics_relation_meta_get_info(void);
#define JOBFLOW_ANALYTICS_RELATION_META_INFO (jobflow_analytics_relation_meta_get_info())

JobflowAnalyticsRelationMeta* jobflow_buffer_add_analytics_relation_meta(GstBuffer* buffer);
/* NULL when the buffer has none. */
JobflowAnalyticsRelationMeta* jobflow_buffer_get_analytics_relation_meta(GstBuffer* buffer);
/* The buffer's meta, added when it has none (the buffer must be writable). */
JobflowAnalyticsRelationMeta* jobflow_buffer_get_or_add_analytics_relation_meta(GstBuffer* buffer);
/* Number of entries. */
gsize jobflow_analytics_relation_get_length(JobflowAnalyticsRelationMeta* meta);

JobflowAnalyticsRelTypes jobflow_analytics_relation_meta_get_relation(JobflowAnalyticsRelationMeta* meta,
                                                                      guint an_meta_first_id,
                                                                      guint an_meta_second_id);
/* Sets the relation first -> second (one direction; NONE clears it). FALSE
 * for an unknown id or a type that is not a single relation. */
gboolean jobflow_analytics_relation_meta_set_relation(JobflowAnalyticsRelationMeta* meta,
                                                      JobflowAnalyticsRelTypes type, guint an_meta_first_id,
                                                      guint an_meta_second_id);
/* child IS_PART_OF parent and parent CONTAIN child (Jobflow's shorthand). */
gboolean jobflow_analytics_relation_meta_set_parent(JobflowAnalyticsRelationMeta* meta, guint child_id,
                                                    guint parent_id);
/* Whether a chain of relations of `cond_types` leads from first to second
 * in at most `max_relation_span` steps (JOBFLOW_INF_RELATION_SPAN: any);
 * `relations_path`, when given, receives the ids along it (a GArray of
 * guint, first to second; free with g_array_unref). */
gboolean jobflow_analytics_relation_meta_exist(JobflowAnalyticsRelationMeta* meta, guint an_meta_first_id,
                                               guint an_meta_second_id, gint max_relation_span,
                                               JobflowAnalyticsRelTypes cond_types, GArray** relations_path);

/* The entry `an_meta_id` when its type is `type` (or type ANY). */
gboolean jobflow_analytics_relation_meta_get_mtd(JobflowAnalyticsRelationMeta* meta, guint an_meta_id,
                                                 JobflowAnalyticsMtdType type, JobflowAnalyticsMtd* rlt);
/* Iterates the entries of `type` (ANY: all) in the order they were added;
 * `*state` starts NULL. */
gboolean jobflow_analytics_relation_meta_iterate(JobflowAnalyticsRelationMeta* meta, gpointer* state,
                                                 JobflowAnalyticsMtdType type, JobflowAnalyticsMtd* rlt_mtd);
/* Iterates the entries b of `type` with a relation an_meta_id -> b whose
 * type is one of `relation_type` (a mask; ANY: any relation). */
gboolean jobflow_analytics_relation_meta_get_direct_related(JobflowAnalyticsRelationMeta* meta, guint an_meta_id,
                                                            JobflowAnalyticsRelTypes relation_type,
                                                            JobflowAnalyticsMtdType type, gpointer* state,
                                                            JobflowAnalyticsMtd* rlt_mtd);

JobflowAnalyticsMtdType jobflow_analytics_mtd_get_mtd_type(const JobflowAnalyticsMtd* instance);
guint jobflow_analytics_mtd_get_id(const JobflowAnalyticsMtd* instance);
/* "object-detection", "classification", "object-tracking", "segmentation",
 * "text"; "ANY" for JOBFLOW_ANALYTICS_MTD_TYPE_ANY. */
const gchar* jobflow_analytics_mtd_type_get_name(JobflowAnalyticsMtdType type);

/* ---- ODMtd: a region ---- */
JobflowAnalyticsMtdType jobflow_analytics_od_mtd_get_mtd_type(void);
gboolean jobflow_analytics_relation_meta_add_od_mtd(JobflowAnalyticsRelationMeta* instance, GQuark type, gint x,
                                                    gint y, gint w, gint h, gfloat loc_conf_lvl,
                                                    JobflowAnalyticsODMtd* od_mtd);
gboolean jobflow_analytics_relation_meta_add_oriented_od_mtd(JobflowAnalyticsRelationMeta* instance, GQuark type,
                                                             gint x, gint y, gint w, gint h, gfloat r,
                                                             gfloat loc_conf_lvl, JobflowAnalyticsODMtd* od_mtd);
gboolean jobflow_analytics_relation_meta_get_od_mtd(JobflowAnalyticsRelationMeta* meta, guint an_meta_id,
                                                    JobflowAnalyticsODMtd* rlt);
/* Of a rotated box, the axis-aligned box around it. */
gboolean jobflow_analytics_od_mtd_get_location(const JobflowAnalyticsODMtd* instance, gint* x, gint* y, gint* w,
                                               gint* h, gfloat* loc_conf_lvl);
gboolean jobflow_analytics_od_mtd_get_oriented_location(const JobflowAnalyticsODMtd* instance, gint* x, gint* y,
                                                        gint* w, gint* h, gfloat* r, gfloat* loc_conf_lvl);
gboolean jobflow_analytics_od_mtd_get_confidence_lvl(const JobflowAnalyticsODMtd* instance, gfloat* loc_conf_lvl);
GQuark jobflow_analytics_od_mtd_get_obj_type(const JobflowAnalyticsODMtd* handle);

/* ---- ClsMtd: classes ---- */
JobflowAnalyticsMtdType jobflow_analytics_cls_mtd_get_mtd_type(void);
gboolean jobflow_analytics_relation_meta_add_cls_mtd(JobflowAnalyticsRelationMeta* instance, gsize length,
                                                     gfloat* confidence_levels, GQuark* class_quarks,
                                                     JobflowAnalyticsClsMtd* cls_mtd);
gboolean jobflow_analytics_relation_meta_add_one_cls_mtd(JobflowAnalyticsRelationMeta* instance,
                                                         gfloat confidence_level, GQuark class_quark,
                                                         JobflowAnalyticsClsMtd* cls_mtd);
gboolean jobflow_analytics_relation_meta_get_cls_mtd(JobflowAnalyticsRelationMeta* meta, guint an_meta_id,
                                                     JobflowAnalyticsClsMtd* rlt);
gsize jobflow_analytics_cls_mtd_get_length(const JobflowAnalyticsClsMtd* handle);
gfloat jobflow_analytics_cls_mtd_get_level(const JobflowAnalyticsClsMtd* handle, gsize index);
GQuark jobflow_analytics_cls_mtd_get_quark(const JobflowAnalyticsClsMtd* handle, gsize index);
/* -1 when absent. */
gint jobflow_analytics_cls_mtd_get_index_by_quark(const JobflowAnalyticsClsMtd* handle, GQuark quark);

/* ---- TrackingMtd: a track ---- */
JobflowAnalyticsMtdType jobflow_analytics_tracking_mtd_get_mtd_type(void);
gboolean jobflow_analytics_relation_meta_add_tracking_mtd(JobflowAnalyticsRelationMeta* instance,
                                                          guint64 tracking_id, GstClockTime tracking_first_seen,
                                                          JobflowAnalyticsTrackingMtd* trk_mtd);
gboolean jobflow_analytics_relation_meta_get_tracking_mtd(JobflowAnalyticsRelationMeta* meta, guint an_meta_id,
                                                          JobflowAnalyticsTrackingMtd* rlt);
gboolean jobflow_analytics_tracking_mtd_update_last_seen(JobflowAnalyticsTrackingMtd* instance,
                                                         GstClockTime last_seen);
gboolean jobflow_analytics_tracking_mtd_set_lost(JobflowAnalyticsTrackingMtd* instance);
gboolean jobflow_analytics_tracking_mtd_get_info(const JobflowAnalyticsTrackingMtd* instance, guint64* tracking_id,
                                                 GstClockTime* tracking_first_seen, GstClockTime* tracking_last_seen,
                                                 gboolean* tracking_lost);

/* ---- SegmentationMtd: a mask ---- */
JobflowAnalyticsMtdType jobflow_analytics_segmentation_mtd_get_mtd_type(void);
/* `buffer` (referenced, not copied): one byte per mask pixel, the region id
 * of that pixel, with a GstVideoMeta (GRAY8) giving its width, height and
 * stride; it covers the frame rectangle masks_loc_x, _y, _w, _h (the mask
 * is scaled to it). `region_ids`: the ids that occur. */
gboolean jobflow_analytics_relation_meta_add_segmentation_mtd(JobflowAnalyticsRelationMeta* instance,
                                                              GstBuffer* buffer,
                                                              JobflowSegmentationType segmentation_type,
                                                              gsize region_count, guint* region_ids,
                                                              gint masks_loc_x, gint masks_loc_y, guint masks_loc_w,
                                                              guint masks_loc_h,
                                                              JobflowAnalyticsSegmentationMtd* segmentation_mtd);
gboolean jobflow_analytics_relation_meta_get_segmentation_mtd(JobflowAnalyticsRelationMeta* meta, guint an_meta_id,
                                                              JobflowAnalyticsSegmentationMtd* rlt);
/* The mask buffer (transfer full: unref it) and its placement. */
GstBuffer* jobflow_analytics_segmentation_mtd_get_mask(const JobflowAnalyticsSegmentationMtd* handle,
                                                       gint* masks_loc_x, gint* masks_loc_y, guint* masks_loc_w,
                                                       guint* masks_loc_h);
gsize jobflow_analytics_segmentation_mtd_get_region_count(const JobflowAnalyticsSegmentationMtd* handle);
guint jobflow_analytics_segmentation_mtd_get_region_id(const JobflowAnalyticsSegmentationMtd* handle, gsize index);
gboolean jobflow_analytics_segmentation_mtd_get_region_index(const JobflowAnalyticsSegmentationMtd* handle,
                                                             gsize* index, guint id);
/* Jobflow's addition (upstream has none): the semantic/instance type. */
JobflowSegmentationType jobflow_analytics_segmentation_mtd_get_segmentation_type(
    const JobflowAnalyticsSegmentationMtd* handle);

/* ---- TextMtd: a text ---- */
JobflowAnalyticsMtdType jobflow_analytics_text_mtd_get_mtd_type(void);
gboolean jobflow_analytics_relation_meta_add_text_mtd(JobflowAnalyticsRelationMeta* meta, const gchar* text,
                                                      gfloat confidence, JobflowAnalyticsTextMtd* text_mtd);
gboolean jobflow_analytics_relation_meta_get_text_mtd(JobflowAnalyticsRelationMeta* meta, guint an_meta_id,
                                                      JobflowAnalyticsTextMtd* rlt);
const gchar* jobflow_analytics_text_mtd_get_text(const JobflowAnalyticsTextMtd* mtd);
gsize jobflow_analytics_text_mtd_get_length(const JobflowAnalyticsTextMtd* mtd);
gfloat jobflow_analytics_text_mtd_get_confidence(const JobflowAnalyticsTextMtd* mtd);

/* ---- JSON ---- */
/* Writes the meta as one JSON object value into `builder` (where a value
 * may go: inside an array, or after json_builder_set_member_name()).
 * Schema: docs/elements.md, "Analytics metadata". A NULL meta writes the
 * object of a buffer without results ({"regions": []}). */
void jobflow_analytics_relation_meta_write_json(JobflowAnalyticsRelationMeta* meta, JsonBuilder* builder);
/* The same object as compact text (g_free it), numbers written as
 * jobflow_json_node_to_string() writes them. */
gchar* jobflow_analytics_relation_meta_to_json(JobflowAnalyticsRelationMeta* meta);
/* Compact JSON text of a json-glib tree (g_free it), each double with the
 * fewest significant digits that read back as the same double (0.9, where
 * json-glib's JsonGenerator writes 0.90000000000000002); non-finite
 * doubles as null. Members keep their order. */
gchar* jobflow_json_node_to_string(JsonNode* node);

/* The element message that jobdecode and jobtrack post per buffer: fields
 * "timestamp", "stream-time", "running-time" (guint64) and "json" (string,
 * the object above). For applications without access to the C API (the
 * Python ones). */
#define JOBFLOW_REGIONS_MESSAGE_NAME "jobflow-regions"
GstMessage* jobflow_analytics_regions_message_new(GstObject* src, GstBuffer* buffer, const GstSegment* segment);

G_END_DECLS

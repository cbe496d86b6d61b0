/* Small helpers the plugin's elements share (internal to the plugin).
 *
 * The pattern every element follows (jobsink's): the instance struct holds
 * the pads and one private `Impl*`, made in init and deleted in finalize.
 * In the Impl, the settings (the properties) are a Locked<Settings>, read
 * by the streaming threads as a copy; the streaming state lives apart,
 * touched by one thread at a time (the streaming thread, or a state change
 * while it does not run), built in start/caps and dropped in stop. No lock
 * is held while other code runs: not the element's, not the application's. */
#pragma once

#include <gst/gst.h>

#include <algorithm>
#include <exception>
#include <initializer_list>
#include <mutex>
#include <utility>

namespace jobflow::gst {

/* A value under its own lock (an element's settings). */
template <class T>
class Locked {
 public:
  Locked() = default;
  explicit Locked(T v) : value_(std::move(v)) {}
  /* A copy, for a thread that works with it afterwards. */
  T copy() const {
    std::lock_guard<std::mutex> lk(mu_);
    return value_;
  }
  /* One field, without copying the rest (per-buffer reads). */
  template <class M>
  M get(M T::*field) const {
    std::lock_guard<std::mutex> lk(mu_);
    return value_.*field;
  }
  /* Runs f(value) under the lock (set_property / get_property). */
  template <class F>
  auto with(F f) {
    std::lock_guard<std::mutex> lk(mu_);
    return f(value_);
  }
  template <class F>
  auto with(F f) const {
    std::lock_guard<std::mutex> lk(mu_);
    return f(value_);
  }
  /* Replaces the value; returns the old one, to be dropped by the caller
   * outside the lock (its destructor may wait). */
  T exchange(T v) {
    std::lock_guard<std::mutex> lk(mu_);
    std::swap(value_, v);
    return v;
  }

 private:
  mutable std::mutex mu_;
  T value_{};
};

/* GObject finalize of a final element type whose instance struct holds
 * `Impl* impl`: deletes it and chains up. */
template <class Element>
void finalize_element(GObject* object) {
  delete reinterpret_cast<Element*>(object)->impl;
  G_OBJECT_CLASS(g_type_class_peek_parent(G_OBJECT_GET_CLASS(object)))->finalize(object);
}

/* Sets the GObject vfuncs of an element class: its property accessors and
 * finalize_element. Returns the GObjectClass to install properties on. */
template <class Element>
GObjectClass* init_object_class(gpointer klass, GObjectSetPropertyFunc set, GObjectGetPropertyFunc get) {
  GObjectClass* c = G_OBJECT_CLASS(klass);
  c->set_property = set;
  c->get_property = get;
  c->finalize = finalize_element<Element>;
  return c;
}

/* Adds "sink" and "src" pad templates of static other/tensors caps (any
 * number of tensors) to an element class that takes and gives tensors;
 * with `flexible`, NNStreamer's format=flexible too (jobfunction). */
inline void add_tensors_pad_templates(GstElementClass* klass, bool flexible = false) {
  static GstStaticPadTemplate sink = GST_STATIC_PAD_TEMPLATE(
      "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS("other/tensors, format=(string)static"));
  static GstStaticPadTemplate src = GST_STATIC_PAD_TEMPLATE(
      "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS("other/tensors, format=(string)static"));
  static GstStaticPadTemplate flex_sink = GST_STATIC_PAD_TEMPLATE(
      "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS("other/tensors, format=(string){ static, flexible }"));
  static GstStaticPadTemplate flex_src = GST_STATIC_PAD_TEMPLATE(
      "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS("other/tensors, format=(string){ static, flexible }"));
  gst_element_class_add_static_pad_template(klass, flexible ? &flex_sink : &sink);
  gst_element_class_add_static_pad_template(klass, flexible ? &flex_src : &src);
}

/* Adds the pad of the element's class template `name` ("sink", "src")
 * with the given functions (null: the default); returns it. */
inline GstPad* add_pad(GstElement* element, const char* name, GstPadChainFunction chain, GstPadEventFunction event,
                       GstPadQueryFunction query, GstPadActivateModeFunction activate_mode = nullptr) {
  GstPad* pad = gst_pad_new_from_template(gst_element_get_pad_template(element, name), name);
  if (chain) gst_pad_set_chain_function(pad, chain);
  if (event) gst_pad_set_event_function(pad, event);
  if (query) gst_pad_set_query_function(pad, query);
  if (activate_mode) gst_pad_set_activatemode_function(pad, activate_mode);
  gst_element_add_pad(element, pad);
  return pad;
}

/* Runs `body`, a pad or element function's work, so that no C++ exception
 * leaves it: one becomes a CORE/FAILED element error ("<what> failed")
 * and the function returns `failed`. */
template <class R, class F>
R guarded(GstElement* element, const char* what, R failed, F body) {
  try {
    return body();
  } catch (const std::exception& e) {
    GST_ELEMENT_ERROR(element, CORE, FAILED, ("%s failed", what), ("%s", e.what()));
  } catch (...) {
    GST_ELEMENT_ERROR(element, CORE, FAILED, ("%s failed", what), ("unknown exception"));
  }
  return failed;
}

/* Registers an enum type once (`type` points to a static GType = 0). */
inline GType enum_type(GType* type, const char* name, const GEnumValue* values) {
  if (g_once_init_enter(type)) g_once_init_leave(type, g_enum_register_static(name, values));
  return *type;
}

/* Copies the metas of `src` onto `dest` (writable) through each meta's
 * own transform (a whole-buffer copy), except those of the APIs in `skip`
 * and those tied to the memory: what a new output buffer keeps of its
 * input when the output is not a copy of it (jobdemux's results keep their
 * frame's metas, jobdecode's frame modes the tensor buffer's). */
inline void copy_metas_except(GstBuffer* dest, GstBuffer* src, std::initializer_list<GType> skip) {
  gpointer state = nullptr;
  while (GstMeta* m = gst_buffer_iterate_meta(src, &state)) {
    const GType api = m->info->api;
    if (!m->info->transform_func || std::find(skip.begin(), skip.end(), api) != skip.end() ||
        gst_meta_api_type_has_tag(api, g_quark_from_static_string(GST_META_TAG_MEMORY_STR)))
      continue;
    GstMetaTransformCopy copy = {FALSE, 0, static_cast<gsize>(-1)};
    m->info->transform_func(dest, m, src, _gst_meta_transform_copy, &copy);
  }
}

/* Events that keep their place among buffers (queued with them). */
inline bool is_serialized(GstEvent* e) {
  return (static_cast<int>(GST_EVENT_TYPE(e)) & static_cast<int>(GST_EVENT_TYPE_SERIALIZED)) != 0;
}
inline bool is_sticky(GstEvent* e) {
  return (static_cast<int>(GST_EVENT_TYPE(e)) & static_cast<int>(GST_EVENT_TYPE_STICKY)) != 0;
}

/* Answers a CAPS query with `caps` (taken) intersected with its filter. */
inline gboolean answer_caps_query(GstQuery* query, GstCaps* caps) {
  GstCaps* filter = nullptr;
  gst_query_parse_caps(query, &filter);
  if (filter) {
    GstCaps* tmp = gst_caps_intersect_full(filter, caps, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(caps);
    caps = tmp;
  }
  gst_query_set_caps_result(query, caps);
  gst_caps_unref(caps);
  return TRUE;
}

/* Answers a CAPS query with the pad's current caps (when `current_first`
 * and negotiated) or its template. */
inline gboolean answer_caps_query(GstPad* pad, GstQuery* query, bool current_first) {
  GstCaps* caps = current_first ? gst_pad_get_current_caps(pad) : nullptr;
  if (!caps) caps = gst_pad_get_pad_template_caps(pad);
  return answer_caps_query(query, caps);
}

/* Answers a LATENCY query on an element's src pad: upstream's latency
 * (asked through `sinkpad`) plus what the element adds, `min_extra` to the
 * minimum and `max_extra` to a bounded maximum. */
inline gboolean answer_latency_query(GstPad* sinkpad, GstQuery* query, GstClockTime min_extra,
                                     GstClockTime max_extra) {
  if (!gst_pad_peer_query(sinkpad, query)) return FALSE;
  gboolean live;
  GstClockTime min, max;
  gst_query_parse_latency(query, &live, &min, &max);
  min += min_extra;
  if (GST_CLOCK_TIME_IS_VALID(max)) max += max_extra;
  gst_query_set_latency(query, live, min, max);
  return TRUE;
}

/* Pad query functions of a tensor element's plain pads: CAPS answered with
 * the pad's template (sink pads: any tensors the template allows) or with
 * its current caps, else the template (src pads); other queries the
 * default. */
inline gboolean template_caps_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  if (GST_QUERY_TYPE(query) == GST_QUERY_CAPS) return answer_caps_query(pad, query, false);
  return gst_pad_query_default(pad, parent, query);
}
inline gboolean current_caps_query(GstPad* pad, GstObject* parent, GstQuery* query) {
  if (GST_QUERY_TYPE(query) == GST_QUERY_CAPS) return answer_caps_query(pad, query, true);
  return gst_pad_query_default(pad, parent, query);
}
/* current_caps_query on a src pad whose element adds `extra` to upstream's
 * latency (minimum and maximum; `sinkpad` asks upstream). */
inline gboolean current_caps_latency_query(GstPad* pad, GstObject* parent, GstQuery* query, GstPad* sinkpad,
                                           GstClockTime extra) {
  if (GST_QUERY_TYPE(query) == GST_QUERY_LATENCY) return answer_latency_query(sinkpad, query, extra, extra);
  return current_caps_query(pad, parent, query);
}

}  // namespace jobflow::gst

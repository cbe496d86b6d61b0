/* jobsink: how applications get results out of a Jobflow pipeline.
 *
 * jobsink keeps the last `max-results` results (GstSamples: buffer + caps +
 * segment) in a bounded queue. Take them either way:
 *
 *   synchronous   job_sink_pull_result() / the "pull-result" action signal
 *                 blocks until a result is queued; NULL at EOS or when the
 *                 sink stops (state change to READY or NULL).
 *                 job_sink_try_pull_result(timeout) waits at most `timeout`
 *                 ns (0 = just look); NULL on timeout too.
 *   asynchronous  set callbacks (job_sink_set_callbacks, the fast path), or
 *                 emit-signals=true and connect "new-result"; both are
 *                 called from the streaming thread, without any jobsink lock
 *                 held, after the result is queued: pull it from there.
 *
 *   GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "out");
 *   while (GstSample* s = job_sink_pull_result(sink)) {
 *     std::vector<jobflow::Tensor> t;
 *     std::string err;
 *     if (jobflow_sample_to_tensors(s, &t, &err)) use(t);   // no copy
 *     gst_sample_unref(s);   // the tensors keep what they need alive
 *   }
 *
 * Link `jobflow_gst_dep` (libjobflow-gst), where these functions and the
 * jobsink element type live; the plugin registers the element from there
 * (the gst-plugins-base libgstapp / appsink split). */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

/* Callbacks: each may be NULL. `new_result` runs in the streaming thread
 * for every queued result; a return other than GST_FLOW_OK stops the
 * stream with it. `eos` runs when EOS reaches the sink. */
typedef struct {
  void (*eos)(GstElement* sink, gpointer user_data);
  GstFlowReturn (*new_result)(GstElement* sink, gpointer user_data);
  /*< private >*/
  gpointer _jobflow_reserved[4];
} JobSinkCallbacks;

/* Replaces the callbacks (NULL callbacks = none). `notify(user_data)` is
 * called once the callbacks are replaced and no call to them is running. */
void job_sink_set_callbacks(GstElement* sink, const JobSinkCallbacks* callbacks, gpointer user_data,
                            GDestroyNotify notify);
/* Blocks until a result is queued and returns it (transfer full); NULL at
 * EOS (after the queued results are taken) or when the sink is stopped. */
GstSample* job_sink_pull_result(GstElement* sink);
/* As job_sink_pull_result(), waiting at most `timeout` ns
 * (GST_CLOCK_TIME_NONE = forever); NULL also on timeout. */
GstSample* job_sink_try_pull_result(GstElement* sink, GstClockTime timeout);
/* TRUE once EOS reached the sink and every queued result was pulled. */
gboolean job_sink_is_eos(GstElement* sink);

G_END_DECLS

#ifdef __cplusplus
#include <jobflow/tensor.h>

#include <string>
#include <vector>

/* The tensors of a result (caps other/tensors, one GstMemory per tensor),
 * without copying: each Tensor maps and references the sample's memory for
 * as long as it (or a copy) lives, so the sample may be unreffed at once.
 * The data are read-only (written through the Tensor they are undefined
 * behaviour; clone() first). On failure returns false and sets *error
 * (caps that are not other/tensors, or a buffer that does not match them).
 * Never throws. */
bool jobflow_sample_to_tensors(GstSample* sample, std::vector<jobflow::Tensor>* tensors, std::string* error);
#endif

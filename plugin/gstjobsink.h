/* jobsink: the end of a Jobflow pipeline, where applications take results
 * (see jobsink.h for the application API and docs/elements.md#jobsink).
 *
 * A GstBaseSink, modelled on appsink: settings under a lock, a bounded
 * queue of GstSamples, pull-result / try-pull-result action signals backed
 * by C functions, a C-callback fast path, signals off by default, and no
 * user code called while a lock is held. */
#pragma once

#include <gst/base/gstbasesink.h>
#include <gst/gst.h>

#include "jobsink.h"

G_BEGIN_DECLS

#define GST_TYPE_JOB_SINK (gst_job_sink_get_type())
G_DECLARE_FINAL_TYPE(GstJobSink, gst_job_sink, GST, JOB_SINK, GstBaseSink)

/* Registers the "jobsink" element in `plugin`. */
gboolean jobflow_register_jobsink(GstPlugin* plugin);

G_END_DECLS

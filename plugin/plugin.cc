/* The "jobflow" GStreamer plugin: registers the elements, nothing else.
 * Each element lives in its own gstjob<name>.{h,cc} pair and exports
 * `gboolean jobflow_register_<name>(GstPlugin*)`. */
#include <gst/gst.h>

#include "gstjobdatasrc.h"
#include "gstjobsink.h"

#ifndef JOBFLOW_VERSION
#error "JOBFLOW_VERSION is set by plugin/meson.build"
#endif

/* ---- Elements written in other files (the lead's list) ----------------
 * plugin/meson.build compiles gstjob<name>.cc when it exists and then
 * defines JOBFLOW_HAVE_<NAME>; add a line here for each new element file. */
G_BEGIN_DECLS
gboolean jobflow_register_jobfunction(GstPlugin* plugin);
gboolean jobflow_register_jobconvert(GstPlugin* plugin);
gboolean jobflow_register_jobdecode(GstPlugin* plugin);
gboolean jobflow_register_jobbatch(GstPlugin* plugin);
gboolean jobflow_register_jobunbatch(GstPlugin* plugin);
G_END_DECLS

static gboolean register_others(GstPlugin* plugin) {
  gboolean ok = TRUE;
#ifdef JOBFLOW_HAVE_JOBFUNCTION
  ok &= jobflow_register_jobfunction(plugin);
#endif
#ifdef JOBFLOW_HAVE_JOBCONVERT
  ok &= jobflow_register_jobconvert(plugin);
#endif
#ifdef JOBFLOW_HAVE_JOBDECODE
  ok &= jobflow_register_jobdecode(plugin);
#endif
#ifdef JOBFLOW_HAVE_JOBBATCH
  ok &= jobflow_register_jobbatch(plugin);
#endif
#ifdef JOBFLOW_HAVE_JOBUNBATCH
  ok &= jobflow_register_jobunbatch(plugin);
#endif
  (void)plugin;
  return ok;
}
/* ---- end of the lead's list ------------------------------------------ */

static gboolean plugin_init(GstPlugin* plugin) {
  gboolean ok = jobflow_register_jobsink(plugin);
  ok &= jobflow_register_jobdatasrc(plugin);
  ok &= register_others(plugin);
  return ok;
}

GST_PLUGIN_DEFINE(GST_VERSION_MAJOR, GST_VERSION_MINOR, jobflow,
                  "Jobflow: train and run deep-learning jobs in pipelines (tensors as NNStreamer's other/tensors)",
                  plugin_init, JOBFLOW_VERSION, "LGPL", "Jobflow", JOBFLOW_ORIGIN)

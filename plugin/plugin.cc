/* The "jobflow" GStreamer plugin: registers the elements, nothing else.
 * Each element lives in its own gstjob<name>.{h,cc} pair (listed in
 * plugin/meson.build) and exports `gboolean jobflow_register_<name>(GstPlugin*)`;
 * add a line below for each new element. */
#include <gst/gst.h>

#include "gstjobbatch.h"
#include "gstjobconvert.h"
#include "gstjobcrop.h"
#include "gstjobdatasrc.h"
#include "gstjobdecode.h"
#include "gstjobdemux.h"
#include "gstjobfunction.h"
#include "gstjobmetapublish.h"
#include "gstjobmux.h"
#include "gstjoboverlay.h"
#include "gstjobsink.h"
#include "gstjobtrack.h"
#include "gstjobunbatch.h"

#ifndef JOBFLOW_VERSION
#error "JOBFLOW_VERSION is set by plugin/meson.build"
#endif

static gboolean plugin_init(GstPlugin* plugin) {
  gboolean ok = jobflow_register_jobsink(plugin);
  ok &= jobflow_register_jobdatasrc(plugin);
  ok &= jobflow_register_jobfunction(plugin);
  ok &= jobflow_register_jobconvert(plugin);
  ok &= jobflow_register_jobdecode(plugin);
  ok &= jobflow_register_jobbatch(plugin);
  ok &= jobflow_register_jobunbatch(plugin);
  ok &= jobflow_register_jobmux(plugin);
  ok &= jobflow_register_jobdemux(plugin);
  ok &= jobflow_register_jobmetapublish(plugin);
  ok &= jobflow_register_jobtrack(plugin);
  ok &= jobflow_register_joboverlay(plugin);
  ok &= jobflow_register_jobcrop(plugin);
  return ok;
}

GST_PLUGIN_DEFINE(GST_VERSION_MAJOR, GST_VERSION_MINOR, jobflow,
                  "Jobflow: train and run deep-learning jobs in pipelines (tensors as NNStreamer's other/tensors)",
                  plugin_init, JOBFLOW_VERSION, "LGPL", "Jobflow", JOBFLOW_ORIGIN)

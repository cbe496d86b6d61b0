/* jobmetapublish: writes each frame's metas as JSON lines (meta_json.h) to
 * a file, stdout, or an MQTT broker, and passes the buffers on unchanged
 * (a GstBaseTransform in passthrough, ANY caps).
 *
 * The lines go through a bounded queue to a thread of the element's own
 * (file, stdout) or to the MQTT connection's (libmosquitto): the pipeline
 * never waits for the output. When the queue is full the oldest line is
 * dropped (the `dropped` counter, and a warning on the bus). The MQTT
 * connection is retried every second while the broker is away; lines wait
 * in the queue meanwhile. EOS waits until every queued line is written (or
 * published and acknowledged), unless the broker is away. docs/elements.md
 * has the full reference and the JSON schema. */
#pragma once

#include <gst/base/gstbasetransform.h>
#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_JOB_META_PUBLISH (gst_job_meta_publish_get_type())
G_DECLARE_FINAL_TYPE(GstJobMetaPublish, gst_job_meta_publish, GST, JOB_META_PUBLISH, GstBaseTransform)

/* The element message posted when the MQTT connection comes up or goes
 * away: fields "connected" (boolean), "host" (string), "port" (guint),
 * "reason" (string, when it went away or could not be made). */
#define JOBFLOW_MQTT_MESSAGE_NAME "jobflow-mqtt"

/* Registers the "jobmetapublish" element in `plugin`. */
gboolean jobflow_register_jobmetapublish(GstPlugin* plugin);

G_END_DECLS

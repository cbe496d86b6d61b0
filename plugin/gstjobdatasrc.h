/* jobdatasrc: streams an IDX data set (the MNIST format; by default
 * Debian's Fashion-MNIST) as batches of images and labels.
 *
 * Src: other/tensors, format=static, num_tensors=2,
 *      dimensions="W:H:1:B,B", types="float32,int32",
 *      framerate=1000/B
 * Each buffer holds two memories: images (B, 1, H, W) float32 in [0, 1]
 * and labels (B,) int32, plus a JobflowTensorMeta ("images", "labels").
 *
 * Time: each sample is 1 ms of stream time, so a batch has pts = first
 * sample index * 1 ms and duration B ms; offset / offset-end are sample
 * indices in the stream (across epochs). Seeks in TIME, DEFAULT (samples)
 * and BUFFERS (batches) formats land on that sample (a batch may start
 * anywhere). docs/elements.md#jobdatasrc has the full reference. */
#pragma once

#include <gst/base/gstpushsrc.h>
#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_JOB_DATA_SRC (gst_job_data_src_get_type())
G_DECLARE_FINAL_TYPE(GstJobDataSrc, gst_job_data_src, GST, JOB_DATA_SRC, GstPushSrc)

/* Registers the "jobdatasrc" element in `plugin`. */
gboolean jobflow_register_jobdatasrc(GstPlugin* plugin);

G_END_DECLS

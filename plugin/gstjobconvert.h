/* jobconvert: raw media -> one tensor (other/tensors, num_tensors=1).
 *
 * Sink: video/x-raw (GRAY8, RGB, BGR, RGBA, BGRx), audio/x-raw (S16LE,
 * F32LE, interleaved) or application/octet-stream (shape and type declared
 * by the input-dims / input-type properties).
 * Src:  other/tensors, format=static, num_tensors=1.
 *
 * Shapes (outermost first; caps write them innermost first):
 *   video  nchw (N, C, H, W)   nhwc (N, H, W, C)   N = frames-per-tensor
 *   audio  nchw (C, F)         nhwc (F, C)         F = frames-per-tensor
 *                                                  (audio frames = samples
 *                                                  per channel)
 *   octet  input-dims (or (K,) for `fields` records) when frames-per-tensor
 *          == 1, else (N, that...)
 * Audio and octet streams are windows: frames-per-tensor units, one every
 * `hop` units (default: side by side); audio channels all, mixed to one, or
 * one selected (channel-mode). Octet records are input-dims of input-type,
 * or `fields` ("int64,float32:6"), with record-size bytes each.
 * Values (dtype=float32): out = (in * scale - mean[c]) / std[c].
 * docs/elements.md has the full reference. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_JOB_CONVERT (gst_job_convert_get_type())
G_DECLARE_FINAL_TYPE(GstJobConvert, gst_job_convert, GST, JOB_CONVERT, GstElement)

/* Registers the "jobconvert" element in `plugin`. */
gboolean jobflow_register_jobconvert(GstPlugin* plugin);

G_END_DECLS

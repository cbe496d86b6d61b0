/* jobfunction: runs one compiled job function on the tensors that flow
 * through it.
 *
 * The `job` property names a job file (docs/job-files.md): its placeholders
 * give the sink caps, its returns the src caps (other/tensors, one
 * GstMemory per tensor). Each buffer is one call of the job; the calls run
 * on this element's src task, which pushes the results in input order, so
 * upstream is blocked only when `max-in-flight` buffers are waiting. EOS is pushed after every result
 * before it. Train jobs: each buffer is one step; the loss goes downstream
 * (it is the job's return), in "jobflow-step" element messages and in the
 * "step-done" signal; the checkpoint is saved every `save-interval` steps
 * and at EOS, each save announced by a "jobflow-checkpoint" message and the
 * "checkpoint-saved" signal. Changing `job` or `checkpoint` in PLAYING
 * reloads at the next buffer boundary ("reloaded" signal). Every property,
 * signal and message is documented in docs/elements.md. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_JOB_FUNCTION (gst_job_function_get_type())
G_DECLARE_FINAL_TYPE(GstJobFunction, gst_job_function, GST, JOB_FUNCTION, GstElement)

/* Element messages posted on the bus (structure names). */
#define JOBFLOW_STEP_MESSAGE_NAME "jobflow-step"
#define JOBFLOW_CHECKPOINT_MESSAGE_NAME "jobflow-checkpoint"
#define JOBFLOW_SUMMARY_MESSAGE_NAME "jobflow-summary"
#define JOBFLOW_RELOAD_MESSAGE_NAME "jobflow-reload"

/* Registers the "jobfunction" element in `plugin`. */
gboolean jobflow_register_jobfunction(GstPlugin* plugin);

G_END_DECLS

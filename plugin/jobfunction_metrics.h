/* jobfunction's numbers (internal to the plugin): per call the loss (the
 * mean of the return the job declares its loss) and the accuracy (of the
 * returns it declares labels and logits), running totals for the
 * jobflow-step and jobflow-summary messages, and the summary-dir event
 * file. Used by the element's task only; start() and stop() run while the
 * task does not. */
#pragma once

#include <gst/gst.h>

#include <jobflow/summary.h>
#include <jobflow/tensor.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "jobfunction_load.h"

namespace jobflow::gst {

class FunctionMetrics {
 public:
  /* What one call reports; NaN where the job declares nothing. */
  struct Step {
    guint64 step = 0;        // the call's number, from 1
    double loss = NAN;       // the mean of the loss return
    double accuracy = NAN;   // this call's
    bool message = false;    // a jobflow-step message is due (message-interval)
    double rate = NAN;       // samples per second since the last message (when due)
    gint64 at_us = 0;        // when it was counted
  };

  /* A fresh start; with `summary_dir`, opens a new event file there
   * (throws the FileWriter's error when it cannot). */
  void start(const std::string& summary_dir);
  /* Closes the event file. */
  void stop();

  /* Counts the result of call `step` of `job` on `batch` samples (dim 0
   * of its first input: it may differ per call), queued at `submitted_us`. */
  Step add(const LoadedJob& job, const std::vector<Tensor>& result, guint64 step, guint64 batch, gint64 submitted_us,
           guint message_interval);
  /* Writes the step's numbers to the event file at the job's step count
   * `job_step` (nothing without summary-dir). Returns "" or the error. */
  std::string write(const LoadedJob& job, const Step& s, int64_t job_step);
  /* The jobflow-step message of `s` (resets the rate's window). */
  GstStructure* step_message(const Step& s);
  /* The jobflow-summary message (at EOS). */
  GstStructure* summary_message() const;

  bool writing() const { return summary_ != nullptr; }
  const std::string& summary_dir() const { return summary_dir_; }
  guint64 steps() const { return steps_; }

 private:
  guint64 steps_ = 0, samples_ = 0, correct_ = 0, counted_ = 0, loss_steps_ = 0;
  double loss_sum_ = 0;
  gint64 start_us_ = 0, last_msg_us_ = 0;
  guint64 samples_since_msg_ = 0;
  std::unique_ptr<summary::FileWriter> summary_;
  std::string summary_dir_;
};

}  // namespace jobflow::gst

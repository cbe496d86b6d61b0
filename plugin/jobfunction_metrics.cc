/* jobfunction's numbers. See jobfunction_metrics.h. */
#include "jobfunction_metrics.h"

#include "gstjobfunction.h"

#include <jobflow/optimizer.h>

#include <utility>

namespace jobflow::gst {

namespace {

/* Rows of `logits` (B, C) whose argmax equals `labels` (B,). */
guint64 count_correct(const Tensor& labels, const Tensor& logits) {
  const int64_t B = logits.shape()[0], C = logits.shape()[1];
  guint64 correct = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t best = 0;
    if (logits.dtype() == DType::Float32) {
      const float* row = logits.data<float>() + b * C;
      for (int64_t c = 1; c < C; ++c)
        if (row[c] > row[best]) best = c;
    } else {
      const double* row = logits.data<double>() + b * C;
      for (int64_t c = 1; c < C; ++c)
        if (row[c] > row[best]) best = c;
    }
    if (best == static_cast<int64_t>(labels.at(b))) ++correct;
  }
  return correct;
}

}  // namespace

void FunctionMetrics::start(const std::string& summary_dir) {
  *this = FunctionMetrics();
  if (summary_dir.empty()) return;
  summary_ = std::make_unique<summary::FileWriter>(summary_dir);
  summary_dir_ = summary_dir;
}

void FunctionMetrics::stop() { summary_.reset(); }

FunctionMetrics::Step FunctionMetrics::add(const LoadedJob& l, const std::vector<Tensor>& r, guint64 step,
                                           guint64 batch, gint64 submitted_us, guint message_interval) {
  Step s;
  s.step = step;
  s.at_us = g_get_monotonic_time();
  if (steps_ == 0) {
    /* The rate in messages counts from the first result on: the first
     * call also pays for the kernels' set-up. The summary counts it all. */
    start_us_ = submitted_us;
    last_msg_us_ = s.at_us;
  } else {
    samples_since_msg_ += batch;
  }
  steps_++;
  samples_ += batch;
  if (l.loss_index >= 0) {
    s.loss = r[l.loss_index].mean();
    loss_sum_ += s.loss;
    loss_steps_++;
  }
  if (l.labels_index >= 0) {
    const guint64 c = count_correct(r[l.labels_index], r[l.logits_index]);
    const guint64 n = static_cast<guint64>(r[l.labels_index].numel());
    correct_ += c;
    counted_ += n;
    s.accuracy = n ? static_cast<double>(c) / static_cast<double>(n) : NAN;
  }
  s.message = message_interval != 0 && step % message_interval == 0;
  if (s.message) {
    const double secs = static_cast<double>(s.at_us - last_msg_us_) / 1e6;
    s.rate = secs > 0 ? static_cast<double>(samples_since_msg_) / secs : 0.0;
  }
  return s;
}

std::string FunctionMetrics::write(const LoadedJob& l, const Step& s, int64_t job_step) {
  if (!summary_) return "";
  /* The numbers of the signal and the message, at the job's step. */
  std::vector<std::pair<std::string, double>> values;
  if (!std::isnan(s.loss)) values.emplace_back("loss", s.loss);
  const auto& opt = l.job->definition().optimizer;
  if (l.train && opt && opt->scheduler().impl()) values.emplace_back("learning_rate", opt->scheduler().lr(job_step - 1));
  if (!std::isnan(s.accuracy)) values.emplace_back("accuracy", s.accuracy);
  if (s.message) values.emplace_back("images_per_second", s.rate);
  if (values.empty()) return "";
  try {
    summary_->scalars(values, job_step);
    summary_->flush();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

GstStructure* FunctionMetrics::step_message(const Step& s) {
  GstStructure* m = gst_structure_new(JOBFLOW_STEP_MESSAGE_NAME, "step", G_TYPE_UINT64, s.step, "samples",
                                      G_TYPE_UINT64, samples_, "images-per-second", G_TYPE_DOUBLE, s.rate, nullptr);
  if (!std::isnan(s.loss)) gst_structure_set(m, "loss", G_TYPE_DOUBLE, s.loss, nullptr);
  if (!std::isnan(s.accuracy))
    gst_structure_set(m, "accuracy", G_TYPE_DOUBLE, s.accuracy, "total-accuracy", G_TYPE_DOUBLE,
                      static_cast<double>(correct_) / static_cast<double>(counted_), nullptr);
  last_msg_us_ = s.at_us;
  samples_since_msg_ = 0;
  return m;
}

GstStructure* FunctionMetrics::summary_message() const {
  const double secs = steps_ ? static_cast<double>(g_get_monotonic_time() - start_us_) / 1e6 : 0.0;
  GstStructure* m = gst_structure_new(JOBFLOW_SUMMARY_MESSAGE_NAME, "steps", G_TYPE_UINT64, steps_, "samples",
                                      G_TYPE_UINT64, samples_, "seconds", G_TYPE_DOUBLE, secs, "images-per-second",
                                      G_TYPE_DOUBLE, secs > 0 ? static_cast<double>(samples_) / secs : 0.0, nullptr);
  if (loss_steps_) gst_structure_set(m, "mean-loss", G_TYPE_DOUBLE, loss_sum_ / loss_steps_, nullptr);
  if (counted_)
    gst_structure_set(m, "accuracy", G_TYPE_DOUBLE, static_cast<double>(correct_) / counted_, "correct",
                      G_TYPE_UINT64, correct_, "counted", G_TYPE_UINT64, counted_, nullptr);
  return m;
}

}  // namespace jobflow::gst

// Shared by pull_results.cpp and new_result.cpp: the options, the
// evaluation pipeline they both run and the accuracy they compute from its
// results.
//
//   jobdatasrc name=data set=test batch-size=100
//     ! jobfunction name=eval job=lenet_eval.onnx checkpoint=DIR message-interval=0
//     ! jobsink name=out
//
// lenet_eval returns (labels (100,) int32, logits (100, 10) float32) for
// every batch; the apps count the rows whose argmax is the label, as the
// seeds' synchronize_batch_job / async_batch_job do.
#pragma once

#include <gst/gst.h>
#include <jobsink.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#ifndef JOBFLOW_JOBS_DIR
#define JOBFLOW_JOBS_DIR "pipelines/jobs"
#endif

namespace apps {

struct Options {
  std::string jobs = JOBFLOW_JOBS_DIR;  // folder with lenet_eval.onnx
  std::string checkpoint = "./lenet_models_1";
  std::string data;      // "" = jobdatasrc's default (Debian's Fashion-MNIST)
  guint num_samples = 0;  // 0 = the whole test set
};

inline Options parse(int argc, char** argv, const char* what) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto is = [&](const char* name) { return a == name || a.rfind(std::string(name) + "=", 0) == 0; };
    auto value = [&](const char* name) -> std::string {
      const std::string prefix = std::string(name) + "=";
      if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
      if (a == name && i + 1 < argc) return argv[++i];
      std::fprintf(stderr, "%s: option %s needs a value\n", argv[0], name);
      std::exit(2);
    };
    if (is("--jobs")) {
      o.jobs = value("--jobs");
    } else if (is("--checkpoint")) {
      o.checkpoint = value("--checkpoint");
    } else if (is("--data")) {
      o.data = value("--data");
    } else if (is("--num-samples")) {
      const std::string v = value("--num-samples");
      char* end = nullptr;
      const unsigned long n = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || v[0] == '-' || *end != '\0' || n > G_MAXINT) {
        std::fprintf(stderr, "%s: --num-samples needs a whole number >= 0, got '%s'\n", argv[0], v.c_str());
        std::exit(2);
      }
      o.num_samples = static_cast<guint>(n);
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: %s [--checkpoint DIR] [--jobs DIR] [--num-samples N] [--data DIR]\n%s\n"
          "  --checkpoint DIR  the LeNet checkpoint (default ./lenet_models_1)\n"
          "  --jobs DIR        folder with lenet_eval.onnx (default %s)\n"
          "  --num-samples N   the first N test samples only (0 = all; whole batches of 100)\n"
          "  --data DIR        IDX data set folder (default: jobdatasrc's)\n",
          argv[0], what, JOBFLOW_JOBS_DIR);
      std::exit(0);
    } else {
      std::fprintf(stderr, "%s: unknown option '%s' (try --help)\n", argv[0], a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// The jobflow plugin: from GST_PLUGIN_PATH, else from the build tree these
// apps were built in.
inline bool ensure_plugin() {
  if (GstElementFactory* f = gst_element_factory_find("jobfunction")) {
    gst_object_unref(f);
    return true;
  }
#ifdef JOBFLOW_PLUGIN_DIR
  gst_registry_scan_path(gst_registry_get(), JOBFLOW_PLUGIN_DIR);
  if (GstElementFactory* f = gst_element_factory_find("jobfunction")) {
    gst_object_unref(f);
    return true;
  }
#endif
  std::fprintf(stderr, "the jobflow GStreamer plugin was not found (set GST_PLUGIN_PATH to the folder of libgstjobflow.so)\n");
  return false;
}

// The pipeline above; the paths are set as properties (no quoting in the
// launch line). NULL with *error set on failure.
inline GstElement* make_pipeline(const Options& o, std::string* error) {
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(
      "jobdatasrc name=data set=test batch-size=100 "
      "! jobfunction name=eval message-interval=0 "
      "! jobsink name=out",
      &err);
  if (!pipeline) {
    *error = err ? err->message : "gst_parse_launch failed";
    g_clear_error(&err);
    return nullptr;
  }
  g_clear_error(&err);  // a non-fatal warning
  GstElement* data = gst_bin_get_by_name(GST_BIN(pipeline), "data");
  GstElement* eval = gst_bin_get_by_name(GST_BIN(pipeline), "eval");
  g_object_set(data, "num-samples", o.num_samples, nullptr);
  if (!o.data.empty()) g_object_set(data, "location", o.data.c_str(), nullptr);
  const std::string job = o.jobs + "/lenet_eval.onnx";
  g_object_set(eval, "job", job.c_str(), "checkpoint", o.checkpoint.c_str(), nullptr);
  gst_object_unref(data);
  gst_object_unref(eval);
  return pipeline;
}

// "from ELEMENT: message (debug)" of an ERROR message.
inline std::string error_text(GstMessage* msg) {
  GError* err = nullptr;
  gchar* debug = nullptr;
  gst_message_parse_error(msg, &err, &debug);
  std::string s = std::string("from ") + GST_OBJECT_NAME(GST_MESSAGE_SRC(msg)) + ": " + (err ? err->message : "?");
  if (debug) s += std::string(" (") + debug + ")";
  g_clear_error(&err);
  g_free(debug);
  return s;
}

// The running count of correct predictions.
struct Accuracy {
  uint64_t correct = 0;
  uint64_t counted = 0;

  // Adds one result of lenet_eval: (labels (B,) int32, logits (B, C) float32).
  bool add(GstSample* sample, std::string* error) {
    std::vector<jobflow::Tensor> t;
    if (!jobflow_sample_to_tensors(sample, &t, error)) return false;
    if (t.size() != 2 || t[0].dtype() != jobflow::Int32 || t[1].dtype() != jobflow::Float32 || t[1].ndim() != 2 ||
        t[0].numel() != t[1].dim(0)) {
      *error = "expected (labels int32 (B,), logits float32 (B, C)) from lenet_eval, got " +
               std::to_string(t.size()) + " tensors";
      return false;
    }
    const int32_t* labels = t[0].data<int32_t>();
    const float* logits = t[1].data<float>();
    const int64_t rows = t[1].dim(0), classes = t[1].dim(1);
    for (int64_t r = 0; r < rows; ++r) {
      const float* z = logits + r * classes;
      int64_t best = 0;  // the first of equal maxima, as numpy's argmax
      for (int64_t c = 1; c < classes; ++c)
        if (z[c] > z[best]) best = c;
      correct += best == labels[r];
    }
    counted += static_cast<uint64_t>(rows);
    return true;
  }

  void print() const {
    std::printf("test accuracy: %.4f (%llu/%llu)\n", counted ? static_cast<double>(correct) / counted : 0.0,
                static_cast<unsigned long long>(correct), static_cast<unsigned long long>(counted));
  }
};

}  // namespace apps

// Tiny option parsing shared by the seed example programs.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <jobflow/tensor.h>

namespace seeds {

struct Options {
  int epochs;
  std::string data;       // "" = default Fashion-MNIST folder
  std::string model_dir;
  bool shuffle = false;   // reshuffle the training set every epoch
  bool bf16 = false;      // --precision bf16: FunctionConfig::enable_auto_mixed_precision(true)
};

inline Options parse(int argc, char** argv, int default_epochs, const char* default_model_dir, const char* usage,
                     bool default_shuffle = false) {
  Options o{default_epochs, "", default_model_dir, default_shuffle, false};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    // "--name VALUE" or "--name=VALUE", exactly (no prefixes).
    auto is = [&](const char* name) { return a == name || a.rfind(std::string(name) + "=", 0) == 0; };
    auto value = [&](const char* name) -> std::string {
      std::string prefix = std::string(name) + "=";
      if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
      if (a == name && i + 1 < argc) return argv[++i];
      std::fprintf(stderr, "%s: option %s needs a value\n", argv[0], name);
      std::exit(2);
    };
    if (is("--epochs")) {
      const std::string v = value("--epochs");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || n > 1000000) {
        std::fprintf(stderr, "%s: --epochs needs a whole number >= 0, got '%s'\n", argv[0], v.c_str());
        std::exit(2);
      }
      o.epochs = static_cast<int>(n);
    } else if (is("--data")) {
      o.data = value("--data");
    } else if (is("--model-dir")) {
      o.model_dir = value("--model-dir");
    } else if (a == "--shuffle") {
      o.shuffle = true;
    } else if (a == "--no-shuffle") {
      o.shuffle = false;
    } else if (is("--precision")) {
      const std::string v = value("--precision");
      if (v != "fp32" && v != "bf16") {
        std::fprintf(stderr, "%s: --precision must be fp32 or bf16, got '%s'\n", argv[0], v.c_str());
        std::exit(2);
      }
      o.bf16 = v == "bf16";
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [--epochs N] [--data DIR] [--model-dir DIR] [--shuffle|--no-shuffle] [--precision fp32|bf16]\n%s\n"
                  "--precision bf16: the jobs' convolutions and matrix products in bfloat16 (float32 weights and\n"
                  "optimizer state; float32 with a notice on CPUs where bf16 is not faster: without AMX or fast\n"
                  "AVX512_BF16 dot products)\n",
                  argv[0], usage);
      std::exit(0);
    } else {
      std::fprintf(stderr, "%s: unknown option '%s' (try --help)\n", argv[0], a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// Counts the rows of `logits` (B, C) whose argmax equals `labels` (B,):
// the seeds' np.sum(np.argmax(logits, 1) == labels).
inline int64_t count_correct(const jobflow::Tensor& labels, const jobflow::Tensor& logits) {
  const int32_t* l = labels.data<int32_t>();
  const float* z = logits.data<float>();
  const int64_t classes = logits.dim(1);
  int64_t right = 0;
  for (int64_t i = 0; i < labels.dim(0); ++i) {
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (z[i * classes + c] > z[i * classes + best]) best = c;
    right += best == l[i];
  }
  return right;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace seeds

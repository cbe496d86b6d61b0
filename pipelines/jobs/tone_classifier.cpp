// tone_classifier: writes a job file of a model over audio windows with
// fixed weights, built with Jobflow's C++ API: which of a few tones a
// window of mono audio holds — the model of pipelines/gst/classify-audio.
//
//   tone_classifier OUT.onnx [WINDOW [RATE]]   (default 1600 samples at 16000 Hz)
//
// The job: samples (1, W) float32 in [-1, 1] (jobconvert's audio window,
// channel-mode=mix) -> scores (1, K), K = the tones 250, 500, 1000, 2000,
// 4000 Hz (the order of pipelines/gst/tones.labels):
//   x = samples * hann                      a Hann window against leakage
//   re = x @ C, im = x @ S                  C[n, k] = cos(2 pi f_k n / RATE), S with sin
//   power = re^2 + im^2                     the power at each tone (a DFT bin)
//   scores = power / (sum(power) + 1e-6)    each tone's share: a tone's own is ~1
// No training: the weights are the formula. With W / RATE a multiple of
// 1/250 s every tone is a whole DFT bin and the others fall on its zeros.
#include <jobflow/jobflow.h>
#include <jobflow/onnx.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

namespace flow = jobflow;

namespace {

const std::vector<double> kTones = {250, 500, 1000, 2000, 4000};

// (W, K): cos (sin = false) or sin of each tone over the window.
flow::Tensor basis(int64_t window, double rate, bool cosine) {
  const int64_t k = static_cast<int64_t>(kTones.size());
  std::vector<float> w(window * k);
  for (int64_t n = 0; n < window; ++n)
    for (int64_t j = 0; j < k; ++j) {
      const double phase = 2 * M_PI * kTones[j] * static_cast<double>(n) / rate;
      w[n * k + j] = static_cast<float>(cosine ? std::cos(phase) : std::sin(phase));
    }
  return flow::Tensor::from<float>({window, k}, w);
}

flow::Tensor hann(int64_t window) {
  std::vector<float> w(window);
  for (int64_t n = 0; n < window; ++n) w[n] = static_cast<float>(0.5 - 0.5 * std::cos(2 * M_PI * n / window));
  return flow::Tensor::from<float>({1, window}, w);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: tone_classifier OUT.onnx [WINDOW [RATE]]\n");
    return 1;
  }
  const int64_t window = argc >= 3 ? std::atoll(argv[2]) : 1600;
  const double rate = argc >= 4 ? std::atof(argv[3]) : 16000;
  if (window < 16 || rate < 2 * kTones.back() + 1) {
    std::fprintf(stderr, "tone_classifier: WINDOW must be at least 16 samples and RATE above %g Hz, got %lld and %g\n",
                 2 * kTones.back(), static_cast<long long>(window), rate);
    return 1;
  }
  try {
    auto job = flow::global_function(
        flow::Predict, flow::function_config().name("tone_classifier"),
        {flow::Numpy::Placeholder({1, window}, flow::Float, "samples")},
        [&](flow::Blob samples) -> flow::Numpy {
          auto x = samples * flow::constant(hann(window), "hann");
          auto re = flow::matmul(x, flow::constant(basis(window, rate, true), "cos"));
          auto im = flow::matmul(x, flow::constant(basis(window, rate, false), "sin"));
          auto power = flow::square(re) + flow::square(im);
          return power / (flow::reduce_sum(power, {1}, true) + 1e-6);
        });
    flow::onnx::save(*job.compiled(), argv[1]);
    std::printf("%s: %s\n", argv[1], job.compiled()->signature().str().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tone_classifier: %s\n", e.what());
    return 1;
  }
  return 0;
}

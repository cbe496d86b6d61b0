// ball_detector: writes a job file of a small object detector with fixed
// weights, built with Jobflow's C++ API: it finds bright round objects (the
// ball of `videotestsrc pattern=ball`) on a dark background and outputs
// them in the YOLOv8 layout, so `jobdecode mode=boxes scheme=yolov8` turns
// them into regions — the detector of pipelines/gst/detect-video.
//
//   ball_detector OUT.onnx [SIZE [BATCH]]   (SIZE: the square input, default
//                                           320; BATCH: frames per call, default 1)
//
// The job: images (B, 3, S, S) float32 in [0, 1] (jobconvert's RGB NCHW)
// -> (B, 5, S/8 * S/8): per cell of an 8-pixel grid, (cx, cy, w, h, score).
// (BATCH 4: pipelines/gst/multi-stream's four streams in one call, jobmux
// batch-size=4.)
//   bright = relu(2 * mean over the channels - 1)      1 on white, 0 on black
//   one convolution, stride 8, over 48 x 48 windows centred on each cell,
//   with three fixed filters: ones (the bright mass m), and the column and
//   row offsets from the window's centre (the first moments)
//   cx, cy = the cell's centre + moment / m            the centroid
//   w = h = 2 * sqrt(m / pi)                           a disc of that area
//   score = m / (m + 100) * exp(-(dx^2 + dy^2) / 72)   whole objects near
//                                                      the window's centre
// A window that sees only part of an object scores low (its centroid is
// far from its centre); the cells around an object all find the same
// centroid, and jobdecode's NMS keeps one box. No training: the weights
// are the formula. Objects up to ~40 pixels across (at the input's scale).
#include <jobflow/jobflow.h>
#include <jobflow/onnx.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace flow = jobflow;

namespace {

constexpr int64_t kWindow = 48, kStride = 8;

flow::Tensor filters() {
  std::vector<float> w(3 * kWindow * kWindow);
  for (int64_t v = 0; v < kWindow; ++v)
    for (int64_t u = 0; u < kWindow; ++u) {
      const int64_t i = v * kWindow + u;
      w[i] = 1.f;                                                            // mass
      w[kWindow * kWindow + i] = static_cast<float>(u - (kWindow - 1) / 2.0);  // column offset
      w[2 * kWindow * kWindow + i] = static_cast<float>(v - (kWindow - 1) / 2.0);  // row offset
    }
  return flow::Tensor::from<float>({3, 1, kWindow, kWindow}, w);
}

// The centre of each cell along one axis, as (1, 1, n, n) varying along `axis`.
flow::Tensor centres(int64_t n, int axis) {
  std::vector<float> c(n * n);
  for (int64_t y = 0; y < n; ++y)
    for (int64_t x = 0; x < n; ++x) c[y * n + x] = static_cast<float>((axis == 3 ? x : y) * kStride + kStride / 2);
  return flow::Tensor::from<float>({1, 1, n, n}, c);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: ball_detector OUT.onnx [SIZE [BATCH]]\n");
    return 1;
  }
  const int64_t size = argc >= 3 ? std::atoll(argv[2]) : 320;
  const int64_t batch = argc == 4 ? std::atoll(argv[3]) : 1;
  if (batch < 1) {
    std::fprintf(stderr, "ball_detector: BATCH must be at least 1, got '%s'\n", argv[3]);
    return 1;
  }
  if (size < kWindow || size % kStride != 0) {
    std::fprintf(stderr, "ball_detector: SIZE must be a multiple of %lld and at least %lld, got %lld\n",
                 static_cast<long long>(kStride), static_cast<long long>(kWindow), static_cast<long long>(size));
    return 1;
  }
  const int64_t cells = size / kStride;
  try {
    auto job = flow::global_function(
        flow::Predict, flow::function_config().name("ball_detector"),
        {flow::Numpy::Placeholder({batch, 3, size, size}, flow::Float, "images")},
        [&](flow::Blob images) -> flow::Numpy {
          auto gray = flow::reduce_mean(images, {1}, true);
          auto bright = flow::nn::relu(gray * 2.0 - 1.0);
          // windows centred on the cells: pad by (window - stride) / 2 on each side
          const int64_t p = (kWindow - kStride) / 2;
          auto padded = flow::pad(bright, {0, 0, p, p, 0, 0, p, p});
          auto moments = flow::nn::conv2d(padded, flow::constant(filters(), "window_filters"), kStride);
          auto parts = flow::split(moments, {1, 1, 1}, 1);
          auto mass = parts[0] + 1e-3;
          auto dx = parts[1] / mass, dy = parts[2] / mass;
          auto cx = flow::constant(centres(cells, 3), "cell_x") + dx;
          auto cy = flow::constant(centres(cells, 2), "cell_y") + dy;
          auto d = flow::sqrt(mass * (4.0 / M_PI));
          auto whole = mass / (mass + 100.0);
          auto centred = flow::exp((flow::square(dx) + flow::square(dy)) * (-1.0 / 72.0));
          auto score = whole * centred;
          auto out = flow::concat({cx, cy, d, d, score}, 1);
          return flow::reshape(out, {batch, 5, cells * cells});
        });
    flow::onnx::save(*job.compiled(), argv[1]);
    std::printf("%s: %s\n", argv[1], job.compiled()->signature().str().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ball_detector: %s\n", e.what());
    return 1;
  }
  return 0;
}

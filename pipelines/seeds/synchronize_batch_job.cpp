// The seed "synchronize_batch_job.py": evaluate the LeNet saved by
// synchronize_single_job; the job returns a tuple (labels, logits)
// synchronously; prints the test accuracy.
#include <cstdio>
#include <exception>
#include <tuple>

#include "cli.h"
#include "seed_models.h"

namespace flow = jobflow;
using seeds::BATCH_SIZE;

static int64_t g_total = 0;
static int64_t g_correct = 0;

static void acc(const flow::Tensor& labels, const flow::Tensor& logits) {
  g_correct += seeds::count_correct(labels, logits);
  g_total += labels.dim(0);
}

int main(int argc, char** argv) try {
  auto opt = seeds::parse(argc, argv, 1, "./lenet_models_1",
                          "Evaluates the LeNet checkpoint on the Fashion-MNIST test set (synchronous tuple result).");

  auto eval_job = flow::global_function(flow::Predict, flow::function_config().name("eval_job").enable_auto_mixed_precision(opt.bf16),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images"),
       flow::Numpy::Placeholder({BATCH_SIZE}, flow::Int32, "labels")},
      [](flow::Blob images, flow::Blob labels) -> std::tuple<flow::Numpy, flow::Numpy> {
        auto placement = flow::scope::placement("gpu", "0:0");
        auto logits = seeds::lenet(images, /*train=*/false);
        auto loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits, "softmax_loss");
        (void)loss;
        return {labels, logits};
      });

  flow::CheckPoint check_point;
  check_point.load(opt.model_dir);
  auto mnist = flow::data::load_mnist(BATCH_SIZE, BATCH_SIZE, opt.data);

  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < opt.epochs; ++epoch)
    for (size_t i = 0; i < mnist.test.images.size(); ++i) {
      auto [labels, logits] = eval_job(mnist.test.images[i], mnist.test.labels[i]);
      acc(labels, logits);
    }
  std::printf("accuracy: %.1f%%\n", g_total ? g_correct * 100.0 / g_total : 0.0);
  std::fprintf(stderr, "(%lld test images in %.2f s)\n", static_cast<long long>(g_total), seeds::seconds_since(t0));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "synchronize_batch_job: %s\n", e.what());
  return 1;
}

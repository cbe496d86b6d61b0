// The seed "async_single_job.py": train the MLP; the job is declared
// -> flow::Callback<flow::Numpy>, so each call returns at once and
// cb_print_loss is called with the loss later, in call order.
#include <cstdio>
#include <exception>

#include "cli.h"
#include "seed_models.h"

namespace flow = jobflow;
using seeds::BATCH_SIZE;

static int g_i = 0;

static void cb_print_loss(flow::Tensor result) {
  if (g_i % 20 == 0) std::printf("%g\n", result.mean());
  g_i += 1;
}

int main(int argc, char** argv) try {
  auto opt = seeds::parse(argc, argv, 20, "./mlp_models_1",
                          "Trains the seeds' MLP on Fashion-MNIST with asynchronous results and saves a checkpoint.");

  auto train_job = flow::global_function(flow::Train, flow::function_config().name("train_job").enable_auto_mixed_precision(opt.bf16),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images"),
       flow::Numpy::Placeholder({BATCH_SIZE}, flow::Int32, "labels")},
      [](flow::Blob images, flow::Blob labels) -> flow::Callback<flow::Numpy> {
        auto logits = seeds::mlp(images);
        auto loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits, "softmax_loss");
        flow::optimizer::PiecewiseConstantScheduler lr_scheduler({}, {0.1});
        flow::optimizer::SGD(lr_scheduler, /*momentum=*/0).minimize(loss);
        return loss;
      });

  flow::CheckPoint check_point;
  check_point.init();
  auto mnist = flow::data::load_mnist(BATCH_SIZE, BATCH_SIZE, opt.data);

  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < opt.epochs; ++epoch)
    for (size_t i = 0; i < mnist.train.images.size(); ++i)
      train_job(mnist.train.images[i], mnist.train.labels[i])(cb_print_loss);

  // save() waits for every call in flight (and so every callback) first.
  check_point.save(opt.model_dir);
  std::printf("model saved to %s (%d epochs, %.1f s)\n", opt.model_dir.c_str(), opt.epochs, seeds::seconds_since(t0));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "async_single_job: %s\n", e.what());
  return 1;
}

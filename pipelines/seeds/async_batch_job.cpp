// The seed "async_batch_job.py": evaluate the MLP saved by
// async_single_job; the job is declared
// -> flow::Callback<std::tuple<flow::Numpy, flow::Numpy>> and `acc` gets
// (labels, logits) for each batch, in call order.
#include <cstdio>
#include <exception>
#include <tuple>

#include "cli.h"
#include "seed_models.h"

namespace flow = jobflow;
using seeds::BATCH_SIZE;

static int64_t g_total = 0;
static int64_t g_correct = 0;

static void acc(std::tuple<flow::Tensor, flow::Tensor> arguments) {
  const flow::Tensor& labels = std::get<0>(arguments);
  const flow::Tensor& logits = std::get<1>(arguments);
  g_correct += seeds::count_correct(labels, logits);
  g_total += labels.dim(0);
}

int main(int argc, char** argv) try {
  auto opt = seeds::parse(argc, argv, 1, "./mlp_models_1",
                          "Evaluates the MLP checkpoint on the Fashion-MNIST test set with asynchronous results.");

  auto eval_job = flow::global_function(flow::Predict, flow::function_config().name("eval_job").enable_auto_mixed_precision(opt.bf16),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images"),
       flow::Numpy::Placeholder({BATCH_SIZE}, flow::Int32, "labels")},
      [](flow::Blob images, flow::Blob labels) -> flow::Callback<std::tuple<flow::Numpy, flow::Numpy>> {
        auto placement = flow::scope::placement("cpu", "0:0");
        auto logits = seeds::mlp(images);
        auto loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits, "softmax_loss");
        (void)loss;
        return std::tuple<flow::Numpy, flow::Numpy>{labels, logits};
      });

  flow::CheckPoint check_point;
  check_point.load(opt.model_dir);
  auto mnist = flow::data::load_mnist(BATCH_SIZE, BATCH_SIZE, opt.data);

  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < opt.epochs; ++epoch)
    for (size_t i = 0; i < mnist.test.images.size(); ++i) eval_job(mnist.test.images[i], mnist.test.labels[i])(acc);
  eval_job.sync();  // every callback has run when sync() returns

  std::printf("accuracy: %.1f%%\n", g_total ? g_correct * 100.0 / g_total : 0.0);
  std::fprintf(stderr, "(%lld test images in %.2f s)\n", static_cast<long long>(g_total), seeds::seconds_since(t0));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "async_batch_job: %s\n", e.what());
  return 1;
}

// The seed "synchronize_single_job.py": train LeNet, getting the loss
// synchronously (the job returns flow::Numpy), print it every 20 steps, and
// save the model to ./lenet_models_1.
#include <cstdio>
#include <exception>
#include <vector>

#include "cli.h"
#include "seed_models.h"

namespace flow = jobflow;
using seeds::BATCH_SIZE;

int main(int argc, char** argv) try {
  auto opt = seeds::parse(argc, argv, 20, "./lenet_models_1",
                          "Trains the seeds' LeNet on Fashion-MNIST (synchronous results) and saves a checkpoint.\n"
                          "The training set is reshuffled every epoch unless --no-shuffle is given.",
                          /*default_shuffle=*/true);

  auto train_job = flow::global_function(flow::Train, flow::function_config().name("train_job").enable_auto_mixed_precision(opt.bf16),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images"),
       flow::Numpy::Placeholder({BATCH_SIZE}, flow::Int32, "labels")},
      [](flow::Blob images, flow::Blob labels) -> flow::Numpy {
        flow::Blob loss;
        {
          auto placement = flow::scope::placement("gpu", "0:0");
          auto logits = seeds::lenet(images, /*train=*/true);
          loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits, "softmax_loss");
        }
        flow::optimizer::PiecewiseConstantScheduler lr_scheduler({}, {0.1});
        flow::optimizer::SGD(lr_scheduler, /*momentum=*/0).minimize(loss);
        return loss;
      });

  flow::CheckPoint check_point;
  check_point.init();

  // The images held once, as the IDX files store them (uint8), each batch
  // converted when the step needs it: a quarter of the float32 set's memory
  // and no reshuffled copy per epoch (the same batches as load_mnist +
  // shuffled()).
  const flow::data::RawMnist mnist = flow::data::load_mnist_raw(BATCH_SIZE, BATCH_SIZE, opt.data);
  const int64_t batches = mnist.train.batches();
  if (opt.shuffle) std::printf("shuffling the training set every epoch (--no-shuffle: the seeds' fixed order)\n");
  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    const auto te = std::chrono::steady_clock::now();
    const std::vector<int64_t> order =
        opt.shuffle ? flow::data::shuffled_order(mnist.train.samples(), static_cast<uint64_t>(epoch))
                    : std::vector<int64_t>{};
    for (int64_t i = 0; i < batches; ++i) {
      const auto [images, labels] = mnist.train.batch(i, order);
      flow::Tensor loss = train_job(images, labels);
      if (i % 20 == 0) std::printf("%g\n", loss.mean());
    }
    std::printf("epoch %d/%d done in %.1f s (%.0f images/s)\n", epoch + 1, opt.epochs, seeds::seconds_since(te),
                batches * BATCH_SIZE / seeds::seconds_since(te));
    std::fflush(stdout);
  }
  check_point.save(opt.model_dir);
  std::printf("model saved to %s (%d epochs, %.1f s)\n", opt.model_dir.c_str(), opt.epochs, seeds::seconds_since(t0));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "synchronize_single_job: %s\n", e.what());
  return 1;
}

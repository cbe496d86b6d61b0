// jobflow/models/seeds.h — the seeds' two networks (LeNet and the MLP),
// written with Jobflow's C++ API one to one with the Python of OneFlow's
// guide (lenet_train.py / mlp in async_single_job.py), and the example jobs
// built from them that `jobflow export` writes as job files:
//
//   <net>_train   (images, labels) -> loss             SGD lr 0.1, momentum 0
//   <net>_eval    (images, labels) -> (labels, logits) the seeds' eval_job,
//                 declaring them its accuracy (FunctionConfig::accuracy)
//   <net>_predict (images)         -> logits
//
// with images (100, 1, 28, 28) float32 and labels (100,) int32.
#pragma once

#include <memory>
#include <string>
#include <tuple>

#include <jobflow/jobflow.h>

// The layer options are given as the seeds give them; the others keep
// their defaults.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace jobflow::models {
namespace flow = jobflow;

inline constexpr int64_t BATCH_SIZE = 100;

inline flow::Blob lenet(flow::Blob data, bool train = false) {
  auto initializer = flow::truncated_normal(0.1);
  auto conv1 = flow::layers::conv2d(data, 32, 5,
      {.padding = "SAME", .activation = flow::nn::relu, .kernel_initializer = initializer, .name = "conv1"});
  auto pool1 = flow::nn::max_pool2d(conv1, 2, 2, "SAME", "NCHW", "pool1");
  auto conv2 = flow::layers::conv2d(pool1, 64, 5,
      {.padding = "SAME", .activation = flow::nn::relu, .kernel_initializer = initializer, .name = "conv2"});
  auto pool2 = flow::nn::max_pool2d(conv2, 2, 2, "SAME", "NCHW", "pool2");
  auto reshape = flow::reshape(pool2, {pool2.shape()[0], -1});
  auto hidden = flow::layers::dense(reshape, 512,
      {.activation = flow::nn::relu, .kernel_initializer = initializer, .name = "dense1"});
  if (train) hidden = flow::nn::dropout(hidden, 0.5, "dropout");
  return flow::layers::dense(hidden, 10, {.kernel_initializer = initializer, .name = "dense2"});
}

inline flow::Blob mlp(flow::Blob data) {
  auto initializer = flow::truncated_normal(0.1);
  auto reshape = flow::reshape(data, {data.shape()[0], -1});
  auto hidden = flow::layers::dense(reshape, 512,
      {.activation = flow::nn::relu, .kernel_initializer = initializer, .name = "hidden"});
  return flow::layers::dense(hidden, 10, {.kernel_initializer = initializer, .name = "output"});
}

// ---- the example jobs ----

enum class Net { LeNet, MLP };
inline const char* net_name(Net n) { return n == Net::LeNet ? "lenet" : "mlp"; }
inline flow::Blob net(Net n, flow::Blob images, bool train) { return n == Net::LeNet ? lenet(images, train) : mlp(images); }

// (images, labels) -> loss; SGD(PiecewiseConstantScheduler({}, {lr}), momentum).
inline std::shared_ptr<flow::CompiledJob> train_job(Net n, const std::string& name = "", double lr = 0.1,
                                                    double momentum = 0.0) {
  auto job = flow::global_function(flow::Train,
      flow::function_config().name(name.empty() ? std::string(net_name(n)) + "_train" : name),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images"),
       flow::Numpy::Placeholder({BATCH_SIZE}, flow::Int32, "labels")},
      [n, lr, momentum](flow::Blob images, flow::Blob labels) -> flow::Numpy {
        auto logits = net(n, images, /*train=*/true);
        auto loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits, "softmax_loss");
        flow::optimizer::PiecewiseConstantScheduler lr_scheduler({}, {lr});
        flow::optimizer::SGD(lr_scheduler, momentum).minimize(loss);
        return loss;
      });
  return job.compiled();
}

// (images, labels) -> (labels, logits): the seeds' eval_job. It declares
// the two returns its accuracy, so job files and the jobfunction element
// report it.
inline std::shared_ptr<flow::CompiledJob> eval_job(Net n, const std::string& name = "") {
  auto job = flow::global_function(flow::Predict,
      flow::function_config().name(name.empty() ? std::string(net_name(n)) + "_eval" : name).accuracy(0, 1),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images"),
       flow::Numpy::Placeholder({BATCH_SIZE}, flow::Int32, "labels")},
      [n](flow::Blob images, flow::Blob labels) -> std::tuple<flow::Numpy, flow::Numpy> {
        auto logits = net(n, images, /*train=*/false);
        return {labels, logits};
      });
  return job.compiled();
}

// images -> logits.
inline std::shared_ptr<flow::CompiledJob> predict_job(Net n, const std::string& name = "") {
  auto job = flow::global_function(flow::Predict,
      flow::function_config().name(name.empty() ? std::string(net_name(n)) + "_predict" : name),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images")},
      [n](flow::Blob images) -> flow::Numpy { return net(n, images, /*train=*/false); });
  return job.compiled();
}

}  // namespace jobflow::models

#pragma GCC diagnostic pop

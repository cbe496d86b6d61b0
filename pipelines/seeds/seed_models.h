// The seeds' two networks, written with Jobflow's C++ API one to one with
// the Python of OneFlow's guide (lenet_train.py / mlp in async_single_job.py).
#pragma once

#include <jobflow/jobflow.h>

namespace seeds {
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

}  // namespace seeds

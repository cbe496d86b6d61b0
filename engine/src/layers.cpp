// flow.layers.dense and flow.layers.conv2d: variables named as OneFlow names
// them, then the plain ops. The compiler fuses matmul/conv + bias + relu.
#include "jobflow/job.h"
#include "jobflow/ops.h"

namespace jobflow::layers {

Blob dense(Blob x, int64_t units, const DenseOptions& o) {
  Graph& g = require_graph("layers.dense");
  if (units <= 0) throw Error("[layers.dense] units must be > 0, got " + std::to_string(units));
  if (x.ndim() < 2) throw Error("[layers.dense] input must have rank >= 2, got " + spec_str(x.spec()));
  const std::string name = o.name.empty() ? g.unique_name("Dense") : o.name;
  Blob in = x.ndim() > 2 ? flatten(x, 1, -1) : x;
  const int64_t in_features = in.shape()[1];
  // OneFlow's default kernel/bias initializers are constant 0.
  Blob w = get_variable(name + "-weight", {units, in_features}, x.dtype(),
                        o.kernel_initializer.value_or(zeros_initializer()), o.trainable);
  Blob y = matmul(in, w, false, true, name + "-matmul");
  if (o.use_bias) {
    Blob b = get_variable(name + "-bias", {units}, x.dtype(), o.bias_initializer.value_or(zeros_initializer()),
                          o.trainable);
    y = nn::bias_add(y, b, 1, name + "-bias_add");
  }
  return o.activation ? o.activation(y) : y;
}

Blob conv2d(Blob x, int64_t filters, nn::Size2 kernel_size, const Conv2dOptions& o) {
  Graph& g = require_graph("layers.conv2d");
  if (o.data_format != "NCHW")
    throw Error("[layers.conv2d] data_format \"" + o.data_format + "\" is not supported; use \"NCHW\"");
  if (x.ndim() != 4) throw Error("[layers.conv2d] input must be NCHW (rank 4), got " + spec_str(x.spec()));
  if (filters <= 0) throw Error("[layers.conv2d] filters must be > 0");
  if (o.groups <= 0 || x.shape()[1] % o.groups != 0 || filters % o.groups != 0)
    throw Error("[layers.conv2d] groups=" + std::to_string(o.groups) + " must divide the " +
                std::to_string(x.shape()[1]) + " input channels and the " + std::to_string(filters) + " filters");
  const std::string name = o.name.empty() ? g.unique_name("Conv2d") : o.name;
  Blob w = get_variable(name + "-weight", {filters, x.shape()[1] / o.groups, kernel_size.h, kernel_size.w},
                        x.dtype(), o.kernel_initializer.value_or(zeros_initializer()), o.trainable);
  Blob y = nn::conv2d(x, w, o.strides, o.padding, o.dilation_rate, o.groups, name);
  if (o.use_bias) {
    Blob b = get_variable(name + "-bias", {filters}, x.dtype(), o.bias_initializer.value_or(zeros_initializer()),
                          o.trainable);
    y = nn::bias_add(y, b, 1, name + "-bias_add");
  }
  return o.activation ? o.activation(y) : y;
}

}  // namespace jobflow::layers

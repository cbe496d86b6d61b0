// Internal ops used by gradients and the compiler (not public API).
#pragma once

#include "jobflow/ops.h"
#include "jobflow/primitive.h"

namespace jobflow::internal {

// dy * (y > 0), the gradient of relu given its output y.
Blob relu_grad(Blob dy, Blob y);
// Gradient of a bias added along `axis`: sum of dy over every other axis.
Blob bias_grad(Blob dy, int axis);
// 1 where a == b (b broadcast to a's shape), else 0; a's dtype. Used by the
// gradient of reduce_max.
Blob equal_mask(Blob a, Blob b);
// A batch normalization layer on its variables: in a train job, batch
// statistics, updating the moving ones in place (batch_norm_train); in a
// predict job, the moving statistics (batch_normalization). gamma and beta
// may be undefined (no scale, no offset). Used by layers::batch_normalization
// and the ONNX importer.
Blob batch_norm_layer(Blob x, Blob moving_mean, Blob moving_variance, Blob gamma, Blob beta, int axis, double epsilon,
                      double momentum, const std::string& name);
// Builders of the graph-level helpers used by autodiff.
Blob add_n(const std::vector<Blob>& xs);

// Adds a node to the graph of `like` (used where no body is running, e.g.
// autodiff after the body returned).
std::vector<Blob> add_node(std::shared_ptr<Primitive> op, const std::vector<Blob>& inputs, const std::string& name = "");

}  // namespace jobflow::internal

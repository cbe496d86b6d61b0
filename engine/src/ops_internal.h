// Internal ops used by gradients and the compiler (not public API).
#pragma once

#include "jobflow/ops.h"
#include "jobflow/primitive.h"

namespace jobflow {
class CompiledJob;
}

namespace jobflow::internal {

// The then (else) branch of an if_else node's primitive; null for other ops
// (the ONNX exporter writes them as If subgraphs).
const CompiledJob* if_branch(const Primitive& op, bool then);
// The body of a loop or scan node's primitive, its options (scan) and
// whether max_trips / cond are inputs (loop); null for other ops.
const CompiledJob* loop_body(const Primitive& op, bool* has_max_trips, bool* has_cond);
const CompiledJob* scan_body(const Primitive& op, ScanOptions* options);

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
// Reshape requests on inputs with dynamic dims: a dim of the request equal
// to same_dim(j) takes the input's dim j (ONNX Reshape's 0 at position j is
// same_dim(j)), one -1 is inferred from the element count.
inline constexpr int64_t same_dim(int64_t j) { return -2 - j; }
// The output shape of reshaping `xs` by `request` (kDynamic where not known
// yet); Error("[op] ...") when it cannot fit.
Shape resolve_reshape(const char* op, const Shape& xs, const Shape& request);
// reshape() taking same_dim() too: a concrete reshape when x is static, else a
// reshape node that resolves its request per call shape.
Blob reshape_request(Blob x, const Shape& request, const std::string& name = "");
// Builders of the graph-level helpers used by autodiff.
Blob add_n(const std::vector<Blob>& xs);

// Adds a node to the graph of `like` (used where no body is running, e.g.
// autodiff after the body returned).
std::vector<Blob> add_node(std::shared_ptr<Primitive> op, const std::vector<Blob>& inputs, const std::string& name = "");

}  // namespace jobflow::internal

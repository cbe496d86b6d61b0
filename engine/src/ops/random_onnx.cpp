// ONNX rows of random_uniform and random_normal (ops/random.cpp)
// (registry.h): RandomUniform, RandomNormal (a `shape` attribute),
// RandomUniformLike, RandomNormalLike (the input's shape, known per call),
// and Bernoulli built from a uniform draw (1 where it falls below p).
// ONNX's `seed` is a float attribute: kept as the node's seed.
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"

namespace jobflow::onnx {
namespace {

// The `dtype` attribute, or `def` without one; the draws are floats.
DType draw_dtype(Importer& I, DType def) {
  if (!I.has_attr("dtype")) return def;
  const int64_t code = I.attr_i("dtype", 1);
  DType dt;
  try {
    dt = onnx_util::from_onnx_dtype(static_cast<int32_t>(code), I.where() + " dtype");
  } catch (const Error&) {
    I.unsupported(I.node->op_type() + "(dtype " + std::to_string(code) + ")");
  }
  return dt;
}

void op_random(Importer& I, bool normal, bool like) {
  const double a = normal ? I.attr_f("mean", 0.0) : I.attr_f("low", 0.0);
  const double b = normal ? I.attr_f("scale", 1.0) : I.attr_f("high", 1.0);
  const double seed = I.attr_f("seed", 0.0);
  Blob y;
  if (like) {
    Blob x = I.in(0);
    const DType dt = draw_dtype(I, x.dtype());
    if (!is_floating(dt)) I.err(std::string("draws floats; dtype is ") + dtype_name(dt));
    y = normal ? random::normal_like(x, a, b, dt, seed) : random::uniform_like(x, a, b, dt, seed);
  } else {
    const auto shape = I.attr_ints("shape");
    if (!shape) I.err("attribute 'shape' is required");
    const DType dt = draw_dtype(I, DType::Float32);
    if (!is_floating(dt)) I.err(std::string("draws floats; dtype is ") + dtype_name(dt));
    I.check_size(Shape(shape->begin(), shape->end()), dt, "the draws");
    y = normal ? random::normal(Shape(shape->begin(), shape->end()), a, b, dt, seed)
               : random::uniform(Shape(shape->begin(), shape->end()), a, b, dt, seed);
  }
  I.out(0, y);
}

// Bernoulli(p): 1 where a uniform draw falls below p, in `dtype` (p's by
// default).
void op_bernoulli(Importer& I) {
  Blob p = I.in(0);
  if (!is_floating(p.dtype())) I.err("p must be a float tensor, got " + spec_str(p.spec()));
  const DType dt = draw_dtype(I, p.dtype());
  Blob u = random::uniform_like(p, 0.0, 1.0, p.dtype(), I.attr_f("seed", 0.0));
  I.out(0, cast(less(u, p), dt));
}

void export_random(Exporter& E, bool normal) {
  const Primitive& p = E.op();
  const bool like = E.num_inputs() == 1;
  NodeProto* n = E.add_as(std::string(normal ? "RandomNormal" : "RandomUniform") + (like ? "Like" : ""));
  Exporter::set_int(n, "dtype", onnx_util::to_onnx_dtype(dtype_from_name(p.attr_string("dtype"))));
  Exporter::set_float(n, normal ? "mean" : "low", p.attr_double(normal ? "mean" : "low"));
  Exporter::set_float(n, normal ? "scale" : "high", p.attr_double(normal ? "scale" : "high"));
  if (p.attr_double("seed") != 0) Exporter::set_float(n, "seed", p.attr_double("seed"));
  if (!like) Exporter::set_ints(n, "shape", p.attr_ints("shape"));
}

}  // namespace

void random_onnx_rows(OpRows& r) {
  r.import_op("RandomUniform", [](Importer& I) { op_random(I, false, false); });
  r.import_op("RandomNormal", [](Importer& I) { op_random(I, true, false); });
  r.import_op("RandomUniformLike", [](Importer& I) { op_random(I, false, true); });
  r.import_op("RandomNormalLike", [](Importer& I) { op_random(I, true, true); });
  r.import_op("Bernoulli", op_bernoulli);
  r.export_op(OpKind::RandomUniform, [](Exporter& E) { export_random(E, false); });
  r.export_op(OpKind::RandomNormal, [](Exporter& E) { export_random(E, true); });
}

}  // namespace jobflow::onnx

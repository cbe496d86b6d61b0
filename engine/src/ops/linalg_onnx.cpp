// ONNX rows of matmul and bias_add (ops/linalg.cpp) (registry.h). bias_add
// is Jobflow's own op (ai.jobflow.BiasAdd) unless folded into a Gemm/Conv.
#include <utility>

#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"
#include "ops_internal.h"

namespace jobflow::onnx {
namespace {

namespace ou = onnx_util;

// ---- import ----

void op_gemm(Importer& I) {
  Blob a = I.in(0), b = I.in(1);
  if (a.ndim() != 2 || b.ndim() != 2) I.err("A and B must be 2-D, got " + spec_str(a.spec()) + " and " + spec_str(b.spec()));
  const bool ta = I.attr_i("transA", 0) != 0, tb = I.attr_i("transB", 0) != 0;
  const double alpha = I.attr_f("alpha", 1.0), beta = I.attr_f("beta", 1.0);
  Blob y = matmul(a, b, ta, tb);
  if (alpha != 1.0) y = mul_scalar(y, alpha);
  if (I.has(2) && beta != 0.0) {
    Blob c = I.in(2);
    if (beta != 1.0) c = mul_scalar(c, beta);
    if (c.ndim() == 1 && c.shape()[0] == y.shape()[1]) y = nn::bias_add(y, c, 1);
    else y = add(y, c);
  }
  I.out(0, y);
}

void op_matmul(Importer& I) {
  Blob a = I.in(0), b = I.in(1);
  if (a.ndim() == 0 || b.ndim() == 0) I.err("inputs must not be scalars");
  const bool a1 = a.ndim() == 1, b1 = b.ndim() == 1;
  if (a1) a = reshape(a, {1, a.shape()[0]});
  if (b1) b = reshape(b, {b.shape()[0], 1});
  Shape as = a.shape(), bs = b.shape();
  const int64_t M = as[as.size() - 2], N = bs.back();
  const int64_t K = as.back() >= 0 ? as.back() : bs[bs.size() - 2];
  if (!dims_agree(bs[bs.size() - 2], as.back())) I.err("inner dimensions differ: " + shape_str(as) + " x " + shape_str(bs));
  if (!is_static(as) || !is_static(bs)) {
    // Dims known per call. (.., M, K) x (K, N): rows of a times b, back to
    // a's leading dims (a shape computed in the graph, folded per call).
    if (bs.size() == 2 && !a1 && !b1) {
      if (as.size() == 2) {
        I.out(0, matmul(a, b));
        return;
      }
      Blob y = matmul(internal::reshape_request(a, {-1, K}), b);
      Blob lead = shape_of(a, 0, -1);
      I.out(0, reshape_to(y, concat({lead, constant(Tensor::from<int64_t>({1}, {N}))}, 0)));
      return;
    }
    // Batched with the same leading dims: the engine's batched matmul.
    bool same = as.size() == bs.size() && !a1 && !b1;
    for (size_t i = 0; same && i + 2 < as.size(); ++i)
      same = as[i] == bs[i] || (as[i] < 0 && bs[i] != 1) || (bs[i] < 0 && as[i] != 1);
    if (!same) I.unsupported("MatMul(broadcast batch dims known per call)");
    I.out(0, matmul(a, b));
    return;
  }
  Blob y;
  Shape batch;
  if (bs.size() == 2) {
    Shape lead(as.begin(), as.end() - 2);
    y = matmul(as.size() == 2 ? a : reshape(a, {numel(lead) * M, K}), b);
    batch = lead;
  } else {
    if (!layout::broadcast_shape(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2), &batch)) I.err("batch dimensions do not broadcast: " + shape_str(as) + " x " + shape_str(bs));
    Shape fa = batch, fb = batch;
    fa.push_back(M), fa.push_back(K), fb.push_back(K), fb.push_back(N);
    if (as != fa) a = broadcast_to(a, fa);
    if (bs != fb) b = broadcast_to(b, fb);
    const int64_t nb = numel(batch);
    y = matmul(reshape(a, {nb, M, K}), reshape(b, {nb, K, N}));
  }
  Shape os = batch;
  if (!a1) os.push_back(M);
  if (!b1) os.push_back(N);
  if (y.shape() != os) y = reshape(y, os);
  I.out(0, y);
}

// ---- export ----

// matmul -> Gemm (2-D; a bias_add along axis 1 that alone reads it becomes
// C), or Transpose + MatMul (batched) [+ Add of a fused bias] [+ Relu].
void export_matmul(Exporter& E) {
  const Primitive& p = E.op();
  const bool ta = p.attr_int("transpose_a"), tb = p.attr_int("transpose_b");
  const bool bias = p.attr_int("bias"), relu = p.attr_int("relu");
  const TensorSpec &A = E.in_spec(0), &B = E.in_spec(1);
  std::string y = E.out(0);
  const std::string base = E.name();
  std::string bias_name;
  if (bias) bias_name = E.in(2);
  else if (A.shape.size() == 2 && B.shape.size() == 2) E.fold_bias_add(false, &bias_name, &y);
  // With a fused relu the Gemm result is an intermediate.
  const std::string mm_out = relu ? E.fresh(base + "/matmul") : y;
  if (A.shape.size() == 2 && B.shape.size() == 2) {
    std::vector<std::string> ins{E.in(0), E.in(1)};
    if (!bias_name.empty()) ins.push_back(bias_name);
    NodeProto* n = E.add("Gemm", ins, {mm_out}, base);
    if (ta) Exporter::set_int(n, "transA", 1);
    if (tb) Exporter::set_int(n, "transB", 1);
  } else {
    auto tr = [&](const std::string& x, size_t rank) {
      std::vector<int64_t> perm(rank);
      for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(i);
      std::swap(perm[rank - 1], perm[rank - 2]);
      const std::string t = E.fresh(x + "/T");
      Exporter::set_ints(E.add("Transpose", {x}, {t}, t), "perm", perm);
      return t;
    };
    const std::string a_in = ta ? tr(E.in(0), A.shape.size()) : E.in(0);
    const std::string b_in = tb ? tr(E.in(1), B.shape.size()) : E.in(1);
    if (bias) {
      const std::string mm = E.fresh(base + "/matmul_nobias");
      E.add("MatMul", {a_in, b_in}, {mm}, base);
      E.add("Add", {mm, bias_name}, {mm_out}, E.fresh(base + "/bias"));
    } else {
      E.add("MatMul", {a_in, b_in}, {mm_out}, base);
    }
  }
  if (relu) E.add("Relu", {mm_out}, {y}, E.fresh(base + "/relu"));
}

// bias_add (not folded into a Gemm/Conv) -> ai.jobflow.BiasAdd(X, B,
// axis) [+ Relu when fused]. Its function, in standard ops: B reshaped to
// (-1, 1, ..., 1) with rank(X) - 1 - axis ones, added to X:
//   r = Size(Shape(X)); a = (axis + r) mod r; n = r - a - 1
//   Y = Add(X, Reshape(B, Concat([-1], ConstantOfShape([n], 1))))
void bias_add_body(::onnx::FunctionProto& f) {
  f.add_input("X");
  f.add_input("B");
  f.add_output("Y");
  f.add_attribute("axis");
  auto int_const = [&](const char* out, int64_t v) {
    Exporter::set_int(Exporter::add_to(f, "Constant", {}, {out}), "value_int", v);
  };
  Exporter::set_ref(Exporter::add_to(f, "Constant", {}, {"axis"}), "value_int", AttributeProto::INT, "axis");
  Exporter::add_to(f, "Shape", {"X"}, {"shape"});
  Exporter::add_to(f, "Size", {"shape"}, {"rank"});
  Exporter::add_to(f, "Add", {"axis", "rank"}, {"axis_r"});
  Exporter::add_to(f, "Mod", {"axis_r", "rank"}, {"a"});
  Exporter::add_to(f, "Sub", {"rank", "a"}, {"after"});
  int_const("one", 1);
  Exporter::add_to(f, "Sub", {"after", "one"}, {"n"});
  Exporter::set_ints(Exporter::add_to(f, "Constant", {}, {"dim0"}), "value_ints", {0});
  Exporter::add_to(f, "Unsqueeze", {"n", "dim0"}, {"n1"});
  Exporter::set_tensor(Exporter::add_to(f, "ConstantOfShape", {"n1"}, {"ones"}), "value",
                       Tensor::from<int64_t>({1}, {1}));
  Exporter::set_ints(Exporter::add_to(f, "Constant", {}, {"minus1"}), "value_ints", {-1});
  Exporter::set_int(Exporter::add_to(f, "Concat", {"minus1", "ones"}, {"bshape"}), "axis", 0);
  Exporter::add_to(f, "Reshape", {"B", "bshape"}, {"Bb"});
  Exporter::add_to(f, "Add", {"X", "Bb"}, {"Y"});
}

void export_bias_add(Exporter& E) {
  const int64_t rank = static_cast<int64_t>(E.in_spec(0).shape.size());
  const int64_t axis = E.op().attr_int("axis");
  if (layout::wrap_axis(axis, rank) < 0 || rank == 0) E.no_form("axis out of range");
  const bool relu = E.op().attr_int("relu");
  const std::string sum = relu ? E.fresh(E.name() + "/sum") : E.out(0);
  Exporter::set_int(E.add_jobflow("BiasAdd", {E.in(0), E.in(1)}, {sum}, E.name(), bias_add_body), "axis", axis);
  if (relu) E.add("Relu", {sum}, {E.out(0)}, E.fresh(E.name() + "/relu"));
}

}  // namespace

void linalg_onnx_rows(OpRows& r) {
  r.import_op("Gemm", op_gemm).weights = {0, 1, 2};
  r.import_op("MatMul", op_matmul).weights = {0, 1};
  r.import_jobflow_op("BiasAdd", [](Importer& I) {
    if (!I.has_attr("axis")) I.err("needs the attribute 'axis'");
    const int64_t axis = I.attr_i("axis", 1);
    I.axis_of(axis, static_cast<int64_t>(I.shape(0).size()));  // in range; kept as saved (negative or not)
    I.out(0, nn::bias_add(I.in(0), I.in(1), static_cast<int>(axis)));
  }).weights = {1};

  r.import_op("Einsum", [](Importer& I) {
    std::vector<Blob> ops;
    for (int i = 0; i < I.nin(); ++i) ops.push_back(I.in(i));
    if (ops.empty()) I.err("needs at least one input");
    for (auto& b : ops)
      if (b.dtype() == DType::Bool) I.err("inputs must be numeric, got " + spec_str(b.spec()));
    I.out(0, einsum(I.attr_s("equation", ""), ops));
  }, true);
  r.import_op("Det", [](Importer& I) {
    Blob x = I.in(0);
    if (!is_floating(x.dtype())) I.unsupported(std::string("Det(") + dtype_name(x.dtype()) + ")");
    I.out(0, math::det(x));
  }, true);
  r.export_op(OpKind::Det, [](Exporter& E) { E.add_as("Det"); });
  r.export_op(OpKind::Einsum, [](Exporter& E) { Exporter::set_string(E.add_as("Einsum"), "equation", E.op().attr_string("equation")); });
  r.export_op(OpKind::MatMul, export_matmul);
  r.export_op(OpKind::BiasAdd, export_bias_add);
}

}  // namespace jobflow::onnx

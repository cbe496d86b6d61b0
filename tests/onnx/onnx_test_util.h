// Helpers of the ONNX op tests (test_onnx_ops*.cpp): inputs with special
// values, a predict job of a body, save/load round trips that compare the
// outputs bitwise and the ops with their attributes, and one-node ONNX
// models built by hand.
#pragma once

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "jobflow/jobflow.h"
#include "jobflow/onnx.h"
#include "jobflow/primitive.h"
#include "onnx/onnx_util.h"
#include "temp_dir.h"

namespace onnx_test {

namespace flow = jobflow;
namespace fs = std::filesystem;
namespace u = jobflow::onnx_util;
using flow::Blob;
using flow::Shape;
using flow::Tensor;
using Blobs = std::vector<Blob>;

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline fs::path tmp_dir(const std::string& name) { return flow::testing::test_tmp_dir("onnx_ops_" + name); }

// Values in [-3, 3) with Inf, -Inf, NaN, -0 and 0 mixed in.
template <class T = float>
Tensor specials(const Shape& s, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> d(-3.0, 3.0);
  Tensor t(s, std::is_same_v<T, float> ? flow::Float32 : flow::Float64);
  T* p = static_cast<T*>(t.raw());
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const T odd[] = {inf, -inf, nan, T(-0.0), T(0.0), T(1e30), T(-1e-30)};
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = i % 5 == 2 ? odd[(i / 5) % 7] : static_cast<T>(d(g));
  return t;
}
template <class T>
Tensor ints(const Shape& s, uint32_t seed, int lo, int hi) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  Tensor t = Tensor::from<T>(s, std::vector<T>(static_cast<size_t>(flow::numel(s)), T(0)));
  for (int64_t i = 0; i < t.numel(); ++i) static_cast<T*>(t.raw())[i] = static_cast<T>(d(g));
  return t;
}

// A predict job of `body` over placeholders x0, x1, ... shaped like `args`.
inline std::shared_ptr<flow::CompiledJob> define(const std::string& name, const std::vector<Tensor>& args,
                                          const std::function<Blobs(const Blobs&)>& body) {
  std::vector<flow::PlaceholderSpec> items;
  for (size_t i = 0; i < args.size(); ++i)
    items.push_back(flow::Numpy::Placeholder(args[i].shape(), args[i].dtype(), std::string("x").append(std::to_string(i))));
  auto job = flow::global_function(flow::Predict, flow::function_config().name(name), {flow::TuplePlaceholder(items)},
                                   [&](std::vector<Blob> in) -> Blobs { return body(in); });
  return job.compiled();
}

inline ::onnx::ModelProto read_model(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  ::onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromIstream(&in)) << p;
  return m;
}

inline std::multiset<std::string> onnx_ops(const ::onnx::ModelProto& m) {
  std::multiset<std::string> r;
  for (auto& n : m.graph().node()) r.insert(n.op_type());
  return r;
}

// Whether two attribute values are the same; with `as_float`, doubles that
// round to the same float32 (what a float32 kernel uses) count as the same.
inline bool same_attr(const flow::AttrValue& a, const flow::AttrValue& b, bool as_float) {
  if (a.index() != b.index()) return false;
  if (auto* x = std::get_if<double>(&a)) {
    const double y = std::get<double>(b);
    if (std::isnan(*x) || std::isnan(y)) return std::isnan(*x) && std::isnan(y);
    return as_float ? static_cast<float>(*x) == static_cast<float>(y) : *x == y;
  }
  if (auto* t = std::get_if<Tensor>(&a)) return t->equal(std::get<Tensor>(b));
  if (auto* i = std::get_if<int64_t>(&a)) return *i == std::get<int64_t>(b);
  if (auto* s = std::get_if<std::string>(&a)) return *s == std::get<std::string>(b);
  if (auto* v = std::get_if<std::vector<int64_t>>(&a)) return *v == std::get<std::vector<int64_t>>(b);
  return std::get<std::vector<double>>(a) == std::get<std::vector<double>>(b);
}

// Every node of `a`'s forward graph whose op is in `ops` has a node of the
// same op and attributes in `b`'s: the loaded job is made of the same ops.
inline void expect_same_ops(const flow::CompiledJob& a, const flow::CompiledJob& b, const std::set<std::string>& ops,
                     bool as_float = false) {
  const flow::Graph& ga = *a.definition().graph;
  const flow::Graph& gb = *b.definition().graph;
  for (size_t i = 0; i < a.definition().forward_nodes && i < ga.nodes.size(); ++i) {
    const flow::Node& n = ga.nodes[i];
    if (!ops.count(n.op->name())) continue;
    const flow::Attrs want = n.op->attributes();
    bool found = false;
    for (size_t j = 0; j < b.definition().forward_nodes && j < gb.nodes.size() && !found; ++j) {
      const flow::Node& m = gb.nodes[j];
      if (std::string(m.op->name()) != n.op->name()) continue;
      const flow::Attrs got = m.op->attributes();
      bool same = got.size() == want.size();
      for (size_t k = 0; same && k < want.size(); ++k)
        same = got[k].first == want[k].first && same_attr(got[k].second, want[k].second, as_float);
      found = same;
    }
    EXPECT_TRUE(found) << "no " << n.op->name() << " {" << n.op->attrs() << "} (node '" << n.name
                       << "') in the loaded job";
  }
}

// Saves `job`, loads it back, runs both on `in`: the outputs must be
// bitwise equal. Returns the saved model (for checks of its nodes).
inline ::onnx::ModelProto round_trip(const flow::CompiledJob& job, const std::vector<Tensor>& in,
                              std::shared_ptr<flow::CompiledJob>* loaded_out = nullptr) {
  const std::string name = job.signature().job_name;
  const fs::path d = tmp_dir(name);
  flow::onnx::save(job, (d / "job.onnx").string());
  auto loaded = flow::onnx::load((d / "job.onnx").string(), {});
  EXPECT_EQ(loaded->signature().str(), job.signature().str());
  auto& j = const_cast<flow::CompiledJob&>(job);
  const auto want = j.run(in), got = loaded->run(in);
  EXPECT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size() && i < got.size(); ++i)
    EXPECT_TRUE(want[i].equal(got[i])) << name << " output " << i << "\n saved:  " << want[i].str(64)
                                       << "\n loaded: " << got[i].str(64);
  if (loaded_out) *loaded_out = loaded;
  auto m = read_model(d / "job.onnx");
  fs::remove_all(d);
  return m;
}

class OnnxOps : public ::testing::Test {
 protected:
  void SetUp() override { flow::session::reset(); }
};

// A one-node ONNX model: input "x", initializers, outputs.
struct Model {
  ::onnx::ModelProto m;
  explicit Model(int64_t opset) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m.mutable_graph()->set_name("g");
  }
  void input(const std::string& name, const Tensor& like) {
    auto* vi = m.mutable_graph()->add_input();
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(u::to_onnx_dtype(like.dtype()));
    auto* sh = tt->mutable_shape();
    for (int64_t d : like.shape()) sh->add_dim()->set_dim_value(d);
  }
  void init(const std::string& name, const Tensor& t) { u::tensor_to_proto(t, name, m.mutable_graph()->add_initializer()); }
  ::onnx::NodeProto* node(const std::string& type, const std::vector<std::string>& ins,
                          const std::vector<std::string>& outs) {
    auto* n = m.mutable_graph()->add_node();
    n->set_op_type(type);
    n->set_name(type);
    for (auto& i : ins) n->add_input(i);
    for (auto& o : outs) {
      n->add_output(o);
      auto* vi = m.mutable_graph()->add_output();
      vi->set_name(o);
    }
    return n;
  }
  std::vector<Tensor> run(const Tensor& x) { return run(std::vector<Tensor>{x}); }
  std::vector<Tensor> run(const std::vector<Tensor>& xs) {
    std::string bytes;
    EXPECT_TRUE(m.SerializeToString(&bytes));
    return flow::onnx::load_bytes(bytes, {}, "model")->run(xs);
  }
  // The message of the load error ("(no error)" when it loads).
  std::string load_error() {
    std::string bytes;
    EXPECT_TRUE(m.SerializeToString(&bytes));
    try {
      flow::onnx::load_bytes(bytes, {}, "model");
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(no error)";
  }
};
inline void set_ints(::onnx::NodeProto* n, const char* k, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
inline void set_int(::onnx::NodeProto* n, const char* k, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}
inline void set_string(::onnx::NodeProto* n, const char* k, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(v);
}
inline void set_float(::onnx::NodeProto* n, const char* k, float v) {
  auto* a = n->add_attribute();
  a->set_name(k);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(v);
}


}  // namespace onnx_test

// compiler/layout.cpp — rewrites, memory formats and precision of predict
// plans on the CPU (see passes.h).
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <omp.h>

#include "compiler/passes.h"
#include "cpu/simd_kernels.h"
#include "cpu/isa.h"
#include "cpu/threads.h"
#include "cpu/layout_ops.h"
#include "session_internal.h"
#include "state_ops.h"

namespace jobflow::compiler {
namespace {

using cpu::MemDesc;
using dt = dnnl::memory::data_type;
using alg = dnnl::algorithm;

bool f32_4d(const TensorSpec& s) { return s.dtype == DType::Float32 && s.shape.size() == 4; }

// A convolution and what was fused into it, before its kernel is built.
struct ConvGroup {
  cpu::Conv2dParams p{};
  cpu::ConvFusion f;
  std::shared_ptr<const Primitive> orig;
  int residual = -1;  // blob
};

class Pass {
 public:
  explicit Pass(PlanBuild& b)
      : G(*b.graph), order_(b.order), keep_(b.outputs.begin(), b.outputs.end()), opts_(b.opts),
        constants_(b.constants) {
    compute_ = opts_.bf16 ? dt::bf16 : dt::f32;  // (Plan::compile: only where bf16 is usable)
    // The fixed count of inner products and oneDNN's Winograd convolutions
    // (cpu/threads.h): the job's own, else what cpu::auto_threads gives this
    // plan's work with the machine's load left out (one thread for a small
    // call, as the runtime does).
    if (opts_.threads > 0) {
      fixed_threads_ = opts_.threads;
    } else {
      double flops = 0;
      for (int n : order_) flops += step_flops(G.nodes[n], G);
      fixed_threads_ = cpu::auto_threads(flops, cpu::default_threads(), false);
    }
  }

  void run(std::vector<size_t>& bytes) {
    fuse_convs();
    fuse_depthwise();
    fuse_projection();
    fuse_gap();
    fuse_max_pool();
    assign();
    bytes.assign(G.blobs.size(), 0);
    for (size_t b = 0; b < desc_.size(); ++b)
      if (desc_[b]) bytes[b] = desc_[b]->get_size();
  }

 private:
  Graph& G;
  std::vector<int>& order_;
  std::set<int> keep_;
  const PlanOptions& opts_;
  const std::map<int, Tensor>& constants_;  // values folded while specializing: weights like Constant ops
  dt compute_;
  int fixed_threads_;  // the threads inner products and oneDNN's Winograd convolutions always run with
  std::map<int, ConvGroup> groups_;           // node -> its fused convolution
  // fuse_depthwise -> fuse_projection: a pair node whose first
  // convolution's output (this blob) its projection adds as its residual.
  std::map<int, int> expanded_;
  std::vector<std::optional<MemDesc>> desc_;  // per blob: its format when not plain float32

  static bool on_cpu(const Node& n) { return n.placement.device == "cpu"; }
  OpKind kind(int n) const { return G.nodes[n].op->kind(); }
  const TensorSpec& spec(int b) const { return G.blobs[b].spec; }

  // Readers of each blob among the nodes of `order_` (each once).
  std::vector<std::vector<int>> readers() const {
    std::vector<std::vector<int>> r(G.blobs.size());
    for (int n : order_)
      for (int b : G.nodes[n].inputs)
        if (r[b].empty() || r[b].back() != n) r[b].push_back(n);
    return r;
  }

  // ------------------------------------------------------------ 1. rewrites

  void fuse_convs() {
    auto rd = readers();
    std::vector<int> emit_at(G.nodes.size(), -2);  // -2: itself; -1: nothing; else: that node
    for (int n : order_) {
      const Node& node = G.nodes[n];
      if (kind(n) != OpKind::Conv2d || !on_cpu(node) || node.outputs.size() != 1) continue;
      if (!f32_4d(spec(node.inputs[0])) || !f32_4d(spec(node.inputs[1]))) continue;
      const Primitive& op = *node.op;
      ConvGroup cg;
      const Shape& x = spec(node.inputs[0]).shape;
      const Shape& w = spec(node.inputs[1]).shape;
      int y = node.outputs[0];
      const Shape& ys = spec(y).shape;
      const auto st = op.attr_ints("strides"), pd = op.attr_ints("pads"), dl = op.attr_ints("dilations");
      cg.p = {x[0], x[1], x[2], x[3], w[0], w[2], w[3], ys[2], ys[3], st[0], st[1], pd[0], pd[1], pd[2], pd[3],
              dl[0], dl[1], op.attr_int("group")};
      cg.f.bias = op.attr_int("bias") != 0;
      const bool relu = op.attr_int("relu") != 0;
      if (relu) cg.f.post.push_back({alg::eltwise_relu});
      cg.orig = node.op;
      std::vector<int> inputs = node.inputs;
      std::vector<int> absorbed;
      auto live = [&](int b) {
        std::vector<int> r;
        for (int c : rd[b])
          if (emit_at[c] == -2) r.push_back(c);
        return r;
      };
      auto sole = [&](int b) {
        auto r = live(b);
        return (r.size() == 1 && !keep_.count(b)) ? r[0] : -1;
      };
      auto fits = [&](int r) { return on_cpu(G.nodes[r]) && G.nodes[r].outputs.size() >= 1; };
      // Batch norm on the channels of the convolution's output.
      if (!relu) {
        const int r = sole(y);
        if (r >= 0 && kind(r) == OpKind::BatchNormalization && fits(r) && G.nodes[r].inputs[0] == y) {
          const Primitive& bn = *G.nodes[r].op;
          const int64_t axis = bn.attr_int("axis");
          if (axis == 1 || axis == -3) {
            cg.f.bn = true;
            cg.f.bn_eps = bn.attr_double("epsilon");
            cg.f.bn_offset = bn.attr_int("offset") != 0;
            cg.f.bn_scale = bn.attr_int("scale") != 0;
            for (size_t k = 1; k < G.nodes[r].inputs.size(); ++k) inputs.push_back(G.nodes[r].inputs[k]);
            absorbed.push_back(r);
            y = G.nodes[r].outputs[0];
          }
        }
      }
      // Element-wise ops and one residual add, as post-ops.
      for (;;) {
        if (keep_.count(y)) break;
        auto rs = live(y);
        if (rs.size() == 1 && fits(rs[0]) && G.nodes[rs[0]].outputs.size() == 1) {
          const int r = rs[0];
          const Primitive& e = *G.nodes[r].op;
          const int out = G.nodes[r].outputs[0];
          if (spec(out) != spec(y)) break;
          bool ok = true;
          switch (kind(r)) {
            case OpKind::Relu: cg.f.post.push_back({alg::eltwise_relu}); break;
            case OpKind::Clip:
              cg.f.post.push_back({alg::eltwise_clip, static_cast<float>(e.attr_double("min")),
                                   static_cast<float>(e.attr_double("max"))});
              break;
            case OpKind::Sigmoid: cg.f.post.push_back({alg::eltwise_logistic}); break;
            case OpKind::HardSigmoid:  // clip(alpha * x + beta, 0, 1)
              cg.f.post.push_back({alg::eltwise_linear, static_cast<float>(e.attr_double("alpha")),
                                   static_cast<float>(e.attr_double("beta"))});
              cg.f.post.push_back({alg::eltwise_clip, 0.f, 1.f});
              break;
            case OpKind::Add: {
              const auto& in = G.nodes[r].inputs;
              const int other = in[0] == y ? in[1] : in[0];
              ok = !cg.f.residual && cg.f.post.empty() && in.size() == 2 && other != y && spec(other) == spec(y);
              if (ok) {
                cg.f.residual = true;
                cg.residual = other;
              }
              break;
            }
            default: ok = false;
          }
          if (!ok) break;
          absorbed.push_back(r);
          y = out;
          continue;
        }
        if (rs.size() == 2) {  // x * sigmoid(x) (swish), x * hard_sigmoid(x) (hardswish)
          int a = -1, m = -1;
          for (int r : rs) {
            if ((kind(r) == OpKind::Sigmoid || kind(r) == OpKind::HardSigmoid) && G.nodes[r].inputs[0] == y) a = r;
            if (kind(r) == OpKind::Mul) m = r;
          }
          if (a < 0 || m < 0 || !fits(a) || !fits(m)) break;
          const int s = G.nodes[a].outputs[0];
          const auto& mi = G.nodes[m].inputs;
          if (!((mi[0] == y && mi[1] == s) || (mi[0] == s && mi[1] == y)) || sole(s) != m) break;
          if (spec(G.nodes[m].outputs[0]) != spec(y)) break;
          if (kind(a) == OpKind::HardSigmoid) {
            const double al = G.nodes[a].op->attr_double("alpha"), be = G.nodes[a].op->attr_double("beta");
            if (std::abs(al - 1.0 / 6) > 1e-6 || std::abs(be - 0.5) > 1e-6) break;
            cg.f.post.push_back({alg::eltwise_hardswish});
          } else {
            cg.f.post.push_back({alg::eltwise_swish, 1.f});
          }
          absorbed.push_back(a);
          absorbed.push_back(m);
          y = G.nodes[m].outputs[0];
          continue;
        }
        break;
      }
      // A squeeze-and-excitation's channel-wise mul that alone feeds this
      // convolution scales the weights instead (cpu::LayoutConv::scales_input).
      if (const auto [d, scale] = input_scale(n, rd, emit_at, cg); scale >= 0) {
        emit_at[G.blobs[node.inputs[0]].producer] = -1;
        inputs[0] = d;
        cg.f.in_scale = true;
        inputs.push_back(scale);
      }
      if (cg.f.residual) inputs.push_back(cg.residual);
      // The fused node keeps the convolution's index and name and takes
      // the place of the last node it absorbed: every input is defined
      // by then, and nothing else read the blobs in between.
      Node fused = node;
      fused.inputs = inputs;
      fused.outputs = {y};
      G.nodes[n] = std::move(fused);
      G.blobs[y].producer = n;
      G.blobs[y].out_index = 0;
      if (!absorbed.empty()) {
        emit_at[n] = -1;
        for (int r : absorbed) emit_at[r] = -1;
        emit_at[absorbed.back()] = n;
      }
      groups_[n] = std::move(cg);
    }
    std::vector<int> order;
    for (int n : order_) {
      if (emit_at[n] == -2) order.push_back(n);
      else if (emit_at[n] >= 0) order.push_back(emit_at[n]);
    }
    order_ = std::move(order);
  }

  // {d, s} when conv node n's input is mul(d, s) with s (N, C, 1, 1), the
  // mul's output is read by n alone, and LayoutConv::scales_input takes
  // the convolution (float32); {-1, -1} otherwise.
  std::pair<int, int> input_scale(int n, const std::vector<std::vector<int>>& rd, const std::vector<int>& emit_at,
                                  const ConvGroup& cg) const {
    const std::pair<int, int> none{-1, -1};
    if (compute_ != dt::f32 || !cpu::LayoutConv::scales_input(cg.p, cg.f)) return none;
    const int xb = G.nodes[n].inputs[0];
    const int m = G.blobs[xb].producer;
    if (m < 0 || kind(m) != OpKind::Mul || !on_cpu(G.nodes[m]) || emit_at[m] != -2 || keep_.count(xb) ||
        rd[xb].size() != 1 || G.nodes[m].inputs.size() != 2 || G.nodes[m].outputs.size() != 1)
      return none;
    const auto& mi = G.nodes[m].inputs;
    const Shape& x = spec(xb).shape;
    for (int k = 0; k < 2; ++k) {
      const int d = mi[k], sc = mi[1 - k];
      if (d != sc && spec(d) == spec(xb) && f32_4d(spec(sc)) && spec(sc).shape == Shape{x[0], x[1], 1, 1})
        return {d, sc};
    }
    return none;
  }

  // A 1x1 convolution and the depthwise convolution that alone reads its
  // output become one node (cpu::LayoutConv::fuses_depthwise): the 1x1's
  // node takes the depthwise one's weight inputs and output and its place
  // in the order. With AVX2 (oneDNN's "dw" post-op on nChw8c): stride 2
  // only, and only where the depthwise output goes on to other
  // convolutions (its blocked format then stays put). Where oneDNN has
  // AVX-512: Jobflow's own kernel (cpu/expand_dw.h), stride 1 or 2,
  // whatever reads the depthwise output.
  void fuse_depthwise() {
    if (compute_ == dt::bf16 ? !cpu::LayoutConv::own_expand_dw_bf16()
                             : !(cpu::own_avx2_kernels() || cpu::LayoutConv::own_expand_dw()))
      return;
    auto rd = readers();
    std::map<int, int> into;  // depthwise node -> the 1x1 node it joins
    std::set<int> used;       // nodes in a pair already (a chain of 1-channel 3x3 convolutions fits both ways)
    for (auto& [a, ga] : groups_) {
      const int y = G.nodes[a].outputs[0];
      if (used.count(a) || keep_.count(y) || rd[y].empty() || rd[y].size() > 2) continue;
      // Two readers: the depthwise convolution and the projection after it
      // adding y as its residual, which the kernel then adds from its kept
      // rows (LayoutConv::adds_expanded; fuse_projection joins it).
      const int b = rd[y].size() == 1 || G.nodes[rd[y][0]].inputs[0] == y ? rd[y][0] : rd[y][1];
      if (rd[y].size() == 2 && !adds_expanded(a, b, rd[y][0] == b ? rd[y][1] : rd[y][0], rd)) continue;
      auto it = groups_.find(b);
      if (it == groups_.end() || b == a || used.count(b) || G.nodes[b].inputs[0] != y) continue;
      const int yb = G.nodes[b].outputs[0];
      if (keep_.count(yb) || rd[yb].empty()) continue;
      bool to_convs = true;
      for (int r : rd[yb]) to_convs &= groups_.count(r) > 0;
      // (Jobflow's own kernel writes channels-last, which the other chain
      // kernels read as well: a squeeze-and-excitation's pool and mul.)
      if (!(to_convs || cpu::LayoutConv::own_expand_dw()) || !cpu::LayoutConv::fuses_depthwise(ga.p, ga.f, it->second.p, it->second.f)) continue;
      if (compute_ == dt::bf16 && !cpu::LayoutConv::expand_dw_bf16_for(ga.p)) continue;
      into[b] = a;
      used.insert(a);
      used.insert(b);
      if (rd[y].size() == 2) expanded_[a] = y;
    }
    for (const auto& [b, a] : into) {
      ConvGroup& ga = groups_[a];
      const ConvGroup& gb = groups_[b];
      ga.f.dw = true;
      ga.f.dw_bias = gb.f.bias;
      ga.f.dw_p = gb.p;
      ga.f.dw_post = gb.f.post;
    }
    join_nodes(into);
  }

  // Whether node a's output y is read by depthwise convolution b and by
  // projection c, which reads b's output alone and adds y as its residual,
  // so that the three can become one node adding y from the kernel's kept
  // rows (cpu::LayoutConv::adds_expanded).
  bool adds_expanded(int a, int b, int c, const std::vector<std::vector<int>>& rd) const {
    const auto ga = groups_.find(a), gb = groups_.find(b), gc = groups_.find(c);
    if (!cpu::LayoutConv::own_expand_dw() || ga == groups_.end() || gb == groups_.end() || gc == groups_.end() ||
        b == c)
      return false;
    const int y = G.nodes[a].outputs[0], yb = G.nodes[b].outputs[0];
    if (G.nodes[c].inputs[0] != yb || keep_.count(yb) || rd[yb].size() != 1 || rd[yb][0] != c ||
        !gc->second.f.residual || gc->second.residual != y || gc->second.f.dw)
      return false;
    if (!cpu::LayoutConv::fuses_depthwise(ga->second.p, ga->second.f, gb->second.p, gb->second.f)) return false;
    cpu::ConvFusion pair = ga->second.f;
    pair.dw = true;
    pair.dw_p = gb->second.p;
    return cpu::LayoutConv::adds_expanded(ga->second.p, pair, gc->second.p, gc->second.f, fixed_threads_);
  }

  // An expansion + depthwise pair on Jobflow's kernel and the 1x1
  // projection that alone reads its output become one node
  // (cpu::LayoutConv::fuses_projection: an inverted residual block of
  // mobilenet_v2 on tall images, its residual add included): the pair's
  // node takes the projection's weight inputs (then its residual, last),
  // output and place in the order. The depthwise output, written and read
  // back by the projection otherwise, stays in the kernel's row buffer.
  void fuse_projection() {
    if (compute_ == dt::bf16 ? !cpu::LayoutConv::own_expand_dw_bf16() : !cpu::LayoutConv::own_expand_dw()) return;
    auto rd = readers();
    std::map<int, int> into;  // projection node -> the pair node it joins
    for (auto& [a, ga] : groups_) {
      if (!ga.f.dw) continue;
      const int y = G.nodes[a].outputs[0];
      if (keep_.count(y) || rd[y].size() != 1) continue;
      const int b = rd[y][0];
      auto it = groups_.find(b);
      if (it == groups_.end() || b == a || it->second.f.dw || G.nodes[b].inputs[0] != y) continue;
      if (it->second.f.residual && it->second.residual == y) continue;  // (adds its own input)
      if (!cpu::LayoutConv::fuses_projection(ga.f, it->second.p, it->second.f, fixed_threads_)) continue;
      into[b] = a;
    }
    for (const auto& [a, y0] : expanded_) {
      bool joined = false;
      for (const auto& [b, to] : into) joined |= to == a && groups_[b].residual == y0;
      // (fuse_depthwise checked what this loop checks: the pair's output
      // goes to the projection alone, which fuses.)
      if (!joined)
        throw std::logic_error("layout: " + G.nodes[a].name + "'s output, added by a projection, is no longer produced");
    }
    for (const auto& [b, a] : into) {
      ConvGroup& ga = groups_[a];
      ConvGroup& gb = groups_[b];
      ga.f.pw = true;
      ga.f.pw_bias = gb.f.bias;
      ga.f.pw_p = gb.p;
      ga.f.pw_post = gb.f.post;
      if (expanded_.count(a)) {  // the residual from the kept rows, not an input
        ga.f.pw_adds_expanded = true;
        G.nodes[b].inputs.pop_back();
        gb.f.residual = false;
        gb.residual = -1;
      }
      ga.f.residual = gb.f.residual;
      ga.residual = gb.residual;
    }
    join_nodes(into);
  }

  // A network's first convolution and the max pool that alone reads its
  // output become one node on Jobflow's kernel (cpu::LayoutConv::
  // fuses_max_pool; ConvFusion::dw_max): resnet's 7x7 stem and its 3x3
  // pool, whose 112x112x64 output then never reaches memory. The
  // convolution's node takes the pool's output and its place in the order.
  void fuse_max_pool() {
    if (compute_ != dt::f32 || !cpu::LayoutConv::own_expand_dw()) return;
    auto rd = readers();
    std::map<int, int> into;
    std::map<int, cpu::Conv2dParams> pools;
    for (auto& [a, ga] : groups_) {
      if (G.nodes[a].outputs.size() != 1) continue;
      const int y = G.nodes[a].outputs[0];
      if (keep_.count(y) || rd[y].size() != 1) continue;
      const int b = rd[y][0];
      const Node& pool = G.nodes[b];
      // (Its second output, the workspace, is a (0,) placeholder in
      // predict plans: nothing may read it.)
      if (kind(b) != OpKind::MaxPool2d || !on_cpu(pool) || groups_.count(b) || pool.inputs.size() != 1 || pool.inputs[0] != y ||
          pool.outputs.empty() || pool.outputs.size() > 2)
        continue;
      if (pool.outputs.size() == 2 &&
          (keep_.count(pool.outputs[1]) || !rd[pool.outputs[1]].empty() || numel(spec(pool.outputs[1]).shape) != 0))
        continue;
      const Shape& x = spec(y).shape;
      const Shape& o = spec(pool.outputs[0]).shape;
      const auto k = pool.op->attr_ints("kernel_shape"), st = pool.op->attr_ints("strides"),
                 pd = pool.op->attr_ints("pads");
      if (k.size() != 2 || st.size() != 2 || pd.size() != 4 || x.size() != 4 || o.size() != 4) continue;
      cpu::Conv2dParams q{x[0], x[1], x[2], x[3], x[1], k[0], k[1], o[2], o[3]};
      q.stride_h = st[0], q.stride_w = st[1];
      q.pad_top = pd[0], q.pad_left = pd[1], q.pad_bottom = pd[2], q.pad_right = pd[3];
      q.groups = x[1];
      if (!cpu::LayoutConv::fuses_max_pool(ga.p, ga.f, q)) continue;
      into[b] = a;
      pools[a] = q;
    }
    for (const auto& [b, a] : into) {
      ConvGroup& ga = groups_[a];
      ga.f.dw = true;
      ga.f.dw_max = true;
      ga.f.dw_p = pools[a];
    }
    join_nodes(into);
    for (const auto& [b, a] : into) G.nodes[a].outputs.resize(1);  // the pool's y, without the workspace
  }

  // A global average pool (reduce_mean over H and W, dims kept) of the
  // depthwise output of a pair on Jobflow's kernel without a projection (a
  // squeeze-and-excitation's squeeze) becomes the pair node's second
  // output, computed while the kernel writes the rows
  // (cpu::ConvFusion::gap): the pool no longer reads the whole tensor back.
  void fuse_gap() {
    if (compute_ == dt::bf16 ? !cpu::LayoutConv::own_expand_dw_bf16() : !cpu::LayoutConv::own_expand_dw()) return;
    auto rd = readers();
    std::set<int> gone;
    for (auto& [a, ga] : groups_) {
      if (!ga.f.dw || ga.f.pw || G.nodes[a].outputs.size() != 1) continue;
      const int y = G.nodes[a].outputs[0];
      for (int r : rd[y]) {
        const Node& pool = G.nodes[r];
        if (capability(r) != Cap::Gap || !pool.op->attr_int("keepdims") || pool.inputs.size() != 1 ||
            pool.inputs[0] != y || pool.outputs.size() != 1)
          continue;
        const int m = pool.outputs[0];
        G.nodes[a].outputs.push_back(m);
        G.blobs[m].producer = a;
        G.blobs[m].out_index = 1;
        ga.f.gap = true;
        gone.insert(r);
        break;
      }
    }
    if (gone.empty()) return;
    std::vector<int> order;
    for (int n : order_)
      if (!gone.count(n)) order.push_back(n);
    order_ = std::move(order);
  }

  // Node b (a convolution reading node a's output, its input 0) joins node
  // a, for each b -> a of `into` (their groups' fusions merged already): a
  // takes b's other inputs after its own, b's output, and b's place in the
  // order (every input is defined by then).
  void join_nodes(const std::map<int, int>& into) {
    for (const auto& [b, a] : into) {
      Node& na = G.nodes[a];
      const Node& nb = G.nodes[b];
      na.inputs.insert(na.inputs.end(), nb.inputs.begin() + 1, nb.inputs.end());
      na.outputs = nb.outputs;
      G.blobs[na.outputs[0]].producer = a;
      G.blobs[na.outputs[0]].out_index = 0;
      groups_.erase(b);
    }
    if (into.empty()) return;
    std::set<int> moved;
    for (const auto& [b, a] : into) moved.insert(a);
    std::vector<int> order;
    for (int n : order_) {
      if (moved.count(n)) continue;
      auto it = into.find(n);
      order.push_back(it == into.end() ? n : it->second);
    }
    order_ = std::move(order);
  }

  // ------------------------------------------------------------ 2. formats

  // Kernels that read and write blocked memory (when one of their inputs is
  // blocked; a convolution always, for its prepared weights).
  enum class Cap { None, Conv, MatMul, Pool, Gap, Eltwise, Binary };
  // A weight-like input: produced by a variable or a constant, or folded
  // while specializing.
  bool is_weight(int b) const {
    const WeightSource w = weight_source(b);
    return w.fixed || w.variable;
  }
  // Where a weight input's value comes from, looking through Identity
  // nodes (torch.onnx.export writes one where two layers share a weight;
  // efficientnet_b0 has 18): fixed (a constant, or folded while
  // specializing), a variable (its entry: prepared once per version), or
  // neither (computed in the graph: prepared at every call).
  struct WeightSource {
    bool fixed = false;
    std::shared_ptr<internal::VariableEntry> variable;
  };
  WeightSource weight_source(int b) const {
    for (;;) {
      if (constants_.count(b)) return {true, nullptr};
      const int p = G.blobs[b].producer;
      if (p < 0) return {};
      const Primitive* op = G.nodes[p].op.get();
      if (op->kind() == OpKind::Identity && G.nodes[p].inputs.size() == 1) {
        b = G.nodes[p].inputs[0];
        continue;
      }
      if (auto* v = dynamic_cast<const internal::VariableOp*>(op)) return {false, v->entry()};
      return {op->kind() == OpKind::Constant, nullptr};
    }
  }
  Cap capability(int n) const {
    const Node& node = G.nodes[n];
    if (groups_.count(n)) return Cap::Conv;
    // Matrix products with weights become oneDNN inner products on weights
    // packed once (cpu::LayoutMatMul): in bf16, and in float32 where oneDNN
    // has AVX-512 and the product has 4 rows or more. In LeNet predict on
    // the 2-core Xeon with AMX, its 3136 -> 512 dense layer (transposed
    // weights) took 0.23-0.29 ms at batch 8 against sgemm's 0.43-0.50,
    // 0.67-0.95 at batch 32 against 1.01-1.14, 1.71-1.76 at batch 100
    // against 2.09-2.30 (docs/performance.md; sgemm on a transposed copy of
    // the weights was no faster in the network); at 1-2 rows both move the
    // weights once and sgemm was the
    // faster (resnet18's 512 -> 1000 at batch 1: 0.18 ms, 0.25). With AVX2
    // only, oneDNN's inner product is that same GEMM.
    if (kind(n) == OpKind::MatMul && on_cpu(node) && node.inputs.size() >= 2) {
      const TensorSpec &a = spec(node.inputs[0]), &w = spec(node.inputs[1]);
      const bool ok = a.dtype == DType::Float32 && w.dtype == DType::Float32 && a.shape.size() == 2 &&
                      w.shape.size() == 2 && !node.op->attr_int("transpose_a") && is_weight(node.inputs[1]) &&
                      (node.inputs.size() == 2 || is_weight(node.inputs[2]));
      const bool here = compute_ == dt::bf16 || (!cpu::avx2_at_most() && ok && a.shape[0] >= 4);
      return ok && here ? Cap::MatMul : Cap::None;
    }
    if (!on_cpu(node) || node.inputs.empty() || !f32_4d(spec(node.inputs[0]))) return Cap::None;
    switch (kind(n)) {
      case OpKind::MaxPool2d:
      case OpKind::AvgPool2d: return node.op->attr_int("workspace") == 0 ? Cap::Pool : Cap::None;
      case OpKind::ReduceMean: {
        const auto axes = node.op->attr_ints("axes");
        std::set<int64_t> a;
        for (int64_t x : axes) a.insert(x < 0 ? x + 4 : x);
        // (Without the dims kept, (N, C): in float32 plans only, lowered
        // where the pool writes those bytes row-major (lower()); a bf16
        // chain's pool would write bfloat16 and need a copy after it, where
        // the convolution before it writes its float32 row-major instead.)
        const bool kept = node.op->attr_int("keepdims") != 0;
        return a == std::set<int64_t>{2, 3} && (kept || compute_ == dt::f32) ? Cap::Gap : Cap::None;
      }
      case OpKind::Relu:
      case OpKind::Sigmoid: return Cap::Eltwise;
      case OpKind::Clip: return Cap::Eltwise;
      case OpKind::Add:
      case OpKind::Mul: {
        if (node.inputs.size() != 2 || !f32_4d(spec(node.inputs[1]))) return Cap::None;
        const Shape& a = spec(node.inputs[0]).shape;
        const Shape& b = spec(node.inputs[1]).shape;
        const Shape& y = spec(node.outputs[0]).shape;
        auto bcast = [&](const Shape& s) { return s[0] == y[0] && s[1] == y[1] && s[2] == 1 && s[3] == 1; };
        if (a == y && (b == y || bcast(b))) return Cap::Binary;
        if (b == y && bcast(a)) return Cap::Binary;
        return Cap::None;
      }
      default: return Cap::None;
    }
  }

  MemDesc desc_of(int b) const {
    return desc_[b] ? *desc_[b] : cpu::plain_desc(spec(b).shape);
  }

  int new_blob(int like, const std::string& suffix) {
    desc_.emplace_back();
    return add_blob_like(G, like, suffix);
  }

  // Appends a reorder node from -> to (blob ids) at the end of `out`;
  // `returned`: to is a return of the job (nothing in the plan reads it).
  void add_reorder(int from, int to, std::vector<int>& out, bool returned = false) {
    append_node(G, std::make_shared<cpu::LayoutReorder>(spec(to), desc_of(from), desc_of(to), returned), from, to,
                out);
  }

  void assign() {
    // The loop below holds `Node&`s while it appends reorder nodes: room
    // for every one of them first (at most two per blob: its plain copy,
    // and the blocked twin of a returned blob), so G.nodes never moves.
    G.nodes.reserve(G.nodes.size() + 2 * G.blobs.size());
    desc_.assign(G.blobs.size(), std::nullopt);
    auto rd = readers();
    std::map<int, size_t> pos;  // node -> its place in the order
    for (size_t i = 0; i < order_.size(); ++i) pos[order_[i]] = i;
    // Per logical blob: the id holding its blocked form (-1: none) and its
    // plain form (-1: not made yet).
    std::vector<int> blocked(G.blobs.size(), -1), plain(G.blobs.size());
    for (size_t b = 0; b < plain.size(); ++b) plain[b] = static_cast<int>(b);
    // (A convolution reads its input scale plain: not a blocked reader of it.)
    auto wants_blocked = [&](int b) {
      for (int r : rd[b]) {
        if (capability(r) == Cap::None) continue;
        auto g = groups_.find(r);
        const auto& in = G.nodes[r].inputs;
        if (g != groups_.end() && g->second.f.in_scale && in[0] != b &&
            in[in.size() - 1 - (g->second.f.residual ? 1 : 0)] == b)
          continue;
        return true;
      }
      return false;
    };
    std::vector<int> out;
    auto plain_of = [&](int b) {
      if (plain[b] < 0) {
        const int p = new_blob(b, "/plain");
        blocked.push_back(-1);
        plain.push_back(p);
        add_reorder(blocked[b], p, out);
        plain[b] = p;
      }
      return plain[b];
    };
    auto src_of = [&](int b) { return blocked[b] >= 0 ? blocked[b] : b; };
    // Node n may write over blob b: nothing returns b and every other
    // reader of b runs before n.
    auto reads_last = [&](int b, int n) {
      if (b >= static_cast<int>(rd.size()) || keep_.count(b)) return false;
      for (int q : rd[b])
        if (q != n && pos.at(q) > pos.at(n)) return false;
      return true;
    };
    // A lowered node's output 0 is blocked: a return gets its plain copy at once.
    auto produced_blocked = [&](int n, const MemDesc& md) {
      const int y = G.nodes[n].outputs[0];
      if (keep_.count(y)) {
        const int nb = new_blob(y, "/blocked");
        blocked.push_back(-1);
        plain.push_back(-1);
        G.nodes[n].outputs[0] = nb;
        G.blobs[nb].producer = n;
        desc_[nb] = md;
        out.push_back(n);
        add_reorder(nb, y, out, true);
        blocked[y] = nb;
        plain[y] = y;
      } else {
        desc_[y] = md;
        blocked[y] = y;
        plain[y] = -1;
        out.push_back(n);
      }
    };
    for (int n : order_) {
      Node& node = G.nodes[n];
      const Cap cap = capability(n);
      if (cap == Cap::Conv) {
        ConvGroup& cg = groups_[n];
        const int x = src_of(node.inputs[0]);
        node.inputs[0] = x;
        std::optional<MemDesc> res;
        if (cg.f.residual) {
          const int r = src_of(node.inputs.back());
          node.inputs.back() = r;
          res = desc_of(r);
        }
        const int y = node.outputs[0];
        // Row-major straight from the convolution where nothing in the
        // chain reads y, except a large float32 output of more than one
        // pixel per image with element-wise steps or a residual after the
        // sums: on row-major memory oneDNN
        // 2.6 runs its gemm convolution, which applies those in a scalar
        // loop (a returned 16 -> 256 1x1 with relu at 160x160: 9.0 ms
        // against 2.3 in the chain's format + 2.0 for the transposition;
        // without the relu the gemm's 3.2 ms won). bf16 plans' returns
        // stay float32 from the convolution.
        const cpu::Conv2dParams& last = cg.f.pw ? cg.f.pw_p : cg.f.dw ? cg.f.dw_p : cg.p;
        const bool steps_after = !cg.f.post.empty() || cg.f.residual || cg.f.dw;
        const bool plain_dst = !wants_blocked(y) && (compute_ != dt::f32 || !steps_after || last.OH * last.OW == 1 ||
                                                     last.N * last.K * last.OH * last.OW <= (int64_t{1} << 14));
        std::vector<std::shared_ptr<internal::VariableEntry>> sources(node.inputs.size());
        bool refresh = false;
        const size_t weights_end = node.inputs.size() - (cg.f.residual ? 1 : 0) - (cg.f.in_scale ? 1 : 0);
        if (cg.f.in_scale) {  // the scale, read as plain float32
          int& b = node.inputs[weights_end];
          if (blocked[b] >= 0 && plain[b] != b) b = plain_of(b);
        }
        for (size_t k = 1; k < weights_end; ++k) {
          WeightSource w = weight_source(node.inputs[k]);
          sources[k] = std::move(w.variable);
          refresh |= !w.fixed && !sources[k];
        }
        std::shared_ptr<cpu::LayoutConv> op;
        try {
          op = std::make_shared<cpu::LayoutConv>(cg.orig, spec(y), cg.p, cg.f, desc_of(x), res ? &*res : nullptr,
                                                 plain_dst, compute_, sources, refresh, fixed_threads_);
        } catch (const dnnl::error& e) {
          throw Error("[compile] job '" + opts_.job_name + "': node '" + node.name +
                      "': oneDNN has no convolution for " + cg.orig->attrs() +
                      (cg.f.text().empty() ? "" : " fused with " + cg.f.text()) + ": " + e.what());
        } catch (const std::invalid_argument& e) {  // a Jobflow kernel refusing what the pass gave it: a pass bug
          throw Error("[compile] job '" + opts_.job_name + "': node '" + node.name + "': " + cg.orig->attrs() +
                      (cg.f.text().empty() ? "" : " fused with " + cg.f.text()) + ": " + e.what());
        }
        // The residual's buffer becomes the destination when this is its
        // last reader (a residual block's input is read by the block's
        // first convolution, then by the add): oneDNN's sum post-op then
        // adds into it, with no copy of the residual first.
        if (cg.f.residual && !cg.f.pw) {  // (Jobflow's kernel reads the residual while bands of y are written)
          const int r = node.inputs.back();
          if (reads_last(r, n) && desc_[r] && blocked[r] == r && *desc_[r] == op->dst_desc() &&
              std::count(node.inputs.begin(), node.inputs.end(), r) == 1)
            op->set_in_place(op->residual_input());
        }
        node.op = op;
        // The channel means (N, E, 1, 1): channels-last as the pool wrote
        // them (the same bytes as row-major), row-major when returned.
        if (cg.f.gap && !keep_.count(node.outputs[1])) {
          const int g = node.outputs[1];
          const Shape& gs = spec(g).shape;
          desc_[g] = MemDesc(dnnl::memory::dims(gs.begin(), gs.end()), dt::f32, dnnl::memory::format_tag::acdb);
          blocked[g] = g;
          plain[g] = -1;
        }
        if (cpu::is_plain_f32(op->dst_desc())) out.push_back(n);
        else produced_blocked(n, op->dst_desc());
        continue;
      }
      if (cap == Cap::MatMul) {
        const Primitive& mm = *node.op;
        const Shape& a = spec(node.inputs[0]).shape;
        const Shape& w = spec(node.inputs[1]).shape;
        const bool tb = mm.attr_int("transpose_b") != 0;
        std::vector<std::shared_ptr<internal::VariableEntry>> sources(node.inputs.size());
        for (size_t k = 1; k < node.inputs.size(); ++k) sources[k] = weight_source(node.inputs[k]).variable;
        for (int& b : node.inputs)
          if (blocked[b] >= 0 && plain[b] != b) b = plain_of(b);
        try {
          node.op = std::make_shared<cpu::LayoutMatMul>(node.op, spec(node.outputs[0]), a[0], a[1], tb ? w[0] : w[1],
                                                        tb, mm.attr_int("bias") != 0, mm.attr_int("relu") != 0,
                                                        compute_, sources, false, fixed_threads_);
        } catch (const dnnl::error&) {  // runs as written
        }
        out.push_back(n);
        continue;
      }
      bool any_blocked = false;
      for (int b : node.inputs) any_blocked |= blocked[b] >= 0 && plain[b] != b;
      std::shared_ptr<cpu::LayoutOp> op;
      if (cap != Cap::None && any_blocked) op = lower(n, cap, blocked);
      if (op) {
        for (int& b : node.inputs) b = src_of(b);
        node.op = op;
        // In place when the (full-size) input is a blocked blob of the
        // chain that nothing returns and this node reads last (a
        // squeeze-and-excitation's mul: the global pool read it before).
        const int k = cap == Cap::Binary ? std::static_pointer_cast<cpu::LayoutBinary>(op)->first() : 0;
        const int x = node.inputs[k];
        const int orig_x = G.blobs[x].producer >= 0 ? x : -1;
        if ((cap == Cap::Eltwise || cap == Cap::Binary) && orig_x >= 0 && desc_[x] && blocked[x] == x && reads_last(x, n) &&
            *desc_[x] == op->dst_desc() && std::count(node.inputs.begin(), node.inputs.end(), x) == 1)
          op->set_in_place(k);
        // A global pool without the dims kept writes its (N, C) output
        // row-major (lower() made sure): no blocked form of it.
        if (cap == Cap::Gap && spec(node.outputs[0]).shape.size() == 2) out.push_back(n);
        else produced_blocked(n, op->dst_desc());
        continue;
      }
      for (int& b : node.inputs)
        if (blocked[b] >= 0 && plain[b] != b) b = plain_of(b);
      out.push_back(n);
    }
    order_ = std::move(out);
  }

  // A LayoutOp for node n reading its inputs' current forms; null when
  // oneDNN has no such kernel (the node then runs as written, on plain
  // copies).
  std::shared_ptr<cpu::LayoutOp> lower(int n, Cap cap, const std::vector<int>& blocked) {
    const Node& node = G.nodes[n];
    auto md = [&](int b) { return desc_of(blocked[b] >= 0 ? blocked[b] : b); };
    const Primitive& op = *node.op;
    std::vector<TensorSpec> outs;
    for (int b : node.outputs) outs.push_back(spec(b));
    try {
      switch (cap) {
        case Cap::Pool: {
          const Shape& x = spec(node.inputs[0]).shape;
          const Shape& y = outs[0].shape;
          const auto k = op.attr_ints("kernel_shape"), s = op.attr_ints("strides"), p = op.attr_ints("pads");
          cpu::Pool2dParams pp{x[0], x[1], x[2], x[3], y[2], y[3], k[0], k[1], s[0], s[1], p[0], p[1], p[2], p[3],
                               kind(n) == OpKind::MaxPool2d ? cpu::PoolKind::Max : cpu::PoolKind::AvgExcludePad};
          // (Max pooling of a format without Jobflow's loop: as written.)
          if (!cpu::LayoutPool::supports(pp, md(node.inputs[0]))) return nullptr;
          return std::make_shared<cpu::LayoutPool>(node.op, outs, pp, md(node.inputs[0]));
        }
        case Cap::Gap: {
          const Shape& x = spec(node.inputs[0]).shape;
          cpu::Pool2dParams pp{x[0], x[1], x[2], x[3], 1, 1, x[2], x[3], 1, 1, 0, 0, 0, 0,
                               cpu::PoolKind::AvgExcludePad};
          auto pool = std::make_shared<cpu::LayoutPool>(node.op, outs, pp, md(node.inputs[0]));
          // Without the dims kept ((N, C): x.mean((2, 3)) in PyTorch), only
          // a pool whose output has row-major (N, C)'s bytes; otherwise the
          // node runs as written, on a plain copy of x.
          if (outs[0].shape.size() == 2 && !cpu::rows_of_channels(pool->dst_desc())) return nullptr;
          return pool;
        }
        case Cap::Eltwise: {
          cpu::EltwiseStep e{alg::eltwise_relu};
          if (kind(n) == OpKind::Sigmoid) e = {alg::eltwise_logistic};
          if (kind(n) == OpKind::Clip)
            e = {alg::eltwise_clip, static_cast<float>(op.attr_double("min")), static_cast<float>(op.attr_double("max"))};
          return std::make_shared<cpu::LayoutEltwise>(node.op, outs[0], e, md(node.inputs[0]));
        }
        case Cap::Binary: {
          const int first = spec(node.inputs[0]).shape == outs[0].shape ? 0 : 1;
          const alg a = kind(n) == OpKind::Add ? alg::binary_add : alg::binary_mul;
          return std::make_shared<cpu::LayoutBinary>(node.op, outs[0], a, first, md(node.inputs[first]),
                                                     md(node.inputs[1 - first]));
        }
        default: return nullptr;
      }
    } catch (const dnnl::error&) {
      return nullptr;
    }
  }
};

}  // namespace

int add_blob_like(Graph& g, int like, const std::string& suffix) {
  BlobDesc d;
  d.spec = g.blobs[like].spec;
  d.name = g.blobs[like].name + suffix;
  g.blobs.push_back(d);
  return static_cast<int>(g.blobs.size()) - 1;
}

void append_node(Graph& g, std::shared_ptr<Primitive> op, int from, int to, std::vector<int>& order) {
  Node r;
  r.name = g.blobs[to].name + "/" + op->name();
  r.op = std::move(op);
  r.inputs = {from};
  r.outputs = {to};  // default placement: the CPU
  g.nodes.push_back(std::move(r));
  const int id = static_cast<int>(g.nodes.size()) - 1;
  g.blobs[to].producer = id;
  g.blobs[to].out_index = 0;
  order.push_back(id);
}

void layouts(PlanBuild& b) {
  b.layout_bytes.assign(b.graph->blobs.size(), 0);
  if (!b.opts.fusion) return;
  if (b.opts.type == JobType::Train) {
    train_layouts(b);
    // Blocked blobs there have whole blocks of channels: plain sizes.
    b.layout_bytes.assign(b.graph->blobs.size(), 0);
    return;
  }
  if (b.opts.type != JobType::Predict) return;
  // oneDNN picks formats (and kernels) for the creating thread's OpenMP
  // count: choose them for the job's count when it is fixed, else for one
  // thread. A kernel run with a count for which oneDNN has only its
  // reference implementation of those formats runs with the count they
  // were chosen for (cpu/layout_ops.h, PerThreadCount): with one, that
  // never makes a team whose partner a busy machine keeps away. (Inner
  // products, cpu::LayoutMatMul, and oneDNN's Winograd convolutions choose
  // theirs at their own fixed count, Pass::fixed_threads_.)
  cpu::ScopedThreads at(b.opts.threads > 0 ? b.opts.threads : 1);
  Pass(b).run(b.layout_bytes);
}

}  // namespace jobflow::compiler

// compiler/train_layout.cpp — memory formats of train plans on the CPU
// (see passes.h, train_layouts).
//
// A train plan's convolutions run oneDNN's direct kernels on nChw16c
// (channels in blocks of 16, innermost). With every activation in plain
// NCHW each convolution pass reorders its inputs into blocks and its output
// back: LeNet's step paid 8 reorders, about 3 ms of 21 (Xeon, 2 cores).
// This pass keeps the activations between convolutions and 2x2 max
// poolings (forward and gradient) in nChw16c, so the primitives read and
// write them directly; a reorder node remains only where a blocked blob
// meets an op that reads plain memory (a flatten before a dense layer) or
// a plain blob must enter a blocked pooling gradient.
#include <oneapi/dnnl/dnnl.hpp>

#include <set>

#include "compiler/passes.h"
#include "cpu/layout_ops.h"

namespace jobflow::compiler {
namespace {

using cpu::MemDesc;

bool blockable(const TensorSpec& s) {
  return s.dtype == DType::Float32 && s.shape.size() == 4 && is_static(s.shape) && s.shape[1] > 0 &&
         s.shape[1] % 16 == 0;
}

MemDesc blocked_desc(const Shape& s) {
  return MemDesc(dnnl::memory::dims(s.begin(), s.end()), dnnl::memory::data_type::f32,
                 dnnl::memory::format_tag::nChw16c);
}

class TrainPass {
 public:
  explicit TrainPass(PlanBuild& b) : G(*b.graph), order_(b.order), keep_(b.outputs.begin(), b.outputs.end()) {}

  void run() {
    readers_.assign(G.blobs.size(), {});
    for (int n : order_)
      for (int x : G.nodes[n].inputs)
        if (readers_[x].empty() || readers_[x].back() != n) readers_[x].push_back(n);
    choose_pools();
    // The blobs kept blocked depend on which poolings are blocked, and a
    // pooling stays blocked only when its input is: to a fixed point.
    for (;;) {
      decide_blobs();
      bool changed = false;
      for (int n : order_)
        if (pool_[n] == 1 && kind(n) == OpKind::MaxPool2d && !blocked_[G.nodes[n].inputs[0]]) {
          unblock_pool(n);
          changed = true;
        }
      if (!changed) break;
    }
    rewrite();
  }

 private:
  Graph& G;
  std::vector<int>& order_;
  std::set<int> keep_;
  std::vector<std::vector<int>> readers_;
  std::vector<char> pool_;     // per node: 1 = a blocked pooling or pooling gradient
  std::vector<char> blocked_;  // per blob: kept in nChw16c

  OpKind kind(int n) const { return G.nodes[n].op->kind(); }
  const TensorSpec& spec(int b) const { return G.blobs[b].spec; }
  bool on_cpu(int n) const { return G.nodes[n].placement.device == "cpu"; }

  bool is_conv(int n) const {
    const OpKind k = kind(n);
    return on_cpu(n) && (k == OpKind::Conv2d || k == OpKind::Conv2dBackwardData || k == OpKind::Conv2dBackwardWeights);
  }
  // Input k of node n is a convolution's activation (x, dy), which its
  // kernel takes in either format.
  bool conv_activation(int n, size_t k) const {
    if (!is_conv(n)) return false;
    switch (kind(n)) {
      case OpKind::Conv2d: return k == 0;
      case OpKind::Conv2dBackwardData: return k == 1;
      default: return k == 0 || k == 1;
    }
  }
  // Input k of node n must be blocked (a blocked pooling's x, a blocked
  // gradient's dy and mask).
  bool needs_blocked(int n, size_t k) const {
    if (!pool_[n]) return false;
    return kind(n) == OpKind::MaxPool2d ? k == 0 : k != 1;
  }

  std::vector<bool> in_flags(int n) const {
    std::vector<bool> f;
    for (size_t k = 0; k < G.nodes[n].inputs.size(); ++k)
      f.push_back(needs_blocked(n, k) || (conv_activation(n, k) && blocked_[G.nodes[n].inputs[k]]));
    return f;
  }
  std::vector<bool> out_flags(int n) const {
    std::vector<bool> f;
    for (int y : G.nodes[n].outputs) f.push_back(blocked_[y] != 0);
    return f;
  }

  // 2x2/2 max poolings of a convolution's output (with a workspace: train)
  // whose every gradient can follow them into nChw16c.
  void choose_pools() {
    pool_.assign(G.nodes.size(), 0);
    for (int n : order_) {
      const Node& node = G.nodes[n];
      if (kind(n) != OpKind::MaxPool2d || !on_cpu(n) || node.outputs.size() != 2) continue;
      const int x = node.inputs[0], y = node.outputs[0], ws = node.outputs[1];
      if (!blockable(spec(x)) || keep_.count(y) || keep_.count(ws) || node.op->attr_int("workspace") == 0) continue;
      const int p = G.blobs[x].producer;
      if (p < 0 || kind(p) != OpKind::Conv2d || !on_cpu(p)) continue;
      if (!node.op->with_blocked({true}, {true, false})) continue;
      bool grads_ok = true;
      std::vector<int> grads;
      for (int r : readers_[ws]) {
        const Node& g = G.nodes[r];
        const std::vector<bool> in = {true, false, true};
        grads_ok &= kind(r) == OpKind::MaxPool2dGrad && on_cpu(r) && g.inputs.size() >= 2 && g.inputs[1] == ws &&
                    !keep_.count(g.outputs[0]) &&
                    g.op->with_blocked(std::vector<bool>(in.begin(), in.begin() + g.inputs.size()), {true});
        grads.push_back(r);
      }
      if (!grads_ok) continue;
      pool_[n] = 1;
      for (int r : grads) pool_[r] = 1;
    }
  }

  void unblock_pool(int n) {
    pool_[n] = 0;
    for (int r : readers_[G.nodes[n].outputs[1]]) pool_[r] = 0;
  }

  // A blob is blocked when its producer writes it so: a blocked pooling
  // (y) or gradient (dx) always; a convolution's y or dx when every reader
  // takes it blocked, so no reorder is added for it.
  void decide_blobs() {
    blocked_.assign(G.blobs.size(), 0);
    for (int n : order_) {
      const Node& node = G.nodes[n];
      if (pool_[n]) {
        blocked_[node.outputs[0]] = 1;
        continue;
      }
      const OpKind k = kind(n);
      if (!is_conv(n) || k == OpKind::Conv2dBackwardWeights) continue;
      const int y = node.outputs[0];
      if (!blockable(spec(y)) || keep_.count(y) || readers_[y].empty()) continue;
      bool all = true;
      for (int r : readers_[y]) {
        const Node& rn = G.nodes[r];
        for (size_t i = 0; i < rn.inputs.size(); ++i)
          if (rn.inputs[i] == y) all &= conv_activation(r, i) || needs_blocked(r, i);
      }
      if (all) blocked_[y] = 1;
    }
  }

  int new_blob(int like, const std::string& suffix) {
    blocked_.push_back(0);
    return add_blob_like(G, like, suffix);
  }

  // A reorder node from -> to, appended to `out`.
  void add_reorder(int from, int to, bool to_blocked, std::vector<int>& out) {
    const Shape& s = spec(from).shape;
    const MemDesc plain = cpu::plain_desc(s), blocked = blocked_desc(s);
    append_node(G, std::make_shared<cpu::LayoutReorder>(spec(to), to_blocked ? plain : blocked, to_blocked ? blocked : plain),
                from, to, out);
  }

  void rewrite() {
    std::vector<int> out;
    std::vector<int> other(G.blobs.size(), -1);  // per blob: its copy in the other format, once made
    for (int n : order_) {
      for (size_t k = 0; k < G.nodes[n].inputs.size(); ++k) {
        const int b = G.nodes[n].inputs[k];
        const bool want = needs_blocked(n, k) || (conv_activation(n, k) && blocked_[b]);
        if (want == (blocked_[b] != 0)) continue;
        if (other[b] < 0) {
          const int c = new_blob(b, want ? "/blocked" : "/plain");
          other.push_back(-1);
          blocked_[c] = want;
          add_reorder(b, c, want, out);
          other[b] = c;
        }
        G.nodes[n].inputs[k] = other[b];
      }
      Node& node = G.nodes[n];
      const std::vector<bool> in = in_flags(n), outs = out_flags(n);
      bool any = false;
      for (bool f : in) any |= f;
      for (bool f : outs) any |= f;
      if (any) {
        auto op = node.op->with_blocked(in, outs);
        if (!op)
          throw Error("[compile] node '" + node.name + "' (" + node.op->name() +
                      "): internal error: the train layout pass chose nChw16c formats its op cannot take");
        node.op = op;
      }
      out.push_back(n);
    }
    order_ = std::move(out);
  }
};

}  // namespace

void train_layouts(PlanBuild& b) { TrainPass(b).run(); }

}  // namespace jobflow::compiler

// onnx_node: an ONNX node whose shape-giving inputs are computed when the
// job runs (Slice's starts and ends from the proposals of a detector, Pad's
// pads, Tile's repeats, an axes input), imported again for each call's
// values.
//
// A row that reads some inputs' values at load (ImportRow::value_inputs)
// cannot build its engine ops while those values are unknown. The node then
// becomes one onnx_node op holding a copy of the NodeProto and the row. Its
// output shapes depend on values (Primitive::output_shape_from_data), so
// the compiler either knows them while specializing a plan (shape
// arithmetic that folds for the call's shapes) or cuts the call there
// (docs/architecture.md, segments; also where the expansion's own output
// sizes depend on data). Either way, with the values in hand the
// op runs the row on a scratch graph, with the value inputs as constants and
// the others as placeholders of the call's shapes: the same engine ops a
// load with those constants would have built. That expansion is kept for
// the next call with the same values and shapes, and run node by node with
// the engine's kernels. No gradient; the export writes the node back as it
// was read.
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <set>

#include "jobflow/job.h"
#include "onnx/exporter.h"
#include "onnx/importer.h"
#include "ops_internal.h"
#include "state_ops.h"

namespace jobflow::onnx {
namespace {

// A scratch graph that computes the node for one combination of values and
// shapes.
struct Expansion {
  Graph graph;
  std::vector<int> input_blob;      // op input -> its placeholder blob (-1: a value input)
  std::vector<int> output_blob;     // node output -> blob of the graph (-1: a constant)
  std::vector<Tensor> output_const;  // node output -> the constant the row made
  std::vector<TensorSpec> specs;    // the outputs' specs
};

class OnnxNodeOp final : public Primitive {
 public:
  OnnxNodeOp(const NodeProto& node, int64_t opset, const LoadOptions& opts, std::string file, std::string base_dir,
             ImportFn row, std::map<int, Tensor> consts, std::vector<int> fed, std::set<int> values,
             std::vector<TensorSpec> specs)
      : node_(node), opset_(opset), opts_(opts), file_(std::move(file)), base_dir_(std::move(base_dir)), row_(row),
        consts_(std::move(consts)), fed_(std::move(fed)), values_(std::move(values)), specs_(std::move(specs)) {}

  OpKind kind() const override { return OpKind::OnnxNode; }
  Attrs attributes() const override { return {{"op_type", node_.op_type()}, {"node", node_.name()}}; }
  bool differentiable_input(int) const override { return false; }
  bool output_shape_from_data() const override { return true; }
  bool shape_reads_value(int i) const override { return values_.count(fed_.at(static_cast<size_t>(i))) > 0; }
  // The expansion may hold ops sized by data (a Resize whose roi and sizes
  // are both computed): then only its run sizes the outputs (a cut).
  bool sizes_outputs() const override { return true; }
  std::vector<Tensor> eval_sized(const std::vector<Tensor>& in, ExecContext& ctx) const override {
    std::vector<TensorSpec> specs;
    for (const Tensor& t : in) specs.push_back({t.shape(), t.dtype()});
    return run(*expansion(specs, in), in, ctx);
  }

  std::vector<TensorSpec> infer(const std::vector<TensorSpec>& in) const override {
    if (in.size() != fed_.size())
      op_error("onnx_node", node_.op_type() + " node '" + node_.name() + "' takes " + std::to_string(fed_.size()) +
                                " tensors computed in the graph, got " + std::to_string(in.size()));
    return specs_;
  }
  std::vector<TensorSpec> infer_data(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const override {
    infer(in);
    return expansion(in, v)->specs;
  }
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override {
    const std::vector<Tensor> res = eval_sized(in, ctx);
    for (size_t k = 0; k < out.size(); ++k) {
      if (res[k].shape() != out[k].shape() || res[k].dtype() != out[k].dtype())
        op_error("onnx_node", node_.op_type() + " node '" + node_.name() + "': output " + std::to_string(k) + " is " +
                                  spec_str({res[k].shape(), res[k].dtype()}) + ", " +
                                  spec_str({out[k].shape(), out[k].dtype()}) + " was expected");
      if (res[k].nbytes() > 0 && res[k].raw() != out[k].raw())
        std::memcpy(out[k].raw(), res[k].raw(), res[k].nbytes());
    }
  }
  std::vector<Blob> vjp(const std::vector<Blob>&, const std::vector<Blob>&, const std::vector<Blob>&,
                        const std::vector<int>& argnums) const override {
    return std::vector<Blob>(argnums.size());
  }

  const NodeProto& node() const { return node_; }
  const std::map<int, Tensor>& consts() const { return consts_; }
  const std::vector<int>& fed() const { return fed_; }

 private:
  // The expansion for these input specs and the values of the value inputs
  // (`v[i]` defined for those), from the cache or built now.
  std::shared_ptr<const Expansion> expansion(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const {
    std::string key;
    for (size_t i = 0; i < in.size(); ++i) {
      key += dtype_name(in[i].dtype);
      key += shape_str(in[i].shape);
      if (shape_reads_value(static_cast<int>(i))) {
        const Tensor& t = v.at(i);
        if (!t.defined()) op_error("onnx_node", "internal: the value of input " + std::to_string(i) + " is missing");
        key += '=';
        key.append(static_cast<const char*>(t.raw()), t.nbytes());
      }
      key += ';';
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto it = cache_.begin(); it != cache_.end(); ++it)
        if (it->first == key) {
          cache_.splice(cache_.begin(), cache_, it);
          return cache_.front().second;
        }
    }
    std::shared_ptr<const Expansion> e = build(in, v);
    std::lock_guard<std::mutex> lk(mu_);
    cache_.emplace_front(key, e);
    if (cache_.size() > kCached) cache_.pop_back();
    return e;
  }

  std::shared_ptr<const Expansion> build(const std::vector<TensorSpec>& in, const std::vector<Tensor>& v) const {
    auto e = std::make_shared<Expansion>();
    ::onnx::ModelProto none;
    Importer S(file_, opts_, none, base_dir_);
    S.opset = opset_;
    for (const auto& [i, t] : consts_) S.values[node_.input(i)].konst = t;
    {
      detail::GraphScope scope(&e->graph);
      for (size_t i = 0; i < fed_.size(); ++i) {
        Value& val = S.values[node_.input(fed_[i])];
        if (shape_reads_value(static_cast<int>(i))) {
          val.konst = v[i];
          e->input_blob.push_back(-1);
        } else {
          val.blob = internal::add_node(std::make_shared<internal::PlaceholderOp>(static_cast<int>(i), in[i],
                                                                                  node_.input(fed_[i])),
                                        {}, node_.input(fed_[i]))[0];
          e->input_blob.push_back(val.blob.id());
        }
      }
      S.node = &node_;
      S.node_index = 0;
      row_(S);
    }
    for (int k = 0; k < node_.output_size(); ++k) {
      const std::string& name = node_.output(k);
      auto it = name.empty() ? S.values.end() : S.values.find(name);
      if (it == S.values.end()) {  // an output not asked for
        e->output_blob.push_back(-1);
        e->output_const.emplace_back();
        e->specs.push_back(specs_.at(static_cast<size_t>(k)));
        continue;
      }
      const Value& val = it->second;
      if (val.blob.defined()) {
        e->output_blob.push_back(val.blob.id());
        e->output_const.emplace_back();
        e->specs.push_back(val.blob.spec());
      } else {
        e->output_blob.push_back(-1);
        e->output_const.push_back(val.konst);
        e->specs.push_back({val.konst.shape(), val.konst.dtype()});
      }
    }
    for (size_t k = 0; k < e->specs.size(); ++k) {
      const TensorSpec& s = e->specs[k];
      if (k < specs_.size() && !specs_agree(s, specs_[k]))
        op_error("onnx_node", node_.op_type() + " node '" + node_.name() + "': output " + std::to_string(k) +
                                  " is " + spec_str(s) + " for these values, but the job was defined with " +
                                  spec_str(specs_[k]));
    }
    return e;
  }

  // The expansion's graph run on the op's inputs.
  std::vector<Tensor> run(const Expansion& e, const std::vector<Tensor>& in, ExecContext& ctx) const {
    const Graph& g = e.graph;
    std::vector<Tensor> vals(g.blobs.size());
    for (size_t i = 0; i < in.size(); ++i)
      if (e.input_blob[i] >= 0) vals[static_cast<size_t>(e.input_blob[i])] = in[i];
    for (const Node& n : g.nodes) {
      if (n.op->kind() == OpKind::Placeholder) continue;
      std::vector<Tensor> ins, outs;
      std::vector<TensorSpec> specs;
      for (int b : n.inputs) {
        ins.push_back(vals[static_cast<size_t>(b)]);
        specs.push_back({ins.back().shape(), ins.back().dtype()});
      }
      if (n.op->sizes_outputs()) {
        outs = n.op->eval_sized(ins, ctx);
      } else {
        std::vector<TensorSpec> os;
        for (int b : n.outputs) os.push_back(g.blobs[static_cast<size_t>(b)].spec);
        if (n.op->output_shape_from_data()) os = n.op->infer_data(specs, ins);
        for (const TensorSpec& s : os) outs.emplace_back(s.shape, s.dtype);
        n.op->eval_cpu(ins, outs, ctx);
      }
      for (size_t k = 0; k < outs.size(); ++k) vals[static_cast<size_t>(n.outputs[k])] = outs[k];
    }
    std::vector<Tensor> r;
    for (size_t k = 0; k < e.output_blob.size(); ++k) {
      if (e.output_blob[k] >= 0) r.push_back(vals[static_cast<size_t>(e.output_blob[k])]);
      else if (e.output_const[k].defined()) r.push_back(e.output_const[k]);
      else r.emplace_back(e.specs[k].shape, e.specs[k].dtype);  // not asked for
    }
    return r;
  }

  static constexpr size_t kCached = 8;
  NodeProto node_;
  int64_t opset_;
  LoadOptions opts_;
  std::string file_, base_dir_;
  ImportFn row_;
  std::map<int, Tensor> consts_;  // node input -> its value, known at load
  std::vector<int> fed_;          // op input -> node input (computed in the graph)
  std::set<int> values_;          // node inputs whose values the row reads
  std::vector<TensorSpec> specs_;  // the outputs at definition
  mutable std::mutex mu_;
  mutable std::list<std::pair<std::string, std::shared_ptr<const Expansion>>> cache_;  // most recent first
};

// onnx_node -> the node as it was read: its attributes, its inputs (the
// values known at load as constants).
void export_onnx_node(Exporter& E) {
  auto* op = dynamic_cast<const OnnxNodeOp*>(&E.op());
  if (!op) E.no_form("not an imported ONNX node");
  const NodeProto& src = op->node();
  std::vector<std::string> ins(static_cast<size_t>(src.input_size()));
  for (size_t k = 0; k < op->fed().size(); ++k) ins[static_cast<size_t>(op->fed()[k])] = E.in(static_cast<int>(k));
  for (const auto& [i, t] : op->consts()) ins[static_cast<size_t>(i)] = E.constant(E.name() + "/" + src.input(i), t);
  std::vector<std::string> outs;
  for (size_t k = 0; k < E.num_outputs(); ++k) outs.push_back(E.out(static_cast<int>(k)));
  NodeProto* n = E.add(src.op_type(), ins, outs, E.name());
  if (!src.domain().empty()) n->set_domain(src.domain());
  *n->mutable_attribute() = src.attribute();
}

}  // namespace

TensorSpec dynamic_spec(size_t rank, DType dt) { return {Shape(rank, kDynamic), dt}; }

int64_t static_length(Importer& I, int i) {
  const Shape s = I.shape(i);
  if (s.size() > 1) I.err("input '" + I.iname(i) + "' must be 1-D, got " + shape_str(s));
  const int64_t n = s.empty() ? 1 : s[0];
  if (n < 0) I.unsupported(I.node->op_type() + "(input " + std::to_string(i) + " of a length known per call)");
  return n;
}

std::vector<TensorSpec> input_spec(Importer& I) { return {I.spec(0)}; }

std::vector<TensorSpec> input_rank(Importer& I) {
  const TensorSpec x = I.spec(0);
  return {dynamic_spec(x.shape.size(), x.dtype)};
}

bool defer_node(Importer& I, const ImportRow& row) {
  if (row.value_inputs.empty()) return false;
  bool runtime = false;
  for (int i : row.value_inputs) runtime = runtime || (I.has(i) && !I.value(I.iname(i)).pure_const());
  if (!runtime) return false;
  if (!row.deferred_specs) I.unsupported(I.node->op_type() + "(values computed at run time)");
  std::vector<TensorSpec> specs = row.deferred_specs(I);
  if (specs.size() != static_cast<size_t>(I.node->output_size()))
    I.err("internal: the deferred form gives " + std::to_string(specs.size()) + " outputs");
  std::map<int, Tensor> consts;
  std::vector<int> fed;
  std::vector<Blob> blobs;
  for (int i = 0; i < I.nin(); ++i) {
    if (!I.has(i)) continue;
    Value& v = I.value(I.iname(i));
    if (v.pure_const()) {
      consts[i] = v.konst;
    } else {
      fed.push_back(i);
      blobs.push_back(I.in(i));
    }
  }
  std::set<int> values(row.value_inputs.begin(), row.value_inputs.end());
  std::vector<Blob> outs = internal::add_node(
      std::make_shared<OnnxNodeOp>(*I.node, I.opset, I.opts_, I.file_, I.base_dir_, row.fn, std::move(consts),
                                   std::move(fed), std::move(values), std::move(specs)),
      blobs);
  for (int k = 0; k < I.node->output_size(); ++k) I.out(k, outs[static_cast<size_t>(k)]);
  return true;
}

void deferred_onnx_rows(OpRows& r) { r.export_op(OpKind::OnnxNode, export_onnx_node); }

}  // namespace jobflow::onnx

// ONNX rows of the sequence and optional ops (ops/sequence.cpp)
// (registry.h): SequenceConstruct, SequenceEmpty, SequenceInsert,
// SequenceAt, SequenceErase, SequenceLength, ConcatFromSequence,
// SplitToSequence, SequenceMap, Optional, OptionalHasElement,
// OptionalGetElement.
//
// A sequence or optional value is one packed uint8 blob; the importer keeps
// its type (SeqType: kind, items' dtype and rank) beside it, so that an op
// taking an item out knows its dtype and rank when the job is defined. Import
// only: the exporter does not write sequence types (saving a job that uses
// them fails naming the op).
#include "jobflow/ops.h"
#include "onnx/importer.h"
#include "onnx/onnx_util.h"
#include "ops_internal.h"

namespace jobflow::onnx {
namespace {

namespace ou = onnx_util;

using Kind = SeqType::Kind;

// Input i, which must be a sequence (an optional sequence with `optional_ok`).
const SeqType& seq_in(Importer& I, int i, bool optional_ok = false) {
  const SeqType& t = I.type_of(i);
  if (t.kind != Kind::Sequence && !(optional_ok && t.kind == Kind::OptionalSequence))
    I.err("input '" + I.iname(i) + "' must be a sequence, got a " + t.str());
  return t;
}
// Input i, which must be a tensor.
Blob tensor_in(Importer& I, int i) {
  if (!I.type_of(i).is_tensor()) I.err("input '" + I.iname(i) + "' must be a tensor, got a " + I.type_of(i).str());
  return I.in(i);
}
Blob position_in(Importer& I, int i) {
  if (!I.has(i)) return Blob();
  Blob p = tensor_in(I, i);
  if ((p.dtype() != DType::Int32 && p.dtype() != DType::Int64) || (is_static(p.shape()) && numel(p.shape()) != 1))
    I.err("position must be one int32 or int64 value, got " + spec_str(p.spec()));
  return p;
}

// The rank of the items a node takes out of a sequence of type `t`: the
// sequence's own, else what the model declares for output 0.
int item_rank(Importer& I, const SeqType& t, int extra = 0) {
  if (t.rank >= 0) return t.rank;
  const int r = I.wants(0) ? I.declared_rank(I.node->output(0)) : -1;
  if (r >= 0) return r - extra;
  I.unsupported(I.node->op_type() + "(items of a rank unknown at load)");
}

SeqType sequence_of(DType elem, int rank) {
  SeqType t;
  t.kind = Kind::Sequence;
  t.elem = elem;
  t.rank = rank;
  return t;
}

void op_sequence_construct(Importer& I) {
  if (I.nin() < 1) I.err("needs at least one input");
  std::vector<Blob> xs;
  int rank = -2;
  for (int i = 0; i < I.nin(); ++i) {
    xs.push_back(tensor_in(I, i));
    if (xs.back().dtype() != xs[0].dtype())
      I.err("inputs differ in dtype: " + spec_str(xs[0].spec()) + " and " + spec_str(xs.back().spec()));
    rank = rank == -2 || rank == xs.back().ndim() ? xs.back().ndim() : -1;
  }
  I.out_seq(0, seq::construct(xs, xs[0].dtype()), sequence_of(xs[0].dtype(), rank));
}

void op_sequence_empty(Importer& I) {
  const DType elem = ou::from_onnx_dtype(static_cast<int32_t>(I.attr_i("dtype", ::onnx::TensorProto::FLOAT)),
                                         I.where() + " dtype");
  SeqType t = sequence_of(elem, -1);
  t.fresh = true;
  I.out_seq(0, seq::empty(elem), t);
}

void op_sequence_insert(Importer& I) {
  SeqType t = seq_in(I, 0);
  Blob x = tensor_in(I, 1);
  if (x.dtype() != t.elem) I.err("the tensor is " + spec_str(x.spec()) + ", the sequence holds " + dtype_name(t.elem));
  Blob s = seq::insert(I.in(0), x, position_in(I, 2));
  // A sequence known to be empty takes the inserted tensor's rank; a known
  // rank stays only if the tensor has it; an unknown one stays unknown.
  t.rank = t.fresh ? x.ndim() : t.rank == x.ndim() ? t.rank : -1;
  t.fresh = false;
  I.out_seq(0, s, t);
}

void op_sequence_at(Importer& I) {
  const SeqType& t = seq_in(I, 0);
  Blob p = position_in(I, 1);
  if (!p.defined()) I.err("input 1 (position) is required");
  I.out(0, seq::at(I.in(0), p, t.elem, item_rank(I, t)));
}

void op_sequence_erase(Importer& I) {
  const SeqType t = seq_in(I, 0);
  I.out_seq(0, seq::erase(I.in(0), position_in(I, 1)), t);
}

void op_sequence_length(Importer& I) {
  seq_in(I, 0);
  I.out(0, seq::length(I.in(0)));
}

void op_concat_from_sequence(Importer& I) {
  const SeqType& t = seq_in(I, 0);
  if (!I.has_attr("axis")) I.err("attribute 'axis' is required");
  const bool new_axis = I.attr_i("new_axis", 0) != 0;
  I.out(0, seq::concat(I.in(0), I.attr_i("axis", 0), new_axis, t.elem, item_rank(I, t, new_axis ? 1 : 0)));
}

void op_split_to_sequence(Importer& I) {
  Blob x = tensor_in(I, 0);
  Blob split = I.has(1) ? tensor_in(I, 1) : Blob();
  const bool keepdims = I.attr_i("keepdims", 1) != 0;
  const int64_t axis = I.attr_i("axis", 0);
  if (x.ndim() == 0) I.err("input is a scalar: there is no axis to split");
  I.axis_of(axis, x.ndim());
  const int rank = x.ndim() - (!split.defined() && !keepdims ? 1 : 0);
  I.out_seq(0, seq::split(x, split, axis, keepdims), sequence_of(x.dtype(), rank));
}

// SequenceMap: the body run on each item (and on the same additional
// tensors, or the items at the same position of additional sequences), its
// outputs gathered into sequences. Built as the Loop ONNX writes it out in
// the op's function body (SequenceLength, then per iteration SequenceAt and
// SequenceInsert), imported through the Loop row.
void op_sequence_map(Importer& I) {
  const GraphProto* body = nullptr;
  for (const auto& a : I.node->attribute())
    if (a.name() == "body" && a.has_g()) body = &a.g();
  if (!body) I.err("attribute 'body' (a graph) is required");
  const NodeProto& node = *I.node;
  const int node_index = I.node_index;
  if (body->input_size() != node.input_size())
    I.err("the body takes " + std::to_string(body->input_size()) + " inputs, the node gives " +
          std::to_string(node.input_size()));
  if (body->output_size() != node.output_size())
    I.err("the body returns " + std::to_string(body->output_size()) + " values, the node has " +
          std::to_string(node.output_size()) + " outputs");
  seq_in(I, 0);
  for (int i = 0; i < node.input_size(); ++i)
    if (I.has(i) && I.type_of(i).optional()) I.err("input '" + I.iname(i) + "' is an optional: SequenceMap takes sequences and tensors");
  const std::string p = "__sequence_map/" + node_label(node, node_index) + "/";
  auto make = [&](const char* op, std::vector<std::string> ins, std::vector<std::string> outs) {
    NodeProto n;
    n.set_op_type(op);
    n.set_name(p + op);
    for (auto& s : ins) n.add_input(s);
    for (auto& s : outs) n.add_output(s);
    return n;
  };
  std::vector<NodeProto> nodes;
  // The trip count is the longest sequence's length: a shorter one then
  // fails at its SequenceAt (naming the range and the length) instead of
  // a longer one's extra items being dropped without a word.
  std::vector<std::string> lengths;
  for (int i = 0; i < node.input_size(); ++i)
    if (I.has(i) && I.type_of(i).kind == Kind::Sequence) {
      lengths.push_back(p + "count" + std::to_string(i));
      nodes.push_back(make("SequenceLength", {node.input(i)}, {lengths.back()}));
    }
  if (lengths.size() == 1) nodes.push_back(make("Identity", {lengths[0]}, {p + "count"}));
  else nodes.push_back(make("Max", lengths, {p + "count"}));
  std::vector<std::string> loop_in{p + "count", ""};
  for (int k = 0; k < body->output_size(); ++k) {
    const auto& o = body->output(k);
    if (!o.type().has_tensor_type() || o.type().tensor_type().elem_type() == 0)
      I.err("the body's output '" + o.name() + "' must declare its tensor type");
    NodeProto e = make("SequenceEmpty", {}, {p + "empty" + std::to_string(k)});
    auto* a = e.add_attribute();
    a->set_name("dtype");
    a->set_type(AttributeProto::INT);
    a->set_i(o.type().tensor_type().elem_type());
    nodes.push_back(e);
    loop_in.push_back(p + "empty" + std::to_string(k));
  }
  // The Loop's body: the items taken out, the map's body, the results put in.
  GraphProto g;
  g.set_name(p + "body");
  g.add_input()->set_name(p + "i");
  g.add_input()->set_name(p + "cond");
  for (int k = 0; k < body->output_size(); ++k) g.add_input()->set_name(p + "acc" + std::to_string(k));
  for (int i = 0; i < node.input_size(); ++i) {
    const std::string& inner = body->input(i).name();
    if (!I.has(i)) I.err("input " + std::to_string(i) + " is empty");
    if (I.type_of(i).kind == Kind::Sequence) *g.add_node() = make("SequenceAt", {node.input(i), p + "i"}, {inner});
    else *g.add_node() = make("Identity", {node.input(i)}, {inner});
  }
  for (const auto& n : body->node()) *g.add_node() = n;
  for (const auto& t : body->initializer()) *g.add_initializer() = t;
  for (const auto& v : body->value_info()) *g.add_value_info() = v;
  for (const auto& v : body->input()) *g.add_value_info() = v;  // the items' declared ranks
  *g.add_node() = make("Identity", {p + "cond"}, {p + "cond_out"});
  g.add_output()->set_name(p + "cond_out");
  for (int k = 0; k < body->output_size(); ++k) {
    const std::string acc = p + "acc" + std::to_string(k), out = p + "acc_out" + std::to_string(k);
    *g.add_node() = make("SequenceInsert", {acc, body->output(k).name()}, {out});
    g.add_output()->set_name(out);
  }
  std::vector<std::string> outs(node.output().begin(), node.output().end());
  NodeProto loop = make("Loop", loop_in, outs);
  auto* a = loop.add_attribute();
  a->set_name("body");
  a->set_type(AttributeProto::GRAPH);
  *a->mutable_g() = g;
  nodes.push_back(loop);
  for (size_t k = 0; k < nodes.size(); ++k) I.run_node(nodes[k], node_index);
  I.node = &node;
  I.node_index = node_index;
}

// Optional(x) wraps x (a tensor or a sequence); Optional() with the `type`
// attribute is one without a value.
void op_optional(Importer& I) {
  if (I.has(0)) {
    SeqType t = I.type_of(0);
    if (t.optional()) I.err("input '" + I.iname(0) + "' is already an optional");
    if (t.kind == Kind::Sequence) {
      t.kind = Kind::OptionalSequence;
      I.out_seq(0, identity(I.in(0)), t);
      return;
    }
    Blob x = I.in(0);
    SeqType o;
    o.kind = Kind::OptionalTensor;
    o.elem = x.dtype();
    o.rank = x.ndim();
    I.out_seq(0, seq::construct({x}, x.dtype()), o);
    return;
  }
  const ::onnx::TypeProto* tp = nullptr;
  for (const auto& a : I.node->attribute())
    if (a.name() == "type" && a.has_tp()) tp = &a.tp();
  if (!tp) I.err("an Optional without an input needs the attribute 'type'");
  ::onnx::TypeProto opt;
  *opt.mutable_optional_type()->mutable_elem_type() = *tp;
  SeqType t = seq_type_of(opt, I.where() + " type", "Optional(type)");
  t.fresh = t.rank < 0;
  I.out_seq(0, seq::none(t.elem), t);
}

void op_optional_has_element(Importer& I) {
  if (!I.has(0)) {  // opset 18: no input, no element
    I.out_const(0, Tensor::scalar(false));
    return;
  }
  if (!I.type_of(0).optional()) {  // opset 18: a tensor or a sequence has one
    I.out_const(0, Tensor::scalar(true));
    return;
  }
  I.out(0, seq::has_element(I.in(0)));
}

void op_optional_get_element(Importer& I) {
  SeqType t = I.type_of(0);
  if (t.kind == Kind::OptionalTensor) {
    I.out(0, seq::get_element(I.in(0), true, t.elem, item_rank(I, t)));
  } else if (t.kind == Kind::OptionalSequence) {
    t.kind = Kind::Sequence;
    I.out_seq(0, seq::get_element(I.in(0), false, t.elem, 0), t);
  } else if (t.kind == Kind::Sequence) {  // opset 18: a sequence or tensor is its own element
    I.out_seq(0, identity(I.in(0)), t);
  } else {
    I.out(0, identity(I.in(0)));
  }
}

}  // namespace

void sequence_onnx_rows(OpRows& r) {
  r.import_op("SequenceConstruct", op_sequence_construct).takes_sequences();
  r.import_op("SequenceEmpty", op_sequence_empty).takes_sequences();
  r.import_op("SequenceInsert", op_sequence_insert).takes_sequences();
  r.import_op("SequenceAt", op_sequence_at).takes_sequences();
  r.import_op("SequenceErase", op_sequence_erase).takes_sequences();
  r.import_op("SequenceLength", op_sequence_length).takes_sequences();
  r.import_op("ConcatFromSequence", op_concat_from_sequence).takes_sequences();
  r.import_op("SplitToSequence", op_split_to_sequence).takes_sequences();
  r.import_op("SequenceMap", op_sequence_map).takes_sequences();
  r.import_op("Optional", op_optional).takes_sequences();
  r.import_op("OptionalHasElement", op_optional_has_element).takes_sequences();
  r.import_op("OptionalGetElement", op_optional_get_element).takes_sequences();
}

}  // namespace jobflow::onnx

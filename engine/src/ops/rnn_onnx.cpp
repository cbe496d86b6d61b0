// ONNX rows of the recurrent layers (ops/rnn.cpp): LSTM, GRU and RNN import
// into the ops they are built from, which export themselves (registry.h).
#include "onnx/importer.h"

namespace jobflow::onnx {
namespace {

enum class Kind { Rnn, Gru, Lstm };

nn::RnnOptions options(Importer& I, Kind k) {
  nn::RnnOptions o;
  o.direction = I.attr_s("direction", "forward");
  if (o.direction != "forward" && o.direction != "reverse" && o.direction != "bidirectional")
    I.err("direction must be forward, reverse or bidirectional, got '" + o.direction + "'");
  if (const AttributeProto* a = I.attr("activations", AttributeProto::STRINGS))
    for (const auto& s : a->strings()) o.activations.push_back(s);
  if (const AttributeProto* a = I.attr("activation_alpha", AttributeProto::FLOATS))
    for (float f : a->floats()) o.activation_alpha.push_back(f);
  if (const AttributeProto* a = I.attr("activation_beta", AttributeProto::FLOATS))
    for (float f : a->floats()) o.activation_beta.push_back(f);
  if (I.has_attr("clip")) {
    const double c = I.attr_f("clip", 0.0);
    if (!(c > 0)) I.err("clip must be positive, got " + std::to_string(c));
    o.clip = c;
  }
  if (k == Kind::Lstm) o.input_forget = I.attr_i("input_forget", 0) != 0;
  if (k == Kind::Gru) o.linear_before_reset = I.attr_i("linear_before_reset", 0) != 0;
  const int64_t layout = I.attr_i("layout", 0);
  if (layout != 0 && layout != 1) I.err("layout must be 0 or 1, got " + std::to_string(layout));
  o.batch_first = layout == 1;
  o.hidden_size = I.attr_i("hidden_size", 0);
  return o;
}

Blob opt_in(Importer& I, int i) { return I.has(i) ? I.in(i) : Blob(); }

void op_recurrent(Importer& I, Kind k) {
  Blob x = I.in(0);
  if (!is_floating(x.dtype())) I.unsupported(I.node->op_type() + "(" + dtype_name(x.dtype()) + ")");
  if (x.ndim() != 3) I.err("X must have rank 3, got " + spec_str(x.spec()));
  const nn::RnnOptions o = options(I, k);
  Blob w = I.in(1), r = I.in(2), b = opt_in(I, 3), seq = opt_in(I, 4), h0 = opt_in(I, 5);
  nn::RnnOutputs y;
  try {
    if (k == Kind::Lstm) y = nn::lstm(x, w, r, b, seq, h0, opt_in(I, 6), opt_in(I, 7), o);
    else if (k == Kind::Gru) y = nn::gru(x, w, r, b, seq, h0, o);
    else y = nn::rnn(x, w, r, b, seq, h0, o);
  } catch (const Error& e) {
    I.err(e.what());
  }
  if (I.wants(0)) I.out(0, y.y);
  if (I.wants(1)) I.out(1, y.y_h);
  if (I.wants(2) && k == Kind::Lstm) I.out(2, y.y_c);
}

}  // namespace

void rnn_onnx_rows(OpRows& r) {
  // W, R, B (and the LSTM's P) are the layer's trained parameters.
  r.import_op("LSTM", [](Importer& I) { op_recurrent(I, Kind::Lstm); }).weights = {1, 2, 3, 7};
  r.import_op("GRU", [](Importer& I) { op_recurrent(I, Kind::Gru); }).weights = {1, 2, 3};
  r.import_op("RNN", [](Importer& I) { op_recurrent(I, Kind::Rnn); }).weights = {1, 2, 3};
}

}  // namespace jobflow::onnx

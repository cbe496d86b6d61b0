// The recurrent layers of ONNX (LSTM, GRU, RNN) as builders of other ops:
// each time step is a matrix product of the hidden state, the gates'
// activations and elementwise updates, unrolled over the sequence (its
// length is the static size of X's sequence axis). The input projection of
// every step is one matrix product over the whole sequence. The gradient
// comes from the ops it is made of; a job file holds those ops.
//
// sequence_lens (one length per batch entry): steps past an entry's length
// keep its state and output zeros, so Y_h / Y_c hold the state after the
// last valid step (forward) or after step 0 (reverse, which then starts at
// the entry's last valid step).
#include <algorithm>
#include <cctype>
#include <cmath>

#include "jobflow/ops.h"
#include "ops_internal.h"

namespace jobflow {
namespace {

enum class Cell { Rnn, Gru, Lstm };
const char* cell_name(Cell c) { return c == Cell::Rnn ? "rnn" : c == Cell::Gru ? "gru" : "lstm"; }
int gate_count(Cell c) { return c == Cell::Rnn ? 1 : c == Cell::Gru ? 3 : 4; }
int act_count(Cell c) { return c == Cell::Rnn ? 1 : c == Cell::Gru ? 2 : 3; }

[[noreturn]] void fail(Cell c, const std::string& what) { throw Error(std::string("[") + cell_name(c) + "] " + what); }

Blob scalar_of(double v, DType dt) {
  Tensor t({}, dt);
  if (dt == DType::Float32) t.data<float>()[0] = static_cast<float>(v);
  else if (dt == DType::Float64) t.data<double>()[0] = v;
  else if (dt == DType::Int32) t.data<int32_t>()[0] = static_cast<int32_t>(v);
  else t.data<int64_t>()[0] = static_cast<int64_t>(v);
  return constant(t);
}

// One activation with its parameters (ONNX's defaults where not given).
struct Act {
  std::string name;  // lower case
  double alpha = 0, beta = 0;
};

bool takes_alpha(const std::string& n) {
  return n == "affine" || n == "leakyrelu" || n == "thresholdedrelu" || n == "scaledtanh" || n == "hardsigmoid" ||
         n == "elu";
}
bool takes_beta(const std::string& n) { return n == "affine" || n == "scaledtanh" || n == "hardsigmoid"; }
double default_alpha(const std::string& n) {
  return n == "leakyrelu" ? 0.01 : n == "hardsigmoid" ? 0.2 : 1.0;  // affine, thresholdedrelu, scaledtanh, elu: 1
}
double default_beta(const std::string& n) { return n == "hardsigmoid" ? 0.5 : n == "scaledtanh" ? 1.0 : 0.0; }

Blob apply(const Act& a, Blob x) {
  const std::string& n = a.name;
  if (n == "sigmoid") return math::sigmoid(x);
  if (n == "tanh") return math::tanh(x);
  if (n == "relu") return nn::relu(x);
  if (n == "affine") return add_scalar(mul_scalar(x, a.alpha), a.beta);
  if (n == "leakyrelu") return nn::leaky_relu(x, a.alpha);
  if (n == "thresholdedrelu") return where(greater(x, scalar_of(a.alpha, x.dtype())), x, scalar_of(0.0, x.dtype()));
  if (n == "scaledtanh") return mul_scalar(math::tanh(mul_scalar(x, a.beta)), a.alpha);
  if (n == "hardsigmoid") return nn::hard_sigmoid(x, a.alpha, a.beta);
  if (n == "elu") return nn::elu(x, a.alpha);
  if (n == "softsign") return nn::softsign(x);
  if (n == "softplus") return nn::softplus(x);
  throw Error("unreachable activation " + n);
}

std::vector<Act> activations(Cell c, const nn::RnnOptions& o, int dirs) {
  static const char* const known[] = {"sigmoid", "tanh",       "relu", "affine",   "leakyrelu", "thresholdedrelu",
                                      "scaledtanh", "hardsigmoid", "elu", "softsign", "softplus"};
  std::vector<std::string> names = o.activations;
  if (names.empty()) {
    const std::vector<std::string> def = c == Cell::Rnn   ? std::vector<std::string>{"Tanh"}
                                         : c == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                          : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int d = 0; d < dirs; ++d) names.insert(names.end(), def.begin(), def.end());
  }
  const size_t want = static_cast<size_t>(act_count(c) * dirs);
  if (names.size() != want)
    fail(c, "activations must name " + std::to_string(want) + " functions (" + std::to_string(act_count(c)) +
                " per direction), got " + std::to_string(names.size()));
  std::vector<Act> r;
  size_t ia = 0, ib = 0;
  for (const std::string& n0 : names) {
    Act a;
    a.name = n0;
    std::transform(a.name.begin(), a.name.end(), a.name.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (std::find(std::begin(known), std::end(known), a.name) == std::end(known))
      fail(c, "activation '" + n0 + "' is not one ONNX defines");
    a.alpha = default_alpha(a.name), a.beta = default_beta(a.name);
    if (takes_alpha(a.name) && ia < o.activation_alpha.size()) a.alpha = o.activation_alpha[ia++];
    if (takes_beta(a.name) && ib < o.activation_beta.size()) a.beta = o.activation_beta[ib++];
    r.push_back(a);
  }
  return r;
}

// Slice d of a (dirs, ...) tensor without the leading axis.
Blob dir_slice(Blob t, int64_t d) {
  Shape s = t.shape();
  Blob v = slice(t, {d}, {d + 1}, {0});
  s.erase(s.begin());
  return reshape(v, s);
}
// Columns [from, to) of a 2-D (rows, n) tensor, or elements of a 1-D one.
Blob cols(Blob t, int64_t from, int64_t to) { return slice(t, {from}, {to}, {t.ndim() - 1}); }

void expect_shape(Cell c, const char* what, const Blob& b, const Shape& want) {
  if (!shapes_agree(b.shape(), want))
    fail(c, std::string(what) + " must be " + shape_str(want) + ", got " + spec_str(b.spec()));
}

nn::RnnOutputs build(Cell cell, Blob x, Blob w, Blob r, Blob b, Blob seq, Blob h0, Blob c0, Blob p,
                     const nn::RnnOptions& o) {
  const DType dt = x.dtype();
  if (dt != DType::Float32 && dt != DType::Float64) fail(cell, "X must be float32 or float64, got " + spec_str(x.spec()));
  if (x.ndim() != 3) fail(cell, "X must have rank 3, got " + spec_str(x.spec()));
  if (o.direction != "forward" && o.direction != "reverse" && o.direction != "bidirectional")
    fail(cell, "direction must be \"forward\", \"reverse\" or \"bidirectional\", got \"" + o.direction + "\"");
  const int64_t dirs = o.direction == "bidirectional" ? 2 : 1;
  if (o.batch_first) {
    x = transpose(x, {1, 0, 2});
    if (h0.defined()) h0 = transpose(h0, {1, 0, 2});
    if (c0.defined()) c0 = transpose(c0, {1, 0, 2});
  }
  // The batch may be known only at the call (kDynamic): the shapes below
  // use -1 for it.
  const int64_t S = x.shape()[0], B = x.shape()[1], I = x.shape()[2];
  if (S < 0) fail(cell, "the sequence axis of X must have a static size (the steps are unrolled), got " + spec_str(x.spec()));
  if (I < 0) fail(cell, "the input axis of X must have a static size, got " + spec_str(x.spec()));
  const int64_t G = gate_count(cell);
  if (w.ndim() != 3 || w.shape()[0] != dirs || w.shape()[1] % G != 0 || w.shape()[2] != I)
    fail(cell, "W must be (" + std::to_string(dirs) + ", " + std::to_string(G) + " * hidden_size, " +
                   std::to_string(I) + "), got " + spec_str(w.spec()));
  const int64_t H = w.shape()[1] / G;
  if (H == 0) fail(cell, "hidden_size must be positive (W " + spec_str(w.spec()) + ")");
  if (o.hidden_size > 0 && o.hidden_size != H)
    fail(cell, "hidden_size is " + std::to_string(o.hidden_size) + " but W " + spec_str(w.spec()) + " gives " +
                   std::to_string(H));
  for (const Blob* t : {&w, &r, &b, &h0, &c0, &p})
    if (t->defined() && t->dtype() != dt)
      fail(cell, "W, R, B, initial states and P must have X's dtype " + std::string(dtype_name(dt)) + ", got " +
                     spec_str(t->spec()));
  expect_shape(cell, "R", r, {dirs, G * H, H});
  if (b.defined()) expect_shape(cell, "B", b, {dirs, 2 * G * H});
  if (h0.defined()) expect_shape(cell, "initial_h", h0, {dirs, B, H});
  if (c0.defined()) expect_shape(cell, "initial_c", c0, {dirs, B, H});
  if (p.defined()) expect_shape(cell, "P", p, {dirs, 3 * H});
  Blob lens;
  if (seq.defined()) {
    if (seq.dtype() != DType::Int32 && seq.dtype() != DType::Int64)
      fail(cell, "sequence_lens must be int32 or int64, got " + spec_str(seq.spec()));
    expect_shape(cell, "sequence_lens", seq, {B});
    lens = reshape(seq, {-1, 1});
  }
  const std::vector<Act> acts = activations(cell, o, static_cast<int>(dirs));
  auto clipped = [&](Blob v) { return o.clip ? clip(v, -*o.clip, *o.clip) : v; };
  const Blob x2 = reshape(x, {-1, I});  // (S*B, I)

  std::vector<Blob> ys, yhs, ycs;
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = o.direction == "reverse" || d == 1;
    const Act* a = &acts[static_cast<size_t>(d * act_count(cell))];
    const Blob wd = dir_slice(w, d), rd = dir_slice(r, d);
    Blob xw = matmul(x2, wd, false, true);  // (S*B, G*H)
    Blob rb;                                // (G*H,)
    if (b.defined()) {
      const Blob bd = dir_slice(b, d);
      xw = add(xw, cols(bd, 0, G * H));
      rb = cols(bd, G * H, 2 * G * H);
    }
    xw = reshape(xw, {S, -1, G * H});
    const Blob zeros = zeros_like(reshape(slice(xw, {0, 0}, {1, H}, {0, 2}), {-1, H}));  // (B, H)
    Blob h = h0.defined() ? dir_slice(h0, d) : zeros;
    Blob c = c0.defined() ? dir_slice(c0, d) : zeros;
    Blob pd = p.defined() ? dir_slice(p, d) : Blob();
    // GRU: z and r read R's first 2H rows with h; h's gate its last H rows.
    Blob r_zr, r_h, rb_zr, rb_h;
    if (cell == Cell::Gru) {
      r_zr = slice(rd, {0}, {2 * H}, {0});
      r_h = slice(rd, {2 * H}, {3 * H}, {0});
      if (rb.defined()) rb_zr = cols(rb, 0, 2 * H), rb_h = cols(rb, 2 * H, 3 * H);
    }
    std::vector<Blob> yd(static_cast<size_t>(S));
    for (int64_t step = 0; step < S; ++step) {
      const int64_t t = reverse ? S - 1 - step : step;
      const Blob xt = reshape(slice(xw, {t}, {t + 1}, {0}), {-1, G * H});
      Blob h_new, c_new;
      if (cell == Cell::Rnn) {
        Blob pre = add(xt, matmul(h, rd, false, true));
        if (rb.defined()) pre = add(pre, rb);
        h_new = apply(a[0], clipped(pre));
      } else if (cell == Cell::Gru) {
        Blob zr = add(cols(xt, 0, 2 * H), matmul(h, r_zr, false, true));
        if (rb_zr.defined()) zr = add(zr, rb_zr);
        const Blob z = apply(a[0], clipped(cols(zr, 0, H)));
        const Blob rg = apply(a[0], clipped(cols(zr, H, 2 * H)));
        Blob hh;
        if (o.linear_before_reset) {
          Blob rh = matmul(h, r_h, false, true);
          if (rb_h.defined()) rh = add(rh, rb_h);
          hh = add(cols(xt, 2 * H, 3 * H), mul(rg, rh));
        } else {
          hh = add(cols(xt, 2 * H, 3 * H), matmul(mul(rg, h), r_h, false, true));
          if (rb_h.defined()) hh = add(hh, rb_h);
        }
        const Blob ht = apply(a[1], clipped(hh));
        h_new = add(ht, mul(z, sub(h, ht)));  // (1 - z) ht + z h
      } else {
        Blob g = add(xt, matmul(h, rd, false, true));
        if (rb.defined()) g = add(g, rb);
        // ONNX's gate order: input, output, forget, cell.
        Blob ip = cols(g, 0, H), op = cols(g, H, 2 * H), fp = cols(g, 2 * H, 3 * H), cp = cols(g, 3 * H, 4 * H);
        if (pd.defined()) {
          ip = add(ip, mul(cols(pd, 0, H), c));
          fp = add(fp, mul(cols(pd, 2 * H, 3 * H), c));
        }
        const Blob ig = apply(a[0], clipped(ip));
        const Blob fg = o.input_forget ? add_scalar(neg(ig), 1.0) : apply(a[0], clipped(fp));
        const Blob cg = apply(a[1], clipped(cp));
        c_new = add(mul(fg, c), mul(ig, cg));
        if (pd.defined()) op = add(op, mul(cols(pd, H, 2 * H), c_new));
        h_new = mul(apply(a[0], clipped(op)), apply(a[2], c_new));
      }
      Blob y = h_new;
      if (lens.defined()) {
        const Blob valid = less(scalar_of(static_cast<double>(t), lens.dtype()), lens);  // (B, 1)
        y = where(valid, h_new, zeros);
        h = where(valid, h_new, h);
        if (c_new.defined()) c = where(valid, c_new, c);
      } else {
        h = h_new;
        if (c_new.defined()) c = c_new;
      }
      yd[static_cast<size_t>(t)] = reshape(y, {1, 1, -1, H});
    }
    ys.push_back(S == 1 ? yd[0] : concat(yd, 0));
    yhs.push_back(reshape(h, {1, -1, H}));
    if (cell == Cell::Lstm) ycs.push_back(reshape(c, {1, -1, H}));
  }
  nn::RnnOutputs out;
  out.y = dirs == 1 ? ys[0] : concat(ys, 1);     // (S, dirs, B, H)
  out.y_h = dirs == 1 ? yhs[0] : concat(yhs, 0);  // (dirs, B, H)
  if (cell == Cell::Lstm) out.y_c = dirs == 1 ? ycs[0] : concat(ycs, 0);
  if (o.batch_first) {
    out.y = transpose(out.y, {2, 0, 1, 3});
    out.y_h = transpose(out.y_h, {1, 0, 2});
    if (out.y_c.defined()) out.y_c = transpose(out.y_c, {1, 0, 2});
  }
  return out;
}

}  // namespace

namespace nn {
RnnOutputs lstm(Blob x, Blob w, Blob r, Blob b, Blob sequence_lens, Blob initial_h, Blob initial_c, Blob p,
                const RnnOptions& o) {
  return build(Cell::Lstm, x, w, r, b, sequence_lens, initial_h, initial_c, p, o);
}
RnnOutputs gru(Blob x, Blob w, Blob r, Blob b, Blob sequence_lens, Blob initial_h, const RnnOptions& o) {
  if (o.input_forget) throw Error("[gru] input_forget is an LSTM option");
  return build(Cell::Gru, x, w, r, b, sequence_lens, initial_h, Blob(), Blob(), o);
}
RnnOutputs rnn(Blob x, Blob w, Blob r, Blob b, Blob sequence_lens, Blob initial_h, const RnnOptions& o) {
  if (o.input_forget) throw Error("[rnn] input_forget is an LSTM option");
  if (o.linear_before_reset) throw Error("[rnn] linear_before_reset is a GRU option");
  return build(Cell::Rnn, x, w, r, b, sequence_lens, initial_h, Blob(), Blob(), o);
}
}  // namespace nn

}  // namespace jobflow

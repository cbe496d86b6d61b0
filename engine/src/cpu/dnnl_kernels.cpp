// cpu/dnnl_kernels.cpp — oneDNN-backed conv2d / pool2d kernels (see dnnl_kernels.h).
//
// Design:
//  * One dnnl::engine for the whole process; a dnnl::stream and a cache per
//    calling thread (a job's worker), created on first use.
//  * A cache maps the full parameter set (+ pass, bias/relu flags, layout
//    choice) to an Entry holding the primitive, the dnnl::memory objects that
//    wrap the caller's buffers (re-pointed with set_data_handle on every call),
//    internal buffers for layout reorders, and a user-mode scratchpad. Hence a
//    steady-state call creates nothing and allocates nothing.
//  * The cache is per thread: an entry's buffers and stream belong to the
//    thread that runs it, so no lock is taken and two jobs (two pipeline
//    elements) run their convolutions at the same time. A job runs on its
//    one worker thread, so each job builds its entries once. (Each call uses
//    the job's OpenMP threads; give concurrent jobs num_threads that add up
//    to the cores.)
//  * Weights are never cached across calls in reordered form: they change at
//    every training step, and a stale copy would be silently wrong.
//
// Layout decision (ConvLayout::Auto), measured with a /tmp timing program on
// the LeNet shapes, N=100, 2 cores (AMD EPYC, AVX-512), oneDNN 2.6.3, median
// ms per call, bias on, reorders to/from NCHW included:
//                        Plain (gemm:jit)   Blocked (jit:avx512_core)
//   conv1 1->32 fwd           1.0-1.2            0.48
//   conv1 fwd + relu          6.6-7.2            0.49
//   conv1 bwd_data            0.86-0.89          5.0-5.6
//   conv1 bwd_weights         2.5-2.6            0.53-0.63
//   conv2 32->64 fwd          8.4                4.3-4.4
//   conv2 fwd + relu         11.6-12.7           4.3
//   conv2 bwd_data            9.1-9.3            4.3-4.4
//   conv2 bwd_weights         8.7-9.1            4.6-4.7
// So Blocked everywhere except backward-data with few input channels.
#include "cpu/dnnl_kernels.h"
#include "cpu/dnnl_common.h"
#include "cpu/isa.h"
#include "cpu/simd_kernels.h"
#include "cpu/winograd.h"
#include "jobflow/tensor.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <array>
#include <atomic>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace jobflow::cpu {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

dnnl::engine& cpu_engine() { return dnnl_engine(); }
dnnl::stream& cpu_stream() { return dnnl_stream(); }

// ---------------------------------------------------------------------------
// Cache entries

// One tensor argument of a primitive. `user` wraps the caller's pointer; when
// the primitive wants another layout, `prim` is an internal buffer owned by the
// entry and `reorder` converts user->prim (inputs) or prim->user (outputs).
struct Operand {
  int arg = 0;
  bool is_input = true;
  bool reordered = false;
  memory user;
  memory prim;
  dnnl::reorder reorder;
  std::vector<dnnl_exec_arg_t> reorder_args;  // {FROM, TO}, built once
};

void execute(const dnnl::primitive& prim, const std::vector<dnnl_exec_arg_t>& args) { dnnl_execute(prim, args); }

struct Entry {
  dnnl::primitive prim;
  std::vector<Operand> operands;
  std::vector<memory> arg_mems;          // keeps the memory objects named in `args` alive
  std::vector<dnnl_exec_arg_t> args;     // built once; handles are re-pointed, never replaced
  std::string impl;                      // oneDNN implementation name, for benchmarks/diagnostics
  std::unique_ptr<Winograd> wino;        // a train convolution on Jobflow's Winograd kernel (no primitive)

  // Registers an argument whose user-visible layout is `user_md` and whose
  // primitive-side layout is `prim_md`. The user memory starts with no buffer;
  // run() binds the caller's pointer.
  void add(int arg, bool is_input, const memory::desc& user_md, const memory::desc& prim_md) {
    Operand op;
    op.arg = arg;
    op.is_input = is_input;
    op.user = memory(user_md, cpu_engine(), DNNL_MEMORY_NONE);
    if (user_md == prim_md) {
      op.prim = op.user;
    } else {
      op.reordered = true;
      op.prim = memory(prim_md, cpu_engine());  // library-allocated, lives as long as the entry
      op.reorder = is_input ? dnnl::reorder(op.user, op.prim) : dnnl::reorder(op.prim, op.user);
      const memory& from = is_input ? op.user : op.prim;
      const memory& to = is_input ? op.prim : op.user;
      op.reorder_args = {{DNNL_ARG_FROM, from.get()}, {DNNL_ARG_TO, to.get()}};
    }
    add_arg(arg, op.prim);
    operands.push_back(std::move(op));
  }

  // Scratchpad in user mode: allocated once here instead of inside every execute.
  void add_scratchpad(const memory::desc& md) {
    if (md.get_size() != 0) add_arg(DNNL_ARG_SCRATCHPAD, memory(md, cpu_engine()));
  }

  void add_arg(int arg, const memory& m) {
    arg_mems.push_back(m);
    args.push_back({arg, m.get()});
  }

  // Binds the caller's buffers, runs input reorders, the primitive, output
  // reorders, and waits. Runs on the thread whose cache holds the entry.
  void run(std::initializer_list<std::pair<int, const void*>> bufs) {
    for (const auto& [arg, ptr] : bufs) {
      for (auto& op : operands) {
        // oneDNN takes void*; inputs are only read, so dropping const is safe.
        if (op.arg == arg) op.user.set_data_handle(const_cast<void*>(ptr));
      }
    }
    for (auto& op : operands)
      if (op.reordered && op.is_input) execute(op.reorder, op.reorder_args);
    execute(prim, args);
    for (auto& op : operands)
      if (op.reordered && !op.is_input) execute(op.reorder, op.reorder_args);
    cpu_stream().wait();
  }
};

// Fixed-size key: no allocation on lookup.
using Key = std::array<int64_t, 26>;  // unused trailing slots are 0
struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the 64-bit words
    for (int64_t v : k) {
      h ^= static_cast<uint64_t>(v);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

// The calling thread's entries. clear_dnnl_cache() bumps the generation; each
// thread drops its entries when it next looks one up.
std::atomic<uint64_t> g_generation{0};
struct ThreadCache {
  uint64_t generation = 0;
  std::unordered_map<Key, std::unique_ptr<Entry>, KeyHash> entries;
};
ThreadCache& thread_cache() {
  thread_local ThreadCache c;
  const uint64_t g = g_generation.load(std::memory_order_acquire);
  if (c.generation != g) {
    c.entries.clear();
    c.generation = g;
  }
  return c;
}

// Per-pass layout policy; Auto is resolved per shape in conv_entry().
std::atomic<ConvLayout> g_layout[3] = {ConvLayout::Auto, ConvLayout::Auto, ConvLayout::Auto};

// Looks up or builds an entry of this thread; `build` runs only on a miss.
template <class Build>
Entry& get_entry(const Key& key, Build&& build) {
  auto& cache = thread_cache().entries;
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  auto e = std::make_unique<Entry>();
  build(*e);
  return *cache.emplace(key, std::move(e)).first->second;
}

// ---------------------------------------------------------------------------
// Convolution

std::string describe(const Conv2dParams& p) {
  std::ostringstream o;
  o << "x=[" << p.N << "," << p.C << "," << p.H << "," << p.W << "] w=[" << p.K << ","
    << (p.groups > 0 ? p.C / p.groups : p.C) << "," << p.R << "," << p.S << "] y=[" << p.N << "," << p.K
    << "," << p.OH << "," << p.OW << "] stride=(" << p.stride_h << "," << p.stride_w << ") pad(t,l,b,r)=("
    << p.pad_top << "," << p.pad_left << "," << p.pad_bottom << "," << p.pad_right << ") dil=(" << p.dil_h
    << "," << p.dil_w << ") groups=" << p.groups;
  return o.str();
}

[[noreturn]] void conv_fail(const char* fn, const Conv2dParams& p, const std::string& why) {
  throw jobflow::Error(std::string("[conv2d] ") + fn + ": " + why + " (" + describe(p) + ")");
}

// Rejects inconsistent params up front so the message says what is wrong
// (oneDNN would only say "could not create a descriptor").
void check(const char* fn, const Conv2dParams& p) {
  if (p.N <= 0 || p.C <= 0 || p.H <= 0 || p.W <= 0 || p.K <= 0 || p.R <= 0 || p.S <= 0 || p.OH <= 0 ||
      p.OW <= 0)
    conv_fail(fn, p, "all sizes must be positive");
  if (p.stride_h <= 0 || p.stride_w <= 0 || p.dil_h <= 0 || p.dil_w <= 0 || p.groups <= 0)
    conv_fail(fn, p, "stride, dilation and groups must be >= 1");
  if (p.pad_top < 0 || p.pad_left < 0 || p.pad_bottom < 0 || p.pad_right < 0)
    conv_fail(fn, p, "padding must be >= 0");
  if (p.C % p.groups != 0 || p.K % p.groups != 0) conv_fail(fn, p, "C and K must be divisible by groups");
  const int64_t eh = (p.R - 1) * p.dil_h + 1, ew = (p.S - 1) * p.dil_w + 1;
  const int64_t oh = (p.H + p.pad_top + p.pad_bottom - eh) / p.stride_h + 1;
  const int64_t ow = (p.W + p.pad_left + p.pad_right - ew) / p.stride_w + 1;
  if (p.H + p.pad_top + p.pad_bottom < eh || p.W + p.pad_left + p.pad_right < ew || oh != p.OH || ow != p.OW)
    conv_fail(fn, p, "output size inconsistent, expected OH=" + std::to_string(oh) + " OW=" + std::to_string(ow));
}

Key conv_key(const Conv2dParams& p, ConvPass pass, bool bias, bool relu, ConvLayout layout, bool bf16,
             ConvFormats f) {
  return Key{static_cast<int64_t>(pass), p.N,        p.C,          p.H,         p.W,         p.K,
             p.R,                        p.S,        p.OH,         p.OW,        p.stride_h,  p.stride_w,
             p.pad_top,                  p.pad_left, p.pad_bottom, p.pad_right, p.dil_h,     p.dil_w,
             p.groups,                   bias,       relu,         static_cast<int64_t>(layout), bf16,
             // oneDNN fixes a primitive's thread partitioning at creation:
             // one entry per OpenMP thread count the calling thread runs with.
             omp_get_max_threads(),      f.src_blocked, f.dst_blocked};
}

// Memory descriptors and geometry shared by the three passes.
struct ConvGeom {
  memory::desc src, wei, bias, dst;          // caller layouts (NCHW, OIHW / GOIHW, [K])
  memory::desc src_p, wei_p, bias_p, dst_p;  // what the primitive is offered (same, or `any`)
  memory::desc src_f32_p, wei_f32_p, dst_f32_p;  // float32 outputs of a bf16 primitive (dst, diff_src, diff_weights)
  memory::dims strides, dil, pad_l, pad_r;

  // bf16: the primitive computes in bfloat16 (float32 accumulation) on
  // copies of src/weights/diff_dst converted by the entry's reorders; the
  // caller's buffers, dst, diff_src, diff_weights and bias stay float32.
  ConvGeom(const Conv2dParams& p, ConvLayout layout, bool bf16, ConvFormats f) {
    const memory::dims sd{p.N, p.C, p.H, p.W}, dd{p.N, p.K, p.OH, p.OW}, bd{p.K};
    // Grouped weights: OIHW with O split into G blocks is exactly GOIHW.
    const memory::dims wd = p.groups == 1 ? memory::dims{p.K, p.C, p.R, p.S}
                                          : memory::dims{p.groups, p.K / p.groups, p.C / p.groups, p.R, p.S};
    const tag wt = p.groups == 1 ? tag::oihw : tag::goihw;
    src = memory::desc(sd, dt::f32, f.src_blocked ? tag::nChw16c : tag::nchw);
    dst = memory::desc(dd, dt::f32, f.dst_blocked ? tag::nChw16c : tag::nchw);
    wei = memory::desc(wd, dt::f32, wt);
    bias = memory::desc(bd, dt::f32, tag::a);
    // Plain: the primitive works on NCHW (oneDNN's gemm kernels); a
    // caller's nChw16c operand is then reordered (no kernel takes the mix
    // of plain and blocked operands but oneDNN's reference one).
    const bool any = layout == ConvLayout::Blocked || bf16;
    const dt low = bf16 ? dt::bf16 : dt::f32;
    src_p = any ? memory::desc(sd, low, tag::any) : memory::desc(sd, dt::f32, tag::nchw);
    dst_p = any ? memory::desc(dd, low, tag::any) : memory::desc(dd, dt::f32, tag::nchw);
    wei_p = any ? memory::desc(wd, low, tag::any) : wei;
    if (bf16) {
      dst_f32_p = memory::desc(dd, dt::f32, tag::any);
      src_f32_p = memory::desc(sd, dt::f32, tag::any);
      wei_f32_p = memory::desc(wd, dt::f32, tag::any);
    } else {
      dst_f32_p = dst_p, src_f32_p = src_p, wei_f32_p = wei_p;
    }
    bias_p = bias;  // bias is 1-D; there is nothing to choose
    strides = {p.stride_h, p.stride_w};
    dil = {p.dil_h - 1, p.dil_w - 1};  // oneDNN counts dilation from 0
    pad_l = {p.pad_top, p.pad_left};
    pad_r = {p.pad_bottom, p.pad_right};
  }

  dnnl::convolution_forward::desc fwd_desc(bool with_bias, bool f32_dst = false) const {
    using cf = dnnl::convolution_forward;
    const memory::desc& d = f32_dst ? dst_f32_p : dst_p;
    return with_bias ? cf::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_p,
                                wei_p, bias_p, d, strides, dil, pad_l, pad_r)
                     : cf::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_p,
                                wei_p, d, strides, dil, pad_l, pad_r);
  }
};

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void build_conv_fwd(Entry& e, const Conv2dParams& p, bool has_bias, bool relu, ConvLayout layout, bool bf16, ConvFormats f) {
  ConvGeom g(p, layout, bf16, f);
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
  }
  dnnl::convolution_forward::primitive_desc pd(g.fwd_desc(has_bias, /*f32_dst=*/true), attr, cpu_engine());
  e.prim = dnnl::convolution_forward(pd);
  e.impl = pd.impl_info_str();
  e.add(DNNL_ARG_SRC, true, g.src, pd.src_desc());
  e.add(DNNL_ARG_WEIGHTS, true, g.wei, pd.weights_desc());
  if (has_bias) e.add(DNNL_ARG_BIAS, true, g.bias, pd.bias_desc());
  e.add(DNNL_ARG_DST, false, g.dst, pd.dst_desc());
  e.add_scratchpad(pd.scratchpad_desc());
}

void build_conv_bwd_data(Entry& e, const Conv2dParams& p, ConvLayout layout, bool bf16, ConvFormats f) {
  ConvGeom g(p, layout, bf16, f);
  dnnl::convolution_forward::primitive_desc hint(g.fwd_desc(false), cpu_engine());
  dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, g.src_f32_p, g.wei_p, g.dst_p,
                                          g.strides, g.dil, g.pad_l, g.pad_r);
  dnnl::convolution_backward_data::primitive_desc pd(d, user_scratchpad_attr(), cpu_engine(), hint);
  e.prim = dnnl::convolution_backward_data(pd);
  e.impl = pd.impl_info_str();
  e.add(DNNL_ARG_WEIGHTS, true, g.wei, pd.weights_desc());
  e.add(DNNL_ARG_DIFF_DST, true, g.dst, pd.diff_dst_desc());
  e.add(DNNL_ARG_DIFF_SRC, false, g.src, pd.diff_src_desc());
  e.add_scratchpad(pd.scratchpad_desc());
}

void build_conv_bwd_weights(Entry& e, const Conv2dParams& p, bool has_bias, ConvLayout layout, bool bf16, ConvFormats f) {
  ConvGeom g(p, layout, bf16, f);
  dnnl::convolution_forward::primitive_desc hint(g.fwd_desc(has_bias), cpu_engine());
  using cbw = dnnl::convolution_backward_weights;
  cbw::desc d = has_bias ? cbw::desc(dnnl::algorithm::convolution_direct, g.src_p, g.wei_f32_p, g.bias_p, g.dst_p,
                                     g.strides, g.dil, g.pad_l, g.pad_r)
                         : cbw::desc(dnnl::algorithm::convolution_direct, g.src_p, g.wei_f32_p, g.dst_p, g.strides,
                                     g.dil, g.pad_l, g.pad_r);
  cbw::primitive_desc pd(d, user_scratchpad_attr(), cpu_engine(), hint);
  e.prim = cbw(pd);
  e.impl = pd.impl_info_str();
  e.add(DNNL_ARG_SRC, true, g.src, pd.src_desc());
  e.add(DNNL_ARG_DIFF_DST, true, g.dst, pd.diff_dst_desc());
  e.add(DNNL_ARG_DIFF_WEIGHTS, false, g.wei, pd.diff_weights_desc());
  if (has_bias) e.add(DNNL_ARG_DIFF_BIAS, false, g.bias, pd.diff_bias_desc());
  e.add_scratchpad(pd.scratchpad_desc());
}

// Finds/creates the entry for one conv pass (this thread's).
Entry& conv_entry(const Conv2dParams& p, ConvPass pass, bool has_bias, bool relu, bool bf16 = false,
                  ConvFormats f = {}) {
  ConvLayout layout = g_layout[static_cast<int>(pass)].load(std::memory_order_relaxed);
  if (layout == ConvLayout::Auto) {
    // Measured (LeNet conv1, C=1, N=100): backward-data takes ~5 ms blocked vs
    // ~1 ms plain, because the blocked kernel pads C to 16. Everywhere else
    // blocked wins 2-3x, reorders included.
    layout = (pass == ConvPass::BackwardData && p.groups == 1 && p.C < 16) ? ConvLayout::Plain
                                                                           : ConvLayout::Blocked;
  }
  // bf16 kernels take input channels in blocks (16, or pairs of 16 for AMX):
  // with fewer per group (LeNet's conv1, C = 1) they do up to 32x redundant
  // work, so those convolutions stay float32. Measured on LeNet's conv1 in a
  // train step (N=100, 2 cores, Xeon with AMX): forward 1.70 ms in bf16
  // against 0.85 in float32, backward-weights 1.98 against 0.90.
  if (bf16 && p.C / p.groups < 16) bf16 = false;
  else if (bf16) layout = ConvLayout::Blocked;
  return get_entry(conv_key(p, pass, has_bias, relu, layout, bf16, f), [&](Entry& e) {
    switch (pass) {
      case ConvPass::Forward: build_conv_fwd(e, p, has_bias, relu, layout, bf16, f); break;
      case ConvPass::BackwardData: build_conv_bwd_data(e, p, layout, bf16, f); break;
      case ConvPass::BackwardWeights: build_conv_bwd_weights(e, p, has_bias, layout, bf16, f); break;
    }
  });
}

// Train plans' stride-1 3x3 and 5x5 convolutions whose activations are
// nChw16c on both sides (compiler/train_layout.cpp), in float32 plans on
// CPUs where oneDNN runs AVX-512, run all three passes on Jobflow's
// Winograd kernel at 16 lanes where a predict plan would run the forward
// one there (Winograd::worthwhile; the weight gradient with a bound of its
// own, train_winograd_weights). LeNet's conv2 (32 -> 64, 14x14, batch
// 100; Zen 5, 2 threads), ms per pass on oneDNN's direct kernels and on
// this one: forward 7.8-8.0 -> 5.1-6.1, backward data 7.8-8.1 -> 5.2-6.9,
// backward weights 8.9-11.1 -> 5.1-5.9. The weights
// change at every step, so the forward and backward-data passes transform
// them at every call (0.25 ms for that layer); the weight gradient is
// summed in the transformed domain (Winograd::backward_weights).
bool train_winograd(const Conv2dParams& p, bool bf16, ConvFormats f) {
  return !bf16 && f.src_blocked && f.dst_blocked && Winograd::preferred() && Winograd::lanes_for(p) == 16 &&
         Winograd::worthwhile(p);
}

// The weight gradient on the Winograd kernel too where each thread's sums
// (Winograd::weight_gradient_bytes: 36 C K floats) take at most 1 MB (LeNet's conv2: 295 KB): every thread
// zeroes, fills and reduces its own, which for wide layers (256 -> 256:
// 9.4 MB per thread) would cost more than the products it saves (not
// measured beyond LeNet's shapes: oneDNN keeps those).
bool train_winograd_weights(const Conv2dParams& p, bool bf16, ConvFormats f) {
  return train_winograd(p, bf16, f) && Winograd::weight_gradient_bytes(p) <= (int64_t{1} << 20);
}

// The input gradient of stride-1 convolution p as a convolution of dy: its
// channels swapped, the weights turned (Winograd::set_backward_data_weights)
// and the pads mirrored; false where a mirrored pad would be negative.
bool backward_data_as_conv(const Conv2dParams& p, Conv2dParams* q) {
  *q = p;
  q->N = p.N, q->C = p.K, q->H = p.OH, q->W = p.OW, q->K = p.C, q->OH = p.H, q->OW = p.W;
  q->pad_top = p.R - 1 - p.pad_top, q->pad_bottom = p.R - 1 - p.pad_bottom;
  q->pad_left = p.S - 1 - p.pad_left, q->pad_right = p.S - 1 - p.pad_right;
  return p.stride_h == 1 && p.stride_w == 1 && p.dil_h == 1 && p.dil_w == 1 && p.groups == 1 && q->pad_top >= 0 &&
         q->pad_bottom >= 0 && q->pad_left >= 0 && q->pad_right >= 0;
}

// This thread's Winograd kernel for p (Winograd's p: for backward data the
// mirrored convolution).
Entry& winograd_entry(const Conv2dParams& p, ConvPass pass) {
  Key key = conv_key(p, pass, false, false, ConvLayout::Blocked, false, {true, true});
  key[0] += 100;  // not a oneDNN primitive's entry
  return get_entry(key, [&](Entry& e) {
    e.wino = std::make_unique<Winograd>(p, 16);
    e.impl = "winograd:avx512";
  });
}

// ---------------------------------------------------------------------------
// Pooling

std::string describe(const Pool2dParams& p) {
  static const char* kinds[] = {"max", "avg_include_pad", "avg_exclude_pad"};
  std::ostringstream o;
  o << kinds[static_cast<int>(p.kind)] << " x=[" << p.N << "," << p.C << "," << p.H << "," << p.W << "] y=["
    << p.N << "," << p.C << "," << p.OH << "," << p.OW << "] kernel=(" << p.kh << "," << p.kw << ") stride=("
    << p.sh << "," << p.sw << ") pad(t,l,b,r)=(" << p.pad_top << "," << p.pad_left << "," << p.pad_bottom << ","
    << p.pad_right << ")";
  return o.str();
}

[[noreturn]] void pool_fail(const char* fn, const Pool2dParams& p, const std::string& why) {
  throw jobflow::Error(std::string("[pool2d] ") + fn + ": " + why + " (" + describe(p) + ")");
}

void check(const char* fn, const Pool2dParams& p) {
  if (p.N <= 0 || p.C <= 0 || p.H <= 0 || p.W <= 0 || p.OH <= 0 || p.OW <= 0 || p.kh <= 0 || p.kw <= 0 ||
      p.sh <= 0 || p.sw <= 0)
    pool_fail(fn, p, "sizes, kernel and stride must be positive");
  if (p.pad_top < 0 || p.pad_left < 0 || p.pad_bottom < 0 || p.pad_right < 0)
    pool_fail(fn, p, "padding must be >= 0");
  // A window lying entirely in padding has no defined max / exclude-pad average.
  if (p.pad_top >= p.kh || p.pad_bottom >= p.kh || p.pad_left >= p.kw || p.pad_right >= p.kw)
    pool_fail(fn, p, "padding must be smaller than the kernel");
  // (max_pool_plain's positions in the window must fit an int32.)
  if (p.kind == PoolKind::Max && p.kh > INT32_MAX / p.kw) pool_fail(fn, p, "a max pooling window of 2^31 taps or more");
  const int64_t oh = (p.H + p.pad_top + p.pad_bottom - p.kh) / p.sh + 1;
  const int64_t ow = (p.W + p.pad_left + p.pad_right - p.kw) / p.sw + 1;
  if (p.H + p.pad_top + p.pad_bottom < p.kh || p.W + p.pad_left + p.pad_right < p.kw || oh != p.OH ||
      ow != p.OW)
    pool_fail(fn, p, "output size inconsistent, expected OH=" + std::to_string(oh) + " OW=" + std::to_string(ow));
}

dnnl::algorithm pool_alg(PoolKind k) {
  switch (k) {
    case PoolKind::Max: return dnnl::algorithm::pooling_max;
    case PoolKind::AvgIncludePad: return dnnl::algorithm::pooling_avg_include_padding;
    case PoolKind::AvgExcludePad: return dnnl::algorithm::pooling_avg_exclude_padding;
  }
  return dnnl::algorithm::pooling_max;
}

// (Average pooling only: max pooling runs Jobflow's loops.)
enum class PoolPass { Inference = 10, Backward = 12 };

// 2x2 max pooling with stride 2 and no padding (LeNet's, VGG's, most
// classifiers' downsampling) runs on Jobflow's own loop (cpu/simd_kernels.h:
// 4-5x oneDNN's on plain NCHW); its workspace is then one index byte per
// output, read only by the same loop's backward.
bool own_max_2x2(const Pool2dParams& p) {
  return p.kind == PoolKind::Max && p.kh == 2 && p.kw == 2 && p.sh == 2 && p.sw == 2 && p.pad_top == 0 &&
         p.pad_left == 0 && p.pad_bottom == 0 && p.pad_right == 0;
}

// blocked: planes of 16-channel pixels (nChw16c).
MaxPool2x2Params max_2x2(const Pool2dParams& p, bool blocked = false) {
  return {blocked ? p.N * p.C / 16 : p.N * p.C, p.H, p.W, p.OH, p.OW, blocked ? 16 : 1};
}

// Every other max pooling on plain NCHW runs Jobflow's general loop
// (cpu::max_pool_plain: oneDNN's drops a NaN); its workspace is the position
// of each output's maximum in its window, a byte (an int32 for windows of
// more than 256 taps) per output.
MaxPoolPlainParams max_plain(const Pool2dParams& p) {
  return {p.N * p.C, p.H, p.W, p.OH, p.OW, p.kh, p.kw, p.sh, p.sw, p.pad_top, p.pad_left};
}

void check_blocked(const char* fn, const Pool2dParams& p, bool blocked) {
  if (blocked && (!own_max_2x2(p) || p.C % 16 != 0))
    pool_fail(fn, p, "nChw16c pooling needs 2x2 max pooling with stride 2, no pads, and channels a multiple of 16");
}

Key pool_key(const Pool2dParams& p, PoolPass pass) {
  return Key{static_cast<int64_t>(pass), p.N,         p.C,          p.H,          p.W,
             p.OH,                       p.OW,        p.kh,         p.kw,         p.sh,
             p.sw,                       p.pad_top,   p.pad_left,   p.pad_bottom, p.pad_right,
             static_cast<int64_t>(p.kind), omp_get_max_threads(), 0, 0, 0, 0, 0, 0, 0};
}

// Average pooling runs on oneDNN directly on NCHW: it is memory-bound and
// cheap, so reordering to a blocked layout and back would cost more than it
// could save.
dnnl::pooling_forward::desc pool_fwd_desc(const Pool2dParams& p, dnnl::prop_kind prop) {
  const memory::desc src({p.N, p.C, p.H, p.W}, dt::f32, tag::nchw);
  const memory::desc dst({p.N, p.C, p.OH, p.OW}, dt::f32, tag::nchw);
  return dnnl::pooling_forward::desc(prop, pool_alg(p.kind), src, dst, {p.sh, p.sw}, {p.kh, p.kw},
                                     {p.pad_top, p.pad_left}, {p.pad_bottom, p.pad_right});
}

Entry& pool_entry(const Pool2dParams& p, PoolPass pass) {
  return get_entry(pool_key(p, pass), [&](Entry& e) {
    const dnnl::prop_kind prop =
        pass == PoolPass::Inference ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
    dnnl::pooling_forward::primitive_desc fpd(pool_fwd_desc(p, prop), user_scratchpad_attr(), cpu_engine());
    // (Average pooling has no workspace.)
    if (pass != PoolPass::Backward) {
      e.prim = dnnl::pooling_forward(fpd);
      e.impl = fpd.impl_info_str();
      e.add(DNNL_ARG_SRC, true, fpd.src_desc(), fpd.src_desc());
      e.add(DNNL_ARG_DST, false, fpd.dst_desc(), fpd.dst_desc());
      e.add_scratchpad(fpd.scratchpad_desc());
    } else {
      dnnl::pooling_backward::desc bd(pool_alg(p.kind), fpd.src_desc(), fpd.dst_desc(), {p.sh, p.sw},
                                      {p.kh, p.kw}, {p.pad_top, p.pad_left}, {p.pad_bottom, p.pad_right});
      dnnl::pooling_backward::primitive_desc bpd(bd, user_scratchpad_attr(), cpu_engine(), fpd);
      e.prim = dnnl::pooling_backward(bpd);
      e.impl = bpd.impl_info_str();
      e.add(DNNL_ARG_DIFF_DST, true, bpd.diff_dst_desc(), bpd.diff_dst_desc());
      e.add(DNNL_ARG_DIFF_SRC, false, bpd.diff_src_desc(), bpd.diff_src_desc());
      e.add_scratchpad(bpd.scratchpad_desc());
    }
  });
}

// ---------------------------------------------------------------------------
// Matrix products on oneDNN's matmul primitive

// C[M,N] (+)= op(A)[M,K] * op(B)[K,N] on oneDNN's matmul and a float32
// destination: with bf16 operands (the entry's reorders convert the
// caller's float32 buffers, transposed or not), or on the caller's float32
// buffers as they are.
Entry& matmul_entry(bool ta, bool tb, int64_t M, int64_t N, int64_t K, bool accumulate, bool bf16) {
  const Key key{bf16 ? 40 : 41, M, N, K, ta, tb, accumulate, omp_get_max_threads(), 0, 0, 0, 0,
                0,  0, 0, 0, 0,  0,  0,          0,                     0, 0, 0, 0};
  return get_entry(key, [&](Entry& e) {
    const memory::desc a_user({M, K}, dt::f32, ta ? memory::dims{1, M} : memory::dims{K, 1});
    const memory::desc b_user({K, N}, dt::f32, tb ? memory::dims{1, K} : memory::dims{N, 1});
    const memory::desc c({M, N}, dt::f32, tag::ab);
    dnnl::primitive_attr attr = user_scratchpad_attr();
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.f);
      attr.set_post_ops(po);
    }
    // bf16 operands in the caller's own order (transposed or not): the
    // conversion from float32 is then a streaming pass, where oneDNN's
    // preferred blocked weights (BA16a64b2a) cost a reorder slower than the
    // product (LeNet's 3136x512 dense layer, AMX: 0.82 ms to reorder, 0.33
    // to multiply).
    const dt low = bf16 ? dt::bf16 : dt::f32;
    dnnl::matmul::desc d(memory::desc({M, K}, low, ta ? tag::ba : tag::ab),
                         memory::desc({K, N}, low, tb ? tag::ba : tag::ab), c);
    dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
    e.prim = dnnl::matmul(pd);
    e.impl = pd.impl_info_str();
    e.add(DNNL_ARG_SRC, true, a_user, pd.src_desc());
    e.add(DNNL_ARG_WEIGHTS, true, b_user, pd.weights_desc());
    e.add(DNNL_ARG_DST, false, c, c);
    e.add_scratchpad(pd.scratchpad_desc());
  });
}

}  // namespace

dnnl::engine& dnnl_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream strm(dnnl_engine());
  return strm;
}

void dnnl_execute(const dnnl::primitive& prim, const std::vector<dnnl_exec_arg_t>& args) {
  dnnl::error::wrap_c_api(dnnl_primitive_execute(prim.get(), dnnl_stream().get(), static_cast<int>(args.size()),
                                                 args.data()),
                          "could not execute a primitive");
}

// ---------------------------------------------------------------------------
// Public API

// Blocked activations need whole blocks of 16 channels.
void check_formats(const char* fn, const Conv2dParams& p, ConvFormats f) {
  if ((f.src_blocked && p.C % 16 != 0) || (f.dst_blocked && p.K % 16 != 0))
    conv_fail(fn, p, "nChw16c activations need a channel count that is a multiple of 16");
}

void conv2d_forward(const Conv2dParams& p, const float* x, const float* w, const float* bias, float* y,
                    bool fuse_relu, bool bf16, ConvFormats f) {
  check("forward", p);
  check_formats("forward", p, f);
  if (!x || !w || !y) conv_fail("forward", p, "null buffer");
  if (train_winograd(p, bf16, f)) {
    Winograd& k = *winograd_entry(p, ConvPass::Forward).wino;
    k.set_weights(w);
    k.run(x, y, bias, nullptr, fuse_relu ? 0.f : -INFINITY, INFINITY);
    return;
  }
  try {
    Entry& e = conv_entry(p, ConvPass::Forward, bias != nullptr, fuse_relu, bf16, f);
    e.run({{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, y}});
  } catch (const dnnl::error& err) {
    conv_fail("forward", p, std::string("oneDNN error: ") + err.what());
  }
}

void conv2d_backward_data(const Conv2dParams& p, const float* w, const float* dy, float* dx, bool bf16,
                          ConvFormats f) {
  check("backward_data", p);
  check_formats("backward_data", p, f);
  if (!w || !dy || !dx) conv_fail("backward_data", p, "null buffer");
  if (Conv2dParams q; backward_data_as_conv(p, &q) && train_winograd(q, bf16, f)) {
    Winograd& k = *winograd_entry(q, ConvPass::BackwardData).wino;
    k.set_backward_data_weights(w);
    k.run(dy, dx, nullptr, nullptr, -INFINITY, INFINITY);
    return;
  }
  try {
    Entry& e = conv_entry(p, ConvPass::BackwardData, false, false, bf16, f);
    e.run({{DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_SRC, dx}});
  } catch (const dnnl::error& err) {
    conv_fail("backward_data", p, std::string("oneDNN error: ") + err.what());
  }
}

void conv2d_backward_weights(const Conv2dParams& p, const float* x, const float* dy, float* dw, float* dbias,
                             bool bf16, ConvFormats f) {
  check("backward_weights", p);
  check_formats("backward_weights", p, f);
  if (!x || !dy || !dw) conv_fail("backward_weights", p, "null buffer");
  if (train_winograd_weights(p, bf16, f)) {
    winograd_entry(p, ConvPass::BackwardWeights).wino->backward_weights(x, dy, dw, dbias);
    return;
  }
  try {
    Entry& e = conv_entry(p, ConvPass::BackwardWeights, dbias != nullptr, false, bf16, f);
    e.run({{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, dbias}});
  } catch (const dnnl::error& err) {
    conv_fail("backward_weights", p, std::string("oneDNN error: ") + err.what());
  }
}

size_t pool2d_workspace_bytes(const Pool2dParams& p) {
  check("workspace_bytes", p);
  if (p.kind != PoolKind::Max) return 0;
  if (own_max_2x2(p)) return static_cast<size_t>(p.N * p.C * p.OH * p.OW);
  return static_cast<size_t>(p.N * p.C * p.OH * p.OW) * max_pool_plain_index_bytes(max_plain(p));
}

void pool2d_forward(const Pool2dParams& p, const float* x, float* y, void* workspace, bool blocked) {
  check("forward", p);
  check_blocked("forward", p, blocked);
  if (!x || !y) pool_fail("forward", p, "null buffer");
  try {
    // Without a workspace there is nothing to record, so use the (slightly
    // cheaper) inference primitive; average pooling never needs one.
    const bool train = workspace != nullptr && p.kind == PoolKind::Max;
    if (own_max_2x2(p)) {
      max_pool_2x2(max_2x2(p, blocked), x, y, train ? static_cast<uint8_t*>(workspace) : nullptr);
      return;
    }
    if (p.kind == PoolKind::Max) {
      max_pool_plain(max_plain(p), x, y, train ? workspace : nullptr);
      return;
    }
    // (Average pooling: no workspace, the inference primitive.)
    pool_entry(p, PoolPass::Inference).run({{DNNL_ARG_SRC, x}, {DNNL_ARG_DST, y}});
  } catch (const dnnl::error& err) {
    pool_fail("forward", p, std::string("oneDNN error: ") + err.what());
  }
}

void pool2d_backward(const Pool2dParams& p, const float* dy, const void* workspace, float* dx, bool blocked) {
  check("backward", p);
  check_blocked("backward", p, blocked);
  if (!dy || !dx) pool_fail("backward", p, "null buffer");
  if (p.kind == PoolKind::Max && !workspace)
    pool_fail("backward", p, "max pooling backward needs the workspace filled by pool2d_forward");
  if (own_max_2x2(p)) {
    max_pool_2x2_backward(max_2x2(p, blocked), dy, static_cast<const uint8_t*>(workspace), dx);
    return;
  }
  if (p.kind == PoolKind::Max) {
    max_pool_plain_backward(max_plain(p), dy, workspace, dx);
    return;
  }
  try {
    Entry& e = pool_entry(p, PoolPass::Backward);
    e.run({{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_SRC, dx}});
  } catch (const dnnl::error& err) {
    pool_fail("backward", p, std::string("oneDNN error: ") + err.what());
  }
}

namespace {
// Both precisions' entry point: checks, runs, and names the shape in errors.
void run_matmul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, const float* b, float* c,
                bool accumulate, bool bf16) {
  const std::string what = std::string("[matmul] ") + (bf16 ? "bf16 " : "") + "M=" + std::to_string(M) +
                           " N=" + std::to_string(N) + " K=" + std::to_string(K);
  if (M <= 0 || N <= 0 || K <= 0 || !a || !b || !c)
    throw jobflow::Error(what + ": sizes must be positive and buffers non-null");
  try {
    matmul_entry(ta, tb, M, N, K, accumulate, bf16).run({{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  } catch (const dnnl::error& err) {
    throw jobflow::Error(what + ": oneDNN error: " + err.what());
  }
}
}  // namespace

void matmul_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, const float* b, float* c,
                 bool accumulate) {
  run_matmul(ta, tb, M, N, K, a, b, c, accumulate, true);
}

bool matmul_f32_on_primitive(bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  return !ta && tb && M >= 32 && M * N * K >= (int64_t{1} << 20) && !avx2_at_most();
}

void matmul_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, const float* b, float* c,
                bool accumulate) {
  run_matmul(ta, tb, M, N, K, a, b, c, accumulate, false);
}

bool pool2d_own_max_2x2(const Pool2dParams& p) { return own_max_2x2(p); }

void pool2d_backward_relu_masked(const Pool2dParams& p, const float* dy, const void* workspace, const float* y,
                                 float* dx, bool blocked) {
  check("backward", p);
  check_blocked("backward", p, blocked);
  if (!dy || !dx || !workspace || !y) pool_fail("backward", p, "null buffer");
  if (!own_max_2x2(p)) pool_fail("backward", p, "relu-masked gradient needs 2x2 max pooling with stride 2, no pads");
  max_pool_2x2_backward(max_2x2(p, blocked), dy, static_cast<const uint8_t*>(workspace), dx, y);
}

void set_conv_layout(ConvPass pass, ConvLayout layout) {
  g_layout[static_cast<int>(pass)].store(layout, std::memory_order_relaxed);
}

ConvLayout conv_layout(ConvPass pass) { return g_layout[static_cast<int>(pass)].load(std::memory_order_relaxed); }

bool conv2d_on_winograd(const Conv2dParams& p, ConvPass pass, ConvFormats f) {
  Conv2dParams q;
  switch (pass) {
    case ConvPass::Forward: return train_winograd(p, false, f);
    case ConvPass::BackwardData: return backward_data_as_conv(p, &q) && train_winograd(q, false, f);
    case ConvPass::BackwardWeights: return train_winograd_weights(p, false, f);
  }
  return false;
}

const char* conv2d_impl_name(const Conv2dParams& p, ConvPass pass, bool has_bias) {
  check("impl_name", p);
  try {
    // Entries are never erased except by clear_dnnl_cache, so the string outlives this call
    // (on this thread: the entry is this thread's).
    return conv_entry(p, pass, has_bias, false).impl.c_str();
  } catch (const dnnl::error& err) {
    conv_fail("impl_name", p, std::string("oneDNN error: ") + err.what());
  }
}

void clear_dnnl_cache() {
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  thread_cache();  // this thread's entries go now; other threads' at their next call
}

}  // namespace jobflow::cpu

// cpu/layout_ops.cpp — oneDNN kernels on compile-time memory formats (see
// layout_ops.h).
#include "cpu/layout_ops.h"

#include "cpu/isa.h"
#include "cpu/threads.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include <omp.h>

#include "cpu/simd_kernels.h"
#include "cpu/dnnl_common.h"
#include "session_internal.h"

namespace jobflow::cpu {

using memory = dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

std::string desc_str(const MemDesc& md) {
  const dnnl_memory_desc_t& d = md.data;
  std::string type = d.data_type == dnnl_bf16 ? "bf16" : d.data_type == dnnl_f32 ? "f32" : "other";
  if (d.format_kind != dnnl_blocked) return type + ":any";
  const int n = d.ndims;
  const auto& b = d.format_desc.blocking;
  std::vector<int> dims(n);
  std::iota(dims.begin(), dims.end(), 0);
  std::stable_sort(dims.begin(), dims.end(), [&](int x, int y) { return b.strides[x] > b.strides[y]; });
  std::string s;
  for (int k : dims) {
    bool blocked = false;
    for (int i = 0; i < b.inner_nblks; ++i) blocked |= b.inner_idxs[i] == k;
    s += static_cast<char>((blocked ? 'A' : 'a') + k);
  }
  for (int i = 0; i < b.inner_nblks; ++i) s += std::to_string(b.inner_blks[i]) + static_cast<char>('a' + b.inner_idxs[i]);
  return type + ":" + s;
}

MemDesc plain_desc(const Shape& shape, dt type) {
  memory::dims dims(shape.begin(), shape.end());
  memory::dims strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return MemDesc(dims, type, strides);
}

bool is_plain_f32(const MemDesc& md) {
  memory::dims dims = md.dims();
  return md == plain_desc(Shape(dims.begin(), dims.end()), dt::f32);
}

bool rows_of_channels(const MemDesc& md) {
  const memory::dims d = md.dims();
  if (d.size() != 4 || d[2] != 1 || d[3] != 1 || md.data_type() != dt::f32) return false;
  using tag = memory::format_tag;
  for (tag t : {tag::abcd, tag::acdb}) if (md == MemDesc(d, dt::f32, t)) return true;
  return (md == MemDesc(d, dt::f32, tag::aBcd16b) && d[1] % 16 == 0) ||
         (md == MemDesc(d, dt::f32, tag::aBcd8b) && d[1] % 8 == 0);
}

namespace {

dnnl::primitive_attr scratch_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

memory user_mem(const MemDesc& md) { return memory(md, dnnl_engine(), DNNL_MEMORY_NONE); }

// Whether md's images are consecutive blocks of its memory: a blocked
// format whose batch dimension is neither blocked nor inside another one
// (n outermost: nchw, nhwc, nChw16c, ...).
bool images_consecutive(const MemDesc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.ndims < 1 || d.offset0 != 0 || d.padded_dims[0] != d.dims[0]) return false;
  const auto& b = d.format_desc.blocking;
  for (int i = 0; i < b.inner_nblks; ++i)
    if (b.inner_idxs[i] == 0) return false;
  const size_t bytes = md.get_size();
  return d.dims[0] > 0 && bytes % static_cast<size_t>(d.dims[0]) == 0 &&
         static_cast<size_t>(b.strides[0]) * memory::data_type_size(md.data_type()) == bytes / d.dims[0];
}

// md (images_consecutive) with `n` images: the same layout per image.
MemDesc with_images(const MemDesc& md, int64_t n) {
  MemDesc r = md;
  r.data.dims[0] = r.data.padded_dims[0] = n;
  return r;
}

const char* alg_name(dnnl::algorithm a) {
  switch (a) {
    case dnnl::algorithm::eltwise_relu: return "relu";
    case dnnl::algorithm::eltwise_clip: return "clip";
    case dnnl::algorithm::eltwise_logistic: return "logistic";
    case dnnl::algorithm::eltwise_swish: return "swish";
    case dnnl::algorithm::eltwise_hardswish: return "hardswish";
    case dnnl::algorithm::eltwise_linear: return "linear";
    default: return "eltwise";
  }
}

}  // namespace

void PerThreadCount::init(Make make, std::vector<dnnl_exec_arg_t> args) {
  make_ = std::move(make);
  args_ = std::move(args);
  threads0_ = omp_get_max_threads();
}

namespace {
bool is_reference(const dnnl::primitive& p) {
  const char* impl = nullptr;
  const_dnnl_primitive_desc_t pd = nullptr;
  if (dnnl_primitive_get_primitive_desc(p.get(), &pd) != dnnl_success) return false;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl) return false;
  return std::string(impl).rfind("ref", 0) == 0;
}
}  // namespace

void PerThreadCount::execute() const {
  const Variant& v = variant(fixed_ > 0 ? fixed_ : omp_get_max_threads());
  dnnl_execute(v.prim, v.args);
}

void PerThreadCount::prepare() const { variant(fixed_ > 0 ? fixed_ : omp_get_max_threads()); }

const PerThreadCount::Variant& PerThreadCount::variant(int t) const {
  for (const Variant& v : variants_)
    if (v.threads == t) return v;
  Variant v;
  v.threads = t;
  MemDesc sp;
  {
    ScopedThreads at(t);  // t is fixed_ when set: oneDNN's regions then ask for it
    v.prim = make_(&sp);
  }
  if (fixed_ <= 0 && t != threads0_ && is_reference(v.prim)) {
    // The formats suit threads0_'s kernels only: build for that count (the
    // primitive then runs its own team of that size).
    ScopedThreads at(threads0_);
    v.prim = make_(&sp);
  }
  v.args = args_;
  if (sp.get_size() != 0) {
    v.scratch = memory(sp, dnnl_engine());
    v.args.push_back({DNNL_ARG_SCRATCHPAD, v.scratch.get()});
  }
  variants_.push_back(std::move(v));
  return variants_.back();
}

void PerThreadCount::init_reorder(const dnnl::memory& from, const dnnl::memory& to) {
  const MemDesc f = from.get_desc(), t = to.get_desc();
  init(
      [f, t](MemDesc* sp) {
        dnnl::reorder::primitive_desc pd(dnnl_engine(), f, dnnl_engine(), t);
        *sp = MemDesc();
        return dnnl::primitive(dnnl::reorder(pd));
      },
      {{DNNL_ARG_FROM, from.get()}, {DNNL_ARG_TO, to.get()}});
}

Attrs LayoutOp::attributes() const {
  Attrs a = orig_->attributes();
  const std::string f = fused();
  if (!f.empty()) a.push_back({"fused", f});
  if (in_place_ >= 0) a.push_back({"in_place", int64_t{1}});
  a.push_back({"layout", desc_str(dst_)});
  return a;
}

// ---------------------------------------------------------------- conv

std::string ConvFusion::text() const {
  std::string s;
  auto add = [&](const std::string& t) { s += (s.empty() ? "" : "+") + t; };
  if (in_scale) add("scale");
  if (bn) add("bn");
  if (residual && !pw) add("sum");
  for (const auto& e : post) add(alg_name(e.alg));
  if (dw) {
    add(dw_max ? "maxpool" : "dw");
    for (const auto& e : dw_post) add(alg_name(e.alg));
  }
  if (gap) add("gap");
  if (pw) {  // the residual is the projection's, added before its activation
    add("pw");
    if (residual || pw_adds_expanded) add("sum");
    for (const auto& e : pw_post) add(alg_name(e.alg));
  }
  return s;
}

namespace {

// The post-ops of f: the residual sum, the eltwise steps (less a last swish
// when `skip_last`), then the fused depthwise convolution and its steps.
dnnl::post_ops post_ops_of(const ConvFusion& f, bool skip_last) {
  dnnl::post_ops po;
  if (f.residual) po.append_sum(1.f);
  for (size_t i = 0; i + (skip_last ? 1 : 0) < f.post.size(); ++i)
    po.append_eltwise(1.f, f.post[i].alg, f.post[i].alpha, f.post[i].beta);
  if (f.dw) {
    po.append_dw(dt::f32, dt::f32, dt::f32, f.dw_p.R, f.dw_p.stride_h, f.dw_p.pad_top, 0, {});
    for (const auto& e : f.dw_post) po.append_eltwise(1.f, e.alg, e.alpha, e.beta);
  }
  return po;
}

}  // namespace

bool LayoutConv::oneDNN_winograd(const Conv2dParams& p) {
  return !avx2_at_most() && p.R == 3 && p.S == 3 && p.stride_h == 1 && p.stride_w == 1 && p.dil_h == 1 &&
         p.dil_w == 1 && p.groups == 1 && p.C >= 16 && p.K >= 16 && p.C * p.K <= 256 * 256;
}

namespace {
// A oneDNN post-op step as one of Jobflow's own kernels' steps (the one
// mapping both small_1x1 and the expansion kernel use); false for a step
// they lack.
bool small_step_of(const EltwiseStep& e, SmallStep* s) {
  using A = dnnl::algorithm;
  if (e.alg == A::eltwise_relu && e.alpha == 0.f) *s = {SmallStep::Relu};
  else if (e.alg == A::eltwise_clip) *s = {SmallStep::Clip, e.alpha, e.beta};
  else if (e.alg == A::eltwise_logistic) *s = {SmallStep::Logistic};
  else if (e.alg == A::eltwise_swish && e.alpha == 1.f) *s = {SmallStep::Swish};
  else if (e.alg == A::eltwise_hardswish) *s = {SmallStep::HardSwish};
  else if (e.alg == A::eltwise_linear) *s = {SmallStep::Linear, e.alpha, e.beta};
  else return false;
  return true;
}

// The one activation `post` comes to in the expansion kernel (relu and
// clip: a clamp; hardswish; swish); false for anything else.
bool activation_of(const std::vector<EltwiseStep>& post, Activation* a) {
  *a = {};
  if (post.empty()) return true;
  SmallStep s{};
  if (post.size() > 1 || !small_step_of(post[0], &s)) return false;
  switch (s.kind) {
    case SmallStep::Relu: *a = {Activation::Clamp, 0.f, INFINITY}; return true;
    case SmallStep::Clip: *a = {Activation::Clamp, s.alpha, s.beta}; return true;
    case SmallStep::HardSwish: a->kind = Activation::HardSwish; return true;
    case SmallStep::Swish: a->kind = Activation::Swish; return true;
    default: return false;
  }
}
}  // namespace

bool LayoutConv::fuses_projection(const ConvFusion& f, const Conv2dParams& pw, const ConvFusion& fpw, int threads) {
  Activation a;
  const int64_t t = std::max(1, threads);
  return own_expand_dw() && f.dw && !f.pw && !f.residual && !fpw.bn && !fpw.dw && !fpw.in_scale &&
         activation_of(fpw.post, &a) && ExpandDepthwise::fits_projection(f.dw_p, pw) &&
         (f.dw_p.N >= t || f.dw_p.OH >= 14 * t);
}

bool LayoutConv::adds_expanded(const Conv2dParams& p, const ConvFusion& f, const Conv2dParams& pw,
                               const ConvFusion& fpw, int threads) {
  return fpw.residual && fuses_projection(f, pw, fpw, threads) && ExpandDepthwise::fits_expanded_residual(p, f.dw_p, pw);
}

bool LayoutConv::small_steps(const Conv2dParams& p, const ConvFusion& f, const MemDesc& src_md,
                             std::vector<SmallStep>* steps) {
  const memory::dims sd{p.N, p.C, p.H, p.W};
  if (!own_avx512_kernels() || p.H != 1 || p.W != 1 || p.R != 1 || p.S != 1 || p.OH != 1 || p.OW != 1 ||
      p.groups != 1 || p.pad_top || p.pad_left || p.pad_bottom || p.pad_right || f.residual || f.dw || f.pw ||
      f.in_scale || f.gap || p.N * p.C * p.K > (int64_t{1} << 20) ||
      (src_md != MemDesc(sd, dt::f32, tag::acdb) && src_md != MemDesc(sd, dt::f32, tag::abcd)))
    return false;
  std::vector<SmallStep> out(f.post.size());
  for (size_t i = 0; i < f.post.size(); ++i)
    if (!small_step_of(f.post[i], &out[i])) return false;
  if (steps) *steps = std::move(out);
  return true;
}

bool LayoutConv::scales_input(const Conv2dParams& p, const ConvFusion& f) {
  return p.R == 1 && p.S == 1 && p.groups == 1 && !f.dw && p.H * p.W >= 4 * p.K;
}

bool LayoutConv::own_expand_dw() { return !avx2_at_most() && ExpandDepthwise::supported(); }

bool LayoutConv::own_expand_dw_bf16() { return own_expand_dw() && ExpandDepthwise::supports_bf16(); }

bool LayoutConv::expand_dw_bf16_for(const Conv2dParams& p) {
  return own_expand_dw_bf16() && (bf16_support() != Bf16Support::Amx || p.OH * p.OW >= 28 * 28);
}

bool LayoutConv::fuses_max_pool(const Conv2dParams& p, const ConvFusion& f, const Conv2dParams& pool) {
  Activation a;
  return own_expand_dw() && !f.residual && !f.dw && !f.pw && !f.in_scale && !f.gap && p.C <= 4 &&
         activation_of(f.post, &a) && ExpandDepthwise::fits_max_pool(p, pool, a) &&
         ExpandDepthwise::ring_bytes(p, pool) <= (size_t{1} << 20);
}

bool LayoutConv::fuses_depthwise(const Conv2dParams& p, const ConvFusion& f, const Conv2dParams& dw,
                                 const ConvFusion& fdw) {
  if (own_expand_dw()) {
    Activation a;
    if (f.residual || f.dw || f.in_scale || fdw.bn || fdw.residual || fdw.dw || fdw.in_scale || !activation_of(f.post, &a) ||
        !activation_of(fdw.post, &a) || !ExpandDepthwise::fits(p, dw))
      return false;
    // A first convolution larger than 1x1 only on an image's few channels
    // (a network's first layer); deeper ones are oneDNN's to compute.
    if (p.R > 1 && p.C > 4) return false;
    // The R expanded rows a thread keeps should stay in its L2 (1-2 MB on
    // these CPUs); mobilenet_v2's largest: 129 KB.
    return ExpandDepthwise::ring_bytes(p, dw) <= (size_t{1} << 20);
  }
  if (p.R != 1 || p.S != 1 || p.stride_h != 1 || p.stride_w != 1 || p.groups != 1 || p.pad_top || p.pad_left ||
      p.pad_bottom || p.pad_right || f.residual || f.dw || f.in_scale)
    return false;
  if (dw.groups != dw.C || dw.K != dw.C || dw.C != p.K || dw.N != p.N || dw.H != p.OH || dw.W != p.OW ||
      dw.R != dw.S || (dw.R != 3 && dw.R != 5) || dw.stride_h != 2 || dw.stride_w != 2 || dw.dil_h != 1 ||
      dw.dil_w != 1 || dw.pad_top != dw.R / 2 || dw.pad_left != dw.R / 2 || dw.OH != (dw.H + 1) / 2 ||
      dw.OW != (dw.W + 1) / 2 || fdw.bn || fdw.residual || fdw.dw)
    return false;
  auto swish = [](const std::vector<EltwiseStep>& post) {
    return std::any_of(post.begin(), post.end(), [](const EltwiseStep& e) { return e.alg == dnnl::algorithm::eltwise_swish; });
  };
  if (swish(f.post) || swish(fdw.post)) return false;  // oneDNN's swish is the slow part (cpu/simd_kernels.h)
  ConvFusion both = f;
  both.dw = true;
  both.dw_p = dw;
  both.dw_post = fdw.post;
  try {
    const MemDesc src({p.N, p.C, p.H, p.W}, dt::f32, tag::aBcd8b), dst({p.N, p.K, p.OH, p.OW}, dt::f32, tag::aBcd8b);
    const MemDesc wei({p.K, p.C, 1, 1}, dt::f32, tag::any), bias({p.K}, dt::f32, tag::a);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                      wei, bias, dst, {1, 1}, {0, 0}, {0, 0});
    dnnl::primitive_attr attr = scratch_attr();
    attr.set_post_ops(post_ops_of(both, false));
    dnnl::convolution_forward::primitive_desc pd(d, attr, dnnl_engine());
    return std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
  } catch (const dnnl::error&) {
    return false;
  }
}

std::string LayoutConv::fused() const {
  // The original's own relu (relu=1) is among its attributes already.
  ConvFusion f = f_;
  if (orig_->attr_int("relu") && !f.post.empty()) f.post.erase(f.post.begin());
  return f.text();
}

LayoutConv::LayoutConv(std::shared_ptr<const Primitive> orig, TensorSpec out, const Conv2dParams& p, ConvFusion f,
                       const MemDesc& src_md, const MemDesc* res_md, bool plain_dst, dt compute,
                       std::vector<std::shared_ptr<internal::VariableEntry>> sources, bool refresh, int threads)
    : LayoutOp(std::move(orig), {std::move(out)}), p_(p), f_(std::move(f)), sources_(std::move(sources)),
      refresh_(refresh), bf16_(compute == dt::bf16) {
  auto& eng = dnnl_engine();
  const memory::dims sd{p.N, p.C, p.H, p.W}, dd{p.N, p.K, p.OH, p.OW};
  const memory::dims wd = p.groups == 1 ? memory::dims{p.K, p.C, p.R, p.S}
                                        : memory::dims{p.groups, p.K / p.groups, p.C / p.groups, p.R, p.S};
  user_w_md_ = MemDesc(wd, dt::f32, p.groups == 1 ? tag::oihw : tag::goihw);
  // oneDNN 2.6's AVX2 1x1 kernel with a fused depthwise convolution reads
  // a bias whether or not there is one (no bias: a null-pointer read), so
  // that case gets a zero bias.
  const bool has_bias = f_.bias || f_.bn || f_.dw;
  const MemDesc src_any(sd, compute, tag::any), wei_any(wd, compute, tag::any), bias_md({p.K}, dt::f32, tag::a);
  // Inputs: x, w, [bias], [bn: mean, var, [offset], [scale]], [depthwise:
  // w, [bias]], [projection: w, [bias]], [input scale (never with a
  // depthwise convolution)], [residual (with one, only the projection's)].
  const int after_weights = 2 + (f_.bias ? 1 : 0) + (f_.bn ? 2 + f_.bn_offset + f_.bn_scale : 0) +
                            (f_.dw && !f_.dw_max ? 1 + f_.dw_bias : 0) + (f_.pw ? 1 + f_.pw_bias : 0);
  if (f_.in_scale) scale_input_ = after_weights;
  if (f_.residual) res_input_ = after_weights + (f_.in_scale ? 1 : 0);
  versions_.assign(sources_.size(), 0);
  if (f_.in_scale && (compute != dt::f32 || !scales_input(p, f_)))
    throw std::invalid_argument("LayoutConv: an input scale on a convolution scales_input() does not take");
  // A 1x1 convolution of 1 x 1 float32 images (a squeeze-and-excitation's
  // reduce and expand) with bias, batch norm and element-wise steps at
  // most: Jobflow's loop on the calling thread (small_1x1), which reads
  // and writes such images channels-last and row-major alike.
  if (compute == dt::f32 && small_steps(p, f_, src_md, &small_steps_)) {
    small_ = true;
    impl_ = "small_1x1:avx512";
    dst_ = MemDesc(dd, dt::f32, plain_dst ? tag::abcd : tag::acdb);
    if (f_.bias || f_.bn) bias_ = memory(bias_md, eng);
    return;
  }
  if (compute == dt::f32 && !plain_dst && !f_.in_scale && Winograd::preferred() && Winograd::worthwhile(p)) {
    // Jobflow's Winograd kernel, when its epilogue covers the fusion: bias,
    // a residual in its own format (nChw16c with AVX-512, else nChw8c: the
    // formats oneDNN's kernels around it choose), at most one clamp.
    const int lanes = Winograd::lanes_for(p);
    const tag btag = lanes == 16 ? tag::aBcd16b : tag::aBcd8b;
    const MemDesc blocked(dd, dt::f32, btag), src_blocked(sd, dt::f32, btag);
    Activation act;
    // (A channels-last residual is read as it is: resnet18's first block
    // adds the max pool's output, which keeps the stem's acdb.)
    const bool res_nhwc = f_.residual && *res_md == MemDesc(dd, dt::f32, tag::acdb) && p.K % lanes == 0;
    const bool ok = (!f_.residual || *res_md == blocked || res_nhwc) && activation_of(f_.post, &act) &&
                    (act.kind == Activation::None || act.kind == Activation::Clamp);
    if (ok) {
      res_nhwc_ = res_nhwc;
      const float lo = act.kind == Activation::Clamp ? act.lo : -INFINITY;
      const float hi = act.kind == Activation::Clamp ? act.hi : INFINITY;
      wino_ = std::make_unique<Winograd>(p, lanes);
      impl_ = std::string(p.R == 3 ? "winograd_4x4_3x3:" : "winograd_2x2_5x5:") + (lanes == 16 ? "avx512" : "avx2");
      lo_ = lo, hi_ = hi;
      dst_ = blocked;
      src_user_ = user_mem(src_md);
      reorder_src_ = src_md != src_blocked;
      if (reorder_src_) {
        src_prim_ = memory(src_blocked, eng);
        src_reorder_.init_reorder(src_user_, src_prim_);
      }
      if (has_bias) bias_ = memory(bias_md, eng);
      return;
    }
  }
  if (f_.gap && !(f_.dw && own_expand_dw() && !f_.pw))
    throw std::invalid_argument("LayoutConv: channel means of an output that is not Jobflow's depthwise kernel's");
  if (f_.dw_max && !(f_.dw && own_expand_dw() && compute == dt::f32 && !f_.pw && !f_.gap))
    throw std::invalid_argument("LayoutConv: a fused max pool off Jobflow's float32 kernel");
  if (f_.dw && own_expand_dw()) {
    if (compute != dt::f32 && !own_expand_dw_bf16())
      throw std::invalid_argument("LayoutConv: a fused depthwise convolution in bfloat16 on a CPU without AVX512_BF16");
    // Jobflow's expansion + depthwise kernel (cpu/expand_dw.h), channels-last
    // in and out, in the plan's precision (bf16: bfloat16 data, see
    // ExpandDepthwise); fuses_depthwise() checked that each stage's
    // post-ops come to one activation (clamp, hardswish, swish).
    Activation a1, a2, a3;
    activation_of(f_.post, &a1);
    activation_of(f_.dw_post, &a2);
    activation_of(f_.pw_post, &a3);  // fuses_projection() checked it
    if (f_.pw_adds_expanded && f_.residual)
      throw std::invalid_argument("LayoutConv: a residual input and the first convolution's output as the residual");
    expdw_ = std::make_unique<ExpandDepthwise>(p, f_.dw_p, a1, a2, f_.pw ? &f_.pw_p : nullptr, a3,
                                               f_.pw && f_.pw_adds_expanded, bf16_, f_.dw_max);
    impl_ = bf16_ ? "expand_dw:avx512_bf16" : "expand_dw:avx512";
    const Conv2dParams& q = f_.pw ? f_.pw_p : f_.dw_p;
    // (A bf16 block whose output leaves the chain, a return, writes float32
    // as every bf16 convolution does there.)
    dst_ = MemDesc({q.N, q.K, q.OH, q.OW}, plain_dst ? dt::f32 : compute, tag::acdb);
    if (f_.gap) out_.push_back({{q.N, q.K, 1, 1}, DType::Float32});
    if (f_.residual) {  // the projection's, read channels-last (a copy when it comes in another format)
      if (!f_.pw || !res_md) throw std::invalid_argument("LayoutConv: a residual on the expansion + depthwise kernel");
      if (*res_md != dst_) {
        res_user_ = user_mem(*res_md);
        res_buf_ = memory(dst_, eng);
        res_reorder_.init_reorder(res_user_, res_buf_);
      }
    }
    src_user_ = user_mem(src_md);
    if (expdw_->padded_input()) {
      // The first convolution's input with its padding as zeros around it
      // (a network's first convolution on the image): made once, the
      // reorder writes its inside at every call.
      int64_t hx, wx;
      expdw_->input_dims(&hx, &wx);
      const MemDesc padded({p.N, p.C, hx, wx}, compute, tag::acdb);
      src_prim_ = memory(padded, eng);
      std::memset(src_prim_.get_data_handle(), 0, padded.get_size());
      reorder_src_ = true;
      // cpu::nchw_to_nhwc (_bf16)
      own_transpose_ = src_md == MemDesc(sd, dt::f32, tag::nchw) && p.C <= 4 && (!bf16_ || own_bf16_kernels());
      if (!own_transpose_) {
        pad_inside_ =
            memory(padded.submemory_desc(sd, {0, 0, p.pad_top, p.pad_left}), eng, src_prim_.get_data_handle());
        src_reorder_.init_reorder(src_user_, pad_inside_);
      }
    } else {
      const MemDesc src_nhwc(sd, compute, tag::acdb);
      reorder_src_ = src_md != src_nhwc;
      if (reorder_src_) {
        src_prim_ = memory(src_nhwc, eng);
        src_reorder_.init_reorder(src_user_, src_prim_);
      }
    }
    if (f_.bias || f_.bn) bias_ = memory(bias_md, eng);
    return;
  }
  // With a fused depthwise convolution the formats are fixed (as
  // fuses_depthwise() checked them): the descriptor's destination is the
  // 1x1's, the primitive's the depthwise one's.
  const MemDesc dst_md = f_.dw      ? MemDesc(dd, dt::f32, tag::aBcd8b)
                         : plain_dst ? MemDesc(dd, dt::f32, tag::nchw)
                                     : MemDesc(dd, compute, tag::any);
  const MemDesc src_any_or_fixed = f_.dw ? MemDesc(sd, dt::f32, tag::aBcd8b) : src_any;
  using cf = dnnl::convolution_forward;
  const memory::dims strides{p.stride_h, p.stride_w}, dil{p.dil_h - 1, p.dil_w - 1}, pl{p.pad_top, p.pad_left},
      pr{p.pad_bottom, p.pad_right};
  dnnl::algorithm alg = dnnl::algorithm::convolution_direct;
  if (compute == dt::f32 && !plain_dst && !f_.dw && oneDNN_winograd(p)) alg = dnnl::algorithm::convolution_winograd;
  auto make_desc = [&](dnnl::algorithm a, const MemDesc& s, const MemDesc& w, const MemDesc& y) {
    return has_bias ? cf::desc(dnnl::prop_kind::forward_inference, a, s, w, bias_md, y, strides, dil, pl, pr)
                    : cf::desc(dnnl::prop_kind::forward_inference, a, s, w, y, strides, dil, pl, pr);
  };
  // An input scale at batch N > 1 (scales_input): a primitive for one
  // image, run once per image on the weights scaled by that image's
  // factors, on that image of the source and the output. It reads the
  // source in the format it comes in where that keeps an image's values
  // together (every format of the chain) and oneDNN has more than its
  // reference kernel for it; otherwise in oneDNN's choice for one image,
  // the whole batch reordered into it first.
  per_image_ = f_.in_scale && p.N > 1;
  const MemDesc one_any({1, p.C, p.H, p.W}, compute, tag::any);
  MemDesc src_sel = src_any_or_fixed, dst_sel = dst_md;
  if (per_image_) {
    src_sel = images_consecutive(src_md) ? with_images(src_md, 1) : one_any;
    dst_sel = plain_dst ? with_images(dst_md, 1) : MemDesc({1, p.K, p.OH, p.OW}, compute, tag::any);
  }
  cf::desc d = make_desc(alg, src_sel, wei_any, dst_sel);
  dnnl::primitive_attr attr = scratch_attr();
  // The destination's type, not the compute type, picks the loop: a bf16
  // convolution writing a returned or plain-read output writes float32.
  swish_bf16_ = compute == dt::bf16 && !plain_dst;
  swish_after_ = !f_.dw && !f_.post.empty() && f_.post.back().alg == dnnl::algorithm::eltwise_swish &&
                 f_.post.back().alpha == 1.f && own_swish(swish_bf16_);
  attr.set_post_ops(post_ops_of(f_, swish_after_));
  // A Winograd kernel's formats (and, below, its primitive) are made for
  // `threads`; everything else at the calling thread's count, as before.
  cf::primitive_desc pd = [&] {
    if (alg == dnnl::algorithm::convolution_winograd) {
      try {
        ScopedThreads at(threads);
        return cf::primitive_desc(d, attr, eng);
      } catch (const dnnl::error&) {  // not for these post-ops, channels or pads: the direct kernel
        alg = dnnl::algorithm::convolution_direct;
        d = make_desc(alg, src_sel, wei_any, dst_sel);
      }
    }
    // An input in nChw16c (a oneDNN Winograd convolution's output) is taken
    // as it is where oneDNN has a kernel other than its reference one for
    // it: resnet18 at batch 8, 81 -> 69 ms per call in nodes, mostly its
    // 512-channel layers (jit:avx512_core on nChw16c 5.3-5.5 ms, brgconv
    // on channels-last 6.7-7.0) and the stride-2 and 1x1 convolutions
    // after a Winograd one (no reorder first); batch 1 within noise.
    if (per_image_ && src_sel != one_any) {
      cf::primitive_desc q(d, attr, eng);
      if (std::string(q.impl_info_str()).rfind("ref", 0) != 0) return q;
      d = make_desc(alg, one_any, wei_any, dst_sel);
    }
    if (compute == dt::f32 && !f_.dw && !plain_dst && !per_image_ && src_md == MemDesc(sd, dt::f32, tag::aBcd16b)) {
      try {
        cf::primitive_desc q(make_desc(alg, src_md, wei_any, dst_md), attr, eng);
        if (std::string(q.impl_info_str()).rfind("ref", 0) != 0) return q;
      } catch (const dnnl::error&) {
      }
    }
    return cf::primitive_desc(d, attr, eng);
  }();
  onednn_wino_ = alg == dnnl::algorithm::convolution_winograd;
  impl_ = pd.impl_info_str();
  dst_ = pd.dst_desc();
  if (per_image_) {
    if (!images_consecutive(dst_) || !images_consecutive(pd.src_desc()))
      throw std::invalid_argument("LayoutConv: oneDNN chose " + desc_str(pd.src_desc()) + " -> " + desc_str(dst_) +
                                  " for one image, whose batch cannot be cut into images");
    dst_ = with_images(dst_, p.N);
  }
  // The formats are chosen now; the primitive is built on the worker.
  const MemDesc src_f = pd.src_desc(), wei_f = pd.weights_desc(), dst_f = f_.dw ? dst_md : pd.dst_desc();
  cf::desc fixed = make_desc(alg, src_f, wei_f, dst_f);

  src_user_ = user_mem(src_md);
  // (Per image: the source's batch in the one image's format.)
  const MemDesc src_batch = per_image_ ? with_images(pd.src_desc(), p.N) : pd.src_desc();
  reorder_src_ = src_md != src_batch;
  if (per_image_) {
    src_img_ = user_mem(pd.src_desc());
    dst_img_ = user_mem(pd.dst_desc());
  }
  if (reorder_src_) {
    src_prim_ = memory(src_batch, eng);
    // An image (at most 4 channels, row-major) to channels-last: Jobflow's loop.
    own_transpose_ = p.C <= 4 && src_md == MemDesc(sd, dt::f32, tag::nchw) && src_batch == MemDesc(sd, dt::f32, tag::acdb);
    if (!own_transpose_) src_reorder_.init_reorder(src_user_, src_prim_);
  }
  wei_ = memory(pd.weights_desc(), eng);
  if (f_.in_scale) {
    // The input channel of every element of the packed weights: channel
    // numbers (exact in float32) reordered like the weights; padding 0.
    std::vector<float> ch(static_cast<size_t>(p.K * p.C));
    for (int64_t k = 0; k < p.K; ++k)
      for (int64_t c = 0; c < p.C; ++c) ch[k * p.C + c] = static_cast<float>(c);
    memory user(user_w_md_, eng, ch.data()), packed(pd.weights_desc(), eng);
    {
      // On one thread: an OpenMP team made here, on the compiling thread,
      // outlives the compile, and with more OpenMP threads than cores
      // libgomp stops spinning between regions (efficientnet_b0 at half
      // its speed).
      ScopedThreads one(1);
      dnnl::reorder(user, packed).execute(dnnl_stream(), user, packed);
      dnnl_stream().wait();
    }
    const float* pc = static_cast<const float*>(packed.get_data_handle());
    const size_t n = pd.weights_desc().get_size() / sizeof(float);
    for (size_t i = 0; i < n;) {
      size_t j = i + 1;
      while (j < n && pc[j] == pc[i]) ++j;
      scale_runs_.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(j - i), static_cast<int32_t>(pc[i])});
      i = j;
    }
  }
  if (has_bias) bias_ = memory(bias_md, eng);
  dst_mem_ = user_mem(dst_);
  if (f_.residual) {
    res_user_ = user_mem(*res_md);
    res_reorder_.init_reorder(res_user_, dst_mem_);
  }
  std::vector<dnnl_exec_arg_t> args = {
      {DNNL_ARG_SRC, (per_image_ ? src_img_ : reorder_src_ ? src_prim_ : src_user_).get()},
      {DNNL_ARG_WEIGHTS, wei_.get()},
      {DNNL_ARG_DST, (per_image_ ? dst_img_ : dst_mem_).get()}};
  if (has_bias) args.push_back({DNNL_ARG_BIAS, bias_.get()});
  if (has_bias && !f_.bias && !f_.bn) std::memset(bias_.get_data_handle(), 0, sizeof(float) * p.K);
  if (f_.dw) {
    dw_wei_ = memory(pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS), eng);
    dw_bias_ = memory(MemDesc({p.K}, dt::f32, tag::a), eng);
    std::memset(dw_bias_.get_data_handle(), 0, sizeof(float) * p.K);
    args.push_back({DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, dw_wei_.get()});
    args.push_back({DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS, dw_bias_.get()});
  }
  conv_.init(
      [fixed, attr](MemDesc* sp) {
        cf::primitive_desc p(fixed, attr, dnnl_engine());
        *sp = p.scratchpad_desc();
        return dnnl::primitive(cf(p));
      },
      std::move(args));
  if (onednn_wino_) {
    conv_.fix_threads(threads);
    conv_.prepare();
  }
}

Attrs LayoutConv::attributes() const {
  Attrs a = LayoutOp::attributes();
  if (bf16_) a.push_back({"precision", std::string("bf16")});
  if (wino_) a.push_back({"algo", std::string("winograd")});
  if (expdw_) a.push_back({"algo", std::string("expand_dw")});
  if (small_) a.push_back({"algo", std::string("small_1x1")});
  if (onednn_wino_) a.push_back({"algo", std::string("onednn_winograd")});
  if (refresh_) a.push_back({"weights", std::string("per_call")});
  return a;
}

void LayoutConv::prepare(const std::vector<Tensor>& in) const {
  bool stale = !prepared_ || refresh_;
  for (size_t i = 0; i < sources_.size(); ++i)
    if (sources_[i] && sources_[i]->version.load(std::memory_order_acquire) != versions_[i]) stale = true;
  if (!stale) return;
  for (size_t i = 0; i < sources_.size(); ++i)
    if (sources_[i]) versions_[i] = sources_[i]->version.load(std::memory_order_acquire);
  const float* w = in[1].data<float>();
  const int64_t K = p_.K, per = in[1].numel() / K;
  int next = 2;
  const float* b = f_.bias ? in[next++].data<float>() : nullptr;
  float* bias = (f_.bias || f_.bn) ? static_cast<float*>(bias_.get_data_handle()) : nullptr;
  if (f_.bn) {
    const float* mean = in[next++].data<float>();
    const float* var = in[next++].data<float>();
    const float* off = f_.bn_offset ? in[next++].data<float>() : nullptr;
    const float* sc = f_.bn_scale ? in[next++].data<float>() : nullptr;
    folded_w_.resize(static_cast<size_t>(K * per));
    for (int64_t k = 0; k < K; ++k) {
      // y = (conv + b - mean) * a + offset, a = scale / sqrt(var + eps)
      const double a = (sc ? sc[k] : 1.0) / std::sqrt(static_cast<double>(var[k]) + f_.bn_eps);
      bias[k] = static_cast<float>(((b ? b[k] : 0.0) - mean[k]) * a + (off ? off[k] : 0.0));
      for (int64_t j = 0; j < per; ++j) folded_w_[k * per + j] = static_cast<float>(w[k * per + j] * a);
    }
    w = folded_w_.data();
  } else if (b) {
    std::memcpy(bias, b, sizeof(float) * K);
  }
  if (small_) {  // [C][Kp] and [Kp] (small_1x1)
    const int64_t Kp = (K + 15) / 16 * 16;
    small_w_.assign(static_cast<size_t>(per * Kp), 0.f);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < per; ++c) small_w_[c * Kp + k] = w[k * per + c];
    small_b_.assign(static_cast<size_t>(Kp), 0.f);
    if (bias) std::copy(bias, bias + K, small_b_.begin());
    prepared_ = true;
    return;
  }
  if (f_.dw) {  // the depthwise convolution's weights (K, 1, R, S) and bias
    const Conv2dParams& q = f_.dw_p;
    const float* dw_w = f_.dw_max ? nullptr : in[next++].data<float>();
    const float* dw_b = f_.dw_bias && !f_.dw_max ? in[next++].data<float>() : nullptr;
    if (expdw_) {
      const float* pw_w = f_.pw ? in[next++].data<float>() : nullptr;
      const float* pw_b = f_.pw && f_.pw_bias ? in[next++].data<float>() : nullptr;
      expdw_->set_weights(w, bias, dw_w, dw_b, pw_w, pw_b);
      prepared_ = true;
      return;
    }
    memory user(MemDesc({q.K, 1, 1, q.R, q.S}, dt::f32, tag::goihw), dnnl_engine(), const_cast<float*>(dw_w));
    dnnl::reorder(user, dw_wei_).execute(dnnl_stream(), user, dw_wei_);
    dnnl_stream().wait();
    if (dw_b) std::memcpy(dw_bias_.get_data_handle(), dw_b, sizeof(float) * q.K);
  }
  if (wino_) {
    wino_->set_weights(w);
  } else {
    memory user(user_w_md_, dnnl_engine(), const_cast<float*>(w));
    dnnl::reorder(user, wei_).execute(dnnl_stream(), user, wei_);
    dnnl_stream().wait();
    if (f_.in_scale) {
      const float* packed = static_cast<const float*>(wei_.get_data_handle());
      base_w_.assign(packed, packed + wei_.get_desc().get_size() / sizeof(float));
    }
  }
  prepared_ = true;
}

void LayoutConv::eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const {
  prepare(in);
  if (small_) {
    small_1x1(in[0].data<float>(), p_.N, p_.C, small_w_.data(), p_.K, small_b_.data(), small_steps_.data(),
              static_cast<int>(small_steps_.size()), out[0].data<float>());
    return;
  }
  if (wino_ || expdw_) {
    const void* x = in[0].raw();
    if (own_transpose_) {  // into the inside of the padded copy
      int64_t hx, wx;
      expdw_->input_dims(&hx, &wx);
      const int64_t inside = (p_.pad_top * wx + p_.pad_left) * p_.C;
      if (bf16_)
        nchw_to_nhwc_bf16(in[0].data<float>(), p_.N, p_.C, p_.H, p_.W,
                          static_cast<uint16_t*>(src_prim_.get_data_handle()) + inside, hx, wx);
      else
        nchw_to_nhwc(in[0].data<float>(), p_.N, p_.C, p_.H, p_.W, static_cast<float*>(src_prim_.get_data_handle()) + inside,
                     hx, wx);
      x = src_prim_.get_data_handle();
    } else if (reorder_src_) {
      src_user_.set_data_handle(in[0].raw());
      src_reorder_.execute();
      dnnl_stream().wait();
      x = src_prim_.get_data_handle();
    }
    if (expdw_) {
      const void* res = nullptr;
      if (f_.residual && res_buf_) {
        res_user_.set_data_handle(in[res_input_].raw());
        res_reorder_.execute();
        dnnl_stream().wait();
        res = res_buf_.get_data_handle();
      } else if (f_.residual) {
        res = in[res_input_].raw();
      }
      float* means = f_.gap ? out[1].data<float>() : nullptr;
      if (bf16_ && dst_.data_type() == dt::bf16)
        expdw_->run(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(out[0].raw()),
                    static_cast<const uint16_t*>(res), means);
      else if (bf16_)
        expdw_->run(static_cast<const uint16_t*>(x), static_cast<float*>(out[0].raw()), static_cast<const float*>(res),
                    means);
      else
        expdw_->run(static_cast<const float*>(x), static_cast<float*>(out[0].raw()), static_cast<const float*>(res),
                    means);
      return;
    }
    // The residual is read where it is (no copy into the destination first).
    wino_->run(static_cast<const float*>(x), static_cast<float*>(out[0].raw()),
               bias_ ? static_cast<const float*>(bias_.get_data_handle()) : nullptr,
               f_.residual ? static_cast<const float*>(in[res_input_].raw()) : nullptr, lo_, hi_, res_nhwc_);
    return;
  }
  // w[k][c] * s[c] for an image's factors s: the packed weights from their unscaled copy.
  auto scale_weights = [&](const float* s) {
    float* w = static_cast<float*>(wei_.get_data_handle());
    const float* b = base_w_.data();
    for (const ScaleRun& r : scale_runs_) {
      const float f = s[r.channel];
      float* __restrict wr = w + r.begin;
      const float* __restrict br = b + r.begin;
      for (uint32_t i = 0; i < r.length; ++i) wr[i] = br[i] * f;
    }
  };
  if (f_.in_scale && !per_image_) scale_weights(in[scale_input_].data<float>());
  src_user_.set_data_handle(in[0].raw());
  dst_mem_.set_data_handle(out[0].raw());
  if (own_transpose_)
    nchw_to_nhwc(in[0].data<float>(), p_.N, p_.C, p_.H, p_.W, static_cast<float*>(src_prim_.get_data_handle()), p_.H,
                 p_.W);
  else if (reorder_src_)
    src_reorder_.execute();
  if (f_.residual && in_place_ < 0) {  // in place: the destination holds the residual already
    res_user_.set_data_handle(in[res_input_].raw());
    res_reorder_.execute();
  }
  if (per_image_) {  // one image at a time, each on the weights scaled by its own factors
    dnnl_stream().wait();
    const float* s = in[scale_input_].data<float>();
    const size_t xb = src_img_.get_desc().get_size(), yb = dst_img_.get_desc().get_size();
    for (int64_t n = 0; n < p_.N; ++n) {
      scale_weights(s + n * p_.C);
      src_img_.set_data_handle(static_cast<char*>(reorder_src_ ? src_prim_.get_data_handle() : in[0].raw()) + n * xb);
      dst_img_.set_data_handle(static_cast<char*>(out[0].raw()) + n * yb);
      conv_.execute();
      dnnl_stream().wait();
    }
  } else {
    conv_.execute();
    dnnl_stream().wait();
  }
  if (swish_after_ && swish_bf16_)
    swish_inplace_bf16(static_cast<uint16_t*>(out[0].raw()), static_cast<int64_t>(dst_.get_size() / sizeof(uint16_t)));
  else if (swish_after_)
    swish_inplace(static_cast<float*>(out[0].raw()), static_cast<int64_t>(dst_.get_size() / sizeof(float)));
}

// ---------------------------------------------------------------- matmul

LayoutMatMul::LayoutMatMul(std::shared_ptr<const Primitive> orig, TensorSpec out, int64_t M, int64_t K, int64_t N,
                           bool transpose_b, bool bias, bool relu, dt compute,
                           std::vector<std::shared_ptr<internal::VariableEntry>> sources, bool refresh, int threads)
    : LayoutOp(std::move(orig), {std::move(out)}), bias_(bias), bf16_(compute == dt::bf16), refresh_(refresh),
      sources_(std::move(sources)) {
  auto& eng = dnnl_engine();
  // Formats and primitive for the count every call runs (fix_threads below),
  // made now, so that a failure shows in the layout pass.
  threads = std::max(1, threads);
  ScopedThreads at(threads);
  user_w_md_ = MemDesc({N, K}, dt::f32, transpose_b ? tag::ab : tag::ba);
  const MemDesc src_user({M, K}, dt::f32, tag::ab), src_any({M, K}, compute, tag::any);
  const MemDesc wei_any({N, K}, compute, tag::any), bias_md({N}, dt::f32, tag::a), dst_md({M, N}, dt::f32, tag::ab);
  using ip = dnnl::inner_product_forward;
  ip::desc d = bias ? ip::desc(dnnl::prop_kind::forward_inference, src_any, wei_any, bias_md, dst_md)
                    : ip::desc(dnnl::prop_kind::forward_inference, src_any, wei_any, dst_md);
  dnnl::primitive_attr attr = scratch_attr();
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
  }
  ip::primitive_desc pd(d, attr, eng);
  dst_ = pd.dst_desc();
  ip::desc fixed = bias ? ip::desc(dnnl::prop_kind::forward_inference, pd.src_desc(), pd.weights_desc(), bias_md, dst_md)
                        : ip::desc(dnnl::prop_kind::forward_inference, pd.src_desc(), pd.weights_desc(), dst_md);
  src_user_ = user_mem(src_user);
  reorder_src_ = src_user != pd.src_desc();
  if (reorder_src_) {
    src_prim_ = memory(pd.src_desc(), eng);
    src_reorder_.init_reorder(src_user_, src_prim_);
  }
  wei_ = memory(pd.weights_desc(), eng);
  if (bias) bias_mem_ = memory(bias_md, eng);
  dst_mem_ = user_mem(dst_);
  std::vector<dnnl_exec_arg_t> args = {{DNNL_ARG_SRC, (reorder_src_ ? src_prim_ : src_user_).get()},
                                       {DNNL_ARG_WEIGHTS, wei_.get()},
                                       {DNNL_ARG_DST, dst_mem_.get()}};
  if (bias) args.push_back({DNNL_ARG_BIAS, bias_mem_.get()});
  prim_.init(
      [fixed, attr](MemDesc* sp) {
        ip::primitive_desc p(fixed, attr, dnnl_engine());
        *sp = p.scratchpad_desc();
        return dnnl::primitive(ip(p));
      },
      std::move(args));
  prim_.fix_threads(threads);
  prim_.prepare();
  versions_.assign(sources_.size(), 0);
}

Attrs LayoutMatMul::attributes() const {
  Attrs a = orig_->attributes();  // in and out stay plain float32
  a.push_back({"weights", std::string("packed")});
  if (bf16_) a.push_back({"precision", std::string("bf16")});
  return a;
}

void LayoutMatMul::prepare(const std::vector<Tensor>& in) const {
  bool stale = !prepared_ || refresh_;
  for (size_t i = 0; i < sources_.size(); ++i)
    if (sources_[i] && sources_[i]->version.load(std::memory_order_acquire) != versions_[i]) stale = true;
  if (!stale) return;
  for (size_t i = 0; i < sources_.size(); ++i)
    if (sources_[i]) versions_[i] = sources_[i]->version.load(std::memory_order_acquire);
  memory user(user_w_md_, dnnl_engine(), in[1].raw());
  dnnl::reorder(user, wei_).execute(dnnl_stream(), user, wei_);
  dnnl_stream().wait();
  if (bias_) std::memcpy(bias_mem_.get_data_handle(), in[2].raw(), in[2].nbytes());
  prepared_ = true;
}

void LayoutMatMul::eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const {
  prepare(in);
  src_user_.set_data_handle(in[0].raw());
  dst_mem_.set_data_handle(out[0].raw());
  if (reorder_src_) src_reorder_.execute();
  prim_.execute();
  dnnl_stream().wait();
}

// ---------------------------------------------------------------- pool

namespace {
// Whether pooling of src_md runs cpu::pool_nchw8c: nChw8c float32 on CPUs
// whose oneDNN kernels are AVX2 at most, max or average excluding pads.
bool own_nchw8c(const Pool2dParams& p, const MemDesc& src_md) {
  return own_avx2_kernels() && p.kind != PoolKind::AvgIncludePad &&
         src_md == MemDesc({p.N, p.C, p.H, p.W}, dt::f32, tag::aBcd8b);
}

// Whether max pooling of src_md runs cpu::max_pool_nhwc on this CPU:
// channels-last (*block = 0) or nChw16c / nChw8c (*block = 16 / 8),
// float32 or bfloat16.
bool max_nhwc_format(const Pool2dParams& p, const MemDesc& src_md, int64_t* block) {
  const dt type = src_md.data_type();
  if ((type != dt::f32 && type != dt::bf16) || !own_max_pool_nhwc()) return false;
  const memory::dims dims{p.N, p.C, p.H, p.W};
  const std::pair<tag, int64_t> forms[] = {{tag::acdb, 0}, {tag::aBcd16b, 16}, {tag::aBcd8b, 8}};
  for (const auto& [t, b] : forms)
    if (src_md == MemDesc(dims, type, t)) {
      *block = b;
      return true;
    }
  return false;
}
}  // namespace

bool LayoutPool::supports(const Pool2dParams& p, const MemDesc& src_md) {
  int64_t block = 0;
  return p.kind != PoolKind::Max || own_nchw8c(p, src_md) || max_nhwc_format(p, src_md, &block);
}

LayoutPool::LayoutPool(std::shared_ptr<const Primitive> orig, std::vector<TensorSpec> out, const Pool2dParams& p,
                       const MemDesc& src_md)
    : LayoutOp(std::move(orig), std::move(out)) {
  auto& eng = dnnl_engine();
  const dnnl::algorithm alg = p.kind == PoolKind::AvgIncludePad ? dnnl::algorithm::pooling_avg_include_padding
                                                                 : dnnl::algorithm::pooling_avg_exclude_padding;
  if (own_nchw8c(p, src_md)) {
    own_ = true;
    own_p_ = {p.N, (p.C + 7) / 8, p.H, p.W, p.OH, p.OW, p.kh, p.kw, p.sh, p.sw, p.pad_top, p.pad_left,
              p.kind == PoolKind::Max};
    dst_ = MemDesc({p.N, p.C, p.OH, p.OW}, dt::f32, tag::aBcd8b);
    return;
  }
  // A global average pool of channels-last float32 on AVX-512 (a
  // squeeze-and-excitation's): Jobflow's loop (cpu::gap_nhwc, over bands
  // of rows), writing channels-last (what oneDNN writes for such an input).
  if (own_avx512_kernels() && src_md == MemDesc({p.N, p.C, p.H, p.W}, dt::f32, tag::acdb) &&
      p.kind != PoolKind::Max) {
    own_gap_ = p.OH == 1 && p.OW == 1 && p.kh == p.H && p.kw == p.W && !p.pad_top && !p.pad_left &&
               !p.pad_bottom && !p.pad_right;
    if (own_gap_) {
      dst_ = MemDesc({p.N, p.C, p.OH, p.OW}, dt::f32, tag::acdb);
      return;
    }
  }
  // Max pooling never runs oneDNN's (which drops a NaN: cpu/simd_kernels.h,
  // max_pool_plain): channels-last and nChw16c / nChw8c, float32 or
  // bfloat16, are images of C (16, 8) channels for cpu::max_pool_nhwc,
  // written in the same format (a blocked format's padding channels hold
  // zeros, and their maximum is zero). supports() tells the compiler
  // which formats these are.
  if (p.kind == PoolKind::Max) {
    int64_t block = 0;
    if (!max_nhwc_format(p, src_md, &block))
      throw std::invalid_argument("LayoutPool: max pooling of " + desc_str(src_md) +
                                  ", a format without Jobflow's loop on this CPU (supports(): channels-last, nChw16c "
                                  "or nChw8c, float32 or bfloat16, with AVX-512)");
    own_max_nhwc_ = true;
    max_bf16_ = src_md.data_type() == dt::bf16;
    const int64_t images = block ? p.N * ((p.C + block - 1) / block) : p.N;
    nhwc_p_ = {images, block ? block : p.C, p.H, p.W, p.OH, p.OW, p.kh, p.kw, p.sh, p.sw, p.pad_top, p.pad_left};
    dst_ = MemDesc({p.N, p.C, p.OH, p.OW}, src_md.data_type(),
                   block == 16 ? tag::aBcd16b : block == 8 ? tag::aBcd8b : tag::acdb);
    return;
  }
  const MemDesc dst_any({p.N, p.C, p.OH, p.OW}, src_md.data_type(), tag::any);
  dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_inference, alg, src_md, dst_any, {p.sh, p.sw},
                                {p.kh, p.kw}, {p.pad_top, p.pad_left}, {p.pad_bottom, p.pad_right});
  dnnl::pooling_forward::primitive_desc pd(d, scratch_attr(), eng);
  dst_ = pd.dst_desc();
  src_ = user_mem(src_md);
  dst_mem_ = user_mem(dst_);
  dnnl::pooling_forward::desc fixed(dnnl::prop_kind::forward_inference, alg, src_md, dst_, {p.sh, p.sw}, {p.kh, p.kw},
                                    {p.pad_top, p.pad_left}, {p.pad_bottom, p.pad_right});
  prim_.init(
      [fixed](MemDesc* sp) {
        dnnl::pooling_forward::primitive_desc q(fixed, scratch_attr(), dnnl_engine());
        *sp = q.scratchpad_desc();
        return dnnl::primitive(dnnl::pooling_forward(q));
      },
      {{DNNL_ARG_SRC, src_.get()}, {DNNL_ARG_DST, dst_mem_.get()}});
}

Attrs LayoutPool::attributes() const {
  Attrs a = LayoutOp::attributes();
  if (own_gap_) a.push_back({"algo", std::string("gap_nhwc")});
  if (own_max_nhwc_) a.push_back({"algo", std::string("max_nhwc")});
  return a;
}

void LayoutPool::eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const {
  if (own_) {
    pool_nchw8c(own_p_, static_cast<const float*>(in[0].raw()), static_cast<float*>(out[0].raw()));
    return;
  }
  if (own_max_nhwc_) {
    if (max_bf16_)
      max_pool_nhwc(nhwc_p_, static_cast<const uint16_t*>(in[0].raw()), static_cast<uint16_t*>(out[0].raw()));
    else
      max_pool_nhwc(nhwc_p_, static_cast<const float*>(in[0].raw()), static_cast<float*>(out[0].raw()));
    return;
  }
  if (own_gap_) {
    const Shape& x = in[0].shape();
    gap_nhwc(in[0].data<float>(), x[0], x[2] * x[3], x[1], out[0].data<float>());
    return;
  }
  src_.set_data_handle(in[0].raw());
  dst_mem_.set_data_handle(out[0].raw());
  prim_.execute();
  dnnl_stream().wait();
}

// ---------------------------------------------------------------- eltwise

LayoutEltwise::LayoutEltwise(std::shared_ptr<const Primitive> orig, TensorSpec out, EltwiseStep e,
                             const MemDesc& src_md)
    : LayoutOp(std::move(orig), {std::move(out)}) {
  dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, e.alg, src_md, e.alpha, e.beta);
  dnnl::eltwise_forward::primitive_desc pd(d, dnnl_engine());
  dst_ = pd.dst_desc();
  src_ = user_mem(src_md);
  dst_mem_ = user_mem(dst_);
  prim_.init(
      [d](MemDesc* sp) {
        dnnl::eltwise_forward::primitive_desc q(d, scratch_attr(), dnnl_engine());
        *sp = q.scratchpad_desc();
        return dnnl::primitive(dnnl::eltwise_forward(q));
      },
      {{DNNL_ARG_SRC, src_.get()}, {DNNL_ARG_DST, dst_mem_.get()}});
}

void LayoutEltwise::eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const {
  src_.set_data_handle(in[0].raw());
  dst_mem_.set_data_handle(out[0].raw());
  prim_.execute();
  dnnl_stream().wait();
}

// ---------------------------------------------------------------- binary

LayoutBinary::LayoutBinary(std::shared_ptr<const Primitive> orig, TensorSpec out, dnnl::algorithm alg, int first,
                           const MemDesc& src0_md, const MemDesc& src1_md)
    : LayoutOp(std::move(orig), {std::move(out)}), first_(first) {
  auto& eng = dnnl_engine();
  dnnl::binary::desc d(alg, src0_md, src1_md, src0_md);
  dnnl::binary::primitive_desc pd(d, scratch_attr(), eng);
  dst_ = pd.dst_desc();
  src0_ = user_mem(src0_md);
  src1_ = user_mem(src1_md);
  dst_mem_ = user_mem(dst_);
  prim_.init(
      [d](MemDesc* sp) {
        dnnl::binary::primitive_desc q(d, scratch_attr(), dnnl_engine());
        *sp = q.scratchpad_desc();
        return dnnl::primitive(dnnl::binary(q));
      },
      {{DNNL_ARG_SRC_0, src0_.get()}, {DNNL_ARG_SRC_1, src1_.get()}, {DNNL_ARG_DST, dst_mem_.get()}});
  // The channel-wise case, recognised from the blocking of both operands.
  const auto d0 = src0_md.dims(), d1 = src1_md.dims();
  const dnnl_memory_desc_t &m0 = src0_md.data, &m1 = src1_md.data;
  if (d0.size() == 4 && d1.size() == 4 && d1[0] == d0[0] && d1[1] == d0[1] && d1[2] == 1 && d1[3] == 1 &&
      d0[2] * d0[3] > 1 && m0.data_type == m1.data_type &&
      (m0.data_type == dnnl_f32 || (m0.data_type == dnnl_bf16 && own_bf16_kernels())) &&
      m0.format_kind == dnnl_blocked &&
      m1.format_kind == dnnl_blocked && m0.offset0 == 0 && m1.offset0 == 0) {
    const auto& b0 = m0.format_desc.blocking;
    const auto& b1 = m1.format_desc.blocking;
    Channelwise c;
    c.mul = alg == dnnl::algorithm::binary_mul;
    c.bf16 = m0.data_type == dnnl_bf16;
    c.N = d0[0], c.C = d0[1], c.HW = d0[2] * d0[3];
    c.x_n = b0.strides[0];
    bool ok0 = false;
    if (b0.inner_nblks == 0) {  // channels-last: acdb
      ok0 = b0.strides[1] == 1 && b0.strides[3] == c.C && b0.strides[2] == c.C * d0[3];
    } else if (b0.inner_nblks == 1 && b0.inner_idxs[0] == 1) {  // aBcd8b / aBcd16b
      c.block = b0.inner_blks[0];
      ok0 = b0.strides[3] == c.block && b0.strides[2] == c.block * d0[3] && b0.strides[1] == c.block * c.HW;
    }
    // src1: n and c offsets only (H = W = 1).
    bool ok1 = false;
    c.s_n = b1.strides[0];
    if (b1.inner_nblks == 0) ok1 = b1.strides[1] == 1;
    else if (b1.inner_nblks == 1 && b1.inner_idxs[0] == 1) {
      ok1 = true;
      c.s_block = b1.strides[1];
      ok1 = b1.inner_blks[0] == (c.block ? c.block : b1.inner_blks[0]);
      if (c.block == 0) ok1 = false;  // mixed blockings: leave it to oneDNN
    }
    c.on = ok0 && ok1 && (c.block == 0 ? b1.inner_nblks == 0 : b1.inner_nblks == 1);
    cw_ = c;
  }
}

void LayoutBinary::channelwise(const float* x, const float* s, float* y) const {
  const Channelwise& c = cw_;
  if (c.block == 0) {  // channels-last: each pixel is C contiguous channels
#pragma omp parallel for collapse(2) if (c.N * c.HW * c.C > 32768)
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t p = 0; p < c.HW; ++p) {
        const float* xs = x + n * c.x_n + p * c.C;
        const float* ss = s + n * c.s_n;
        float* ys = y + n * c.x_n + p * c.C;
        if (c.mul)
#pragma omp simd
          for (int64_t k = 0; k < c.C; ++k) ys[k] = xs[k] * ss[k];
        else
#pragma omp simd
          for (int64_t k = 0; k < c.C; ++k) ys[k] = xs[k] + ss[k];
      }
    return;
  }
  const int64_t B = c.block, blocks = (c.C + B - 1) / B;
#pragma omp parallel for collapse(2) if (c.N * c.HW * c.C > 32768)
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t cb = 0; cb < blocks; ++cb) {
      const float* xs = x + n * c.x_n + cb * B * c.HW;
      const float* ss = s + n * c.s_n + cb * c.s_block;
      float* ys = y + n * c.x_n + cb * B * c.HW;
      for (int64_t p = 0; p < c.HW; ++p)
        if (c.mul)
#pragma omp simd
          for (int64_t k = 0; k < B; ++k) ys[p * B + k] = xs[p * B + k] * ss[k];
        else
#pragma omp simd
          for (int64_t k = 0; k < B; ++k) ys[p * B + k] = xs[p * B + k] + ss[k];
    }
}

void LayoutBinary::channelwise_bf16(const uint16_t* x, const uint16_t* s, uint16_t* y) const {
  // As channelwise(), with the scales read as they are (bf16) by the span.
  const Channelwise& c = cw_;
  if (c.block == 0) {  // channels-last: each pixel is C contiguous channels
    // Runs of about 16K values (pixels of one image), each through one
    // call, and at least one per thread.
    const int64_t runs =
        std::max<int64_t>(1, std::max<int64_t>(c.HW * c.C / 16384, std::min<int64_t>(c.HW, omp_get_max_threads())));
#pragma omp parallel for collapse(2) if (c.N * c.HW * c.C > 32768)
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t r = 0; r < runs; ++r) {
        const int64_t p0 = c.HW * r / runs, p1 = c.HW * (r + 1) / runs;
        const int64_t at = n * c.x_n + p0 * c.C;
        bf16_channel_op(x + at, s + n * c.s_n, y + at, c.C, p1 - p0, c.mul);
      }
    return;
  }
  // Blocked: each pixel of a channel block is B contiguous channels (a
  // last block's padded channels are zeros in both operands, as oneDNN
  // leaves them).
  const int64_t B = c.block, blocks = (c.C + B - 1) / B;
#pragma omp parallel for collapse(2) if (c.N * c.HW * c.C > 32768)
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t cb = 0; cb < blocks; ++cb) {
      const int64_t base = n * c.x_n + cb * B * c.HW;
      const uint16_t* ss = s + n * c.s_n + cb * c.s_block;
      bf16_channel_op(x + base, ss, y + base, B, c.HW, c.mul);
    }
}

void LayoutBinary::eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const {
  if (cw_.on && cw_.bf16) {
    channelwise_bf16(static_cast<const uint16_t*>(in[first_].raw()), static_cast<const uint16_t*>(in[1 - first_].raw()),
                     static_cast<uint16_t*>(out[0].raw()));
    return;
  }
  if (cw_.on) {
    channelwise(static_cast<const float*>(in[first_].raw()), static_cast<const float*>(in[1 - first_].raw()),
                static_cast<float*>(out[0].raw()));
    return;
  }
  src0_.set_data_handle(in[first_].raw());
  src1_.set_data_handle(in[1 - first_].raw());
  dst_mem_.set_data_handle(out[0].raw());
  prim_.execute();
  dnnl_stream().wait();
}

// ---------------------------------------------------------------- reorder

namespace {

// Whether float32 blob formats a and b put every element of an (N, C, 1,
// 1) blob at the same byte: row-major, channels-last, and channel blocks
// that divide C all come to n * C + c with one pixel.
bool same_bytes_one_pixel(const MemDesc& a, const MemDesc& b) {
  const memory::dims d = a.dims();
  if (d.size() != 4 || d[2] != 1 || d[3] != 1 || b.dims() != d) return false;
  auto row_major = [&](const MemDesc& m) {
    if (m == MemDesc(d, dt::f32, tag::abcd) || m == MemDesc(d, dt::f32, tag::acdb)) return true;
    return (d[1] % 16 == 0 && m == MemDesc(d, dt::f32, tag::aBcd16b)) ||
           (d[1] % 8 == 0 && m == MemDesc(d, dt::f32, tag::aBcd8b));
  };
  return row_major(a) && row_major(b);
}

}  // namespace

LayoutReorder::LayoutReorder(TensorSpec spec, const MemDesc& from, const MemDesc& to, bool returned)
    : spec_(std::move(spec)), from_(from), to_(to), returned_(returned) {
  // One pixel per image (a global pool's output on its way to the
  // classifier): the bytes are the same in both formats, a copy moves them
  // (oneDNN's reorder primitive took 5-7 us for mobilenet_v2's 1280 values).
  copy_ = same_bytes_one_pixel(from_, to_);
  if (copy_) return;
  // Channels-last float32 to row-major (a returned feature map, or the
  // row-major copy a plain reader takes): Jobflow's transposes
  // (cpu::nhwc_to_nchw).
  const memory::dims d = from_.dims();
  own_nchw_ = own_avx512_kernels() && d.size() == 4 && from_ == MemDesc(d, dt::f32, tag::acdb) &&
              to_ == MemDesc(d, dt::f32, tag::abcd);
  if (own_nchw_) return;
  src_ = user_mem(from_);
  dst_mem_ = user_mem(to_);
  prim_.init_reorder(src_, dst_mem_);
}

Attrs LayoutReorder::attributes() const {
  Attrs a = {{"from", desc_str(from_)}, {"to", desc_str(to_)}};
  if (copy_) a.push_back({"algo", std::string("copy")});
  if (own_nchw_) a.push_back({"algo", std::string("nhwc_to_nchw")});
  return a;
}

void LayoutReorder::eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext&) const {
  if (copy_) {
    std::memcpy(out[0].raw(), in[0].raw(), from_.get_size());
    return;
  }
  if (own_nchw_) {
    const memory::dims d = from_.dims();
    nhwc_to_nchw(in[0].data<float>(), d[0], d[1], d[2] * d[3], out[0].data<float>(), returned_);
    return;
  }
  src_.set_data_handle(in[0].raw());
  dst_mem_.set_data_handle(out[0].raw());
  prim_.execute();
  dnnl_stream().wait();
}

}  // namespace jobflow::cpu

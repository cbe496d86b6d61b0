// cpu/layout_ops.h — the kernels of plans whose blobs have oneDNN memory
// formats chosen at compile time (compiler/layout.cpp).
//
// The layout pass replaces a predict job's convolutions, poolings, global
// average pools, element-wise activations and binary add/mul by these
// primitives. Each holds oneDNN primitives built once for the shapes and
// memory descriptors the pass chose (plain row-major, or blocked such as
// nChw16c; float32 or bfloat16), so a call only re-points memory handles:
//
//   LayoutConv     convolution with bias, folded batch norm, a residual
//                  added in (post-op sum) and element-wise post-ops (relu,
//                  clip, logistic, swish, hardswish, linear). Its weights
//                  (and the folded bias) are reordered into the primitive's
//                  format once and again only when a variable they come
//                  from changes (VariableEntry::version). On CPUs whose
//                  oneDNN kernels are AVX2 at most, float32 3x3 and 5x5
//                  stride-1 convolutions with enough tiles run Jobflow's own
//                  Winograd kernel (cpu/winograd.h; "algo=winograd"),
//                  and a last swish post-op runs Jobflow's AVX2 loop after
//                  the convolution (cpu/simd_kernels.h);
//   LayoutPool     max/average pooling, and global average pooling (a mean
//                  over H and W with keepdims);
//   LayoutEltwise  relu, clip, logistic on a blocked blob;
//   LayoutBinary   add, mul (src1 may broadcast over H, W);
//   LayoutReorder  a change of format (OpKind::Reorder): where a blocked
//                  blob meets a kernel that reads plain memory, and before
//                  a job return.
//
// They report the kind of the op they compute (conv2d, max_pool2d, ...), so
// profiles and plans read as before, with the fused steps and the output
// format among their attributes ("fused=bn+sum+relu layout=f32:aBcd16b").
// Not thread-safe: a plan runs one call at a time.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cpu/simd_kernels.h"
#include "cpu/dnnl_kernels.h"
#include "cpu/expand_dw.h"
#include "cpu/winograd.h"
#include "jobflow/primitive.h"

namespace jobflow::internal {
struct VariableEntry;
}

namespace jobflow::cpu {

using MemDesc = dnnl::memory::desc;

// oneDNN fixes a primitive's thread partitioning when it is created (from
// the creating thread's OpenMP count), and a plan is compiled on one thread
// but runs on the job's worker with the job's count (which may change per
// call, cpu/threads.h). So a kernel keeps one primitive per thread count it
// has run with, built from fixed memory descriptors on first use.
class PerThreadCount {
 public:
  // make(scratchpad): creates the primitive for the calling thread and sets
  // *scratchpad to its scratchpad's descriptor. `args`: every argument but
  // the scratchpad (handles re-pointed by the caller, never replaced).
  using Make = std::function<dnnl::primitive(MemDesc* scratchpad)>;
  // Remembers the creating thread's OpenMP count: the formats were chosen
  // for it, and a count for which oneDNN has only its reference kernel for
  // them runs with this one instead.
  void init(Make make, std::vector<dnnl_exec_arg_t> args);
  // A reorder from `from` to `to` (handles re-pointed by the caller).
  void init_reorder(const dnnl::memory& from, const dnnl::memory& to);
  // Every call runs the primitive made for `threads` threads, whatever the
  // calling thread's count (the primitive runs its own team of that size):
  // for kernels whose sums split between threads (oneDNN's inner product
  // splits the reduction over K when the rows are few), so that their bits
  // do not change with the count, which follows the machine's load
  // (cpu/threads.h). Call before the first execute().
  void fix_threads(int threads) { fixed_ = threads; }
  void execute() const;
  // Makes the primitive execute() would run now (oneDNN errors show here).
  void prepare() const;

 private:
  struct Variant {
    int threads;
    dnnl::primitive prim;
    dnnl::memory scratch;
    std::vector<dnnl_exec_arg_t> args;
  };
  const Variant& variant(int threads) const;
  Make make_;
  std::vector<dnnl_exec_arg_t> args_;
  int threads0_ = 1;
  int fixed_ = 0;  // fix_threads()
  mutable std::vector<Variant> variants_;
};

// "f32:abcd", "bf16:aBcd16b" (oneDNN's letters: a capital is a blocked dim).
std::string desc_str(const MemDesc& md);
// Row-major memory of `shape`.
MemDesc plain_desc(const Shape& shape, dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
bool is_plain_f32(const MemDesc& md);
// Whether md, float32 (N, C, 1, 1), holds its values in the bytes of a
// row-major (N, C) tensor: channels-last and row-major do; nChw16c / nChw8c
// when C is a multiple of the block.
bool rows_of_channels(const MemDesc& md);

class LayoutOp : public Primitive {
 public:
  LayoutOp(std::shared_ptr<const Primitive> orig, std::vector<TensorSpec> out)
      : orig_(std::move(orig)), out_(std::move(out)) {}
  OpKind kind() const override { return orig_->kind(); }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>&) const override { return out_; }
  Attrs attributes() const override;
  // The format of output 0.
  const MemDesc& dst_desc() const { return dst_; }
  // In place: output 0 takes the buffer of input `in_place` (the pass sets
  // it when nothing reads that input afterwards; element-wise and binary
  // kernels, and a convolution's residual).
  void set_in_place(int input) { in_place_ = input; }
  int aliases_input(int out) const override { return out == 0 ? in_place_ : -1; }

 protected:
  virtual std::string fused() const { return ""; }
  std::shared_ptr<const Primitive> orig_;
  std::vector<TensorSpec> out_;
  MemDesc dst_;
  int in_place_ = -1;
};

struct EltwiseStep {
  dnnl::algorithm alg;
  float alpha = 0.f, beta = 0.f;
};

// What a LayoutConv computes besides the convolution, in this order: bias,
// batch norm (folded into the weights and bias), + residual, then `post`.
// A 1x1 convolution may also take the depthwise convolution that alone
// reads its output (oneDNN's post-op "dw": the expanded tensor between them
// is never written out), with that one's bias and element-wise post-ops
// (`dw_post`); its weights (and bias) are inputs after the 1x1's.
struct ConvFusion {
  bool bias = false;
  bool bn = false, bn_offset = false, bn_scale = false;
  double bn_eps = 0.0;
  bool residual = false;
  std::vector<EltwiseStep> post;
  bool dw = false, dw_bias = false;
  Conv2dParams dw_p{};
  std::vector<EltwiseStep> dw_post;
  // With dw: the second stage is a max pool of dw_p's window, stride and
  // pads (no weight inputs, no dw_post), on Jobflow's kernel only
  // (fuses_max_pool).
  bool dw_max = false;
  // After a fused depthwise convolution on Jobflow's kernel: the 1x1
  // projection that alone reads its output (fuses_projection), with its
  // bias and post-ops; `residual` is then the projection's.
  bool pw = false, pw_bias = false;
  Conv2dParams pw_p{};
  std::vector<EltwiseStep> pw_post;
  // With pw: the projection's residual is the first convolution's output,
  // added from the kernel's kept rows (LayoutConv::adds_expanded): no
  // residual input, `residual` false.
  bool pw_adds_expanded = false;
  // The input arrives as mul(x, s), s (1, C, 1, 1) an input after the
  // weights (before the residual): the weights are scaled by s at every
  // call instead (LayoutConv::scales_input).
  bool in_scale = false;
  // With dw on Jobflow's kernel (no pw): a second output, the channel means
  // of each image of the depthwise output, (N, K, 1, 1) float32 (a
  // squeeze-and-excitation's global pool; ExpandDepthwise::run's means).
  bool gap = false;
  std::string text() const;  // "bn+sum+relu", "" when only bias/relu of the original; "clip+dw+clip"; "relu+maxpool"; "scale"; "...+gap"
};

class LayoutConv final : public LayoutOp {
 public:
  // Inputs: x, w, [bias], [mean, variance, [offset], [scale]], [depthwise
  // w, [bias]], [projection w, [bias]], [input scale], [residual].
  // `sources[i]`: the variable input i reads (its version keys the
  // prepared weights), null for other inputs; `refresh` = some weight input
  // is neither a variable nor a constant (prepared at every call).
  // `src_md`/`res_md`: the formats x and the residual arrive in;
  // `plain_dst`: write row-major float32 (a return or a plain reader).
  // `threads` (>= 1): the count a oneDNN Winograd kernel
  // (oneDNN_winograd()) is made for and always runs with (its weights'
  // format depends on the count; PerThreadCount::fix_threads).
  LayoutConv(std::shared_ptr<const Primitive> orig, TensorSpec out, const Conv2dParams& p, ConvFusion f,
             const MemDesc& src_md, const MemDesc* res_md, bool plain_dst, dnnl::memory::data_type compute,
             std::vector<std::shared_ptr<internal::VariableEntry>> sources, bool refresh, int threads);
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override;
  // With "precision=bf16" when it computes in bfloat16, "weights=per_call"
  // when its weights are prepared at every call (`refresh`),
  // "algo=winograd" on Jobflow's Winograd kernel, "algo=onednn_winograd"
  // on oneDNN's.
  Attrs attributes() const override;
  // The input holding the residual (-1: none); the pass may give its buffer
  // to the output (set_in_place), then no copy is made before the sum.
  int residual_input() const { return res_input_; }
  // Where oneDNN has AVX-512 (own_expand_dw()): whether Jobflow's kernel
  // computes the pair (ExpandDepthwise::fits, one activation per stage,
  // no residual or input scale, a first stage larger than 1x1 only on at
  // most 4 channels, the kept rows within 1 MB). Elsewhere: whether oneDNN fuses the
  // depthwise convolution `dw` (with its
  // fusion `fdw`: bias and post-ops only) into the 1x1 convolution `p`
  // (fusion `f`) on nChw8c float32 memory, and the pair is worth it: a
  // stride-2 3x3 or 5x5 depthwise convolution (measured on the 2-core
  // Zen 3, one thread, mobilenet_v2 at batch 8: 16 -> 96 channels at
  // 112x112 then the stride-2 depthwise 9.2 -> 6.1 ms; with stride 1 the
  // fused kernel was 0-10% slower).
  static bool fuses_depthwise(const Conv2dParams& p, const ConvFusion& f, const Conv2dParams& dw, const ConvFusion& fdw);
  // Whether the max pool `pool` (its geometry as a depthwise convolution's
  // Conv2dParams: groups = channels) that alone reads the output of the
  // convolution `p` (fusion `f`) becomes its second stage on Jobflow's
  // kernel (ConvFusion::dw_max): a network's first convolution (at most 4
  // input channels, as fuses_depthwise) whose activation is never negative
  // (relu, a clip from 0), float32. resnet18's 7x7 stem and 3x3 pool at
  // batch 8 on the hidden-AMX Xeon: oneDNN's brgconv 11.5-12.4 ms and the
  // pool 2.3 ms, together 7.6-10 ms (docs/performance.md).
  static bool fuses_max_pool(const Conv2dParams& p, const ConvFusion& f, const Conv2dParams& pool);
  // Whether Jobflow's expansion + depthwise kernel of the pair f (f.dw set,
  // own_expand_dw()) also computes the 1x1 projection pw (fusion fpw) that
  // alone reads the depthwise output: a projection it fits
  // (ExpandDepthwise::fits_projection), bias, a residual and at most one
  // activation (no batch norm, no input scale), and depthwise output rows
  // for bands: whole images for each of the plan's `threads`, or at least
  // 14 depthwise output rows per thread (the kernel then always splits an
  // image into bands of rows, each recomputing R - stride expanded rows:
  // with 2 threads, images of 28 rows and up).
  static bool fuses_projection(const ConvFusion& f, const Conv2dParams& pw, const ConvFusion& fpw, int threads);
  // Whether that projection, whose residual is the output of p (the pair's
  // first convolution, fusion f with its depthwise one), joins with the
  // residual read from the kernel's kept rows
  // (ExpandDepthwise::fits_expanded_residual): p's output then never
  // reaches memory, though two convolutions read it.
  static bool adds_expanded(const Conv2dParams& p, const ConvFusion& f, const Conv2dParams& pw, const ConvFusion& fpw,
                            int threads);
  // Where a fused depthwise convolution runs Jobflow's own kernel
  // (cpu/expand_dw.h) instead of oneDNN's "dw" post-op: CPUs where oneDNN
  // has AVX-512 kernels (its fused kernel there is a reference chain).
  static bool own_expand_dw();
  // The same kernel in bfloat16 (a bf16 plan's pairs and blocks): where it
  // runs in float32 and the CPU has AVX512_BF16 (ExpandDepthwise::supports_bf16).
  static bool own_expand_dw_bf16();
  // Whether a bf16 plan fuses the pair whose first convolution is p on that
  // kernel: everywhere it runs, except that with AMX (where oneDNN's 1x1
  // convolutions run on tiles, many times the dot products' rate) only
  // outputs of at least 28 x 28 pixels, whose expanded tensor's trip
  // through memory is what the fusion saves (mobilenet_v2's 112x112 to
  // 28x28 blocks). Measured on AVX512_BF16 without AMX only (Zen 5: equal
  // or faster at every size); the AMX bound is a guess to check there.
  static bool expand_dw_bf16_for(const Conv2dParams& p);
  // Whether a squeeze-and-excitation's channel-wise mul before the float32
  // convolution p (fusion f) is folded into it: a 1x1 convolution, one
  // group, whose weights (K x C) are smaller than a quarter of an image of
  // its input (H x W x C). The mul then costs a pass over the weights per
  // image instead of one over the activation (efficientnet_b0's 32
  // channels at 112x112: 16 x 32 weights against 401,408 values). At
  // batch N > 1 the convolution runs image by image, each on its own
  // scaled weights (a primitive made for one image).
  static bool scales_input(const Conv2dParams& p, const ConvFusion& f);
  // Whether a float32 convolution p (fusion f) whose source comes in
  // src_md runs Jobflow's loop for 1x1 convolutions of 1 x 1 images
  // (cpu::small_1x1, "algo=small_1x1": a squeeze-and-excitation's reduce
  // and expand; AVX-512, at most 4M multiply-adds, bias, batch norm and
  // relu, clip, sigmoid, swish, hardswish or linear steps, no residual),
  // and the steps it then runs (into *steps, when given).
  static bool small_steps(const Conv2dParams& p, const ConvFusion& f, const MemDesc& src_md,
                          std::vector<SmallStep>* steps);
  // Whether a float32 convolution p asks oneDNN for its Winograd kernel
  // (it falls back to the direct one where oneDNN has none for the shape
  // or the fusion: a clip, channels not multiples of 16, some pads): where
  // oneDNN has AVX-512, 3x3 weights, stride 1, one group, at least 16
  // input and output channels each and C * K <= 256 * 256.
  //
  // Why: oneDNN 2.6's AVX-512 Winograd (F(2x2, 3x3) at batch 1,
  // F(4x4, 3x3) at 8) ran resnet18's 3x3 layers 1.3-2x faster than its
  // direct brgconv kernel alone (64 channels at 56x56, batch 1: 0.46 ms
  // against 0.64; 128 at 28x28, batch 8: 2.0 against 4.9), and in the
  // network 0.44-0.55 ms against 0.69-0.73 per 64-channel layer at batch
  // 1 (3.0-4.3 against 5.8-6.2 at batch 8). The 512-channel layers were
  // slower in the network (1.15-1.2 ms against 1.0 at batch 1, 7.5-7.8
  // against 6.7-7.1 at batch 8): their transformed weights, 16.8 MB,
  // come from memory at every call. Measured on the 2-core Xeon with AMX.
  // Results differ from the direct kernel's by the transform's rounding
  // (resnet18 against ONNX Runtime: at most 2.6e-6 relative).
  static bool oneDNN_winograd(const Conv2dParams& p);
  // oneDNN's implementation ("brg:avx512_core", "jit_dw:avx512_core_bf16"),
  // or "winograd_4x4_3x3:avx512" / "winograd_2x2_5x5:avx2" (the vector
  // width it runs) for Jobflow's own.
  const std::string& impl() const { return impl_; }

 protected:
  std::string fused() const override;

 private:
  void prepare(const std::vector<Tensor>& in) const;
  Conv2dParams p_;
  ConvFusion f_;
  std::vector<std::shared_ptr<internal::VariableEntry>> sources_;
  bool refresh_;
  bool bf16_ = false;
  int res_input_ = -1;
  std::string impl_;
  PerThreadCount conv_;
  MemDesc user_w_md_;
  mutable dnnl::memory src_user_, src_prim_, wei_, bias_, dst_mem_, res_user_;
  dnnl::memory res_buf_;  // expand_dw with a projection: its residual channels-last, when it comes otherwise
  mutable dnnl::memory dw_wei_, dw_bias_;  // the fused depthwise convolution's
  mutable dnnl::memory pad_inside_;        // expdw_ with padded_input(): src_prim_'s inside
  bool own_transpose_ = false;             // the source reorder is cpu::nchw_to_nhwc (an image's few channels)
  PerThreadCount src_reorder_, res_reorder_;
  bool reorder_src_ = false;
  mutable bool prepared_ = false;
  mutable std::vector<uint64_t> versions_;
  mutable std::vector<float> folded_w_;
  // Jobflow's Winograd kernel instead of oneDNN's (null: oneDNN), with the
  // clamp its post-ops come to (relu: [0, inf), clip: [min, max]).
  std::unique_ptr<Winograd> wino_;
  float lo_ = 0.f, hi_ = 0.f;
  bool res_nhwc_ = false;  // the Winograd kernel's residual is channels-last (Winograd::run)
  bool onednn_wino_ = false;  // oneDNN's Winograd kernel (oneDNN_winograd())
  std::unique_ptr<ExpandDepthwise> expdw_;  // Jobflow's expansion + depthwise kernel (own_expand_dw())
  // f_.in_scale: the prepared weights as packed (unscaled), and the runs of
  // their elements that share an input channel (found by reordering a
  // tensor of channel numbers into the weights' format: oneDNN's blocked
  // weights keep 8 or 16 output channels of one input channel together, so
  // a call scales each run by one broadcast factor, a vector loop, instead
  // of gathering a factor per element).
  struct ScaleRun {
    uint32_t begin, length;
    int32_t channel;
  };
  mutable std::vector<float> base_w_;
  std::vector<ScaleRun> scale_runs_;
  int scale_input_ = -1;
  // f_.in_scale at batch N > 1: the primitive is made for one image and
  // runs once per image (scales_input), on src_img_ / dst_img_, each
  // pointed at that image of the source and the output.
  bool per_image_ = false;
  mutable dnnl::memory src_img_, dst_img_;
  // small_steps(): Jobflow's loop, its steps, and the weights [C][Kp] and
  // bias [Kp] it reads (prepare()).
  bool small_ = false;
  std::vector<SmallStep> small_steps_;
  mutable std::vector<float> small_w_, small_b_;
  // A last swish post-op run by cpu::swish_inplace (swish_inplace_bf16 on a
  // bf16 destination) after oneDNN's convolution instead of inside it
  // (cpu/simd_kernels.h).
  bool swish_after_ = false, swish_bf16_ = false;
};

// A matrix product x (M, K) @ w (K, N) (or w^T when w is (N, K)) [+ bias]
// [relu] of a predict plan whose weights come from variables or constants:
// oneDNN's inner product on the weights packed (reordered into its blocked
// format) once per version, float32 row-major in and out; in bf16 plans in
// bfloat16 (float32 accumulation), in float32 plans where the layout pass
// chooses it (compiler/layout.cpp says when). Its formats and primitive are
// made for `threads` threads, and every call runs that primitive
// (PerThreadCount::fix_threads): the same bits at every call, whatever the
// calling thread's count. Attribute "weights=packed".
class LayoutMatMul final : public LayoutOp {
 public:
  LayoutMatMul(std::shared_ptr<const Primitive> orig, TensorSpec out, int64_t M, int64_t K, int64_t N,
               bool transpose_b, bool bias, bool relu, dnnl::memory::data_type compute,
               std::vector<std::shared_ptr<internal::VariableEntry>> sources, bool refresh, int threads);
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override;
  Attrs attributes() const override;

 private:
  void prepare(const std::vector<Tensor>& in) const;
  bool bias_, bf16_, refresh_;
  std::vector<std::shared_ptr<internal::VariableEntry>> sources_;
  PerThreadCount prim_;
  MemDesc user_w_md_;
  mutable dnnl::memory src_user_, src_prim_, wei_, bias_mem_, dst_mem_;
  PerThreadCount src_reorder_;
  bool reorder_src_ = false;
  mutable bool prepared_ = false;
  mutable std::vector<uint64_t> versions_;
};

class LayoutPool final : public LayoutOp {
 public:
  // Max or average pooling of x (format `src_md`); a global average pool is
  // an average with the whole plane as its window.
  // Max and average (excluding pads) pooling of nChw8c float32 on CPUs
  // whose oneDNN kernels are AVX2 at most run Jobflow's own loop
  // (cpu::pool_nchw8c); other max pooling runs cpu::max_pool_nhwc
  // (channels-last, nChw16c or nChw8c; float32 or bfloat16), average
  // pooling oneDNN's (a global one over channels-last float32:
  // cpu::gap_nhwc). Max pooling of any other format throws
  // std::invalid_argument: oneDNN's would drop a NaN.
  LayoutPool(std::shared_ptr<const Primitive> orig, std::vector<TensorSpec> out, const Pool2dParams& p,
             const MemDesc& src_md);
  // Whether the constructor takes this pooling of src_md (the layout pass
  // leaves the node as written, on plain NCHW, otherwise).
  static bool supports(const Pool2dParams& p, const MemDesc& src_md);
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override;
  // With "algo=gap_nhwc" on Jobflow's global average pool, "algo=max_nhwc"
  // on its channels-last max pooling.
  Attrs attributes() const override;

 private:
  bool own_ = false;
  Pool8cParams own_p_{};
  bool own_gap_ = false;  // a global average pool on cpu::gap_nhwc
  bool own_max_nhwc_ = false;  // max pooling on cpu::max_pool_nhwc
  bool max_bf16_ = false;      // ... of bfloat16 data
  PoolNhwcParams nhwc_p_{};
  PerThreadCount prim_;
  mutable dnnl::memory src_, dst_mem_;
};

class LayoutEltwise final : public LayoutOp {
 public:
  LayoutEltwise(std::shared_ptr<const Primitive> orig, TensorSpec out, EltwiseStep e, const MemDesc& src_md);
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override;

 private:
  PerThreadCount prim_;
  mutable dnnl::memory src_, dst_mem_;
};

class LayoutBinary final : public LayoutOp {
 public:
  // in[first] is oneDNN's src0 (the full-size operand), the other src1
  // (same shape, or broadcast over H and W).
  LayoutBinary(std::shared_ptr<const Primitive> orig, TensorSpec out, dnnl::algorithm alg, int first,
               const MemDesc& src0_md, const MemDesc& src1_md);
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override;
  bool channelwise() const { return cw_.on; }  // runs its own loop (below)
  int first() const { return first_; }

 private:
  // src1 (N, C, 1, 1) scaling or shifting float32 or bfloat16 (on CPUs
  // with AVX512_BF16) channels-last or channel-blocked src0 (a
  // squeeze-and-excitation's mul): a direct loop, which oneDNN 2.6's generic
  // binary kernel runs several times slower (bf16: 3.9 against 0.5 ms a
  // call of efficientnet_b0 at batch 8 on a 2-core Zen 5).
  struct Channelwise {
    bool on = false, mul = true, bf16 = false;
    int64_t N = 0, C = 0, HW = 0;
    int64_t block = 0;              // 0: channels-last; else the channel block (8, 16)
    int64_t x_n = 0, s_n = 0;       // strides of n in src0 and src1 (elements)
    int64_t s_block = 0;            // src1: stride of a channel block (0: plain channels)
  } cw_;
  void channelwise(const float* x, const float* s, float* y) const;
  void channelwise_bf16(const uint16_t* x, const uint16_t* s, uint16_t* y) const;
  int first_;
  PerThreadCount prim_;
  mutable dnnl::memory src0_, src1_, dst_mem_;
};

class LayoutReorder final : public Primitive {
 public:
  // `returned`: the output is a return of the job, read by nothing in the
  // plan (Jobflow's transposes then stream it past the cache).
  LayoutReorder(TensorSpec spec, const MemDesc& from, const MemDesc& to, bool returned = false);
  OpKind kind() const override { return OpKind::Reorder; }
  std::vector<TensorSpec> infer(const std::vector<TensorSpec>&) const override { return {spec_}; }
  Attrs attributes() const override;
  void eval_cpu(const std::vector<Tensor>& in, const std::vector<Tensor>& out, ExecContext& ctx) const override;
  const MemDesc& dst_desc() const { return to_; }
  // Made for a return: then the plan may point its output at the returned
  // tensor (eval_cpu writes wherever out[0] is, every call).
  bool writes_output_anywhere(int) const override { return returned_; }

 private:
  TensorSpec spec_;
  MemDesc from_, to_;
  bool copy_ = false;  // the same bytes in both formats (one pixel per image): a memcpy, "algo=copy"
  bool own_nchw_ = false;  // channels-last float32 to row-major: cpu::nhwc_to_nchw, "algo=nhwc_to_nchw"
  bool returned_ = false;
  PerThreadCount prim_;
  mutable dnnl::memory src_, dst_mem_;
};

}  // namespace jobflow::cpu

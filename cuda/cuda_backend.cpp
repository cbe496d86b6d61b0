// The CUDA backend: Backend::eval on device copies of an op's inputs.
//
// Tensors of a Plan live in host memory (the plan's arena, the session's
// variables, the caller's inputs), so each eval() copies the op's inputs to
// the device, runs the op's kernels on this thread's stream, copies the
// outputs (and any input the op updates in place) back and waits for the
// stream. That makes every op individually correct and interchangeable with
// the CPU backend at any node; keeping whole plans on the device is the next
// step (README.md).
#include <algorithm>
#include <atomic>
#include <cstring>

#include "jobflow_cuda.h"
#include "ops.h"

namespace jobflow::cuda {

// ---------------------------------------------------------------------------
// Helpers shared by the op files

void Launch::check(cudaError_t e) const { cuda::check(e, p.name()); }
void Launch::check(cublasStatus_t e) const { cuda::check(e, p.name()); }
void Launch::check(cudnnStatus_t e) const { cuda::check(e, p.name()); }

bool is_float(DType t) { return t == DType::Float32 || t == DType::Float64; }

static_assert(k::kMaxRank == layout::kMaxRank, "the kernels' views hold the engine's ranks");

k::BView broadcast_view(const Shape& out, const Shape& a, const Shape& b) {
  if (out.size() > static_cast<size_t>(k::kMaxRank))
    throw Error("[cuda] broadcast: rank " + std::to_string(out.size()) + " exceeds " + std::to_string(k::kMaxRank));
  k::BView v;
  layout::broadcast_view(v, out, a, b);
  return v;
}

k::RView reduce_view(const Shape& x, const std::vector<bool>& reduced) {
  // Groups of neighbouring dims that are all reduced or all kept, size-1
  // dims dropped; the stride of a group is that of its innermost dim.
  const int r = static_cast<int>(x.size());
  if (r > k::kMaxRank) throw Error("[cuda] reduce: rank " + std::to_string(r) + " exceeds " + std::to_string(k::kMaxRank));
  int64_t gdim[k::kMaxRank], gstr[k::kMaxRank];
  bool gred[k::kMaxRank];
  int ng = 0;
  int64_t stride = 1;
  k::RView v;
  for (int i = r - 1; i >= 0; --i) {
    const int64_t d = x[i];
    if (reduced[i]) v.count *= d;
    if (d == 1) continue;
    if (ng > 0 && gred[ng - 1] == reduced[i]) {
      gdim[ng - 1] *= d;
    } else {
      gdim[ng] = d, gstr[ng] = stride, gred[ng] = reduced[i];
      ++ng;
    }
    stride *= d;
  }
  v.inner_reduced = ng > 0 && gred[0];
  for (int g = ng - 1; g >= 0; --g) {  // outermost first
    if (gred[g]) {
      v.rdim[v.nr] = gdim[g], v.rstr[v.nr] = gstr[g];
      ++v.nr;
    } else {
      v.kdim[v.nk] = gdim[g], v.kstr[v.nk] = gstr[g];
      ++v.nk;
    }
  }
  return v;
}

// ---------------------------------------------------------------------------
// The backend

namespace {

std::atomic<int64_t> g_device_evals{0}, g_host_evals{0}, g_h2d{0}, g_d2h{0};

const OpTable& table() {
  static const OpTable t = [] {
    OpTable t;
    add_elementwise_ops(t);
    add_blas_ops(t);
    add_dnn_ops(t);
    return t;
  }();
  return t;
}

const OpDef* lookup(const Primitive& p) { return table().find(p.kind()); }

// The dtypes the device kernels take (context.cpp's dt()); an op on any
// other (int16, the unsigned types beyond uint8, the 16-bit floats) runs
// on the host.
bool device_dtypes(const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  auto ok = [](const Tensor& t) {
    if (!t.defined()) return true;
    switch (t.dtype()) {
      case DType::Float32: case DType::Float64: case DType::Int32: case DType::Int64: case DType::Int8:
      case DType::UInt8: case DType::Bool:
        return true;
      default: return false;
    }
  };
  return std::all_of(in.begin(), in.end(), ok) && std::all_of(out.begin(), out.end(), ok);
}

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  bool available() const override { return device_count() > 0; }

  bool supports(const Primitive& p) const override {
    const OpDef* d = lookup(p);
    return d && (!d->supports || d->supports(p));
  }

  void eval(const Primitive& p, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
            ExecContext& ctx) const override {
    const OpDef* d = lookup(p);
    if (!d || (d->supports && !d->supports(p)) || (d->accepts && !d->accepts(p, in)) || !device_dtypes(in, out)) {
      ++g_host_evals;
      p.eval_cpu(in, out, ctx);
      return;
    }
    Context& c = context();
    const cudaStream_t s = c.stream();
    Launch L{c, p, in, out, ctx, {}, {}};
    L.din.reserve(in.size());
    L.dout.reserve(out.size());
    int64_t h2d = 0, d2h = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const size_t n = in[i].defined() ? in[i].nbytes() : 0;
      if ((d->skip_inputs >> i) & 1u || n == 0) {
        L.din.emplace_back();
        continue;
      }
      L.din.emplace_back(c.alloc(), n);
      check(cudaMemcpyAsync(L.din.back().get(), in[i].raw(), n, cudaMemcpyHostToDevice, s),
            std::string(p.name()) + ": copy of input " + std::to_string(i) + " to the device");
      h2d += static_cast<int64_t>(n);
    }
    for (const Tensor& t : out) {
      const size_t n = t.defined() ? t.nbytes() : 0;
      L.dout.emplace_back();
      if (n) L.dout.back() = DevBuf(c.alloc(), n);
    }
    d->run(L);
    for (size_t i = 0; i < out.size(); ++i) {
      if (!L.dout[i].get()) continue;
      check(cudaMemcpyAsync(out[i].raw(), L.dout[i].get(), out[i].nbytes(), cudaMemcpyDeviceToHost, s),
            std::string(p.name()) + ": copy of output " + std::to_string(i) + " to the host");
      d2h += static_cast<int64_t>(out[i].nbytes());
    }
    for (size_t i = 0; i < in.size(); ++i) {
      if (!((d->written_inputs >> i) & 1u) || !L.din[i].get()) continue;
      check(cudaMemcpyAsync(in[i].raw(), L.din[i].get(), in[i].nbytes(), cudaMemcpyDeviceToHost, s),
            std::string(p.name()) + ": copy of updated input " + std::to_string(i) + " to the host");
      d2h += static_cast<int64_t>(in[i].nbytes());
    }
    // Kernel execution errors surface here.
    check(cudaStreamSynchronize(s), p.name());
    ++g_device_evals;
    g_h2d += h2d;
    g_d2h += d2h;
  }
};

}  // namespace

Stats stats() {
  Stats s;
  s.device_evals = g_device_evals.load();
  s.host_evals = g_host_evals.load();
  s.h2d_bytes = g_h2d.load();
  s.d2h_bytes = g_d2h.load();
  return s;
}

void reset_stats() {
  g_device_evals = 0;
  g_host_evals = 0;
  g_h2d = 0;
  g_d2h = 0;
}

void empty_cache() {
  if (device_count() > 0) context().alloc().empty_cache();
}

}  // namespace jobflow::cuda

extern "C" const jobflow::Backend* jobflow_cuda_backend() {
  static const jobflow::cuda::CudaBackend b;
  return &b;
}

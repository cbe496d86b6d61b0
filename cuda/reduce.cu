// Reductions (sum, mean, max over any set of axes; also bias_grad and
// sum_to, which the host side maps to sums) and argmax.
//
// The host collapses the input into kept and reduced groups (RView). Two
// kernels cover every layout, both deterministic (a fixed combination order):
//   * one block per output: threads stride over its reduced elements and a
//     shared-memory tree combines them; used when each output folds many
//     elements (long contiguous runs, or few outputs);
//   * one thread per output: a plain loop over the reduced elements; used
//     when there are many outputs, so neighbouring threads read neighbouring
//     addresses when the innermost group is kept.
#include "common.cuh"

namespace jobflow::cuda::k {
namespace {

template <class T>
struct SumP {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  __device__ static Acc init() { return Acc(0); }
  __device__ static Acc step(Acc a, T v) { return a + static_cast<Acc>(v); }
  __device__ static Acc merge(Acc a, Acc b) { return a + b; }
};
template <class T>
struct MaxP {
  using Acc = T;
  __device__ static Acc init() { return lowest<T>(); }
  __device__ static Acc step(Acc a, T v) { return max_nan(a, v); }
  __device__ static Acc merge(Acc a, Acc b) { return max_nan(a, b); }
};

__device__ inline int64_t kept_offset(const RView& v, int64_t o) {
  int64_t off = 0;
  for (int d = v.nk - 1; d >= 0; --d) {
    off += (o % v.kdim[d]) * v.kstr[d];
    o /= v.kdim[d];
  }
  return off;
}
__device__ inline int64_t reduced_offset(const RView& v, int64_t r) {
  int64_t off = 0;
  for (int d = v.nr - 1; d >= 0; --d) {
    off += (r % v.rdim[d]) * v.rstr[d];
    r /= v.rdim[d];
  }
  return off;
}

// fin: Sum -> T(a); Mean -> T(a * inv); Max -> a.
template <class T, class A>
__device__ inline T finish(Red op, A a, double inv) {
  if (op == Red::Mean) return static_cast<T>(static_cast<double>(a) * inv);
  return static_cast<T>(a);
}

template <class P, class T>
__global__ void reduce_block_k(Red op, const T* x, T* y, RView v, int64_t n_out, double inv) {
  using A = typename P::Acc;
  extern __shared__ unsigned char smem[];
  A* sh = reinterpret_cast<A*>(smem);
  for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
    const T* base = x + kept_offset(v, o);
    A a = P::init();
    for (int64_t r = threadIdx.x; r < v.count; r += blockDim.x) a = P::step(a, base[reduced_offset(v, r)]);
    a = block_reduce(a, sh, [](A p, A q) { return P::merge(p, q); });
    if (threadIdx.x == 0) y[o] = finish<T>(op, a, inv);
  }
}

template <class P, class T>
__global__ void reduce_thread_k(Red op, const T* x, T* y, RView v, int64_t n_out, double inv) {
  using A = typename P::Acc;
  JF_GRID_LOOP(o, n_out) {
    const T* base = x + kept_offset(v, o);
    A a = P::init();
    for (int64_t r = 0; r < v.count; ++r) a = P::step(a, base[reduced_offset(v, r)]);
    y[o] = finish<T>(op, a, inv);
  }
}

template <class P, class T>
void launch_reduce(Red op, const T* x, T* y, const RView& v, int64_t n_out, cudaStream_t s) {
  const double inv = 1.0 / static_cast<double>(v.count);  // count 0: inf, and 0 * inf = NaN (numpy's empty mean)
  // Block per output when each output folds a long run, or when there are
  // too few outputs to fill the device with one thread each.
  const bool per_block = (v.inner_reduced && v.count >= 64) || (n_out < 2048 && v.count >= 256);
  if (per_block) {
    constexpr int threads = 256;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n_out, int64_t{1} << 16));
    reduce_block_k<P, T><<<blocks, threads, threads * sizeof(typename P::Acc), s>>>(op, x, y, v, n_out, inv);
  } else {
    reduce_thread_k<P, T><<<grid_for(n_out), kThreads, 0, s>>>(op, x, y, v, n_out, inv);
  }
}

template <class T>
__global__ void argmax_k(const T* x, int32_t* y, int64_t outer, int64_t n, int64_t inner) {
  JF_GRID_LOOP(i, outer * inner) {
    const int64_t o = i / inner, j = i % inner;
    const T* base = x + o * n * inner + j;
    T best = base[0];
    int32_t bi = 0;
    for (int64_t c = 1; c < n; ++c) {
      const T v = base[c * inner];
      if (v > best || (v != v && best == best)) {  // first NaN wins
        best = v;
        bi = static_cast<int32_t>(c);
      }
    }
    y[i] = bi;
  }
}

}  // namespace

cudaError_t reduce(Red op, DT t, const void* x, void* y, const RView& v, int64_t n_out, cudaStream_t s) {
  if (n_out == 0) return cudaSuccess;
  return dispatch_all(t, [&](auto z) {
    using T = decltype(z);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    if (op == Red::Max) launch_reduce<MaxP<T>, T>(op, px, py, v, n_out, s);
    else launch_reduce<SumP<T>, T>(op, px, py, v, n_out, s);
  });
}

cudaError_t argmax(DT t, const void* x, int32_t* y, int64_t outer, int64_t n, int64_t inner, cudaStream_t s) {
  if (outer * inner == 0) return cudaSuccess;
  return dispatch_all(t, [&](auto z) {
    using T = decltype(z);
    argmax_k<T><<<grid_for(outer * inner), kThreads, 0, s>>>(static_cast<const T*>(x), y, outer, n, inner);
  });
}

}  // namespace jobflow::cuda::k

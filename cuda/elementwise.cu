// Elementwise kernels: broadcasting binary ops, unary math, activation
// gradients, add_n, cast, fill, bias_add, strided copies and SGD.
// Each mirrors the CPU kernel of the same op (engine/src/ops/*.cpp)
// element by element; only the rounding of libm-style functions differs.
#include "common.cuh"

namespace jobflow::cuda::k {
namespace {

template <class T>
__device__ inline T bin_apply(Bin op, T a, T b) {
  switch (op) {
    case Bin::Add: return T(a + b);
    case Bin::Sub: return T(a - b);
    case Bin::Mul: return T(a * b);
    case Bin::Div:
      if constexpr (std::is_floating_point_v<T>) return a / b;
      else return b == 0 ? T(0) : T(a / b);  // integer division by zero is defined as 0 (CPU too)
    case Bin::EqMask: return a == b ? T(1) : T(0);
  }
  return T(0);
}

template <class T>
__global__ void bin_same(Bin op, const T* a, const T* b, T* o, int64_t n) {
  JF_GRID_LOOP(i, n) o[i] = bin_apply(op, a[i], b[i]);
}
template <class T>
__global__ void bin_scalar_b(Bin op, const T* a, const T* b, T* o, int64_t n) {
  const T bv = *b;
  JF_GRID_LOOP(i, n) o[i] = bin_apply(op, a[i], bv);
}
template <class T>
__global__ void bin_scalar_a(Bin op, const T* a, const T* b, T* o, int64_t n) {
  const T av = *a;
  JF_GRID_LOOP(i, n) o[i] = bin_apply(op, av, b[i]);
}
template <class T>
__global__ void bin_general(Bin op, const T* a, const T* b, T* o, int64_t n, BView v) {
  JF_GRID_LOOP(i, n) {
    int64_t q = i, oa = 0, ob = 0;
    for (int d = v.nd - 1; d >= 0; --d) {
      const int64_t id = q % v.dim[d];
      q /= v.dim[d];
      oa += id * v.sa[d];
      ob += id * v.sb[d];
    }
    o[i] = bin_apply(op, a[oa], b[ob]);
  }
}

template <class T>
__device__ inline T un_apply(Un op, T v, double s) {
  switch (op) {
    case Un::Neg: return T(-v);
    case Un::Square: return T(v * v);
    case Un::Relu:
      if constexpr (std::is_unsigned_v<T>) return v;
      else return v < T(0) ? T(0) : v;  // keeps NaN
    // Integers with a whole-number scalar: 64-bit unsigned arithmetic, exact
    // and wrapping, as the CPU kernel (ops/elementwise.cpp) computes them.
    case Un::AddScalar:
      if constexpr (std::is_floating_point_v<T>) return v + static_cast<T>(s);
      else if (trunc(s) == s && s >= -0x1p63 && s < 0x1p63)
        return static_cast<T>(static_cast<uint64_t>(v) + static_cast<uint64_t>(static_cast<int64_t>(s)));
      else return static_cast<T>(static_cast<double>(v) + s);
    case Un::MulScalar:
      if constexpr (std::is_floating_point_v<T>) return v * static_cast<T>(s);
      else if (trunc(s) == s && s >= -0x1p63 && s < 0x1p63)
        return static_cast<T>(static_cast<uint64_t>(v) * static_cast<uint64_t>(static_cast<int64_t>(s)));
      else return static_cast<T>(static_cast<double>(v) * s);
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {  // infer() keeps integers away from these
    switch (op) {
      case Un::Exp: return dexp(v);
      case Un::Log: return dlog(v);
      case Un::Sqrt: return dsqrt(v);
      case Un::Rsqrt: return T(1) / dsqrt(v);
      case Un::Sigmoid: return T(1) / (T(1) + dexp(-v));
      case Un::Tanh: return dtanh(v);
      default: break;
    }
  }
  return T(0);
}

template <class T>
__global__ void unary_k(Un op, const T* x, T* y, int64_t n, double s) {
  JF_GRID_LOOP(i, n) y[i] = un_apply(op, x[i], s);
}

template <class T>
__global__ void act_grad_k(Act a, const T* dy, const T* y, T* dx, int64_t n) {
  JF_GRID_LOOP(i, n) {
    const T g = dy[i], v = y[i];
    switch (a) {
      case Act::Relu: dx[i] = v > T(0) ? g : T(0); break;
      case Act::Sigmoid: dx[i] = g * v * (T(1) - v); break;
      case Act::Tanh: dx[i] = g * (T(1) - v * v); break;
    }
  }
}

constexpr int kAddNChunk = 32;
struct PtrChunk {
  const void* p[kAddNChunk];
  int k;
};
// out = in[0] + in[1] + ... for one chunk of inputs; `accumulate` continues
// the left-to-right sum from out (for the chunks after the first).
template <class T>
__global__ void add_n_k(PtrChunk c, T* out, int64_t n, bool accumulate) {
  JF_GRID_LOOP(i, n) {
    int j = 0;
    T acc;
    if (accumulate) {
      acc = out[i];
    } else {
      acc = static_cast<const T*>(c.p[0])[i];
      j = 1;
    }
    for (; j < c.k; ++j) acc = T(acc + static_cast<const T*>(c.p[j])[i]);
    out[i] = acc;
  }
}

template <class I, class O>
__global__ void cast_k(const I* x, O* y, int64_t n) {
  JF_GRID_LOOP(i, n) {
    if constexpr (std::is_floating_point_v<I> && std::is_integral_v<O> && sizeof(O) < 8)
      y[i] = static_cast<O>(static_cast<int64_t>(x[i]));  // wraps like numpy
    else
      y[i] = static_cast<O>(x[i]);
  }
}

template <class T>
__global__ void fill_k(T* y, int64_t n, T v) {
  JF_GRID_LOOP(i, n) y[i] = v;
}

template <class T>
__global__ void bias_add_k(const T* x, const T* b, T* y, int64_t n, int64_t C, int64_t inner, bool relu) {
  JF_GRID_LOOP(i, n) {
    const T v = x[i] + b[(i / inner) % C];
    y[i] = relu ? (v < T(0) ? T(0) : v) : v;
  }
}

template <class T>
__global__ void strided_copy_k(const T* x, T* y, SView v, int64_t n) {
  JF_GRID_LOOP(i, n) {
    int64_t q = i, off = 0;
    for (int d = v.nd - 1; d >= 0; --d) {
      off += (q % v.dim[d]) * v.str[d];
      q /= v.dim[d];
    }
    y[i] = x[off];
  }
}

template <class T>
__global__ void sgd_k(T* w, const T* g, T* v, int64_t n, T lr, T m, bool momentum) {
  JF_GRID_LOOP(i, n) {
    if (!momentum) {
      w[i] -= lr * g[i];
    } else {
      v[i] = m * v[i] - lr * g[i];
      w[i] += v[i];
    }
  }
}

}  // namespace

cudaError_t binary(Bin op, DT t, const void* a, const void* b, void* out, int64_t n, int64_t na, int64_t nb,
                   const BView& v, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return dispatch_all(t, [&](auto z) {
    using T = decltype(z);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* po = static_cast<T*>(out);
    if (na == n && nb == n) bin_same<T><<<grid_for(n), kThreads, 0, s>>>(op, pa, pb, po, n);
    else if (nb == 1 && na == n) bin_scalar_b<T><<<grid_for(n), kThreads, 0, s>>>(op, pa, pb, po, n);
    else if (na == 1 && nb == n) bin_scalar_a<T><<<grid_for(n), kThreads, 0, s>>>(op, pa, pb, po, n);
    else bin_general<T><<<grid_for(n), kThreads, 0, s>>>(op, pa, pb, po, n, v);
  });
}

cudaError_t unary(Un op, DT t, const void* x, void* y, int64_t n, double scalar, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return dispatch_all(t, [&](auto z) {
    using T = decltype(z);
    unary_k<T><<<grid_for(n), kThreads, 0, s>>>(op, static_cast<const T*>(x), static_cast<T*>(y), n, scalar);
  });
}

cudaError_t act_grad(Act a, DT t, const void* dy, const void* y, void* dx, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto z) {
    using T = decltype(z);
    act_grad_k<T><<<grid_for(n), kThreads, 0, s>>>(a, static_cast<const T*>(dy), static_cast<const T*>(y),
                                                   static_cast<T*>(dx), n);
  });
}

cudaError_t add_n(DT t, const void* const* ins, int k, void* out, int64_t n, cudaStream_t s) {
  if (n == 0 || k <= 0) return cudaSuccess;
  return dispatch_all(t, [&](auto z) {
    using T = decltype(z);
    for (int first = 0; first < k; first += kAddNChunk) {
      PtrChunk c{};
      c.k = std::min(kAddNChunk, k - first);
      for (int j = 0; j < c.k; ++j) c.p[j] = ins[first + j];
      add_n_k<T><<<grid_for(n), kThreads, 0, s>>>(c, static_cast<T*>(out), n, first > 0);
    }
  });
}

cudaError_t cast(DT from, DT to, const void* x, void* y, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  cudaError_t inner = cudaSuccess;  // the inner dispatch consumes its own launch error
  const cudaError_t outer = dispatch_all(from, [&](auto zi) {
    using I = decltype(zi);
    inner = dispatch_all(to, [&](auto zo) {
      using O = decltype(zo);
      cast_k<I, O><<<grid_for(n), kThreads, 0, s>>>(static_cast<const I*>(x), static_cast<O*>(y), n);
    });
  });
  return inner != cudaSuccess ? inner : outer;
}

cudaError_t fill(DT t, void* y, int64_t n, double value, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return dispatch_all(t, [&](auto z) {
    using T = decltype(z);
    fill_k<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(y), n, static_cast<T>(value));
  });
}

cudaError_t bias_add(DT t, const void* x, const void* bias, void* y, int64_t outer, int64_t C, int64_t inner, bool relu,
                     cudaStream_t s) {
  const int64_t n = outer * C * inner;
  if (n == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto z) {
    using T = decltype(z);
    bias_add_k<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(bias),
                                                   static_cast<T*>(y), n, C, inner, relu);
  });
}

cudaError_t strided_copy(DT t, const void* x, void* y, const SView& v, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  // Copies move bytes: one kernel per element size.
  switch (t) {
    case DT::F32:
    case DT::I32:
      strided_copy_k<uint32_t><<<grid_for(n), kThreads, 0, s>>>(static_cast<const uint32_t*>(x),
                                                                static_cast<uint32_t*>(y), v, n);
      break;
    case DT::F64:
    case DT::I64:
      strided_copy_k<uint64_t><<<grid_for(n), kThreads, 0, s>>>(static_cast<const uint64_t*>(x),
                                                                static_cast<uint64_t*>(y), v, n);
      break;
    case DT::I8:
    case DT::U8:
      strided_copy_k<uint8_t><<<grid_for(n), kThreads, 0, s>>>(static_cast<const uint8_t*>(x),
                                                               static_cast<uint8_t*>(y), v, n);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t sgd(DT t, void* w, const void* g, void* v, int64_t n, double lr, double momentum, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto z) {
    using T = decltype(z);
    sgd_k<T><<<grid_for(n), kThreads, 0, s>>>(static_cast<T*>(w), static_cast<const T*>(g), static_cast<T*>(v), n,
                                              static_cast<T>(lr), static_cast<T>(momentum), momentum != 0);
  });
}

}  // namespace jobflow::cuda::k

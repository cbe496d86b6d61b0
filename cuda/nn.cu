// Neural-network kernels: softmax / log_softmax and their gradients, the
// sparse softmax cross-entropy and its gradient, and the NCHW helpers of
// the cuDNN paths (explicit padding / cropping, pooling gradients).
//
// Softmax-like ops see the tensor as (outer, C, inner). When inner == 1 the
// C values of a row are contiguous and one block handles a row (block-wide
// max and sum); otherwise one thread walks one strided lane, exactly like
// the CPU loop (neighbouring threads read neighbouring addresses).
#include "common.cuh"

namespace jobflow::cuda::k {
namespace {

constexpr int kRowThreads = 128;

template <class T>
struct MaxOp {
  __device__ T operator()(T a, T b) const { return max_nan(a, b); }
};
template <class T>
struct SumOp {
  __device__ T operator()(T a, T b) const { return a + b; }
};

template <class T, bool Log>
__global__ void softmax_rows_k(const T* x, T* y, int64_t rows, int64_t C) {
  extern __shared__ unsigned char smem[];
  T* sh = reinterpret_cast<T*>(smem);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    T m = lowest<T>();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m = max_nan(m, xr[c]);
    m = block_reduce(m, sh, MaxOp<T>());
    T s = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += dexp(xr[c] - m);
    s = block_reduce(s, sh, SumOp<T>());
    if constexpr (Log) {
      const T ls = dlog(s);  // (x - m) - log(s) keeps the small log(s) against a large m
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = (xr[c] - m) - ls;
    } else {
      const T inv = T(1) / s;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = dexp(xr[c] - m) * inv;
    }
  }
}

template <class T, bool Log>
__global__ void softmax_lanes_k(const T* x, T* y, int64_t outer, int64_t C, int64_t inner) {
  JF_GRID_LOOP(i, outer * inner) {
    const int64_t b = (i / inner) * C * inner + i % inner;
    const T* xl = x + b;
    T* yl = y + b;
    T m = xl[0];
    for (int64_t c = 1; c < C; ++c) m = max_nan(m, xl[c * inner]);
    T s = 0;
    if constexpr (Log) {
      for (int64_t c = 0; c < C; ++c) s += dexp(xl[c * inner] - m);
      const T ls = dlog(s);
      for (int64_t c = 0; c < C; ++c) yl[c * inner] = (xl[c * inner] - m) - ls;
    } else {
      for (int64_t c = 0; c < C; ++c) {
        const T e = dexp(xl[c * inner] - m);
        yl[c * inner] = e;
        s += e;
      }
      const T inv = T(1) / s;
      for (int64_t c = 0; c < C; ++c) yl[c * inner] *= inv;
    }
  }
}

template <class T, bool Log>
__global__ void softmax_grad_rows_k(const T* y, const T* dy, T* dx, int64_t rows, int64_t C) {
  extern __shared__ unsigned char smem[];
  T* sh = reinterpret_cast<T*>(smem);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * C;
    const T* gr = dy + r * C;
    T* dr = dx + r * C;
    T s = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += Log ? gr[c] : gr[c] * yr[c];
    s = block_reduce(s, sh, SumOp<T>());
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      dr[c] = Log ? gr[c] - dexp(yr[c]) * s : yr[c] * (gr[c] - s);
  }
}

template <class T, bool Log>
__global__ void softmax_grad_lanes_k(const T* y, const T* dy, T* dx, int64_t outer, int64_t C, int64_t inner) {
  JF_GRID_LOOP(i, outer * inner) {
    const int64_t b = (i / inner) * C * inner + i % inner;
    T s = 0;
    for (int64_t c = 0; c < C; ++c) s += Log ? dy[b + c * inner] : dy[b + c * inner] * y[b + c * inner];
    for (int64_t c = 0; c < C; ++c) {
      const int64_t k = b + c * inner;
      dx[k] = Log ? dy[k] - dexp(y[k]) * s : y[k] * (dy[k] - s);
    }
  }
}

template <class T, class L>
__global__ void xent_k(const L* lab, const T* x, T* loss, T* p, int64_t B, int64_t C) {
  extern __shared__ unsigned char smem[];
  T* sh = reinterpret_cast<T*>(smem);
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const T* xr = x + b * C;
    T* pr = p + b * C;
    T m = lowest<T>();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m = max_nan(m, xr[c]);
    m = block_reduce(m, sh, MaxOp<T>());
    T s = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += dexp(xr[c] - m);
    s = block_reduce(s, sh, SumOp<T>());
    const T inv = T(1) / s;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) pr[c] = dexp(xr[c] - m) * inv;
    // -log softmax[label] = log(sum exp(x - m)) - (x[label] - m)
    if (threadIdx.x == 0) loss[b] = dlog(s) - (xr[lab[b]] - m);
  }
}

template <class T, class L>
__global__ void xent_grad_k(const T* p, const L* lab, const T* dl, T* dx, int64_t B, int64_t C) {
  JF_GRID_LOOP(i, B * C) {
    const int64_t b = i / C, c = i % C;
    const T d = dl[b];
    const T v = p[i] * d;
    dx[i] = c == static_cast<int64_t>(lab[b]) ? v - d : v;
  }
}

__global__ void window_copy_k(const float* src, float* dst, int64_t planes, int64_t Hs, int64_t Ws, int64_t Hd,
                              int64_t Wd, int64_t dh, int64_t dw, float pad) {
  JF_GRID_LOOP(i, planes * Hd * Wd) {
    const int64_t w = i % Wd, h = (i / Wd) % Hd, pl = i / (Wd * Hd);
    const int64_t hs = h + dh, ws = w + dw;
    dst[i] = (hs >= 0 && hs < Hs && ws >= 0 && ws < Ws) ? src[(pl * Hs + hs) * Ws + ws] : pad;
  }
}

// Output rows/cols whose window covers input row h: oh*s - p <= h < oh*s - p + k.
__device__ inline void covering(int64_t h, int64_t k, int64_t s, int64_t p, int64_t OH, int64_t& lo, int64_t& hi) {
  const int64_t a = h + p - k + 1;
  lo = a <= 0 ? 0 : (a + s - 1) / s;
  hi = min((h + p) / s, OH - 1);
}

__global__ void avg_pool_grad_k(PoolGeom g, const float* dy, float* dx) {
  JF_GRID_LOOP(i, g.planes * g.H * g.W) {
    const int64_t w = i % g.W, h = (i / g.W) % g.H, pl = i / (g.W * g.H);
    int64_t oh0, oh1, ow0, ow1;
    covering(h, g.kh, g.sh, g.pt, g.OH, oh0, oh1);
    covering(w, g.kw, g.sw, g.pl, g.OW, ow0, ow1);
    const float* d = dy + pl * g.OH * g.OW;
    float acc = 0.f;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const int64_t h0 = oh * g.sh - g.pt;
      const int64_t rows = min(h0 + g.kh, g.H) - max(h0, int64_t{0});
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t w0 = ow * g.sw - g.pl;
        const int64_t cols = min(w0 + g.kw, g.W) - max(w0, int64_t{0});
        acc += d[oh * g.OW + ow] / static_cast<float>(rows * cols);
      }
    }
    dx[i] = acc;
  }
}

__global__ void max_pool_grad_from_x_k(PoolGeom g, const float* dy, const float* x, float* dx) {
  JF_GRID_LOOP(i, g.planes * g.H * g.W) {
    const int64_t w = i % g.W, h = (i / g.W) % g.H, pl = i / (g.W * g.H);
    const int64_t self = h * g.W + w;
    int64_t oh0, oh1, ow0, ow1;
    covering(h, g.kh, g.sh, g.pt, g.OH, oh0, oh1);
    covering(w, g.kw, g.sw, g.pl, g.OW, ow0, ow1);
    const float* xp = x + pl * g.H * g.W;
    const float* d = dy + pl * g.OH * g.OW;
    float acc = 0.f;  // summed in (oh, ow) order, as the CPU scatters
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const int64_t h0 = oh * g.sh - g.pt;
      const int64_t hb = max(h0, int64_t{0}), he = min(h0 + g.kh, g.H);
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t w0 = ow * g.sw - g.pl;
        const int64_t wb = max(w0, int64_t{0}), we = min(w0 + g.kw, g.W);
        int64_t best = -1;
        float bv = 0.f;
        // The first NaN, else the first maximum: the forward's output
        // (CUDNN_PROPAGATE_NAN) and the CPU's rule.
        for (int64_t hh = hb; hh < he; ++hh)
          for (int64_t ww = wb; ww < we; ++ww) {
            const float v = xp[hh * g.W + ww];
            if (best < 0 || v > bv || (isnan(v) && !isnan(bv))) bv = v, best = hh * g.W + ww;
          }
        if (best == self) acc += d[oh * g.OW + ow];
      }
    }
    dx[i] = acc;
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t{1} << 16)); }

template <class F>
cudaError_t with_labels(DT lt, F&& f) {
  if (lt == DT::I32) f(int32_t{});
  else if (lt == DT::I64) f(int64_t{});
  else return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

cudaError_t softmax(DT t, bool log, const void* x, void* y, int64_t outer, int64_t C, int64_t inner, cudaStream_t s) {
  if (outer * C * inner == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto z) {
    using T = decltype(z);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    const size_t shm = kRowThreads * sizeof(T);
    if (inner == 1) {
      if (log) softmax_rows_k<T, true><<<row_blocks(outer), kRowThreads, shm, s>>>(px, py, outer, C);
      else softmax_rows_k<T, false><<<row_blocks(outer), kRowThreads, shm, s>>>(px, py, outer, C);
    } else {
      if (log) softmax_lanes_k<T, true><<<grid_for(outer * inner), kThreads, 0, s>>>(px, py, outer, C, inner);
      else softmax_lanes_k<T, false><<<grid_for(outer * inner), kThreads, 0, s>>>(px, py, outer, C, inner);
    }
  });
}

cudaError_t softmax_grad(DT t, bool log, const void* y, const void* dy, void* dx, int64_t outer, int64_t C,
                         int64_t inner, cudaStream_t s) {
  if (outer * C * inner == 0) return cudaSuccess;
  return dispatch_float(t, [&](auto z) {
    using T = decltype(z);
    const T* py = static_cast<const T*>(y);
    const T* pg = static_cast<const T*>(dy);
    T* pd = static_cast<T*>(dx);
    const size_t shm = kRowThreads * sizeof(T);
    if (inner == 1) {
      if (log) softmax_grad_rows_k<T, true><<<row_blocks(outer), kRowThreads, shm, s>>>(py, pg, pd, outer, C);
      else softmax_grad_rows_k<T, false><<<row_blocks(outer), kRowThreads, shm, s>>>(py, pg, pd, outer, C);
    } else {
      const unsigned g = grid_for(outer * inner);
      if (log) softmax_grad_lanes_k<T, true><<<g, kThreads, 0, s>>>(py, pg, pd, outer, C, inner);
      else softmax_grad_lanes_k<T, false><<<g, kThreads, 0, s>>>(py, pg, pd, outer, C, inner);
    }
  });
}

cudaError_t xent(DT t, DT lt, const void* labels, const void* logits, void* loss, void* prob, int64_t B, int64_t C,
                 cudaStream_t s) {
  if (B == 0) return cudaSuccess;
  cudaError_t bad = cudaSuccess;
  const cudaError_t e = dispatch_float(t, [&](auto z) {
    using T = decltype(z);
    bad = with_labels(lt, [&](auto zl) {
      using L = decltype(zl);
      xent_k<T, L><<<row_blocks(B), kRowThreads, kRowThreads * sizeof(T), s>>>(
          static_cast<const L*>(labels), static_cast<const T*>(logits), static_cast<T*>(loss), static_cast<T*>(prob),
          B, C);
    });
  });
  return bad != cudaSuccess ? bad : e;
}

cudaError_t xent_grad(DT t, DT lt, const void* prob, const void* labels, const void* dloss, void* dx, int64_t B,
                      int64_t C, cudaStream_t s) {
  if (B * C == 0) return cudaSuccess;
  cudaError_t bad = cudaSuccess;
  const cudaError_t e = dispatch_float(t, [&](auto z) {
    using T = decltype(z);
    bad = with_labels(lt, [&](auto zl) {
      using L = decltype(zl);
      xent_grad_k<T, L><<<grid_for(B * C), kThreads, 0, s>>>(static_cast<const T*>(prob), static_cast<const L*>(labels),
                                                             static_cast<const T*>(dloss), static_cast<T*>(dx), B, C);
    });
  });
  return bad != cudaSuccess ? bad : e;
}

cudaError_t window_copy(const float* src, float* dst, int64_t planes, int64_t Hs, int64_t Ws, int64_t Hd, int64_t Wd,
                        int64_t dh, int64_t dw, float pad, cudaStream_t s) {
  const int64_t n = planes * Hd * Wd;
  if (n == 0) return cudaSuccess;
  window_copy_k<<<grid_for(n), kThreads, 0, s>>>(src, dst, planes, Hs, Ws, Hd, Wd, dh, dw, pad);
  return cudaGetLastError();
}

cudaError_t avg_pool_grad(const PoolGeom& g, const float* dy, float* dx, cudaStream_t s) {
  const int64_t n = g.planes * g.H * g.W;
  if (n == 0) return cudaSuccess;
  avg_pool_grad_k<<<grid_for(n), kThreads, 0, s>>>(g, dy, dx);
  return cudaGetLastError();
}

cudaError_t max_pool_grad_from_x(const PoolGeom& g, const float* dy, const float* x, float* dx, cudaStream_t s) {
  const int64_t n = g.planes * g.H * g.W;
  if (n == 0) return cudaSuccess;
  max_pool_grad_from_x_k<<<grid_for(n), kThreads, 0, s>>>(g, dy, x, dx);
  return cudaGetLastError();
}

}  // namespace jobflow::cuda::k

// Tests for cpu/dnnl_kernels: every kernel against a naive double-precision
// reference, over small shapes that cover stride 2, asymmetric padding,
// dilation, groups and N=2, under each convolution layout policy, plus the
// exact LeNet shapes at N=4.
#include "cpu/dnnl_kernels.h"
#include "cpu/isa.h"
#include "cpu/simd_kernels.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// Readable parameter names in gtest output (found by ADL, so it lives in the
// enum's namespace).
namespace jobflow::cpu {
void PrintTo(ConvLayout l, std::ostream* os) {
  *os << (l == ConvLayout::Plain ? "Plain" : l == ConvLayout::Blocked ? "Blocked" : "Auto");
}
}  // namespace jobflow::cpu

namespace {

using namespace jobflow::cpu;

// 64-byte aligned float buffer, as the engine's callers provide.
struct Buf {
  float* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t count) : n(count) {
    p = static_cast<float*>(std::aligned_alloc(64, ((count * sizeof(float) + 63) / 64) * 64));
    std::fill(p, p + n, std::numeric_limits<float>::quiet_NaN());  // outputs must really be overwritten
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { std::free(p); }
  float& operator[](size_t i) { return p[i]; }
  float operator[](size_t i) const { return p[i]; }
};

void fill_random(Buf& b, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (size_t i = 0; i < b.n; ++i) b[i] = d(gen);
}

// |got - want| <= 1e-4 * (|want| + max|want|): relative to the element, with
// the tensor's scale as floor so near-zero sums of many terms are not judged
// against their own (tiny) magnitude.
void expect_close(const Buf& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.n, want.size()) << what;
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = 1e-4 * (std::abs(want[i]) + scale) + 1e-7;
    if (!(std::abs(got[i] - want[i]) <= tol)) {  // also catches NaN
      ADD_FAILURE() << what << ": index " << i << " got " << got[i] << " want " << want[i];
      if (++reported == 5) return;
    }
  }
}

// ---------------------------------------------------------------------------
// Naive references (double accumulation)

// The largest |got[i] - want[i]|; NaN when any difference is NaN.
double max_error(const Buf& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::abs(got.p[i] - want[i]);
    if (std::isnan(e)) return e;
    worst = std::max(worst, e);
  }
  return worst;
}

Conv2dParams conv(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S, int64_t sh,
                  int64_t sw, int64_t pt, int64_t pl, int64_t pb, int64_t pr, int64_t dh = 1, int64_t dw = 1,
                  int64_t g = 1) {
  Conv2dParams p{};
  p.N = N, p.C = C, p.H = H, p.W = W, p.K = K, p.R = R, p.S = S;
  p.stride_h = sh, p.stride_w = sw, p.pad_top = pt, p.pad_left = pl, p.pad_bottom = pb, p.pad_right = pr;
  p.dil_h = dh, p.dil_w = dw, p.groups = g;
  p.OH = (H + pt + pb - ((R - 1) * dh + 1)) / sh + 1;
  p.OW = (W + pl + pr - ((S - 1) * dw + 1)) / sw + 1;
  return p;
}

size_t x_size(const Conv2dParams& p) { return p.N * p.C * p.H * p.W; }
size_t w_size(const Conv2dParams& p) { return p.K * (p.C / p.groups) * p.R * p.S; }
size_t y_size(const Conv2dParams& p) { return p.N * p.K * p.OH * p.OW; }

// Calls f(x_index, w_index, y_index) for every (output, tap) pair
// that touches a real (non-padding) input element; all three passes are sums
// over exactly these pairs.
template <class F>
void for_each_tap(const Conv2dParams& p, F&& f) {
  const int64_t Cg = p.C / p.groups, Kg = p.K / p.groups;
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t k = 0; k < p.K; ++k)
      for (int64_t oh = 0; oh < p.OH; ++oh)
        for (int64_t ow = 0; ow < p.OW; ++ow)
          for (int64_t cg = 0; cg < Cg; ++cg) {
            const int64_t c = (k / Kg) * Cg + cg;
            for (int64_t r = 0; r < p.R; ++r) {
              const int64_t ih = oh * p.stride_h - p.pad_top + r * p.dil_h;
              if (ih < 0 || ih >= p.H) continue;
              for (int64_t s = 0; s < p.S; ++s) {
                const int64_t iw = ow * p.stride_w - p.pad_left + s * p.dil_w;
                if (iw < 0 || iw >= p.W) continue;
                f(((n * p.C + c) * p.H + ih) * p.W + iw, ((k * Cg + cg) * p.R + r) * p.S + s,
                  ((n * p.K + k) * p.OH + oh) * p.OW + ow);
              }
            }
          }
}

std::vector<double> ref_conv_fwd(const Conv2dParams& p, const Buf& x, const Buf& w, const Buf* b, bool relu) {
  std::vector<double> y(y_size(p), 0.0);
  for_each_tap(p, [&](size_t xi, size_t wi, size_t yi) { y[yi] += double(x[xi]) * w[wi]; });
  for (size_t i = 0; i < y.size(); ++i) {
    if (b) y[i] += (*b)[(i / (p.OH * p.OW)) % p.K];
    if (relu) y[i] = std::max(0.0, y[i]);
  }
  return y;
}

std::vector<double> ref_conv_bwd_data(const Conv2dParams& p, const Buf& w, const Buf& dy) {
  std::vector<double> dx(x_size(p), 0.0);
  for_each_tap(p, [&](size_t xi, size_t wi, size_t yi) { dx[xi] += double(w[wi]) * dy[yi]; });
  return dx;
}

std::vector<double> ref_conv_bwd_weights(const Conv2dParams& p, const Buf& x, const Buf& dy) {
  std::vector<double> dw(w_size(p), 0.0);
  for_each_tap(p, [&](size_t xi, size_t wi, size_t yi) { dw[wi] += double(x[xi]) * dy[yi]; });
  return dw;
}

std::vector<double> ref_conv_bwd_bias(const Conv2dParams& p, const Buf& dy) {
  std::vector<double> db(p.K, 0.0);
  for (size_t i = 0; i < dy.n; ++i) db[(i / (p.OH * p.OW)) % p.K] += dy[i];
  return db;
}

Pool2dParams pool(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                  int64_t pt, int64_t pl, int64_t pb, int64_t pr, PoolKind kind) {
  Pool2dParams p{};
  p.N = N, p.C = C, p.H = H, p.W = W, p.kh = kh, p.kw = kw, p.sh = sh, p.sw = sw;
  p.pad_top = pt, p.pad_left = pl, p.pad_bottom = pb, p.pad_right = pr, p.kind = kind;
  p.OH = (H + pt + pb - kh) / sh + 1;
  p.OW = (W + pl + pr - kw) / sw + 1;
  return p;
}

// Forward and backward reference together: for max pooling the gradient goes
// to the (first) argmax of each window, for average pooling it is spread over
// the real elements with the same divisor as the forward.
void ref_pool(const Pool2dParams& p, const Buf& x, const Buf& dy, std::vector<double>& y, std::vector<double>& dx) {
  y.assign(p.N * p.C * p.OH * p.OW, 0.0);
  dx.assign(p.N * p.C * p.H * p.W, 0.0);
  for (int64_t nc = 0; nc < p.N * p.C; ++nc)
    for (int64_t oh = 0; oh < p.OH; ++oh)
      for (int64_t ow = 0; ow < p.OW; ++ow) {
        const size_t yi = (nc * p.OH + oh) * p.OW + ow;
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        size_t best_i = 0, count = 0;
        std::vector<size_t> taps;
        for (int64_t i = 0; i < p.kh; ++i)
          for (int64_t j = 0; j < p.kw; ++j) {
            const int64_t ih = oh * p.sh - p.pad_top + i, iw = ow * p.sw - p.pad_left + j;
            if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W) continue;
            const size_t xi = (nc * p.H + ih) * p.W + iw;
            taps.push_back(xi);
            sum += x[xi];
            ++count;
            if (x[xi] > best) best = x[xi], best_i = xi;
          }
        if (p.kind == PoolKind::Max) {
          y[yi] = best;
          dx[best_i] += dy[yi];
        } else {
          const double div = p.kind == PoolKind::AvgIncludePad ? double(p.kh * p.kw) : double(count);
          y[yi] = sum / div;
          for (size_t xi : taps) dx[xi] += dy[yi] / div;
        }
      }
}

// ---------------------------------------------------------------------------
// Convolution tests

// Runs all three passes (with and without bias / relu) against the reference.
void check_conv(const Conv2dParams& p, const std::string& name) {
  Buf x(x_size(p)), w(w_size(p)), b(p.K), y(y_size(p)), dy(y_size(p)), dx(x_size(p)), dw(w_size(p)),
      db(p.K);
  fill_random(x, 1), fill_random(w, 2), fill_random(b, 3), fill_random(dy, 4);

  conv2d_forward(p, x.p, w.p, nullptr, y.p);
  expect_close(y, ref_conv_fwd(p, x, w, nullptr, false), name + " fwd");
  conv2d_forward(p, x.p, w.p, b.p, y.p);
  expect_close(y, ref_conv_fwd(p, x, w, &b, false), name + " fwd+bias");
  conv2d_forward(p, x.p, w.p, b.p, y.p, /*fuse_relu=*/true);
  expect_close(y, ref_conv_fwd(p, x, w, &b, true), name + " fwd+bias+relu");
  conv2d_forward(p, x.p, w.p, nullptr, y.p, /*fuse_relu=*/true);
  expect_close(y, ref_conv_fwd(p, x, w, nullptr, true), name + " fwd+relu");

  conv2d_backward_data(p, w.p, dy.p, dx.p);
  expect_close(dx, ref_conv_bwd_data(p, w, dy), name + " bwd_data");

  conv2d_backward_weights(p, x.p, dy.p, dw.p, db.p);
  expect_close(dw, ref_conv_bwd_weights(p, x, dy), name + " bwd_weights");
  expect_close(db, ref_conv_bwd_bias(p, dy), name + " bwd_bias");
  std::fill(dw.p, dw.p + dw.n, std::numeric_limits<float>::quiet_NaN());
  conv2d_backward_weights(p, x.p, dy.p, dw.p, nullptr);
  expect_close(dw, ref_conv_bwd_weights(p, x, dy), name + " bwd_weights(no bias)");
}

struct ConvCase {
  const char* name;
  Conv2dParams p;
};

std::vector<ConvCase> conv_cases() {
  return {
      {"basic_3x3_pad1", conv(2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1)},
      {"no_pad_1x1", conv(2, 5, 5, 4, 3, 1, 1, 1, 1, 0, 0, 0, 0)},
      {"stride2_asym_pad", conv(2, 4, 9, 8, 5, 3, 2, 2, 2, 2, 1, 0, 1)},
      {"same_lower_even_kernel", conv(2, 3, 8, 8, 4, 4, 4, 1, 1, 2, 2, 1, 1)},  // even kernel: top/left get the extra
      {"stride2_same_lower", conv(2, 3, 7, 7, 4, 3, 3, 2, 2, 1, 1, 0, 0)},
      {"dilation2", conv(2, 3, 10, 9, 4, 3, 3, 1, 1, 2, 1, 1, 2, 2, 2)},
      {"dilation_mixed_stride2", conv(2, 2, 11, 10, 3, 3, 2, 2, 1, 1, 0, 2, 1, 2, 3)},
      {"groups2", conv(2, 4, 8, 8, 6, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 2)},
      {"groups2_dilation_asym", conv(2, 6, 9, 9, 4, 3, 3, 1, 2, 2, 0, 1, 2, 2, 1, 2)},
      {"depthwise", conv(2, 4, 7, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4)},
      {"single_in_channel", conv(2, 1, 9, 9, 5, 5, 5, 1, 1, 2, 2, 2, 2)},
      {"wide_channels", conv(2, 20, 6, 6, 24, 3, 3, 1, 1, 1, 1, 1, 1)},  // not multiples of 16
      {"wide_groups2_stride2", conv(2, 32, 7, 7, 34, 3, 3, 2, 2, 1, 0, 1, 1, 1, 1, 2)},
  };
}

class ConvLayoutTest : public ::testing::TestWithParam<ConvLayout> {
 protected:
  void SetUp() override { set_all(GetParam()); }
  void TearDown() override { set_all(ConvLayout::Auto); }
  static void set_all(ConvLayout l) {
    for (ConvPass pass : {ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardWeights})
      set_conv_layout(pass, l);
  }
};

TEST_P(ConvLayoutTest, MatchesReference) {
  for (const auto& c : conv_cases()) {
    SCOPED_TRACE(c.name);
    check_conv(c.p, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ConvLayoutTest,
                         ::testing::Values(ConvLayout::Auto, ConvLayout::Plain, ConvLayout::Blocked),
                         [](const ::testing::TestParamInfo<ConvLayout>& info) {
                           switch (info.param) {
                             case ConvLayout::Plain: return std::string("Plain");
                             case ConvLayout::Blocked: return std::string("Blocked");
                             default: return std::string("Auto");
                           }
                         });

// The cache keeps dnnl::memory objects across calls; make sure each call
// really uses the buffers it is given, not the previous call's.
TEST(Conv2d, CachedEntryRebindsBuffers) {
  const Conv2dParams p = conv(2, 3, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1);
  Buf x1(x_size(p)), x2(x_size(p)), w(w_size(p)), y1(y_size(p)), y2(y_size(p));
  fill_random(x1, 11), fill_random(x2, 12), fill_random(w, 13);
  conv2d_forward(p, x1.p, w.p, nullptr, y1.p);
  conv2d_forward(p, x2.p, w.p, nullptr, y2.p);
  expect_close(y1, ref_conv_fwd(p, x1, w, nullptr, false), "first");
  expect_close(y2, ref_conv_fwd(p, x2, w, nullptr, false), "second");
  fill_random(w, 14);  // weights change between steps: no stale reordered copy
  conv2d_forward(p, x1.p, w.p, nullptr, y1.p);
  expect_close(y1, ref_conv_fwd(p, x1, w, nullptr, false), "new weights");
}

TEST(Conv2d, ConcurrentCallsFromTwoThreads) {
  const Conv2dParams pa = conv(2, 3, 9, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1);
  const Conv2dParams pb = conv(2, 16, 8, 8, 16, 3, 3, 2, 2, 1, 1, 0, 0);
  auto work = [](const Conv2dParams& p, uint32_t seed, bool* ok) {
    Buf x(x_size(p)), w(w_size(p)), y(y_size(p));
    fill_random(x, seed), fill_random(w, seed + 1);
    const auto want = ref_conv_fwd(p, x, w, nullptr, false);
    *ok = true;
    for (int it = 0; it < 20; ++it) {
      conv2d_forward(p, x.p, w.p, nullptr, y.p);
      for (size_t i = 0; i < y.n; ++i)
        if (std::abs(y[i] - want[i]) > 1e-4 * (1 + std::abs(want[i]))) *ok = false;
    }
  };
  // Two threads on the same shapes too: each has its own cached entry.
  bool ok_a = false, ok_b = false, ok_c = false;
  std::thread ta(work, std::cref(pa), 21u, &ok_a), tb(work, std::cref(pb), 31u, &ok_b),
      tc(work, std::cref(pa), 41u, &ok_c);
  ta.join(), tb.join(), tc.join();
  EXPECT_TRUE(ok_a);
  EXPECT_TRUE(ok_b);
  EXPECT_TRUE(ok_c);
}

TEST(Conv2d, ErrorsAreRuntimeErrorsNamingShapes) {
  Conv2dParams p = conv(2, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1);
  p.OH += 1;  // inconsistent output size
  Buf x(x_size(p)), w(w_size(p)), y(y_size(p));
  try {
    conv2d_forward(p, x.p, w.p, nullptr, y.p);
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[conv2d]", 0), 0u) << msg;
    EXPECT_NE(msg.find("x=[2,3,7,7]"), std::string::npos) << msg;
  }
  Conv2dParams g = conv(2, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2);  // C=3 not divisible by 2
  EXPECT_THROW(conv2d_backward_data(g, w.p, y.p, x.p), std::runtime_error);
}

// ---------------------------------------------------------------------------
// Pooling tests

// ties: x rounded to whole numbers, so most windows hold equal maxima.
void check_pool(const Pool2dParams& p, const std::string& name, bool ties = false) {
  const size_t xn = p.N * p.C * p.H * p.W, yn = p.N * p.C * p.OH * p.OW;
  Buf x(xn), y(yn), dy(yn), dx(xn);
  fill_random(x, 5), fill_random(dy, 6);
  if (ties)
    for (size_t i = 0; i < xn; ++i) x.p[i] = std::round(x.p[i]);
  std::vector<double> want_y, want_dx;
  ref_pool(p, x, dy, want_y, want_dx);

  const size_t ws_bytes = pool2d_workspace_bytes(p);
  if (p.kind == PoolKind::Max) {
    EXPECT_GT(ws_bytes, 0u) << name;
  } else {
    EXPECT_EQ(ws_bytes, 0u) << name;
  }
  std::vector<unsigned char> ws(std::max<size_t>(ws_bytes, 1));

  pool2d_forward(p, x.p, y.p, nullptr);  // inference path
  expect_close(y, want_y, name + " fwd(inference)");
  std::fill(y.p, y.p + y.n, std::numeric_limits<float>::quiet_NaN());
  pool2d_forward(p, x.p, y.p, ws_bytes ? ws.data() : nullptr);  // training path
  expect_close(y, want_y, name + " fwd(training)");
  std::fill(dx.p, dx.p + dx.n, std::numeric_limits<float>::quiet_NaN());  // every element must be written
  pool2d_backward(p, dy.p, ws_bytes ? ws.data() : nullptr, dx.p);
  expect_close(dx, want_dx, name + " bwd");
}

// The gradient of a window with several maxima goes to the first (row by
// row), in Jobflow's 2x2/2 loop and its general one alike.
void PoolMaxTiesGoToTheFirstMaximum();
TEST(Pool2d, MaxTiesGoToTheFirstMaximum) { PoolMaxTiesGoToTheFirstMaximum(); }
void PoolMaxTiesGoToTheFirstMaximum() {
  for (int64_t W : {6, 9, 40}) {
    const std::string name = "ties W=" + std::to_string(W);
    check_pool(pool(2, 3, 6, W, 2, 2, 2, 2, 0, 0, 0, 0, PoolKind::Max), name + " 2x2_s2", true);
    check_pool(pool(2, 3, 6, W, 3, 3, 2, 2, 1, 1, 1, 1, PoolKind::Max), name + " 3x3_s2_pad", true);
  }
}

void PoolMatchesReference();
TEST(Pool2d, MatchesReference) { PoolMatchesReference(); }
void PoolMatchesReference() {
  struct Shape {
    const char* name;
    int64_t N, C, H, W, kh, kw, sh, sw, pt, pl, pb, pr;
  };
  const Shape shapes[] = {
      {"2x2_s2", 2, 3, 8, 6, 2, 2, 2, 2, 0, 0, 0, 0},
      // Jobflow's own 2x2/2 max loop: odd sizes (a row and a column no
      // window reads), rows of more than 16 outputs (two vector steps, the
      // second partial), LeNet's first pooling.
      {"2x2_s2_odd", 2, 3, 7, 9, 2, 2, 2, 2, 0, 0, 0, 0},
      {"2x2_s2_wide", 1, 2, 4, 70, 2, 2, 2, 2, 0, 0, 0, 0},
      {"2x2_s2_lenet", 3, 32, 28, 28, 2, 2, 2, 2, 0, 0, 0, 0},
      {"3x3_s2_asym_pad", 2, 3, 9, 8, 3, 3, 2, 2, 1, 1, 0, 1},
      {"same_lower_2x2_s1", 2, 2, 5, 5, 2, 2, 1, 1, 1, 1, 0, 0},
      {"3x2_s1_pad", 2, 4, 6, 7, 3, 2, 1, 1, 1, 0, 1, 1},
      {"ceil_mode_via_pad", 2, 3, 7, 7, 2, 2, 2, 2, 0, 0, 1, 1},
      {"overlap_s1_3x3", 2, 17, 6, 6, 3, 3, 1, 1, 2, 2, 0, 0},
      {"rect_stride", 2, 2, 9, 10, 3, 4, 2, 3, 1, 2, 1, 1},
  };
  for (PoolKind kind : {PoolKind::Max, PoolKind::AvgIncludePad, PoolKind::AvgExcludePad}) {
    for (const auto& s : shapes) {
      const std::string name = std::string(s.name) + (kind == PoolKind::Max             ? " max"
                                                      : kind == PoolKind::AvgIncludePad ? " avg_incl"
                                                                                        : " avg_excl");
      SCOPED_TRACE(name);
      check_pool(pool(s.N, s.C, s.H, s.W, s.kh, s.kw, s.sh, s.sw, s.pt, s.pl, s.pb, s.pr, kind), name);
    }
  }
}

TEST(Pool2d, ErrorsAreRuntimeErrorsNamingShapes) {
  Pool2dParams p = pool(2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, PoolKind::Max);
  p.OW = 5;
  Buf x(2 * 3 * 8 * 8), y(2 * 3 * 4 * 5);
  try {
    pool2d_forward(p, x.p, y.p, nullptr);
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[pool2d]", 0), 0u) << msg;
    EXPECT_NE(msg.find("x=[2,3,8,8]"), std::string::npos) << msg;
  }
  const Pool2dParams ok = pool(2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 0, 0, PoolKind::Max);
  EXPECT_THROW(pool2d_backward(ok, y.p, nullptr, x.p), std::runtime_error);  // max needs its workspace
}

// ---------------------------------------------------------------------------
// LeNet shapes at N=4: conv1 1->32 5x5 SAME on 28x28, pool 2x2, conv2 32->64
// 5x5 SAME on 14x14, pool 2x2; forward and backward, as the benchmark runs.

TEST(LeNet, ExactShapesN4) {
  const int64_t N = 4;
  const Conv2dParams c1 = conv(N, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, 2, 2);
  const Conv2dParams c2 = conv(N, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2, 2, 2);
  ASSERT_EQ(c1.OH, 28);
  ASSERT_EQ(c2.OH, 14);
  check_conv(c1, "conv1");
  check_conv(c2, "conv2");
  check_pool(pool(N, 32, 28, 28, 2, 2, 2, 2, 0, 0, 0, 0, PoolKind::Max), "pool1");
  check_pool(pool(N, 64, 14, 14, 2, 2, 2, 2, 0, 0, 0, 0, PoolKind::Max), "pool2");
  check_pool(pool(N, 64, 14, 14, 2, 2, 2, 2, 0, 0, 0, 0, PoolKind::AvgExcludePad), "pool2 avg");
}

}  // namespace

// ---------------------------------------------------------------------------
// nChw16c activations (train plans' layout pass)

namespace {

// Plain NCHW <-> nChw16c (C a multiple of 16).
void to_c16(const Buf& x, Buf& out, int64_t N, int64_t C, int64_t H, int64_t W) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t hw = 0; hw < H * W; ++hw)
        out[((n * (C / 16) + c / 16) * H * W + hw) * 16 + c % 16] = x[(n * C + c) * H * W + hw];
}
// A plain reference in nChw16c order (what a blocked output must hold).
std::vector<double> ref_from_blocked(const std::vector<double>& plain, int64_t N, int64_t C, int64_t H, int64_t W) {
  std::vector<double> out(plain.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t hw = 0; hw < H * W; ++hw)
        out[((n * (C / 16) + c / 16) * H * W + hw) * 16 + c % 16] = plain[(n * C + c) * H * W + hw];
  return out;
}

}  // namespace

// Each pass with x / dx and y / dy in nChw16c gives the plain result, with
// either side blocked alone too; a channel count that is not a multiple of
// 16 is refused by name.
TEST(Conv2d, BlockedActivationsMatchPlain) {
  const Conv2dParams p = conv(2, 16, 7, 6, 32, 3, 3, 1, 1, 1, 1, 1, 1);
  Buf x(x_size(p)), w(w_size(p)), b(p.K), dy(y_size(p)), xb(x_size(p)), dyb(y_size(p));
  fill_random(x, 21), fill_random(w, 22), fill_random(b, 23), fill_random(dy, 24);
  to_c16(x, xb, p.N, p.C, p.H, p.W);
  to_c16(dy, dyb, p.N, p.K, p.OH, p.OW);
  const auto want_y = ref_conv_fwd(p, x, w, &b, true);
  const auto want_dx = ref_conv_bwd_data(p, w, dy);
  const auto want_dw = ref_conv_bwd_weights(p, x, dy);
  for (ConvFormats f : {ConvFormats{true, true}, ConvFormats{true, false}, ConvFormats{false, true}}) {
    const std::string name = std::string("src ") + (f.src_blocked ? "blocked" : "plain") + ", dst " +
                             (f.dst_blocked ? "blocked" : "plain");
    Buf y(y_size(p)), dx(x_size(p)), dw(w_size(p)), db(p.K);
    conv2d_forward(p, f.src_blocked ? xb.p : x.p, w.p, b.p, y.p, true, false, f);
    expect_close(y, f.dst_blocked ? ref_from_blocked(want_y, p.N, p.K, p.OH, p.OW) : want_y, name + " fwd");
    conv2d_backward_data(p, w.p, f.dst_blocked ? dyb.p : dy.p, dx.p, false, f);
    expect_close(dx, f.src_blocked ? ref_from_blocked(want_dx, p.N, p.C, p.H, p.W) : want_dx, name + " bwd_data");
    conv2d_backward_weights(p, f.src_blocked ? xb.p : x.p, f.dst_blocked ? dyb.p : dy.p, dw.p, db.p, false, f);
    expect_close(dw, want_dw, name + " bwd_weights");
  }
  // 8 input channels: backward data runs oneDNN's plain (gemm) kernel,
  // which gets the blocked dy reordered for it.
  {
    const Conv2dParams q = conv(2, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1, 1, 1);
    Buf x8(x_size(q)), w8(w_size(q)), dy8(y_size(q)), dy8b(y_size(q)), y8(y_size(q)), dx8(x_size(q)),
        dw8(w_size(q));
    fill_random(x8, 25), fill_random(w8, 26), fill_random(dy8, 27);
    to_c16(dy8, dy8b, q.N, q.K, q.OH, q.OW);
    const ConvFormats f{false, true};
    conv2d_forward(q, x8.p, w8.p, nullptr, y8.p, false, false, f);
    expect_close(y8, ref_from_blocked(ref_conv_fwd(q, x8, w8, nullptr, false), q.N, q.K, q.OH, q.OW), "C=8 fwd");
    conv2d_backward_data(q, w8.p, dy8b.p, dx8.p, false, f);
    expect_close(dx8, ref_conv_bwd_data(q, w8, dy8), "C=8 bwd_data");
    conv2d_backward_weights(q, x8.p, dy8b.p, dw8.p, nullptr, false, f);
    expect_close(dw8, ref_conv_bwd_weights(q, x8, dy8), "C=8 bwd_weights");
  }
  const Conv2dParams odd = conv(1, 3, 5, 5, 16, 3, 3, 1, 1, 1, 1, 1, 1);
  Buf x3(x_size(odd)), w3(w_size(odd)), y3(y_size(odd));
  fill_random(x3, 1), fill_random(w3, 2);
  try {
    conv2d_forward(odd, x3.p, w3.p, nullptr, y3.p, false, false, ConvFormats{true, false});
    ADD_FAILURE() << "3 channels in nChw16c accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 16"), std::string::npos) << e.what();
  }
}

// Where train plans run a convolution's three passes on Jobflow's Winograd
// kernel (nChw16c on both sides, stride 1, 3x3 or 5x5):
// LeNet's conv2, a 5x5 and a 3x3 layer with uneven pads (the input
// gradient's convolution mirrors them; the tiles overhang the output) and
// channel counts the kernels split unevenly; each pass matches the
// reference: the forward with and without bias and relu, backward data,
// backward weights with and without the bias gradient.
TEST(Conv2d, BlockedPassesOnWinogradMatchReference) {
  const ConvFormats f{true, true};
  for (const Conv2dParams& p : {conv(4, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2, 2, 2),
                                conv(3, 32, 11, 9, 48, 5, 5, 1, 1, 1, 2, 3, 0),
                                conv(2, 48, 10, 13, 32, 3, 3, 1, 1, 0, 1, 2, 1)}) {
    const std::string name = "x=[" + std::to_string(p.N) + "," + std::to_string(p.C) + "," + std::to_string(p.H) +
                             "," + std::to_string(p.W) + "] " + std::to_string(p.R) + "x" + std::to_string(p.S) +
                             " -> " + std::to_string(p.K) + " pads " + std::to_string(p.pad_top) +
                             std::to_string(p.pad_left) + std::to_string(p.pad_bottom) + std::to_string(p.pad_right);
    SCOPED_TRACE(name);
    // On AVX-512 CPUs (every machine this project's CI runs on) the
    // kernel takes both passes; elsewhere oneDNN's answers are checked.
    if (__builtin_cpu_supports("avx512f") && !avx2_at_most()) {
      EXPECT_TRUE(conv2d_on_winograd(p, ConvPass::Forward, f));
      EXPECT_TRUE(conv2d_on_winograd(p, ConvPass::BackwardData, f));
      EXPECT_TRUE(conv2d_on_winograd(p, ConvPass::BackwardWeights, f));
    }
    EXPECT_FALSE(conv2d_on_winograd(p, ConvPass::Forward, ConvFormats{true, false}));
    EXPECT_FALSE(conv2d_on_winograd(p, ConvPass::BackwardWeights, ConvFormats{false, true}));
    Buf x(x_size(p)), w(w_size(p)), b(p.K), dy(y_size(p)), xb(x_size(p)), dyb(y_size(p));
    fill_random(x, 41), fill_random(w, 42), fill_random(b, 43), fill_random(dy, 44);
    to_c16(x, xb, p.N, p.C, p.H, p.W);
    to_c16(dy, dyb, p.N, p.K, p.OH, p.OW);
    Buf y(y_size(p)), y0(y_size(p)), dx(x_size(p)), dw(w_size(p)), db(p.K);
    conv2d_forward(p, xb.p, w.p, b.p, y.p, true, false, f);
    expect_close(y, ref_from_blocked(ref_conv_fwd(p, x, w, &b, true), p.N, p.K, p.OH, p.OW), "fwd + bias + relu");
    conv2d_forward(p, xb.p, w.p, nullptr, y0.p, false, false, f);
    expect_close(y0, ref_from_blocked(ref_conv_fwd(p, x, w, nullptr, false), p.N, p.K, p.OH, p.OW), "fwd");
    conv2d_backward_data(p, w.p, dyb.p, dx.p, false, f);
    expect_close(dx, ref_from_blocked(ref_conv_bwd_data(p, w, dy), p.N, p.C, p.H, p.W), "bwd_data");
    // New weights at the next step are taken (a train plan's weights change at every call).
    for (size_t i = 0; i < w.n; ++i) w[i] = -0.5f * w[i];
    conv2d_backward_data(p, w.p, dyb.p, dx.p, false, f);
    expect_close(dx, ref_from_blocked(ref_conv_bwd_data(p, w, dy), p.N, p.C, p.H, p.W), "bwd_data, new weights");
    conv2d_forward(p, xb.p, w.p, b.p, y.p, false, false, f);
    expect_close(y, ref_from_blocked(ref_conv_fwd(p, x, w, &b, false), p.N, p.K, p.OH, p.OW), "fwd, new weights");
    conv2d_backward_weights(p, xb.p, dyb.p, dw.p, db.p, false, f);
    expect_close(dw, ref_conv_bwd_weights(p, x, dy), "bwd_weights");
    expect_close(db, ref_conv_bwd_bias(p, dy), "bwd_bias");
    Buf dw1(w_size(p));
    conv2d_backward_weights(p, xb.p, dyb.p, dw1.p, nullptr, false, f);
    expect_close(dw1, ref_conv_bwd_weights(p, x, dy), "bwd_weights without bias");
    // One thread, and three (tiles split unevenly, three sums reduced):
    // the same answers (the calling thread's OpenMP count decides).
    const int threads = omp_get_max_threads();
    for (int t : {1, 3}) {
      omp_set_num_threads(t);
      Buf dwt(w_size(p)), dbt(p.K), dxt(x_size(p));
      conv2d_backward_weights(p, xb.p, dyb.p, dwt.p, dbt.p, false, f);
      conv2d_backward_data(p, w.p, dyb.p, dxt.p, false, f);
      omp_set_num_threads(threads);
      expect_close(dwt, ref_conv_bwd_weights(p, x, dy), "bwd_weights, " + std::to_string(t) + " threads");
      expect_close(dbt, ref_conv_bwd_bias(p, dy), "bwd_bias, " + std::to_string(t) + " threads");
      expect_close(dxt, ref_from_blocked(ref_conv_bwd_data(p, w, dy), p.N, p.C, p.H, p.W),
                   "bwd_data, " + std::to_string(t) + " threads");
    }
  }
  // At LeNet's batch (100 images, 4,900 tiles) the weight gradient's sums
  // stay within 2e-5 of its largest value (oneDNN's: 2.6e-6; a single
  // running sum per thread gave 4e-5 to 6e-5).
  {
    const Conv2dParams p = conv(100, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2, 2, 2);
    Buf x(x_size(p)), dy(y_size(p)), xb(x_size(p)), dyb(y_size(p)), dw(w_size(p));
    fill_random(x, 45), fill_random(dy, 46);
    to_c16(x, xb, p.N, p.C, p.H, p.W);
    to_c16(dy, dyb, p.N, p.K, p.OH, p.OW);
    conv2d_backward_weights(p, xb.p, dyb.p, dw.p, nullptr, false, f);
    const std::vector<double> want = ref_conv_bwd_weights(p, x, dy);
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    const double err = max_error(dw, want);  // (a NaN fails below)
    EXPECT_LE(err, 2e-5 * scale) << "largest error " << err << " of " << scale;
  }
  // A padding wider than the weights' reach has no mirrored convolution:
  // its input gradient stays on oneDNN.
  EXPECT_FALSE(conv2d_on_winograd(conv(4, 32, 14, 14, 64, 5, 5, 1, 1, 5, 2, 2, 2), ConvPass::BackwardData, f));
  // Wide layers keep their weight gradient on oneDNN (each thread's sums
  // in the transformed domain would take 2.4 MB); the other passes take
  // the kernel.
  if (__builtin_cpu_supports("avx512f") && !avx2_at_most()) {
    const Conv2dParams wide = conv(2, 128, 12, 12, 128, 3, 3, 1, 1, 1, 1, 1, 1);
    EXPECT_TRUE(conv2d_on_winograd(wide, ConvPass::Forward, f));
    EXPECT_TRUE(conv2d_on_winograd(wide, ConvPass::BackwardData, f));
    EXPECT_FALSE(conv2d_on_winograd(wide, ConvPass::BackwardWeights, f));
  }
}

// The 2x2/2 max pooling and its gradient (plain and relu-masked) in
// nChw16c agree with the plain ones, odd sizes included.
void PoolBlockedMaxTwoByTwoMatchesPlain();
TEST(Pool2d, BlockedMaxTwoByTwoMatchesPlain) { PoolBlockedMaxTwoByTwoMatchesPlain(); }
void PoolBlockedMaxTwoByTwoMatchesPlain() {
  for (int64_t W : {6, 9, 40}) {
    SCOPED_TRACE("W=" + std::to_string(W));
    const Pool2dParams p = pool(2, 32, 7, W, 2, 2, 2, 2, 0, 0, 0, 0, PoolKind::Max);
    const size_t xn = p.N * p.C * p.H * p.W, yn = p.N * p.C * p.OH * p.OW;
    Buf x(xn), dy(yn), xb(xn), dyb(yn), y(yn), yb(yn), dx(xn), dxb(xn), dxm(xn), dxmb(xn);
    fill_random(x, 31), fill_random(dy, 32);
    for (size_t i = 0; i < xn; i += 3) x[i] = 0.f;  // ties and windows whose maximum is 0 (relu's zeros)
    to_c16(x, xb, p.N, p.C, p.H, p.W);
    to_c16(dy, dyb, p.N, p.C, p.OH, p.OW);
    const size_t ws_bytes = pool2d_workspace_bytes(p);
    std::vector<unsigned char> ws(ws_bytes), wsb(ws_bytes);
    pool2d_forward(p, x.p, y.p, ws.data());
    pool2d_forward(p, xb.p, yb.p, wsb.data(), true);
    std::vector<double> want_y(y.p, y.p + yn);
    expect_close(yb, ref_from_blocked(want_y, p.N, p.C, p.OH, p.OW), "fwd");
    pool2d_backward(p, dy.p, ws.data(), dx.p);
    pool2d_backward(p, dyb.p, wsb.data(), dxb.p, true);
    expect_close(dxb, ref_from_blocked(std::vector<double>(dx.p, dx.p + xn), p.N, p.C, p.H, p.W), "bwd");
    pool2d_backward_relu_masked(p, dy.p, ws.data(), y.p, dxm.p);
    pool2d_backward_relu_masked(p, dyb.p, wsb.data(), yb.p, dxmb.p, true);
    expect_close(dxmb, ref_from_blocked(std::vector<double>(dxm.p, dxm.p + xn), p.N, p.C, p.H, p.W), "bwd masked");
    // The mask really masks: relu's gradient at x applied to the plain gradient.
    std::vector<double> want_m(xn);
    for (size_t i = 0; i < xn; ++i) want_m[i] = x[i] > 0.f ? dx[i] : 0.0;
    expect_close(dxm, want_m, "masked = relu_grad(bwd, x)");
  }
  const Pool2dParams p3 = pool(1, 32, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, PoolKind::Max);
  Buf x(1 * 32 * 6 * 6), y(1 * 32 * 3 * 3);
  fill_random(x, 1);
  std::vector<unsigned char> ws(pool2d_workspace_bytes(p3));
  EXPECT_THROW(pool2d_forward(p3, x.p, y.p, ws.data(), true), std::runtime_error);
}

// A NaN anywhere in a 2x2 window is the output and takes the gradient
// (plain and nChw16c), wherever it sits in the window.
void PoolMaxTwoByTwoPropagatesNaN();
TEST(Pool2d, MaxTwoByTwoPropagatesNaN) { PoolMaxTwoByTwoPropagatesNaN(); }
void PoolMaxTwoByTwoPropagatesNaN() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (bool blocked : {false, true}) {
    for (int pos = 0; pos < 4; ++pos) {
      SCOPED_TRACE(std::string(blocked ? "nChw16c" : "nchw") + " NaN at " + std::to_string(pos));
      const Pool2dParams p = pool(1, 16, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, PoolKind::Max);
      Buf x(16 * 4), y(16), dy(16), dx(16 * 4);
      // Channel c: window values c+1, c+2, c+3, c+4 (row by row), one NaN.
      for (int c = 0; c < 16; ++c)
        for (int k = 0; k < 4; ++k) {
          const size_t at = blocked ? static_cast<size_t>(k * 16 + c) : static_cast<size_t>(c * 4 + k);
          x[at] = k == pos && c % 2 == 0 ? nan : static_cast<float>(c + k + 1);
        }
      for (int c = 0; c < 16; ++c) dy[c] = static_cast<float>(10 + c);
      std::vector<unsigned char> ws(pool2d_workspace_bytes(p));
      pool2d_forward(p, x.p, y.p, ws.data(), blocked);
      pool2d_backward(p, dy.p, ws.data(), dx.p, blocked);
      for (int c = 0; c < 16; ++c) {
        const int want_k = c % 2 == 0 ? pos : 3;  // the NaN, else the largest (the last)
        if (c % 2 == 0) EXPECT_TRUE(std::isnan(y[c])) << "channel " << c;
        else EXPECT_EQ(y[c], static_cast<float>(c + 4)) << "channel " << c;
        for (int k = 0; k < 4; ++k) {
          const size_t at = blocked ? static_cast<size_t>(k * 16 + c) : static_cast<size_t>(c * 4 + k);
          EXPECT_EQ(dx[at], k == want_k ? dy[c] : 0.f) << "channel " << c << " position " << k;
        }
      }
    }
  }
}

// Max pooling of any other window (Jobflow's general loop, which replaced
// oneDNN's: that one dropped every NaN) keeps a NaN too: each output is its
// window's first NaN or else its first maximum (row by row, padding never
// wins), and the gradient goes there. Rows of up to 91 outputs (one to six
// vector blocks, the last partial), strides 1 to 3, pads, windows cut by
// both edges, a 17x17 window (int32 indices); every position of a 3x3
// window in turn; windows of -inf alone (their first pixel takes the
// gradient).
void PoolMaxOfAnyWindowPropagatesNaN();
TEST(Pool2d, MaxOfAnyWindowPropagatesNaN) { PoolMaxOfAnyWindowPropagatesNaN(); }
void PoolMaxOfAnyWindowPropagatesNaN() {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    int64_t H, W, kh, kw, sh, sw, pt, pl, pb, pr;
  };
  const Case cases[] = {
      {9, 181, 3, 3, 2, 2, 1, 1, 1, 1},  // resnet's pool, 91 outputs a row
      {7, 40, 3, 3, 1, 1, 1, 1, 1, 1},   // stride 1, 40 outputs
      {6, 9, 3, 3, 2, 2, 0, 0, 0, 0},    // 4 outputs, no pads
      {8, 20, 2, 3, 3, 3, 1, 2, 0, 1},   // stride 3 (the plain loop)
      {5, 33, 4, 4, 2, 2, 2, 3, 1, 0},   // uneven pads
      {4, 7, 3, 3, 1, 1, 1, 1, 1, 1},    // one partial block cut at both edges
      {4, 5, 2, 2, 2, 2, 1, 1, 1, 1},    // stride 2, W < 16
      {20, 21, 17, 17, 1, 2, 3, 5, 2, 4},  // 289 taps: int32 indices, corners in the padding
  };
  for (const Case& c : cases) {
    const Pool2dParams p = pool(2, 3, c.H, c.W, c.kh, c.kw, c.sh, c.sw, c.pt, c.pl, c.pb, c.pr, PoolKind::Max);
    ASSERT_FALSE(pool2d_own_max_2x2(p));
    const size_t xn = static_cast<size_t>(p.N * p.C * p.H * p.W), yn = static_cast<size_t>(p.N * p.C * p.OH * p.OW);
    for (int variant = 0; variant < 3; ++variant) {
      const std::string name = std::to_string(c.H) + "x" + std::to_string(c.W) + " k" + std::to_string(c.kh) + "x" +
                               std::to_string(c.kw) + " s" + std::to_string(c.sh) + "x" + std::to_string(c.sw) +
                               (variant == 0 ? " sparse NaN" : variant == 1 ? " dense NaN and ties" : " -inf planes");
      SCOPED_TRACE(name);
      Buf x(xn), y(yn), dy(yn), dx(xn);
      fill_random(x, 40 + variant), fill_random(dy, 50);
      for (size_t i = 0; i < xn; ++i) {
        if (variant == 1) x[i] = std::round(x[i] * 2);  // ties everywhere
        if (variant == 0 && i % 37 == 5) x[i] = nan;
        if (variant == 1 && i % 7 == 3) x[i] = nan;
        if (variant == 2 && (i / (p.H * p.W)) % 2 == 1) x[i] = i % 11 == 0 ? nan : -inf;
      }
      // The reference: the first NaN of a window, else its first maximum.
      std::vector<float> want(yn);
      std::vector<double> want_dx(xn, 0.0);
      for (int64_t q = 0; q < p.N * p.C; ++q)
        for (int64_t oh = 0; oh < p.OH; ++oh)
          for (int64_t ow = 0; ow < p.OW; ++ow) {
            int64_t at = -1;
            for (int64_t i = 0; i < p.kh; ++i)
              for (int64_t j = 0; j < p.kw; ++j) {
                const int64_t h = oh * p.sh - p.pad_top + i, w = ow * p.sw - p.pad_left + j;
                if (h < 0 || h >= p.H || w < 0 || w >= p.W) continue;
                const int64_t xi = (q * p.H + h) * p.W + w;
                if (at < 0 || (std::isnan(x[xi]) && !std::isnan(x[at])) || x[xi] > x[at]) at = xi;
              }
            ASSERT_GE(at, 0);
            const size_t yi = static_cast<size_t>((q * p.OH + oh) * p.OW + ow);
            want[yi] = x[at];
            want_dx[at] += dy[yi];
          }
      std::vector<unsigned char> ws(pool2d_workspace_bytes(p));
      // A byte per output (the maximum's place in its window), an int32
      // beyond 256 taps.
      EXPECT_EQ(ws.size(), yn * (c.kh * c.kw <= 256 ? 1 : sizeof(int32_t)));
      for (bool train : {false, true}) {
        std::fill(y.p, y.p + yn, 12345.f);
        pool2d_forward(p, x.p, y.p, train ? ws.data() : nullptr);
        int64_t nans = 0, wrong = 0;
        for (size_t i = 0; i < yn; ++i) {
          nans += std::isnan(want[i]);
          wrong += std::isnan(want[i]) ? !std::isnan(y[i]) : !(y[i] == want[i]);
        }
        EXPECT_EQ(wrong, 0) << (train ? "training" : "inference") << " forward, of " << yn << " outputs";
        if (variant < 2) {
          EXPECT_GT(nans, 0);
        }
      }
      pool2d_backward(p, dy.p, ws.data(), dx.p);
      expect_close(dx, want_dx, name + " backward");
    }
  }
  // A NaN at each position of a 3x3 window: the one output it falls in.
  for (int pos = 0; pos < 9; ++pos) {
    const Pool2dParams p = pool(1, 1, 3, 3, 3, 3, 1, 1, 0, 0, 0, 0, PoolKind::Max);
    Buf x(9), y(1), dy(1), dx(9);
    for (int k = 0; k < 9; ++k) x[k] = k == pos ? nan : static_cast<float>(k);
    dy[0] = 2.f;
    std::vector<unsigned char> ws(pool2d_workspace_bytes(p));
    pool2d_forward(p, x.p, y.p, ws.data());
    EXPECT_TRUE(std::isnan(y[0])) << "NaN at " << pos;
    pool2d_backward(p, dy.p, ws.data(), dx.p);
    for (int k = 0; k < 9; ++k) EXPECT_EQ(dx[k], k == pos ? 2.f : 0.f) << "NaN at " << pos << ", position " << k;
  }
}

// op(a) (M x K) times op(b) (K x N) [+ c0] in double: the reference of the
// matmul_bf16 and matmul_f32 tests (a stored K x M when ta, b N x K when tb).
std::vector<double> ref_matmul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, Buf& a, Buf& b, Buf* c0) {
  std::vector<double> want(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = c0 ? (*c0)[m * N + n] : 0.0;
      for (int64_t k = 0; k < K; ++k)
        s += static_cast<double>(ta ? a[k * M + m] : a[m * K + k]) * (tb ? b[n * K + k] : b[k * N + n]);
      want[m * N + n] = s;
    }
  return want;
}

// matmul_bf16 against a double reference: every transpose combination,
// with and without accumulating into c (a bias), within bf16's rounding of
// the inputs (2^-8 relative each, so about 1% of the largest output here).
TEST(MatMulBf16, TransposesAndAccumulate) {
  if (bf16_support() == Bf16Support::None) GTEST_SKIP() << "no AVX512_BF16 or AMX on this CPU";
  const int64_t M = 13, N = 37, K = 70;
  Buf a(M * K), b(K * N), c0(M * N);
  fill_random(a, 41), fill_random(b, 42), fill_random(c0, 43);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool acc : {false, true}) {
        const std::string name = std::string("ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0") + " acc=" +
                                 (acc ? "1" : "0");
        const std::vector<double> want = ref_matmul(ta, tb, M, N, K, a, b, acc ? &c0 : nullptr);
        Buf c(M * N);
        std::copy(c0.p, c0.p + M * N, c.p);
        matmul_bf16(ta, tb, M, N, K, a.p, b.p, c.p, acc);
        double scale = 0;
        for (double v : want) scale = std::max(scale, std::abs(v));
        const double worst = max_error(c, want);
        EXPECT_LE(worst, 0.02 * scale) << name;
        EXPECT_GT(worst, 0.0) << name << ": exact, so not computed in bf16";
      }
  EXPECT_THROW(matmul_bf16(false, false, 0, N, K, a.p, b.p, c0.p, false), std::runtime_error);
}

// matmul_f32 (oneDNN's matmul primitive on the caller's float32 buffers)
// against a double reference: every transpose combination, with and
// without accumulating, within float32's sums (1e-5 of the largest
// output); and where the float32 products take it: a times a transposed b
// with M >= 32 and 2^20 multiply-adds, on AVX-512 (LeNet's dense forward).
TEST(MatMulF32, TransposesAndAccumulateOnThePrimitive) {
  const int64_t M = 40, N = 64, K = 520;
  Buf a(M * K), b(K * N), c0(M * N);
  fill_random(a, 51), fill_random(b, 52), fill_random(c0, 53);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool acc : {false, true}) {
        const std::string name = std::string("ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0") + " acc=" +
                                 (acc ? "1" : "0");
        const std::vector<double> want = ref_matmul(ta, tb, M, N, K, a, b, acc ? &c0 : nullptr);
        double scale = 0;
        for (double v : want) scale = std::max(scale, std::abs(v));
        Buf c(M * N);
        std::copy(c0.p, c0.p + M * N, c.p);
        matmul_f32(ta, tb, M, N, K, a.p, b.p, c.p, acc);
        const double worst = max_error(c, want);  // (a NaN fails below)
        EXPECT_LE(worst, 1e-5 * scale) << name;
      }
  const bool avx512 = __builtin_cpu_supports("avx512f") && !avx2_at_most();
  EXPECT_EQ(matmul_f32_on_primitive(false, true, M, N, K), avx512);
  EXPECT_FALSE(matmul_f32_on_primitive(false, false, M, N, K));
  EXPECT_FALSE(matmul_f32_on_primitive(true, true, M, N, K));
  EXPECT_FALSE(matmul_f32_on_primitive(false, true, 8, 512, 3136));
  EXPECT_FALSE(matmul_f32_on_primitive(false, true, 32, 16, 16));
  EXPECT_THROW(matmul_f32(false, true, 0, N, K, a.p, b.p, c0.p, false), std::runtime_error);
}

// The pooling tests again on the plain loops Jobflow's max pooling uses
// where AVX-512 is missing (on a CPU without it, the same loops twice).
TEST(Pool2d, PlainLoopsOfTheOwnMaxPooling) {
  set_pool_vectors(false);
  struct Restore {
    ~Restore() { set_pool_vectors(true); }
  } restore;
  PoolMatchesReference();
  PoolMaxTiesGoToTheFirstMaximum();
  PoolBlockedMaxTwoByTwoMatchesPlain();
  PoolMaxTwoByTwoPropagatesNaN();
  PoolMaxOfAnyWindowPropagatesNaN();
}

// Initializers (OneFlow's flow.truncated_normal(0.1), flow.constant_initializer, ...).
#include <cmath>
#include <random>
#include <sstream>

#include "jobflow/ops.h"
#include "kernel_util.h"

namespace jobflow {

Initializer constant_initializer(double v) { return {Initializer::Kind::Constant, v, 0}; }
Initializer zeros_initializer() { return constant_initializer(0.0); }
Initializer ones_initializer() { return constant_initializer(1.0); }
Initializer random_normal_initializer(double mean, double stddev) {
  return {Initializer::Kind::RandomNormal, mean, stddev};
}
Initializer truncated_normal(double stddev, double mean) { return {Initializer::Kind::TruncatedNormal, mean, stddev}; }
Initializer random_uniform_initializer(double minval, double maxval) {
  return {Initializer::Kind::RandomUniform, minval, maxval};
}
Initializer xavier_uniform_initializer() { return {Initializer::Kind::XavierUniform, 1.0, 0}; }
Initializer xavier_normal_initializer() { return {Initializer::Kind::XavierNormal, 1.0, 0}; }
Initializer kaiming_uniform_initializer() { return {Initializer::Kind::KaimingUniform, 1.0, 0}; }
Initializer kaiming_normal_initializer() { return {Initializer::Kind::KaimingNormal, 1.0, 0}; }

std::string Initializer::str() const {
  std::ostringstream o;
  switch (kind) {
    case Kind::Constant: o << "constant(" << a << ")"; break;
    case Kind::RandomNormal: o << "random_normal(mean=" << a << ", stddev=" << b << ")"; break;
    case Kind::TruncatedNormal: o << "truncated_normal(mean=" << a << ", stddev=" << b << ")"; break;
    case Kind::RandomUniform: o << "random_uniform(" << a << ", " << b << ")"; break;
    case Kind::XavierUniform: o << "xavier_uniform"; break;
    case Kind::XavierNormal: o << "xavier_normal"; break;
    case Kind::KaimingUniform: o << "kaiming_uniform"; break;
    case Kind::KaimingNormal: o << "kaiming_normal"; break;
  }
  return o.str();
}

void Initializer::fill(Tensor& t, uint64_t seed) const {
  const int64_t n = t.numel();
  // fan_in / fan_out of an (out, in, k...) weight, as OneFlow and PyTorch
  // compute them; vectors count as fan_in = fan_out = n.
  double fan_in = static_cast<double>(n), fan_out = static_cast<double>(n);
  if (t.ndim() >= 2) {
    const double receptive = static_cast<double>(n) / static_cast<double>(t.dim(0) * t.dim(1));
    fan_in = static_cast<double>(t.dim(1)) * receptive;
    fan_out = static_cast<double>(t.dim(0)) * receptive;
  }
  std::mt19937_64 rng(seed);
  auto gen = [&]() -> double {
    switch (kind) {
      case Kind::Constant: return a;
      case Kind::RandomNormal: return std::normal_distribution<double>(a, b)(rng);
      case Kind::TruncatedNormal: {
        // Redraw samples beyond two standard deviations (TF/OneFlow rule).
        std::normal_distribution<double> d(0.0, 1.0);
        double z;
        do z = d(rng);
        while (std::fabs(z) > 2.0);
        return a + b * z;
      }
      case Kind::RandomUniform: return std::uniform_real_distribution<double>(a, b)(rng);
      case Kind::XavierUniform: {
        const double lim = a * std::sqrt(6.0 / (fan_in + fan_out));
        return std::uniform_real_distribution<double>(-lim, lim)(rng);
      }
      case Kind::XavierNormal: return std::normal_distribution<double>(0.0, a * std::sqrt(2.0 / (fan_in + fan_out)))(rng);
      case Kind::KaimingUniform: {
        const double lim = a * std::sqrt(6.0 / fan_in);
        return std::uniform_real_distribution<double>(-lim, lim)(rng);
      }
      case Kind::KaimingNormal: return std::normal_distribution<double>(0.0, a * std::sqrt(2.0 / fan_in))(rng);
    }
    return 0.0;
  };
  if (kind != Kind::Constant && !is_floating(t.dtype()))
    throw Error("[initializer] " + str() + " needs a float variable, got " + dtype_name(t.dtype()));
  kern::dispatch_all(t.dtype(), [&](auto z) {
    using T = decltype(z);
    T* p = static_cast<T*>(t.raw());
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(gen());
  });
}

}  // namespace jobflow

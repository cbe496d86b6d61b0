// A program built outside the tree against an installed Jobflow, with
// `pkg-config --cflags --libs jobflow` (tests/install/install.sh): defines a
// predict job (a matmul with a variable, plus 1), calls it and checks the
// values. Prints the files it loaded libjobflow and OpenBLAS from, then "ok".
#include <jobflow/jobflow.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

namespace flow = jobflow;

int main() try {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("install_check"),
      {flow::Numpy::Placeholder({2, 3}, flow::Float, "x")},
      [](flow::Blob x) -> flow::Numpy {
        auto w = flow::get_variable("w", {3, 2}, flow::Float, flow::constant_initializer(0.5));
        return flow::matmul(x, w) + 1.0;
      });
  flow::CheckPoint().init();
  flow::Tensor y = job(flow::Tensor::from<float>({2, 3}, {1, 2, 3, 0, 1, 0}));
  // y[i][j] = 0.5 * sum(x[i]) + 1: [[4, 4], [1.5, 1.5]]
  const float want[4] = {4.0f, 4.0f, 1.5f, 1.5f};
  if (y.shape() != flow::Shape{2, 2}) {
    std::fprintf(stderr, "app: result shape %s, expected (2, 2)\n", flow::spec_str({y.shape(), y.dtype()}).c_str());
    return 1;
  }
  for (int i = 0; i < 4; ++i) {
    if (std::fabs(y.data<float>()[i] - want[i]) > 1e-6f) {
      std::fprintf(stderr, "app: y[%d] = %g, expected %g\n", i, y.data<float>()[i], want[i]);
      return 1;
    }
  }
  std::ifstream maps("/proc/self/maps");
  std::string line, last;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path != last && (path.find("/libjobflow.so") != std::string::npos ||
                         path.find("/libopenblas") != std::string::npos))
      std::printf("loaded %s\n", path.c_str());
    last = path;
  }
  std::printf("ok\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "app: %s\n", e.what());
  return 1;
}

// bench_engine — Jobflow's side of tests/bench/run.
//
// On the real Fashion-MNIST data (flow::data::load_mnist, batch 100):
//   lenet_train    the seeds' train_job (lenet(train=true), sparse softmax
//                  cross entropy, SGD lr 0.1 momentum 0), synchronous calls
//   mlp_train      the same with the seeds' mlp
//   lenet_predict  a predict job returning the logits
//   mlp_predict    the same with the mlp
//   lenet_train_bf16, lenet_predict_bf16
//                  LeNet with FunctionConfig::enable_auto_mixed_precision
//                  (convolutions in bfloat16; bench_torch.py: torch.autocast)
// Each: warm-up calls, then `steps` timed calls, repeated 3 times; the median
// is printed as a machine-readable line "name value unit".
//
// usage: bench_engine [--quick] [--only NAME[,NAME...]] [--warmup N]
//                     [--train-steps N] [--predict-steps N] [--repeats N]
//                     [--data DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "seed_models.h"

namespace flow = jobflow;
using seeds::BATCH_SIZE;

namespace {

struct Options {
  int warmup = 20;
  int train_steps = 300;
  int predict_steps = 100;
  int repeats = 3;
  std::string data;
  std::set<std::string> only;
};

[[noreturn]] void usage(const char* argv0, int rc) {
  std::fprintf(rc ? stderr : stdout,
               "usage: %s [--quick] [--only NAME[,NAME...]] [--warmup N] [--train-steps N]\n"
               "          [--predict-steps N] [--repeats N] [--data DIR]\n"
               "NAME: lenet_train, mlp_train, lenet_predict, mlp_predict, lenet_train_bf16, lenet_predict_bf16\n",
               argv0);
  std::exit(rc);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: option %s needs a value\n", argv[0], a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&]() {
      int v = std::atoi(value().c_str());
      if (v < 1) {
        std::fprintf(stderr, "%s: %s must be >= 1\n", argv[0], a.c_str());
        std::exit(2);
      }
      return v;
    };
    if (a == "--quick") {
      o.train_steps = 60;
      o.predict_steps = 30;
    } else if (a == "--warmup") {
      o.warmup = number();
    } else if (a == "--train-steps") {
      o.train_steps = number();
    } else if (a == "--predict-steps") {
      o.predict_steps = number();
    } else if (a == "--repeats") {
      o.repeats = number();
    } else if (a == "--data") {
      o.data = value();
    } else if (a == "--only") {
      std::stringstream ss(value());
      for (std::string n; std::getline(ss, n, ',');)
        if (!n.empty()) o.only.insert(n);
    } else if (a == "-h" || a == "--help") {
      usage(argv[0], 0);
    } else {
      std::fprintf(stderr, "%s: unknown option '%s'\n", argv[0], a.c_str());
      usage(argv[0], 2);
    }
  }
  return o;
}

using Net = flow::Blob (*)(flow::Blob, bool);
flow::Blob lenet_net(flow::Blob x, bool train) { return seeds::lenet(x, train); }
flow::Blob mlp_net(flow::Blob x, bool) { return seeds::mlp(x); }

auto make_train_job(Net net, const char* name, bool bf16 = false) {
  return flow::global_function(flow::Train, flow::function_config().name(name).enable_auto_mixed_precision(bf16),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images"),
       flow::Numpy::Placeholder({BATCH_SIZE}, flow::Int32, "labels")},
      [net](flow::Blob images, flow::Blob labels) -> flow::Numpy {
        flow::Blob loss;
        {
          auto placement = flow::scope::placement("cpu", "0:0");
          auto logits = net(images, /*train=*/true);
          loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits, "softmax_loss");
        }
        flow::optimizer::PiecewiseConstantScheduler lr_scheduler({}, {0.1});
        flow::optimizer::SGD(lr_scheduler, /*momentum=*/0).minimize(loss);
        return loss;
      });
}

auto make_predict_job(Net net, const char* name, bool bf16 = false) {
  return flow::global_function(flow::Predict, flow::function_config().name(name).enable_auto_mixed_precision(bf16),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images")},
      [net](flow::Blob images) -> flow::Numpy {
        auto placement = flow::scope::placement("cpu", "0:0");
        return net(images, /*train=*/false);
      });
}

// Runs `step(i)` warmup times, then `steps` times per repeat; returns the
// median of the repeats' seconds.
double time_median(const Options& o, int steps, const std::function<void(size_t)>& step, size_t nbatches) {
  size_t next = 0;
  auto call = [&] {
    step(next);
    next = (next + 1) % nbatches;
  };
  for (int i = 0; i < o.warmup; ++i) call();
  std::vector<double> secs;
  for (int r = 0; r < o.repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) call();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  return secs[secs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  auto wanted = [&](const char* n) { return o.only.empty() || o.only.count(n); };
  for (const auto& n : o.only)
    if (n != "lenet_train" && n != "mlp_train" && n != "lenet_predict" && n != "mlp_predict" &&
        n != "lenet_train_bf16" && n != "lenet_predict_bf16") {
      std::fprintf(stderr, "%s: unknown benchmark '%s'\n", argv[0], n.c_str());
      usage(argv[0], 2);
    }

  auto mnist = flow::data::load_mnist(BATCH_SIZE, BATCH_SIZE, o.data);
  const auto& tr = mnist.train;
  const auto& te = mnist.test;
  std::fprintf(stderr, "bench_engine: %zu train / %zu test batches of %lld; warm-up %d, %d train / %d predict steps, "
               "median of %d\n", tr.images.size(), te.images.size(), static_cast<long long>(BATCH_SIZE), o.warmup,
               o.train_steps, o.predict_steps, o.repeats);

  flow::CheckPoint check_point;
  check_point.init();

  struct Model {
    const char* name;
    Net net;
    bool bf16;
  };
  // bf16: enable_auto_mixed_precision (convolutions in bfloat16; the rows
  // say the same whether or not this CPU has AVX512_BF16 or AMX).
  for (const Model& m : {Model{"lenet", lenet_net, false}, Model{"mlp", mlp_net, false}, Model{"lenet", lenet_net, true}}) {
    const std::string sfx = m.bf16 ? "_bf16" : "";
    const std::string train_name = std::string(m.name) + "_train" + sfx;
    const std::string predict_name = std::string(m.name) + "_predict" + sfx;
    if (wanted(train_name.c_str())) {
      auto job = make_train_job(m.net, (train_name + "_job").c_str(), m.bf16);
      float last = 0;
      double s = time_median(o, o.train_steps, [&](size_t i) {
        flow::Tensor loss = job(tr.images[i], tr.labels[i]);
        last = static_cast<float>(loss.mean());
      }, tr.images.size());
      std::fprintf(stderr, "bench_engine: %s last loss %.4f\n", train_name.c_str(), last);
      std::printf("%s %.3f steps/s\n", train_name.c_str(), o.train_steps / s);
      std::fflush(stdout);
    }
    if (wanted(predict_name.c_str())) {
      auto job = make_predict_job(m.net, (predict_name + "_job").c_str(), m.bf16);
      double s = time_median(o, o.predict_steps, [&](size_t i) {
        flow::Tensor logits = job(te.images[i]);
        (void)logits;
      }, te.images.size());
      std::printf("%s %.1f images/s\n", predict_name.c_str(), o.predict_steps * BATCH_SIZE / s);
      std::fflush(stdout);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_engine: %s\n", e.what());
  return 1;
}

// bench_async — the seeds' asynchronous path against the synchronous one.
//
// LeNet training on Fashion-MNIST batches of 100 (the seeds' train job). Each
// step's data is "prepared" on the caller's thread first: a busy loop of
// P ms standing for decoding. Synchronous: prepare, then job(images, labels)
// (the caller waits for the step). Asynchronous: prepare, then
// job.async(images, labels)(callback): the step runs on the job's worker
// while the caller prepares the next one. Prints, per P in 0, 10 and 25 ms,
//
//   async_prep<P> <async steps/s> <sync steps/s> <async/sync>
//
// An asynchronous call must never be slower than a synchronous one (ratio
// >= 1), and with P about the step's time the overlap should approach what
// two cores allow (ratio towards 2).
//
// usage: bench_async [--steps N] [--data DIR]
#include <jobflow/jobflow.h>
#include <jobflow/models/seeds.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace flow = jobflow;
namespace models = jobflow::models;
using Clock = std::chrono::steady_clock;

namespace {

void busy_ms(double ms) {
  const auto until = Clock::now() + std::chrono::duration<double, std::milli>(ms);
  volatile double x = 1.0;
  while (Clock::now() < until)
    for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
}

}  // namespace

int main(int argc, char** argv) try {
  int steps = 60;
  std::string data;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) steps = std::max(5, std::atoi(argv[++i]));
    else if (a == "--data" && i + 1 < argc) data = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_async [--steps N] [--data DIR]\n");
      return 2;
    }
  }
  auto mnist = flow::data::load_mnist(models::BATCH_SIZE, models::BATCH_SIZE, data);
  const auto& tr = mnist.train;
  flow::CheckPoint().init();
  auto job = models::train_job(models::Net::LeNet, "lenet_async_bench");
  size_t next = 0;
  auto batch = [&] {
    const size_t i = next;
    next = (next + 1) % tr.images.size();
    return i;
  };
  for (int i = 0; i < 10; ++i) {  // warm-up
    const size_t b = batch();
    job->run({tr.images[b], tr.labels[b]});
  }
  for (double prep : {0.0, 10.0, 25.0}) {
    auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      busy_ms(prep);
      const size_t b = batch();
      job->run({tr.images[b], tr.labels[b]});
    }
    const double sync = steps / std::chrono::duration<double>(Clock::now() - t0).count();
    std::atomic<int> done{0};
    t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      busy_ms(prep);
      const size_t b = batch();
      job->submit({tr.images[b], tr.labels[b]}, [&](flow::CompiledJob::Result, std::exception_ptr) { ++done; });
    }
    job->sync();
    const double async = steps / std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("async_prep%.0f %.2f %.2f %.3f\n", prep, async, sync, async / sync);
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_async: %s\n", e.what());
  return 1;
}

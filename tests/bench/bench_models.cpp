// bench_models — Jobflow's side of `tests/bench/run --models`.
//
// Loads each ONNX file (tests/bench/export_models.py) as a predict job, the
// way `jobflow run` does (onnx::load, then synchronous CompiledJob::run
// calls), feeds it one seeded random input (uniform in [0, 1): the
// distribution tests/models/zoo.py calibrated the models' batch norms on;
// with a standard normal input, used before, efficientnet_b0's logits
// reached 17,000 and float32 rounding alone moved them by 12%, so the
// outputs compared nothing) and times steady calls:
// warm-up calls, then calls for at least --seconds per repeat; the best
// repeat counts (on a machine shared with other work a repeat can only be
// slowed down, never sped up, so the best is the closest to the machine's
// speed; bench_ort.py does the same). Prints one machine-readable line per file:
//
//   <stem> <images/s> img/s <threads>
//
// With --dump DIR it also writes DIR/<stem>.input.bin (the input, float32,
// C order) and DIR/<stem>.out<k>.bin (each output of the last call), so the
// ONNX Runtime side (bench_ort.py) runs the same input and compares.
//
// --clock cpu times by the process's CPU time (CLOCK_PROCESS_CPUTIME_ID)
// instead of the wall clock: on a machine other processes keep busy, a
// one-thread run's CPU time is what its kernels took, whatever share of a
// core it got (with more threads it also counts their spinning); bench_ort.py
// has the same option.
//
// --keep-jobs keeps every job loaded (and called) until the end, as an
// application with several models does: each file is measured while the
// jobs before it sit idle (with OpenMP teams of their own, see
// jobflow::idle_calling_thread).
//
// --describe prints each job's compiled plan to stderr after the warm-up
// calls (CompiledJob::describe: every node with its algorithm, fusions and
// shapes), to read beside a JOBFLOW_PROFILE=1 profile.
//
// usage: bench_models [--threads N] [--precision fp32|bf16] [--warmup N]
//                     [--seconds S] [--repeats N] [--clock wall|cpu]
//                     [--dump DIR] [--keep-jobs] [--describe] FILE.onnx...
//        bench_models --isa   (prints jobflow::cpu_isa(): oneDNN's ISA here)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include <jobflow/backend.h>
#include <jobflow/jobflow.h>
#include <jobflow/onnx.h>

namespace flow = jobflow;
namespace fs = std::filesystem;

namespace {

struct Options {
  int threads = 0;
  std::string precision = "fp32";
  int warmup = 5;
  double seconds = 2.0;
  int repeats = 5;
  bool cpu_clock = false;
  std::string dump;
  bool keep_jobs = false;
  bool describe = false;
  std::vector<std::string> files;
};

[[noreturn]] void usage(int rc) {
  std::fprintf(rc ? stderr : stdout,
               "usage: bench_models [--threads N] [--precision fp32|bf16] [--warmup N] [--seconds S]\n"
               "                    [--repeats N] [--clock wall|cpu] [--dump DIR] [--keep-jobs] [--describe]\n"
               "                    FILE.onnx...\n");
  std::exit(rc);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_models: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") o.threads = std::atoi(value().c_str());
    else if (a == "--precision") o.precision = value();
    else if (a == "--warmup") o.warmup = std::atoi(value().c_str());
    else if (a == "--seconds") o.seconds = std::atof(value().c_str());
    else if (a == "--repeats") o.repeats = std::max(1, std::atoi(value().c_str()));
    else if (a == "--dump") o.dump = value();
    else if (a == "--keep-jobs") o.keep_jobs = true;
    else if (a == "--describe") o.describe = true;
    else if (a == "--clock") {
      const std::string c = value();
      if (c != "wall" && c != "cpu") {
        std::fprintf(stderr, "bench_models: --clock takes wall or cpu, not '%s'\n", c.c_str());
        std::exit(2);
      }
      o.cpu_clock = c == "cpu";
    }
    else if (a == "--isa") {
      std::printf("%s\n", flow::cpu_isa().c_str());
      std::exit(0);
    }
    else if (a == "-h" || a == "--help") usage(0);
    else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "bench_models: unknown option '%s'\n", a.c_str());
      usage(2);
    } else {
      o.files.push_back(a);
    }
  }
  if (o.files.empty()) usage(2);
  return o;
}

void write_bin(const std::string& path, const flow::Tensor& t) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
}

// Seconds on the wall clock, or of this process's CPU time.
double now(bool cpu) {
  timespec ts{};
  clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  if (!o.dump.empty()) fs::create_directories(o.dump);
  std::vector<std::shared_ptr<flow::CompiledJob>> kept;
  for (const std::string& file : o.files) {
    const std::string stem = fs::path(file).stem().string();
    flow::onnx::LoadOptions lo;
    lo.num_threads = o.threads;
    lo.max_in_flight = 1;
    lo.precision = o.precision;
    auto job = flow::onnx::load(file, lo);
    const flow::Signature& sig = job->signature();
    std::vector<flow::Tensor> in;
    std::mt19937 rng(0);
    std::uniform_real_distribution<float> uniform(0.f, 1.f);
    for (const auto& s : sig.inputs) {
      flow::Tensor t(s.shape, s.dtype);
      float* p = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = uniform(rng);
      in.push_back(t);
    }
    const int64_t batch = sig.inputs.at(0).shape.at(0);
    std::vector<flow::Tensor> out;
    for (int i = 0; i < o.warmup; ++i) out = job->run(in);
    if (o.describe) std::fprintf(stderr, "%s", job->describe().c_str());
    std::vector<double> rates;
    for (int r = 0; r < o.repeats; ++r) {
      const double t0 = now(o.cpu_clock);
      int64_t calls = 0;
      double s = 0;
      do {
        out = job->run(in);
        ++calls;
        s = now(o.cpu_clock) - t0;
      } while (s < o.seconds);
      rates.push_back(calls * batch / s);
    }
    std::sort(rates.begin(), rates.end());
    if (!o.dump.empty()) {
      write_bin((fs::path(o.dump) / (stem + ".input.bin")).string(), in[0]);
      for (size_t k = 0; k < out.size(); ++k)
        write_bin((fs::path(o.dump) / (stem + ".out" + std::to_string(k) + ".bin")).string(), out[k]);
    }
    std::printf("%s %.2f img/s %d\n", stem.c_str(), rates.back(), job->num_threads());
    std::fflush(stdout);
    if (o.keep_jobs) kept.push_back(job);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_models: %s\n", e.what());
  return 1;
}

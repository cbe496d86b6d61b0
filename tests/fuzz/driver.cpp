// A standalone driver for the ONNX loader's fuzz target (fuzz_onnx_load.cpp)
// for builds without libFuzzer (g++): replays a corpus, then runs N seeded,
// deterministic mutations of it through the same LLVMFuzzerTestOneInput.
//
//   fuzz_onnx_driver [options] PATH...
//     PATH                 .onnx files, or folders searched recursively for
//                          *.onnx
//     --mutations N        mutated inputs to run (default 3000)
//     --seed S             mutation seed (default 1)
//     --max-seconds T      stop mutating after T seconds (default: no limit)
//     --no-job-seeds       do not add the small job files this driver writes
//                          with onnx::save (train/eval/predict jobs of tiny
//                          LeNet/MLP nets: every jobflow.* key, under 1 MiB)
//     --write-seeds DIR    write those job files to DIR and exit
//     --failures DIR       where failing inputs are saved (default
//                          $TMPDIR/jobflow-fuzz-failures or /tmp/...)
//     --save-rejections N  print the N most common rejection messages (default 12)
//     --max-memory-mb M    address-space limit (default 4096; 0: none; not
//                          under ASan), so a runaway allocation fails instead
//                          of eating the machine
//     --verbose            print every input, its time and its outcome
//     --dump I             also write mutation I to the failures folder
//                          (repeatable; the same seed and corpus give the
//                          same mutation)
//
// Mutations (wire_mutator.h): 3 in 4 inputs are protobuf-aware (varint and
// float values, field deletion/duplication/swaps/splices from another corpus
// file, string replacement from a dictionary, length-varint tampering) and
// then maybe one byte-level change; the rest are 1-4 byte-level changes (bit
// flips, byte sets, truncations, chunk duplication, splices between corpus
// files, erasures).
//
// Exit status: 0 when every input was loaded or rejected with jobflow::Error;
// 1 when any other exception escaped (each is saved under --failures and
// printed with how to replay it); 2 on usage errors. A crash kills the
// process; the input being run is saved first (signal handler, or the
// sanitizer's death callback under ASan).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "jobflow/jobflow.h"
#include "jobflow/onnx.h"
#include "jobflow/session.h"
#include "wire_mutator.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JOBFLOW_FUZZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define JOBFLOW_FUZZ_ASAN 1
#endif
#ifdef JOBFLOW_FUZZ_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace jobflow_fuzz {
enum class Outcome { Loaded, Rejected };
extern Outcome last_outcome;
extern std::string last_error;
}  // namespace jobflow_fuzz

namespace {

namespace fs = std::filesystem;
namespace flow = jobflow;
namespace wire = jobflow_fuzz::wire;

constexpr uint64_t kMaxFileBytes = uint64_t(1) << 20;  // = the target's LoadOptions

// ------------------------------------------------------- crash bookkeeping

// The input being run and where to save it if the process dies.
const std::string* g_current = nullptr;
char g_crash_path[4096] = "";
char g_crash_note[512] = "";

void save_current_raw() {
  if (!g_current || !g_crash_path[0]) return;
  const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  size_t off = 0;
  while (off < g_current->size()) {
    const ssize_t w = ::write(fd, g_current->data() + off, g_current->size() - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  ::close(fd);
  const char* m = "\n[fuzz driver] the process is dying while running: ";
  (void)!::write(2, m, std::strlen(m));
  (void)!::write(2, g_crash_note, std::strlen(g_crash_note));
  m = "\n[fuzz driver] input saved to ";
  (void)!::write(2, m, std::strlen(m));
  (void)!::write(2, g_crash_path, std::strlen(g_crash_path));
  (void)!::write(2, "\n", 1);
}

#ifndef JOBFLOW_FUZZ_ASAN
void on_signal(int sig) {
  save_current_raw();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
#endif

void install_crash_handlers() {
#ifdef JOBFLOW_FUZZ_ASAN
  __sanitizer_set_death_callback(save_current_raw);
#else
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(s, on_signal);
#endif
}

// ------------------------------------------------------------------ corpus

struct Input {
  std::string name, bytes;
  wire::Msg tree;
  bool parsed = false;
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void add_path(const fs::path& p, std::vector<Input>& out) {
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    std::vector<fs::path> files;
    for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      if (it->is_regular_file(ec) && it->path().extension() == ".onnx") files.push_back(it->path());
    std::sort(files.begin(), files.end());
    for (auto& f : files) out.push_back({f.string(), read_all(f), {}, false});
  } else if (fs::is_regular_file(p, ec)) {
    out.push_back({p.string(), read_all(p), {}, false});
  } else {
    std::fprintf(stderr, "[fuzz driver] warning: %s: no such file or folder (skipped)\n", p.c_str());
  }
}

// Small job files of every kind, written with onnx::save.
void write_job_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  using flow::Blob;
  auto init = flow::truncated_normal(0.1);
  auto tiny_lenet = [init](Blob x, bool train) {
    auto c1 = flow::layers::conv2d(x, 4, 3,
        {.padding = "SAME", .activation = flow::nn::relu, .kernel_initializer = init, .name = "conv1"});
    auto p1 = flow::nn::max_pool2d(c1, 2, 2, "SAME", "NCHW", "pool1");
    auto c2 = flow::layers::conv2d(p1, 8, 3,
        {.padding = "SAME", .activation = flow::nn::relu, .kernel_initializer = init, .name = "conv2"});
    auto p2 = flow::nn::max_pool2d(c2, 2, 2, "SAME", "NCHW", "pool2");
    auto r = flow::reshape(p2, {p2.shape()[0], -1});
    auto h = flow::layers::dense(r, 16, {.activation = flow::nn::relu, .kernel_initializer = init, .name = "dense1"});
    if (train) h = flow::nn::dropout(h, 0.5, "dropout");
    return flow::layers::dense(h, 10, {.kernel_initializer = init, .name = "dense2"});
  };
  auto tiny_mlp = [init](Blob x) {
    auto r = flow::reshape(x, {x.shape()[0], -1});
    auto h = flow::layers::dense(r, 16, {.activation = flow::nn::relu, .kernel_initializer = init, .name = "hidden"});
    return flow::layers::dense(h, 10, {.kernel_initializer = init, .name = "output"});
  };
  const flow::Shape img{4, 1, 12, 12};
  auto save = [&](const std::shared_ptr<flow::CompiledJob>& job, const std::string& name) {
    flow::CheckPoint().init();
    flow::onnx::save(*job, (dir / (name + ".onnx")).string());
  };
  flow::session::reset();
  save(flow::global_function(flow::Train, flow::function_config().name("tiny_lenet_train"),
                             {flow::Numpy::Placeholder(img, flow::Float, "images"),
                              flow::Numpy::Placeholder({4}, flow::Int32, "labels")},
                             [&](Blob images, Blob labels) -> flow::Numpy {
                               auto loss = flow::nn::sparse_softmax_cross_entropy_with_logits(
                                   labels, tiny_lenet(images, true), "softmax_loss");
                               flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({10, 20}, {0.1, 0.01, 0.001}),
                                                    0.9)
                                   .minimize(loss);
                               return loss;
                             })
           .compiled(),
       "tiny_lenet_train");
  save(flow::global_function(flow::Predict, flow::function_config().name("tiny_lenet_eval"),
                             {flow::Numpy::Placeholder(img, flow::Float, "images"),
                              flow::Numpy::Placeholder({4}, flow::Int32, "labels")},
                             [&](Blob images, Blob labels) -> std::tuple<flow::Numpy, flow::Numpy> {
                               return {labels, tiny_lenet(images, false)};
                             })
           .compiled(),
       "tiny_lenet_eval");
  flow::session::reset();
  save(flow::global_function(flow::Train, flow::function_config().name("tiny_mlp_train"),
                             {flow::Numpy::Placeholder(img, flow::Float, "images"),
                              flow::Numpy::Placeholder({4}, flow::Int32, "labels")},
                             [&](Blob images, Blob labels) -> flow::Numpy {
                               auto loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, tiny_mlp(images));
                               flow::optimizer::Adam(flow::optimizer::CosineScheduler(0.01, 100)).minimize(loss);
                               return loss;
                             })
           .compiled(),
       "tiny_mlp_train");
  save(flow::global_function(flow::Predict, flow::function_config().name("tiny_mlp_predict"),
                             {flow::Numpy::Placeholder(img, flow::Float, "images")},
                             [&](Blob images) -> flow::Numpy { return tiny_mlp(images); })
           .compiled(),
       "tiny_mlp_predict");
  flow::session::reset();
  save(flow::global_function(
           flow::Predict, flow::function_config().name("ops_job"),
           {flow::Numpy::Placeholder({2, 3, 4, 4}, flow::Float, "x"), flow::Numpy::Placeholder({2}, flow::Int32, "y")},
           [](Blob x, Blob y) -> std::tuple<flow::Numpy, flow::Numpy, flow::Numpy, flow::Numpy> {
             auto a = flow::nn::avg_pool2d(x, 2, 2, "VALID");
             auto b = flow::layers::batch_normalization(a, {.name = "bn"});
             auto c = flow::transpose(flow::reshape(b, {2, -1}), {1, 0});
             auto s = flow::nn::softmax(flow::concat({c, c}, 0), 0);
             auto r = flow::reduce_mean(flow::math::tanh(flow::math::sigmoid(s) * 2.0 + 1.0), {1}, true);
             auto eye = flow::constant(flow::Tensor::from<float>({3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1}));
             auto l = flow::nn::log_softmax(flow::matmul(flow::reduce_sum(x, {2, 3}), eye));
             auto xent = flow::nn::sparse_softmax_cross_entropy_with_logits(y, l);
             return {r, flow::argmax(l), xent, flow::cast(flow::reduce_max(x, {}), flow::Float64)};
           })
           .compiled(),
       "ops_job");
  flow::session::reset();
}

// ------------------------------------------------------------------- runs

struct Counts {
  int64_t loaded = 0, rejected = 0, findings = 0;
  std::map<std::string, int64_t> reasons;  // rejection message, names and numbers stripped
  double slowest_s = 0;
  std::string slowest;
};

// "[onnx.load] <fuzz>: node 'conv1' (Conv) uses 'x'..." -> "node '*' (Conv) uses '*'..."
std::string reason_of(const std::string& msg) {
  std::string s = msg;
  const std::string pre = "[onnx.load] <fuzz>: ";
  if (s.rfind(pre, 0) == 0) s = s.substr(pre.size());
  std::string o;
  bool quoted = false;
  for (size_t i = 0; i < s.size() && o.size() < 90; ++i) {
    const char c = s[i];
    if (c == '\'' || c == '"') {
      if (!quoted) o += c == '\'' ? "'*'" : "\"*\"";
      quoted = !quoted;
      continue;
    }
    if (quoted) continue;
    if (c >= '0' && c <= '9') {
      if (o.empty() || o.back() != '#') o += '#';
      continue;
    }
    o += c;
  }
  return o;
}

struct Driver {
  fs::path failures;
  bool verbose = false;
  Counts counts;
  int64_t serial = 0;

  // Runs one input; returns false on a finding.
  bool run(const std::string& bytes, const std::string& what) {
    ++serial;
    g_current = &bytes;
    std::snprintf(g_crash_note, sizeof g_crash_note, "%s", what.c_str());
    const fs::path crash = failures / ("crash-" + std::to_string(serial) + ".onnx");
    std::snprintf(g_crash_path, sizeof g_crash_path, "%s", crash.c_str());
    std::string failure;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {
      failure = std::string(typeid(e).name()) + ": " + e.what();
    } catch (...) {
      failure = "an exception that is not a std::exception";
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    g_current = nullptr;
    if (dt > counts.slowest_s) {
      counts.slowest_s = dt;
      counts.slowest = what;
    }
    if (verbose)
      std::printf("  %s: %.1f ms: %s\n", what.c_str(), dt * 1e3,
                  !failure.empty() ? "FINDING"
                  : jobflow_fuzz::last_outcome == jobflow_fuzz::Outcome::Loaded ? "loaded"
                                                                                : jobflow_fuzz::last_error.c_str());
    if (failure.empty()) {
      if (jobflow_fuzz::last_outcome == jobflow_fuzz::Outcome::Loaded) ++counts.loaded;
      else {
        ++counts.rejected;
        ++counts.reasons[reason_of(jobflow_fuzz::last_error)];
      }
      return true;
    }
    ++counts.findings;
    const fs::path keep = failures / ("finding-" + std::to_string(serial) + ".onnx");
    std::ofstream(keep, std::ios::binary) << bytes;
    std::printf("FINDING (%s): %s\n  input saved to %s\n  replay: fuzz_onnx_driver --no-job-seeds --mutations 0 %s\n",
                what.c_str(), failure.c_str(), keep.c_str(), keep.c_str());
    return false;
  }
};

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--mutations N] [--seed S] [--max-seconds T] [--no-job-seeds] [--write-seeds DIR]\n"
               "          [--failures DIR] [--save-rejections N] [--max-memory-mb M] [--verbose] [--dump I] PATH...\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // findings interleave with stderr in order
  int64_t mutations = 3000, reasons_shown = 12, max_memory_mb = 4096;
  uint64_t seed = 1;
  double max_seconds = 0;
  bool job_seeds = true, verbose = false;
  std::string write_seeds, failures_dir;
  std::vector<std::string> paths;
  std::vector<int64_t> dump;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(usage(argv[0]));
      }
      return argv[++i];
    };
    try {
      if (a == "--mutations") mutations = std::stoll(value());
      else if (a == "--seed") seed = std::stoull(value());
      else if (a == "--max-seconds") max_seconds = std::stod(value());
      else if (a == "--no-job-seeds") job_seeds = false;
      else if (a == "--write-seeds") write_seeds = value();
      else if (a == "--failures") failures_dir = value();
      else if (a == "--save-rejections") reasons_shown = std::stoll(value());
      else if (a == "--max-memory-mb") max_memory_mb = std::stoll(value());
      else if (a == "--verbose") verbose = true;
      else if (a == "--dump") dump.push_back(std::stoll(value()));
      else if (a == "-h" || a == "--help") return usage(argv[0]), 0;
      else if (!a.empty() && a[0] == '-') return usage(argv[0]);
      else paths.push_back(a);
    } catch (const std::exception&) {
      std::fprintf(stderr, "bad value for %s\n", a.c_str());
      return usage(argv[0]);
    }
  }

  if (!write_seeds.empty()) {
    write_job_seeds(write_seeds);
    std::printf("job seeds written to %s\n", write_seeds.c_str());
    return 0;
  }

#ifndef JOBFLOW_FUZZ_ASAN
  if (max_memory_mb > 0) {
    rlimit rl{};
    rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(max_memory_mb) << 20;
    if (::setrlimit(RLIMIT_AS, &rl) != 0) std::perror("[fuzz driver] setrlimit(RLIMIT_AS)");
  }
#else
  (void)max_memory_mb;
#endif

  Driver d;
  d.verbose = verbose;
  if (failures_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    failures_dir = (fs::path(tmp && *tmp ? tmp : "/tmp") / "jobflow-fuzz-failures").string();
  }
  d.failures = failures_dir;
  fs::create_directories(d.failures);
  install_crash_handlers();

  // The corpus.
  std::vector<Input> corpus;
  if (job_seeds) {
    const fs::path seeds = d.failures / ("job-seeds-" + std::to_string(::getpid()));
    write_job_seeds(seeds);
    add_path(seeds, corpus);
    fs::remove_all(seeds);
  }
  for (auto& p : paths) add_path(p, corpus);
  if (corpus.empty()) {
    std::fprintf(stderr, "[fuzz driver] the corpus is empty\n");
    return 2;
  }

  // Replay.
  const auto t0 = std::chrono::steady_clock::now();
  int64_t over_limit = 0;
  for (auto& in : corpus) {
    if (in.bytes.size() > kMaxFileBytes) ++over_limit;
    d.run(in.bytes, "corpus " + in.name);
  }
  const Counts replay = d.counts;
  const double replay_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("replayed %zu corpus files in %.1f s: %lld loaded, %lld rejected with Error (%lld over the 1 MiB "
              "limit), %lld findings\n",
              corpus.size(), replay_s, static_cast<long long>(replay.loaded), static_cast<long long>(replay.rejected),
              static_cast<long long>(over_limit), static_cast<long long>(replay.findings));
  std::fflush(stdout);

  // Mutation bases: the files a mutation can grow from (within the limit).
  std::vector<Input*> bases;
  wire::Dictionary dict = wire::default_dictionary();
  for (auto& in : corpus) {
    if (in.bytes.empty() || in.bytes.size() > kMaxFileBytes) continue;
    in.parsed = wire::parse(in.bytes, in.tree);
    if (in.parsed) wire::learn(in.tree, dict);
    bases.push_back(&in);
  }
  d.counts = Counts();
  int64_t done = 0;
  const auto m0 = std::chrono::steady_clock::now();
  if (!bases.empty()) {
    wire::Rng rng(seed);
    for (int64_t i = 0; i < mutations; ++i) {
      if (max_seconds > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count() > max_seconds) {
        std::printf("stopped after %.0f s (--max-seconds)\n", max_seconds);
        break;
      }
      Input& base = *bases[wire::pick(rng, bases.size())];
      Input& donor = *bases[wire::pick(rng, bases.size())];
      std::string what = "mutation " + std::to_string(i) + " (seed " + std::to_string(seed) + ") of " +
                         fs::path(base.name).filename().string() + ":";
      std::string bytes;
      if (base.parsed && wire::pick(rng, 4) != 0) {
        wire::Msg m = base.tree;
        const int n = 1 + static_cast<int>(wire::pick(rng, 3));
        for (int k = 0; k < n; ++k) wire::mutate_tree(m, donor.parsed ? &donor.tree : nullptr, dict, rng, what);
        bytes = wire::serialize(m);
        if (wire::pick(rng, 4) == 0) wire::mutate_bytes(bytes, donor.bytes, rng, what);
      } else {
        bytes = base.bytes;
        const int n = 1 + static_cast<int>(wire::pick(rng, 4));
        for (int k = 0; k < n; ++k) wire::mutate_bytes(bytes, donor.bytes, rng, what);
      }
      if (std::find(dump.begin(), dump.end(), i) != dump.end()) {
        const fs::path p = d.failures / ("mutation-" + std::to_string(i) + ".onnx");
        std::ofstream(p, std::ios::binary) << bytes;
        std::printf("%s: written to %s\n", what.c_str(), p.c_str());
      }
      d.run(bytes, what);
      ++done;
    }
  }
  const double mut_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
  std::printf("ran %lld mutations (seed %llu, %zu bases) in %.1f s: %lld loaded, %lld rejected with Error, %lld "
              "findings\n",
              static_cast<long long>(done), static_cast<unsigned long long>(seed), bases.size(), mut_s,
              static_cast<long long>(d.counts.loaded), static_cast<long long>(d.counts.rejected),
              static_cast<long long>(d.counts.findings));
  std::printf("slowest input: %.2f s (%s)\n", d.counts.slowest_s, d.counts.slowest.c_str());
  if (reasons_shown > 0 && !d.counts.reasons.empty()) {
    std::vector<std::pair<int64_t, std::string>> r;
    for (auto& [k, v] : d.counts.reasons) r.emplace_back(v, k);
    std::sort(r.rbegin(), r.rend());
    std::printf("most common rejections of the mutations (%zu kinds):\n", r.size());
    for (size_t i = 0; i < r.size() && static_cast<int64_t>(i) < reasons_shown; ++i)
      std::printf("  %6lld  %s\n", static_cast<long long>(r[i].first), r[i].second.c_str());
  }
  const int64_t findings = replay.findings + d.counts.findings;
  if (findings) {
    std::printf("%lld findings: inputs saved under %s\n", static_cast<long long>(findings), d.failures.c_str());
    return 1;
  }
  return 0;
}

// The backend registry: the only place that knows which backends exist, and
// the one parser of device strings.
//
// kBackends is a table from device tag to loader: a backend is one row. The
// CPU backend is built in. The CUDA backend is a separate library,
// libjobflow_cuda.so (cuda/), which links this one; it is loaded here at run
// time, the first time a "gpu" backend is asked for, so that this library
// needs no CUDA libraries to load and run. Where it is looked for:
//   1. $JOBFLOW_CUDA_BACKEND, a path (or "0" / "none": never load it);
//   2. next to this library (an installation), then ../cuda/ from it (the
//      build tree: build/engine/ and build/cuda/);
//   3. the dynamic loader's search path.
// No library, or a library without a usable device, means the CPU backend.
// Without the CUDA driver (libcuda.so.1) no device can be usable, so the
// library is not loaded at all: it maps cuBLAS/cuDNN, whose relocations
// alone keep about 120 MB resident for the rest of the process (the seeds'
// LeNet places its ops on "gpu"), and it cannot be unloaded again (the
// C++ runtime marks it NODELETE).
#include "jobflow/backend.h"

#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

namespace jobflow {
namespace {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool available() const override { return true; }
  void eval(const Primitive& p, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
            ExecContext& ctx) const override {
    p.eval_cpu(in, out, ctx);
  }
};

const Backend* load_cpu_backend() {
  static const CpuBackend b;
  return &b;
}

const Backend* load_cuda_backend() {
  const char* env = std::getenv("JOBFLOW_CUDA_BACKEND");
  std::vector<std::string> paths;
  if (env && *env) {
    const std::string e = env;
    if (e == "0" || e == "none") return nullptr;
    paths.push_back(e);
  } else {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&compiled_backends), &info) && info.dli_fname) {
      std::string dir = info.dli_fname;
      dir = dir.substr(0, dir.find_last_of('/') + 1);  // "" when it has no directory part
      paths.push_back(dir + "libjobflow_cuda.so");
      paths.push_back(dir + "../cuda/libjobflow_cuda.so");
    }
    paths.push_back("libjobflow_cuda.so");
  }
  if (!dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {  // kept open: the CUDA runtime loads it again
    if (env && *env) std::cerr << "jobflow: not loading the CUDA backend: no CUDA driver (libcuda.so.1: " << dlerror() << ")\n";
    return nullptr;
  }
  for (const std::string& p : paths) {
    void* h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed
    if (!h) {
      if (env && *env) std::cerr << "jobflow: cannot load the CUDA backend " << p << ": " << dlerror() << "\n";
      continue;
    }
    using Entry = const Backend* (*)();
    if (auto entry = reinterpret_cast<Entry>(dlsym(h, "jobflow_cuda_backend"))) return entry();
  }
  return nullptr;
}

// Device tag -> the names users write for it, whether they may add a
// device number (":<n>"), and the loader of its backend (null: not built
// or not loadable). Each loader runs once, at the first use of its tag.
// parse_device() reads the names from here: a backend is one row.
struct BackendRow {
  const char* tag;
  std::array<const char*, 2> names;  // unused slots are null
  bool numbered;
  const Backend* (*load)();
};
constexpr BackendRow kBackends[] = {
    {"cpu", {"cpu", nullptr}, false, load_cpu_backend},
    {"gpu", {"gpu", "cuda"}, true, load_cuda_backend},
};
constexpr size_t kCpuRow = 0;

// The backend of row `i`, loaded once.
const Backend* loaded(size_t i) {
  static std::array<std::once_flag, std::size(kBackends)> once;
  static std::array<const Backend*, std::size(kBackends)> backends{};
  std::call_once(once[i], [i] { backends[i] = kBackends[i].load(); });
  return backends[i];
}

const Backend& cpu() { return *loaded(kCpuRow); }

}  // namespace

bool parse_device(const std::string& text, Device* out, std::string* why) {
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  auto bad = [&](const std::string& w) {
    if (why) *why = "device \"" + text + "\" " + w;
    return false;
  };
  // "cpu, gpu, cuda, gpu:<n> or cuda:<n>": every name, then the numbered forms.
  auto choices = [] {
    std::vector<std::string> c;
    for (const BackendRow& r : kBackends)
      for (const char* n : r.names)
        if (n) c.emplace_back(n);
    for (const BackendRow& r : kBackends)
      for (const char* n : r.names)
        if (n && r.numbered) c.push_back(std::string(n) + ":<n>");
    std::string s;
    for (size_t i = 0; i < c.size(); ++i) s += (i == 0 ? "" : i + 1 == c.size() ? " or " : ", ") + c[i];
    return s;
  };
  const BackendRow* row = nullptr;
  for (const BackendRow& r : kBackends)
    for (const char* n : r.names)
      if (n && name == n) row = &r;
  if (!row || (colon != std::string::npos && !row->numbered)) return bad("is not " + choices());
  Device d;
  d.tag = row->tag;
  if (colon != std::string::npos) {
    const std::string idx = text.substr(colon + 1);
    if (idx.empty() || idx.size() > 9 || idx.find_first_not_of("0123456789") != std::string::npos)
      return bad("has no device number after ':' (" + name + ":<n>)");
    d.index = std::stoi(idx);
    if (d.index != 0)
      return bad("is not available: the CUDA backend runs on device 0 only (use cuda:0 or gpu)");
  }
  *out = d;
  return true;
}

Device parse_device(const std::string& text, const std::string& where) {
  Device d;
  std::string why;
  if (!parse_device(text, &d, &why)) throw Error("[" + where + "] " + why);
  return d;
}

const Backend& backend_for(const std::string& tag, bool* fell_back) {
  if (fell_back) *fell_back = false;
  for (size_t i = 0; i < std::size(kBackends); ++i) {
    if (tag != kBackends[i].tag) continue;
    if (const Backend* b = loaded(i); b && b->available()) return *b;
    break;
  }
  if (fell_back) *fell_back = tag != kBackends[kCpuRow].tag;
  return cpu();
}

std::vector<std::string> compiled_backends() {
  std::vector<std::string> r;
  for (size_t i = 0; i < std::size(kBackends); ++i)
    if (const Backend* b = loaded(i)) r.push_back(b->name());
  return r;
}

}  // namespace jobflow

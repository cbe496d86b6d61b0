// The backend registry: the only place that knows which backends exist.
//
// The CPU backend is built in. The CUDA backend is a separate library,
// libjobflow_cuda.so (cuda/), which links this one; it is loaded here at run
// time, the first time a "gpu" backend is asked for, so that this library
// needs no CUDA libraries to load and run. Where it is looked for:
//   1. $JOBFLOW_CUDA_BACKEND, a path (or "0" / "none": never load it);
//   2. next to this library (an installation), then ../cuda/ from it (the
//      build tree: build/engine/ and build/cuda/);
//   3. the dynamic loader's search path.
// No library, or a library without a usable device, means the CPU backend.
#include "jobflow/backend.h"

#include <dlfcn.h>

#include <cstdlib>
#include <iostream>

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

const CpuBackend& cpu() {
  static CpuBackend b;
  return b;
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

// The CUDA backend, or null when its library cannot be loaded (once).
const Backend* cuda_backend() {
  static const Backend* b = load_cuda_backend();
  return b;
}

}  // namespace

const Backend& backend_for(const std::string& device, bool* fell_back) {
  if (fell_back) *fell_back = false;
  if (device == "gpu") {
    if (const Backend* b = cuda_backend(); b && b->available()) return *b;
    if (fell_back) *fell_back = true;
  }
  return cpu();
}

std::vector<std::string> compiled_backends() {
  if (cuda_backend()) return {"cpu", "cuda"};
  return {"cpu"};
}

}  // namespace jobflow

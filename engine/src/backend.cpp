// The backend registry: the only place that knows which backends exist.
#include "jobflow/backend.h"

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

}  // namespace

#ifdef JOBFLOW_HAVE_CUDA
const Backend* cuda_backend();  // cuda/backend.cu; null when no device is present
#endif

const Backend& backend_for(const std::string& device, bool* fell_back) {
  if (fell_back) *fell_back = false;
  if (device == "gpu") {
#ifdef JOBFLOW_HAVE_CUDA
    if (const Backend* b = cuda_backend(); b && b->available()) return *b;
#endif
    if (fell_back) *fell_back = true;
  }
  return cpu();
}

std::vector<std::string> compiled_backends() {
#ifdef JOBFLOW_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

}  // namespace jobflow

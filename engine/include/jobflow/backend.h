// jobflow/backend.h — devices, and the small interface every backend
// implements.
//
// A backend runs primitives for one device tag ("cpu", "gpu"). The registry
// (backend.cpp, a table from tag to loader) is the only code that knows
// which backends exist; the compiler asks it for the backend of each node's
// placement. The CUDA backend is a library the registry loads at run time
// (cuda/README.md); without it, or without a device, "gpu"-placed ops run on
// the CPU after a one-line warning.
#pragma once

#include <string>
#include <vector>

#include "jobflow/primitive.h"

namespace jobflow {

// A device as users name it (placements, FunctionConfig::default_placement,
// onnx::LoadOptions::device, the jobfunction element's `device`): "cpu";
// "gpu" or "cuda" (the same), optionally with a device index, "cuda:0".
// Only device 0 exists for now: the CUDA backend runs every op on device 0,
// so another index is refused rather than ignored.
struct Device {
  std::string tag = "cpu";  // the registry's tag: "cpu" or "gpu"
  int index = 0;
};
// Parses `text`; false with *why saying what is wrong ("device \"tpu\" is not
// cpu, gpu, cuda, gpu:<n> or cuda:<n>").
bool parse_device(const std::string& text, Device* out, std::string* why);
// The same; throws Error("[where] <why>").
Device parse_device(const std::string& text, const std::string& where);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu", "cuda"
  // A device of this kind exists on this machine (checked once).
  virtual bool available() const = 0;
  // Optional: false makes the compiler fall back to the CPU for this op.
  virtual bool supports(const Primitive&) const { return true; }
  virtual void eval(const Primitive& p, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                    ExecContext& ctx) const = 0;
};

// The backend for a device tag ("cpu", "gpu"; Device::tag); falls back to the
// CPU backend (and sets *fell_back) when none is built or no device is present.
const Backend& backend_for(const std::string& tag, bool* fell_back = nullptr);
// Names of the backends this process has: {"cpu"}, or {"cpu", "cuda"} when
// the CUDA backend's library loads: it is found and the CUDA driver is
// installed (whether or not a device is present).
std::vector<std::string> compiled_backends();

// The instruction set oneDNN uses on this CPU, in words, with its bfloat16
// support: "AVX-512 with bfloat16 dot products, no AMX (avx512_core_bf16)".
// Where the bfloat16 dot products run below 0.75x the float32 FMA rate it
// gives that rate and says that bf16 jobs run in float32 there unless
// JOBFLOW_BF16=always. Benchmarks
// print it; bf16 jobs (enable_auto_mixed_precision) need AMX, or
// AVX512_BF16 at least that fast, and run in float32 elsewhere
// (docs/user-guide/job-functions.md, "bf16: which CPUs").
std::string cpu_isa();
// Why a job that asks for bf16 (enable_auto_mixed_precision, a job file's
// jobflow.precision, `jobflow run --precision bf16`) computes in float32 on
// this CPU, in words: "this CPU has neither AMX nor AVX512_BF16 (avx2)", or
// the measured rates of its bfloat16 dot products against its float32 FMAs;
// empty where such a job computes in bfloat16 (the rule above, and
// JOBFLOW_BF16). The engine prints the same reason once per job when it
// compiles one; the jobfunction element posts it as a warning message.
// Throws jobflow::Error when JOBFLOW_BF16 is neither auto nor always.
std::string bf16_fallback();

}  // namespace jobflow

// jobflow/backend.h — the small interface every backend implements.
//
// A backend runs primitives for one device kind ("cpu", "gpu"). The
// registry (backend.cpp) is the only code that knows which backends exist;
// the compiler asks it for the backend of each node's placement. The CUDA
// backend is a library the registry loads at run time (cuda/README.md);
// without it, or without a device, "gpu"-placed ops run on the CPU after a
// one-line warning.
#pragma once

#include <string>
#include <vector>

#include "jobflow/primitive.h"

namespace jobflow {

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

// The backend for a placement's device tag; falls back to the CPU backend
// (and sets *fell_back) when none is built or no device is present.
const Backend& backend_for(const std::string& device, bool* fell_back = nullptr);
// Names of the backends this process has: {"cpu"}, or {"cpu", "cuda"} when
// the CUDA backend's library loads (whether or not a device is present).
std::vector<std::string> compiled_backends();

}  // namespace jobflow

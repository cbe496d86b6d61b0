// cpu/isa.cpp — oneDNN's effective ISA (see isa.h).
#include "cpu/isa.h"

#include <oneapi/dnnl/dnnl.h>

#include <iostream>
#include <mutex>
#include <set>
#include <string>

#include "jobflow/backend.h"

namespace jobflow {
namespace cpu {

namespace {
dnnl_cpu_isa_t effective() {
  static const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa;
}
// ISA values are bit masks: each level contains the bits of those below it.
bool has(dnnl_cpu_isa_t want) { return (effective() & want) == want; }
}  // namespace

Bf16Support bf16_support() {
  if (has(dnnl_cpu_isa_avx512_core_amx)) return Bf16Support::Amx;
  if (has(dnnl_cpu_isa_avx512_core_bf16)) return Bf16Support::Avx512Bf16;
  return Bf16Support::None;
}

bool bf16_usable(const std::string& job) {
  if (bf16_support() != Bf16Support::None) return true;
  static std::mutex mu;
  static std::set<std::string> told;
  std::lock_guard<std::mutex> lk(mu);
  if (told.insert(job).second)
    std::cerr << "jobflow: job '" << job << "' asks for bf16 but this CPU has neither AMX nor AVX512_BF16 ("
              << isa_name() << "); running it in float32\n";
  return false;
}

bool avx2_at_most() { return !has(dnnl_cpu_isa_avx512_core); }

const char* isa_name() {
  if (has(dnnl_cpu_isa_avx512_core_amx)) return "avx512_core_amx";
  if (has(dnnl_cpu_isa_avx512_core_bf16)) return "avx512_core_bf16";
  if (has(dnnl_cpu_isa_avx512_core_vnni)) return "avx512_core_vnni";
  if (has(dnnl_cpu_isa_avx512_core)) return "avx512_core";
  if (has(dnnl_cpu_isa_avx2_vnni)) return "avx2_vnni";
  if (has(dnnl_cpu_isa_avx2)) return "avx2";
  if (has(dnnl_cpu_isa_avx)) return "avx";
  if (has(dnnl_cpu_isa_sse41)) return "sse41";
  return "generic";
}

const char* isa_description() {
  static const std::string d = [] {
    std::string n = isa_name();
    switch (bf16_support()) {
      case Bf16Support::Amx: return "AVX-512 and AMX with bfloat16 tiles (" + n + ")";
      case Bf16Support::Avx512Bf16: return "AVX-512 with bfloat16 dot products, no AMX (" + n + ")";
      case Bf16Support::None: break;
    }
    return "no bfloat16 instructions (" + n + ")";
  }();
  return d.c_str();
}

}  // namespace cpu

std::string cpu_isa() { return cpu::isa_description(); }

}  // namespace jobflow

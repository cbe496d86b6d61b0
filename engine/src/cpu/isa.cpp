// cpu/isa.cpp — oneDNN's effective ISA (see isa.h).
#include "cpu/isa.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <set>
#include <string>

#include "jobflow/backend.h"
#include "jobflow/tensor.h"

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

namespace {

// Seconds for `iters` rounds of 12 independent vfmadd231ps (Dot: vdpbf16ps)
// on 512-bit registers: the accumulators never feed each other, so the
// loop runs at the instruction's throughput, not its latency. Every
// register starts at zero (a denormal left by earlier code could send the
// FMAs down a slow path), and vzeroupper at the end leaves no dirty upper
// halves to slow the SSE code after it.
template <bool Dot>
__attribute__((target("avx512f,avx512bf16"))) double chains_seconds(long iters) {
  const auto t0 = std::chrono::steady_clock::now();
#define JF_CHAINS(op)                                                                                                 \
  asm volatile(                                                                                                       \
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"                                                                            \
      "vmovaps %%zmm0, %%zmm1\n\t"                                                                                    \
      "vmovaps %%zmm0, %%zmm2\n\tvmovaps %%zmm0, %%zmm3\n\tvmovaps %%zmm0, %%zmm4\n\tvmovaps %%zmm0, %%zmm5\n\t"     \
      "vmovaps %%zmm0, %%zmm6\n\tvmovaps %%zmm0, %%zmm7\n\tvmovaps %%zmm0, %%zmm8\n\tvmovaps %%zmm0, %%zmm9\n\t"     \
      "vmovaps %%zmm0, %%zmm10\n\tvmovaps %%zmm0, %%zmm11\n\tvmovaps %%zmm0, %%zmm12\n\tvmovaps %%zmm0, %%zmm13\n\t" \
      "1:\n\t" op " %%zmm0, %%zmm1, %%zmm2\n\t" op " %%zmm0, %%zmm1, %%zmm3\n\t" op " %%zmm0, %%zmm1, %%zmm4\n\t" op \
      " %%zmm0, %%zmm1, %%zmm5\n\t" op " %%zmm0, %%zmm1, %%zmm6\n\t" op " %%zmm0, %%zmm1, %%zmm7\n\t" op              \
      " %%zmm0, %%zmm1, %%zmm8\n\t" op " %%zmm0, %%zmm1, %%zmm9\n\t" op " %%zmm0, %%zmm1, %%zmm10\n\t" op            \
      " %%zmm0, %%zmm1, %%zmm11\n\t" op " %%zmm0, %%zmm1, %%zmm12\n\t" op " %%zmm0, %%zmm1, %%zmm13\n\t"             \
      "dec %0\n\t"                                                                                                    \
      "jnz 1b\n\t"                                                                                                   \
      "vzeroupper"                                                                                                    \
      : "+r"(iters)                                                                                                   \
      :                                                                                                               \
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",    \
        "xmm13", "xmm14", "xmm15", "cc")
  if constexpr (Dot)
    JF_CHAINS("vdpbf16ps");
  else
    JF_CHAINS("vfmadd231ps");
#undef JF_CHAINS
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Bf16Rates measure_rates() {
  Bf16Rates r;
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512f")) return r;
  // 20,000 rounds: 0.05-0.2 ms each; five alternating rounds, the best of
  // each, so that a frequency step or a preempted slice does not decide.
  constexpr long kIters = 20000;
  constexpr double kFlops = 12.0 * kIters;
  for (int round = 0; round < 5; ++round) {
    r.fma_gflops = std::max(r.fma_gflops, kFlops * 32 / chains_seconds<false>(kIters) * 1e-9);
    r.dot_gflops = std::max(r.dot_gflops, kFlops * 64 / chains_seconds<true>(kIters) * 1e-9);
  }
  return r;
}

}  // namespace

Bf16Rates bf16_rates() {
  static const Bf16Rates r = measure_rates();
  return r;
}

bool bf16_pays_at(Bf16Support s, double rate_ratio, const char* env) {
  const std::string mode = env ? env : "";
  if (mode != "" && mode != "auto" && mode != "always")
    throw Error("JOBFLOW_BF16='" + mode + "': expected auto (bf16 where it is faster) or always");
  if (s == Bf16Support::None) return false;
  if (s == Bf16Support::Amx || mode == "always") return true;
  return rate_ratio >= kBf16MinRate;
}

bool bf16_pays() {
  const Bf16Support s = bf16_support();
  // (Measured only where the answer depends on it.)
  return bf16_pays_at(s, s == Bf16Support::Avx512Bf16 ? bf16_rates().ratio() : 0.0, std::getenv("JOBFLOW_BF16"));
}

std::string bf16_fallback_reason() {
  if (bf16_pays()) return "";
  if (bf16_support() == Bf16Support::None)
    return std::string("this CPU has neither AMX nor AVX512_BF16 (") + isa_name() + ")";
  const Bf16Rates r = bf16_rates();
  char rates[160];
  std::snprintf(rates, sizeof rates, "%.2fx its float32 FMA rate (%.0f against %.0f GFLOP/s on one core)", r.ratio(),
                r.dot_gflops, r.fma_gflops);
  return std::string("this CPU's bfloat16 dot products (AVX512_BF16, no AMX) run at ") + rates +
         ": slower than float32 (JOBFLOW_BF16=always keeps bf16)";
}

bool bf16_usable(const std::string& job) {
  std::string why;
  try {
    why = bf16_fallback_reason();
  } catch (const Error& e) {
    throw Error("[compile] job '" + job + "': " + e.what());
  }
  if (why.empty()) return true;
  static std::mutex mu;
  static std::set<std::string> told;
  std::lock_guard<std::mutex> lk(mu);
  if (told.insert(job).second)
    std::cerr << "jobflow: job '" << job << "' asks for bf16 but " << why << "; running it in float32\n";
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
      case Bf16Support::Avx512Bf16: {
        // (The rule without JOBFLOW_BF16: the text says what it changes.)
        const double ratio = bf16_rates().ratio();
        if (bf16_pays_at(Bf16Support::Avx512Bf16, ratio, nullptr))
          return "AVX-512 with bfloat16 dot products, no AMX (" + n + ")";
        char at[64];
        std::snprintf(at, sizeof at, "%.2fx", ratio);
        return "AVX-512 with bfloat16 dot products at " + std::string(at) +
               " the float32 FMA rate, no AMX: bf16 jobs run in float32 unless JOBFLOW_BF16=always (" + n + ")";
      }
      case Bf16Support::None: break;
    }
    return "no bfloat16 instructions (" + n + ")";
  }();
  return d.c_str();
}

}  // namespace cpu

std::string cpu_isa() { return cpu::isa_description(); }

std::string bf16_fallback() { return cpu::bf16_fallback_reason(); }

}  // namespace jobflow

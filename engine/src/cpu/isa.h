// cpu/isa.h — what oneDNN can use on this CPU (internal; the public form is
// jobflow::cpu_isa() in backend.h).
#pragma once

#include <string>

namespace jobflow::cpu {

// bfloat16 arithmetic oneDNN reaches here: AMX tiles (Intel Sapphire Rapids
// and later), AVX512_BF16 dot products (Intel Cooper Lake, AMD Zen 4 and
// later), or none (bf16 would be emulated: slower than float32).
enum class Bf16Support { None, Avx512Bf16, Amx };
Bf16Support bf16_support();
// One core's arithmetic rates, in GFLOP/s: AVX512_BF16 dot products
// (vdpbf16ps on 512-bit registers, 64 FLOPs each) and float32 FMAs
// (vfmadd231ps, 32 FLOPs), each in 12 independent chains, measured once per
// process (about 1 ms, alternating rounds, best of each). Zero where the
// CPU has no AVX512_BF16. An Intel Xeon whose AMX the hypervisor hides
// (family 6 model 207) issues one dot product every two cycles and two FMAs
// every cycle: half the float32 rate; on the AMD Zen 5 machines bf16 jobs
// ran 1.2-1.9x faster than float32 (docs/performance.md).
struct Bf16Rates {
  double dot_gflops = 0, fma_gflops = 0;
  // dot_gflops / fma_gflops (0 where nothing was measured).
  double ratio() const { return fma_gflops > 0 ? dot_gflops / fma_gflops : 0.0; }
};
Bf16Rates bf16_rates();
// bf16 arithmetic is planned where its dot products reach this fraction of
// the float32 FMA rate (halving the bytes moved is worth some arithmetic;
// at 0.49, the hidden-AMX Xeon, every benchmark model ran at 0.53-0.80x
// its float32 speed in bf16: docs/performance.md).
constexpr double kBf16MinRate = 0.75;
// Whether a job that asks for bf16 gets it, given the CPU's support, the
// measured ratio of the dot-product to the FMA rate (unused with AMX:
// tiles always pay) and JOBFLOW_BF16 (null, "" or "auto": by the rates;
// "always": wherever the instructions exist, as the test suite runs, so
// that the bf16 kernels are checked on every such CPU). Throws
// jobflow::Error on any other value (bf16_usable() adds the job's name).
bool bf16_pays_at(Bf16Support s, double rate_ratio, const char* env);
// bf16_pays_at for this CPU and process (measured once).
bool bf16_pays();
// Why a job that asks for bf16 runs in float32 here, in words ("this CPU
// has neither AMX nor AVX512_BF16 (avx2)"); empty where bf16_pays().
// Throws as bf16_pays_at does. Public as jobflow::bf16_fallback().
std::string bf16_fallback_reason();
// Whether job `job`, which asks for bf16, gets it (bf16_pays()); otherwise
// prints a one-line notice to stderr (once per job name) that says why and
// returns false: the job runs in float32.
bool bf16_usable(const std::string& job);
// Whether oneDNN's kernels here are AVX2 at most (no AVX-512): where Jobflow's
// own AVX2 kernels (cpu/winograd.h) beat them.
bool avx2_at_most();
// oneDNN's effective ISA, as its own short name ("avx512_core_bf16").
const char* isa_name();
// The same in words, with the bf16 support ("AVX-512 with bfloat16 dot
// products, no AMX (avx512_core_bf16)"; where they run below kBf16MinRate of
// the float32 FMA rate, that rate and that bf16 jobs run in float32 unless
// JOBFLOW_BF16=always).
const char* isa_description();

}  // namespace jobflow::cpu

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
// Whether job `job`, which asks for bf16, gets it: true with AMX or
// AVX512_BF16; otherwise prints a one-line notice to stderr (once per job
// name) and returns false: the job runs in float32.
bool bf16_usable(const std::string& job);
// Whether oneDNN's kernels here are AVX2 at most (no AVX-512): where Jobflow's
// own AVX2 kernels (cpu/winograd.h) beat them.
bool avx2_at_most();
// oneDNN's effective ISA, as its own short name ("avx512_core_bf16").
const char* isa_name();
// The same in words, with the bf16 support ("AVX-512 with bfloat16 dot
// products (avx512_core_bf16)").
const char* isa_description();

}  // namespace jobflow::cpu

// Fuzz target of the ONNX loader (jobflow::onnx::load_bytes), which must
// reject any untrusted file with jobflow::Error and nothing else.
//
//   * libFuzzer (clang++ -fsanitize=fuzzer,address,undefined): tests/fuzz/
//     run-libfuzzer builds and runs it; a crash, a sanitizer report, an
//     exception other than jobflow::Error escaping (std::terminate), a
//     malloc over -malloc_limit_mb or a timeout is a finding.
//   * tests/fuzz/driver.cpp: a plain main for builds without libFuzzer (the
//     g++ build's `fuzz_onnx_load` test) that replays a corpus and runs
//     seeded mutations of it through this same entry point.
//
// The load uses small limits (1 MiB file, 16 MiB per tensor, 10000 nodes), so
// nothing a well-behaved loader does for such an input needs much memory.
//
// load_bytes turns any std::exception it catches into a jobflow::Error with
// the original what() text, so a std::bad_alloc or std::length_error (an
// allocation sized from the untrusted input that escaped the limits) would
// come back looking like an ordinary rejection. Such messages are findings
// too: they are rethrown as FuzzFinding, which is not a jobflow::Error. So is
// protobuf's "CHECK failed" (a FatalException from an index past the end of a
// repeated field: an out-of-bounds read where protobuf's checks are off).
//
// With -DJOBFLOW_FUZZ_CUSTOM_MUTATOR (run-libfuzzer's default) this file also
// defines LLVMFuzzerCustomMutator: half of libFuzzer's mutations are
// protobuf-aware ones from wire_mutator.h (field values, deletions,
// duplications, splices, length tampering), which reach far past the parser.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "jobflow/onnx.h"
#include "jobflow/session.h"

namespace jobflow_fuzz {

// What the last call did (read by driver.cpp for its counts).
enum class Outcome { Loaded, Rejected };
Outcome last_outcome = Outcome::Rejected;
std::string last_error;

// An Error whose text shows a C++ library exception that load_bytes wrapped.
struct FuzzFinding : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const jobflow::onnx::LoadOptions& fuzz_options() {
  static const jobflow::onnx::LoadOptions o = [] {
    jobflow::onnx::LoadOptions l;
    l.max_file_bytes = uint64_t(1) << 20;
    l.max_tensor_bytes = uint64_t(16) << 20;
    l.max_nodes = 10000;
    l.max_in_flight = 1;
    return l;
  }();
  return o;
}

// load_impl wraps a non-Error exception as "[onnx.load] <fuzz>: " + what(), so
// the library's text follows the prefix directly. (Only there: names in the
// input, which libFuzzer learns from the comparisons below, can put these
// words anywhere else in an ordinary message.)
bool wraps_library_exception(const std::string& msg) {
  const std::string prefix = "[onnx.load] <fuzz>: ";
  if (msg.rfind(prefix, 0) != 0) return false;
  const std::string rest = msg.substr(prefix.size());
  for (const char* exact : {"std::bad_alloc", "std::bad_array_new_length", "std::bad_cast", "std::bad_function_call",
                            "std::bad_optional_access", "std::bad_variant_access", "bad_function_call"})
    if (rest == exact) return true;
  for (const char* start : {"CHECK failed", "vector::", "basic_string::", "cannot create std::vector",
                            "cannot create std::deque", "map::at", "std::", "bitset::"})
    if (rest.rfind(start, 0) == 0) return true;
  return false;
}

}  // namespace jobflow_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace jobflow_fuzz;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  last_error.clear();
  try {
    auto job = jobflow::onnx::load_bytes(bytes, fuzz_options(), "<fuzz>");
    last_outcome = job ? Outcome::Loaded : Outcome::Rejected;
    if (!job) throw FuzzFinding("load_bytes returned a null job without an error");
  } catch (const jobflow::Error& e) {
    last_outcome = Outcome::Rejected;
    last_error = e.what();
    if (wraps_library_exception(last_error)) {
      jobflow::session::reset();
      throw FuzzFinding("load_bytes rejected the input with a wrapped library exception: " + last_error);
    }
  }
  // Loaded models create session variables by name; start every input from
  // an empty session so a finding does not depend on the inputs before it.
  jobflow::session::reset();
  return 0;
}

#ifdef JOBFLOW_FUZZ_CUSTOM_MUTATOR
#include <random>

#include "wire_mutator.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::mt19937_64 rng(seed);
  if (rng() % 2 == 0) return LLVMFuzzerMutate(data, size, max_size);
  static jobflow_fuzz::wire::Dictionary dict = jobflow_fuzz::wire::default_dictionary();
  std::string in(reinterpret_cast<const char*>(data), size);
  jobflow_fuzz::wire::Msg m;
  std::string out;
  if (jobflow_fuzz::wire::parse(in, m)) {
    jobflow_fuzz::wire::learn(m, dict);
    const int n = 1 + static_cast<int>(rng() % 3);
    std::string what;
    for (int i = 0; i < n; ++i) jobflow_fuzz::wire::mutate_tree(m, nullptr, dict, rng, what);
    out = jobflow_fuzz::wire::serialize(m);
  } else {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  if (out.size() > max_size) out.resize(max_size);
  std::copy(out.begin(), out.end(), data);
  return out.size();
}
#endif

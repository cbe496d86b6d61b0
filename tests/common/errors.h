// tests/common/errors.h — checking error messages.
//
//   std::string e = error_of([&] { job(bad_input); });
//   EXPECT_CONTAINS(e, "[my_job] placeholder 'x'");
//   expect_error([&] { read_idx(path); }, "[read_idx] " + path + ": ", {"truncated"});
#pragma once

#include <gtest/gtest.h>

#include <jobflow/tensor.h>

#include <exception>
#include <string>
#include <vector>

// EXPECT_CONTAINS(text, part): `part` occurs in `text`; a failure shows text.
#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

namespace jobflow::testing {

// The message of the exception f() throws, or "(no error)".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// f() throws a jobflow::Error whose message starts with `prefix` and contains
// every string in `parts`.
template <class F>
void expect_error(F&& f, const std::string& prefix, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL() << "no error; expected one starting with " << prefix;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

}  // namespace jobflow::testing

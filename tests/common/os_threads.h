// tests/common/os_threads.h — the process's threads as the OS lists them,
// for tests of who holds OpenMP threads.
//
//   name_this_thread("team_t1");            // OpenMP threads it starts take the name
//   int n = threads_named("team_t1");       // threads of that name, now
//   n = threads_named_once("team_t1", 1);   // ... once it is 1 (or after 30 s)
//   if (under_thread_sanitizer()) GTEST_SKIP() << ...;
#pragma once

#include <pthread.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

namespace jobflow::testing {

// Linux keeps 15 characters of a name; a new thread takes its creator's.
inline void name_this_thread(const char* name) { pthread_setname_np(pthread_self(), name); }

// Threads of this process named `name`. Tests name the threads they start
// and count those alone: other tests' threads may still be leaving /proc.
inline int threads_named(const std::string& name) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(e.path() / "comm");
    std::string comm;
    if (std::getline(f, comm) && comm == name) ++n;
  }
  return n;
}

// The count once it is `want`, running `step` between looks: a freed
// OpenMP thread leaves /proc a moment after it is joined, and a job's
// worker frees its team on its own thread. The deadline only stops a
// hang; the count is returned either way for the assertion.
inline int threads_named_once(const std::string& name, int want, const std::function<void()>& step = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int n = threads_named(name);
  while (n != want && std::chrono::steady_clock::now() < deadline) {
    if (step) step();
    std::this_thread::yield();
    n = threads_named(name);
  }
  return n;
}

// A ThreadSanitizer build (tests/meson.build sets JOBFLOW_SANITIZER):
// Debian's libgomp is not instrumented, so TSan sees the threads of a
// parallel OpenMP region share data with nothing between. Tests that need
// more than one OpenMP thread skip there (the tsan configuration runs every
// job on one thread for that reason).
inline bool under_thread_sanitizer() {
  const char* san = std::getenv("JOBFLOW_SANITIZER");
  return san && std::string(san).find("thread") != std::string::npos;
}

}  // namespace jobflow::testing

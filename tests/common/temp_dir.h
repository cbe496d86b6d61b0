// tests/common/temp_dir.h — folders for the files a test writes.
//
//   TempDir d;                              // removed when d goes
//   write(d / "a.bin");
//   fs::path p = test_tmp_path("roundtrip");  // kept after the test
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace jobflow::testing {

// A fresh, empty folder per object, removed with it:
// <system temp folder>/<prefix>_<pid>_<n>.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "jobflow_test") {
    path_ = (std::filesystem::temp_directory_path() /
             (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++)))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

// A path for one test's files that stays after the test, to look at when it
// fails: in $JOBFLOW_TEST_TMP (meson sets it to a tmp/ folder in the build)
// or else <system temp folder>/jobflow_test, named <name>-<pid>. Whatever was
// there is removed and the parent folder made; the path itself is not made.
inline std::filesystem::path test_tmp_path(const std::string& name) {
  const char* env = std::getenv("JOBFLOW_TEST_TMP");
  const std::filesystem::path base =
      env && *env ? std::filesystem::path(env) : std::filesystem::temp_directory_path() / "jobflow_test";
  const std::filesystem::path p = base / (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(base);
  return p;
}

// The same, made as an empty folder.
inline std::filesystem::path test_tmp_dir(const std::string& name) {
  std::filesystem::path p = test_tmp_path(name);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace jobflow::testing

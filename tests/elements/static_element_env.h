// Test environment for element tests that compile their element in and
// register it statically: an isolated GStreamer (no registry file, no
// plugin paths) in which criticals and warnings fail the test.
//   JOBFLOW_STATIC_ELEMENT_TEST_ENV(jobflow_register_jobconvert);
// and the helpers the element tests share:
//   JOBFLOW_ELEMENT_TEST_TMP_ROOT("jobfunction");  // defines tmp_root()
//   std::vector<float> v = buffer_tensor<float>(buffer, 0);
#pragma once

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace jobflow::test {

class StaticElementEnv : public ::testing::Environment {
 public:
  explicit StaticElementEnv(GstPluginInitFunc reg) : reg_(reg) {}
  void SetUp() override {
    g_setenv("GST_REGISTRY_DISABLE", "yes", TRUE);
    g_setenv("GST_PLUGIN_SYSTEM_PATH_1_0", "", TRUE);
    g_setenv("GST_PLUGIN_PATH_1_0", "", TRUE);
    gst_init(nullptr, nullptr);
    g_log_set_always_fatal(static_cast<GLogLevelFlags>(G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING));
    ASSERT_TRUE(gst_plugin_register_static(GST_VERSION_MAJOR, GST_VERSION_MINOR, "jobflowtest", "test registration", reg_,
                                           "0.1", "LGPL", "jobflow", "jobflow", "jobflow"));
  }

 private:
  GstPluginInitFunc reg_;
};

// A field of the caps on the harness's sink pad as text ("" when absent).
inline std::string caps_field(GstHarness* h, const char* name) {
  GstCaps* caps = gst_pad_get_current_caps(h->sinkpad);
  if (!caps) return "";
  const GstStructure* s = gst_caps_get_structure(caps, 0);
  std::string v;
  if (const gchar* str = gst_structure_get_string(s, name)) {
    v = str;
  } else if (gst_structure_has_field(s, name)) {
    gchar* t = gst_value_serialize(gst_structure_get_value(s, name));
    v = t;
    g_free(t);
  }
  gst_caps_unref(caps);
  return v;
}

// The values of tensor `index` of `b` (one GstMemory per tensor).
template <class T>
std::vector<T> buffer_tensor(GstBuffer* b, guint index) {
  GstMemory* m = gst_buffer_peek_memory(b, index);
  GstMapInfo map;
  gst_memory_map(m, &map, GST_MAP_READ);
  std::vector<T> v(map.size / sizeof(T));
  std::memcpy(v.data(), map.data, map.size);
  gst_memory_unmap(m, &map);
  return v;
}

// A test program's folder for the files it writes:
// $JOBFLOW_TEST_TMP (meson sets it), else the system's temporary folder,
// /<name>-<pid>; made empty at its first use, removed when the tests end.
class TmpRoot : public ::testing::Environment {
 public:
  explicit TmpRoot(std::string name) : name_(std::move(name)) {}
  const std::filesystem::path& path() {
    std::call_once(made_, [this] {
      const char* env = g_getenv("JOBFLOW_TEST_TMP");
      path_ = std::filesystem::path(env && *env ? env : std::filesystem::temp_directory_path().string()) /
              (name_ + "-" + std::to_string(::getpid()));
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
    });
    return path_;
  }
  void TearDown() override {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }

 private:
  std::string name_;
  std::once_flag made_;
  std::filesystem::path path_;
};

}  // namespace jobflow::test

// Defines `std::filesystem::path tmp_root()`, the test program's TmpRoot.
#define JOBFLOW_ELEMENT_TEST_TMP_ROOT(name)                                                          \
  ::jobflow::test::TmpRoot* const jobflow_tmp_root_ = static_cast<::jobflow::test::TmpRoot*>(     \
      ::testing::AddGlobalTestEnvironment(new ::jobflow::test::TmpRoot(name)));                 \
  std::filesystem::path tmp_root() { return jobflow_tmp_root_->path(); }

#define JOBFLOW_STATIC_ELEMENT_TEST_ENV(register_fn)                  \
  static const auto* const jobflow_static_element_env_ =             \
      ::testing::AddGlobalTestEnvironment(new ::jobflow::test::StaticElementEnv(register_fn))

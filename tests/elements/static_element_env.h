// Test environment for element tests that compile their element in and
// register it statically: an isolated GStreamer (no registry file, no
// plugin paths) in which criticals and warnings fail the test.
//   JOBFLOW_STATIC_ELEMENT_TEST_ENV(jobflow_register_jobconvert);
#pragma once

#include <gst/gst.h>
#include <gtest/gtest.h>

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

}  // namespace jobflow::test

#define JOBFLOW_STATIC_ELEMENT_TEST_ENV(register_fn)                  \
  static const auto* const jobflow_static_element_env_ =             \
      ::testing::AddGlobalTestEnvironment(new ::jobflow::test::StaticElementEnv(register_fn))

// Test environment for element tests that compile their element in and
// register it statically: an isolated GStreamer (no registry file, no
// plugin paths) in which criticals and warnings fail the test.
//   JOBFLOW_STATIC_ELEMENT_TEST_ENV(jobflow_register_jobconvert);
#pragma once

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <string>

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

}  // namespace jobflow::test

#define JOBFLOW_STATIC_ELEMENT_TEST_ENV(register_fn)                  \
  static const auto* const jobflow_static_element_env_ =             \
      ::testing::AddGlobalTestEnvironment(new ::jobflow::test::StaticElementEnv(register_fn))

// jobfunction element tests (GstHarness and a small appsrc ! jobfunction !
// jobsink pipeline, isolated registry). The jobs are tiny ones defined here
// and saved as job files into a temporary folder, so each test runs in
// milliseconds and the expected values can be worked out by hand.
#include <gtest/gtest.h>

#include <gst/app/gstappsrc.h>
#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <unistd.h>

#include <jobflow/backend.h>
#include <jobflow/checkpoint_io.h>
#include <jobflow/jobflow.h>
#include <jobflow/onnx.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "gstjobbatch.h"
#include "gstjobunbatch.h"
#include "gstjobfunction.h"
#include "gstjobsink.h"
#include "jobflow_meta.h"
#include "jobsink.h"
#include "static_element_env.h"
#include "tensor_caps.h"
#include "os_threads.h"

namespace {

namespace flow = jobflow;
namespace fs = std::filesystem;
using flow::Blob;
using flow::Tensor;
using jobflow::test::caps_field;

gboolean register_elements(GstPlugin* plugin) {
  gboolean ok = jobflow_register_jobfunction(plugin);
  ok &= jobflow_register_jobbatch(plugin);
  ok &= jobflow_register_jobunbatch(plugin);
  ok &= jobflow_register_jobsink(plugin);
  ok &= gst_element_register(plugin, "appsrc", GST_RANK_NONE, GST_TYPE_APP_SRC);
  return ok;
}
JOBFLOW_STATIC_ELEMENT_TEST_ENV(register_elements);

// ------------------------------------------------------------ job files

JOBFLOW_ELEMENT_TEST_TMP_ROOT("jobfunction");

// A fresh (absent) path under the temporary root.
std::string fresh_path(const std::string& name) {
  fs::path p = tmp_root() / name;
  fs::remove_all(p);
  return p.string();
}

/* The job files, written once per process:
 *   affine  (x: (4,) float32) -> x * 2 + 1
 *   fold    (x: (4,) float32) -> reshape(x * 3, (2, 2))
 *   scaled  (x: (4,) float32) -> x * fn_scale, fn_scale a (4,) variable = 1
 *   train   (x: (2, 3), targets: (2, 2)) -> loss (2,): a dense layer fn_lin
 *           (kernel 0.5, bias 0), loss_i = sum_j (y_ij - t_ij)^2, SGD lr 0.1
 *   eval    (scores: (4, 3) float32, labels: (4,) int32) -> (labels, scores),
 *           declared its accuracy (accuracy(0, 1))
 *   argmax  (scores: (4, 3) float32) -> (argmax(scores), scores): an int
 *           (B,) and a float (B, C) return, no accuracy declared
 *   train_y (x, targets) -> (y, loss): train with the loss second, its
 *           dense layer fn_lin2 as train's
 *   apply   (x: (2, 3)) -> (2, 2): train's dense layer fn_lin in a predict
 *           job (its file declares fn_lin frozen: no jobflow.trainable)
 *   dyn     (x: (B, 4) float32, B known per call) -> (x * 2 + 1, the sum of
 *           each row (B,)): a dynamic-batch job (adaptive batching)
 *   dyn_sum (x: (B, 4)) -> the sum over the rows (4,): dim 0 known per call
 *           but the return is not per row (never batched)
 * and two checkpoints of `scaled`: fn_scale = 3 (ck_scale3) and a (5,)
 * fn_scale that does not fit (ck_scale_bad). */
struct Jobs {
  std::string affine, fold, scaled, train, eval, argmax, train_y, apply, dyn, dyn_sum, ck_scale3, ck_scale_bad;
};

const Jobs& jobs() {
  static const Jobs j = [] {
    Jobs r;
    const fs::path dir = tmp_root() / "jobs";
    fs::create_directories(dir);
    auto path = [&](const char* n) { return (dir / n).string(); };
    r.affine = path("affine.onnx");
    r.fold = path("fold.onnx");
    r.scaled = path("scaled.onnx");
    r.train = path("train.onnx");
    r.eval = path("eval.onnx");
    r.argmax = path("argmax.onnx");
    r.train_y = path("train_y.onnx");
    r.apply = path("apply.onnx");
    r.dyn = path("dyn.onnx");
    r.dyn_sum = path("dyn_sum.onnx");
    r.ck_scale3 = path("ck_scale3");
    r.ck_scale_bad = path("ck_scale_bad");
    {
      auto job = flow::global_function(flow::Predict, flow::function_config().name("affine"),
                                       {flow::Numpy::Placeholder({4}, flow::Float, "x")},
                                       [](Blob x) -> flow::Numpy { return x * 2.0 + 1.0; });
      flow::onnx::save(*job.compiled(), r.affine);
    }
    {
      auto job = flow::global_function(flow::Predict, flow::function_config().name("fold"),
                                       {flow::Numpy::Placeholder({4}, flow::Float, "x")},
                                       [](Blob x) -> flow::Numpy { return flow::reshape(x * 3.0, {2, 2}); });
      flow::onnx::save(*job.compiled(), r.fold);
    }
    {
      auto job = flow::global_function(flow::Predict, flow::function_config().name("scaled"),
                                       {flow::Numpy::Placeholder({4}, flow::Float, "x")}, [](Blob x) -> flow::Numpy {
                                         return x * flow::get_variable("fn_scale", {4}, flow::Float,
                                                                       flow::constant_initializer(1.0));
                                       });
      flow::CheckPoint().init();
      flow::onnx::save(*job.compiled(), r.scaled);
    }
    {
      auto job = flow::global_function(
          flow::Train, flow::function_config().name("fn_train"),
          {flow::Numpy::Placeholder({2, 3}, flow::Float, "x"), flow::Numpy::Placeholder({2, 2}, flow::Float, "targets")},
          [](Blob x, Blob t) -> flow::Numpy {
            auto y = flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5),
                                               .bias_initializer = flow::zeros_initializer(),
                                               .name = "fn_lin",
                                               .trainable = true});
            auto loss = flow::reduce_sum(flow::square(y - t), {1});
            flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), 0.0).minimize(loss);
            return loss;
          });
      flow::CheckPoint().init();
      flow::onnx::save(*job.compiled(), r.train);
    }
    {
      auto job = flow::global_function(
          flow::Predict, flow::function_config().name("fn_eval").accuracy(0, 1),
          {flow::Numpy::Placeholder({4, 3}, flow::Float, "scores"), flow::Numpy::Placeholder({4}, flow::Int32, "labels")},
          [](Blob scores, Blob labels) -> std::tuple<flow::Numpy, flow::Numpy> {
            return {flow::identity(labels), scores * 1.0};
          });
      flow::onnx::save(*job.compiled(), r.eval);
    }
    {
      auto job = flow::global_function(
          flow::Predict, flow::function_config().name("fn_argmax"), {flow::Numpy::Placeholder({4, 3}, flow::Float, "scores")},
          [](Blob scores) -> std::tuple<flow::Numpy, flow::Numpy> { return {flow::argmax(scores, 1), scores * 1.0}; });
      flow::onnx::save(*job.compiled(), r.argmax);
    }
    {
      auto job = flow::global_function(
          flow::Train, flow::function_config().name("fn_train_y"),
          {flow::Numpy::Placeholder({2, 3}, flow::Float, "x"), flow::Numpy::Placeholder({2, 2}, flow::Float, "targets")},
          [](Blob x, Blob t) -> std::tuple<flow::Numpy, flow::Numpy> {
            auto y = flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5),
                                               .bias_initializer = flow::zeros_initializer(),
                                               .name = "fn_lin2",
                                               .trainable = true});
            auto loss = flow::reduce_sum(flow::square(y - t), {1});
            flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), 0.0).minimize(loss);
            return {y, loss};
          });
      flow::CheckPoint().init();
      flow::onnx::save(*job.compiled(), r.train_y);
    }
    {
      auto job = flow::global_function(flow::Predict, flow::function_config().name("fn_apply"),
                                       {flow::Numpy::Placeholder({2, 3}, flow::Float, "x")}, [](Blob x) -> flow::Numpy {
                                         return flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5),
                                                                           .bias_initializer = flow::zeros_initializer(),
                                                                           .name = "fn_lin",
                                                                           .trainable = false});
                                       });
      flow::CheckPoint().init();
      flow::onnx::save(*job.compiled(), r.apply);
    }
    {
      auto job = flow::global_function(flow::Predict, flow::function_config().name("fn_dyn"),
                                       {flow::Numpy::Placeholder({-1, 4}, flow::Float, "x")},
                                       [](Blob x) -> std::tuple<flow::Numpy, flow::Numpy> {
                                         return {x * 2.0 + 1.0, flow::reduce_sum(x, {1})};
                                       });
      flow::onnx::save(*job.compiled(), r.dyn);
    }
    {
      auto job = flow::global_function(flow::Predict, flow::function_config().name("fn_dyn_sum"),
                                       {flow::Numpy::Placeholder({-1, 4}, flow::Float, "x")},
                                       [](Blob x) -> flow::Numpy { return flow::reduce_sum(x, {0}); });
      flow::onnx::save(*job.compiled(), r.dyn_sum);
    }
    flow::checkpoint_io::save(r.ck_scale3, {{"fn_scale", Tensor::from<float>({4}, {3, 3, 3, 3})}});
    flow::checkpoint_io::save(r.ck_scale_bad, {{"fn_scale", Tensor::from<float>({5}, {3, 3, 3, 3, 3})}});
    flow::session::reset();
    return r;
  }();
  return j;
}

// -------------------------------------------------------------- helpers

constexpr const char* kAffineCaps =
    "other/tensors,format=static,num_tensors=1,dimensions=(string)4,types=(string)float32,framerate=30/1";
constexpr const char* kTrainCaps =
    "other/tensors,format=static,num_tensors=2,dimensions=(string)\"3:2,2:2\",types=(string)\"float32,float32\"";
constexpr const char* kApplyCaps =
    "other/tensors,format=static,num_tensors=1,dimensions=(string)3:2,types=(string)float32";
constexpr const char* kEvalCaps =
    "other/tensors,format=static,num_tensors=2,dimensions=(string)\"3:4,4\",types=(string)\"float32,int32\"";

GstBuffer* buffer_of(const std::vector<Tensor>& tensors, GstClockTime pts = GST_CLOCK_TIME_NONE) {
  GstBuffer* b = jobflow::gst::buffer_from_tensors(tensors);
  GST_BUFFER_PTS(b) = pts;
  return b;
}

// The affine job's input number i: four distinct values.
std::vector<float> affine_in(int i) { return {float(i), i + 0.5f, -float(i), 1000.f + i}; }
std::vector<float> affine_out(int i) {
  std::vector<float> v = affine_in(i);
  for (float& x : v) x = x * 2 + 1;
  return v;
}
GstBuffer* affine_buffer(int i) {
  GstBuffer* b = buffer_of({Tensor::from<float>({4}, affine_in(i))});
  GST_BUFFER_PTS(b) = 1000 * GST_SECOND + i * GST_MSECOND;
  GST_BUFFER_DTS(b) = 999 * GST_SECOND + i * GST_MSECOND;
  GST_BUFFER_DURATION(b) = GST_MSECOND;
  GST_BUFFER_OFFSET(b) = 10 + i;
  GST_BUFFER_OFFSET_END(b) = 11 + i;
  return b;
}

template <class T>
std::vector<T> tensor(GstBuffer* b, guint index) {
  GstMemory* m = gst_buffer_peek_memory(b, index);
  GstMapInfo map;
  if (!gst_memory_map(m, &map, GST_MAP_READ)) return {};
  std::vector<T> v(map.size / sizeof(T));
  memcpy(v.data(), map.data, map.size);
  gst_memory_unmap(m, &map);
  return v;
}

std::vector<float> vec(const Tensor& t) { return t.to_vector<float>(); }

/* Collects what the element posts. The bus is set on the element before it
 * starts; messages are popped without a main loop. */
class Bus {
 public:
  Bus() : bus_(gst_bus_new()) {}
  ~Bus() {
    for (GstMessage* m : messages_) gst_message_unref(m);
    gst_bus_set_flushing(bus_, TRUE);
    gst_object_unref(bus_);
  }
  Bus(const Bus&) = delete;
  Bus& operator=(const Bus&) = delete;
  GstBus* get() { return bus_; }
  void attach(GstElement* e) { gst_element_set_bus(e, bus_); }
  // Every message posted so far (kept; later calls add the new ones).
  const std::vector<GstMessage*>& messages() {
    while (GstMessage* m = gst_bus_pop(bus_)) messages_.push_back(m);
    return messages_;
  }
  // Element messages named `name`, in posting order.
  std::vector<const GstStructure*> element(const char* name) {
    std::vector<const GstStructure*> r;
    for (GstMessage* m : messages())
      if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ELEMENT && gst_structure_has_name(gst_message_get_structure(m), name))
        r.push_back(gst_message_get_structure(m));
    return r;
  }
  struct Error {
    GQuark domain;
    int code;
    std::string text;  // message + debug
  };
  std::vector<Error> errors() { return parsed(GST_MESSAGE_ERROR, gst_message_parse_error); }
  std::vector<Error> warnings() { return parsed(GST_MESSAGE_WARNING, gst_message_parse_warning); }

 private:
  // The messages of `type`, each parsed by `parse` (gst_message_parse_error
  // or _warning).
  std::vector<Error> parsed(GstMessageType type, void (*parse)(GstMessage*, GError**, gchar**)) {
    std::vector<Error> r;
    for (GstMessage* m : messages()) {
      if (GST_MESSAGE_TYPE(m) != type) continue;
      GError* err = nullptr;
      gchar* dbg = nullptr;
      parse(m, &err, &dbg);
      r.push_back({err->domain, err->code, std::string(err->message) + " | " + (dbg ? dbg : "")});
      g_error_free(err);
      g_free(dbg);
    }
    return r;
  }

  GstBus* bus_;
  std::vector<GstMessage*> messages_;
};

// The errors posted so far, for failure messages ("" when none).
std::string errors_text(Bus& bus) {
  std::string t;
  for (const Bus::Error& e : bus.errors()) t += e.text + "\n";
  return t;
}

guint64 u64(const GstStructure* s, const char* f) {
  guint64 v = G_MAXUINT64;
  EXPECT_TRUE(gst_structure_get_uint64(s, f, &v)) << f << " in " << gst_structure_get_name(s);
  return v;
}
double dbl(const GstStructure* s, const char* f) {
  double v = NAN;
  EXPECT_TRUE(gst_structure_get_double(s, f, &v)) << f << " in " << gst_structure_get_name(s);
  return v;
}

// A jobfunction with properties set from strings (gst_util_set_object_arg).
GstElement* make_function(std::initializer_list<std::pair<const char*, std::string>> props) {
  GstElement* e = gst_element_factory_make("jobfunction", nullptr);
  EXPECT_NE(e, nullptr);
  for (const auto& [k, v] : props) gst_util_set_object_arg(G_OBJECT(e), k, v.c_str());
  return e;
}

/* A harness around `e` (the harness starts it: its job must load), with the
 * bus attached first and `caps` pushed (stream-start, caps, segment). */
GstHarness* harness(GstElement* e, Bus& bus, const char* caps) {
  bus.attach(e);
  GstHarness* h = gst_harness_new_with_element(e, "sink", "src");
  gst_object_unref(e);  // the harness holds it
  if (caps) gst_harness_set_src_caps_str(h, caps);
  return h;
}

void push_segment(GstHarness* h) {
  GstSegment seg;
  gst_segment_init(&seg, GST_FORMAT_TIME);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_segment(&seg)));
}

// Pulls events until EOS; false when none comes.
bool pull_until_eos(GstHarness* h) {
  while (GstEvent* e = gst_harness_pull_event(h)) {
    const bool eos = GST_EVENT_TYPE(e) == GST_EVENT_EOS;
    gst_event_unref(e);
    if (eos) return true;
  }
  return false;
}

/* Starting the element (NULL -> READY) fails with an element error; returns
 * the error's text and checks its domain and code. */
std::string start_error(GstElement* e, GQuark domain, int code) {
  Bus bus;
  bus.attach(e);
  EXPECT_EQ(gst_element_set_state(e, GST_STATE_READY), GST_STATE_CHANGE_FAILURE);
  gchar* sig = reinterpret_cast<gchar*>(1);
  g_object_get(e, "signature", &sig, nullptr);
  EXPECT_EQ(sig, nullptr) << "a job stayed loaded after the failure";
  g_free(sig);
  EXPECT_EQ(gst_element_set_state(e, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  std::vector<Bus::Error> errs = bus.errors();
  gst_object_unref(e);
  if (errs.empty()) {
    ADD_FAILURE() << "no error posted";
    return "";
  }
  EXPECT_EQ(errs[0].domain, domain) << errs[0].text;
  EXPECT_EQ(errs[0].code, code) << errs[0].text;
  return errs[0].text;
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

class JobFunction : public ::testing::Test {
 protected:
  void SetUp() override {
    jobs();
    flow::session::reset();  // each test starts with no variables
  }
};

}  // namespace

// ------------------------------------------------------------ caps

TEST_F(JobFunction, SinkCapsQueryAnswersThePlaceholders) {
  GstElement* e = make_function({{"job", jobs().eval}});
  GstPad* sink = gst_element_get_static_pad(e, "sink");
  GstPad* src = gst_element_get_static_pad(e, "src");
  // Before READY: the template (no job, no dimensions).
  GstCaps* c = gst_pad_query_caps(sink, nullptr);
  EXPECT_FALSE(gst_structure_has_field(gst_caps_get_structure(c, 0), "dimensions"));
  gst_caps_unref(c);

  ASSERT_EQ(gst_element_set_state(e, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  c = gst_pad_query_caps(sink, nullptr);
  // Static caps of the placeholders, or NNStreamer's flexible tensors.
  GstCaps* want = gst_caps_from_string(
      "other/tensors,format=static,num_tensors=2,dimensions=(string)\"3:4,4\",types=(string)\"float32,int32\"; "
      "other/tensors,format=flexible");
  EXPECT_TRUE(gst_caps_is_equal(c, want)) << gst_caps_to_string(c);
  gst_caps_unref(want);
  gst_caps_unref(c);
  // The src pad answers the returns (labels (4,) int32, scores (4, 3)).
  c = gst_pad_query_caps(src, nullptr);
  want = gst_caps_from_string(
      "other/tensors,format=static,num_tensors=2,dimensions=(string)\"4,3:4\",types=(string)\"int32,float32\"; "
      "other/tensors,format=flexible");
  EXPECT_TRUE(gst_caps_is_equal(c, want)) << gst_caps_to_string(c);
  gst_caps_unref(want);
  gst_caps_unref(c);

  // Accept-caps: static tensor caps yes (the job's, with a framerate, and
  // others, which the caps event then refuses with an error naming the
  // placeholder: see MismatchedCapsAreRefusedNamingThePlaceholder), other
  // media no.
  c = gst_caps_from_string(
      "other/tensors,format=static,num_tensors=2,dimensions=(string)\"3:4,4\",types=(string)\"float32,int32\","
      "framerate=10/1");
  EXPECT_TRUE(gst_pad_query_accept_caps(sink, c));
  gst_caps_unref(c);
  c = gst_caps_from_string("video/x-raw,format=GRAY8,width=4,height=3");
  EXPECT_FALSE(gst_pad_query_accept_caps(sink, c));
  gst_caps_unref(c);

  gst_element_set_state(e, GST_STATE_NULL);
  gst_object_unref(sink);
  gst_object_unref(src);
  gst_object_unref(e);
}

TEST_F(JobFunction, MatchingCapsGiveTheReturnsAsSrcCaps) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().eval}}), bus, nullptr);
  GstCaps* peer = gst_pad_peer_query_caps(h->srcpad, nullptr);
  GstCaps* want = gst_caps_from_string(kEvalCaps);
  EXPECT_TRUE(gst_caps_can_intersect(peer, want)) << gst_caps_to_string(peer);
  gst_caps_unref(peer);
  gst_caps_unref(want);

  gst_harness_set_src_caps_str(h, kEvalCaps);
  const std::vector<float> scores = {0, 1, 0, 5, 2, 1, 0, 0, 9, 1, 2, 3};
  const std::vector<gint32> labels = {1, 0, 2, 0};
  ASSERT_EQ(gst_harness_push(h, buffer_of({Tensor::from<float>({4, 3}, scores), Tensor::from<gint32>({4}, labels)})),
            GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(caps_field(h, "num_tensors"), "2");
  EXPECT_EQ(caps_field(h, "dimensions"), "4,3:4");
  EXPECT_EQ(caps_field(h, "types"), "int32,float32");
  EXPECT_EQ(caps_field(h, "format"), "static");
  ASSERT_EQ(gst_buffer_n_memory(out), 2u);
  EXPECT_EQ(tensor<gint32>(out, 0), labels);
  EXPECT_EQ(tensor<float>(out, 1), scores);
  gst_buffer_unref(out);
  EXPECT_EQ(errors_text(bus), "");
  gst_harness_teardown(h);
}

TEST_F(JobFunction, SrcCapsKeepTheInputFramerate) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().fold}}), bus, kAffineCaps);
  ASSERT_EQ(gst_harness_push(h, affine_buffer(0)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(caps_field(h, "dimensions"), "2:2");
  EXPECT_EQ(caps_field(h, "types"), "float32");
  EXPECT_EQ(caps_field(h, "framerate"), "30/1");
  std::vector<float> want = affine_in(0);
  for (float& v : want) v *= 3;
  EXPECT_EQ(tensor<float>(out, 0), want);
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

TEST_F(JobFunction, RankPaddedCapsAreAccepted) {
  // NNStreamer pads dims to rank 4: "4:1:1:1" is the (4,) the job takes.
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}}), bus,
                          "other/tensors,format=static,num_tensors=1,dimensions=(string)4:1:1:1,types=(string)float32");
  ASSERT_EQ(gst_harness_push(h, affine_buffer(7)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(tensor<float>(out, 0), affine_out(7));
  gst_buffer_unref(out);
  EXPECT_EQ(caps_field(h, "dimensions"), "4");
  EXPECT_EQ(errors_text(bus), "");
  gst_harness_teardown(h);
}

TEST_F(JobFunction, MismatchedCapsAreRefusedNamingThePlaceholder) {
  struct Case {
    const char* caps;
    const char* given;
  };
  const Case cases[] = {
      {"other/tensors,format=static,num_tensors=1,dimensions=(string)5,types=(string)float32", "(5,) float32"},
      {"other/tensors,format=static,num_tensors=1,dimensions=(string)4,types=(string)int32", "(4,) int32"},
      {"other/tensors,format=static,num_tensors=1,dimensions=(string)2:2,types=(string)float32", "(2, 2) float32"},
  };
  for (const Case& c : cases) {
    Bus bus;
    GstHarness* h = harness(make_function({{"job", jobs().affine}}), bus, nullptr);
    ASSERT_TRUE(gst_pad_push_event(h->srcpad, gst_event_new_stream_start("mismatch")));
    GstCaps* caps = gst_caps_from_string(c.caps);
    gst_pad_push_event(h->srcpad, gst_event_new_caps(caps));  // TRUE or not: the sticky event stays stored
    gst_caps_unref(caps);
    EXPECT_FALSE(gst_pad_has_current_caps(h->sinkpad)) << "src caps set for refused caps";
    std::vector<Bus::Error> errs = bus.errors();
    ASSERT_EQ(errs.size(), 1u) << c.caps;
    EXPECT_EQ(errs[0].domain, GST_CORE_ERROR);
    EXPECT_EQ(errs[0].code, GST_CORE_ERROR_NEGOTIATION);
    EXPECT_HAS(errs[0].text, "'affine'");
    EXPECT_HAS(errs[0].text, "placeholder 'x' expects (4,) float32");
    EXPECT_HAS(errs[0].text, std::string("upstream gives ") + c.given);
    gst_harness_teardown(h);
  }
  // Two tensors where the job takes one.
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}}), bus, nullptr);
  ASSERT_TRUE(gst_pad_push_event(h->srcpad, gst_event_new_stream_start("mismatch")));
  GstCaps* caps = gst_caps_from_string(kEvalCaps);
  gst_pad_push_event(h->srcpad, gst_event_new_caps(caps));
  gst_caps_unref(caps);
  // A buffer after refused caps is not negotiated (the caps are sent again
  // with it and refused again).
  GstSegment seg;
  gst_segment_init(&seg, GST_FORMAT_TIME);
  gst_pad_push_event(h->srcpad, gst_event_new_segment(&seg));
  EXPECT_EQ(gst_pad_push(h->srcpad, affine_buffer(0)), GST_FLOW_NOT_NEGOTIATED);
  EXPECT_FALSE(gst_pad_has_current_caps(h->sinkpad));
  std::vector<Bus::Error> errs = bus.errors();
  ASSERT_GE(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, GST_CORE_ERROR_NEGOTIATION);
  EXPECT_HAS(errs[0].text, "job 'affine' takes 1 tensors");
  EXPECT_HAS(errs[0].text, "upstream gives 2");
  gst_harness_teardown(h);
}

// ------------------------------------------------------------ values

TEST_F(JobFunction, ResultsInInputOrderWithTimestamps) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}, {"max-in-flight", "4"}}), bus, kAffineCaps);
  constexpr int kN = 200;
  for (int i = 0; i < kN; ++i) ASSERT_EQ(gst_harness_push(h, affine_buffer(i)), GST_FLOW_OK) << i;
  for (int i = 0; i < kN; ++i) {
    GstBuffer* out = gst_harness_pull(h);
    ASSERT_NE(out, nullptr) << i;
    ASSERT_EQ(gst_buffer_n_memory(out), 1u);
    EXPECT_EQ(tensor<float>(out, 0), affine_out(i)) << i;
    EXPECT_EQ(GST_BUFFER_PTS(out), 1000 * GST_SECOND + i * GST_MSECOND) << i;
    EXPECT_EQ(GST_BUFFER_DTS(out), 999 * GST_SECOND + i * GST_MSECOND) << i;
    EXPECT_EQ(GST_BUFFER_DURATION(out), GST_MSECOND) << i;
    EXPECT_EQ(GST_BUFFER_OFFSET(out), guint64(10 + i)) << i;
    EXPECT_EQ(GST_BUFFER_OFFSET_END(out), guint64(11 + i)) << i;
    gst_buffer_unref(out);
  }
  EXPECT_EQ(gst_harness_try_pull(h), nullptr);
  guint64 steps = 0;
  g_object_get(h->element, "steps", &steps, nullptr);
  EXPECT_EQ(steps, guint64(kN));
  // Predict job: jobflow-step messages without loss or accuracy.
  std::vector<const GstStructure*> msgs = bus.element(JOBFLOW_STEP_MESSAGE_NAME);
  ASSERT_EQ(msgs.size(), size_t(kN));
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(u64(msgs[i], "step"), guint64(i + 1));
    EXPECT_EQ(u64(msgs[i], "samples"), guint64(4 * (i + 1)));  // dim 0 of (4,)
    EXPECT_FALSE(gst_structure_has_field(msgs[i], "loss"));
    EXPECT_FALSE(gst_structure_has_field(msgs[i], "accuracy"));
  }
  EXPECT_EQ(errors_text(bus), "");
  gst_harness_teardown(h);
}

TEST_F(JobFunction, EmptyGapBuffersPassInTheirPlaceWithoutACall) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}}), bus, kAffineCaps);
  ASSERT_EQ(gst_harness_push(h, affine_buffer(0)), GST_FLOW_OK);
  GstBuffer* gap = gst_buffer_new();  // as jobcrop sends a frame without crops
  GST_BUFFER_FLAG_SET(gap, GST_BUFFER_FLAG_GAP);
  GST_BUFFER_PTS(gap) = 7 * GST_SECOND;
  ASSERT_EQ(gst_harness_push(h, gap), GST_FLOW_OK);
  ASSERT_EQ(gst_harness_push(h, affine_buffer(2)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  EXPECT_EQ(tensor<float>(out, 0), affine_out(0));
  gst_buffer_unref(out);
  out = gst_harness_pull(h);
  EXPECT_EQ(out, gap);  // the same buffer, untouched
  EXPECT_EQ(gst_buffer_get_size(out), 0u);
  EXPECT_EQ(GST_BUFFER_PTS(out), 7 * GST_SECOND);
  gst_buffer_unref(out);
  out = gst_harness_pull(h);
  EXPECT_EQ(tensor<float>(out, 0), affine_out(2));
  gst_buffer_unref(out);
  guint64 steps = 0;
  g_object_get(h->element, "steps", &steps, nullptr);
  EXPECT_EQ(steps, 2u);
  EXPECT_EQ(errors_text(bus), "");
  gst_harness_teardown(h);
}

TEST_F(JobFunction, MetasAreCopiedAndTheTensorMetaDescribesTheOutputs) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().eval}}), bus, kEvalCaps);
  GstBuffer* in = buffer_of({Tensor::from<float>({4, 3}, std::vector<float>(12, 0.f)),
                             Tensor::from<gint32>({4}, {0, 0, 0, 0})});
  GST_BUFFER_PTS(in) = 5 * GST_SECOND;
  GST_BUFFER_FLAG_SET(in, GST_BUFFER_FLAG_DISCONT);
  JobflowBatchMeta* bm = jobflow_buffer_add_batch_meta(in, 4);
  ASSERT_NE(bm, nullptr);
  bm->valid = 3;
  for (guint i = 0; i < 3; ++i) {
    bm->pts[i] = 5 * GST_SECOND + i * GST_MSECOND;
    bm->offset[i] = 70 + i;
  }
  // The input's own tensor meta (its placeholders) must not survive.
  jobflow::gst::add_tensor_meta(in, {{{4, 3}, flow::Float32}, {{4}, flow::Int32}}, {"scores", "labels"});
  ASSERT_EQ(gst_harness_push(h, in), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(GST_BUFFER_PTS(out), 5 * GST_SECOND);
  EXPECT_TRUE(GST_BUFFER_FLAG_IS_SET(out, GST_BUFFER_FLAG_DISCONT));

  const JobflowBatchMeta* ob = jobflow_buffer_get_batch_meta(out);
  ASSERT_NE(ob, nullptr);
  EXPECT_EQ(ob->batch_size, 4u);
  EXPECT_EQ(ob->valid, 3u);
  for (guint i = 0; i < 3; ++i) {
    EXPECT_EQ(ob->pts[i], 5 * GST_SECOND + i * GST_MSECOND);
    EXPECT_EQ(ob->offset[i], guint64(70 + i));
  }
  EXPECT_EQ(ob->pts[3], GST_CLOCK_TIME_NONE);

  // Exactly one tensor meta, describing (labels (4,) int32, scores (4, 3) float32).
  guint tensor_metas = 0;
  gpointer state = nullptr;
  while (GstMeta* m = gst_buffer_iterate_meta_filtered(out, &state, JOBFLOW_TENSOR_META_API_TYPE)) {
    (void)m;
    ++tensor_metas;
  }
  EXPECT_EQ(tensor_metas, 1u);
  const JobflowTensorMeta* tm = jobflow_buffer_get_tensor_meta(out);
  ASSERT_NE(tm, nullptr);
  std::vector<flow::TensorSpec> specs;
  ASSERT_TRUE(jobflow::gst::specs_from_meta(tm, &specs));
  EXPECT_EQ(specs, (std::vector<flow::TensorSpec>{{{4}, flow::Int32}, {{4, 3}, flow::Float32}}));
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

TEST_F(JobFunction, BetweenJobbatchAndJobunbatchFramesKeepTheirTimestamps) {
  // Frames of one float, (1,), batched by 4 into the (4,) the affine job
  // takes, through x * 2 + 1, and split again by jobunbatch, which needs the
  // JobflowBatchMeta that jobfunction copies.
  GstHarness* h = gst_harness_new_empty();
  gchar* launch = g_strdup_printf("jobbatch batch-size=4 ! jobfunction job=\"%s\" ! jobunbatch", jobs().affine.c_str());
  gst_harness_add_parse(h, launch);
  g_free(launch);
  gst_harness_set_src_caps_str(
      h, "other/tensors,format=static,num_tensors=1,dimensions=(string)1,types=(string)float32,framerate=4/1");
  constexpr int kFrames = 8;
  for (int i = 0; i < kFrames; ++i) {
    GstBuffer* b = buffer_of({Tensor::from<float>({1}, {float(i) * 10})});
    GST_BUFFER_PTS(b) = i * GST_SECOND / 4;
    GST_BUFFER_DURATION(b) = GST_SECOND / 4;
    GST_BUFFER_OFFSET(b) = i;
    ASSERT_EQ(gst_harness_push(h, b), GST_FLOW_OK);
  }
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  ASSERT_TRUE(pull_until_eos(h));
  ASSERT_EQ(gst_harness_buffers_in_queue(h), guint(kFrames));
  for (int i = 0; i < kFrames; ++i) {
    GstBuffer* out = gst_harness_try_pull(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(tensor<float>(out, 0), std::vector<float>{float(i) * 20 + 1}) << i;
    EXPECT_EQ(GST_BUFFER_PTS(out), i * GST_SECOND / 4) << i;
    EXPECT_EQ(GST_BUFFER_OFFSET(out), guint64(i)) << i;
    gst_buffer_unref(out);
  }
  gst_harness_teardown(h);
}

// ------------------------------------------------------------ EOS, flush, states

TEST_F(JobFunction, EosLeavesAfterEveryResult) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}, {"max-in-flight", "3"}}), bus, kAffineCaps);
  // Record what leaves the src pad, in order.
  std::mutex mu;
  std::vector<std::string> order;
  GstPad* src = gst_element_get_static_pad(h->element, "src");
  struct Rec {
    std::mutex* mu;
    std::vector<std::string>* order;
  } rec{&mu, &order};
  gst_pad_add_probe(
      src, static_cast<GstPadProbeType>(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
      [](GstPad*, GstPadProbeInfo* info, gpointer p) -> GstPadProbeReturn {
        auto* r = static_cast<Rec*>(p);
        std::lock_guard<std::mutex> lk(*r->mu);
        if (GST_PAD_PROBE_INFO_TYPE(info) & GST_PAD_PROBE_TYPE_BUFFER)
          r->order->push_back("buffer");
        else
          r->order->push_back(GST_EVENT_TYPE_NAME(GST_PAD_PROBE_INFO_EVENT(info)));
        return GST_PAD_PROBE_OK;
      },
      &rec, nullptr);
  gst_object_unref(src);
  constexpr int kN = 12;
  for (int i = 0; i < kN; ++i) ASSERT_EQ(gst_harness_push(h, affine_buffer(i)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  ASSERT_TRUE(pull_until_eos(h));
  // EOS is in the harness: every result must be there already.
  EXPECT_EQ(gst_harness_buffers_in_queue(h), guint(kN));
  for (int i = 0; i < kN; ++i) {
    GstBuffer* out = gst_harness_pull(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(tensor<float>(out, 0), affine_out(i));
    gst_buffer_unref(out);
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    ASSERT_FALSE(order.empty());
    EXPECT_EQ(order.back(), "eos");
    EXPECT_EQ(std::count(order.begin(), order.end(), "buffer"), kN);
    EXPECT_EQ(std::find(order.begin(), order.end(), "eos") - order.begin(), std::ptrdiff_t(order.size() - 1));
  }
  // The summary comes with EOS; nothing after EOS is accepted.
  std::vector<const GstStructure*> sum = bus.element(JOBFLOW_SUMMARY_MESSAGE_NAME);
  ASSERT_EQ(sum.size(), 1u);
  EXPECT_EQ(u64(sum[0], "steps"), guint64(kN));
  EXPECT_EQ(u64(sum[0], "samples"), guint64(4 * kN));
  EXPECT_FALSE(gst_structure_has_field(sum[0], "mean-loss"));
  EXPECT_EQ(gst_harness_push(h, affine_buffer(kN)), GST_FLOW_EOS);
  gst_harness_teardown(h);
}

TEST_F(JobFunction, FlushMidStreamThenStreamingContinues) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}, {"max-in-flight", "2"}}), bus, kAffineCaps);
  // Downstream blocks on the first result, so results pile up in the element
  // and the chain blocks at max-in-flight: the flush must release both.
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool reached = false;
  } gate;
  const gulong probe = gst_pad_add_probe(
      h->sinkpad, static_cast<GstPadProbeType>(GST_PAD_PROBE_TYPE_BLOCK | GST_PAD_PROBE_TYPE_BUFFER),
      [](GstPad*, GstPadProbeInfo*, gpointer p) -> GstPadProbeReturn {
        auto* g = static_cast<Gate*>(p);
        std::lock_guard<std::mutex> lk(g->mu);
        g->reached = true;
        g->cv.notify_all();
        return GST_PAD_PROBE_OK;
      },
      &gate, nullptr);
  std::vector<GstFlowReturn> pushed;
  std::thread upstream([&] {
    for (int i = 0; i < 6; ++i) {
      GstFlowReturn r = gst_harness_push(h, affine_buffer(i));
      pushed.push_back(r);
      if (r != GST_FLOW_OK) break;
    }
  });
  {
    std::unique_lock<std::mutex> lk(gate.mu);
    gate.cv.wait(lk, [&] { return gate.reached; });
  }
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_start()));
  upstream.join();
  ASSERT_FALSE(pushed.empty());
  EXPECT_EQ(pushed.back(), GST_FLOW_FLUSHING) << "the blocked chain was not released (" << pushed.size() << " pushed)";
  gst_pad_remove_probe(h->sinkpad, probe);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_stop(TRUE)));
  push_segment(h);
  for (int i = 100; i < 110; ++i) ASSERT_EQ(gst_harness_push(h, affine_buffer(i)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  ASSERT_TRUE(pull_until_eos(h));
  // Nothing from before the flush; everything after it, in order.
  ASSERT_EQ(gst_harness_buffers_in_queue(h), 10u);
  for (int i = 100; i < 110; ++i) {
    GstBuffer* out = gst_harness_pull(h);
    EXPECT_EQ(tensor<float>(out, 0), affine_out(i));
    gst_buffer_unref(out);
  }
  EXPECT_EQ(errors_text(bus), "");
  gst_harness_teardown(h);
}

TEST_F(JobFunction, FlushWithoutBlockingAndRepeated) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}, {"max-in-flight", "4"}}), bus, kAffineCaps);
  int next = 0;
  std::vector<int> sent_after_last_flush;
  for (int round = 0; round < 5; ++round) {
    for (int k = 0; k < 3; ++k) ASSERT_EQ(gst_harness_push(h, affine_buffer(next++)), GST_FLOW_OK);
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_start()));
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_stop(TRUE)));
    push_segment(h);
  }
  // Whatever made it out before each flush came in order; now a clean run.
  std::vector<float> firsts;
  while (GstBuffer* b = gst_harness_try_pull(h)) {
    firsts.push_back(tensor<float>(b, 0)[0]);
    gst_buffer_unref(b);
  }
  EXPECT_TRUE(std::is_sorted(firsts.begin(), firsts.end()));
  EXPECT_LE(firsts.size(), size_t(next));
  const int start = next;
  for (int i = 0; i < 5; ++i) ASSERT_EQ(gst_harness_push(h, affine_buffer(next++)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  ASSERT_TRUE(pull_until_eos(h));
  // The flush waited for the src task, so nothing from before it comes now.
  std::vector<GstBuffer*> rest;
  while (GstBuffer* b = gst_harness_try_pull(h)) rest.push_back(b);
  ASSERT_EQ(rest.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(tensor<float>(rest[i], 0), affine_out(start + i));
    gst_buffer_unref(rest[i]);
  }
  EXPECT_EQ(caps_field(h, "dimensions"), "4");
  EXPECT_EQ(errors_text(bus), "");
  gst_harness_teardown(h);
}

TEST_F(JobFunction, FlushRightAfterTheCapsKeepsThemAndPostsNoError) {
  // The flush lands while the src task may be pushing stream-start or caps:
  // those must survive the flush (sticky) and the flush is no error. Many
  // rounds, since where the flush lands is up to the scheduler; every round
  // must pass whatever it hits.
  for (int round = 0; round < 50; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Bus bus;
    GstHarness* h = harness(make_function({{"job", jobs().affine}}), bus, kAffineCaps);
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_start()));
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_flush_stop(TRUE)));
    push_segment(h);
    ASSERT_EQ(gst_harness_push(h, affine_buffer(round)), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(tensor<float>(out, 0), affine_out(round));
    gst_buffer_unref(out);
    EXPECT_EQ(caps_field(h, "dimensions"), "4");
    EXPECT_EQ(errors_text(bus), "");
    gst_harness_teardown(h);
  }
}

// gst_parse_launch of `launch` (freed here) into *pipeline, failing the
// test with the parser's message.
static void parse_pipeline(gchar* launch, GstElement** pipeline) {
  GError* err = nullptr;
  *pipeline = gst_parse_launch(launch, &err);
  g_free(launch);
  ASSERT_NE(*pipeline, nullptr) << (err ? err->message : "");
  ASSERT_EQ(err, nullptr) << err->message;
}

TEST_F(JobFunction, PlayingNullPlayingCyclesInAPipeline) {
  gchar* launch = g_strdup_printf(
      "appsrc name=in format=time caps=\"%s\" ! jobfunction name=fn job=\"%s\" max-in-flight=3 ! jobsink name=out",
      kAffineCaps, jobs().affine.c_str());
  GstElement* pipeline = nullptr;
  ASSERT_NO_FATAL_FAILURE(parse_pipeline(launch, &pipeline));
  GstElement* src = gst_bin_get_by_name(GST_BIN(pipeline), "in");
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "out");
  GstBus* bus = gst_element_get_bus(pipeline);
  constexpr int kN = 20;
  constexpr GstClockTime kWait = 30 * GST_SECOND;  // a safety net against hangs, never reached when it works
  for (int cycle = 0; cycle < 4; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    ASSERT_NE(gst_element_set_state(pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
    for (int i = 0; i < kN; ++i)
      ASSERT_EQ(gst_app_src_push_buffer(GST_APP_SRC(src), affine_buffer(cycle * 100 + i)), GST_FLOW_OK);
    const bool to_eos = cycle % 2 == 0;  // odd cycles stop with results in flight
    if (to_eos) {
      ASSERT_EQ(gst_app_src_end_of_stream(GST_APP_SRC(src)), GST_FLOW_OK);
    }
    const int take = to_eos ? kN : 5;
    for (int i = 0; i < take; ++i) {
      GstSample* s = job_sink_try_pull_result(sink, kWait);
      ASSERT_NE(s, nullptr) << i;
      GstBuffer* b = gst_sample_get_buffer(s);
      EXPECT_EQ(tensor<float>(b, 0), affine_out(cycle * 100 + i));
      EXPECT_EQ(GST_BUFFER_PTS(b), 1000 * GST_SECOND + (cycle * 100 + i) * GST_MSECOND);
      gst_sample_unref(s);
    }
    if (to_eos) {
      EXPECT_EQ(job_sink_try_pull_result(sink, kWait), nullptr);
      EXPECT_TRUE(job_sink_is_eos(sink));
      GstMessage* m = gst_bus_timed_pop_filtered(bus, kWait, static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
      ASSERT_NE(m, nullptr);
      EXPECT_EQ(GST_MESSAGE_TYPE(m), GST_MESSAGE_EOS);
      gst_message_unref(m);
    }
    ASSERT_EQ(gst_element_set_state(pipeline, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
    GstMessage* e = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
    EXPECT_EQ(e, nullptr);
    if (e) gst_message_unref(e);
    gst_bus_set_flushing(bus, TRUE);  // drop this cycle's messages
    gst_bus_set_flushing(bus, FALSE);
  }
  gst_object_unref(bus);
  gst_object_unref(src);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
}


// The element computes on its task's thread, which GStreamer takes from its
// thread pool and gives back when the element stops: the OpenMP threads the
// calls started there must not stay behind (libgomp makes every thread wait
// differently once a process has more of them than cores).
using jobflow::testing::threads_named;

TEST_F(JobFunction, TheTaskLeavesNoOpenMPThreadsBehind) {
  // Debian's libgomp is not built for ThreadSanitizer, which then sees the
  // two threads of a parallel loop share data with nothing between (the
  // tsan configuration runs every job on one thread for that reason).
  if (jobflow::testing::under_thread_sanitizer())
    GTEST_SKIP() << "a ThreadSanitizer build: it cannot see libgomp's parallel regions (tests/common/os_threads.h)";
  constexpr int64_t kN = 1 << 20;  // big enough for a parallel loop
  const std::string file = fresh_path("omp_affine.onnx");
  {
    auto job = flow::global_function(flow::Predict, flow::function_config().name("omp_affine"),
                                     {flow::Numpy::Placeholder({kN}, flow::Float, "x")},
                                     [](Blob x) -> flow::Numpy { return x * 2.0 + 1.0; });
    flow::onnx::save(*job.compiled(), file);
  }
  gchar* launch = g_strdup_printf(
      "appsrc name=in format=time caps=\"other/tensors,format=static,num_tensors=1,dimensions=(string)%lld,"
      "types=(string)float32\" ! jobfunction name=omp num-threads=2 job=\"%s\" ! jobsink name=out",
      static_cast<long long>(kN), file.c_str());
  GstElement* pipeline = nullptr;
  ASSERT_NO_FATAL_FAILURE(parse_pipeline(launch, &pipeline));
  GstElement* src = gst_bin_get_by_name(GST_BIN(pipeline), "in");
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "out");
  ASSERT_NE(gst_element_set_state(pipeline, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  Tensor x({kN}, flow::Float);
  for (int64_t i = 0; i < kN; ++i) x.data<float>()[i] = static_cast<float>(i % 5);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(gst_app_src_push_buffer(GST_APP_SRC(src), buffer_of({x})), GST_FLOW_OK);
  for (int i = 0; i < 2; ++i) {
    GstSample* s = job_sink_try_pull_result(sink, 30 * GST_SECOND);
    ASSERT_NE(s, nullptr) << i;
    const std::vector<float> y = tensor<float>(gst_sample_get_buffer(s), 0);
    ASSERT_EQ(y.size(), static_cast<size_t>(kN));
    EXPECT_EQ(y[3], 7.0f);
    EXPECT_EQ(y[kN - 1], static_cast<float>((kN - 1) % 5) * 2 + 1);
    gst_sample_unref(s);
  }
  // While it runs: the task's thread and the second OpenMP thread it started.
  EXPECT_EQ(threads_named("omp:src"), 2);
  ASSERT_EQ(gst_element_set_state(pipeline, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  // Stopped: the pooled thread itself, which keeps the name, or none if
  // GLib ended it.
  int left = threads_named("omp:src");
  if (left > 1) left = jobflow::testing::threads_named_once("omp:src", 1);  // a joined thread leaves /proc a moment later
  EXPECT_LE(left, 1);
  gst_object_unref(src);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
}

// ------------------------------------------------------------ train and eval

namespace {

// Train inputs of step k (from 0): the first two steps use the hand-worked
// x = [[1, 2, 3], [0, 1, 0]] and targets 0.
std::vector<Tensor> train_inputs(int k) {
  if (k < 2) return {Tensor::from<float>({2, 3}, {1, 2, 3, 0, 1, 0}), Tensor::from<float>({2, 2}, {0, 0, 0, 0})};
  const float s = 0.25f * k;
  return {Tensor::from<float>({2, 3}, {s, -1, 0.5f, 2 * s, 0, -s}), Tensor::from<float>({2, 2}, {1, -1, s, 0})};
}

std::vector<float> read_floats(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

struct Recorder {
  std::mutex mu;
  std::vector<std::tuple<guint64, double, double>> steps;    // step-done
  std::vector<std::pair<std::string, guint64>> saves;        // checkpoint-saved
  std::vector<std::vector<float>> saved_weights;             // fn_lin-weight/out at each save
  std::vector<std::pair<std::string, std::string>> reloads;  // reloaded
};

void connect_recorder(GstElement* e, Recorder* r) {
  g_signal_connect(e, "step-done",
                   G_CALLBACK(+[](GstElement*, guint64 step, gdouble loss, gdouble acc, gpointer p) {
                     auto* r = static_cast<Recorder*>(p);
                     std::lock_guard<std::mutex> lk(r->mu);
                     r->steps.emplace_back(step, loss, acc);
                   }),
                   r);
  g_signal_connect(e, "checkpoint-saved",
                   G_CALLBACK(+[](GstElement*, const gchar* path, guint64 step, gpointer p) {
                     auto* r = static_cast<Recorder*>(p);
                     std::lock_guard<std::mutex> lk(r->mu);
                     r->saves.emplace_back(path, step);
                     r->saved_weights.push_back(read_floats(fs::path(path) / "fn_lin-weight" / "out"));
                   }),
                   r);
  g_signal_connect(e, "reloaded",
                   G_CALLBACK(+[](GstElement*, const gchar* job, const gchar* ck, gpointer p) {
                     auto* r = static_cast<Recorder*>(p);
                     std::lock_guard<std::mutex> lk(r->mu);
                     r->reloads.emplace_back(job ? job : "", ck ? ck : "");
                   }),
                   r);
}

}  // namespace

TEST_F(JobFunction, TrainStepsReportLossAndSaveCheckpoints) {
  const std::string ck = fresh_path("ck_train");
  Bus bus;
  Recorder rec;
  GstElement* e = make_function({{"job", jobs().train}, {"checkpoint", ck}, {"save-interval", "2"}});
  connect_recorder(e, &rec);
  GstHarness* h = harness(e, bus, kTrainCaps);
  constexpr int kSteps = 4;
  std::vector<std::vector<float>> losses;
  for (int k = 0; k < kSteps; ++k) {
    ASSERT_EQ(gst_harness_push(h, buffer_of(train_inputs(k), k * GST_SECOND)), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(h);
    ASSERT_NE(out, nullptr);
    losses.push_back(tensor<float>(out, 0));
    EXPECT_EQ(GST_BUFFER_PTS(out), k * GST_SECOND);
    gst_buffer_unref(out);
  }
  EXPECT_EQ(caps_field(h, "dimensions"), "2");
  EXPECT_EQ(caps_field(h, "types"), "float32");
  // Step 1 by hand: y = 0.5 * sum(x_i) = [[3, 3], [0.5, 0.5]], loss_i = sum_j y_ij^2.
  ASSERT_EQ(losses[0].size(), 2u);
  EXPECT_FLOAT_EQ(losses[0][0], 18.0f);
  EXPECT_FLOAT_EQ(losses[0][1], 0.5f);
  // Step 2: dL/dy = y (L = mean_i loss_i), so W rows -= 0.1 * [3, 6.5, 9] and
  // b -= 0.1 * 3.5: W = [0.2, -0.15, -0.4], b = -0.35; y = [-1.65, -0.5].
  EXPECT_NEAR(losses[1][0], 2 * 1.65 * 1.65, 1e-4);
  EXPECT_NEAR(losses[1][1], 0.5, 1e-5);
  guint64 steps = 0;
  g_object_get(h->element, "steps", &steps, nullptr);
  EXPECT_EQ(steps, guint64(kSteps));

  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  ASSERT_TRUE(pull_until_eos(h));

  // jobflow-step: step, samples (dim 0 = 2 per call), loss = the mean.
  std::vector<const GstStructure*> msgs = bus.element(JOBFLOW_STEP_MESSAGE_NAME);
  ASSERT_EQ(msgs.size(), size_t(kSteps));
  double loss_sum = 0;
  for (int k = 0; k < kSteps; ++k) {
    const double mean = (double(losses[k][0]) + losses[k][1]) / 2;
    loss_sum += mean;
    EXPECT_EQ(u64(msgs[k], "step"), guint64(k + 1));
    EXPECT_EQ(u64(msgs[k], "samples"), guint64(2 * (k + 1)));
    EXPECT_NEAR(dbl(msgs[k], "loss"), mean, 1e-6) << k;
    EXPECT_FALSE(gst_structure_has_field(msgs[k], "accuracy"));
  }
  EXPECT_NEAR(dbl(msgs[0], "loss"), 9.25, 1e-6);
  // jobflow-checkpoint: at steps 2 and 4, then the final save at EOS.
  std::vector<const GstStructure*> cks = bus.element(JOBFLOW_CHECKPOINT_MESSAGE_NAME);
  ASSERT_EQ(cks.size(), 3u);
  const guint64 want_steps[] = {2, 4, 4};
  const gboolean want_final[] = {FALSE, FALSE, TRUE};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(u64(cks[i], "step"), want_steps[i]) << i;
    EXPECT_STREQ(gst_structure_get_string(cks[i], "path"), ck.c_str());
    gboolean final = !want_final[i];
    EXPECT_TRUE(gst_structure_get_boolean(cks[i], "final", &final));
    EXPECT_EQ(final, want_final[i]) << i;
  }
  std::vector<const GstStructure*> sum = bus.element(JOBFLOW_SUMMARY_MESSAGE_NAME);
  ASSERT_EQ(sum.size(), 1u);
  EXPECT_EQ(u64(sum[0], "steps"), guint64(kSteps));
  EXPECT_EQ(u64(sum[0], "samples"), guint64(2 * kSteps));
  EXPECT_NEAR(dbl(sum[0], "mean-loss"), loss_sum / kSteps, 1e-6);
  EXPECT_EQ(errors_text(bus), "");

  // Signals.
  {
    std::lock_guard<std::mutex> lk(rec.mu);
    ASSERT_EQ(rec.steps.size(), size_t(kSteps));
    for (int k = 0; k < kSteps; ++k) {
      EXPECT_EQ(std::get<0>(rec.steps[k]), guint64(k + 1));
      EXPECT_NEAR(std::get<1>(rec.steps[k]), (double(losses[k][0]) + losses[k][1]) / 2, 1e-6);
      EXPECT_TRUE(std::isnan(std::get<2>(rec.steps[k])));
    }
    ASSERT_EQ(rec.saves.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(rec.saves[i].first, ck);
      EXPECT_EQ(rec.saves[i].second, want_steps[i]);
    }
    // Checkpoint 2 holds exactly 2 steps. From W1 = [0.2, -0.15, -0.4],
    // b1 = -0.35 (see above), step 2's dW row = sum_i y_i x_i with
    // y = [-1.65, -0.5]: [-1.65, -3.8, -4.95], so W2 = W1 + 0.1 * that.
    ASSERT_EQ(rec.saved_weights[0].size(), 6u);
    const float w2[3] = {0.365f, 0.23f, 0.095f};
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(rec.saved_weights[0][i], w2[i % 3], 1e-6) << i;
  }
  // The folder: OneFlow layout with the job's variables.
  EXPECT_TRUE(fs::exists(fs::path(ck) / "snapshot_done"));
  EXPECT_TRUE(fs::exists(fs::path(ck) / "fn_lin-weight" / "out"));
  EXPECT_TRUE(fs::exists(fs::path(ck) / "fn_lin-bias" / "out"));
  EXPECT_EQ(fs::file_size(fs::path(ck) / "fn_lin-weight" / "out"), 2u * 3u * 4u);
  const std::vector<float> saved_w = read_floats(fs::path(ck) / "fn_lin-weight" / "out");
  const std::vector<float> saved_b = read_floats(fs::path(ck) / "fn_lin-bias" / "out");
  gst_harness_teardown(h);

  // The same job run directly by the engine on the same data gives the same
  // losses and the same final variables.
  flow::session::reset();
  auto job = flow::onnx::load(jobs().train);
  for (int k = 0; k < kSteps; ++k) {
    std::vector<Tensor> r = job->run(train_inputs(k));
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(vec(r[0]), losses[k]) << "step " << k + 1;
  }
  EXPECT_EQ(vec(flow::session::variable("fn_lin-weight")), saved_w);
  EXPECT_EQ(vec(flow::session::variable("fn_lin-bias")), saved_b);
}

/* A train element and a predict element over the same variables (a tee
 * into train and eval), started in either order: the predict file declares
 * fn_lin frozen, which is its own use; the train element trains it, and the
 * predict element computes with what it trained. */
void train_beside_predict(bool predict_first) {
  SCOPED_TRACE(predict_first ? "predict element started first" : "train element started first");
  flow::session::reset();
  Bus bus;
  GstElement* t = make_function({{"job", jobs().train}});
  GstElement* a = make_function({{"job", jobs().apply}});
  bus.attach(t);
  bus.attach(a);
  // The job files load at NULL -> READY, in this order.
  for (GstElement* e : predict_first ? std::vector<GstElement*>{a, t} : std::vector<GstElement*>{t, a})
    EXPECT_EQ(gst_element_set_state(e, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS) << errors_text(bus);
  if (::testing::Test::HasFailure()) {
    for (GstElement* e : {t, a}) {
      gst_element_set_state(e, GST_STATE_NULL);
      gst_object_unref(e);
    }
    return;
  }
  GstHarness* train = harness(t, bus, kTrainCaps);
  GstHarness* apply = harness(a, bus, kApplyCaps);
  const Tensor x = Tensor::from<float>({2, 3}, {1, 2, 3, 0, 1, 0});
  auto run_apply = [&] {
    EXPECT_EQ(gst_harness_push(apply, buffer_of({x})), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(apply);
    std::vector<float> y = out ? tensor<float>(out, 0) : std::vector<float>{};
    if (out) gst_buffer_unref(out);
    return y;
  };
  // W = 0.5, b = 0: y = 0.5 * sum(x_i).
  EXPECT_EQ(run_apply(), (std::vector<float>{3, 3, 0.5f, 0.5f}));
  ASSERT_EQ(gst_harness_push(train, buffer_of(train_inputs(0))), GST_FLOW_OK);
  GstBuffer* loss = gst_harness_pull(train);
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(tensor<float>(loss, 0), (std::vector<float>{18, 0.5f}));
  gst_buffer_unref(loss);
  // One step (TrainStepsReportLossAndSaveCheckpoints): W rows = [0.2, -0.15,
  // -0.4], b = -0.35, so y = [-1.65, -1.65, -0.5, -0.5].
  const std::vector<float> y = run_apply();
  ASSERT_EQ(y.size(), 4u);
  const float want[4] = {-1.65f, -1.65f, -0.5f, -0.5f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], want[i], 1e-5) << i;
  EXPECT_EQ(errors_text(bus), "");
  gst_harness_teardown(train);
  gst_harness_teardown(apply);
}

TEST_F(JobFunction, APredictElementStartedFirstDoesNotFreezeATrainElement) {
  train_beside_predict(true);
  train_beside_predict(false);
}

TEST_F(JobFunction, TrainContinuesFromAnExistingCheckpoint) {
  const std::string ck = fresh_path("ck_continue");
  std::vector<float> first_run_step3;
  for (int run = 0; run < 2; ++run) {
    Bus bus;
    GstHarness* h = harness(make_function({{"job", jobs().train}, {"checkpoint", ck}}), bus, kTrainCaps);
    // Run 0: steps 1-2 then EOS saves. Run 1 continues: its first step is step 3's.
    std::vector<float> loss;
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(gst_harness_push(h, buffer_of(train_inputs(k))), GST_FLOW_OK);
      GstBuffer* out = gst_harness_pull(h);
      loss = tensor<float>(out, 0);
      gst_buffer_unref(out);
      if (run == 1 && k == 0) first_run_step3 = loss;  // continues: the 3rd step overall
    }
    guint64 steps = 0;
    g_object_get(h->element, "steps", &steps, nullptr);
    EXPECT_EQ(steps, guint64(2 * (run + 1))) << "the checkpoint's train step is restored (run " << run << ")";
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
    ASSERT_TRUE(pull_until_eos(h));
    EXPECT_EQ(errors_text(bus), "");
    ASSERT_EQ(bus.element(JOBFLOW_CHECKPOINT_MESSAGE_NAME).size(), 1u);
    gst_harness_teardown(h);
  }
  flow::session::reset();
  auto job = flow::onnx::load(jobs().train);
  std::vector<Tensor> r;
  for (int k = 0; k < 3; ++k) r = job->run(train_inputs(k % 2));
  EXPECT_EQ(vec(r[0]), first_run_step3);
}

TEST_F(JobFunction, AnEmptyCheckpointFolderIsAFreshStartAndGetsOnlyThisJobsVariables) {
  const std::string ck = fresh_path("ck_empty");
  std::filesystem::create_directories(ck);  // made by the user for the job to fill
  // Another job's variables live in the same process (the session).
  auto other = flow::onnx::load(jobs().scaled);  // its variable fn_scale is not the train job's
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().train}, {"checkpoint", ck}}), bus, kTrainCaps);
  ASSERT_EQ(gst_harness_push(h, buffer_of(train_inputs(0))), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  const std::vector<float> loss = tensor<float>(out, 0);
  gst_buffer_unref(out);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  ASSERT_TRUE(pull_until_eos(h));
  EXPECT_EQ(errors_text(bus), "");
  gst_harness_teardown(h);
  // A fresh start: the first loss is the job file's own first step.
  flow::session::reset();
  auto job = flow::onnx::load(jobs().train);
  EXPECT_EQ(vec(job->run(train_inputs(0))[0]), loss);
  // The folder holds the train job's variables and nothing of the other job.
  std::set<std::string> saved;
  for (const auto& e : std::filesystem::directory_iterator(ck))
    if (e.is_directory()) saved.insert(e.path().filename().string());
  std::set<std::string> train_vars;
  for (const std::string& n : job->definition().trainable) train_vars.insert(n);
  EXPECT_FALSE(saved.empty());
  for (const std::string& n : train_vars) EXPECT_TRUE(saved.count(n)) << n;
  const std::string step_var = flow::session::train_step_variable(job->signature().job_name);
  EXPECT_TRUE(saved.count(step_var)) << "the train step is saved with the weights";
  for (const std::string& n : saved)
    EXPECT_TRUE(train_vars.count(n) || n.find("momentum") != std::string::npos || n == step_var)
        << "unexpected variable " << n;
}

TEST_F(JobFunction, AnOrdinaryModelTrainsWithLossAndOptimizer) {
  // A predict job file trained through the element: loss=mse adds a
  // "targets" placeholder, and each buffer is one SGD step on fn_scale.
  const Tensor x = Tensor::from<float>({4}, {1, 2, 3, 4});
  const Tensor t = Tensor::from<float>({4}, {2, 2, 2, 2});
  Bus bus;
  GstElement* e = make_function({{"job", jobs().scaled}, {"loss", "mse"}, {"optimizer", "sgd:lr=0.05"}});
  GstHarness* h = harness(e, bus,
                          "other/tensors,format=static,num_tensors=2,dimensions=(string)\"4,4\","
                          "types=(string)\"float32,float32\"");
  std::vector<std::vector<float>> got;
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(gst_harness_push(h, buffer_of({x, t})), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(h);
    ASSERT_NE(out, nullptr);
    got.push_back(tensor<float>(out, 0));
    gst_buffer_unref(out);
  }
  EXPECT_EQ(errors_text(bus), "");
  gchar* sig = nullptr;
  g_object_get(e, "signature", &sig, nullptr);
  EXPECT_NE(std::string(sig).find("[train]"), std::string::npos) << sig;
  EXPECT_NE(std::string(sig).find("targets"), std::string::npos) << sig;
  g_free(sig);
  gst_harness_teardown(h);
  // The same job loaded by the engine, on the same data, step by step.
  flow::session::reset();
  flow::onnx::LoadOptions o;
  o.type = flow::Train;
  o.loss = "mse";
  o.optimizer = "sgd:lr=0.05";
  auto job = flow::onnx::load(jobs().scaled, o);
  double first = 0, last = 0;
  for (int k = 0; k < 3; ++k) {
    const std::vector<float> want = vec(job->run({x, t})[0]);
    EXPECT_EQ(got[k], want) << "step " << k + 1;
    double m = 0;
    for (float v : want) m += v;
    (k == 0 ? first : last) = m;
  }
  EXPECT_LT(last, first);  // it learns
}

TEST_F(JobFunction, EvalJobReportsAccuracy) {
  Bus bus;
  Recorder rec;
  GstElement* e = make_function({{"job", jobs().eval}});
  connect_recorder(e, &rec);
  GstHarness* h = harness(e, bus, kEvalCaps);
  // Rows' argmax vs labels:
  //   call 1: argmax [1, 0, 2, 2], labels [1, 0, 2, 0] -> 3 of 4
  //   call 2: argmax [0, 1, 2, 0], labels [1, 1, 0, 2] -> 1 of 4
  //   call 3: argmax [2, 2, 1, 0], labels [2, 2, 1, 0] -> 4 of 4
  const std::vector<std::vector<float>> scores = {
      {0, 1, 0, 5, 2, 1, 0, 0, 9, 1, 2, 3},
      {4, 1, 0, 0, 3, 1, 1, 2, 7, 8, 0, 1},
      {0, 1, 2, -1, -2, 0, 0, 5, 1, 9, 8, 7},
  };
  const std::vector<std::vector<gint32>> labels = {{1, 0, 2, 0}, {1, 1, 0, 2}, {2, 2, 1, 0}};
  const double acc[] = {0.75, 0.25, 1.0};
  const double total[] = {3.0 / 4, 4.0 / 8, 8.0 / 12};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(gst_harness_push(h, buffer_of({Tensor::from<float>({4, 3}, scores[i]), Tensor::from<gint32>({4}, labels[i])})),
              GST_FLOW_OK);
  }
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  ASSERT_TRUE(pull_until_eos(h));
  ASSERT_EQ(gst_harness_buffers_in_queue(h), 3u);
  std::vector<const GstStructure*> msgs = bus.element(JOBFLOW_STEP_MESSAGE_NAME);
  ASSERT_EQ(msgs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(u64(msgs[i], "step"), guint64(i + 1));
    EXPECT_DOUBLE_EQ(dbl(msgs[i], "accuracy"), acc[i]) << i;
    EXPECT_DOUBLE_EQ(dbl(msgs[i], "total-accuracy"), total[i]) << i;
    EXPECT_FALSE(gst_structure_has_field(msgs[i], "loss"));
  }
  std::vector<const GstStructure*> sum = bus.element(JOBFLOW_SUMMARY_MESSAGE_NAME);
  ASSERT_EQ(sum.size(), 1u);
  EXPECT_DOUBLE_EQ(dbl(sum[0], "accuracy"), 8.0 / 12);
  EXPECT_EQ(u64(sum[0], "correct"), 8u);
  EXPECT_EQ(u64(sum[0], "counted"), 12u);
  EXPECT_EQ(u64(sum[0], "steps"), 3u);
  EXPECT_FALSE(gst_structure_has_field(sum[0], "mean-loss"));
  {
    std::lock_guard<std::mutex> lk(rec.mu);
    ASSERT_EQ(rec.steps.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(std::get<0>(rec.steps[i]), guint64(i + 1));
      EXPECT_TRUE(std::isnan(std::get<1>(rec.steps[i])));
      EXPECT_DOUBLE_EQ(std::get<2>(rec.steps[i]), acc[i]);
    }
  }
  gst_harness_teardown(h);
}

TEST_F(JobFunction, NoAccuracyWhenTheJobDeclaresNone) {
  // fn_argmax returns (argmax(scores), scores): an int (B,) and a float
  // (B, C) return that would score 100% at every call. It declares no
  // accuracy, so the element reports none.
  Bus bus;
  Recorder rec;
  GstElement* e = make_function({{"job", jobs().argmax}});
  connect_recorder(e, &rec);
  GstHarness* h =
      harness(e, bus, "other/tensors,format=static,num_tensors=1,dimensions=(string)3:4,types=(string)float32");
  const std::vector<float> scores = {0, 1, 0, 5, 2, 1, 0, 0, 9, 1, 2, 3};
  for (int i = 0; i < 2; ++i) ASSERT_EQ(gst_harness_push(h, buffer_of({Tensor::from<float>({4, 3}, scores)})), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  ASSERT_TRUE(pull_until_eos(h));
  ASSERT_EQ(gst_harness_buffers_in_queue(h), 2u);
  GstBuffer* out = gst_harness_pull(h);
  EXPECT_EQ(tensor<gint32>(out, 0), (std::vector<gint32>{1, 0, 2, 2}));  // the job ran
  gst_buffer_unref(out);
  std::vector<const GstStructure*> msgs = bus.element(JOBFLOW_STEP_MESSAGE_NAME);
  ASSERT_EQ(msgs.size(), 2u);
  for (const GstStructure* m : msgs) {
    EXPECT_FALSE(gst_structure_has_field(m, "accuracy"));
    EXPECT_FALSE(gst_structure_has_field(m, "total-accuracy"));
  }
  std::vector<const GstStructure*> sum = bus.element(JOBFLOW_SUMMARY_MESSAGE_NAME);
  ASSERT_EQ(sum.size(), 1u);
  EXPECT_FALSE(gst_structure_has_field(sum[0], "accuracy"));
  EXPECT_FALSE(gst_structure_has_field(sum[0], "counted"));
  {
    std::lock_guard<std::mutex> lk(rec.mu);
    ASSERT_EQ(rec.steps.size(), 2u);
    for (const auto& st : rec.steps) EXPECT_TRUE(std::isnan(std::get<2>(st)));
  }
  gst_harness_teardown(h);
}

TEST_F(JobFunction, TheLossIsTheReturnTheJobDeclares) {
  // fn_train_y returns (y, loss): the loss is its second return, not the
  // first float one (y, whose mean is 1.75 at step 1).
  Bus bus;
  Recorder rec;
  GstElement* e = make_function({{"job", jobs().train_y}});
  connect_recorder(e, &rec);
  GstHarness* h = harness(e, bus, kTrainCaps);
  ASSERT_EQ(gst_harness_push(h, buffer_of(train_inputs(0))), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(gst_buffer_n_memory(out), 2u);
  EXPECT_EQ(tensor<float>(out, 0), (std::vector<float>{3, 3, 0.5f, 0.5f}));  // y = 0.5 * sum(x_i)
  EXPECT_EQ(tensor<float>(out, 1), (std::vector<float>{18, 0.5f}));         // loss_i = sum_j y_ij^2
  gst_buffer_unref(out);
  std::vector<const GstStructure*> msgs = bus.element(JOBFLOW_STEP_MESSAGE_NAME);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_NEAR(dbl(msgs[0], "loss"), 9.25, 1e-6);
  {
    std::lock_guard<std::mutex> lk(rec.mu);
    ASSERT_EQ(rec.steps.size(), 1u);
    EXPECT_NEAR(std::get<1>(rec.steps[0]), 9.25, 1e-6);
  }
  EXPECT_EQ(errors_text(bus), "");
  gst_harness_teardown(h);
}

TEST_F(JobFunction, MessageIntervalThinsStepMessages) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}, {"message-interval", "3"}}), bus, kAffineCaps);
  for (int i = 0; i < 7; ++i) ASSERT_EQ(gst_harness_push(h, affine_buffer(i)), GST_FLOW_OK);
  ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  ASSERT_TRUE(pull_until_eos(h));
  std::vector<const GstStructure*> msgs = bus.element(JOBFLOW_STEP_MESSAGE_NAME);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(u64(msgs[0], "step"), 3u);
  EXPECT_EQ(u64(msgs[1], "step"), 6u);
  EXPECT_EQ(u64(msgs[1], "samples"), 24u);
  gst_harness_teardown(h);
}

// ------------------------------------------------------------ hot reload

TEST_F(JobFunction, ChangingTheCheckpointWhilePlayingReloadsAtTheNextBuffer) {
  Bus bus;
  Recorder rec;
  GstElement* e = make_function({{"job", jobs().scaled}});
  connect_recorder(e, &rec);
  GstHarness* h = harness(e, bus, kAffineCaps);
  auto run = [&](int i) {
    EXPECT_EQ(gst_harness_push(h, affine_buffer(i)), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(h);
    std::vector<float> v = out ? tensor<float>(out, 0) : std::vector<float>{};
    if (out) gst_buffer_unref(out);
    return v;
  };
  auto times = [](std::vector<float> v, float f) {
    for (float& x : v) x *= f;
    return v;
  };
  EXPECT_EQ(run(1), affine_in(1));  // the file's fn_scale = 1
  ASSERT_EQ(GST_STATE(h->element), GST_STATE_PLAYING);
  g_object_set(h->element, "checkpoint", jobs().ck_scale3.c_str(), nullptr);
  EXPECT_EQ(run(2), times(affine_in(2), 3));  // the checkpoint's fn_scale = 3
  EXPECT_EQ(run(3), times(affine_in(3), 3));
  {
    std::lock_guard<std::mutex> lk(rec.mu);
    ASSERT_EQ(rec.reloads.size(), 1u);
    EXPECT_EQ(rec.reloads[0].first, jobs().scaled);
    EXPECT_EQ(rec.reloads[0].second, jobs().ck_scale3);
  }
  std::vector<const GstStructure*> msgs = bus.element(JOBFLOW_RELOAD_MESSAGE_NAME);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_STREQ(gst_structure_get_string(msgs[0], "checkpoint"), jobs().ck_scale3.c_str());
  // Setting the same value again is no change.
  g_object_set(h->element, "checkpoint", jobs().ck_scale3.c_str(), nullptr);
  EXPECT_EQ(run(4), times(affine_in(4), 3));
  {
    std::lock_guard<std::mutex> lk(rec.mu);
    EXPECT_EQ(rec.reloads.size(), 1u);
  }
  EXPECT_EQ(errors_text(bus), "");
  gst_harness_teardown(h);
}

TEST_F(JobFunction, ChangingTheJobWhilePlayingReloadsAndRenegotiates) {
  Bus bus;
  Recorder rec;
  GstElement* e = make_function({{"job", jobs().affine}});
  connect_recorder(e, &rec);
  GstHarness* h = harness(e, bus, kAffineCaps);
  ASSERT_EQ(gst_harness_push(h, affine_buffer(0)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  EXPECT_EQ(tensor<float>(out, 0), affine_out(0));
  gst_buffer_unref(out);
  EXPECT_EQ(caps_field(h, "dimensions"), "4");

  g_object_set(h->element, "job", jobs().fold.c_str(), nullptr);
  ASSERT_EQ(gst_harness_push(h, affine_buffer(1)), GST_FLOW_OK);
  out = gst_harness_pull(h);
  std::vector<float> want = affine_in(1);
  for (float& v : want) v *= 3;
  EXPECT_EQ(tensor<float>(out, 0), want);
  gst_buffer_unref(out);
  EXPECT_EQ(caps_field(h, "dimensions"), "2:2");  // new caps came before the buffer
  EXPECT_EQ(caps_field(h, "framerate"), "30/1");
  gchar* sig = nullptr;
  g_object_get(h->element, "signature", &sig, nullptr);
  ASSERT_NE(sig, nullptr);
  EXPECT_HAS(sig, "fold(");
  g_free(sig);
  {
    std::lock_guard<std::mutex> lk(rec.mu);
    ASSERT_EQ(rec.reloads.size(), 1u);
    EXPECT_EQ(rec.reloads[0].first, jobs().fold);
  }
  gst_harness_teardown(h);
}

TEST_F(JobFunction, AReloadThatFailsIsAnErrorNotACrash) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}}), bus, kAffineCaps);
  // The train job takes other inputs than the stream carries.
  g_object_set(h->element, "job", jobs().train.c_str(), nullptr);
  EXPECT_EQ(gst_harness_push(h, affine_buffer(0)), GST_FLOW_ERROR);
  std::vector<Bus::Error> errs = bus.errors();
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_HAS(errs[0].text, jobs().train);
  EXPECT_HAS(errs[0].text, "'x'");
  gst_harness_teardown(h);
}

// ------------------------------------------------------------ errors

TEST_F(JobFunction, StartErrorsNameTheProperty) {
  {
    const std::string missing = (tmp_root() / "no" / "such.onnx").string();
    std::string t = start_error(make_function({{"job", missing}}), GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND);
    EXPECT_HAS(t, "job=\"" + missing + "\"");
    EXPECT_HAS(t, "no such file");
  }
  {
    std::string t = start_error(make_function({}), GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_SETTINGS);
    EXPECT_HAS(t, "job=");
    EXPECT_HAS(t, "no job file set");
  }
  {
    const std::string ck = fresh_path("absent_checkpoint");
    std::string t = start_error(make_function({{"job", jobs().scaled}, {"checkpoint", ck}}), GST_RESOURCE_ERROR,
                                GST_RESOURCE_ERROR_OPEN_READ);
    EXPECT_HAS(t, "checkpoint=\"" + ck + "\"");
    EXPECT_HAS(t, "no such folder");
  }
  {
    std::string t = start_error(make_function({{"job", jobs().scaled}, {"checkpoint", jobs().ck_scale_bad}}),
                                GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ);
    EXPECT_HAS(t, "checkpoint=\"" + jobs().ck_scale_bad + "\"");
    EXPECT_HAS(t, "'fn_scale'");
    EXPECT_HAS(t, "(5,) float32");
  }
  {
    std::string t = start_error(make_function({{"job", jobs().affine}, {"function", "not_affine"}}),
                                GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_SETTINGS);
    EXPECT_HAS(t, "function=\"not_affine\"");
    EXPECT_HAS(t, "'affine'");
  }
  {
    std::string t = start_error(make_function({{"job", jobs().affine}, {"loss", "mse"}}), GST_RESOURCE_ERROR,
                                GST_RESOURCE_ERROR_SETTINGS);
    EXPECT_HAS(t, "optimizer");
    EXPECT_HAS(t, "loss is set");
  }
  {
    std::string t = start_error(make_function({{"job", jobs().affine}, {"optimizer", "sgd:lr=0.1"}}),
                                GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_SETTINGS);
    EXPECT_HAS(t, "loss=");
    EXPECT_HAS(t, "optimizer is set");
  }
  {
    // A checkpoint path that is a file, not a folder.
    std::string t = start_error(make_function({{"job", jobs().scaled}, {"checkpoint", jobs().affine}}),
                                GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ);
    EXPECT_HAS(t, "not a folder");
  }
  {
    // Not a job file at all.
    const std::string junk = (tmp_root() / "junk.onnx").string();
    std::ofstream(junk) << "this is not a protobuf";
    std::string t = start_error(make_function({{"job", junk}}), GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_SETTINGS);
    EXPECT_HAS(t, "job=\"" + junk + "\"");
  }
}

TEST_F(JobFunction, LoadErrorsNameTheSettingTheEngineBlames) {
  // The engine's error says which LoadOptions field is at fault; the
  // element does not search the message. The job files here sit in a
  // folder whose name holds both "loss" and "optimizer", so every message
  // (it names the file) mentions both words.
  const fs::path dir = tmp_root() / "loss_and_optimizer";
  fs::create_directories(dir);
  const std::string scaled = (dir / "scaled.onnx").string();
  fs::copy_file(jobs().scaled, scaled, fs::copy_options::overwrite_existing);
  {
    std::string t = start_error(make_function({{"job", scaled}, {"loss", "mse"}, {"optimizer", "rmsprop:lr=0.1"}}),
                                GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_SETTINGS);
    EXPECT_HAS(t, "optimizer=\"rmsprop:lr=0.1\"");
    EXPECT_HAS(t, "unknown optimizer 'rmsprop'");
  }
  {
    // scaled returns (4,): no (batch, classes) output for the cross-entropy.
    std::string t = start_error(
        make_function({{"job", scaled}, {"loss", "sparse_softmax_cross_entropy"}, {"optimizer", "sgd:lr=0.1"}}),
        GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_SETTINGS);
    EXPECT_HAS(t, "loss=\"sparse_softmax_cross_entropy\"");
    EXPECT_HAS(t, "(batch, classes)");
  }
  {
    // The file's own fault stays the job's.
    const std::string junk = (dir / "junk.onnx").string();
    std::ofstream(junk) << "this is not a protobuf";
    std::string t = start_error(make_function({{"job", junk}, {"loss", "mse"}, {"optimizer", "sgd:lr=0.1"}}),
                                GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_SETTINGS);
    EXPECT_HAS(t, "job=\"" + junk + "\"");
  }
}

TEST_F(JobFunction, ASummaryDirThatCannotBeMadeFailsTheStartNamingIt) {
  // The event file is made when the element starts (READY -> PAUSED); a
  // file where the folder should be stops it there.
  const std::string blocked = fresh_path("summary_blocked");
  std::ofstream(blocked) << "a file, not a folder";
  GstElement* e = make_function({{"job", jobs().affine}, {"summary-dir", blocked + "/run"}});
  Bus bus;
  bus.attach(e);
  EXPECT_EQ(gst_element_set_state(e, GST_STATE_PAUSED), GST_STATE_CHANGE_FAILURE);
  gst_element_set_state(e, GST_STATE_NULL);
  std::vector<Bus::Error> errs = bus.errors();
  ASSERT_FALSE(errs.empty());
  EXPECT_EQ(errs[0].domain, GST_RESOURCE_ERROR);
  EXPECT_EQ(errs[0].code, GST_RESOURCE_ERROR_OPEN_WRITE);
  EXPECT_HAS(errs[0].text, "summary-dir=\"" + blocked + "/run\"");
  EXPECT_HAS(errs[0].text, "[summary.FileWriter] cannot make the folder");
  gst_object_unref(e);
}

TEST_F(JobFunction, ElementRecoversAfterAFailedStart) {
  GstElement* e = make_function({{"job", (tmp_root() / "missing.onnx").string()}});
  Bus bus;
  bus.attach(e);
  EXPECT_EQ(gst_element_set_state(e, GST_STATE_READY), GST_STATE_CHANGE_FAILURE);
  gst_element_set_state(e, GST_STATE_NULL);
  g_object_set(e, "job", jobs().affine.c_str(), nullptr);
  EXPECT_EQ(gst_element_set_state(e, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  gst_element_set_state(e, GST_STATE_NULL);
  gst_object_unref(e);
}

TEST_F(JobFunction, WrongSizeBufferIsAnErrorNamingTheJob) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}}), bus, kAffineCaps);
  GstBuffer* small = buffer_of({Tensor::from<float>({3}, {1, 2, 3})});  // 12 bytes where (4,) float32 is 16
  EXPECT_EQ(gst_harness_push(h, small), GST_FLOW_ERROR);
  std::vector<Bus::Error> errs = bus.errors();
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].domain, GST_STREAM_ERROR);
  EXPECT_EQ(errs[0].code, GST_STREAM_ERROR_FORMAT);
  EXPECT_HAS(errs[0].text, "'affine'");
  EXPECT_HAS(errs[0].text, "16");
  EXPECT_HAS(errs[0].text, "12");
  // Two memories where one is expected.
  GstBuffer* two = buffer_of({Tensor::from<float>({4}, affine_in(0)), Tensor::from<float>({4}, affine_in(1))});
  EXPECT_EQ(gst_harness_push(h, two), GST_FLOW_ERROR);
  EXPECT_EQ(bus.errors().size(), 2u);
  // A good buffer still goes through afterwards.
  ASSERT_EQ(gst_harness_push(h, affine_buffer(3)), GST_FLOW_OK);
  GstBuffer* out = gst_harness_pull(h);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(tensor<float>(out, 0), affine_out(3));
  gst_buffer_unref(out);
  gst_harness_teardown(h);
}

TEST_F(JobFunction, BufferBeforeCapsIsNotNegotiated) {
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}}), bus, nullptr);
  ASSERT_TRUE(gst_pad_push_event(h->srcpad, gst_event_new_stream_start("nocaps")));
  GstSegment seg;
  gst_segment_init(&seg, GST_FORMAT_TIME);
  ASSERT_TRUE(gst_pad_push_event(h->srcpad, gst_event_new_segment(&seg)));
  EXPECT_EQ(gst_pad_push(h->srcpad, affine_buffer(0)), GST_FLOW_NOT_NEGOTIATED);
  std::vector<Bus::Error> errs = bus.errors();
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0].code, GST_CORE_ERROR_NEGOTIATION);
  gst_harness_teardown(h);
}

// ------------------------------------------------------------ properties

TEST_F(JobFunction, SignatureAndStepsProperties) {
  GstElement* e = make_function({{"job", jobs().eval}});
  gchar* sig = reinterpret_cast<gchar*>(1);
  guint64 steps = 99;
  g_object_get(e, "signature", &sig, "steps", &steps, nullptr);
  EXPECT_EQ(sig, nullptr);  // nothing loaded before READY
  EXPECT_EQ(steps, 0u);
  ASSERT_EQ(gst_element_set_state(e, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  g_object_get(e, "signature", &sig, nullptr);
  ASSERT_NE(sig, nullptr);
  EXPECT_STREQ(sig, "fn_eval(scores: (4, 3) float32, labels: (4,) int32) -> (Numpy, Numpy) [predict]");
  g_free(sig);
  // Read-only.
  GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), "signature");
  ASSERT_NE(ps, nullptr);
  EXPECT_FALSE(ps->flags & G_PARAM_WRITABLE);
  ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), "steps");
  ASSERT_NE(ps, nullptr);
  EXPECT_FALSE(ps->flags & G_PARAM_WRITABLE);
  gst_element_set_state(e, GST_STATE_NULL);
  g_object_get(e, "signature", &sig, nullptr);
  EXPECT_EQ(sig, nullptr);  // unloaded in NULL
  gst_object_unref(e);

  // The train job's signature says so; steps count the optimizer steps.
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().train}}), bus, kTrainCaps);
  g_object_get(h->element, "signature", &sig, "steps", &steps, nullptr);
  EXPECT_STREQ(sig, "fn_train(x: (2, 3) float32, targets: (2, 2) float32) -> Numpy [train]");
  g_free(sig);
  EXPECT_EQ(steps, 0u);
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(gst_harness_push(h, buffer_of(train_inputs(k))), GST_FLOW_OK);
    gst_buffer_unref(gst_harness_pull(h));
  }
  g_object_get(h->element, "steps", &steps, nullptr);
  EXPECT_EQ(steps, 3u);
  gst_harness_teardown(h);
}

// The nicks of enum property `name` of `e`, in order, and its default.
std::vector<std::string> enum_nicks(GstElement* e, const char* name, gint* default_value) {
  GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), name);
  EXPECT_TRUE(ps && G_IS_PARAM_SPEC_ENUM(ps)) << name;
  if (!ps || !G_IS_PARAM_SPEC_ENUM(ps)) return {};
  GEnumClass* k = G_PARAM_SPEC_ENUM(ps)->enum_class;
  std::vector<std::string> nicks;
  for (guint i = 0; i < k->n_values; ++i) nicks.push_back(k->values[i].value_nick);
  *default_value = G_PARAM_SPEC_ENUM(ps)->default_value;
  return nicks;
}

// The nick enum property `name` of `e` holds now.
std::string enum_value(GstElement* e, const char* name) {
  GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), name);
  gint v = -1;
  g_object_get(e, name, &v, nullptr);
  const GEnumValue* ev = g_enum_get_value(G_PARAM_SPEC_ENUM(ps)->enum_class, v);
  return ev ? ev->value_nick : "?";
}

TEST_F(JobFunction, LossIsAnEnumCheckedWhenSet) {
  GstElement* e = make_function({{"loss", "mse"}});
  gint def = -1;
  EXPECT_EQ(enum_nicks(e, "loss", &def), (std::vector<std::string>{"none", "sparse_softmax_cross_entropy", "mse"}));
  EXPECT_EQ(def, 0);
  EXPECT_EQ(enum_value(e, "loss"), "mse");
  gst_util_set_object_arg(G_OBJECT(e), "loss", "cross_entropy");  // not a choice: refused, unchanged
  EXPECT_EQ(enum_value(e, "loss"), "mse");
  gst_util_set_object_arg(G_OBJECT(e), "loss", "sparse_softmax_cross_entropy");
  EXPECT_EQ(enum_value(e, "loss"), "sparse_softmax_cross_entropy");
  gst_object_unref(e);
}

TEST_F(JobFunction, DeviceIsAnEnumOfWhatTheEngineParses) {
  GstElement* e = make_function({{"device", "gpu"}});
  gint def = -1;
  const std::vector<std::string> nicks = enum_nicks(e, "device", &def);
  EXPECT_EQ(nicks, (std::vector<std::string>{"cpu", "gpu", "cuda", "gpu:0", "cuda:0"}));
  EXPECT_EQ(def, 0);  // cpu
  // Every choice is a device the engine's one parser accepts (the element
  // hands the nick to onnx::LoadOptions::device).
  for (const std::string& n : nicks) {
    flow::Device d;
    std::string why;
    EXPECT_TRUE(flow::parse_device(n, &d, &why)) << n << ": " << why;
    EXPECT_EQ(d.tag, n == "cpu" ? "cpu" : "gpu") << n;
    EXPECT_EQ(d.index, 0) << n;
  }
  EXPECT_EQ(enum_value(e, "device"), "gpu");
  // Not a choice: refused when set, the value unchanged. cuda:1 is refused
  // as the engine refuses it (the CUDA backend uses device 0 only).
  for (const char* bad : {"bogus", "cuda:1", "tpu", "CPU"}) {
    gst_util_set_object_arg(G_OBJECT(e), "device", bad);
    EXPECT_EQ(enum_value(e, "device"), "gpu") << bad;
  }
  gst_util_set_object_arg(G_OBJECT(e), "device", "cuda:0");
  EXPECT_EQ(enum_value(e, "device"), "cuda:0");
  gst_util_set_object_arg(G_OBJECT(e), "device", "cpu");
  EXPECT_EQ(enum_value(e, "device"), "cpu");
  gst_object_unref(e);
}

TEST_F(JobFunction, PrecisionIsAnEnumCheckedWhenSet) {
  GstElement* e = make_function({{"precision", "bf16"}});
  gint def = -1;
  EXPECT_EQ(enum_nicks(e, "precision", &def), (std::vector<std::string>{"auto", "fp32", "bf16"}));
  EXPECT_EQ(def, 0);  // auto: the job file's jobflow.precision
  EXPECT_EQ(enum_value(e, "precision"), "bf16");
  for (const char* bad : {"fp16", "BF16", "float32"}) {
    gst_util_set_object_arg(G_OBJECT(e), "precision", bad);
    EXPECT_EQ(enum_value(e, "precision"), "bf16") << bad;
  }
  gst_util_set_object_arg(G_OBJECT(e), "precision", "fp32");
  EXPECT_EQ(enum_value(e, "precision"), "fp32");
  gst_object_unref(e);
}

TEST_F(JobFunction, EveryPrecisionLoadsTheJob) {
  // Each choice is one onnx::LoadOptions::precision accepts ("" for auto).
  for (const char* p : {"auto", "fp32", "bf16"}) {
    GstElement* e = make_function({{"job", jobs().affine}, {"precision", p}});
    ASSERT_EQ(gst_element_set_state(e, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS) << p;
    gchar* sig = nullptr;
    g_object_get(e, "signature", &sig, nullptr);
    EXPECT_NE(sig, nullptr) << p;
    g_free(sig);
    gst_element_set_state(e, GST_STATE_NULL);
    gst_object_unref(e);
  }
}

// A job that asks for bf16 (the property, or the job file's
// jobflow.precision under precision=auto) and computes in float32 on this
// CPU is a warning on the bus that names what asked and gives the engine's
// reason (jobflow::bf16_fallback()); where it computes in bf16, or float32
// was asked for, there is none. Both JOBFLOW_BF16 modes run, so that each
// CPU checks at least the case it has (the test setup sets "always").
TEST_F(JobFunction, Bf16ThatRunsInFloat32IsAWarningNamingWhatAsked) {
  // JOBFLOW_BF16 as it was when the test ends, however it ends (an ASSERT
  // returns early).
  struct RestoreEnv {
    const char* was = std::getenv("JOBFLOW_BF16");
    const std::string saved = was ? was : "";
    const bool had = was != nullptr;
    ~RestoreEnv() {
      if (had) ::setenv("JOBFLOW_BF16", saved.c_str(), 1); else ::unsetenv("JOBFLOW_BF16");
    }
  } restore;
  const std::string file_bf16 = (tmp_root() / "jobs" / "affine_bf16.onnx").string();
  {
    auto job = flow::global_function(flow::Predict,
                                     flow::function_config().name("affine_bf16").enable_auto_mixed_precision(true),
                                     {flow::Numpy::Placeholder({4}, flow::Float, "x")},
                                     [](Blob x) -> flow::Numpy { return x * 2.0 + 1.0; });
    flow::onnx::save(*job.compiled(), file_bf16);
  }
  struct Case {
    std::string job, precision;
    const char* asker;  // nullptr: float32 asked for, no warning
  };
  const std::vector<Case> cases = {{jobs().affine, "fp32", nullptr},
                                   {jobs().affine, "auto", nullptr},
                                   {jobs().affine, "bf16", "precision=bf16"},
                                   {file_bf16, "auto", "the job file's jobflow.precision=bf16"},
                                   {file_bf16, "fp32", nullptr}};
  for (const char* mode : {"auto", "always"}) {
    ::setenv("JOBFLOW_BF16", mode, 1);
    const std::string why = flow::bf16_fallback();
    for (const Case& c : cases) {
      const std::string at = std::string(mode) + " " + c.job + " precision=" + c.precision;
      Bus bus;
      GstElement* e = make_function({{"job", c.job}, {"precision", c.precision}});
      bus.attach(e);
      ASSERT_EQ(gst_element_set_state(e, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS) << at << errors_text(bus);
      const std::vector<Bus::Error> w = bus.warnings();
      if (c.asker && !why.empty()) {
        ASSERT_EQ(w.size(), 1u) << at;
        EXPECT_EQ(w[0].domain, GST_RESOURCE_ERROR) << at;
        EXPECT_EQ(w[0].code, GST_RESOURCE_ERROR_SETTINGS) << at;
        EXPECT_EQ(w[0].text.substr(0, w[0].text.find(" | ")),
                  std::string(c.asker) + ": " + why + "; the job runs in float32")
            << at;
      } else {
        EXPECT_TRUE(w.empty()) << at << ": " << (w.empty() ? "" : w[0].text);
      }
      gst_element_set_state(e, GST_STATE_NULL);
      gst_object_unref(e);
    }
  }
  // A bad JOBFLOW_BF16 fails the start, naming the variable, whatever the CPU.
  ::setenv("JOBFLOW_BF16", "yes", 1);
  const std::string err =
      start_error(make_function({{"job", jobs().affine}, {"precision", "bf16"}}), GST_RESOURCE_ERROR,
                  GST_RESOURCE_ERROR_SETTINGS);
  EXPECT_HAS(err, "precision=\"bf16\": JOBFLOW_BF16='yes': expected auto (bf16 where it is faster) or always");
}

TEST_F(JobFunction, Defaults) {
  GstElement* e = gst_element_factory_make("jobfunction", nullptr);
  ASSERT_NE(e, nullptr);
  gchar *job = nullptr, *ck = nullptr;
  guint mif = 0, si = 99, mi = 0, mb = 0;
  g_object_get(e, "job", &job, "checkpoint", &ck, "max-in-flight", &mif, "save-interval", &si, "message-interval",
               &mi, "max-batch", &mb, nullptr);
  EXPECT_EQ(mb, 8u);
  EXPECT_EQ(job, nullptr);
  EXPECT_EQ(enum_value(e, "device"), "cpu");
  EXPECT_EQ(enum_value(e, "precision"), "auto");
  EXPECT_EQ(enum_value(e, "loss"), "none");
  EXPECT_EQ(ck, nullptr);
  EXPECT_EQ(mif, 2u);
  EXPECT_EQ(si, 0u);
  EXPECT_EQ(mi, 1u);
  gchar* sd = reinterpret_cast<gchar*>(1);
  g_object_get(e, "summary-dir", &sd, nullptr);
  EXPECT_EQ(sd, nullptr);  // off
  gst_object_unref(e);
}

// ------------------------------------------------- adaptive batching

namespace {

constexpr const char* kDynCaps1 =
    "other/tensors,format=static,num_tensors=1,dimensions=(string)4:1,types=(string)float32,framerate=30/1";
constexpr const char* kDynCaps2 =
    "other/tensors,format=static,num_tensors=1,dimensions=(string)4:2,types=(string)float32,framerate=30/1";

// Frame i of the dyn job: `rows` rows of four distinct values, timestamps
// and offsets of its own, a JobflowBatchMeta standing for any meta.
GstBuffer* dyn_buffer(int i, int rows = 1) {
  std::vector<float> v;
  for (int r = 0; r < rows; ++r)
    for (float x : affine_in(10 * i + r)) v.push_back(x);
  GstBuffer* b = buffer_of({Tensor::from<float>({rows, 4}, v)});
  GST_BUFFER_PTS(b) = 1000 * GST_SECOND + i * GST_MSECOND;
  GST_BUFFER_DTS(b) = 999 * GST_SECOND + i * GST_MSECOND;
  GST_BUFFER_DURATION(b) = GST_MSECOND;
  GST_BUFFER_OFFSET(b) = 10 + i;
  GST_BUFFER_OFFSET_END(b) = 11 + i;
  if (i % 2) GST_BUFFER_FLAG_SET(b, GST_BUFFER_FLAG_DELTA_UNIT);
  JobflowBatchMeta* bm = jobflow_buffer_add_batch_meta(b, 1);
  bm->valid = 1;
  bm->offset[0] = 500 + i;
  return b;
}

/* Holds the element's task in its push of the first result (a blocking
 * probe on its src pad), so that what the test pushes meanwhile queues up:
 * adaptive batching becomes deterministic without any sleep. */
class SrcBlock {
 public:
  explicit SrcBlock(GstElement* e) : pad_(gst_element_get_static_pad(e, "src")) {
    id_ = gst_pad_add_probe(pad_, static_cast<GstPadProbeType>(GST_PAD_PROBE_TYPE_BLOCK | GST_PAD_PROBE_TYPE_BUFFER),
                            [](GstPad*, GstPadProbeInfo*, gpointer p) -> GstPadProbeReturn {
                              auto* self = static_cast<SrcBlock*>(p);
                              std::lock_guard<std::mutex> lk(self->mu_);
                              self->blocked_ = true;
                              self->cv_.notify_all();
                              return GST_PAD_PROBE_OK;
                            },
                            this, nullptr);
  }
  ~SrcBlock() {
    release();
    gst_object_unref(pad_);
  }
  // Waits until the task is held with a result.
  void wait_blocked() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return blocked_; });
  }
  void release() {
    if (id_) gst_pad_remove_probe(pad_, id_);
    id_ = 0;
  }

 private:
  GstPad* pad_;
  gulong id_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool blocked_ = false;
};

/* Runs frames 0..n-1 (rows each) through a jobfunction on `job` with these
 * properties: frame 0 alone, then frames 1..n-1 pushed while the task holds
 * frame 0's result, then EOS. Returns the results in order (every one
 * before EOS, checked) and the job's calls. */
struct QueuedRun {
  std::vector<GstBuffer*> out;
  guint64 calls = 0;
  std::vector<guint64> step_messages;
  std::string errors;
  ~QueuedRun() {
    for (GstBuffer* b : out) gst_buffer_unref(b);
  }
};

void run_queued(const std::string& job, std::initializer_list<std::pair<const char*, std::string>> props, int n,
                int rows, QueuedRun* r) {
  Bus bus;
  GstElement* e = make_function(props);
  g_object_set(e, "job", job.c_str(), nullptr);
  GstHarness* h = harness(e, bus, rows == 1 ? kDynCaps1 : kDynCaps2);
  {
    SrcBlock block(h->element);
    ASSERT_EQ(gst_harness_push(h, dyn_buffer(0, rows)), GST_FLOW_OK);
    block.wait_blocked();
    for (int i = 1; i < n; ++i) ASSERT_EQ(gst_harness_push(h, dyn_buffer(i, rows)), GST_FLOW_OK) << i;
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
  }  // released: the task goes on with what queued
  ASSERT_TRUE(pull_until_eos(h));
  EXPECT_EQ(gst_harness_buffers_in_queue(h), guint(n)) << "every result before EOS";
  while (GstBuffer* b = gst_harness_try_pull(h)) r->out.push_back(b);
  g_object_get(h->element, "steps", &r->calls, nullptr);
  for (const GstStructure* m : bus.element(JOBFLOW_STEP_MESSAGE_NAME)) r->step_messages.push_back(u64(m, "step"));
  r->errors = errors_text(bus);
  gst_harness_teardown(h);
}

}  // namespace

TEST_F(JobFunction, AdaptiveBatchingGivesEachFrameItsResultsAsBatchOneDoes) {
  constexpr int kN = 11;
  QueuedRun batched, single;
  ASSERT_NO_FATAL_FAILURE(run_queued(jobs().dyn, {{"max-batch", "4"}, {"max-in-flight", "16"}}, kN, 1, &batched));
  ASSERT_NO_FATAL_FAILURE(run_queued(jobs().dyn, {{"max-batch", "1"}, {"max-in-flight", "16"}}, kN, 1, &single));
  EXPECT_EQ(batched.errors, "");
  EXPECT_EQ(single.errors, "");
  // Frame 0 alone, then the ten queued ones in calls of at most 4: 4, 4, 2.
  EXPECT_EQ(batched.calls, 4u);
  EXPECT_EQ(single.calls, guint64(kN));
  // One step report per frame either way, numbered as the buffers came.
  std::vector<guint64> want_steps;
  for (int i = 0; i < kN; ++i) want_steps.push_back(i + 1);
  EXPECT_EQ(batched.step_messages, want_steps);
  EXPECT_EQ(single.step_messages, want_steps);
  ASSERT_EQ(batched.out.size(), size_t(kN));
  ASSERT_EQ(single.out.size(), size_t(kN));
  for (int i = 0; i < kN; ++i) {
    GstBuffer* b = batched.out[i];
    GstBuffer* s = single.out[i];
    // Values: the batch-1 run's, and the frame's own.
    ASSERT_EQ(gst_buffer_n_memory(b), 2u) << i;
    EXPECT_EQ(tensor<float>(b, 0), tensor<float>(s, 0)) << i;
    EXPECT_EQ(tensor<float>(b, 1), tensor<float>(s, 1)) << i;
    EXPECT_EQ(tensor<float>(b, 0), affine_out(10 * i)) << i;
    const std::vector<float> in = affine_in(10 * i);
    EXPECT_EQ(tensor<float>(b, 1), std::vector<float>{in[0] + in[1] + in[2] + in[3]}) << i;
    // Timestamps, offsets, flags and metas: the frame's own.
    EXPECT_EQ(GST_BUFFER_PTS(b), 1000 * GST_SECOND + i * GST_MSECOND) << i;
    EXPECT_EQ(GST_BUFFER_DTS(b), 999 * GST_SECOND + i * GST_MSECOND) << i;
    EXPECT_EQ(GST_BUFFER_DURATION(b), GST_MSECOND) << i;
    EXPECT_EQ(GST_BUFFER_OFFSET(b), guint64(10 + i)) << i;
    EXPECT_EQ(GST_BUFFER_OFFSET_END(b), guint64(11 + i)) << i;
    EXPECT_EQ(GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_DELTA_UNIT), i % 2 == 1) << i;
    const JobflowBatchMeta* bm = jobflow_buffer_get_batch_meta(b);
    ASSERT_NE(bm, nullptr) << i;
    EXPECT_EQ(bm->offset[0], guint64(500 + i)) << i;
    // The tensor meta describes this frame's rows: (1, 4) and (1,).
    const JobflowTensorMeta* tm = jobflow_buffer_get_tensor_meta(b);
    ASSERT_NE(tm, nullptr) << i;
    std::vector<flow::TensorSpec> specs;
    ASSERT_TRUE(jobflow::gst::specs_from_meta(tm, &specs));
    EXPECT_EQ(specs, (std::vector<flow::TensorSpec>{{{1, 4}, flow::Float32}, {{1}, flow::Float32}})) << i;
  }
}

TEST_F(JobFunction, AdaptiveBatchNeverExceedsMaxBatchRows) {
  // Frames of two rows, max-batch=5: two frames (4 rows) a call, never three (6).
  constexpr int kN = 7;
  QueuedRun r;
  ASSERT_NO_FATAL_FAILURE(run_queued(jobs().dyn, {{"max-batch", "5"}, {"max-in-flight", "16"}}, kN, 2, &r));
  EXPECT_EQ(r.errors, "");
  EXPECT_EQ(r.calls, 4u);  // frame 0, then 1-2, 3-4, 5-6
  ASSERT_EQ(r.out.size(), size_t(kN));
  for (int i = 0; i < kN; ++i) {
    std::vector<float> want = affine_out(10 * i);
    for (float x : affine_out(10 * i + 1)) want.push_back(x);
    EXPECT_EQ(tensor<float>(r.out[i], 0), want) << i;
    EXPECT_EQ(GST_BUFFER_PTS(r.out[i]), 1000 * GST_SECOND + i * GST_MSECOND) << i;
  }
  // A frame as large as max-batch runs alone.
  QueuedRun whole;
  ASSERT_NO_FATAL_FAILURE(run_queued(jobs().dyn, {{"max-batch", "2"}, {"max-in-flight", "16"}}, kN, 2, &whole));
  EXPECT_EQ(whole.calls, guint64(kN));
  EXPECT_EQ(whole.errors, "");
}

TEST_F(JobFunction, AdaptiveBatchingLeavesOtherJobsOneCallPerBuffer) {
  // The affine job's batch is fixed ((4,)): as before, one call per buffer.
  Bus bus;
  GstHarness* h = harness(make_function({{"job", jobs().affine}, {"max-batch", "8"}}), bus, kAffineCaps);
  constexpr int kN = 3;  // within max-in-flight (2) + the one held
  {
    SrcBlock block(h->element);
    ASSERT_EQ(gst_harness_push(h, affine_buffer(0)), GST_FLOW_OK);
    block.wait_blocked();
    for (int i = 1; i < kN; ++i) ASSERT_EQ(gst_harness_push(h, affine_buffer(i)), GST_FLOW_OK);
  }
  for (int i = 0; i < kN; ++i) {
    GstBuffer* out = gst_harness_pull(h);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(tensor<float>(out, 0), affine_out(i));
    gst_buffer_unref(out);
  }
  guint64 steps = 0;
  g_object_get(h->element, "steps", &steps, nullptr);
  EXPECT_EQ(steps, guint64(kN));
  EXPECT_EQ(errors_text(bus), "");
  gst_harness_teardown(h);

  // dim 0 known per call, but the return sums over it: not split, not batched.
  QueuedRun r;
  ASSERT_NO_FATAL_FAILURE(run_queued(jobs().dyn_sum, {{"max-batch", "8"}, {"max-in-flight", "16"}}, 5, 1, &r));
  EXPECT_EQ(r.errors, "");
  EXPECT_EQ(r.calls, 5u);
  ASSERT_EQ(r.out.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(tensor<float>(r.out[i], 0), affine_in(10 * i)) << i;
}

TEST_F(JobFunction, AdaptiveBatchingQueueHoldsMaxBatchBuffers) {
  // max-in-flight 2 but max-batch 6: six buffers may wait behind the one
  // held, so the next call takes all six (pushing them must not block).
  QueuedRun r;
  ASSERT_NO_FATAL_FAILURE(run_queued(jobs().dyn, {{"max-batch", "6"}}, 7, 1, &r));
  EXPECT_EQ(r.errors, "");
  EXPECT_EQ(r.calls, 2u);
  ASSERT_EQ(r.out.size(), 7u);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(tensor<float>(r.out[i], 0), affine_out(10 * i)) << i;
}

// OneFlow's own signature tests (test_global_function_signature.py, v0.4),
// ported: each job returns its input through one return form, and the test
// checks the value arrives intact through that form, synchronously and
// through Callback<T>. (flow.watch has no counterpart here.)
#include <gtest/gtest.h>

#include <jobflow/jobflow.h>

#include "../../pipelines/seeds/cli.h"
#include "../../pipelines/seeds/seed_models.h"

#include <map>
#include <tuple>
#include <vector>

namespace flow = jobflow;
using flow::Blob;
using flow::Tensor;

namespace {

Tensor data10() {
  Tensor t({10}, flow::Float);
  for (int i = 0; i < 10; ++i) t.data<float>()[i] = 1.0f + 0.5f * i;  // not all ones: catches mix-ups
  return t;
}

void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  EXPECT_TRUE(got.equal(want)) << got.str() << " vs " << want.str();
}

// Runs a Callback job and returns what the callback received (after sync).
template <class Job, class... A>
auto callback_result(Job& job, const A&... args) {
  using H = typename Job::Host;
  H got{};
  int calls = 0;
  job(args...)([&](H r) {
    got = std::move(r);
    ++calls;
  });
  job.sync();
  EXPECT_EQ(calls, 1);
  return got;
}

}  // namespace

TEST(Signature, ReturnNone) {
  int ran = 0;
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})}, [&](Blob) { ++ran; });
  static_assert(std::is_void_v<decltype(foo(data10()))>);
  foo(data10());
  EXPECT_EQ(ran, 1);  // the body runs once, at definition
}

TEST(Signature, Numpy) {
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})}, [](Blob x) -> flow::Numpy { return x; });
  expect_same(foo(data10()), data10());
}

TEST(Signature, ListNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::ListNumpy::Placeholder({10})},
                                   [](Blob x) -> flow::ListNumpy { return x; });
  std::vector<Tensor> r = foo(std::vector<Tensor>{data10()});
  ASSERT_EQ(r.size(), 1u);
  expect_same(r[0], data10());
}

TEST(Signature, ListListNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::ListListNumpy::Placeholder({10})},
                                   [](Blob x) -> flow::ListListNumpy { return x; });
  auto r = foo(std::vector<std::vector<Tensor>>{{data10()}});
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r[0].size(), 1u);
  expect_same(r[0][0], data10());
}

TEST(Signature, ListListNumpyOfSeveralItems) {
  auto foo = flow::global_function(flow::Predict, {flow::ListListNumpy::Placeholder({10}, flow::Float, "x", 3)},
                                   [](Blob x) -> flow::ListListNumpy {
                                     EXPECT_EQ(x.shape(), (flow::Shape{3, 10}));
                                     return x;
                                   });
  Tensor a = data10(), b = flow::Tensor({10}, flow::Float), c = data10().clone();
  c.data<float>()[3] = -7;
  auto r = foo(std::vector<std::vector<Tensor>>{{a, b, c}});
  ASSERT_EQ(r[0].size(), 3u);
  expect_same(r[0][0], a);
  expect_same(r[0][1], b);
  expect_same(r[0][2], c);
}

TEST(Signature, DictNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})},
                                   [](Blob x) -> std::map<std::string, flow::Numpy> { return {{"x", x}}; });
  expect_same(foo(data10())["x"], data10());
}

TEST(Signature, DictListNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::ListNumpy::Placeholder({10})},
                                   [](Blob x) -> std::map<std::string, flow::ListNumpy> { return {{"x", x}}; });
  expect_same(foo(std::vector<Tensor>{data10()})["x"][0], data10());
}

TEST(Signature, DictListListNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::ListListNumpy::Placeholder({10})},
                                   [](Blob x) -> std::map<std::string, flow::ListListNumpy> { return {{"x", x}}; });
  expect_same(foo(std::vector<std::vector<Tensor>>{{data10()}})["x"][0][0], data10());
}

TEST(Signature, DictNestingNumpy) {
  auto foo = flow::global_function(
      flow::Predict, {flow::Numpy::Placeholder({10})},
      [](Blob x) -> std::map<std::string, std::map<std::string, flow::Numpy>> { return {{"x", {{"x", x}}}}; });
  expect_same(foo(data10())["x"]["x"], data10());
}

TEST(Signature, DictNestingListNumpy) {
  auto foo = flow::global_function(
      flow::Predict, {flow::ListNumpy::Placeholder({10})},
      [](Blob x) -> std::map<std::string, std::map<std::string, flow::ListNumpy>> { return {{"x", {{"x", x}}}}; });
  expect_same(foo(std::vector<Tensor>{data10()})["x"]["x"][0], data10());
}

TEST(Signature, DictNestingListListNumpy) {
  auto foo = flow::global_function(
      flow::Predict, {flow::ListListNumpy::Placeholder({10})},
      [](Blob x) -> std::map<std::string, std::map<std::string, flow::ListListNumpy>> { return {{"x", {{"x", x}}}}; });
  expect_same(foo(std::vector<std::vector<Tensor>>{{data10()}})["x"]["x"][0][0], data10());
}

TEST(Signature, TupleNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::TuplePlaceholder({flow::Numpy::Placeholder({10})})},
                                   [](std::tuple<Blob> x) -> std::tuple<flow::Numpy> { return {std::get<0>(x)}; });
  auto r = foo(std::tuple<Tensor>{data10()});
  expect_same(std::get<0>(r), data10());
}

TEST(Signature, TupleListNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::TuplePlaceholder({flow::ListNumpy::Placeholder({10})})},
                                   [](std::tuple<Blob> x) -> std::tuple<flow::ListNumpy> { return {std::get<0>(x)}; });
  auto r = foo(std::tuple<std::vector<Tensor>>{{data10()}});
  expect_same(std::get<0>(r)[0], data10());
}

TEST(Signature, TupleListListNumpy) {
  auto foo = flow::global_function(
      flow::Predict, {flow::TuplePlaceholder({flow::ListListNumpy::Placeholder({10})})},
      [](std::tuple<Blob> x) -> std::tuple<flow::ListListNumpy> { return {std::get<0>(x)}; });
  auto r = foo(std::tuple<std::vector<std::vector<Tensor>>>{{{data10()}}});
  expect_same(std::get<0>(r)[0][0], data10());
}

TEST(Signature, TupleOfTwoInputsAsVector) {
  auto foo = flow::global_function(
      flow::Predict, {flow::TuplePlaceholder({flow::Numpy::Placeholder({10}), flow::Numpy::Placeholder({2}, flow::Int32)})},
      [](std::vector<Blob> x) -> std::tuple<flow::Numpy, flow::Numpy> { return {x[1], x[0]}; });
  Tensor i = Tensor::from<int32_t>({2}, {4, -5});
  auto [a, b] = foo(std::vector<Tensor>{data10(), i});
  expect_same(a, i);
  expect_same(b, data10());
}

TEST(Signature, CallbackNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})},
                                   [](Blob x) -> flow::Callback<flow::Numpy> { return x; });
  expect_same(callback_result(foo, data10()), data10());
}

TEST(Signature, CallbackListNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::ListNumpy::Placeholder({10})},
                                   [](Blob x) -> flow::Callback<flow::ListNumpy> { return x; });
  expect_same(callback_result(foo, std::vector<Tensor>{data10()})[0], data10());
}

TEST(Signature, CallbackListListNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::ListListNumpy::Placeholder({10})},
                                   [](Blob x) -> flow::Callback<flow::ListListNumpy> { return x; });
  expect_same(callback_result(foo, std::vector<std::vector<Tensor>>{{data10()}})[0][0], data10());
}

TEST(Signature, CallbackTupleNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})},
                                   [](Blob x) -> flow::Callback<std::tuple<flow::Numpy>> { return std::tuple<flow::Numpy>{x}; });
  expect_same(std::get<0>(callback_result(foo, data10())), data10());
}

TEST(Signature, CallbackTupleListNumpy) {
  auto foo = flow::global_function(
      flow::Predict, {flow::ListNumpy::Placeholder({10})},
      [](Blob x) -> flow::Callback<std::tuple<flow::ListNumpy>> { return std::tuple<flow::ListNumpy>{x}; });
  expect_same(std::get<0>(callback_result(foo, std::vector<Tensor>{data10()}))[0], data10());
}

TEST(Signature, CallbackTupleListListNumpy) {
  auto foo = flow::global_function(
      flow::Predict, {flow::ListListNumpy::Placeholder({10})},
      [](Blob x) -> flow::Callback<std::tuple<flow::ListListNumpy>> { return std::tuple<flow::ListListNumpy>{x}; });
  expect_same(std::get<0>(callback_result(foo, std::vector<std::vector<Tensor>>{{data10()}}))[0][0], data10());
}

TEST(Signature, CallbackDictNumpy) {
  auto foo = flow::global_function(
      flow::Predict, {flow::Numpy::Placeholder({10})},
      [](Blob x) -> flow::Callback<std::map<std::string, flow::Numpy>> { return std::map<std::string, flow::Numpy>{{"x", x}}; });
  expect_same(callback_result(foo, data10())["x"], data10());
}

// Bundle: any nesting of lists, tuples and dicts (with int keys too).
TEST(Signature, BundleListNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})},
                                   [](Blob x) -> std::vector<flow::Numpy> { return {x}; });
  expect_same(foo(data10())[0], data10());
}

using Mix = std::tuple<flow::Numpy, std::tuple<flow::Numpy>, std::vector<flow::Numpy>,
                       std::map<std::string, std::map<int, flow::Numpy>>>;

TEST(Signature, BundleMixNestingNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})}, [](Blob x) -> Mix {
    return Mix{x, std::tuple<flow::Numpy>{x}, {x, x, x}, {{"x", {{256, x}}}}};
  });
  auto r = foo(data10());
  expect_same(std::get<0>(r), data10());
  expect_same(std::get<0>(std::get<1>(r)), data10());
  ASSERT_EQ(std::get<2>(r).size(), 3u);
  for (auto& t : std::get<2>(r)) expect_same(t, data10());
  expect_same(std::get<3>(r).at("x").at(256), data10());
  EXPECT_EQ(foo.signature().output_structure.str(), "(Numpy, (Numpy,), [Numpy, Numpy, Numpy], {x: {256: Numpy}})");
}

using MixL = std::tuple<flow::ListNumpy, std::tuple<flow::ListNumpy>, std::vector<flow::ListNumpy>,
                        std::map<std::string, std::map<int, flow::ListNumpy>>>;

TEST(Signature, BundleMixNestingListNumpy) {
  auto foo = flow::global_function(flow::Predict, {flow::ListNumpy::Placeholder({10})}, [](Blob x) -> MixL {
    return MixL{x, std::tuple<flow::ListNumpy>{x}, {x, x, x}, {{"x", {{256, x}}}}};
  });
  auto r = foo(std::vector<Tensor>{data10()});
  expect_same(std::get<0>(r)[0], data10());
  expect_same(std::get<0>(std::get<1>(r))[0], data10());
  for (auto& t : std::get<2>(r)) expect_same(t[0], data10());
  expect_same(std::get<3>(r).at("x").at(256)[0], data10());
}

TEST(Signature, CallbackBundleMix) {
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})}, [](Blob x) -> flow::Callback<Mix> {
    return Mix{x, std::tuple<flow::Numpy>{x}, {x, x, x}, {{"x", {{256, x}}}}};
  });
  auto r = callback_result(foo, data10());
  expect_same(std::get<3>(r).at("x").at(256), data10());
  expect_same(std::get<2>(r).at(2), data10());
}

TEST(Signature, AsyncOfASyncJob) {
  // Any job can also be called asynchronously.
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})}, [](Blob x) -> flow::Numpy { return x * 2.0; });
  Tensor got;
  foo.async(data10())([&](Tensor t) { got = t; });
  foo.sync();
  ASSERT_TRUE(got.defined());
  EXPECT_FLOAT_EQ(got.data<float>()[3], 2 * (1.0f + 1.5f));
}

// OneFlow's older result styles (seed 001): .get() and .async_get(cb) on
// what an asynchronous call returns.
TEST(Signature, LegacyGet) {
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})},
                                   [](Blob x) -> flow::Callback<std::tuple<flow::Numpy, flow::Numpy>> {
                                     return std::tuple<flow::Numpy, flow::Numpy>{x, x * 2.0};
                                   });
  auto [a, b] = foo(data10()).get();
  expect_same(a, data10());
  EXPECT_FLOAT_EQ(b.data<float>()[1], 3.0f);
  // A synchronous job, through job.async(...).get().
  auto bar = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})}, [](Blob x) -> flow::Numpy { return x; });
  expect_same(bar.async(data10()).get(), data10());
  auto cb = bar.async(data10());
  cb.get();
  EXPECT_THROW(cb.get(), flow::Error);  // one result per call
}

TEST(Signature, LegacyAsyncGet) {
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({10})},
                                   [](Blob x) -> flow::Callback<std::map<std::string, flow::Numpy>> {
                                     return std::map<std::string, flow::Numpy>{{"x", x}};
                                   });
  std::vector<float> firsts;
  for (int i = 0; i < 5; ++i) {
    Tensor t = data10();
    t.data<float>()[0] = static_cast<float>(i);
    foo(t).async_get([&](std::map<std::string, Tensor> r) { firsts.push_back(r.at("x").data<float>()[0]); });
  }
  foo.sync();
  EXPECT_EQ(firsts, (std::vector<float>{0, 1, 2, 3, 4}));  // in call order
}

TEST(Signature, LegacyGetRethrowsTheCallsError) {
  auto foo = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2})},
                                   [](Blob x) -> flow::Callback<flow::Numpy> {
                                     return flow::gather(x, flow::constant(flow::Tensor::from<int32_t>({1}, {7})));
                                   });
  try {
    foo(flow::Tensor::from<float>({2}, {1, 2})).get();
    FAIL() << "an out-of-range gather should fail at run time";
  } catch (const flow::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gather"), std::string::npos) << e.what();
  }
}

// Seed 001's examples (OneFlow 0.1: results taken with .get() and
// .async_get(cb)) in C++, as docs/user-guide/python.md shows them next to
// the Python: the MLP train job, get() and async_get(cb_print_loss); the
// LeNet eval job returning a dict, async_get(acc). Random batches: what is
// checked is the plumbing (one step per call, callbacks in call order,
// the dict's two results), not the accuracy.
namespace seed001 {
using seeds::BATCH_SIZE;

int g_i = 0;
std::vector<double> g_printed;
void cb_print_loss(flow::Tensor result) {
  if (g_i % 20 == 0) g_printed.push_back(result.mean());
  g_i += 1;
}

int64_t g_total = 0;
int64_t g_correct = 0;
void acc(std::map<std::string, flow::Tensor> eval_result) {
  const flow::Tensor& labels = eval_result.at("labels");
  const flow::Tensor& logits = eval_result.at("logits");
  g_correct += seeds::count_correct(labels, logits);
  g_total += labels.dim(0);
}

std::pair<Tensor, Tensor> batch(int k) {
  Tensor images({BATCH_SIZE, 1, 28, 28}, flow::Float);
  Tensor labels({BATCH_SIZE}, flow::Int32);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<float>()[i] = static_cast<float>((i * 7 + k * 13) % 17) / 17;
  for (int64_t i = 0; i < BATCH_SIZE; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i + k) % 10);
  return {images, labels};
}
}  // namespace seed001

TEST(Signature, Seed001ExamplesInCpp) {
  using namespace seed001;
  flow::session::reset();
  auto train_job = flow::global_function(flow::Train, flow::function_config().name("train_job"),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images"),
       flow::Numpy::Placeholder({BATCH_SIZE}, flow::Int32, "labels")},
      [](flow::Blob images, flow::Blob labels) -> flow::Callback<flow::Numpy> {
        auto placement = flow::scope::placement("cpu", "0:0");
        auto logits = seeds::mlp(images);
        auto loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits, "softmax_loss");
        flow::optimizer::PiecewiseConstantScheduler lr_scheduler({}, {0.1});  // primary_lr(0.1)
        flow::optimizer::SGD(lr_scheduler, /*momentum=*/0).minimize(loss);     // naive_conf
        return loss;
      });
  flow::CheckPoint().init();
  std::vector<double> got;
  for (int k = 0; k < 4; ++k) {
    auto [images, labels] = batch(k);
    if (k % 2 == 0) {
      flow::Tensor loss = train_job(images, labels).get();  // blocks: the result
      ASSERT_EQ(loss.shape(), (flow::Shape{BATCH_SIZE}));
      got.push_back(loss.mean());
    } else {
      train_job(images, labels).async_get(cb_print_loss);  // cb_print_loss(result) later
    }
  }
  train_job.sync();
  EXPECT_EQ(g_i, 2);
  ASSERT_EQ(g_printed.size(), 1u);  // the first callback's loss (every 20th)
  EXPECT_EQ(got.size(), 2u);
  // One train step per call, whichever style took its result.
  EXPECT_EQ(flow::session::variable(flow::session::train_step_variable("train_job")).data<int64_t>()[0], 4);

  auto eval_job = flow::global_function(flow::Predict, flow::function_config().name("eval_job"),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images"),
       flow::Numpy::Placeholder({BATCH_SIZE}, flow::Int32, "labels")},
      [](flow::Blob images, flow::Blob labels) -> flow::Callback<std::map<std::string, flow::Numpy>> {
        auto placement = flow::scope::placement("gpu", "0:0");
        auto logits = seeds::lenet(images, /*train=*/true);
        auto loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits, "softmax_loss");
        (void)loss;
        return std::map<std::string, flow::Numpy>{{"labels", labels}, {"logits", logits}};
      });
  flow::CheckPoint().init();
  for (int k = 0; k < 3; ++k) {
    auto [images, labels] = batch(k);
    eval_job(images, labels).async_get(acc);
  }
  eval_job.sync();
  EXPECT_EQ(g_total, 3 * BATCH_SIZE);
  EXPECT_GE(g_correct, 0);
  EXPECT_LE(g_correct, g_total);
}

// Seed pages 002/004 (defining and calling): a config made by a function,
// passed to global_function, the MLP train job called in a loop, in C++ as
// docs/user-guide/python.md shows it next to the Python.
namespace seed002 {
using seeds::BATCH_SIZE;

flow::FunctionConfig get_train_config() {
  flow::FunctionConfig config = flow::function_config();
  config.default_data_type(flow::Float);
  return config;
}
}  // namespace seed002

TEST(Signature, Seed002ExamplesInCpp) {
  using namespace seed002;
  flow::session::reset();
  auto train_job = flow::global_function(flow::Train, get_train_config().name("train_job"),
      {flow::Numpy::Placeholder({BATCH_SIZE, 1, 28, 28}, flow::Float, "images"),
       flow::Numpy::Placeholder({BATCH_SIZE}, flow::Int32, "labels")},
      [](flow::Blob images, flow::Blob labels) -> flow::Numpy {
        // mlp
        auto initializer = flow::truncated_normal(0.1);
        auto reshape = flow::reshape(images, {images.shape()[0], -1});
        auto hidden = flow::layers::dense(reshape, 512,
            {.activation = flow::nn::relu, .kernel_initializer = initializer, .name = "hidden"});
        auto logits = flow::layers::dense(hidden, 10, {.kernel_initializer = initializer, .name = "output"});

        auto loss = flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits, "softmax_loss");
        flow::optimizer::PiecewiseConstantScheduler lr_scheduler({}, {0.1});
        flow::optimizer::SGD(lr_scheduler, /*momentum=*/0).minimize(loss);
        return loss;
      });
  EXPECT_EQ(train_job.signature().str(),
            "train_job(images: (100, 1, 28, 28) float32, labels: (100,) int32) -> Numpy [train]");
  flow::CheckPoint().init();
  std::vector<double> printed;
  auto [images, labels] = seed001::batch(0);
  for (int epoch = 0; epoch < 3; ++epoch)  // the page's loop, over one batch
    for (size_t i = 0; i < 1; ++i) {
      flow::Tensor loss = train_job(images, labels);
      if (i % 20 == 0) printed.push_back(loss.mean());
    }
  ASSERT_EQ(printed.size(), 3u);
  EXPECT_NE(printed[1], printed[0]);  // each call trained: the next one sees new weights
  EXPECT_EQ(flow::session::variable(flow::session::train_step_variable("train_job")).data<int64_t>()[0], 3);
}

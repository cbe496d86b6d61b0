// The rules of job functions: call-time checks, sync/async ordering and
// backpressure, train vs predict, optimizers, checkpoints, compiler output.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jobflow/backend.h>
#include <jobflow/checkpoint_io.h>
#include "compiler.h"
#include <jobflow/jobflow.h>

#include "checkpoint_io_testing.h"
#include "errors.h"
#include "os_threads.h"
#include "temp_dir.h"
#include "tensor_compare.h"
#include "cpu/isa.h"

#include <atomic>
#include <optional>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

namespace flow = jobflow;
using flow::Blob;
using flow::Tensor;
namespace fs = std::filesystem;
using flow::testing::error_of;

namespace {

std::string tmpdir(const std::string& name) { return flow::testing::test_tmp_path("job_rules_" + name).string(); }

Tensor iota(flow::Shape s, float scale = 1.0f) {
  Tensor t(s, flow::Float);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * static_cast<float>(i % 17) - 3.0f;
  return t;
}

class JobRules : public ::testing::Test {
 protected:
  void SetUp() override { flow::session::reset(); }
};

}  // namespace

TEST_F(JobRules, WrongShapeNamesThePlaceholder) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("shape_job"),
                                   {flow::Numpy::Placeholder({4, 3}, flow::Float, "images")},
                                   [](Blob x) -> flow::Numpy { return x; });
  std::string e = error_of([&] { job(Tensor({4, 2}, flow::Float)); });
  EXPECT_NE(e.find("[shape_job]"), std::string::npos) << e;
  EXPECT_NE(e.find("'images'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected (4, 3) float32, got (4, 2) float32"), std::string::npos) << e;
}

TEST_F(JobRules, WrongDtypeNamesThePlaceholder) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("dtype_job"),
                                   {flow::Numpy::Placeholder({3}, flow::Float, "x"),
                                    flow::Numpy::Placeholder({3}, flow::Int32, "labels")},
                                   [](Blob x, Blob) -> flow::Numpy { return x; });
  std::string e = error_of([&] { job(Tensor({3}, flow::Float), Tensor({3}, flow::Float)); });
  EXPECT_NE(e.find("'labels': expected (3,) int32, got (3,) float32"), std::string::npos) << e;
}

TEST_F(JobRules, WrongArityIsAnError) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("arity_job"),
                                   {flow::Numpy::Placeholder({3}), flow::Numpy::Placeholder({3})},
                                   [](Blob x, Blob) -> flow::Numpy { return x; });
  std::string e = error_of([&] { job(Tensor({3}, flow::Float)); });
  EXPECT_NE(e.find("[arity_job] takes 2 arguments, got 1"), std::string::npos) << e;
}

TEST_F(JobRules, ListWhereTensorExpectedIsAnError) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("kind_job"),
                                   {flow::Numpy::Placeholder({3}, flow::Float, "x")},
                                   [](Blob x) -> flow::Numpy { return x; });
  std::string e = error_of([&] { job(std::vector<Tensor>{Tensor({3}, flow::Float)}); });
  EXPECT_NE(e.find("'x': a list of tensors was given but the placeholder is Numpy"), std::string::npos) << e;
}

TEST_F(JobRules, DefinitionErrorsNameTheOpAndShapes) {
  std::string e = error_of([] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3}), flow::Numpy::Placeholder({4, 5})},
                          [](Blob a, Blob b) -> flow::Numpy { return flow::matmul(a, b); });
  });
  EXPECT_NE(e.find("[matmul]"), std::string::npos) << e;
  EXPECT_NE(e.find("(2, 3)"), std::string::npos) << e;
  EXPECT_NE(e.find("(4, 5)"), std::string::npos) << e;
}

TEST_F(JobRules, TrainJobWithoutMinimizeIsAnError) {
  std::string e = error_of([] {
    flow::global_function(flow::Train, flow::function_config().name("t"), {flow::Numpy::Placeholder({2, 3})},
                          [](Blob a) -> flow::Numpy { return flow::layers::dense(a, 2, {.name = "d"}); });
  });
  EXPECT_NE(e.find("never called optimizer.minimize"), std::string::npos) << e;
}

TEST_F(JobRules, MinimizeInPredictJobIsAnError) {
  std::string e = error_of([] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})}, [](Blob a) -> flow::Numpy {
      auto y = flow::layers::dense(a, 2, {.name = "d"});
      flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), 0).minimize(flow::reduce_mean(y));
      return y;
    });
  });
  EXPECT_NE(e.find("predict job"), std::string::npos) << e;
}

TEST_F(JobRules, CallbacksArriveInCallOrderBeforeSyncReturns) {
  auto job = flow::global_function(flow::Predict, flow::function_config().max_in_flight(3),
                                   {flow::Numpy::Placeholder({64, 64})},
                                   [](Blob x) -> flow::Callback<flow::Numpy> { return flow::matmul(x, x) + 1.0; });
  std::vector<int> order;
  std::mutex mu;
  const int N = 50;
  for (int i = 0; i < N; ++i) {
    Tensor in({64, 64}, flow::Float);
    in.data<float>()[0] = static_cast<float>(i);
    job(in)([&, i](Tensor r) {
      EXPECT_FLOAT_EQ(r.data<float>()[0], static_cast<float>(i) * i + 1.0f);
      std::lock_guard<std::mutex> lk(mu);
      order.push_back(i);
    });
  }
  job.sync();
  ASSERT_EQ(order.size(), static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) EXPECT_EQ(order[i], i);
}

TEST_F(JobRules, InFlightCallsAreBounded) {
  auto job = flow::global_function(flow::Predict, flow::function_config().max_in_flight(2),
                                   {flow::Numpy::Placeholder({4})},
                                   [](Blob x) -> flow::Callback<flow::Numpy> { return x * 2.0; });
  auto& compiled = *job.compiled();
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> delivered{0};
  auto cb = [&](Tensor) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return open; });  // the first callback holds its slot
    ++delivered;
  };
  job(iota({4}))(cb);
  job(iota({4}))(cb);
  EXPECT_LE(compiled.in_flight(), 2u);
  std::atomic<bool> third_launched{false};
  std::thread t([&] {
    job(iota({4}))(cb);  // must block: two calls are in flight
    third_launched = true;
  });
  // Either the third caller is seen blocked by the bound, or it got through
  // while the gate was closed (a broken bound): no timing involved.
  while (compiled.blocked_callers() == 0 && !third_launched) std::this_thread::yield();
  EXPECT_FALSE(third_launched.load()) << "a third call was accepted with max_in_flight=2";
  EXPECT_EQ(compiled.blocked_callers(), 1u);
  {
    std::lock_guard<std::mutex> lk(mu);
    open = true;
  }
  cv.notify_all();
  t.join();
  job.sync();
  EXPECT_EQ(delivered.load(), 3);
  EXPECT_EQ(compiled.in_flight(), 0u);
}

TEST_F(JobRules, DestroyingAJobDeliversPendingResults) {
  std::atomic<int> got{0};
  const int N = 20;
  {
    auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({128, 128})},
                                     [](Blob x) -> flow::Callback<flow::Numpy> { return flow::matmul(x, x); });
    for (int i = 0; i < N; ++i) job(iota({128, 128}, 0.01f))([&](Tensor) { ++got; });
  }  // ~Job: every callback has run
  EXPECT_EQ(got.load(), N);
}

TEST_F(JobRules, AsyncErrorIsRethrownAtSync) {
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({4})},
                                   [](Blob x) -> flow::Callback<flow::Numpy> { return x; });
  job(iota({4}))([](Tensor) { throw std::runtime_error("callback failed on purpose"); });
  std::string e = error_of([&] { job.sync(); });
  EXPECT_NE(e.find("callback failed on purpose"), std::string::npos) << e;
  // The job keeps working afterwards.
  int ok = 0;
  job(iota({4}))([&](Tensor) { ++ok; });
  job.sync();
  EXPECT_EQ(ok, 1);
}

TEST_F(JobRules, SubmitDeliversResultsAndErrorsInCallOrder) {
  // What the GStreamer element uses: every call ends in its completion,
  // with the result or with its own error, and nothing is left for sync().
  auto job = flow::global_function(
      flow::Predict, {flow::Numpy::Placeholder({2, 3}), flow::Numpy::Placeholder({2}, flow::Int32)},
      [](Blob logits, Blob labels) -> flow::Numpy {
        return flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits);
      });
  auto& impl = *job.compiled();
  std::mutex mu;
  std::vector<std::string> seen;
  auto labels = [](int a, int b) {
    Tensor t({2}, flow::Int32);
    t.data<int32_t>()[0] = a;
    t.data<int32_t>()[1] = b;
    return t;
  };
  for (int i = 0; i < 6; ++i) {
    const bool bad = i == 2 || i == 3;
    impl.submit({iota({2, 3}), labels(bad ? 7 : 1, 0)}, [&, i](flow::CompiledJob::Result r, std::exception_ptr e) {
      std::lock_guard<std::mutex> lk(mu);
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          seen.push_back(std::to_string(i) + ":error:" + ex.what());
        }
      } else {
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].shape(), flow::Shape({2}));
        seen.push_back(std::to_string(i) + ":ok");
      }
    });
  }
  EXPECT_NO_THROW(impl.sync());  // the errors went to their completions
  ASSERT_EQ(seen.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(seen[i].substr(0, 2), std::to_string(i) + ":");
  EXPECT_EQ(seen[0], "0:ok");
  EXPECT_NE(seen[2].find(":error:"), std::string::npos) << seen[2];
  EXPECT_NE(seen[2].find("out of range"), std::string::npos) << seen[2];
  EXPECT_EQ(seen[5], "5:ok");
  EXPECT_EQ(impl.steps_run(), 4);
}

TEST_F(JobRules, RunHereRunsAfterEarlierCallsOnTheCallingThread) {
  auto job = flow::global_function(
      flow::Predict, {flow::Numpy::Placeholder({2, 3}), flow::Numpy::Placeholder({2}, flow::Int32)},
      [](Blob logits, Blob labels) -> flow::Numpy {
        return flow::nn::sparse_softmax_cross_entropy_with_logits(labels, logits);
      });
  auto& impl = *job.compiled();
  Tensor good({2}, flow::Int32), bad({2}, flow::Int32);
  good.data<int32_t>()[0] = 1, good.data<int32_t>()[1] = 0;
  bad.data<int32_t>()[0] = 9, bad.data<int32_t>()[1] = 0;
  std::mutex mu;
  std::vector<int> order;
  for (int i = 0; i < 3; ++i)
    impl.submit({iota({2, 3}), good}, [&, i](flow::CompiledJob::Result, std::exception_ptr) {
      std::lock_guard<std::mutex> lk(mu);
      order.push_back(i);
    });
  const Tensor here = impl.run_here({iota({2, 3}), good})[0];
  {
    std::lock_guard<std::mutex> lk(mu);
    EXPECT_EQ(order.size(), 3u);  // every earlier call ran first
  }
  EXPECT_TRUE(here.equal(impl.run({iota({2, 3}), good})[0]));
  std::string e = error_of([&] { impl.run_here({iota({2, 3}), bad}); });
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  e = error_of([&] { impl.run_here({iota({2, 2}), good}); });
  EXPECT_NE(e.find("expected"), std::string::npos) << e;
  EXPECT_NO_THROW(impl.sync());
  EXPECT_EQ(impl.steps_run(), 5);  // 3 submitted + run_here + run; the failed call is no step
  EXPECT_EQ(impl.in_flight(), 0u);
}

using jobflow::testing::name_this_thread;
using jobflow::testing::threads_named;

// A thread that ran calls itself (run_here) keeps the OpenMP threads it
// started until release_calling_thread(); a later call builds them again.
TEST_F(JobRules, ReleaseCallingThreadFreesTheOpenMPThreadsOfRunHere) {
  if (jobflow::testing::under_thread_sanitizer())
    GTEST_SKIP() << "a ThreadSanitizer build: it cannot see libgomp's parallel regions (tests/common/os_threads.h)";
  auto job = flow::global_function(flow::Predict, flow::function_config().num_threads(2),
                                   {flow::Numpy::Placeholder({1 << 20})},
                                   [](Blob x) -> flow::Numpy { return x * 2.0 + 1.0; });
  auto& impl = *job.compiled();
  Tensor x({1 << 20}, flow::Float);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 7);
  int before = 0, during = 0, after = 0, again = 0;
  float y0 = 0, y1 = 0;
  std::thread caller([&] {
    name_this_thread("rel_caller");
    before = threads_named("rel_caller");
    impl.run_here({x});
    during = threads_named("rel_caller");
    flow::release_calling_thread();
    after = jobflow::testing::threads_named_once("rel_caller", before);
    const Tensor y = impl.run_here({x})[0];  // the team is built anew
    again = threads_named("rel_caller");
    y0 = y.data<float>()[1], y1 = y.data<float>()[(1 << 20) - 1];
    flow::release_calling_thread();
  });
  caller.join();
  EXPECT_EQ(before, 1);
  EXPECT_EQ(during, 2);  // the call's second OpenMP thread, named after it
  EXPECT_EQ(after, 1);
  EXPECT_EQ(again, 2);
  EXPECT_EQ(y0, 3.0f);
  EXPECT_EQ(y1, static_cast<float>(((1 << 20) - 1) % 7) * 2 + 1);
}

// Results leave the plan's arena as fresh tensors: a large one is copied
// out in chunks by the call's threads (the last chunk partial), every byte
// of it, and a later call does not touch an earlier result.
TEST_F(JobRules, LargeResultsAreCopiedWholeAndOwnTheirMemory) {
  if (jobflow::testing::under_thread_sanitizer())
    GTEST_SKIP() << "a ThreadSanitizer build: it cannot see libgomp's parallel regions (tests/common/os_threads.h)";
  constexpr int64_t kN = (int64_t{1} << 18) + 5;  // 1 MB and 20 bytes: four full 256 KB chunks and a partial one
  auto job = flow::global_function(flow::Predict, flow::function_config().num_threads(2),
                                   {flow::Numpy::Placeholder({kN})},
                                   [](Blob x) -> flow::Numpy { return x * 2.0 + 1.0; });
  auto& impl = *job.compiled();
  Tensor a({kN}, flow::Float), b({kN}, flow::Float);
  for (int64_t i = 0; i < kN; ++i) a.data<float>()[i] = static_cast<float>(i % 1000), b.data<float>()[i] = -1.0f;
  const Tensor ya = impl.run({a})[0];
  const Tensor yb = impl.run({b})[0];
  ASSERT_EQ(ya.shape(), (flow::Shape{kN}));
  ASSERT_EQ(ya.dtype(), flow::Float);
  EXPECT_NE(ya.raw(), yb.raw());
  int64_t wrong = 0;
  for (int64_t i = 0; i < kN; ++i) {
    wrong += ya.data<float>()[i] != static_cast<float>(i % 1000) * 2 + 1;
    wrong += yb.data<float>()[i] != -1.0f;
  }
  EXPECT_EQ(wrong, 0);
  const Tensor u = Tensor::uninitialized({3, 5}, flow::Int64);
  EXPECT_EQ(u.shape(), (flow::Shape{3, 5}));
  EXPECT_EQ(u.nbytes(), 3 * 5 * 8);
}

// Two threads with OpenMP teams make libgomp's waits slow for both: an idle
// thread frees its team once another thread started a call with one and it
// has been quiet for cpu::kTeamIdleUs since; the thread that started a
// team last keeps it; a job's worker does so by itself.
TEST_F(JobRules, AnIdleThreadFreesItsTeamWhenAnotherComputes) {
  if (jobflow::testing::under_thread_sanitizer())
    GTEST_SKIP() << "a ThreadSanitizer build: it cannot see libgomp's parallel regions (tests/common/os_threads.h)";
  auto make = [](const char* name) {
    return flow::global_function(flow::Predict, flow::function_config().name(name).num_threads(2),
                                 {flow::Numpy::Placeholder({1 << 20})},
                                 [](Blob x) -> flow::Numpy { return x * 2.0 + 1.0; });
  };
  // Made on a thread of this name: the jobs' workers (and their OpenMP
  // threads) take it.
  std::optional<decltype(make(""))> ja, jb;
  std::thread([&] {
    name_this_thread("team_jobs");
    ja.emplace(make("team_a"));
    jb.emplace(make("team_b"));
  }).join();
  auto& a = *ja;
  auto& b = *jb;
  Tensor x({1 << 20}, flow::Float);
  std::mutex mu;
  std::condition_variable cv;
  int stage = 0;  // 1: T1 ran a call; 2: T2 ran one; 3: T1 went idle; 4: T2 did
  auto wait_for = [&](int s) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return stage >= s; });
  };
  auto reach = [&](int s) {
    {
      std::lock_guard<std::mutex> lk(mu);
      stage = s;
    }
    cv.notify_all();
  };
  int t1_team = 0, t1_idle = 0, t2_team = 0, t2_idle = 0;
  std::thread t1([&] {
    name_this_thread("team_t1");
    a.compiled()->run_here({x});
    t1_team = threads_named("team_t1");
    reach(1);
    wait_for(2);
    // T2 started a team since: T1 frees its own once idle for long enough.
    t1_idle = jobflow::testing::threads_named_once("team_t1", 1, [] { flow::idle_calling_thread(); });
    reach(3);
    wait_for(4);
  });
  std::thread t2([&] {
    name_this_thread("team_t2");
    wait_for(1);
    b.compiled()->run_here({x});
    t2_team = threads_named("team_t2");
    reach(2);
    wait_for(3);
    flow::idle_calling_thread();  // the newest team: kept
    t2_idle = threads_named("team_t2");
    flow::release_calling_thread();
    reach(4);
  });
  t1.join();
  t2.join();
  EXPECT_EQ(t1_team, 2);  // T1 and its team's second thread
  EXPECT_EQ(t2_team, 2);
  EXPECT_EQ(t1_idle, 1);  // freed
  EXPECT_EQ(t2_idle, 2);  // kept

  // Workers: job a's worker holds a team after its call; job b's call asks
  // it to free it, which it does on its own thread once idle long enough.
  const int workers = threads_named("team_jobs");  // two per job: worker and callbacks
  EXPECT_EQ(workers, 4);
  a.compiled()->run({x});
  EXPECT_EQ(threads_named("team_jobs"), workers + 1);
  b.compiled()->run({x});
  EXPECT_EQ(jobflow::testing::threads_named_once("team_jobs", workers + 1), workers + 1);  // b's team only
  const Tensor y = a.compiled()->run({x})[0];  // a builds its team again
  EXPECT_EQ(y.data<float>()[0], 1.0f);
}

namespace {
auto make_linear_train(double momentum, const char* name) {
  return flow::global_function(
      flow::Train, flow::function_config().name(name), {flow::Numpy::Placeholder({2, 3}), flow::Numpy::Placeholder({2, 2})},
      [momentum](Blob x, Blob t) -> flow::Numpy {
        auto y = flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5), .name = "lin"});
        auto loss = flow::reduce_sum(flow::square(y - t), {1});  // (2,): minimize() takes its mean
        flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), momentum).minimize(loss);
        return loss;
      });
}
}  // namespace

TEST_F(JobRules, TrainStepChangesVariablesAndPredictNeverDoes) {
  auto train = make_linear_train(0.0, "train_lin");
  auto predict = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})}, [](Blob x) -> flow::Numpy {
    return flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5), .name = "lin"});
  });
  flow::CheckPoint().init();
  Tensor w0 = flow::session::variable("lin-weight").clone();
  predict(iota({2, 3}));
  predict(iota({2, 3}));
  EXPECT_TRUE(flow::session::variable("lin-weight").equal(w0));
  train(iota({2, 3}), Tensor({2, 2}, flow::Float));
  EXPECT_FALSE(flow::session::variable("lin-weight").equal(w0));
}

TEST_F(JobRules, SgdStepMatchesHandComputation) {
  auto train = make_linear_train(0.0, "sgd_hand");
  flow::CheckPoint().init();
  // x = [[1,2,3],[0,1,0]], W = 0.5, b = 0, t = 0: y_i = 0.5 * sum(x_i)
  Tensor x = Tensor::from<float>({2, 3}, {1, 2, 3, 0, 1, 0});
  Tensor t({2, 2}, flow::Float);
  Tensor loss = train(x, t);
  // y = [[3,3],[0.5,0.5]]; loss_i = sum_j y_ij^2 = [18, 0.5]
  EXPECT_FLOAT_EQ(loss.data<float>()[0], 18.0f);
  EXPECT_FLOAT_EQ(loss.data<float>()[1], 0.5f);
  // L = mean_i loss_i; dL/dy = y (2/2); dW[j,k] = sum_i y_ij x_ik
  // dW row = [3*1+0.5*0, 3*2+0.5*1, 3*3+0.5*0] = [3, 6.5, 9]; db = [3.5, 3.5]
  Tensor w = flow::session::variable("lin-weight");
  const float expect_w[3] = {0.5f - 0.1f * 3.0f, 0.5f - 0.1f * 6.5f, 0.5f - 0.1f * 9.0f};
  for (int j = 0; j < 2; ++j)
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(w.data<float>()[j * 3 + k], expect_w[k], 1e-6) << j << "," << k;
  Tensor b = flow::session::variable("lin-bias");
  EXPECT_NEAR(b.data<float>()[0], -0.35f, 1e-6);
}

TEST_F(JobRules, MomentumStateIsAVariable) {
  auto train = make_linear_train(0.9, "sgd_momentum");
  flow::CheckPoint().init();
  Tensor x = Tensor::from<float>({2, 3}, {1, 2, 3, 0, 1, 0});
  train(x, Tensor({2, 2}, flow::Float));
  ASSERT_TRUE(flow::session::has_variable("lin-weight-momentum"));
  // v = -lr * g after one step
  EXPECT_NEAR(flow::session::variable("lin-weight-momentum").data<float>()[0], -0.3f, 1e-6);
}

TEST_F(JobRules, AdamFirstStepMovesEachWeightByLr) {
  auto train = flow::global_function(flow::Train, {flow::Numpy::Placeholder({2, 3})}, [](Blob x) -> flow::Numpy {
    auto y = flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5), .name = "adam_lin"});
    auto loss = flow::reduce_mean(flow::square(y));
    flow::optimizer::Adam(flow::optimizer::PiecewiseConstantScheduler({}, {0.01})).minimize(loss);
    return loss;
  });
  flow::CheckPoint().init();
  train(Tensor::from<float>({2, 3}, {1, 2, 3, 1, 1, 1}));
  // First Adam step: m_hat/sqrt(v_hat) = sign(g) so w moves by lr.
  Tensor w = flow::session::variable("adam_lin-weight");
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(w.data<float>()[i], 0.49f, 1e-5);
}

TEST(Schedulers, PiecewiseCosineWarmup) {
  flow::optimizer::PiecewiseConstantScheduler p({10, 20}, {1.0, 0.1, 0.01});
  EXPECT_DOUBLE_EQ(p.lr(0), 1.0);
  EXPECT_DOUBLE_EQ(p.lr(9), 1.0);
  EXPECT_DOUBLE_EQ(p.lr(10), 0.1);
  EXPECT_DOUBLE_EQ(p.lr(25), 0.01);
  flow::optimizer::CosineScheduler c(1.0, 100);
  EXPECT_NEAR(c.lr(0), 1.0, 1e-12);
  EXPECT_NEAR(c.lr(50), 0.5, 1e-12);
  EXPECT_NEAR(c.lr(100), 0.0, 1e-12);
  flow::optimizer::LinearWarmupScheduler w(p, 4);
  EXPECT_DOUBLE_EQ(w.lr(0), 0.0);
  EXPECT_DOUBLE_EQ(w.lr(2), 0.5);
  EXPECT_DOUBLE_EQ(w.lr(4), 1.0);
  std::string e = error_of([] { flow::optimizer::PiecewiseConstantScheduler({1}, {0.1}); });
  EXPECT_NE(e.find("len(values) == len(boundaries) + 1"), std::string::npos) << e;
}

// Whether a job trains a variable is that job's use of it: a predict job
// that defines the variables as not trainable first does not freeze them
// for a train job defined after it, and the predict job sees what the train
// job wrote (variables are shared by name).
TEST_F(JobRules, AFrozenUseInAnotherJobDoesNotStopTraining) {
  auto predict = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})}, [](Blob x) -> flow::Numpy {
    return flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5), .name = "lin", .trainable = false});
  });
  auto train = make_linear_train(0.0, "after_frozen");
  EXPECT_EQ(train.compiled()->definition().trainable, (std::vector<std::string>{"lin-bias", "lin-weight"}));
  EXPECT_TRUE(predict.compiled()->definition().trainable.empty());
  flow::CheckPoint().init();
  const Tensor x = Tensor::from<float>({2, 3}, {1, 2, 3, 0, 1, 0});
  Tensor before = predict(x);
  EXPECT_FLOAT_EQ(before.data<float>()[0], 3.0f);  // 0.5 * (1 + 2 + 3)
  train(x, Tensor({2, 2}, flow::Float));
  // The hand-computed step of SgdStepMatchesHandComputation: W row
  // [0.2, -0.15, -0.4], b = -0.35, so y_00 = 0.2 - 0.3 - 1.2 - 0.35 = -1.65.
  Tensor w = flow::session::variable("lin-weight");
  EXPECT_NEAR(w.data<float>()[0], 0.5f - 0.1f * 3.0f, 1e-6);
  Tensor after = predict(x);
  EXPECT_NEAR(after.data<float>()[0], -1.65f, 1e-5);
  // The graph shows each job's own use.
  const auto& pg = *predict.compiled()->definition().graph;
  const auto& tg = *train.compiled()->definition().graph;
  auto trainable_of = [](const flow::Graph& g, const std::string& var) -> int64_t {
    for (const auto& n : g.nodes)
      if (n.op->kind() == flow::OpKind::Variable && n.op->attr_string("name") == var) return n.op->attr_int("trainable");
    return -1;
  };
  EXPECT_EQ(trainable_of(pg, "lin-weight"), 0);
  EXPECT_EQ(trainable_of(tg, "lin-weight"), 1);
}

// The other order, and what CheckPoint.load asks of the session: a value
// for every variable some job trains, whichever job defined it first.
TEST_F(JobRules, AVariableIsTrainableWhenAnyJobTrainsIt) {
  const std::string dir = tmpdir("trainable_any");
  {
    auto other = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})}, [](Blob x) -> flow::Numpy {
      return flow::layers::dense(x, 4, {.name = "unrelated"});
    });
    flow::CheckPoint ck;
    ck.init();
    ck.save(dir);  // holds only unrelated-*
  }
  flow::session::reset();
  auto frozen = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})}, [](Blob x) -> flow::Numpy {
    return flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5), .name = "lin", .trainable = false});
  });
  EXPECT_NO_THROW(flow::CheckPoint().load(dir)) << "only frozen uses: the checkpoint need not hold lin-*";
  auto train = make_linear_train(0.0, "any_trains");
  auto frozen_again = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})}, [](Blob x) -> flow::Numpy {
    return flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5), .name = "lin", .trainable = false});
  });
  std::string e = error_of([&] { flow::CheckPoint().load(dir); });
  EXPECT_NE(e.find("has no value for variable(s): lin-bias, lin-weight"), std::string::npos) << e;
  // The train job still trains them after a later frozen use.
  flow::CheckPoint().init();
  const Tensor w0 = flow::session::variable("lin-weight").clone();
  train(iota({2, 3}), Tensor({2, 2}, flow::Float));
  EXPECT_FALSE(flow::session::variable("lin-weight").equal(w0));
  fs::remove_all(dir);
}

TEST_F(JobRules, CheckpointRoundTripIsBitExact) {
  auto train = make_linear_train(0.9, "ckpt_rt");
  flow::CheckPoint ck;
  ck.init();
  train(iota({2, 3}), iota({2, 2}));
  const std::string dir = tmpdir("roundtrip");
  ck.save(dir);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "snapshot_done"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "lin-weight" / "out"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "lin-weight" / "meta"));
  EXPECT_EQ(fs::file_size(fs::path(dir) / "lin-weight" / "out"), 2u * 3u * 4u);
  std::map<std::string, Tensor> saved;
  for (auto& n : flow::session::variable_names()) saved[n] = flow::session::variable(n).clone();
  train(iota({2, 3}), iota({2, 2}));  // changes everything
  ck.load(dir);
  for (auto& [n, t] : saved) EXPECT_TRUE(flow::session::variable(n).equal(t)) << n;
  fs::remove_all(dir);
}

TEST_F(JobRules, SavingAJobsCheckpointWritesOnlyItsVariables) {
  auto train = make_linear_train(0.9, "ckpt_job");
  auto other = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})}, [](Blob x) -> flow::Numpy {
    return flow::layers::dense(x, 4, {.kernel_initializer = flow::constant_initializer(1.0), .name = "unrelated"});
  });
  flow::CheckPoint ck;
  ck.init();
  train(iota({2, 3}), iota({2, 2}));
  other(iota({2, 3}));
  const std::string dir = tmpdir("job_only");
  ck.save(dir, *train.compiled());
  std::set<std::string> saved;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) saved.insert(e.path().filename().string());
  EXPECT_EQ(saved, (std::set<std::string>{"lin-bias", "lin-bias-momentum", "lin-weight", "lin-weight-momentum",
                                          flow::session::train_step_variable("ckpt_job")}));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "snapshot_done"));
  fs::remove_all(dir);
}

TEST_F(JobRules, LoadingAMismatchedCheckpointNamesTheVariable) {
  auto train = make_linear_train(0.0, "ckpt_bad");
  flow::CheckPoint ck;
  ck.init();
  const std::string dir = tmpdir("mismatch");
  ck.save(dir);
  flow::session::reset();
  auto other = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 4})}, [](Blob x) -> flow::Numpy {
    return flow::layers::dense(x, 2, {.name = "lin"});
  });
  std::string e = error_of([&] { ck.load(dir); });
  EXPECT_NE(e.find("'lin-weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("(2, 3) float32"), std::string::npos) << e;
  EXPECT_NE(e.find("(2, 4) float32"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST_F(JobRules, KilledSaveNeverReplacesAGoodCheckpoint) {
  if (!flow::checkpoint_io::testing::kEnabled) GTEST_SKIP() << "built without -Dtest_hooks=true";
  auto train = make_linear_train(0.0, "ckpt_kill");
  flow::CheckPoint ck;
  ck.init();
  const std::string dir = tmpdir("killed");
  ck.save(dir);
  const Tensor good = flow::session::variable("lin-weight").clone();
  train(iota({2, 3}), iota({2, 2}));
  for (int files = 0; files < 5; ++files) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child dies after `files` files of the new checkpoint were written.
      flow::checkpoint_io::testing::crash_after_files(files);
      try {
        flow::checkpoint_io::save(dir, {{"lin-weight", flow::session::variable("lin-weight")},
                                        {"lin-bias", flow::session::variable("lin-bias")}});
      } catch (...) {
      }
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 86) << "the child was expected to die during save (files=" << files << ")";
    auto loaded = flow::checkpoint_io::load(dir);
    EXPECT_TRUE(loaded.at("lin-weight").equal(good)) << "after a kill at file " << files;
  }
  // The killed saves left their temporary siblings (dir.tmp-<pid>-<n>) behind,
  // as a real crash would; remove them with the checkpoint.
  const std::string stem = fs::path(dir).filename().string();
  for (auto& e : fs::directory_iterator(fs::path(dir).parent_path()))
    if (e.path().filename().string().rfind(stem, 0) == 0) fs::remove_all(e.path());
}

// Without a usable CUDA backend (CI's machines) a job placed on "gpu" is
// compiled as the same job on "cpu" (compiler::place, before the other
// passes): its nodes on the CPU, a one-line notice naming the job, and the
// CPU's passes applied: a train job's convolutions keep nChw16c
// (train_layouts, which takes CPU nodes only) exactly as when placed on
// "cpu", with the same loss.
TEST_F(JobRules, GpuPlacementRunsOnCpuWithoutCudaBackend) {
  bool fell_back = false;
  flow::backend_for("gpu", &fell_back);
  if (!fell_back) GTEST_SKIP() << "a CUDA backend is usable here";
  testing::internal::CaptureStderr();
  auto job = flow::global_function(flow::Predict, flow::function_config().name("gpu_placed"),
                                   {flow::Numpy::Placeholder({3})}, [](Blob x) -> flow::Numpy {
                                     auto s = flow::scope::placement("gpu", "0:0");
                                     return x * 3.0;
                                   });
  Tensor r = job(Tensor::from<float>({3}, {1, 2, 3}));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FLOAT_EQ(r.data<float>()[2], 9.0f);
  EXPECT_EQ(job.compiled()->plan().graph().nodes.back().placement.device, "cpu");
  EXPECT_NE(err.find("jobflow: job 'gpu_placed' places ops on \"gpu\" but this build has no usable CUDA backend; "
                     "running them on the CPU\n"),
            std::string::npos)
      << err;
  // Once per job: compiled again (a job with dims known at call time
  // compiles a plan per shape), it says nothing more.
  testing::internal::CaptureStderr();
  auto again = flow::global_function(flow::Predict, flow::function_config().name("gpu_placed"),
                                     {flow::Numpy::Placeholder({4})}, [](Blob x) -> flow::Numpy {
                                       auto s = flow::scope::placement("gpu", "0:0");
                                       return x * 2.0;
                                     });
  EXPECT_FLOAT_EQ(again(Tensor::from<float>({4}, {1, 2, 3, 4})).data<float>()[3], 8.0f);
  const std::string err2 = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err2.find("no usable CUDA backend"), std::string::npos) << err2;

  const Tensor x = flow::testing::random_float32({2, 16, 8, 8}, 5);
  auto step = [&](const char* device) {
    flow::session::reset();
    auto train = flow::global_function(
        flow::Train, flow::function_config().name(std::string("placed_") + device), {flow::Numpy::Placeholder(x.shape())},
        [device](Blob b) -> flow::Numpy {
          auto s = flow::scope::placement(device, "0:0");
          Blob w = flow::get_variable("pl_w", {16, 16, 3, 3}, flow::Float,
                                      flow::random_uniform_initializer(-0.3, 0.3), true);
          Blob h = flow::nn::max_pool2d(flow::nn::relu(flow::nn::conv2d(b, w, 1, "SAME")), 2, 2, "VALID");
          Blob loss = flow::reduce_mean(flow::square(flow::add_scalar(h, -0.25)));
          flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.5}), 0).minimize(loss);
          return loss;
        });
    Tensor loss = train(x);
    return std::make_pair(loss.data<float>()[0], train.compiled()->plan().op_sequence());
  };
  const auto [loss_cpu, ops_cpu] = step("cpu");
  const auto [loss_gpu, ops_gpu] = step("gpu");
  EXPECT_EQ(ops_gpu, ops_cpu);
  bool blocked = false;
  for (const std::string& op : ops_gpu) blocked |= op.find("blocked=") != std::string::npos;
  EXPECT_TRUE(blocked) << ::testing::PrintToString(ops_gpu);
  EXPECT_EQ(loss_gpu, loss_cpu);
}

TEST_F(JobRules, CompilerFusesBiasAndReluAndReusesMemory) {
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({8, 16})}, [](Blob x) -> flow::Numpy {
    auto h = flow::layers::dense(x, 32, {.activation = flow::nn::relu, .kernel_initializer = flow::truncated_normal(0.1), .name = "h1"});
    auto h2 = flow::layers::dense(h, 32, {.activation = flow::nn::relu, .kernel_initializer = flow::truncated_normal(0.1), .name = "h2"});
    return flow::layers::dense(h2, 4, {.kernel_initializer = flow::truncated_normal(0.1), .name = "out"});
  });
  auto ops = job.compiled()->plan().op_sequence();
  ASSERT_EQ(ops.size(), 3u) << job.compiled()->plan().describe();
  // Where oneDNN has AVX-512 the products (8 rows) run as inner products on
  // packed weights (compiler/layout.cpp): another order of the sums.
  const bool packed = !flow::cpu::avx2_at_most();
  const std::string tail = packed ? " weights=packed]" : "]";
  EXPECT_EQ(ops[0], "matmul[transpose_a=0 transpose_b=1 bias=1 relu=1" + tail);
  EXPECT_EQ(ops[2], "matmul[transpose_a=0 transpose_b=1 bias=1 relu=0" + tail);
  // h1's buffer is dead once h2 is computed: the output may reuse it.
  EXPECT_LT(job.compiled()->plan().arena_bytes(), job.compiled()->plan().unshared_bytes());
  // Fused and unfused plans agree.
  auto ref = flow::global_function(flow::Predict, flow::function_config().enable_fusion(false),
                                   {flow::Numpy::Placeholder({8, 16})}, [](Blob x) -> flow::Numpy {
    auto h = flow::layers::dense(x, 32, {.activation = flow::nn::relu, .name = "h1"});
    auto h2 = flow::layers::dense(h, 32, {.activation = flow::nn::relu, .name = "h2"});
    return flow::layers::dense(h2, 4, {.name = "out"});
  });
  EXPECT_GT(ref.compiled()->plan().op_sequence().size(), 3u);
  Tensor in = iota({8, 16}, 0.1f);
  const Tensor got = job(in), want = ref(in);
  if (packed) EXPECT_LE(jobflow::testing::rel_diff(got, want), 1e-6);
  else EXPECT_TRUE(got.equal(want));  // the same GEMM, bias and relu applied in it
}

TEST_F(JobRules, RepeatedCallsGiveIdenticalResults) {
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({4, 8})}, [](Blob x) -> flow::Numpy {
    auto h = flow::layers::dense(x, 16, {.activation = flow::nn::relu, .kernel_initializer = flow::truncated_normal(0.1), .name = "r1"});
    return flow::nn::softmax(flow::layers::dense(h, 3, {.kernel_initializer = flow::truncated_normal(0.1), .name = "r2"}));
  });
  Tensor in = iota({4, 8}, 0.2f);
  Tensor a = job(in);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(job(in).equal(a));
  EXPECT_NEAR(a.data<float>()[0] + a.data<float>()[1] + a.data<float>()[2], 1.0f, 1e-6);
}

TEST_F(JobRules, NumThreadsIsPerJob) {
  auto one = flow::global_function(flow::Predict, flow::function_config().num_threads(1),
                                   {flow::Numpy::Placeholder({64, 64})},
                                   [](Blob x) -> flow::Numpy { return flow::matmul(x, x); });
  auto dflt = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({64, 64})},
                                    [](Blob x) -> flow::Numpy { return flow::matmul(x, x); });
  EXPECT_EQ(one.compiled()->num_threads(), 1);
  EXPECT_GE(dflt.compiled()->num_threads(), 1);
  Tensor in = iota({64, 64}, 0.01f);
  EXPECT_TRUE(one(in).equal(dflt(in)));  // same result whatever the thread count
  std::string e = error_of([] {
    flow::global_function(flow::Predict, flow::function_config().num_threads(-2), {flow::Numpy::Placeholder({2})},
                          [](Blob x) -> flow::Numpy { return x; });
  });
  EXPECT_NE(e.find("num_threads must be >= 0"), std::string::npos) << e;
}

TEST_F(JobRules, CallingAJobFromItsOwnCallbackIsAnError) {
  auto job = flow::global_function(flow::Predict, flow::function_config().max_in_flight(1),
                                   {flow::Numpy::Placeholder({4})},
                                   [](Blob x) -> flow::Callback<flow::Numpy> { return x; });
  std::string inner;
  job(iota({4}))([&](Tensor) { inner = error_of([&] { job(iota({4}))([](Tensor) {}); }); });
  job.sync();
  EXPECT_NE(inner.find("called from its own callback"), std::string::npos) << inner;
}

TEST_F(JobRules, OpsOnABlobKeptFromABodyAreRefused) {
  Blob kept;
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({4})}, [&](Blob x) -> flow::Numpy {
    kept = x;
    return x;
  });
  const size_t nodes = job.compiled()->definition().graph->nodes.size();
  std::string e = error_of([&] { flow::nn::relu(kept); });
  EXPECT_NE(e.find("[relu] called outside the job function body"), std::string::npos) << e;
  EXPECT_EQ(job.compiled()->definition().graph->nodes.size(), nodes);  // the definition is untouched
}

TEST_F(JobRules, OnlyVariablesTheLossReachesAreUpdated) {
  auto train = flow::global_function(flow::Train, {flow::Numpy::Placeholder({2, 3})}, [](Blob x) -> flow::Numpy {
    auto used = flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5), .name = "used"});
    auto unused = flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5), .name = "unused"});
    (void)unused;
    auto loss = flow::reduce_mean(flow::square(used));
    flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.1}), 0.9).minimize(loss);
    return loss;
  });
  flow::CheckPoint().init();
  const Tensor before = flow::session::variable("unused-weight").clone();
  train(iota({2, 3}));
  train(iota({2, 3}));
  EXPECT_TRUE(flow::session::variable("unused-weight").equal(before));
  EXPECT_FALSE(flow::session::has_variable("unused-weight-momentum"));
  EXPECT_TRUE(flow::session::has_variable("used-weight-momentum"));
  EXPECT_EQ(train.compiled()->definition().trainable.size(), 2u);  // used-weight, used-bias
}

TEST_F(JobRules, DevicesAreParsedInOnePlace) {
  for (const char* ok : {"cpu", "gpu", "cuda", "gpu:0", "cuda:0"}) {
    flow::Device d;
    std::string why;
    EXPECT_TRUE(flow::parse_device(ok, &d, &why)) << ok << ": " << why;
    EXPECT_EQ(d.tag, std::string(ok) == "cpu" ? "cpu" : "gpu") << ok;
    EXPECT_EQ(d.index, 0) << ok;
  }
  // Another device number is refused, not ignored: the CUDA backend uses device 0.
  std::string e = error_of([] { flow::parse_device("cuda:1", "here"); });
  EXPECT_EQ(e, "[here] device \"cuda:1\" is not available: the CUDA backend runs on device 0 only (use cuda:0 or gpu)");
  for (const char* bad : {"tpu", "", "cpu:0", "cuda:", "gpu:x", "cuda:-1", "Cuda"}) {
    flow::Device d;
    std::string why;
    EXPECT_FALSE(flow::parse_device(bad, &d, &why)) << bad;
    EXPECT_NE(why.find(std::string("device \"") + bad + "\""), std::string::npos) << why;
  }
  // Placement scopes read devices the same way.
  e = error_of([] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2})}, [](Blob x) -> flow::Numpy {
      auto s = flow::scope::placement("cuda:3");
      return flow::identity(x);
    });
  });
  EXPECT_NE(e.find("[scope::placement] device \"cuda:3\" is not available"), std::string::npos) << e;
}

TEST_F(JobRules, OpKindsHaveDistinctNames) {
  std::set<std::string> names;
  for (size_t i = 0; i < flow::kOpKindCount; ++i) {
    const auto k = static_cast<flow::OpKind>(i);
    const std::string n = flow::op_name(k);
    EXPECT_TRUE(names.insert(n).second) << n << " names two kinds";
    flow::OpKind back;
    ASSERT_TRUE(flow::op_kind_from_name(n, &back)) << n;
    EXPECT_EQ(back, k) << n;
  }
  flow::OpKind unused;
  EXPECT_FALSE(flow::op_kind_from_name("no_such_op", &unused));
  // A primitive's name is its kind's.
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})}, [](Blob x) -> flow::Numpy {
    return flow::nn::softmax(flow::mul(x, x));
  });
  for (const auto& n : job.compiled()->plan().graph().nodes)
    EXPECT_STREQ(n.op->name(), flow::op_name(n.op->kind()));
}

TEST_F(JobRules, DefaultPlacementIsValidated) {
  std::string e = error_of([] {
    flow::global_function(flow::Predict, flow::function_config().default_placement("tpu"),
                          {flow::Numpy::Placeholder({2})}, [](Blob x) -> flow::Numpy { return x; });
  });
  EXPECT_NE(e.find("[global_function] default_placement: device \"tpu\" is not cpu, gpu, cuda, gpu:<n> or cuda:<n>"),
            std::string::npos)
      << e;
}

namespace {
// Writes dir/<name>/out (and meta when asked) and dir/snapshot_done by hand,
// as OneFlow 0.2/0.3 (no meta) or 0.4 (meta) did.
void write_variable(const std::string& dir, const std::string& name, const std::vector<float>& values,
                    const flow::Shape& shape, bool with_meta) {
  fs::create_directories(dir + "/" + name);
  std::FILE* f = std::fopen((dir + "/" + name + "/out").c_str(), "wb");
  ASSERT_TRUE(f);
  std::fwrite(values.data(), sizeof(float), values.size(), f);
  std::fclose(f);
  if (with_meta) {
    f = std::fopen((dir + "/" + name + "/meta").c_str(), "w");
    const std::string meta = flow::checkpoint_io::meta_text(shape, flow::Float);
    std::fwrite(meta.data(), 1, meta.size(), f);
    std::fclose(f);
  }
  std::fclose(std::fopen((dir + "/snapshot_done").c_str(), "w"));
}
}  // namespace

TEST_F(JobRules, CheckpointsWithAndWithoutMetaLoadAndEvaluate) {
  // y = x W^T + b with W (2, 3) and b (2,) written by hand; y computed here.
  const std::vector<float> W = {0.5f, -1.f, 2.f, 1.5f, 0.25f, -0.75f}, b = {0.125f, -2.f};
  const std::vector<float> x = {1, 2, 3, -1, 0, 4};
  std::vector<float> want(4);
  for (int i = 0; i < 2; ++i)
    for (int o = 0; o < 2; ++o) {
      float acc = b[o];
      for (int k = 0; k < 3; ++k) acc += x[i * 3 + k] * W[o * 3 + k];
      want[i * 2 + o] = acc;
    }
  for (bool with_meta : {true, false}) {
    flow::session::reset();
    const std::string dir = tmpdir(with_meta ? "with_meta" : "without_meta");
    write_variable(dir, "lin-weight", W, {2, 3}, with_meta);
    write_variable(dir, "lin-bias", b, {2}, with_meta);
    auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({2, 3})}, [](Blob in) -> flow::Numpy {
      return flow::layers::dense(in, 2, {.name = "lin"});
    });
    flow::CheckPoint().load(dir);
    const Tensor y = job(Tensor::from<float>({2, 3}, x));
    const std::vector<float> got = y.to_vector<float>();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "meta " << with_meta << " at " << i;
    fs::remove_all(dir);
  }
}

TEST_F(JobRules, CheckpointWithoutMetaLoadedBeforeTheJobIsTypedByIt) {
  const std::string dir = tmpdir("no_meta_early");
  write_variable(dir, "lin-weight", {1, 0, 0, 0, 1, 0}, {2, 3}, false);
  write_variable(dir, "lin-bias", {0.5f, -0.5f}, {2}, false);
  flow::CheckPoint().load(dir);  // no job defines the variables yet: kept as bytes
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({1, 3})}, [](Blob in) -> flow::Numpy {
    return flow::layers::dense(in, 2, {.name = "lin"});
  });
  EXPECT_EQ(job(Tensor::from<float>({1, 3}, {3, 4, 5})).to_vector<float>(), (std::vector<float>{3.5f, 3.5f}));
  fs::remove_all(dir);
}

TEST_F(JobRules, CheckpointWithoutMetaOfTheWrongSizeNamesVariableAndSizes) {
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({1, 3})}, [](Blob in) -> flow::Numpy {
    return flow::layers::dense(in, 2, {.name = "lin"});
  });
  const std::string dir = tmpdir("no_meta_wrong");
  write_variable(dir, "lin-weight", {1, 2, 3, 4}, {2, 2}, false);  // 16 bytes, the job wants (2, 3): 24
  write_variable(dir, "lin-bias", {0, 0}, {2}, false);
  std::string e = error_of([&] { flow::CheckPoint().load(dir); });
  EXPECT_NE(e.find("'lin-weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("16 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("24 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("(2, 3) float32"), std::string::npos) << e;
  // Loaded before the job: the same error when the job defines it.
  flow::session::reset();
  flow::CheckPoint().load(dir);
  e = error_of([&] {
    flow::global_function(flow::Predict, {flow::Numpy::Placeholder({1, 3})},
                          [](Blob in) -> flow::Numpy { return flow::layers::dense(in, 2, {.name = "lin"}); });
  });
  EXPECT_NE(e.find("'lin-weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("16 bytes"), std::string::npos) << e;
  fs::remove_all(dir);
}

namespace {
// loss = sum(w * x): its gradient is x, so one SGD step moves w by -lr * x.
auto make_schedule_job() {
  return flow::global_function(
      flow::Train, flow::function_config().name("resume_job"), {flow::Numpy::Placeholder({2})},
      [](Blob x) -> flow::Numpy {
        Blob w = flow::get_variable("w", {2}, flow::Float, flow::constant_initializer(1.0));
        Blob loss = flow::reduce_sum(w * x, {0});
        flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({3}, {0.1, 0.01}), 0).minimize(loss);
        return loss;
      });
}
}  // namespace

TEST_F(JobRules, ResumedTrainingContinuesItsLearningRateSchedule) {
  const std::string dir = tmpdir("resume_schedule");
  const Tensor x = Tensor::from<float>({2}, {1.f, 2.f});
  {
    auto job = make_schedule_job();
    flow::CheckPoint().init();
    job(x);
    job(x);  // steps 0 and 1 at lr 0.1
    EXPECT_EQ(job.compiled()->steps_run(), 2);
    flow::CheckPoint().save(dir);
  }
  ASSERT_TRUE(fs::exists(dir + "/" + flow::session::train_step_variable("resume_job") + "/out"))
      << "the train step is saved as OneFlow's System-Train-TrainStep-<job> variable";
  flow::session::reset();
  auto job = make_schedule_job();
  flow::CheckPoint().load(dir);
  EXPECT_EQ(job.compiled()->steps_run(), 2);
  auto w = [] { return flow::session::variable("w").clone().to_vector<float>(); };
  std::vector<float> before = w();
  EXPECT_NEAR(before[0], 1.f - 2 * 0.1f, 1e-6);
  job(x);  // step 2: still lr 0.1
  std::vector<float> after = w();
  EXPECT_NEAR(before[1] - after[1], 0.1f * 2, 1e-6) << "step 2 runs before the boundary at 3";
  before = after;
  job(x);  // step 3: lr 0.01 (a job restarted at step 0 would still use 0.1)
  after = w();
  EXPECT_NEAR(before[0] - after[0], 0.01f * 1, 1e-6) << "step 3 is past the boundary";
  EXPECT_NEAR(before[1] - after[1], 0.01f * 2, 1e-6);
  EXPECT_EQ(job.compiled()->steps_run(), 4);
  fs::remove_all(dir);
}

// A returned resize or concat that no step reads writes straight into the
// result's memory (Primitive::writes_output_anywhere: no copy out of the
// arena after the call), with the same values as when a step reads it too
// (then it is copied out). The concats go over two threads' byte ranges:
// one outer slab of two parts (batch 1, axis 1: the parts are written in
// place in it) and 40 slabs of two.
TEST_F(JobRules, ReturnedResizeAndConcatAreWrittenIntoTheResults) {
  const flow::Shape xs{1, 40, 30, 30};
  auto define = [&](bool read) {
    return flow::global_function(
        flow::Predict, flow::function_config().name(read ? "rc_read" : "rc_direct").num_threads(2), {flow::Numpy::Placeholder(xs)},
        [&](Blob x) -> std::tuple<flow::Numpy, flow::Numpy, flow::Numpy, flow::Numpy> {
          flow::nn::ResizeOptions linear;
          linear.mode = "linear";
          Blob r = flow::nn::resize(flow::mul(x, x), {1, 40, 45, 75}, linear);
          Blob c1 = flow::concat({flow::add(x, x), flow::slice(x, {0, 0, 0, 0}, {1, 24, 30, 30})}, 1);
          Blob c2 = flow::concat({flow::mul(x, x), flow::slice(x, {0, 0, 0, 0}, {1, 40, 10, 30})}, 2);
          Blob n = read ? flow::reduce_sum(flow::concat({flow::reshape(r, {-1}), flow::reshape(c1, {-1}), flow::reshape(c2, {-1})}, 0))
                        : flow::reduce_sum(x);
          return {r, c1, c2, n};
        });
  };
  auto direct = define(false), read = define(true);
  // (c1's parts are written in place inside it instead: its producers'
  // outputs are bound there at compile time, so c1 stays in the arena.)
  EXPECT_EQ(direct.compiled()->plan().outputs_written_directly(), 2) << direct.compiled()->describe();
  EXPECT_EQ(direct.compiled()->plan().inputs_in_place(), 2) << direct.compiled()->describe();
  EXPECT_EQ(read.compiled()->plan().outputs_written_directly(), 0) << read.compiled()->describe();
  std::vector<std::tuple<Tensor, Tensor, Tensor, Tensor>> held;
  std::vector<Tensor> inputs;
  for (int i = 0; i < 3; ++i) {
    inputs.push_back(iota(xs, 0.01f * static_cast<float>(i + 1)));
    held.push_back(direct(inputs.back()));
  }
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < 3; ++i) {
      const auto [r, c1, c2, n] = round == 0 ? held[i] : direct(inputs[i]);
      const auto [wr, wc1, wc2, wn] = read(inputs[i]);
      EXPECT_EQ(r.shape(), (flow::Shape{1, 40, 45, 75}));
      EXPECT_EQ(c1.shape(), (flow::Shape{1, 64, 30, 30}));
      EXPECT_EQ(c2.shape(), (flow::Shape{1, 40, 40, 30}));
      EXPECT_TRUE(r.equal(wr)) << "round " << round << ", call " << i;
      EXPECT_TRUE(c1.equal(wc1)) << "round " << round << ", call " << i;
      EXPECT_TRUE(c2.equal(wc2)) << "round " << round << ", call " << i;
    }
  // The concats, every element: x + x, then x's first 24 channels; x * x
  // (40 rows), then x's first 10 rows.
  for (int i = 0; i < 3; ++i) {
    const float* xv = inputs[i].data<float>();
    Tensor w1({1, 64, 30, 30}, flow::Float), w2({1, 40, 40, 30}, flow::Float);
    for (int64_t c = 0; c < 64; ++c)
      for (int64_t p = 0; p < 900; ++p) w1.data<float>()[c * 900 + p] = c < 40 ? 2 * xv[c * 900 + p] : xv[(c - 40) * 900 + p];
    for (int64_t c = 0; c < 40; ++c)
      for (int64_t h = 0; h < 40; ++h)
        for (int64_t w = 0; w < 30; ++w) {
          const float v = xv[(c * 30 + (h < 30 ? h : h - 30)) * 30 + w];
          w2.data<float>()[(c * 40 + h) * 30 + w] = h < 30 ? v * v : v;
        }
    EXPECT_EQ(jobflow::testing::max_abs_diff(std::get<1>(held[i]), w1), 0.0) << "call " << i;
    EXPECT_EQ(jobflow::testing::max_abs_diff(std::get<2>(held[i]), w2), 0.0) << "call " << i;
  }
}

// A concat along an axis with only 1s before it: the inputs its producers
// can write in place inside its output (their own arena blobs, read by the
// concat alone, parts starting on 64-byte lines) are bound there and the
// concat copies only the others. Every element against the formula, over
// calls; the arena is smaller by the parts put in place.
TEST_F(JobRules, ConcatInputsAreWrittenInPlaceInItsOutput) {
  struct Case {
    flow::Shape x;
    bool shared;   // the first part is also read by another node
    int in_place;  // parts bound inside the concat's output
  };
  const std::vector<Case> cases = {{{1, 16, 12, 12}, false, 3},   // 9216-byte parts
                                   {{1, 16, 12, 12}, true, 2},
                                   {{1, 3, 5, 5}, false, 1},      // 300-byte parts: the first only
                                   {{2, 16, 12, 12}, false, 0}};  // two images: parts not contiguous
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const std::string name = "cat_in_place" + std::to_string(k);
    auto job = flow::global_function(
        flow::Predict, flow::function_config().name(name).num_threads(2), {flow::Numpy::Placeholder(c.x)},
        [&](Blob x) -> std::tuple<flow::Numpy, flow::Numpy> {
          // t lives between a's step and the concat's: it must not share
          // the output's storage, where a already is.
          Blob a = flow::mul(x, x), t = flow::add(x, x);
          Blob b = flow::add(t, x), s = flow::math::sigmoid(t);
          Blob cat = flow::concat({a, b, s}, 1);
          return {flow::add(cat, cat), c.shared ? flow::reduce_sum(a) : flow::reduce_sum(x)};
        });
    const auto& plan = job.compiled()->plan();
    EXPECT_EQ(plan.inputs_in_place(), c.in_place) << name << "\n" << plan.describe();
    const int64_t N = c.x[0], C = c.x[1], P = c.x[2] * c.x[3];
    for (int call = 0; call < 3; ++call) {
      const Tensor x = iota(c.x, 0.01f * static_cast<float>(call + 1));
      const Tensor y = std::get<0>(job(x));
      ASSERT_EQ(y.shape(), (flow::Shape{N, 3 * C, c.x[2], c.x[3]})) << name;
      const float* xv = x.data<float>();
      double worst = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t q = 0; q < 3 * C; ++q)
          for (int64_t p = 0; p < P; ++p) {
            const float v = xv[(n * C + q % C) * P + p];
            const float part = q < C ? v * v : q < 2 * C ? 3 * v : 1.f / (1.f + std::exp(-2 * v));
            const double d = std::abs(static_cast<double>(y.data<float>()[(n * 3 * C + q) * P + p]) - 2.0 * part);
            worst = std::max(worst, d / std::max(1.0, std::abs(2.0 * part)));
          }
      EXPECT_LE(worst, 1e-6) << name << ", call " << call;
    }
  }
}

// A call keeps nothing of the caller's: the plan's steps let go of its
// input tensors when the call returns and when a step throws (they held
// them until the plan's next call).
TEST_F(JobRules, CallsKeepNoReferenceToTheirInputs) {
  auto job = flow::global_function(
      flow::Predict, flow::function_config().name("fail_keeps_nothing"),
      {flow::Numpy::Placeholder({2, 3}), flow::Numpy::Placeholder({2}, flow::Int32)},
      [](Blob logits, Blob labels) -> flow::Numpy {
        return flow::nn::sparse_softmax_cross_entropy_with_logits(labels, flow::add(logits, logits));
      });
  Tensor x = iota({2, 3}), bad({2}, flow::Int32);
  bad.data<int32_t>()[0] = 9, bad.data<int32_t>()[1] = 0;
  const std::string e = error_of([&] { job(x, bad); });
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  EXPECT_EQ(x.storage().use_count(), 1);
  EXPECT_EQ(bad.storage().use_count(), 1);
  // Nor does one that succeeds.
  Tensor good({2}, flow::Int32);
  good.data<int32_t>()[0] = 1, good.data<int32_t>()[1] = 0;
  EXPECT_EQ(job(x, good).shape(), (flow::Shape{2}));
  EXPECT_EQ(x.storage().use_count(), 1);
  EXPECT_EQ(good.storage().use_count(), 1);
}

// A call's results are fresh tensors the caller owns: a result it still
// holds is never written by a later call, and the memory of one it has let
// go of holds a later result (no page faults for a large result at every
// call): dropped at once, or kept until the next result replaces it
// (`y = job(x)` in a loop).
TEST_F(JobRules, ResultsHeldAreNeverWrittenAndReleasedOnesAreReused) {
  auto job = flow::global_function(flow::Predict, flow::function_config().name("results_job"),
                                   {flow::Numpy::Placeholder({64, 100})},
                                   [](Blob x) -> flow::Numpy { return flow::add(flow::mul(x, x), x); });
  auto want = [](const Tensor& x) {
    Tensor y(x.shape(), flow::Float);
    for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = x.data<float>()[i] * x.data<float>()[i] + x.data<float>()[i];
    return y;
  };
  std::vector<Tensor> xs, held;
  for (int i = 0; i < 4; ++i) xs.push_back(iota({64, 100}, 0.5f + static_cast<float>(i)));
  // Held: four results, four buffers, each still its own call's values.
  for (const Tensor& x : xs) held.push_back(job(x));
  std::set<const void*> buffers;
  for (size_t i = 0; i < held.size(); ++i) {
    buffers.insert(held[i].raw());
    EXPECT_TRUE(held[i].equal(want(xs[i]))) << "result " << i;
  }
  EXPECT_EQ(buffers.size(), held.size());
  held.clear();
  // Dropped at once: the next result is written where the last one was
  // (the job kept that memory: a tensor of the same size made between the
  // calls, where malloc would hand out freed memory, gets other memory).
  const void* at = job(xs[0]).raw();
  Tensor between({64, 100}, flow::Float);
  Tensor y = job(xs[1]);
  EXPECT_EQ(y.raw(), at);
  EXPECT_NE(between.raw(), at);
  EXPECT_TRUE(y.equal(want(xs[1])));
  // Replaced in a loop: two buffers in turn, each result right.
  std::set<const void*> loop;
  for (int i = 0; i < 6; ++i) {
    y = job(xs[i % 4]);
    loop.insert(y.raw());
    EXPECT_TRUE(y.equal(want(xs[i % 4]))) << "call " << i;
  }
  EXPECT_LE(loop.size(), 2u);
  // A view of a result (a reshape shares its memory) keeps it held.
  Tensor view = job(xs[2]).reshape({100, 64});
  Tensor next = job(xs[3]);
  EXPECT_NE(next.raw(), view.raw());
  EXPECT_TRUE(view.reshape({64, 100}).equal(want(xs[2])));
}

// The runtime's threads under load (suite 'threads'; run under
// ThreadSanitizer by scripts/test, see docs/testing.md): several caller
// threads on one job, the worker and the callback thread, sync() from many
// threads at once, run_here() racing submit(), a train job's variables read
// while it trains, and a job destroyed with calls pending. Every test checks
// values and counts; none depends on timing.
#include <gtest/gtest.h>

#include <jobflow/jobflow.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace flow = jobflow;
using flow::Blob;
using flow::Tensor;

namespace {

class RuntimeThreads : public ::testing::Test {
 protected:
  void SetUp() override { flow::session::reset(); }
};

Tensor filled(flow::Shape s, float v) {
  Tensor t(s, flow::Float);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v;
  return t;
}

constexpr int kThreads = 4;
constexpr int kCalls = 50;

// run() from several threads: every caller gets its own result.
TEST_F(RuntimeThreads, ConcurrentBlockingCallersGetTheirOwnResults) {
  auto job = flow::global_function(flow::Predict, flow::function_config().max_in_flight(2),
                                   {flow::Numpy::Placeholder({8, 8})},
                                   [](Blob x) -> flow::Numpy { return flow::matmul(x, x) * 0.5 + 1.0; });
  std::atomic<int> wrong{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const float v = static_cast<float>(t * 100 + i) * 0.01f;
        const Tensor y = job(filled({8, 8}, v));
        const float want = v * v * 8.0f * 0.5f + 1.0f;
        for (int64_t k = 0; k < y.numel(); ++k)
          if (std::abs(y.data<float>()[k] - want) > 1e-3f * std::max(1.0f, want)) ++wrong;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(job.compiled()->steps_run(), kThreads * kCalls);
}

// Asynchronous calls from several threads while others sync(): each
// thread's callbacks come in its own call order, and every sync() returns
// after the calls made before it.
TEST_F(RuntimeThreads, AsyncCallersAndSyncersTogether) {
  auto job = flow::global_function(flow::Predict, flow::function_config().max_in_flight(3),
                                   {flow::Numpy::Placeholder({4})},
                                   [](Blob x) -> flow::Callback<flow::Numpy> { return x + 1.0; });
  std::mutex mu;
  std::vector<std::vector<int>> seen(kThreads);
  std::atomic<int> delivered{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        job(filled({4}, static_cast<float>(i)))([&, t, i](Tensor r) {
          EXPECT_EQ(r.data<float>()[0], static_cast<float>(i) + 1.0f);
          std::lock_guard<std::mutex> lk(mu);
          seen[t].push_back(i);
          ++delivered;
        });
        if (i % 10 == 9) {
          const int before = i + 1;
          job.sync();  // this thread's calls so far are delivered
          std::lock_guard<std::mutex> lk(mu);
          EXPECT_GE(static_cast<int>(seen[t].size()), before);
        }
      }
    });
  for (auto& t : ts) t.join();
  job.sync();
  EXPECT_EQ(delivered.load(), kThreads * kCalls);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kCalls));
    for (int i = 0; i < kCalls; ++i) EXPECT_EQ(seen[t][i], i) << "thread " << t;
  }
}

// submit() from one thread, run_here() from another, run() from a third:
// every call ends exactly once and the step count adds up.
TEST_F(RuntimeThreads, SubmitRunHereAndRunInterleave) {
  auto job = flow::global_function(flow::Predict, flow::function_config().max_in_flight(2),
                                   {flow::Numpy::Placeholder({4})}, [](Blob x) -> flow::Numpy { return x * 3.0; });
  auto& impl = *job.compiled();
  std::atomic<int> finished{0}, errors{0};
  std::thread submitter([&] {
    for (int i = 0; i < kCalls; ++i)
      impl.submit({filled({4}, static_cast<float>(i))}, [&, i](flow::CompiledJob::Result r, std::exception_ptr e) {
        if (e || r.size() != 1 || r[0].data<float>()[3] != 3.0f * static_cast<float>(i)) ++errors;
        ++finished;
      });
  });
  std::thread here([&] {
    for (int i = 0; i < kCalls; ++i)
      if (impl.run_here({filled({4}, 2.0f)})[0].data<float>()[0] != 6.0f) ++errors;
  });
  for (int i = 0; i < kCalls; ++i)
    if (impl.run({filled({4}, 1.0f)})[0].data<float>()[1] != 3.0f) ++errors;
  submitter.join();
  here.join();
  impl.sync();
  EXPECT_EQ(finished.load(), kCalls);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(impl.steps_run(), 3 * kCalls);
  EXPECT_EQ(impl.in_flight(), 0u);
}

// A train job and a predict job share a variable (what a pipeline that
// tees frames into training and evaluation does, each job on its own
// streaming thread): the predict job sees whole steps of the train job,
// never a half-updated variable. Every step moves each element of w by the
// same amount, so w's elements are equal in any whole step, and they only
// decrease.
TEST_F(RuntimeThreads, APredictJobReadsWholeStepsOfATrainJob) {
  auto w_of = [] { return flow::get_variable("threads_w", {256, 1}, flow::Float, flow::constant_initializer(1.0)); };
  auto train = flow::global_function(
      flow::Train, flow::function_config().name("threads_train").max_in_flight(2), {flow::Numpy::Placeholder({2, 256})},
      [&](Blob x) -> flow::Callback<flow::Numpy> {
        auto loss = flow::reduce_sum(flow::matmul(x, w_of()), {1});  // d loss / d w_i = sum of x's column i
        flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({}, {0.001}), 0).minimize(loss);
        return loss;
      });
  auto predict = flow::global_function(flow::Predict, flow::function_config().name("threads_predict"),
                                       {flow::Numpy::Placeholder({1})},
                                       [&](Blob x) -> flow::Numpy { return w_of() * x; });
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, rises{0}, reads{0};
  std::thread reader([&] {
    float last = 2.0f;
    while (!done) {
      const Tensor w = predict(filled({1}, 1.0f));
      const float* p = w.data<float>();
      for (int64_t i = 1; i < w.numel(); ++i)
        if (p[i] != p[0]) {
          ++torn;
          break;
        }
      if (p[0] > last) ++rises;
      last = p[0];
      ++reads;
    }
  });
  std::atomic<int> steps{0};
  for (int i = 0; i < 4 * kCalls; ++i) train(filled({2, 256}, 1.0f))([&](Tensor) { ++steps; });
  train.sync();
  done = true;
  reader.join();
  EXPECT_EQ(steps.load(), 4 * kCalls);
  EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_EQ(rises.load(), 0);
  EXPECT_NEAR(flow::session::variable("threads_w").data<float>()[0], 1.0f - 4 * kCalls * 0.001f, 1e-4);
}

// A job destroyed on one thread while calls are pending: every callback
// runs before the destructor returns, none after.
TEST_F(RuntimeThreads, DestructionWithCallsPendingDeliversEverything) {
  for (int round = 0; round < 5; ++round) {
    std::atomic<int> got{0};
    std::atomic<bool> destroyed{false};
    std::atomic<int> late{0};
    std::thread owner([&] {
      auto job = flow::global_function(flow::Predict, flow::function_config().max_in_flight(4),
                                       {flow::Numpy::Placeholder({16, 16})},
                                       [](Blob x) -> flow::Callback<flow::Numpy> { return flow::matmul(x, x); });
      for (int i = 0; i < 20; ++i)
        job(filled({16, 16}, 0.5f))([&](Tensor r) {
          if (destroyed) ++late;
          EXPECT_EQ(r.data<float>()[0], 4.0f);
          ++got;
        });
    });  // ~Job on `owner`
    owner.join();
    destroyed = true;
    EXPECT_EQ(got.load(), 20) << "round " << round;
    EXPECT_EQ(late.load(), 0);
  }
}

// Errors of asynchronous calls reach sync() on whichever thread calls it
// first, exactly once.
TEST_F(RuntimeThreads, AnAsyncErrorIsRethrownOnce) {
  auto job = flow::global_function(flow::Predict, {flow::Numpy::Placeholder({4})},
                                   [](Blob x) -> flow::Callback<flow::Numpy> { return x; });
  job(filled({4}, 1.0f))([](Tensor) { throw std::runtime_error("callback failed on purpose"); });
  std::atomic<int> thrown{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      try {
        job.sync();
      } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("callback failed on purpose"), std::string::npos) << e.what();
        ++thrown;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(thrown.load(), 1);
}

}  // namespace

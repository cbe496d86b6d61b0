// Writes TensorBoard event files for test_tensorboard_events.py, and prints
// what the engine returned, so the test can compare TensorBoard's reading
// of the files with the engine's own numbers:
//
//   write_events OUTDIR
//     OUTDIR/writer  FileWriter directly: fixed scalars
//     OUTDIR/train   a train job with FunctionConfig::summary_dir, 4 steps
//   stdout: "step N loss L" per train step (L: the mean of the returned
//   loss, in double, %.17g).
#include <jobflow/jobflow.h>
#include <jobflow/summary.h>

#include <cstdio>
#include <exception>
#include <string>

namespace flow = jobflow;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_events OUTDIR\n");
    return 2;
  }
  const std::string out = argv[1];
  try {
    {
      flow::summary::FileWriter w(out + "/writer");
      w.scalar("exact", 0.5, 0);
      w.scalars({{"a", 3.0}, {"b", 1e-3}}, 5);
      w.scalar("exact", -1.25, 7);
      w.flush();
    }
    // y = dense(x) with weights 0.5, loss_i = sum_j (y_ij - t_ij)^2; the
    // rate drops from 0.1 to 0.05 at step 2 (counted from 0).
    auto train = flow::global_function(
        flow::Train, flow::function_config().name("events_train").summary_dir(out + "/train"),
        {flow::Numpy::Placeholder({2, 3}), flow::Numpy::Placeholder({2, 2})},
        [](flow::Blob x, flow::Blob t) -> flow::Numpy {
          auto y = flow::layers::dense(x, 2, {.kernel_initializer = flow::constant_initializer(0.5),
                                              .bias_initializer = flow::zeros_initializer(), .name = "ev"});
          auto loss = flow::reduce_sum(flow::square(y - t), {1});
          flow::optimizer::SGD(flow::optimizer::PiecewiseConstantScheduler({2}, {0.1, 0.05}), 0).minimize(loss);
          return loss;
        });
    flow::CheckPoint().init();
    flow::Tensor x = flow::Tensor::from<float>({2, 3}, {1, 2, 3, 0, 1, 0});
    flow::Tensor t = flow::Tensor::from<float>({2, 2}, {1, -1, 0.5f, 2});
    for (int step = 1; step <= 4; ++step) {
      flow::Tensor loss = train(x, t);
      double sum = 0;
      for (int64_t i = 0; i < loss.numel(); ++i) sum += loss.data<float>()[i];
      std::printf("step %d loss %.17g\n", step, sum / static_cast<double>(loss.numel()));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_events: %s\n", e.what());
    return 1;
  }
}

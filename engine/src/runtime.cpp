// The executor of a compiled job: one worker thread runs calls in order;
// one callback thread delivers asynchronous results in call order. No user
// code (callbacks) runs while the job's lock is held.
#include "jobflow/runtime.h"

#include "jobflow/poll.h"

#include <omp.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include <iostream>
#include <sstream>

#include "compiler.h"
#include "cpu/threads.h"
#include "session_internal.h"

namespace jobflow {

const char* job_type_name(JobType t) { return t == JobType::Train ? "train" : "predict"; }

std::string Structure::str() const {
  std::ostringstream o;
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Leaf:
      return leaf == Leaf::Numpy ? "Numpy" : leaf == Leaf::ListNumpy ? "ListNumpy" : "ListListNumpy";
    case Kind::Tuple:
      o << "(";
      for (size_t i = 0; i < children.size(); ++i) o << (i ? ", " : "") << children[i].str();
      if (children.size() == 1) o << ",";
      o << ")";
      return o.str();
    case Kind::List:
      o << "[";
      for (size_t i = 0; i < children.size(); ++i) o << (i ? ", " : "") << children[i].str();
      o << "]";
      return o.str();
    case Kind::Dict:
      o << "{";
      for (size_t i = 0; i < children.size(); ++i) o << (i ? ", " : "") << keys[i] << ": " << children[i].str();
      o << "}";
      return o.str();
  }
  return "?";
}

std::string Signature::input_str(size_t i) const {
  const TensorSpec& s = inputs.at(i);
  if (is_static(s.shape)) return spec_str(s);
  std::string r = "(";
  for (size_t d = 0; d < s.shape.size(); ++d) {
    r += d ? ", " : "";
    if (s.shape[d] >= 0) r += std::to_string(s.shape[d]);
    else if (i < input_dim_names.size() && d < input_dim_names[i].size() && !input_dim_names[i][d].empty())
      r += input_dim_names[i][d];
    else r += "?";
  }
  return r + (s.shape.size() == 1 ? ",) " : ") ") + dtype_name(s.dtype);
}

std::string Signature::str() const {
  std::ostringstream o;
  o << job_name << "(";
  for (size_t i = 0; i < inputs.size(); ++i) o << (i ? ", " : "") << input_names[i] << ": " << input_str(i);
  o << ") -> " << (callback ? "Callback[" : "") << output_structure.str() << (callback ? "]" : "") << " ["
    << job_type_name(type) << "]";
  return o.str();
}

namespace detail {
// CompiledJob's state and machinery (runtime.h keeps only the interface).
struct CompiledJobImpl {
  using Result = CompiledJob::Result;
  using Done = CompiledJob::Done;
  using Finished = CompiledJob::Finished;
  using StepObserver = CompiledJob::StepObserver;

  CompiledJobImpl(std::shared_ptr<Program> program, Signature sig, size_t max_in_flight, int num_threads);
  ~CompiledJobImpl();  // delivers every pending result first

  void check_inputs(const std::vector<Tensor>& inputs) const;
  Result run(std::vector<Tensor> inputs);
  void submit(std::vector<Tensor> inputs, Finished finished);
  std::shared_ptr<CallState> launch(std::vector<Tensor> inputs);
  Result run_here(std::vector<Tensor> inputs);
  static void attach(const std::shared_ptr<CallState>& c, Done done);
  static void abandon(const std::shared_ptr<CallState>& c);
  void sync();
  bool sync_for(std::chrono::microseconds timeout);
  size_t in_flight() const;
  size_t blocked_callers() const;
  int64_t steps_run() const;
  void set_steps_run(int64_t steps);

  std::shared_ptr<CallState> enqueue(std::vector<Tensor> inputs, bool sync, std::unique_lock<std::mutex>& lk,
                                     Finished finished = nullptr);
  void worker_loop();
  void release_slot_locked();
  void submit_completed_locked();
  void callback_loop();
  void rethrow_pending();

  std::shared_ptr<Program> plan_;  // the static plan, or the plans per call shape (compiler.h)
  Signature sig_;
  JobDefinition def_;
  size_t max_in_flight_;
  int threads_ = 0;
  bool auto_threads_ = false;  // count not fixed: per call from the work and the free cores (cpu/threads.h)
  // On the thread about to run `plan`: sets its OpenMP thread count and,
  // with more than one thread, holds a team (cpu::hold_team; `worker`: the
  // job's worker, woken by wake_team_ when asked to free it).
  void begin_call(const Plan& plan, bool worker);
  std::function<void()> wake_team_;  // made once (constructor): no std::function per call
  mutable std::mutex mu_;
  std::condition_variable cv_work_, cv_space_, cv_deliver_, cv_idle_;
  std::deque<std::shared_ptr<CallState>> queue_;      // waiting to run
  std::atomic<size_t> queued_{0};                     // queue_.size(), readable without mu_ (the worker's spin)
  int spin_us_ = 0;                                   // how long the idle worker polls before sleeping
  std::deque<std::shared_ptr<CallState>> delivery_;   // ran, waiting for callback
  std::atomic<size_t> in_flight_{0};  // changed under mu_; atomic so a spinning caller can read it
  size_t blocked_ = 0;
  bool stopping_ = false;
  bool worker_running_ = false;        // the worker is inside a call (run_here waits)
  size_t submits_open_ = 0;            // submit() calls whose `finished` has not returned (run_here waits)
  std::condition_variable cv_here_;    // the queue emptied / the worker finished a call
  mutable std::mutex exec_mu_;         // one plan_->run at a time (worker or run_here)
  std::exception_ptr error_;
  StepObserver observer_;
  std::thread worker_, callbacker_;
};
}  // namespace detail

struct CallState {
  std::vector<Tensor> inputs;
  std::vector<Tensor> result;
  std::exception_ptr error;
  bool sync = false;       // a blocking run(): the caller waits on `finished`
  bool ran = false;
  bool finished = false;
  std::atomic<bool> finished_flag{false};  // `finished`, readable without the lock (run()'s spin)
  bool abandoned = false;  // async: the Callbacker died without a callback
  CompiledJob::Done done;  // async: set by attach()
  CompiledJob::Finished finished_cb;  // async via submit(): gets the error too
  detail::CompiledJobImpl* job = nullptr;
  std::condition_variable cv;  // sync waiters
};

detail::CompiledJobImpl::CompiledJobImpl(std::shared_ptr<Program> plan, Signature sig, size_t max_in_flight,
                                         int num_threads)
    : plan_(std::move(plan)), sig_(std::move(sig)), max_in_flight_(std::max<size_t>(1, max_in_flight)) {
  if (num_threads <= 0)
    if (const char* env = std::getenv("JOBFLOW_NUM_THREADS"); env && *env) num_threads = std::atoi(env);
  if (num_threads < 0) throw Error("[" + sig_.job_name + "] num_threads must be >= 0, got " + std::to_string(num_threads));
  threads_ = num_threads > 0 ? num_threads : cpu::default_threads();
  auto_threads_ = num_threads == 0;
  spin_us_ = spin_us();
  wake_team_ = [this] {
    { std::lock_guard<std::mutex> wake(mu_); }  // after the worker's last look at its predicate
    cv_work_.notify_all();
  };
  worker_ = std::thread([this, num_threads] {
    // OpenMP's thread count is per calling thread: this sets it for every
    // kernel of this job and nothing else.
    if (num_threads > 0) omp_set_num_threads(num_threads);
    worker_loop();
  });
  callbacker_ = std::thread([this] { callback_loop(); });
}

detail::CompiledJobImpl::~CompiledJobImpl() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_idle_.wait(lk, [&] { return in_flight_ == 0; });
    stopping_ = true;
    if (error_) {  // a destructor cannot throw: say it rather than lose it
      try {
        std::rethrow_exception(error_);
      } catch (const std::exception& e) {
        std::cerr << "jobflow: job '" << sig_.job_name << "' was destroyed with an uncollected error of an "
                  << "asynchronous call: " << e.what() << "\n";
      } catch (...) {
      }
    }
  }
  cv_work_.notify_all();
  cv_deliver_.notify_all();
  worker_.join();
  callbacker_.join();
}

void detail::CompiledJobImpl::begin_call(const Plan& plan, bool worker) {
  const int t =
      auto_threads_ ? cpu::auto_threads(plan.flops_per_call(), threads_, sig_.type != JobType::Train) : threads_;
  if (t > 0 && omp_get_max_threads() != t) omp_set_num_threads(t);
  // Holding a team from the start of the call asks idle holders to free
  // theirs while this call computes (their partners would spin).
  static const std::function<void()> no_wake;  // run_here's caller: looks when it next goes idle
  if (omp_get_max_threads() > 1) cpu::hold_team(worker ? wake_team_ : no_wake);
}

int spin_us() {
  static const int us = [] {
    const char* env = std::getenv("JOBFLOW_SPIN_US");
    return env && *env ? std::max(0, std::atoi(env)) : 50;
  }();
  return us;
}

void detail::CompiledJobImpl::check_inputs(const std::vector<Tensor>& in) const {
  if (in.size() != sig_.inputs.size())
    throw Error("[" + sig_.job_name + "] expects " + std::to_string(sig_.inputs.size()) + " input tensors, got " +
                std::to_string(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    const TensorSpec& want = sig_.inputs[i];
    if (!in[i].defined())
      throw Error("[" + sig_.job_name + "] argument '" + sig_.input_names[i] + "' is an empty tensor; expected " +
                  spec_str(want));
    // A dynamic dim (kDynamic) takes any size; the others must match.
    if (!shapes_agree(in[i].shape(), want.shape) || in[i].dtype() != want.dtype) {
      std::string why;
      if (in[i].dtype() == want.dtype && in[i].ndim() == static_cast<int>(want.shape.size()))
        for (size_t d = 0; d < want.shape.size() && why.empty(); ++d)
          if (!dims_agree(in[i].shape()[d], want.shape[d]))
            why = " (dim " + std::to_string(d) + " is " + std::to_string(in[i].shape()[d]) + ", expected " +
                  std::to_string(want.shape[d]) + ")";
      throw Error("[" + sig_.job_name + "] argument '" + sig_.input_names[i] + "': expected " + sig_.input_str(i) +
                  ", got " + spec_str({in[i].shape(), in[i].dtype()}) + why);
    }
  }
}

void detail::CompiledJobImpl::rethrow_pending() {
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

// Checks the inputs, waits for a free slot (backpressure) and queues the
// call. Returns with `lk` holding the job's lock.
std::shared_ptr<CallState> detail::CompiledJobImpl::enqueue(std::vector<Tensor> inputs, bool sync, std::unique_lock<std::mutex>& lk,
                                                Finished finished) {
  if (std::this_thread::get_id() == callbacker_.get_id() || std::this_thread::get_id() == worker_.get_id())
    throw Error("[" + sig_.job_name + "] called from its own callback: the call could wait for a slot that only this "
                "callback frees; call the job from another thread");
  check_inputs(inputs);
  auto c = std::make_shared<CallState>();
  c->inputs = std::move(inputs);
  c->sync = sync;
  c->job = this;
  c->finished_cb = std::move(finished);  // set before the call is queued: it may fail at once
  lk = std::unique_lock<std::mutex>(mu_);
  rethrow_pending();
  ++blocked_;
  if (in_flight_ >= max_in_flight_ && spin_us_ > 0) {  // a slot frees within the spin for small jobs
    lk.unlock();
    poll_while([&] { return in_flight_.load(std::memory_order_acquire) >= max_in_flight_; });
    lk.lock();
  }
  cv_space_.wait(lk, [&] { return in_flight_ < max_in_flight_; });
  --blocked_;
  ++in_flight_;
  queue_.push_back(c);
  queued_.store(queue_.size(), std::memory_order_release);
  cv_work_.notify_one();
  return c;
}

std::shared_ptr<CallState> detail::CompiledJobImpl::launch(std::vector<Tensor> inputs) {
  std::unique_lock<std::mutex> lk;
  return enqueue(std::move(inputs), false, lk);
}

CompiledJob::Result detail::CompiledJobImpl::run(std::vector<Tensor> inputs) {
  std::unique_lock<std::mutex> lk;
  auto c = enqueue(std::move(inputs), true, lk);
  if (spin_us_ > 0) {  // small jobs finish within the spin: no sleep, no wake-up
    lk.unlock();
    poll_while([&] { return !c->finished_flag.load(std::memory_order_acquire); });
    lk.lock();
  }
  c->cv.wait(lk, [&] { return c->finished; });
  if (c->error) std::rethrow_exception(c->error);
  return std::move(c->result);
}

void detail::CompiledJobImpl::submit(std::vector<Tensor> inputs, Finished finished) {
  if (!finished) throw Error("[" + sig_.job_name + "] submit() needs a completion function");
  std::unique_lock<std::mutex> lk;
  enqueue(std::move(inputs), false, lk, std::move(finished));
  ++submits_open_;  // still under mu_: the worker cannot complete it before this
}

void detail::CompiledJobImpl::attach(const std::shared_ptr<CallState>& c, Done done) {
  detail::CompiledJobImpl* j = c->job;
  {
    std::lock_guard<std::mutex> lk(j->mu_);
    c->done = std::move(done);
  }
  j->cv_deliver_.notify_all();
}

void detail::CompiledJobImpl::abandon(const std::shared_ptr<CallState>& c) {
  detail::CompiledJobImpl* j = c->job;
  {
    std::lock_guard<std::mutex> lk(j->mu_);
    c->abandoned = true;
  }
  j->cv_deliver_.notify_all();
}

void detail::CompiledJobImpl::sync() {
  if (std::this_thread::get_id() == callbacker_.get_id() || std::this_thread::get_id() == worker_.get_id())
    throw Error("[" + sig_.job_name + "] sync() (or CheckPoint.save/load) called from the job's own callback "
                "would wait for itself; call it after the calls, outside the callback");
  std::unique_lock<std::mutex> lk(mu_);
  cv_idle_.wait(lk, [&] { return in_flight_ == 0; });
  rethrow_pending();
}

bool detail::CompiledJobImpl::sync_for(std::chrono::microseconds timeout) {
  if (std::this_thread::get_id() == callbacker_.get_id() || std::this_thread::get_id() == worker_.get_id())
    throw Error("[" + sig_.job_name + "] sync() (or CheckPoint.save/load) called from the job's own callback "
                "would wait for itself; call it after the calls, outside the callback");
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_idle_.wait_for(lk, timeout, [&] { return in_flight_ == 0; })) return false;
  rethrow_pending();
  return true;
}

int64_t detail::CompiledJobImpl::steps_run() const {
  std::lock_guard<std::mutex> exec(exec_mu_);  // not in the middle of a step
  return plan_->steps_run();
}
void detail::CompiledJobImpl::set_steps_run(int64_t steps) {
  if (steps < 0) throw Error("[" + sig_.job_name + "] a step count cannot be negative (" + std::to_string(steps) + ")");
  sync();
  std::lock_guard<std::mutex> exec(exec_mu_);
  plan_->set_steps_run(steps);
}

size_t detail::CompiledJobImpl::in_flight() const {
  std::lock_guard<std::mutex> lk(mu_);
  return in_flight_;
}
size_t detail::CompiledJobImpl::blocked_callers() const {
  std::lock_guard<std::mutex> lk(mu_);
  return blocked_ > 0 && in_flight_ >= max_in_flight_ ? blocked_ : 0;
}

// A submit()'s `finished` has returned. Holds mu_.
void detail::CompiledJobImpl::submit_completed_locked() {
  if (--submits_open_ == 0) cv_here_.notify_all();
}

// A call has ended (delivered, or failed): frees its slot. Holds mu_.
void detail::CompiledJobImpl::release_slot_locked() {
  --in_flight_;
  cv_space_.notify_one();
  if (in_flight_ == 0) cv_idle_.notify_all();
}

CompiledJob::Result detail::CompiledJobImpl::run_here(std::vector<Tensor> inputs) {
  if (std::this_thread::get_id() == callbacker_.get_id() || std::this_thread::get_id() == worker_.get_id())
    throw Error("[" + sig_.job_name + "] run_here() called from the job's own callback");
  check_inputs(inputs);
  {
    std::unique_lock<std::mutex> lk(mu_);
    rethrow_pending();
    // After every call made before it: nothing queued, nothing running, and
    // every earlier submit() completed (its `finished` returned), so a
    // caller mixing the two sees results in call order.
    cv_here_.wait(lk, [&] { return queue_.empty() && !worker_running_ && submits_open_ == 0; });
    ++in_flight_;  // sync() and CheckPoint.save wait for it like any call
  }
  std::vector<Tensor> result;
  std::exception_ptr err;
  try {
    std::lock_guard<std::mutex> exec(exec_mu_);
    // The thread count per plan: a job with dynamic shapes does more or less
    // work per call with its shapes. The step counts even if the observer
    // then fails.
    result = plan_->run(inputs, [this](const Plan& p) { begin_call(p, false); });
    if (observer_) observer_(plan_->steps_run(), result);
  } catch (...) {
    err = std::current_exception();
  }
  cpu::team_call_ended();
  {
    std::lock_guard<std::mutex> lk(mu_);
    release_slot_locked();
  }
  if (err) std::rethrow_exception(err);
  return result;
}

void detail::CompiledJobImpl::worker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  bool poll = true;  // not after a wake-up for the team alone (another job computes)
  for (;;) {
    if (queue_.empty() && !stopping_ && spin_us_ > 0 && poll) {
      // Calls often come back to back (a pipeline's frames): poll a little
      // before sleeping, so the next call needs no futex wake-up (on a VM
      // each sleep/wake pair costs tens of microseconds).
      lk.unlock();
      poll_while([&] { return queued_.load(std::memory_order_acquire) == 0; });
      lk.lock();
    }
    int64_t due = -1;  // microseconds until this thread's team is to be freed
    if (queue_.empty() && !stopping_) {
      // About to sleep: free this thread's OpenMP team if another thread
      // started one since and this one has been quiet long enough
      // (cpu::hold_team; never with mu_ held, which `wake` takes). A later
      // call builds it again.
      lk.unlock();
      due = idle_calling_thread();
      lk.lock();
    }
    if (due >= 0)  // asked, not yet due: free it then, if still idle
      cv_work_.wait_for(lk, std::chrono::microseconds(due + 1), [&] { return stopping_ || !queue_.empty(); });
    else
      cv_work_.wait(lk, [&] { return stopping_ || !queue_.empty() || cpu::team_release_asked(); });
    if (queue_.empty()) {
      if (stopping_) return;
      poll = false;
      continue;  // asked to free the team: idle_calling_thread() above
    }
    poll = true;
    std::shared_ptr<CallState> c = queue_.front();
    queue_.pop_front();
    queued_.store(queue_.size(), std::memory_order_release);
    worker_running_ = true;
    lk.unlock();
    std::vector<Tensor> result;
    std::exception_ptr err;
    try {
      std::lock_guard<std::mutex> exec(exec_mu_);
      result = plan_->run(c->inputs, [this](const Plan& p) { begin_call(p, true); });
      if (observer_) observer_(plan_->steps_run(), result);
    } catch (...) {
      err = std::current_exception();
    }
    cpu::team_call_ended();
    lk.lock();
    worker_running_ = false;
    cv_here_.notify_all();
    c->inputs.clear();
    c->result = std::move(result);
    c->error = err;
    c->ran = true;
    if (c->sync) {
      c->finished = true;
      c->finished_flag.store(true, std::memory_order_release);
      c->cv.notify_all();
      release_slot_locked();
    } else if (c->finished_cb && delivery_.empty()) {
      // submit(): nothing older waits for delivery, so the completion can
      // run here, in order, without waking the callback thread (one thread
      // hand-off less per call; it matters for small jobs in pipelines).
      Finished finished_cb = std::move(c->finished_cb);
      std::vector<Tensor> r = std::move(c->result);
      lk.unlock();
      std::exception_ptr cb_err;
      try {
        finished_cb(std::move(r), err);
      } catch (...) {
        cb_err = std::current_exception();
      }
      lk.lock();
      if (cb_err && !error_) error_ = cb_err;
      c->finished = true;
      submit_completed_locked();
      release_slot_locked();
    } else {
      delivery_.push_back(c);
      cv_deliver_.notify_all();
    }
  }
}

void detail::CompiledJobImpl::callback_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    // Deliver strictly in call order: wait until the oldest async call has
    // run and has a callback (or was abandoned).
    cv_deliver_.wait(lk, [&] {
      if (!delivery_.empty()) {
        auto& c = delivery_.front();
        if (c->done || c->finished_cb || c->abandoned || c->error) return true;
      }
      return stopping_ && delivery_.empty();
    });
    if (delivery_.empty()) return;
    std::shared_ptr<CallState> c = delivery_.front();
    delivery_.pop_front();
    Done done = std::move(c->done);
    Finished finished_cb = std::move(c->finished_cb);
    std::exception_ptr err = c->error;
    std::vector<Tensor> result = std::move(c->result);
    lk.unlock();
    std::exception_ptr cb_err;
    if (finished_cb) {
      try {
        finished_cb(std::move(result), err);
      } catch (...) {
        cb_err = std::current_exception();
      }
      err = nullptr;  // handed to the caller
    } else if (!err && done && !c->abandoned) {
      try {
        done(std::move(result));
      } catch (...) {
        cb_err = std::current_exception();
      }
    }
    lk.lock();
    if (err && !error_) error_ = err;
    if (cb_err && !error_) error_ = cb_err;
    c->finished = true;
    if (finished_cb) submit_completed_locked();
    release_slot_locked();
  }
}

// ------------------------------------------------------------- interface

CompiledJob::CompiledJob(std::shared_ptr<Plan> plan, Signature sig, size_t max_in_flight, int num_threads)
    : impl_(std::make_unique<detail::CompiledJobImpl>(Program::of_plan(std::move(plan)), std::move(sig), max_in_flight,
                                                      num_threads)) {}
CompiledJob::CompiledJob(std::shared_ptr<Program> program, Signature sig, size_t max_in_flight, int num_threads)
    : impl_(std::make_unique<detail::CompiledJobImpl>(std::move(program), std::move(sig), max_in_flight,
                                                      num_threads)) {}
CompiledJob::~CompiledJob() {
  // The impl delivers every pending result as it goes; then the variables
  // only this job had (its variable scope: an ordinary ONNX model's own
  // weights and step counter) leave the session with it, so a jobfunction
  // element that reloads such a model does not keep every copy.
  const std::string scope = impl_ ? impl_->def_.variable_scope : std::string();
  impl_.reset();
  internal::VariableStore::get().forget_scope(scope);
}
const Signature& CompiledJob::signature() const { return impl_->sig_; }
const JobDefinition& CompiledJob::definition() const { return impl_->def_; }
void CompiledJob::set_definition(JobDefinition d) { impl_->def_ = std::move(d); }
const Plan& CompiledJob::plan() const {
  std::lock_guard<std::mutex> exec(impl_->exec_mu_);  // the latest plan of a dynamic job changes per call
  return impl_->plan_->plan();
}
PlanCacheStats CompiledJob::plan_cache_stats() const {
  std::lock_guard<std::mutex> exec(impl_->exec_mu_);
  return impl_->plan_->cache_stats();
}
std::string CompiledJob::describe() const {
  std::lock_guard<std::mutex> exec(impl_->exec_mu_);
  return impl_->plan_->describe();
}
const PlanOptions& job_plan_options(const CompiledJob& job) { return job.impl_->plan_->options(); }
void CompiledJob::set_step_observer(StepObserver o) { impl_->observer_ = std::move(o); }
void CompiledJob::check_inputs(const std::vector<Tensor>& inputs) const { impl_->check_inputs(inputs); }
CompiledJob::Result CompiledJob::run(std::vector<Tensor> inputs) { return impl_->run(std::move(inputs)); }
void CompiledJob::submit(std::vector<Tensor> inputs, Finished finished) {
  impl_->submit(std::move(inputs), std::move(finished));
}
std::shared_ptr<CallState> CompiledJob::launch(std::vector<Tensor> inputs) { return impl_->launch(std::move(inputs)); }
CompiledJob::Result CompiledJob::run_here(std::vector<Tensor> inputs) { return impl_->run_here(std::move(inputs)); }
void CompiledJob::attach(const std::shared_ptr<CallState>& c, Done done) {
  detail::CompiledJobImpl::attach(c, std::move(done));
}
void CompiledJob::abandon(const std::shared_ptr<CallState>& c) { detail::CompiledJobImpl::abandon(c); }
void CompiledJob::sync() { impl_->sync(); }
bool CompiledJob::sync_for(std::chrono::microseconds timeout) { return impl_->sync_for(timeout); }
size_t CompiledJob::max_in_flight() const { return impl_->max_in_flight_; }
int CompiledJob::num_threads() const { return impl_->threads_; }
size_t CompiledJob::in_flight() const { return impl_->in_flight(); }
size_t CompiledJob::blocked_callers() const { return impl_->blocked_callers(); }
int64_t CompiledJob::steps_run() const { return impl_->steps_run(); }
void CompiledJob::set_steps_run(int64_t steps) { impl_->set_steps_run(steps); }

void release_calling_thread() {
#ifdef _LIBGOMP_OMP_LOCK_DEFINED
  // libgomp frees only the calling thread's pool here (other runtimes pause
  // every thread of the process, which a job running elsewhere would not
  // survive). Inside any region, a one-thread one too, it refuses and
  // frees nothing: then the thread still holds its team.
  if (omp_get_level() > 0 || omp_pause_resource_all(omp_pause_soft) != 0) return;
#endif
  cpu::forget_team();
}

int64_t idle_calling_thread() {
  const int64_t due = cpu::team_release_due_in_us();
  if (due != 0) return due;
  release_calling_thread();
  // Not freed (inside a region: never from an idle thread): stop asking,
  // rather than come back every microsecond.
  if (cpu::team_release_asked()) cpu::forget_team();
  return -1;
}

}  // namespace jobflow

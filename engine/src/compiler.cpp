// The compiler's driver: Plan::compile runs the passes of compiler/passes.h
// in order (place, prune, fuse, order, layouts, memory, bind); Plan::run is one
// call of the plan it built. The plan cache (compiler/plan_cache.cpp) specializes the
// graph of a job with dynamic shapes first and then compiles it the same way.
#include "compiler.h"

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <sstream>

#include "compiler/passes.h"
#include "cpu/isa.h"
#include "jobflow/backend.h"
#include "session_internal.h"

namespace jobflow {

std::shared_ptr<Plan> Plan::compile(std::shared_ptr<Graph> g, std::vector<int> inputs, std::vector<int> outputs,
                                    std::vector<int> updates, PlanOptions opts) {
  compiler::PlanBuild b;
  b.graph = std::move(g);
  b.inputs = std::move(inputs);
  b.outputs = std::move(outputs);
  b.updates = std::move(updates);
  b.opts = std::move(opts);
  return compile(b);
}

std::shared_ptr<Plan> Plan::compile(compiler::PlanBuild& b) {
  // Whether a bf16 job computes in bf16 here (the CPU's instructions and
  // their speed, JOBFLOW_BF16), decided once: the layout pass and bind
  // read opts.bf16 from here on.
  if (b.opts.bf16) b.opts.bf16 = cpu::bf16_usable(b.opts.job_name);
  compiler::place(b);
  compiler::prune(b);
  compiler::fuse(b);
  compiler::order(b);
  compiler::layouts(b);
  compiler::plan_memory(b);
  return compiler::bind(b);
}

std::vector<Tensor> Plan::run(const std::vector<Tensor>& inputs) {
  for (auto& v : variables_) {
    auto* e = static_cast<internal::VariableEntry*>(v.get());
    if (!e->initialized.load(std::memory_order_acquire)) internal::VariableStore::get().ensure_initialized(*e);
  }
  int64_t* step_var = nullptr;
  if (step_var_) {
    auto* e = static_cast<internal::VariableEntry*>(step_var_.get());
    if (!e->initialized.load(std::memory_order_acquire)) internal::VariableStore::get().ensure_initialized(*e);
    step_var = e->value.data<int64_t>();
  }
  // The step's variables for its whole length: another job (on another
  // thread) that shares them sees whole steps; a train step writes them.
  internal::HeldVariables hold(&held_, opts_.type == JobType::Train);
  const int64_t step = step_var ? *step_var : step_;
  // When the call ends, returned or thrown from a step, no slot keeps the
  // caller's tensors or a result's memory (until the plan's next call,
  // which a plan evicted from the cache may never get).
  struct Release {
    Plan* p;
    ~Release() {
      for (const Patch& q : p->patches_) (q.is_output ? p->steps_[q.step].out : p->steps_[q.step].in)[q.slot] = Tensor();
      for (const auto& [st, slot] : p->out_direct_)
        if (st >= 0) p->steps_[st].out[slot] = Tensor();
    }
  } release{this};
  for (const Patch& p : patches_) {
    Tensor t = inputs[p.input].reshape(p.shape);
    (p.is_output ? steps_[p.step].out : steps_[p.step].in)[p.slot] = std::move(t);
  }
  // Outputs their steps write straight into the returned tensors.
  for (size_t i = 0; i < out_direct_.size(); ++i)
    if (const auto [st, slot] = out_direct_[i]; st >= 0)
      steps_[st].out[slot] = result_memory(i, out_shapes_[i], out_dtypes_[i]);
  ExecContext ctx;
  ctx.step = step;
  ctx.seed = opts_.seed;
  ctx.training = opts_.type == JobType::Train;
  ctx.bf16 = bf16_;
  ctx.lr = opts_.schedule.impl() ? opts_.schedule.lr(step) : 0.0;
  if (!profile_) {
    for (Step& s : steps_) s.backend->eval(*s.op, s.in, s.out, ctx);
  } else {
    // The wall clock, or (JOBFLOW_PROFILE=cpu) the CPU time of every
    // thread of the process: on a busy machine a one-thread job's CPU time
    // is what its kernels took, whatever share of a core it got.
    auto now = [cpu = profile_cpu_] {
      timespec ts{};
      clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    };
    for (size_t i = 0; i < steps_.size(); ++i) {
      const double t0 = now();
      steps_[i].backend->eval(*steps_[i].op, steps_[i].in, steps_[i].out, ctx);
      prof_seconds_[i] += now() - t0;
    }
  }
  for (auto& v : written_) static_cast<internal::VariableEntry*>(v.get())->version.fetch_add(1, std::memory_order_acq_rel);
  ++step_;
  ++runs_;
  if (step_var) *step_var = step + 1;
  // The results leave the arena (the next call reuses it): copied into
  // fresh tensors, not zero-filled first, large ones by the call's threads
  // (perf: zeroing and copying ssdlite320's 1.3 MB of feature maps were 2%
  // of its batch-1 samples, on the calling thread while its partner
  // waited; the A/B of whole calls was within this machine's noise).
  // "Fresh": in the memory of an earlier result for that output whose
  // caller has let go of it (result_memory): a large result's memory is
  // not given back to the system and faulted in again at every call (a
  // returned 256 x 160 x 160 map: page faults and the kernel's zeroing of
  // 26 MB took about a quarter of each call's samples).
  auto copy_out = [this](size_t i, const Tensor& src) {
    Tensor t = result_memory(i, src.shape(), src.dtype());
    const auto* s = static_cast<const unsigned char*>(src.raw());
    auto* d = static_cast<unsigned char*>(t.raw());
    const int64_t n = src.nbytes();
    constexpr int64_t kChunk = int64_t{256} << 10;
    if (n < 2 * kChunk) {
      if (n > 0) std::memcpy(d, s, static_cast<size_t>(n));
      return t;
    }
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t b = c * kChunk;
      std::memcpy(d + b, s + b, static_cast<size_t>(std::min(kChunk, n - b)));
    }
    return t;
  };
  std::vector<Tensor> out;
  out.reserve(out_views_.size());
  for (size_t i = 0; i < out_views_.size(); ++i) {
    if (const auto [st, slot] = out_direct_[i]; st >= 0) {  // written there by its step
      out.push_back(std::move(steps_[st].out[slot]));  // (the slot is cleared on the way out)
      continue;
    }
    out.push_back(copy_out(i, out_from_input_[i] >= 0 ? inputs[out_from_input_[i]].reshape(out_shapes_[i])
                                                      : out_views_[i]));
  }
  return out;
}

// Per output, up to two buffers of results their callers let go of. A
// result's deleter runs on whichever thread drops its last reference, after
// every other owner's accesses (shared_ptr's counting orders them), and
// hands the buffer back under the mutex, which the next call takes before
// writing it: that call never races with the caller's last read. Buffers
// of a plan that is gone are freed instead.
struct Plan::ResultPool {
  std::mutex mu;
  bool closed = false;
  std::vector<std::vector<std::shared_ptr<void>>> free;  // per output (a plan's output has one size)
};

Tensor Plan::result_memory(size_t i, const Shape& shape, DType dtype) {
  std::shared_ptr<void> mem;
  {
    std::lock_guard<std::mutex> lock(results_->mu);
    auto& f = results_->free[i];
    if (!f.empty()) {  // the latest released (the warmest in the caches)
      mem = std::move(f.back());
      f.pop_back();
    }
  }
  if (!mem) mem = aligned_alloc_shared(static_cast<size_t>(jobflow::numel(shape)) * dtype_size(dtype));
  void* data = mem.get();
  std::shared_ptr<void> owner(data, [pool = results_, mem = std::move(mem), i](void*) mutable {
    std::shared_ptr<void> evicted;  // freed after the lock is let go
    std::lock_guard<std::mutex> lock(pool->mu);
    if (pool->closed) return;
    auto& f = pool->free[i];
    if (f.size() == 2) {  // the newest two
      evicted = std::move(f.front());
      f.erase(f.begin());
    }
    f.push_back(std::move(mem));
  });
  return Tensor::wrap(data, shape, dtype, std::move(owner));
}

void Plan::init_results() {
  results_ = std::make_shared<ResultPool>();
  results_->free.resize(outputs_.size());
}

int Plan::outputs_written_directly() const {
  return static_cast<int>(std::count_if(out_direct_.begin(), out_direct_.end(),
                                        [](const std::pair<int, int>& d) { return d.first >= 0; }));
}

int64_t Plan::steps_run() const {
  if (step_var_) {
    auto* e = static_cast<internal::VariableEntry*>(step_var_.get());
    internal::HeldVariables hold({e}, false);  // the variable may be another job's too
    if (e->initialized.load(std::memory_order_acquire)) return e->value.data<int64_t>()[0];
    return 0;
  }
  return step_;
}

void Plan::set_steps_run(int64_t s) {
  if (step_var_) {
    auto* e = static_cast<internal::VariableEntry*>(step_var_.get());
    internal::VariableStore::get().ensure_initialized(*e);
    internal::HeldVariables hold({e}, true);
    e->value.data<int64_t>()[0] = s;
  } else {
    step_ = s;
  }
}

Plan::~Plan() {
  if (results_) {  // results still held return their memory to no one
    std::vector<std::vector<std::shared_ptr<void>>> kept;  // freed after the lock is let go
    std::lock_guard<std::mutex> lock(results_->mu);
    results_->closed = true;
    kept.swap(results_->free);
  }
  if (profile_ && runs_ > 0) std::cerr << profile_report();
}

std::string Plan::profile_report() const {
  std::ostringstream o;
  double total = 0;
  for (double t : prof_seconds_) total += t;
  o << "profile of job '" << opts_.job_name << "'" << (opts_.variant.empty() ? "" : " " + opts_.variant) << ": " << runs_ << " calls, " << (total / std::max<int64_t>(runs_, 1)) * 1e3 << " ms per call in nodes"
    << (profile_cpu_ ? " (CPU time)" : "") << "\n";
  std::vector<size_t> idx(steps_.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return prof_seconds_[a] > prof_seconds_[b]; });
  for (size_t i : idx) {
    const Node& n = g_->nodes[steps_[i].node];
    char line[256];
    std::snprintf(line, sizeof line, "  %8.3f ms %5.1f%%  %s (%s)\n", prof_seconds_[i] / std::max<int64_t>(runs_, 1) * 1e3,
                  total > 0 ? 100.0 * prof_seconds_[i] / total : 0.0, n.name.c_str(), steps_[i].op->name());
    o << line;
  }
  return o.str();
}

std::vector<std::string> Plan::op_sequence() const {
  std::vector<std::string> r;
  for (const Step& s : steps_) {
    std::string a = s.op->attrs();
    r.push_back(std::string(s.op->name()) + (a.empty() ? "" : "[" + a + "]"));
  }
  return r;
}

std::string Plan::describe() const {
  std::ostringstream o;
  o << "plan of job '" << opts_.job_name << "'" << (opts_.variant.empty() ? "" : " " + opts_.variant) << " ("
    << job_type_name(opts_.type) << "): " << steps_.size()
    << " nodes, arena " << arena_bytes_ << " bytes (" << unshared_bytes_ << " without reuse)\n";
  for (const Step& s : steps_) {
    const Node& n = g_->nodes[s.node];
    o << "  " << n.name << " = " << s.op->name();
    std::string a = s.op->attrs();
    if (!a.empty()) o << "[" << a << "]";
    o << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) o << (i ? ", " : "") << spec_str(g_->blobs[n.inputs[i]].spec);
    o << ") -> (";
    for (size_t i = 0; i < n.outputs.size(); ++i) o << (i ? ", " : "") << spec_str(g_->blobs[n.outputs[i]].spec);
    o << ") on " << s.backend->name() << "\n";
  }
  return o.str();
}

}  // namespace jobflow

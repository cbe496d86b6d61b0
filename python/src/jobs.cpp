// Job functions from Python: the engine's detail::JobBuilder builds the
// graph while the Python body runs once under its scope (the C++ template
// global_function does the same with a lambda); calls pass NumPy arrays to
// the compiled job and give back NumPy arrays in the declared structure.
//
// Threads and the GIL: every wait (a synchronous call, a slot for an
// asynchronous one, sync(), checkpoints) releases the GIL, and long waits
// check for Ctrl-C every 50 ms. The engine's callback thread takes the GIL
// only to convert a result and run the Python callback. No engine thread
// waits for the GIL while it holds a job's lock: references it drops are
// queued (common.h, PyRef).
#include "common.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#ifdef JOBFLOW_PY_ONNX
#include <jobflow/onnx.h>
#include <jobflow/poll.h>
#endif

namespace jobflow::python {

namespace {

using Leaf = Structure::Leaf;
using Kind = Structure::Kind;

// Set while a Python callback runs on an engine thread.
thread_local bool t_in_callback = false;

// Jobs whose last reference went away on one of their own threads are
// destroyed later, on a thread of the caller's (a job cannot join itself).
std::mutex g_reap_mu;
std::vector<std::shared_ptr<CompiledJob>> g_reap;

void release_job(std::shared_ptr<CompiledJob>& j) {
  if (!j) return;
  if (j.use_count() == 1) {
    if (t_in_callback) {
      std::lock_guard<std::mutex> lk(g_reap_mu);
      g_reap.push_back(std::move(j));
      return;
    }
    // The destructor waits for the job's calls, whose callbacks need the GIL.
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release unlocked;
      j.reset();
      return;
    }
  }
  j.reset();
}

void reap() {
  std::vector<std::shared_ptr<CompiledJob>> v;
  {
    std::lock_guard<std::mutex> lk(g_reap_mu);
    if (g_reap.empty()) return;
    v.swap(g_reap);
  }
  py::gil_scoped_release unlocked;
  v.clear();
}

void housekeeping() {
  drain_deferred();
  if (!t_in_callback) reap();
}

// Raises KeyboardInterrupt (or what a signal handler raised); call without
// the GIL.
void check_signals() {
  py::gil_scoped_acquire locked;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

constexpr auto kSignalPoll = std::chrono::milliseconds(50);

// job.sync() that Ctrl-C interrupts.
void wait_idle(CompiledJob& job) {
  py::gil_scoped_release unlocked;
  while (!job.sync_for(kSignalPoll)) check_signals();
}

// A blocking call that Ctrl-C interrupts (the call itself then still runs;
// its result is dropped). As fast as CompiledJob::run(): the completion
// runs on the worker and the caller polls before it sleeps.
std::vector<Tensor> run_interruptible(CompiledJob& job, std::vector<Tensor> in) {
  struct Box {
    std::mutex m;
    std::condition_variable cv;
    std::atomic<bool> done{false};
    std::vector<Tensor> result;
    std::exception_ptr error;
  };
  auto box = std::make_shared<Box>();
  py::gil_scoped_release unlocked;
  job.submit(std::move(in), [box](std::vector<Tensor> r, std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lk(box->m);
      box->result = std::move(r);
      box->error = e;
      box->done.store(true, std::memory_order_release);
    }
    box->cv.notify_one();
  });
  poll_while([&] { return !box->done.load(std::memory_order_acquire); });
  std::unique_lock<std::mutex> lk(box->m);
  while (!box->done.load(std::memory_order_acquire)) {
    if (box->cv.wait_for(lk, kSignalPoll, [&] { return box->done.load(std::memory_order_acquire); })) break;
    lk.unlock();
    check_signals();
    lk.lock();
  }
  if (box->error) std::rethrow_exception(box->error);
  return std::move(box->result);
}

// Every job made here, so flow.sync_default_session() can wait for them
// with Ctrl-C honoured before the engine's own (uninterruptible) wait.
std::mutex g_jobs_mu;
std::vector<std::weak_ptr<CompiledJob>> g_jobs;

void register_job(const std::shared_ptr<CompiledJob>& j) {
  std::lock_guard<std::mutex> lk(g_jobs_mu);
  std::erase_if(g_jobs, [](const std::weak_ptr<CompiledJob>& w) { return w.expired(); });
  g_jobs.push_back(j);
}

void wait_all_jobs() {
  std::vector<std::shared_ptr<CompiledJob>> live;
  {
    std::lock_guard<std::mutex> lk(g_jobs_mu);
    for (auto& w : g_jobs)
      if (auto j = w.lock()) live.push_back(std::move(j));
  }
  for (auto& j : live) wait_idle(*j);
  for (auto& j : live) release_job(j);
}

// ---- argument trees ----

struct InNode {
  PlaceholderSpec spec;  // names and dtypes filled
  std::string name;      // leaf: the flat input name (as errors say it)
  TensorSpec item;       // leaf: one array's spec (ListListNumpy: one item)
  std::vector<InNode> children;
};

InNode in_node(const PlaceholderSpec& p, const Signature& sig, int& next) {
  InNode n;
  n.spec = p;
  if (p.kind == Kind::Tuple) {
    for (const auto& c : p.children) n.children.push_back(in_node(c, sig, next));
    return n;
  }
  const int i = next++;
  n.name = sig.input_names.at(i);
  n.spec.name = n.name;
  TensorSpec flat = sig.inputs.at(i);
  if (p.leaf == Leaf::ListListNumpy) flat.shape.erase(flat.shape.begin());
  n.item = flat;
  return n;
}

bool is_sequence(py::handle h) { return py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h); }

std::vector<Tensor> tensors_of(py::handle seq, const InNode& n, const std::string& job) {
  std::vector<Tensor> v;
  for (py::handle item : seq) v.push_back(to_tensor(item, n.item, job, n.name));
  return v;
}

void pack(const InNode& n, py::handle arg, std::vector<Tensor>& flat, const std::string& job) {
  if (n.spec.kind == Kind::Tuple) {
    if (!is_sequence(arg)) {
      Tensor t = to_tensor(arg, {{}, DType::Float32}, job, n.spec.name);
      detail::pack_arg(t, n.spec, flat, job);  // throws: a Tensor for a tuple
    }
    const size_t got = py::len(arg);
    if (got != n.children.size()) detail::tuple_arg_error(job, n.spec, got);
    size_t i = 0;
    for (py::handle item : arg) pack(n.children[i++], item, flat, job);
    return;
  }
  switch (n.spec.leaf) {
    case Leaf::Numpy:
      // A list of arrays is a ListNumpy argument, not one array.
      if (is_sequence(arg) && py::len(arg) > 0 && py::isinstance<py::array>(arg[py::int_(0)])) {
        detail::pack_arg(tensors_of(arg, n, job), n.spec, flat, job);
        return;
      }
      detail::pack_arg(to_tensor(arg, n.item, job, n.name), n.spec, flat, job);
      return;
    case Leaf::ListNumpy:
      if (!is_sequence(arg)) {
        detail::pack_arg(to_tensor(arg, n.item, job, n.name), n.spec, flat, job);
        return;
      }
      detail::pack_arg(tensors_of(arg, n, job), n.spec, flat, job);
      return;
    case Leaf::ListListNumpy: {
      if (!is_sequence(arg)) {
        detail::pack_arg(to_tensor(arg, n.item, job, n.name), n.spec, flat, job);
        return;
      }
      std::vector<std::vector<Tensor>> lists;
      for (py::handle per_device : arg) {
        if (!is_sequence(per_device)) {
          detail::pack_arg(tensors_of(arg, n, job), n.spec, flat, job);  // throws: a flat list
          return;
        }
        lists.push_back(tensors_of(per_device, n, job));
      }
      detail::pack_arg(lists, n.spec, flat, job);
      return;
    }
  }
}

// ---- result trees ----

struct OutNode {
  Kind kind = Kind::None;
  Leaf leaf = Leaf::Numpy;
  int index = -1;
  std::vector<OutNode> children;
  std::vector<std::shared_ptr<PyRef>> keys;  // Dict
};

Leaf leaf_from_text(const std::string& s) {
  if (s == "numpy") return Leaf::Numpy;
  if (s == "list") return Leaf::ListNumpy;
  if (s == "listlist") return Leaf::ListListNumpy;
  throw Error("[global_function] unknown result kind '" + s + "'");
}

// From the Python description: ("leaf", kind, index), ("tuple", [...]),
// ("list", [...]), ("dict", [(key, child), ...]), ("none",).
void out_from_python(py::handle d, OutNode& out, Structure& s) {
  const auto tag = d[py::int_(0)].cast<std::string>();
  if (tag == "leaf") {
    out.kind = s.kind = Kind::Leaf;
    out.leaf = s.leaf = leaf_from_text(d[py::int_(1)].cast<std::string>());
    out.index = s.index = d[py::int_(2)].cast<int>();
  } else if (tag == "tuple" || tag == "list") {
    out.kind = s.kind = tag == "tuple" ? Kind::Tuple : Kind::List;
    for (py::handle c : d[py::int_(1)]) {
      out.children.emplace_back();
      s.children.emplace_back();
      out_from_python(c, out.children.back(), s.children.back());
    }
  } else if (tag == "dict") {
    out.kind = s.kind = Kind::Dict;
    for (py::handle kv : d[py::int_(1)]) {
      py::object key = py::reinterpret_borrow<py::object>(kv[py::int_(0)]);
      s.keys.push_back(py::str(key).cast<std::string>());
      out.keys.push_back(std::make_shared<PyRef>(key));
      out.children.emplace_back();
      s.children.emplace_back();
      out_from_python(kv[py::int_(1)], out.children.back(), s.children.back());
    }
  } else if (tag == "none") {
    out.kind = s.kind = Kind::None;
  } else {
    throw Error("[global_function] unknown result structure '" + tag + "'");
  }
}

OutNode out_from_structure(const Structure& s) {
  OutNode n;
  n.kind = s.kind;
  n.leaf = s.leaf;
  n.index = s.index;
  for (const auto& c : s.children) n.children.push_back(out_from_structure(c));
  for (const auto& k : s.keys) n.keys.push_back(std::make_shared<PyRef>(py::str(k)));
  return n;
}

py::object leaf_object(Tensor t, Leaf leaf) {
  py::array a = to_numpy(std::move(t));
  if (leaf == Leaf::Numpy) return a;
  if (leaf == Leaf::ListNumpy) {
    py::list l(1);
    l[0] = a;
    return l;
  }
  // ListListNumpy: per device, the blob's rows (views of one array).
  const py::ssize_t n = a.ndim() ? a.shape(0) : 1;
  py::list items(n);
  for (py::ssize_t i = 0; i < n; ++i) items[i] = a.ndim() ? py::object(a[py::int_(i)]) : py::object(a);
  py::list l(1);
  l[0] = items;
  return l;
}

py::object build(const OutNode& n, std::vector<Tensor>& flat) {
  switch (n.kind) {
    case Kind::None: return py::none();
    case Kind::Leaf: return leaf_object(flat.at(n.index), n.leaf);
    case Kind::Tuple: {
      py::tuple t(n.children.size());
      for (size_t i = 0; i < n.children.size(); ++i) t[i] = build(n.children[i], flat);
      return t;
    }
    case Kind::List: {
      py::list l(n.children.size());
      for (size_t i = 0; i < n.children.size(); ++i) l[i] = build(n.children[i], flat);
      return l;
    }
    case Kind::Dict: {
      py::dict d;
      for (size_t i = 0; i < n.children.size(); ++i) d[n.keys[i]->get()] = build(n.children[i], flat);
      return d;
    }
  }
  return py::none();
}

// flow.watch(blob, handler): an extra output of the job, handed to the
// handler after each call, before the result.
struct Watch {
  int index;
  Leaf leaf;
  std::shared_ptr<PyRef> handler;
};

// What turning a result into Python needs; shared with pending callbacks
// (and free of the job itself, so a callback never holds the job).
struct Core {
  std::string name;
  OutNode out;
  std::vector<Watch> watches;
};

py::object results(const Core& c, std::vector<Tensor>& flat) {
  for (const auto& w : c.watches) w.handler->get()(leaf_object(flat.at(w.index), w.leaf));
  return build(c.out, flat);
}

// ---- the callable job ----

class PyCallbacker {
 public:
  PyCallbacker(std::shared_ptr<CompiledJob> job, std::shared_ptr<CallState> call, std::shared_ptr<const Core> core)
      : job_(std::move(job)), call_(std::move(call)), core_(std::move(core)) {}
  PyCallbacker(const PyCallbacker&) = delete;
  PyCallbacker(PyCallbacker&&) = default;
  ~PyCallbacker() {
    if (call_) CompiledJob::abandon(call_);
    release_job(job_);
  }

  // Registers the callback: it runs on the job's callback thread, in call
  // order, with the GIL taken for it. What it raises is raised again by the
  // job's next call or sync().
  void give(py::function cb) {
    if (!call_) throw Error("[Callbacker] a callback was already given for this call");
    auto fn = std::make_shared<PyRef>(std::move(cb));
    auto core = core_;
    CompiledJob::attach(call_, [fn, core](std::vector<Tensor> r) {
      if (exiting()) return;
      py::gil_scoped_acquire locked;
      t_in_callback = true;
      struct Reset {
        ~Reset() { t_in_callback = false; }
      } reset;
      py::object value = results(*core, r);
      fn->get()(value);
    });
    call_.reset();
  }

  // The older API's blocking form: waits (like sync()) and returns the result.
  py::object get() {
    if (!call_) throw Error("[Callbacker] a callback was already given for this call");
    auto box = std::make_shared<std::optional<std::vector<Tensor>>>();
    CompiledJob::attach(call_, [box](std::vector<Tensor> r) { *box = std::move(r); });
    call_.reset();
    wait_idle(*job_);
    if (!*box) throw Error("[" + core_->name + "] get(): the call failed and its error was reported elsewhere");
    return results(*core_, **box);
  }

 private:
  std::shared_ptr<CompiledJob> job_;
  std::shared_ptr<CallState> call_;
  std::shared_ptr<const Core> core_;
};

class PyJob {
 public:
  PyJob(std::shared_ptr<CompiledJob> impl, std::vector<InNode> args, std::shared_ptr<const Core> core)
      : impl_(std::move(impl)), args_(std::move(args)), core_(std::move(core)) {}
  PyJob(const PyJob&) = delete;
  ~PyJob() { release_job(impl_); }

  std::vector<Tensor> pack_args(const py::args& a) {
    const std::string& job = core_->name;
    if (a.size() != args_.size()) detail::arity_error(job, args_.size(), a.size());
    std::vector<Tensor> flat;
    flat.reserve(impl_->signature().inputs.size());
    for (size_t i = 0; i < args_.size(); ++i) pack(args_[i], a[i], flat, job);
    return flat;
  }

  // job(args...): the result for a synchronous job, a Callbacker for one
  // declared Callback[...].
  py::object call(const py::args& a) {
    housekeeping();
    std::vector<Tensor> in = pack_args(a);
    if (impl_->signature().callback) return py::cast(launch(std::move(in)));
    std::vector<Tensor> out = run_interruptible(*impl_, std::move(in));
    return results(*core_, out);
  }
  // Any job, asynchronously (the older API's call: .get() / .async_get()).
  PyCallbacker call_async(const py::args& a) {
    housekeeping();
    return launch(pack_args(a));
  }
  void sync() {
    housekeeping();
    wait_idle(*impl_);
  }
  const std::shared_ptr<CompiledJob>& compiled() const { return impl_; }
  const Core& core() const { return *core_; }
  size_t arity() const { return args_.size(); }

 private:
  PyCallbacker launch(std::vector<Tensor> in) {
    std::shared_ptr<CallState> c;
    {
      py::gil_scoped_release unlocked;  // may wait for a slot, which callbacks free
      c = impl_->launch(std::move(in));
    }
    return PyCallbacker(impl_, std::move(c), core_);
  }

  std::shared_ptr<CompiledJob> impl_;
  std::vector<InNode> args_;
  std::shared_ptr<const Core> core_;
};

std::unique_ptr<PyJob> make_job(std::shared_ptr<CompiledJob> impl, const std::vector<PlaceholderSpec>& specs,
                                OutNode out, std::vector<Watch> watches) {
  const Signature& sig = impl->signature();
  std::vector<InNode> args;
  int next = 0;
  for (const auto& p : specs) args.push_back(in_node(p, sig, next));
  register_job(impl);
  auto core = std::make_shared<Core>();
  core->name = sig.job_name;
  core->out = std::move(out);
  core->watches = std::move(watches);
  return std::make_unique<PyJob>(std::move(impl), std::move(args), std::move(core));
}

// The placeholders of a job that was not defined here (a job file).
PlaceholderSpec spec_from_signature(const Structure& s, const Signature& sig, const std::string& name) {
  PlaceholderSpec p;
  if (s.kind == Kind::Tuple) {
    p.kind = Kind::Tuple;
    p.name = name;
    for (size_t i = 0; i < s.children.size(); ++i)
      p.children.push_back(spec_from_signature(s.children[i], sig, name + "[" + std::to_string(i) + "]"));
    return p;
  }
  p.kind = Kind::Leaf;
  p.leaf = s.leaf;
  p.name = sig.input_names.at(s.index);
  p.dtype = sig.inputs.at(s.index).dtype;
  p.shape = sig.inputs.at(s.index).shape;
  if (s.leaf == Leaf::ListListNumpy && !p.shape.empty()) {
    p.items = p.shape[0];
    p.shape.erase(p.shape.begin());
  }
  return p;
}

std::unique_ptr<PyJob> wrap_compiled(std::shared_ptr<CompiledJob> impl) {
  const Signature& sig = impl->signature();
  std::vector<PlaceholderSpec> specs;
  if (sig.input_structure.kind == Kind::Tuple) {
    for (size_t i = 0; i < sig.input_structure.children.size(); ++i)
      specs.push_back(spec_from_signature(sig.input_structure.children[i], sig, "arg" + std::to_string(i)));
  } else {
    for (size_t i = 0; i < sig.inputs.size(); ++i) {
      Structure leaf;
      leaf.kind = Kind::Leaf;
      leaf.index = static_cast<int>(i);
      specs.push_back(spec_from_signature(leaf, sig, sig.input_names[i]));
    }
  }
  OutNode out = out_from_structure(sig.output_structure);
  return make_job(std::move(impl), specs, std::move(out), {});
}

}  // namespace

void bind_jobs(py::module_& m) {
  py::enum_<JobType>(m, "JobType").value("train", JobType::Train).value("predict", JobType::Predict);

  py::class_<PlaceholderSpec>(m, "PlaceholderSpec")
      .def_property_readonly("name", [](const PlaceholderSpec& p) { return p.name; })
      .def_property_readonly("shape", [](const PlaceholderSpec& p) { return p.shape; })
      .def("__repr__", [](const PlaceholderSpec& p) {
        if (p.kind == Kind::Tuple) return "<PlaceholderSpec '" + p.name + "' tuple of " + std::to_string(p.children.size()) + ">";
        return "<PlaceholderSpec '" + p.name + "' " + shape_str(p.shape) + (p.dtype ? std::string(" ") + dtype_name(*p.dtype) : "") + ">";
      });
  m.def("placeholder", [](const std::string& leaf, Shape shape, std::optional<DType> dtype, const std::string& name,
                          int64_t items) {
    PlaceholderSpec p;
    p.kind = Kind::Leaf;
    p.leaf = leaf_from_text(leaf);
    p.shape = std::move(shape);
    p.dtype = dtype;
    p.name = name;
    p.items = items;
    return p;
  }, py::arg("leaf"), py::arg("shape"), py::arg("dtype") = py::none(), py::arg("name") = "", py::arg("items") = 1);
  m.def("tuple_placeholder", [](std::vector<PlaceholderSpec> items, const std::string& name) {
    return TuplePlaceholder(std::move(items), name);
  }, py::arg("items"), py::arg("name") = "");

  py::class_<PyCallbacker>(m, "Callbacker", "What an asynchronous call returns: call it with the callback.")
      .def("__call__", &PyCallbacker::give, py::arg("callback"))
      .def("get", &PyCallbacker::get)
      .def("async_get", &PyCallbacker::give, py::arg("callback"));

  py::class_<PyJob>(m, "Job")
      .def("__call__", &PyJob::call)
      .def("call_async", &PyJob::call_async)
      .def("sync", &PyJob::sync)
      .def_property_readonly("name", [](const PyJob& j) { return j.compiled()->signature().job_name; })
      .def_property_readonly("signature", [](const PyJob& j) { return j.compiled()->signature().str(); })
      .def_property_readonly("is_callback", [](const PyJob& j) { return j.compiled()->signature().callback; })
      .def_property_readonly("is_train", [](const PyJob& j) { return j.compiled()->signature().type == JobType::Train; })
      .def_property_readonly("arity", &PyJob::arity)
      .def_property_readonly("has_watches", [](const PyJob& j) { return !j.core().watches.empty(); })
      .def_property_readonly("input_names", [](const PyJob& j) { return j.compiled()->signature().input_names; })
      .def("plan", [](const PyJob& j) { return j.compiled()->describe(); })
      .def("in_flight", [](const PyJob& j) { return j.compiled()->in_flight(); })
      .def("steps_run", [](const PyJob& j) { return j.compiled()->steps_run(); });

  // The builder: Python's global_function calls enter(), runs the body with
  // input(i) as its arguments, leave(), then finish().
  py::class_<detail::JobBuilder>(m, "JobBuilder")
      .def(py::init([](JobType type, const FunctionConfig& config, const std::vector<PlaceholderSpec>& specs) {
        return std::make_unique<detail::JobBuilder>(type, config, specs);
      }))
      .def("input", &detail::JobBuilder::input)
      .def("specs", &detail::JobBuilder::specs)
      .def("enter", &detail::JobBuilder::enter)
      .def("leave", &detail::JobBuilder::leave)
      .def("finish", [](detail::JobBuilder& b, std::vector<Blob> outputs, py::handle structure, bool callback,
                        const std::vector<std::tuple<Blob, std::string, py::function>>& watches) {
        OutNode out;
        Structure s;
        out_from_python(structure, out, s);
        std::vector<Watch> ws;
        for (const auto& [blob, kind, fn] : watches) {
          ws.push_back({static_cast<int>(outputs.size()), leaf_from_text(kind), std::make_shared<PyRef>(fn)});
          outputs.push_back(blob);
        }
        auto compiled = b.finish(std::move(outputs), std::move(s), callback);
        return make_job(std::move(compiled), b.specs(), std::move(out), std::move(ws));
      });

  // ---- job files (onnx.h) ----
#ifdef JOBFLOW_PY_ONNX
  m.attr("has_onnx") = true;
  m.def("onnx_save", [](const PyJob& job, const std::string& path, const std::string& checkpoint_dir, int64_t opset) {
    if (!job.core().watches.empty())
      throw Error("[onnx.export] job '" + job.core().name + "' has flow.watch handlers; a job file cannot carry them");
    onnx::SaveOptions o;
    o.checkpoint_dir = checkpoint_dir;
    o.opset = opset;
    py::gil_scoped_release unlocked;
    job.compiled()->sync();
    onnx::save(*job.compiled(), path, o);
  });
  m.def("onnx_load", [](const std::string& path, std::optional<JobType> type, const std::string& loss,
                        const std::string& loss_output, const std::string& optimizer, const std::string& checkpoint,
                        const std::string& device, size_t max_in_flight, int num_threads, const std::string& name,
                        const std::string& precision) {
    onnx::LoadOptions o;
    o.type = type;
    o.loss = loss;
    o.loss_output = loss_output;
    o.optimizer = optimizer;
    o.checkpoint = checkpoint;
    o.device = device;
    o.max_in_flight = max_in_flight;
    o.num_threads = num_threads;
    o.name = name;
    o.precision = precision;
    std::shared_ptr<CompiledJob> job;
    {
      py::gil_scoped_release unlocked;
      job = onnx::load(path, o);
    }
    return wrap_compiled(std::move(job));
  });
  m.def("onnx_inspect", [](const std::string& path) { return onnx::inspect(path).str(); });
#else
  m.attr("has_onnx") = false;
#endif

  m.def("wait_all_jobs", [] {
    housekeeping();
    wait_all_jobs();
  }, "waits for every call of every job made from Python; Ctrl-C interrupts");

  // ---- for tests and the benchmark ----
  m.def("_wrap_info", [](py::handle arr, DType dtype) {
    bool copied = false;
    Tensor t = to_tensor(arr, {{}, dtype}, "test", "x", &copied);
    return py::make_tuple(reinterpret_cast<uintptr_t>(t.raw()), copied);
  }, "(address of the tensor an argument becomes, whether it was copied)");
  m.def("_packed_addresses", [](PyJob& job, const py::tuple& args) {
    // What a call of `job` hands the engine (PyJob::pack_args, the path
    // every call takes): the address of each input tensor's data.
    py::list out;
    for (const Tensor& t : job.pack_args(py::reinterpret_borrow<py::args>(args)))
      out.append(reinterpret_cast<uintptr_t>(t.raw()));
    return out;
  }, "the data address of each tensor a call with these arguments passes to the engine");
  m.def("_time_cpp_calls", [](PyJob& job, const py::tuple& args, int n) {
    // The same compiled job called from C++ as Job::operator() does it:
    // arguments packed per call, CompiledJob::run.
    std::vector<Tensor> in = job.pack_args(py::reinterpret_borrow<py::args>(args));
    py::gil_scoped_release unlocked;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      std::vector<Tensor> call = in;
      job.compiled()->check_inputs(call);
      auto r = job.compiled()->run(std::move(call));
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
}

}  // namespace jobflow::python

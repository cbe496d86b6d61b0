// _jobflow: the compiled half of the Python package `jobflow`. It exposes
// the engine's public C++ API (engine/include/jobflow) to the pure-Python
// modules of python/jobflow, which give it OneFlow's names and arguments.
// No second engine: a Python job function is built by the engine's own
// detail::JobBuilder (jobs.cpp), exactly as flow::global_function does.
#include "common.h"

#include <atomic>
#include <cstring>
#include <mutex>

#include <jobflow/backend.h>
#include <jobflow/checkpoint_io.h>
#include <jobflow/data.h>
#include <jobflow/session.h>

namespace jobflow::python {

namespace {
std::mutex g_deferred_mu;
std::vector<PyObject*> g_deferred;
std::atomic<bool> g_exiting{false};
}  // namespace

void decref_anywhere(PyObject* o) {
  if (!o) return;
  if (!Py_IsInitialized()) return;  // after the interpreter: nothing to give back
  if (PyGILState_Check()) {
    Py_DECREF(o);
    return;
  }
  std::lock_guard<std::mutex> lk(g_deferred_mu);
  g_deferred.push_back(o);
}

void drain_deferred() {
  std::vector<PyObject*> v;
  {
    std::lock_guard<std::mutex> lk(g_deferred_mu);
    if (g_deferred.empty()) return;
    v.swap(g_deferred);
  }
  for (PyObject* o : v) Py_DECREF(o);
}

bool exiting() { return g_exiting.load(std::memory_order_acquire); }

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::Float32: return py::dtype::of<float>();
    case DType::Float64: return py::dtype::of<double>();
    case DType::Int32: return py::dtype::of<int32_t>();
    case DType::Int64: return py::dtype::of<int64_t>();
    case DType::Int8: return py::dtype::of<int8_t>();
    case DType::UInt8: return py::dtype::of<uint8_t>();
    case DType::Bool: return py::dtype::of<bool>();
    case DType::Int16: return py::dtype::of<int16_t>();
    case DType::UInt16: return py::dtype::of<uint16_t>();
    case DType::UInt32: return py::dtype::of<uint32_t>();
    case DType::UInt64: return py::dtype::of<uint64_t>();
    case DType::Float16: return py::dtype("float16");
    case DType::BFloat16: throw Error("[jobflow] bfloat16 has no NumPy dtype; cast the blob to float32 in the job");
  }
  throw Error("[jobflow] unknown dtype");
}

bool engine_dtype(const py::dtype& d, DType& out) {
  const char k = d.kind();
  const auto size = d.itemsize();
  if (k == 'f' && size == 4) out = DType::Float32;
  else if (k == 'f' && size == 8) out = DType::Float64;
  else if (k == 'i' && size == 4) out = DType::Int32;
  else if (k == 'i' && size == 8) out = DType::Int64;
  else if (k == 'i' && size == 1) out = DType::Int8;
  else if (k == 'u' && size == 1) out = DType::UInt8;
  else if (k == 'b' && size == 1) out = DType::Bool;
  else if (k == 'f' && size == 2) out = DType::Float16;
  else if (k == 'i' && size == 2) out = DType::Int16;
  else if (k == 'u' && size == 2) out = DType::UInt16;
  else if (k == 'u' && size == 4) out = DType::UInt32;
  else if (k == 'u' && size == 8) out = DType::UInt64;
  else return false;
  return true;
}

py::array to_numpy(Tensor t) {
  auto* held = new Tensor(std::move(t));
  py::capsule owner(held, [](void* p) { delete static_cast<Tensor*>(p); });
  std::vector<py::ssize_t> shape(held->shape().begin(), held->shape().end());
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t step = static_cast<py::ssize_t>(dtype_size(held->dtype()));
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    step *= shape[i];
  }
  return py::array(numpy_dtype(held->dtype()), std::move(shape), std::move(strides), held->raw(), owner);
}

namespace {
std::string numpy_spec(const py::array& a) {
  Shape s(a.shape(), a.shape() + a.ndim());
  return shape_str(s) + " " + std::string(py::str(a.dtype()));
}
}  // namespace

Tensor to_tensor(py::handle obj, const TensorSpec& want, const std::string& job, const std::string& name,
                 bool* copied) {
  py::array a;
  bool copy = false;
  if (py::isinstance<py::array>(obj)) {
    a = py::reinterpret_borrow<py::array>(obj);
  } else {
    // A list or a scalar: converted once, to the placeholder's dtype.
    a = py::array::ensure(obj, 0);
    if (!a) throw py::error_already_set();
    copy = true;
    DType dt;
    if (!engine_dtype(a.dtype(), dt) || dt != want.dtype) a = a.attr("astype")(numpy_dtype(want.dtype));
  }
  DType dt;
  if (!engine_dtype(a.dtype(), dt))
    throw Error("[" + job + "] argument '" + name + "': expected " + spec_str(want) + ", got " + numpy_spec(a) +
                " (the engine has no such dtype)");
  const int need = static_cast<int>(py::array::c_style) | static_cast<int>(py::detail::npy_api::NPY_ARRAY_ALIGNED_);
  if ((a.flags() & need) != need || !a.dtype().attr("isnative").cast<bool>()) {
    a = a.attr("astype")(a.dtype().attr("newbyteorder")("="), "C");
    copy = true;
  }
  if (copied) *copied = copy;
  Shape shape(a.shape(), a.shape() + a.ndim());
  void* data = const_cast<void*>(a.data());
  PyObject* ref = a.release().ptr();
  return Tensor::wrap(data, std::move(shape), dt, std::shared_ptr<void>(ref, [](void* p) {
                        decref_anywhere(static_cast<PyObject*>(p));
                      }));
}

namespace {

// Waits for every job of the session with the GIL released: Python
// callbacks still pending need it.
void sync_all_released() {
  py::gil_scoped_release unlocked;
  session::sync_all();
}

// Variables as NumPy arrays (copies: the live tensors keep changing).
py::dict variables_dict(const std::map<std::string, Tensor>& vars) {
  py::dict d;
  for (const auto& [name, t] : vars) d[py::str(name)] = to_numpy(t.clone());
  return d;
}

// One split of load_mnist as two arrays: (batches, B, 1, H, W), (batches, B).
py::tuple split_arrays(const data::Dataset& d, int64_t batch) {
  auto stack = [](const std::vector<Tensor>& items, Shape item_shape, DType dt) {
    Shape s{static_cast<int64_t>(items.size())};
    s.insert(s.end(), item_shape.begin(), item_shape.end());
    Tensor all(s, dt);
    const size_t bytes = static_cast<size_t>(numel(item_shape)) * dtype_size(dt);
    for (size_t i = 0; i < items.size(); ++i)
      std::memcpy(static_cast<char*>(all.raw()) + i * bytes, items[i].raw(), bytes);
    return all;
  };
  Shape img = d.images.empty() ? Shape{batch, 1, 28, 28} : d.images[0].shape();
  return py::make_tuple(to_numpy(stack(d.images, img, DType::Float32)),
                        to_numpy(stack(d.labels, {batch}, DType::Int32)));
}

}  // namespace

}  // namespace jobflow::python

PYBIND11_MODULE(_jobflow, m) {
  using namespace jobflow;
  using namespace jobflow::python;
  m.doc() = "Jobflow's engine, as the Python package jobflow uses it";

  // C++ errors keep their message ("[where] ...") and become jobflow.Error.
  py::register_exception<Error>(m, "Error", PyExc_RuntimeError);

  py::enum_<DType>(m, "DType")
      .value("float32", DType::Float32)
      .value("float64", DType::Float64)
      .value("int32", DType::Int32)
      .value("int64", DType::Int64)
      .value("int8", DType::Int8)
      .value("uint8", DType::UInt8)
      .value("bool", DType::Bool)
      .value("int16", DType::Int16)
      .value("uint16", DType::UInt16)
      .value("uint32", DType::UInt32)
      .value("uint64", DType::UInt64)
      .value("float16", DType::Float16)
      .value("bfloat16", DType::BFloat16);
  m.def("dtype_of_numpy", [](py::object d) -> py::object {
    DType t;
    if (!engine_dtype(py::dtype::from_args(d), t)) return py::none();
    return py::cast(t);
  });
  m.def("numpy_dtype", &numpy_dtype);
  // Sequences and optionals (jobflow/sequence.h): one packed uint8 array.
  m.def("pack_sequence", [](py::iterable items, py::object dtype, bool none) {
    std::vector<Tensor> ts;
    std::vector<py::array> keep;
    for (py::handle h : items) {
      keep.push_back(py::array::ensure(h, py::array::c_style));
      if (!keep.back())
        throw Error("[pack_sequence] item " + std::to_string(keep.size() - 1) + " (" +
                    std::string(py::str(py::type::of(h))) + ") is not convertible to an array");
    }
    DType elem = DType::Float32;
    if (!dtype.is_none()) {
      if (!engine_dtype(py::dtype::from_args(dtype), elem))
        throw Error("[pack_sequence] dtype " + std::string(py::str(dtype)) + " is not one the engine has");
    } else if (!keep.empty()) {
      if (!engine_dtype(keep[0].dtype(), elem))
        throw Error("[pack_sequence] item 0 is not an array of a dtype the engine has");
    } else {
      throw Error("[pack_sequence] an empty sequence needs its dtype");
    }
    for (size_t k = 0; k < keep.size(); ++k) {
      py::array a = keep[k];
      DType dt;
      if (!engine_dtype(a.dtype(), dt) || dt != elem)
        a = py::array::ensure(a.attr("astype")(numpy_dtype(elem)), py::array::c_style);
      ts.push_back(to_tensor(a, {Shape(a.shape(), a.shape() + a.ndim()), elem}, "pack_sequence",
                             "item " + std::to_string(k)));
    }
    if (none) {
      if (!ts.empty()) throw Error("[pack_sequence] an optional without a value has no items");
      return to_numpy(pack_none(elem));
    }
    return to_numpy(pack_sequence(ts, elem));
  }, py::arg("items"), py::arg("dtype") = py::none(), py::arg("none") = false);
  m.def("unpack_sequence", [](py::handle packed) -> py::object {
    py::array a = py::array::ensure(packed, py::array::c_style);
    if (!a) throw Error("[unpack_sequence] packed: not an array (a packed sequence is a uint8 array of rank 1)");
    Tensor t = to_tensor(a, {Shape(a.shape(), a.shape() + a.ndim()), DType::UInt8}, "unpack_sequence", "packed");
    UnpackedSequence u = unpack_sequence(t, "[unpack_sequence] packed");
    if (u.none) return py::none();
    py::list r;
    for (Tensor& item : u.items) r.append(to_numpy(std::move(item)));
    return r;
  });

  // String tensors (jobflow/strings.h): the Python side turns str/bytes
  // arrays into UTF-8 bytes and back (jobflow/onnx.py).
  m.def("pack_strings", [](const std::vector<py::bytes>& items, const std::vector<int64_t>& shape) {
    std::vector<std::string> s(items.begin(), items.end());
    return to_numpy(pack_strings(s, Shape(shape.begin(), shape.end())));
  });
  m.def("unpack_strings", [](py::handle packed) -> py::tuple {
    py::array a = py::array::ensure(packed, py::array::c_style);
    if (!a) throw Error("[unpack_strings] packed: not an array (a packed string tensor is a uint8 array of rank 1)");
    Tensor t = to_tensor(a, {Shape(a.shape(), a.shape() + a.ndim()), DType::UInt8}, "unpack_strings", "packed");
    UnpackedStrings u = unpack_strings(t, "[unpack_strings] packed");
    py::list items;
    for (const std::string& s : u.items) items.append(py::bytes(s));
    return py::make_tuple(items, py::tuple(py::cast(u.shape)));
  });

  bind_ops(m);
  bind_jobs(m);

  // ---- the session: variables and checkpoints (session.h) ----
  m.def("checkpoint_init", [] {
    py::gil_scoped_release unlocked;
    CheckPoint().init();
  });
  m.def("checkpoint_save", [](const std::string& dir) {
    py::gil_scoped_release unlocked;
    CheckPoint().save(dir);
  });
  m.def("checkpoint_load", [](const std::string& dir) {
    py::gil_scoped_release unlocked;
    CheckPoint().load(dir);
  });
  m.def("checkpoint_read", [](const std::string& dir) {
    std::map<std::string, Tensor> vars;
    {
      py::gil_scoped_release unlocked;
      vars = checkpoint_io::load(dir);
    }
    return variables_dict(vars);
  }, "the variables of the checkpoint folder `dir`, as NumPy arrays");
  m.def("variable_names", [] { return session::variable_names(); });
  m.def("has_variable", &session::has_variable);
  m.def("variable", [](const std::string& name) {
    Tensor t;
    {
      py::gil_scoped_release unlocked;
      session::sync_all();
      t = session::variable(name).clone();
    }
    return to_numpy(t);
  });
  m.def("assign", [](const std::string& name, py::handle value) {
    if (!session::has_variable(name)) throw Error("[assign] no variable named '" + name + "'");
    const Tensor live = session::variable(name);
    Tensor t = to_tensor(value, {live.shape(), live.dtype()}, "assign", name);
    py::gil_scoped_release unlocked;
    session::assign(name, t);
  });
  m.def("sync_all", [m] {
    drain_deferred();
    m.attr("wait_all_jobs")();  // interruptible; then the jobs made elsewhere (none, usually)
    sync_all_released();
  });
  m.def("reset_session", [] {
    py::gil_scoped_release unlocked;
    session::reset();
  });
  m.def("train_step_variable", &session::train_step_variable);

  // ---- the CPU (backend.h): flow.env.cpu_isa(), flow.env.bf16_fallback() ----
  m.def("cpu_isa", &cpu_isa);
  m.def("bf16_fallback", &bf16_fallback);

  // ---- data (data.h) ----
  m.def("default_mnist_dir", &data::default_mnist_dir);
  m.def("load_mnist", [](int64_t train_batch, int64_t test_batch, const std::string& dir) {
    data::Mnist d;
    {
      py::gil_scoped_release unlocked;
      d = data::load_mnist(train_batch, test_batch, dir);
    }
    return py::make_tuple(split_arrays(d.train, train_batch), split_arrays(d.test, test_batch ? test_batch : train_batch));
  }, py::arg("train_batch"), py::arg("test_batch") = 0, py::arg("dir") = "");
  m.def("read_idx", [](const std::string& path) {
    Tensor t;
    {
      py::gil_scoped_release unlocked;
      t = data::read_idx(path);
    }
    return to_numpy(t);
  });

  // At exit, before the interpreter goes: every pending call and Python
  // callback runs (as OneFlow syncs its default session), then the engine's
  // threads stop calling into Python.
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    try {
      drain_deferred();
      sync_all_released();
    } catch (const py::error_already_set& e) {
      PySys_WriteStderr("jobflow: an asynchronous call failed before exit: %s\n", e.what());
    } catch (const std::exception& e) {
      PySys_WriteStderr("jobflow: an asynchronous call failed before exit: %s\n", e.what());
    }
    g_exiting.store(true, std::memory_order_release);
  }));
}

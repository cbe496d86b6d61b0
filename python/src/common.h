// Shared helpers of the Python binding (_jobflow): reference handling that
// is safe on the engine's threads, and NumPy <-> Tensor conversion.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <jobflow/jobflow.h>

#include <memory>
#include <string>
#include <vector>

namespace jobflow::python {

namespace py = pybind11;

// Drops a reference to a Python object from any thread. With the GIL held
// it is dropped at once; otherwise (the engine's worker or callback thread,
// perhaps holding a job's lock) it is queued and dropped at the next call
// into the binding that holds the GIL (drain_deferred). So no engine thread
// ever waits for the GIL while it holds one of its locks.
void decref_anywhere(PyObject* o);
// Drops the queued references; call with the GIL held.
void drain_deferred();

// An owned reference that may be destroyed on any thread.
class PyRef {
 public:
  PyRef() = default;
  explicit PyRef(py::object o) : o_(o.release().ptr()) {}
  ~PyRef() { decref_anywhere(o_); }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  py::handle get() const { return o_; }
  explicit operator bool() const { return o_ != nullptr; }

 private:
  PyObject* o_ = nullptr;
};

// Set by the atexit hook once every job has been synced: from then on the
// engine's threads no longer call into Python.
bool exiting();

// NumPy dtype of an engine dtype, and the engine dtype of a NumPy array
// (false when the engine has none for it: float16, bool, int16, ...).
py::dtype numpy_dtype(DType t);
bool engine_dtype(const py::dtype& d, DType& out);

// A result tensor as a NumPy array that owns its buffer (no copy: the array
// keeps the tensor's storage alive through a capsule).
py::array to_numpy(Tensor t);

// An argument as a Tensor. A C-contiguous, aligned array of an engine dtype
// is wrapped without a copy (the tensor keeps the array alive); any other
// array, list or scalar is converted once (to `want` when it is not an
// array already). Shape and dtype are checked later by the job, whose error
// names the placeholder; a dtype the engine lacks is reported here in the
// same words. `copied` says whether a copy was made.
Tensor to_tensor(py::handle obj, const TensorSpec& want, const std::string& job, const std::string& name,
                 bool* copied = nullptr);

// Defined in jobs.cpp / ops.cpp.
void bind_jobs(py::module_& m);
void bind_ops(py::module_& m);

}  // namespace jobflow::python

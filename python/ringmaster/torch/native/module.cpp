// module.cpp - ringmaster.torch._native: the pybind11 part of the native
// backend (process_group.cpp has the design). Kept apart from the process
// group because torch's Python headers are the slow part of the build.
//
// THE PYTHON TWIN. Each native group is made with a pure-Python
// ProcessGroupRingmaster of the same communicator in "native" mode (the
// twin, ringmaster/torch/process_group.py). The twin gives what stays in Python:
//  * the calls the native path does not take (slow* below: the twin's checks
//    raise in the caller; its body is queued on THIS group's worker through
//    _enqueue, under the same numbering);
//  * all_to_all (of lists), gather, scatter, reduce, reduce_scatter and
//    monitored_barrier, which torch only calls from Python: the Python side
//    forwards those methods of this class to the twin (_native_load.py);
//  * point-to-point's lane (the communicator, made by the twin) and what the
//    native send / recv do not take (slowP2P);
//  * the exception a failed call raises (FailHook): the same class and words
//    as the Python backend, and ringmaster.last_exception, which elastic
//    recovery reads.
// This object holds a strong reference to the twin (released under the GIL
// when it is freed); the twin holds a weak one back.
#include <torch/python.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>

#include "process_group.hpp"

namespace py = pybind11;
namespace rt = ringmaster_torch;

namespace {

class PyBacked : public rt::ProcessGroupRingmaster {
 public:
  PyBacked(int rank, int size, std::string label, int timeout_ms, rm_comm_t* comm, rt::Lib lib,
           py::object twin)
      : rt::ProcessGroupRingmaster(rank, size, std::move(label), timeout_ms, comm, lib),
        twin_(twin.release().ptr()) {
    fail = [this](rm_status_t st, const std::string& call, uint64_t seq, int ms) {
      return error(st, call, seq, ms);
    };
    lane->fail = [this](rm_status_t st, const char* words, int peer, const std::string& call,
                        const std::string& what, uint64_t seq) {
      return p2p_error(st, words, peer, call, what, seq);
    };
  }

  ~PyBacked() override {
    // the worker and the open point-to-point Works may still call into the
    // twin: stop and close them first, without the GIL (its Python bodies
    // and error hooks take it); the lane before the twin destroys its
    // communicator
    {
      std::optional<py::gil_scoped_release> r;
      if (Py_IsInitialized() && PyGILState_Check()) r.emplace();
      stop(nullptr);
      closeLane(timeoutMs());
    }
    lane->fail = nullptr;
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire g;
      Py_XDECREF(twin_);
    }
  }

  py::object twin() const { return py::reinterpret_borrow<py::object>(twin_); }

  // Queued calls fail (with the twin's Aborted when it can make one), the
  // running one gets the group's timeout, then the communicator is aborted.
  bool stop(py::object* twin_for_errors, int grace_ms = -1, bool abort_comm = true) {
    auto left = takeQueued();
    for (auto& w : left) {
      std::exception_ptr e;
      if (twin_for_errors != nullptr) {
        py::gil_scoped_acquire g;
        e = as_exception(twin_for_errors->attr("_native_aborted")(w->call(), w->seq()));
      } else {
        e = std::make_exception_ptr(std::runtime_error(
            "ringmaster backend: " + w->call() + " #" + std::to_string(w->seq()) + " of the " +
            label() + " was still queued when the process group was destroyed"));
      }
      w->done(c10::IValue(), {}, e);
    }
    int ms = grace_ms < 0 ? timeoutMs() : grace_ms;
    bool abort_it = abort_comm && valid();
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release r;  // the worker's Python bodies need it to end
      return join(ms, abort_it);
    }
    return join(ms, abort_it);
  }

  // A Python exception object as what a Work carries (a Python caller's
  // wait() raises that very object again).
  static std::exception_ptr as_exception(py::object exc) {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    return std::make_exception_ptr(py::error_already_set());
  }

  std::exception_ptr p2p_error(rm_status_t st, const char* words, int peer,
                               const std::string& call, const std::string& what, uint64_t seq) {
    if (!Py_IsInitialized())
      return std::make_exception_ptr(std::runtime_error("ringmaster backend: " + call +
                                                        " failed during interpreter exit"));
    py::gil_scoped_acquire g;
    try {
      py::object w = words ? py::object(py::str(words)) : py::object(py::none());
      return as_exception(
          twin().attr("_native_p2p_failed")(static_cast<int>(st), w, peer, call, what, seq));
    } catch (py::error_already_set& e) {
      return std::make_exception_ptr(e);
    }
  }

  std::exception_ptr error(rm_status_t st, const std::string& call, uint64_t seq, int ms) {
    if (!Py_IsInitialized())
      return std::make_exception_ptr(std::runtime_error("ringmaster backend: " + call +
                                                        " failed during interpreter exit"));
    py::gil_scoped_acquire g;
    try {
      py::object exc = valid() ? twin().attr("_native_failed")(static_cast<int>(st), call, seq, ms)
                               : twin().attr("_native_stale")(call, seq);
      return as_exception(exc);
    } catch (py::error_already_set& e) {
      return std::make_exception_ptr(e);
    }
  }

 protected:
  template <typename... A>
  c10::intrusive_ptr<c10d::Work> to_twin(const char* name, A&&... args) {
    py::gil_scoped_acquire g;
    py::object w = twin().attr(name)(std::forward<A>(args)...);
    return w.cast<c10::intrusive_ptr<c10d::Work>>();
  }
  c10::intrusive_ptr<c10d::Work> slowAllreduce(std::vector<at::Tensor>& t,
                                               const c10d::AllreduceOptions& o) override {
    return to_twin("allreduce", t, o);
  }
  c10::intrusive_ptr<c10d::Work> slowAllreduceCoalesced(
      std::vector<at::Tensor>& t, const c10d::AllreduceCoalescedOptions& o) override {
    return to_twin("allreduce_coalesced", t, o);
  }
  c10::intrusive_ptr<c10d::Work> slowBroadcast(std::vector<at::Tensor>& t,
                                               const c10d::BroadcastOptions& o) override {
    return to_twin("broadcast", t, o);
  }
  c10::intrusive_ptr<c10d::Work> slowAllgather(std::vector<std::vector<at::Tensor>>& outs,
                                               std::vector<at::Tensor>& ins,
                                               const c10d::AllgatherOptions& o) override {
    return to_twin("allgather", outs, ins, o);
  }
  c10::intrusive_ptr<c10d::Work> slowAllgatherBase(at::Tensor& out, at::Tensor& in,
                                                   const c10d::AllgatherOptions& o) override {
    return to_twin("_allgather_base", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> slowReduceScatterBase(
      at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) override {
    return to_twin("_reduce_scatter_base", out, in, o);
  }
  c10::intrusive_ptr<c10d::Work> slowBarrier(const c10d::BarrierOptions& o) override {
    return to_twin("barrier", o);
  }
  c10::intrusive_ptr<c10d::Work> slowAlltoallBase(at::Tensor& out, at::Tensor& in,
                                                  std::vector<int64_t>& out_splits,
                                                  std::vector<int64_t>& in_splits,
                                                  const c10d::AllToAllOptions& o) override {
    return to_twin("alltoall_base", out, in, out_splits, in_splits, o);
  }
  c10::intrusive_ptr<c10d::Work> slowP2P(const char* call, std::vector<at::Tensor>& t,
                                         int peer, int tag) override {
    if (std::strcmp(call, "recv_anysource") == 0) return to_twin(call, t, tag);
    return to_twin(call, t, peer, tag);
  }

 private:
  PyObject* twin_;
};

template <typename F>
F fn(const py::dict& fns, const char* name) {
  if (!fns.contains(name)) throw std::invalid_argument(std::string("no address for ") + name);
  return reinterpret_cast<F>(fns[name].cast<uintptr_t>());
}

// An address the library may lack (an older one): null, and the twin serves.
template <typename F>
F fn_opt(const py::dict& fns, const char* name) {
  return fns.contains(name) ? fn<F>(fns, name) : nullptr;
}

// The Python twin's queued body and its result (a list of tensors, or a
// list of lists of them), as a Work of this group.
c10::intrusive_ptr<c10d::Work> enqueue_py(PyBacked& self, const std::string& call, int ms,
                                          py::function body, py::object result) {
  std::vector<at::Tensor> outs;
  c10::IValue value;
  c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
  py::list items = result.is_none() ? py::list() : py::list(result);
  bool nested = false;
  for (auto it : items) nested = nested || !THPVariable_Check(it.ptr());
  if (nested) {
    c10::List<c10::List<at::Tensor>> lists;
    for (auto it : items) {
      auto v = py::cast<std::vector<at::Tensor>>(it);
      outs.insert(outs.end(), v.begin(), v.end());
      lists.push_back(c10::List<at::Tensor>(v));
    }
    value = c10::IValue(lists);
    type = c10::ListType::create(type);
  } else {
    for (auto it : items) outs.push_back(py::cast<at::Tensor>(it));
    value = c10::IValue(outs);
  }
  // the callable lives in the queue; it is freed under the GIL
  auto held = std::shared_ptr<py::object>(new py::object(std::move(body)), [](py::object* o) {
    py::gil_scoped_acquire g;
    delete o;
  });
  rt::ProcessGroupRingmaster::Body b = [held](uint64_t seq) {
    py::gil_scoped_acquire g;
    (*held)(seq);
  };
  c10::intrusive_ptr<c10d::Work> w;
  {
    py::gil_scoped_release r;
    w = self.enqueue(call, c10d::OpType::UNKNOWN, std::move(outs), std::move(value),
                     std::move(type), ms, std::move(b));
  }
  return w;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "ringmaster's native torch.distributed process group (see process_group.cpp)";
  py::module::import("torch.distributed");  // torch's ProcessGroup and Work classes

  // This backend's Work, as torch's Work class plus what torch's binding
  // cannot give for it: exception() (torch 1.13 has no conversion of a C++
  // exception_ptr) returns the very exception object wait() raises.
  py::class_<rt::Work, c10d::Work, c10::intrusive_ptr<rt::Work>>(m, "Work")
      .def("exception", [](rt::Work& w) -> py::object {
        std::exception_ptr e = w.exception();
        if (!e) return py::none();
        try {
          std::rethrow_exception(e);
        } catch (py::error_already_set& x) {
          return x.value();
        } catch (std::exception& x) {
          return py::module::import("builtins").attr("RuntimeError")(x.what());
        }
      })
      .def_property_readonly("call", &rt::Work::call)
      .def_property_readonly("sequence", &rt::Work::seq)
      .def_property_readonly("ran_on", &rt::Work::ranOn);

  py::class_<PyBacked, c10d::ProcessGroup, c10::intrusive_ptr<PyBacked>>(m, "ProcessGroup",
                                                                         py::dynamic_attr())
      .def(py::init([](int rank, int size, std::string label, int timeout_ms, uintptr_t comm,
                       py::dict fns, py::object twin) {
             rt::Lib lib;
             lib.allreduce = fn<decltype(lib.allreduce)>(fns, "rm_allreduce");
             lib.broadcast = fn<decltype(lib.broadcast)>(fns, "rm_broadcast");
             lib.allgather = fn<decltype(lib.allgather)>(fns, "rm_allgather");
             lib.reduce_scatter = fn<decltype(lib.reduce_scatter)>(fns, "rm_reduce_scatter");
             lib.barrier = fn<decltype(lib.barrier)>(fns, "rm_barrier");
             lib.set_timeout = fn<decltype(lib.set_timeout)>(fns, "rm_comm_set_timeout");
             lib.abort = fn<decltype(lib.abort)>(fns, "rm_comm_abort");
             lib.alltoall = fn_opt<decltype(lib.alltoall)>(fns, "rm_alltoall");
             lib.alltoallv = fn_opt<decltype(lib.alltoallv)>(fns, "rm_alltoallv");
             lib.isend = fn_opt<decltype(lib.isend)>(fns, "rm_isend");
             lib.irecv = fn_opt<decltype(lib.irecv)>(fns, "rm_irecv");
             lib.p2p_wait = fn_opt<decltype(lib.p2p_wait)>(fns, "rm_p2p_wait");
             lib.p2p_source = fn_opt<decltype(lib.p2p_source)>(fns, "rm_p2p_source");
             lib.p2p_error = fn_opt<decltype(lib.p2p_error)>(fns, "rm_p2p_error");
             lib.p2p_free = fn_opt<decltype(lib.p2p_free)>(fns, "rm_p2p_free");
             if (comm == 0) throw std::invalid_argument("ringmaster backend: no communicator");
             return c10::make_intrusive<PyBacked>(rank, size, std::move(label), timeout_ms,
                                                  reinterpret_cast<rm_comm_t*>(comm), lib,
                                                  std::move(twin));
           }),
           py::arg("rank"), py::arg("size"), py::arg("label"), py::arg("timeout_ms"),
           py::arg("comm"), py::arg("functions"), py::arg("twin"))
      .def("_enqueue", &enqueue_py, py::arg("call"), py::arg("timeout_ms"), py::arg("body"),
           py::arg("result"))
      .def("_in_worker", &PyBacked::inWorker)
      .def("_invalidate", &PyBacked::invalidate)
      .def("_valid", &PyBacked::valid)
      .def("_calls", &PyBacked::calls)
      .def("_set_p2p", [](PyBacked& self, uintptr_t p2p) {
        self.setLane(reinterpret_cast<rm_comm_t*>(p2p));
      })
      .def("_next_p2p_seq", [](PyBacked& self) { return ++self.lane->seq; })
      .def(
          "_p2p_close",
          [](PyBacked& self, int grace_ms) {
            py::gil_scoped_release r;  // Futures' callbacks and error hooks take it
            self.closeLane(grace_ms);
          },
          py::arg("grace_ms"))
      .def(
          "_shutdown",
          [](PyBacked& self, int grace_ms, bool abort_comm) {
            py::object twin = self.twin();
            return self.stop(&twin, grace_ms, abort_comm);
          },
          py::arg("grace_ms"), py::arg("abort_comm"))
      .def_property_readonly("_rm_twin", &PyBacked::twin)
      .def("getBackendName", [](PyBacked&) { return std::string("ringmaster"); })
      .def("name", [](PyBacked&) { return std::string("ringmaster"); });
}

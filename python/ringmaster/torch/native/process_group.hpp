// process_group.hpp - the native "ringmaster" torch.distributed backend: a
// c10d::ProcessGroup whose collectives run on one worker thread per group.
// The design (threads, ordering, ownership, errors) is at the top of
// process_group.cpp; the Python binding is module.cpp.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "ringmaster/ringmaster.h"

namespace ringmaster_torch {

// The C calls the backend makes, taken from the library the Python package
// loaded (module.cpp fills it from ctypes' addresses): the extension never
// links a second copy of libringmaster, whose state would differ.
struct Lib {
  decltype(&rm_allreduce) allreduce = nullptr;
  decltype(&rm_broadcast) broadcast = nullptr;
  decltype(&rm_allgather) allgather = nullptr;
  decltype(&rm_reduce_scatter) reduce_scatter = nullptr;
  decltype(&rm_barrier) barrier = nullptr;
  decltype(&rm_comm_set_timeout) set_timeout = nullptr;
  decltype(&rm_comm_abort) abort = nullptr;
};

class ProcessGroupRingmaster;

// What a call that fails makes of its failure: the hook (module.cpp) builds
// the same exception the Python backend raises (its class, its words, and
// ringmaster.last_exception), as an exception_ptr.
using FailHook = std::function<std::exception_ptr(rm_status_t st, const std::string& call,
                                                  uint64_t seq, int timeout_ms)>;

// A queued call's Work: completed by the worker (done()), which completes
// the Future first (its callbacks run in the worker, before wait() returns
// and before the next call starts) and then wakes the waiters.
class Work : public c10d::Work {
 public:
  Work(std::string call, uint64_t seq, std::string label, c10d::OpType type,
       c10::TypePtr value_type);
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  void synchronize() override {}  // CPU tensors: no stream to order against
  void done(c10::IValue value, std::vector<at::Tensor> outputs, std::exception_ptr e);
  const std::string& call() const { return call_; }
  uint64_t seq() const { return seq_; }
  // the name of the thread that ran the call (set before it runs)
  const std::string& ranOn() const { return ran_on_; }
  void setRanOn(std::string name) { ran_on_ = std::move(name); }

 private:
  std::string ran_on_;
  const std::string call_;
  const uint64_t seq_;
  const std::string label_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupRingmaster : public c10d::ProcessGroup {
 public:
  // A queued body: runs in the worker; it returns normally or throws.
  using Body = std::function<void(uint64_t seq)>;

  ProcessGroupRingmaster(int rank, int size, std::string label, int timeout_ms,
                         rm_comm_t* comm, Lib lib);
  ~ProcessGroupRingmaster() override;

  const std::string getBackendName() const override { return "ringmaster"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  FailHook fail;

  // Queue body as the group's next numbered call (the sequence number is
  // taken here, under the lock, so numbers follow the queue). A call made
  // from the worker itself (a Future callback) runs at once, in place: queued,
  // it would wait on itself.
  c10::intrusive_ptr<Work> enqueue(const std::string& call, c10d::OpType type,
                                   std::vector<at::Tensor> outputs, c10::IValue value,
                                   c10::TypePtr value_type, int timeout_ms, Body body);

  bool inWorker() const { return std::this_thread::get_id() == worker_id_.load(); }
  // The communicator was replaced or destroyed (the Python side says so):
  // native calls stop using it; the delegate then raises Reconfigured or
  // Aborted with the Python backend's words.
  void invalidate() { valid_.store(false); }
  bool valid() const { return valid_.load(); }
  // Stop: queued calls are handed back (the caller fails them), the running
  // one gets grace_ms, then the communicator is aborted (if abort_comm) so
  // that its waits end, and the thread is joined.
  std::vector<c10::intrusive_ptr<Work>> takeQueued();
  bool join(int grace_ms, bool abort_comm);
  int timeoutMs() const { return timeout_ms_; }
  const std::string& label() const { return label_; }
  uint64_t calls() const { return seq_; }

 protected:
  // What the native path does not take (a dtype or op the C library has no
  // kernel for, a non-contiguous tensor, an argument to refuse): module.cpp
  // hands it to the Python backend's checks and bodies, which queue here.
  virtual c10::intrusive_ptr<c10d::Work> slowAllreduce(std::vector<at::Tensor>& t,
                                                       const c10d::AllreduceOptions& o) = 0;
  virtual c10::intrusive_ptr<c10d::Work> slowAllreduceCoalesced(
      std::vector<at::Tensor>& t, const c10d::AllreduceCoalescedOptions& o) = 0;
  virtual c10::intrusive_ptr<c10d::Work> slowBroadcast(std::vector<at::Tensor>& t,
                                                       const c10d::BroadcastOptions& o) = 0;
  virtual c10::intrusive_ptr<c10d::Work> slowAllgather(
      std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
      const c10d::AllgatherOptions& o) = 0;
  virtual c10::intrusive_ptr<c10d::Work> slowAllgatherBase(at::Tensor& out, at::Tensor& in,
                                                           const c10d::AllgatherOptions& o) = 0;
  virtual c10::intrusive_ptr<c10d::Work> slowReduceScatterBase(
      at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) = 0;
  virtual c10::intrusive_ptr<c10d::Work> slowBarrier(const c10d::BarrierOptions& o) = 0;

 private:
  struct Job {
    c10::intrusive_ptr<Work> work;
    Body body;
    int timeout_ms = 0;
    std::vector<at::Tensor> outputs;  // the Work's result() and Future value
    c10::IValue value;
  };
  void loop();
  void run(Job& job);
  void check(rm_status_t st, const std::string& call, uint64_t seq, int ms);
  bool fast(const at::Tensor& t) const;

  const std::string label_;
  const int timeout_ms_;
  rm_comm_t* const comm_;
  const Lib lib_;
  std::atomic<bool> valid_{true};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> q_;
  bool stopping_ = false;
  uint64_t seq_ = 0;
  std::thread thread_;
  std::atomic<std::thread::id> worker_id_{};
};

}  // namespace ringmaster_torch

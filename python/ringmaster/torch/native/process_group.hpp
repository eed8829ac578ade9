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
#include <map>
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
  decltype(&rm_alltoall) alltoall = nullptr;    // null: the twin serves all-to-all
  decltype(&rm_alltoallv) alltoallv = nullptr;
  decltype(&rm_barrier) barrier = nullptr;
  decltype(&rm_comm_set_timeout) set_timeout = nullptr;
  decltype(&rm_comm_abort) abort = nullptr;
  // point-to-point (all null where the library has none: the twin serves)
  decltype(&rm_isend) isend = nullptr;
  decltype(&rm_irecv) irecv = nullptr;
  decltype(&rm_p2p_wait) p2p_wait = nullptr;
  decltype(&rm_p2p_source) p2p_source = nullptr;
  decltype(&rm_p2p_error) p2p_error = nullptr;
  decltype(&rm_p2p_free) p2p_free = nullptr;
};

class ProcessGroupRingmaster;
class P2PWork;

// What a failed send or receive makes of its failure (module.cpp: the twin's
// exception, as the Python backend's). words: the request's own words, or
// nullptr when the post itself failed (the lane's last error then).
using P2PFailHook = std::function<std::exception_ptr(
    rm_status_t st, const char* words, int peer, const std::string& call,
    const std::string& what, uint64_t seq)>;

// A group's point-to-point lane (POINT-TO-POINT in process_group.cpp):
// shared by the group and its open Works, so a Work outlives neither.
struct P2PLane {
  Lib lib;
  std::string label;
  int timeout_ms = 0;
  P2PFailHook fail;
  std::atomic<uint64_t> seq{0};  // the group's send/recv numbers (the twin's too)
  std::mutex mu;                 // the fields below
  rm_comm_t* comm = nullptr;     // null: none, or closed
  bool closing = false;
  std::map<P2PWork*, c10::intrusive_ptr<P2PWork>> open;  // held until they end
  // the Future waiter: waits for each Work whose Future was asked for
  std::deque<c10::intrusive_ptr<P2PWork>> watched;
  std::condition_variable wcv;
  std::thread waiter;
  bool wstop = false;

  void watch(c10::intrusive_ptr<P2PWork> w);
  // No more posts; the open Works end (each waits up to grace_ms, the lane
  // aborted first by the caller when any is open), the waiter stops, and
  // the lane forgets the communicator. Then it may be destroyed.
  void close(int grace_ms);
  ~P2PLane() { stopWaiter(); }

 private:
  void stopWaiter();
};

// A send's or a receive's Work: holds the library's request until it ended.
// One thread at a time waits in the library (the token); others wait for
// the Work's completion. Whoever sees it end settles it.
class P2PWork : public c10d::Work {
 public:
  P2PWork(std::shared_ptr<P2PLane> lane, std::string call, uint64_t seq, int peer,
          at::Tensor tensor, c10d::OpType type);
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  bool isCompleted() override;
  int sourceRank() const override { return source_.load(); }
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  void synchronize() override {}
  std::string what() const;

  rm_p2p_req_t* req = nullptr;  // set at post, before anyone waits; the token's after
  rm_comm_t* comm = nullptr;     // the lane's, for the request's life
  void settle(rm_status_t st);   // the request ended: free it, end the Work
  std::exception_ptr error(rm_status_t st, const char* words);
  void end(std::exception_ptr e);  // complete (e: failed), then the Future
  void settleFuture();

 private:
  bool poll(int ms);  // the token's holder
  std::shared_ptr<P2PLane> lane_;
  const std::string call_;
  const uint64_t seq_;
  const int peer_;
  at::Tensor tensor_;
  std::mutex token_;
  std::atomic<int> source_{-1};
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // under mutex_
  bool future_done_ = false;                          // under mutex_
};

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
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;

  FailHook fail;
  std::shared_ptr<P2PLane> lane;  // made with the group; its comm set by the twin

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
  // the twin's point-to-point communicator (0: none; the twin serves);
  // closeLane before it is destroyed (POINT-TO-POINT): the twin's shutdown,
  // and the subclass's destructor before it lets the twin go
  void setLane(rm_comm_t* p2p);
  void closeLane(int grace_ms);
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
  virtual c10::intrusive_ptr<c10d::Work> slowAlltoallBase(at::Tensor& out, at::Tensor& in,
                                                          std::vector<int64_t>& out_splits,
                                                          std::vector<int64_t>& in_splits,
                                                          const c10d::AllToAllOptions& o) = 0;
  virtual c10::intrusive_ptr<c10d::Work> slowP2P(const char* call,
                                                 std::vector<at::Tensor>& t, int peer,
                                                 int tag) = 0;

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
  c10::intrusive_ptr<c10d::Work> post(const char* call, std::vector<at::Tensor>& t,
                                      int peer, int tag);

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

// process_group.cpp - the native "ringmaster" torch.distributed backend.
//
// WHAT IT IS. A c10d::ProcessGroup subclass (torch 1.13's C++ API) over one
// libringmaster communicator. torch and DDP's reducer call it directly from
// C++: no Python, no GIL on the path of the collectives DDP makes per step.
// ringmaster/torch (_groups.py) makes it (the rendezvous, the communicator,
// sub-groups, point-to-point and monitored_barrier stay in Python) and keeps
// the pure-Python process group (process_group.py) as the fallback where this
// extension was not built; module.cpp is the pybind11 part.
//
// THREADS AND ORDER. Each group has ONE worker thread (started at its first
// call, joined at shutdown) that owns the communicator: libringmaster takes
// one thread at a time per communicator, so every C call on it is made
// there. A collective, in the caller's thread, checks whether the native
// path takes it (CPU, strided, contiguous tensors; a dtype and op the C
// library reduces), takes the group's next sequence number and queues a body
// under one lock, and returns its Work at once. The worker runs the bodies
// in call order, so every rank runs the same collectives in the same order,
// as the C library needs, while the caller (autograd's backward, under DDP)
// goes on. What the native path does not take (other dtypes and ops, a
// non-contiguous tensor, a bad argument, the calls torch makes through
// Python only: all-to-all, gather, scatter, reduce, ...) is the Python
// backend's: its checks raise in the caller as before and its body is queued
// HERE, on the same worker and under the same numbering (module.cpp), so
// native and Python bodies interleave in call order.
//
// A call made from the worker itself (a Future's then() callback, which the
// worker runs when it completes the Future) runs at once, in place: queued,
// it would wait on itself.
//
// TENSOR OWNERSHIP. A queued body holds the caller's tensors (at::Tensor
// references, and the staging buffers it makes) until it has run; the
// caller must not touch them before the Work completes (torch's rule for
// async_op=True), as with gloo.
//
// COMPLETION. The worker completes the Work's c10::ivalue::Future first (its
// value: the output tensors, as gloo's; its callbacks, e.g. a DDP
// communication hook's then(), run there) and then wakes wait(). wait()
// without a timeout returns when the call is done: the worker's C calls have
// the group's deadline (below), so it ends. wait(timeout) throws when the
// timeout passes first, naming the call; the call itself goes on.
//
// ERRORS. A failed C call is turned into the Python backend's own exception
// (module.cpp's FailHook: the ringmaster error class, words that name the
// call, its number in the group, the group, the rank, the timeout, the peer
// the library names and the status; ringmaster.last_exception set as the
// Python backend sets it) and carried by the Work and its Future: a Python
// caller's wait() raises that exception object; C++ sees its text. Failures
// are sticky in the C library: the calls queued behind one fail too, at
// once, never hang.
//
// TIMEOUTS. The group's timeout (init_process_group's / new_group's, torch's
// 30 min default) is the communicator's deadline; an option's own timeout
// bounds that call only (set and restored around it by the worker).
//
// POINT-TO-POINT. send, recv and recvAnysource post in the caller's
// thread on the group's point-to-point lane (the twin's rm_comm_dup, set by
// _set_p2p; worker/comm/p2p.c moves the messages on its own progress thread)
// and return a P2PWork at once: nothing queues behind the group's
// collectives, so a receive posted before an all-reduce and a send after it
// on the peer still meet, as in the Python backend (p2p.py, whose words and
// numbering these share: the lane's counter numbers the twin's calls too).
// No Python and no GIL on this path; a call the fast path does not take (a
// non-contiguous send, a bad peer or tag, no lane, a stale group) is the
// twin's, which raises or copies. The lane holds each open Work until its
// request ends; a Work holds the lane. wait() waits in the library (one
// thread at a time, the others on the Work's condition); whoever sees the
// request end frees it and completes the Work. getFuture() hands the wait to
// the lane's waiter thread, so then() callbacks run with no one in wait().
// A failure becomes the twin's exception (P2PFailHook). Stopping: the twin's
// shutdown and this group's destructor close the lane (closeLane: the lane
// aborted when a Work is open, every open Work ended, the waiter joined)
// before the lane's communicator is destroyed.
//
// STOPPING. destroy_process_group (through the Python side) takes the
// queued calls (they fail with Aborted), gives the running one the group's
// timeout, aborts the communicator if it still runs (its waits end) and joins
// the thread. When the communicator is replaced (a re-formation) or closed,
// the Python side invalidates the group: its calls then go to the Python
// backend, which raises Reconfigured or Aborted with its words, and no
// native body touches the old communicator.
#include "process_group.hpp"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <sstream>

namespace ringmaster_torch {

namespace {

bool dtype_of(at::ScalarType s, rm_dtype_t* out) {
  switch (s) {
    case at::kFloat: *out = RM_F32; return true;
    case at::kDouble: *out = RM_F64; return true;
    case at::kHalf: *out = RM_F16; return true;
    case at::kBFloat16: *out = RM_BF16; return true;
    case at::kInt: *out = RM_I32; return true;
    case at::kLong: *out = RM_I64; return true;
    case at::kByte: *out = RM_U8; return true;
    default: return false;
  }
}

bool op_of(const c10d::ReduceOp& op, rm_op_t* out) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: *out = RM_SUM; return true;
    case c10d::ReduceOp::AVG: *out = RM_AVG; return true;
    case c10d::ReduceOp::PRODUCT: *out = RM_PROD; return true;
    case c10d::ReduceOp::MIN: *out = RM_MIN; return true;
    case c10d::ReduceOp::MAX: *out = RM_MAX; return true;
    default: return false;  // bitwise ops, PREMUL_SUM: the Python backend's
  }
}

// an option's own timeout in ms, 0 when unset (torch: -1)
int opt_ms(std::chrono::milliseconds t) {
  auto ms = t.count();
  if (ms <= 0) return 0;
  return ms > 0x7fffffff ? 0x7fffffff : static_cast<int>(ms);
}

c10::TypePtr tensor_list_type() { return c10::ListType::create(c10::TensorType::get()); }

// The worker's name, kept by the thread itself when it starts: a Work says
// which thread ran it (tests check that it was not the caller's) without a
// system call per call.
constexpr const char* kThreadName = "ringmaster-pg";
thread_local const char* thread_name = "";

}  // namespace

// ---- Work ----
Work::Work(std::string call, uint64_t seq, std::string label, c10d::OpType type,
           c10::TypePtr value_type)
    : c10d::Work(-1, type),
      call_(std::move(call)),
      seq_(seq),
      label_(std::move(label)),
      future_(c10::make_intrusive<c10::ivalue::Future>(std::move(value_type))) {}

bool Work::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    TORCH_CHECK(false, "ringmaster backend: wait on ", call_, " #", seq_, " of the ", label_,
                " timed out after ", timeout.count() / 1000.0,
                " s; the call is still queued or running");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> Work::result() {
  wait();
  return outputs_;
}

void Work::done(c10::IValue value, std::vector<at::Tensor> outputs, std::exception_ptr e) {
  outputs_ = std::move(outputs);
  // the Future first: its callbacks (a DDP hook's then()) run here, in the
  // worker, before wait() returns and before the next call starts
  if (e)
    future_->setError(e);
  else
    future_->markCompleted(std::move(value));
  finish(e);
}

// ---- the group ----
ProcessGroupRingmaster::ProcessGroupRingmaster(int rank, int size, std::string label,
                                               int timeout_ms, rm_comm_t* comm, Lib lib)
    : c10d::ProcessGroup(rank, size),
      label_(std::move(label)),
      timeout_ms_(timeout_ms),
      comm_(comm),
      lib_(lib) {
  lane = std::make_shared<P2PLane>();
  lane->lib = lib;
  lane->label = label_;
  lane->timeout_ms = timeout_ms;
}

void ProcessGroupRingmaster::setLane(rm_comm_t* p2p) {
  std::lock_guard<std::mutex> g(lane->mu);
  lane->comm = lane->lib.isend && lane->lib.irecv && lane->lib.p2p_wait &&
                       lane->lib.p2p_source && lane->lib.p2p_error && lane->lib.p2p_free
                   ? p2p
                   : nullptr;
}

void ProcessGroupRingmaster::closeLane(int grace_ms) {
  if (!lane) return;
  {
    std::lock_guard<std::mutex> g(lane->mu);
    // an open request would otherwise last its whole deadline
    if (!lane->open.empty() && lane->comm != nullptr && !lane->closing) lib_.abort(lane->comm);
  }
  lane->close(grace_ms);
}

ProcessGroupRingmaster::~ProcessGroupRingmaster() {
  auto left = takeQueued();
  for (auto& w : left) {
    w->done(c10::IValue(), {},
            std::make_exception_ptr(std::runtime_error(
                "ringmaster backend: " + w->call() + " #" + std::to_string(w->seq()) +
                " of the " + label_ + " was still queued when the process group was freed")));
  }
  join(timeout_ms_, valid());
}

std::vector<c10::intrusive_ptr<Work>> ProcessGroupRingmaster::takeQueued() {
  std::vector<c10::intrusive_ptr<Work>> out;
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  for (auto& j : q_) out.push_back(j.work);
  q_.clear();
  cv_.notify_all();
  return out;
}

bool ProcessGroupRingmaster::join(int grace_ms, bool abort_comm) {
  if (!thread_.joinable()) return true;
  if (inWorker()) {  // the last reference went in a Future callback
    thread_.detach();
    return true;
  }
  std::unique_lock<std::mutex> lock(mu_);
  bool gone = cv_.wait_for(lock, std::chrono::milliseconds(grace_ms),
                           [&] { return worker_id_.load() == std::thread::id(); });
  if (!gone && abort_comm && valid()) {
    lib_.abort(comm_);  // the running call fails (sticky) and returns
    gone = cv_.wait_for(lock, std::chrono::seconds(10),
                        [&] { return worker_id_.load() == std::thread::id(); });
  }
  lock.unlock();
  if (gone)
    thread_.join();
  else
    thread_.detach();  // stuck in a C call past its deadline: never expected
  return gone;
}

void ProcessGroupRingmaster::loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !q_.empty() || stopping_; });
      if (q_.empty()) {
        worker_id_.store(std::thread::id());
        cv_.notify_all();
        return;
      }
      job = std::move(q_.front());
      q_.pop_front();
    }
    run(job);
  }
}

void ProcessGroupRingmaster::run(Job& job) {
  std::exception_ptr e;
  job.work->setRanOn(thread_name);
  try {
    job.body(job.work->seq());
  } catch (...) {
    e = std::current_exception();
  }
  auto w = std::move(job.work);
  auto value = std::move(job.value);
  auto outs = std::move(job.outputs);
  job.body = nullptr;  // the tensors go with the call
  w->done(e ? c10::IValue() : std::move(value), e ? std::vector<at::Tensor>() : std::move(outs),
          e);
}

c10::intrusive_ptr<Work> ProcessGroupRingmaster::enqueue(const std::string& call,
                                                         c10d::OpType type,
                                                         std::vector<at::Tensor> outputs,
                                                         c10::IValue value,
                                                         c10::TypePtr value_type,
                                                         int timeout_ms, Body body) {
  Job job;
  job.timeout_ms = timeout_ms;
  job.body = std::move(body);
  job.outputs = std::move(outputs);
  job.value = std::move(value);
  if (inWorker()) {
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seq = ++seq_;
    }
    job.work = c10::make_intrusive<Work>(call, seq, label_, type, std::move(value_type));
    auto w = job.work;
    run(job);
    return w;
  }
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(!stopping_, "ringmaster backend: this process group was destroyed "
                          "(dist.destroy_process_group) and its worker stopped");
  job.work = c10::make_intrusive<Work>(call, ++seq_, label_, type, std::move(value_type));
  auto w = job.work;
  q_.push_back(std::move(job));
  if (!thread_.joinable()) {
    thread_ = std::thread([this] {
      // the name a program sees in top, gdb and /proc/<pid>/task/*/comm
      pthread_setname_np(pthread_self(), kThreadName);
      thread_name = kThreadName;
      worker_id_.store(std::this_thread::get_id());
      loop();
    });
  }
  cv_.notify_all();
  return w;
}

// A native body's C call: a failure becomes the Python backend's exception.
void ProcessGroupRingmaster::check(rm_status_t st, const std::string& call, uint64_t seq,
                                   int ms) {
  if (st == RM_OK) return;
  if (fail) std::rethrow_exception(fail(st, call, seq, ms ? ms : timeout_ms_));
  TORCH_CHECK(false, "ringmaster backend: ", call, " #", seq, " of the ", label_,
              " failed with status ", static_cast<int>(st));
}

bool ProcessGroupRingmaster::fast(const at::Tensor& t) const {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided &&
         t.is_contiguous() && !t.is_complex();
}

namespace {
// The option's own timeout around one body (TIMEOUTS above).
struct Deadline {
  Deadline(const Lib& lib, rm_comm_t* c, int ms, int group_ms)
      : lib_(lib), c_(c), set_(ms && ms != group_ms), group_ms_(group_ms) {
    if (set_) lib_.set_timeout(c_, ms);
  }
  ~Deadline() {
    if (set_) lib_.set_timeout(c_, group_ms_);
  }
  const Lib& lib_;
  rm_comm_t* c_;
  bool set_;
  int group_ms_;
};
}  // namespace

// The group is stale when a body is about to run (the communicator was
// replaced or closed since the call was queued): the Python side's words.
#define RM_STALE_CHECK(call, seq)                       \
  do {                                                  \
    if (!valid()) check(RM_ERR_ABORTED, call, seq, 0);  \
  } while (0)

c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  rm_op_t op = RM_SUM;
  rm_dtype_t dt = RM_F32;
  bool ok = valid() && op_of(opts.reduceOp, &op);
  for (auto& t : tensors) ok = ok && fast(t) && dtype_of(t.scalar_type(), &dt);
  if (!ok) return slowAllreduce(tensors, opts);
  int ms = opt_ms(opts.timeout);
  std::vector<at::Tensor> ts = tensors;
  return enqueue("allreduce", c10d::OpType::ALLREDUCE, ts, c10::IValue(ts),
                 tensor_list_type(), ms, [this, ts, op, ms](uint64_t seq) {
                   RM_STALE_CHECK("allreduce", seq);
                   Deadline d(lib_, comm_, ms, timeout_ms_);
                   for (auto& t : ts) {
                     rm_dtype_t tdt = RM_F32;
                     dtype_of(t.scalar_type(), &tdt);
                     check(lib_.allreduce(comm_, t.data_ptr(), t.data_ptr(),
                                          static_cast<size_t>(t.numel()), tdt, op),
                           "allreduce", seq, ms);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  rm_op_t op = RM_SUM;
  rm_dtype_t dt = RM_F32;
  bool ok = valid() && op_of(opts.reduceOp, &op) && !tensors.empty() &&
            dtype_of(tensors[0].scalar_type(), &dt);
  for (auto& t : tensors) ok = ok && fast(t) && t.scalar_type() == tensors[0].scalar_type();
  if (!ok) return slowAllreduceCoalesced(tensors, opts);
  int ms = opt_ms(opts.timeout);
  std::vector<at::Tensor> ts = tensors;
  return enqueue("allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, ts,
                 c10::IValue(ts), tensor_list_type(), ms, [this, ts, op, dt, ms](uint64_t seq) {
                   RM_STALE_CHECK("allreduce_coalesced", seq);
                   Deadline d(lib_, comm_, ms, timeout_ms_);
                   std::vector<at::Tensor> flat_in;
                   for (auto& t : ts) flat_in.push_back(t.reshape({-1}));
                   at::Tensor flat = at::cat(flat_in);
                   check(lib_.allreduce(comm_, flat.data_ptr(), flat.data_ptr(),
                                        static_cast<size_t>(flat.numel()), dt, op),
                         "allreduce_coalesced", seq, ms);
                   int64_t off = 0;
                   for (auto& t : ts) {
                     t.view({-1}).copy_(flat.narrow(0, off, t.numel()));
                     off += t.numel();
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  bool ok = valid() && opts.rootRank >= 0 && opts.rootRank < getSize();
  for (auto& t : tensors) ok = ok && fast(t);
  if (!ok) return slowBroadcast(tensors, opts);
  int ms = opt_ms(opts.timeout);
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ts = tensors;
  return enqueue("broadcast", c10d::OpType::BROADCAST, ts, c10::IValue(ts), tensor_list_type(),
                 ms, [this, ts, root, ms](uint64_t seq) {
                   RM_STALE_CHECK("broadcast", seq);
                   Deadline d(lib_, comm_, ms, timeout_ms_);
                   for (auto& t : ts)  // bytes: any dtype
                     check(lib_.broadcast(comm_, t.data_ptr(), t.nbytes(), RM_U8, root),
                           "broadcast", seq, ms);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  bool ok = valid() && fast(output) && fast(input) &&
            output.scalar_type() == input.scalar_type() &&
            output.numel() == input.numel() * getSize();
  if (!ok) return slowAllgatherBase(output, input, opts);
  int ms = opt_ms(opts.timeout);
  at::Tensor out = output, in = input;
  return enqueue("_allgather_base", c10d::OpType::_ALLGATHER_BASE, {out},
                 c10::IValue(std::vector<at::Tensor>{out}), tensor_list_type(), ms,
                 [this, out, in, ms](uint64_t seq) {
                   RM_STALE_CHECK("_allgather_base", seq);
                   Deadline d(lib_, comm_, ms, timeout_ms_);
                   check(lib_.allgather(comm_, in.data_ptr(), out.data_ptr(), in.nbytes(), RM_U8),
                         "_allgather_base", seq, ms);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  bool ok = valid() && inputs.size() == 1 && outputs.size() == 1 &&
            static_cast<int>(outputs[0].size()) == getSize() && fast(inputs[0]);
  if (ok) {
    for (auto& o : outputs[0])
      ok = ok && o.defined() && o.device().is_cpu() && !o.is_complex() &&
           o.scalar_type() == inputs[0].scalar_type() && o.numel() == inputs[0].numel();
  }
  if (!ok) return slowAllgather(outputs, inputs, opts);
  int ms = opt_ms(opts.timeout);
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs = outputs[0];
  c10::List<c10::List<at::Tensor>> value;
  value.push_back(c10::List<at::Tensor>(outs));
  return enqueue("allgather", c10d::OpType::ALLGATHER, outs, c10::IValue(value),
                 c10::ListType::create(tensor_list_type()), ms,
                 [this, in, outs, ms](uint64_t seq) {
                   RM_STALE_CHECK("allgather", seq);
                   Deadline d(lib_, comm_, ms, timeout_ms_);
                   at::Tensor flat = at::empty({getSize(), in.numel()}, in.options());
                   check(lib_.allgather(comm_, in.data_ptr(), flat.data_ptr(), in.nbytes(), RM_U8),
                         "allgather", seq, ms);
                   for (int r = 0; r < getSize(); r++)
                     outs[r].copy_(flat[r].view(outs[r].sizes()));
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  rm_op_t op = RM_SUM;
  rm_dtype_t dt = RM_F32;
  bool ok = valid() && op_of(opts.reduceOp, &op) && fast(output) && fast(input) &&
            output.scalar_type() == input.scalar_type() &&
            dtype_of(input.scalar_type(), &dt) && input.numel() == output.numel() * getSize();
  if (!ok) return slowReduceScatterBase(output, input, opts);
  int ms = opt_ms(opts.timeout);
  at::Tensor out = output, in = input;
  return enqueue("_reduce_scatter_base", c10d::OpType::_REDUCE_SCATTER_BASE, {out},
                 c10::IValue(std::vector<at::Tensor>{out}), tensor_list_type(), ms,
                 [this, out, in, op, dt, ms](uint64_t seq) {
                   RM_STALE_CHECK("_reduce_scatter_base", seq);
                   Deadline d(lib_, comm_, ms, timeout_ms_);
                   check(lib_.reduce_scatter(comm_, in.data_ptr(), out.data_ptr(),
                                             static_cast<size_t>(out.numel()), dt, op),
                         "_reduce_scatter_base", seq, ms);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::barrier(const c10d::BarrierOptions& opts) {
  if (!valid()) return slowBarrier(opts);
  int ms = opt_ms(opts.timeout);
  return enqueue("barrier", c10d::OpType::BARRIER, {}, c10::IValue(std::vector<at::Tensor>{}),
                 tensor_list_type(), ms, [this, ms](uint64_t seq) {
                   RM_STALE_CHECK("barrier", seq);
                   Deadline d(lib_, comm_, ms, timeout_ms_);
                   // the data plane's barrier: torch's barrier is a collective
                   // of this group, not the coordinator's named barrier
                   check(lib_.barrier(comm_), "barrier", seq, ms);
                 });
}

// all_to_all_single. Even (no splits): rm_alltoall of the rows' bytes.
// With splits: the agreement the Python backend makes (_ops.py
// _alltoallv_rows, the same bytes on the wire, so a rank on either path
// meets the others): one all-gather of [row bytes, bad arguments, input
// splits, output splits] (2 w + 2 int64), the same checks on every rank, then
// rm_alltoallv of exactly each pair's rows. Arguments this rank alone sees
// are wrong (splits that do not sum, another dtype, ...) go to the twin,
// which raises here and still takes part in the agreement.
c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  const int w = getSize();
  const bool even = output_split_sizes.empty() && input_split_sizes.empty();
  auto dense = [](const at::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided &&
           t.is_contiguous() && t.dim() >= 1;
  };
  auto valid_splits = [w](const std::vector<int64_t>& sp, int64_t rows) {
    if (static_cast<int>(sp.size()) != w) return false;
    int64_t sum = 0;
    for (auto k : sp) {
      if (k < 0) return false;
      sum += k;
    }
    return sum == rows;
  };
  bool ok = valid() && lib_.alltoall && lib_.alltoallv && dense(output) && dense(input) &&
            output.scalar_type() == input.scalar_type() &&
            output.sizes().slice(1) == input.sizes().slice(1) &&
            (output.data_ptr() != input.data_ptr() || output.nbytes() == 0);
  if (ok && even)
    ok = input.size(0) % w == 0 && output.size(0) == input.size(0);
  else if (ok)
    ok = valid_splits(input_split_sizes, input.size(0)) &&
         valid_splits(output_split_sizes, output.size(0));
  if (!ok) return slowAlltoallBase(output, input, output_split_sizes, input_split_sizes, opts);
  int ms = opt_ms(opts.timeout);
  at::Tensor out = output, in = input;
  std::vector<int64_t> outs = output_split_sizes, ins = input_split_sizes;
  const char* call = "all_to_all_single";
  return enqueue(call, c10d::OpType::ALLTOALL_BASE, {out},
                 c10::IValue(std::vector<at::Tensor>{out}), tensor_list_type(), ms,
                 [this, out, in, outs, ins, even, ms, call, w](uint64_t seq) {
                   RM_STALE_CHECK(call, seq);
                   Deadline d(lib_, comm_, ms, timeout_ms_);
                   size_t rb = static_cast<size_t>(in.element_size());  // a row's bytes
                   for (int64_t k = 1; k < in.dim(); k++) rb *= static_cast<size_t>(in.size(k));
                   if (even) {
                     if (in.nbytes())
                       check(lib_.alltoall(comm_, in.data_ptr(), out.data_ptr(),
                                           in.nbytes() / static_cast<size_t>(w), RM_U8),
                             call, seq, ms);
                     return;
                   }
                   const size_t row = 2 * static_cast<size_t>(w) + 2;
                   std::vector<int64_t> mine(row), every(row * static_cast<size_t>(w));
                   mine[0] = static_cast<int64_t>(rb);
                   mine[1] = 0;
                   for (int r = 0; r < w; r++) {
                     mine[2 + r] = ins[r];
                     mine[2 + w + r] = outs[r];
                   }
                   check(lib_.allgather(comm_, mine.data(), every.data(), row, RM_I64), call,
                         seq, ms);
                   auto at = [&](int r, size_t k) { return every[static_cast<size_t>(r) * row + k]; };
                   std::ostringstream why;
                   why << "ringmaster backend: " << call << ": ";
                   for (int r = 0; r < w; r++)
                     if (at(r, 1)) {
                       why << "rank " << r << "'s arguments are invalid (its exception says "
                           << "why); nothing was moved";
                       throw std::invalid_argument(why.str());
                     }
                   int64_t lo = at(0, 0), hi = at(0, 0), most = 0;
                   for (int r = 0; r < w; r++) {
                     lo = std::min(lo, at(r, 0));
                     hi = std::max(hi, at(r, 0));
                   }
                   if (lo != hi) {
                     why << "the ranks' rows differ in size (" << lo << " to " << hi
                         << " bytes; this rank's " << rb << ")";
                     throw std::invalid_argument(why.str());
                   }
                   for (int dst = 0; dst < w; dst++)
                     for (int src = 0; src < w; src++) {
                       int64_t sends = at(src, 2 + static_cast<size_t>(dst));
                       int64_t expects = at(dst, 2 + static_cast<size_t>(w + src));
                       most = std::max(most, sends);
                       if (sends != expects) {
                         why << "output_split_sizes disagree with the senders' "
                             << "input_split_sizes (rank " << dst << " expects " << expects
                             << " rows from rank " << src << ", which sends " << sends << ")";
                         throw std::invalid_argument(why.str());
                       }
                     }
                   if (most == 0 || rb == 0) return;
                   std::vector<size_t> sc(static_cast<size_t>(w)), sd(sc.size()),
                       rc(sc.size()), rd(sc.size());
                   size_t so = 0, ro = 0;
                   for (size_t r = 0; r < sc.size(); r++) {
                     sc[r] = static_cast<size_t>(ins[r]) * rb;
                     sd[r] = so;
                     so += sc[r];
                     rc[r] = static_cast<size_t>(outs[r]) * rb;
                     rd[r] = ro;
                     ro += rc[r];
                   }
                   check(lib_.alltoallv(comm_, in.data_ptr(), sc.data(), sd.data(),
                                        out.data_ptr(), rc.data(), rd.data(), RM_U8),
                         call, seq, ms);
                 });
}

// ---- point-to-point (POINT-TO-POINT above) ----
P2PWork::P2PWork(std::shared_ptr<P2PLane> lane, std::string call, uint64_t seq, int peer,
                 at::Tensor tensor, c10d::OpType type)
    : c10d::Work(-1, type),
      lane_(std::move(lane)),
      call_(std::move(call)),
      seq_(seq),
      peer_(peer),
      tensor_(std::move(tensor)) {}

std::string P2PWork::what() const {
  if (call_ == "send") return "to rank " + std::to_string(peer_);
  return peer_ < 0 ? std::string("from any rank") : "from rank " + std::to_string(peer_);
}

bool P2PWork::poll(int ms) {
  if (req == nullptr) return true;  // settled already
  int done = 0;
  rm_status_t st = lane_->lib.p2p_wait(comm, req, ms, &done);
  if (!done) return false;
  settle(st);
  return true;
}

void P2PWork::settle(rm_status_t st) {
  const Lib& lib = lane_->lib;
  rm_p2p_req_t* r = req;
  req = nullptr;
  source_.store(lib.p2p_source(r));
  std::string words;
  if (const char* w = lib.p2p_error(r)) words = w;
  c10::intrusive_ptr<P2PWork> held;  // the lane's hold, dropped last
  {
    std::lock_guard<std::mutex> g(lane_->mu);
    lib.p2p_free(comm, r);
    auto it = lane_->open.find(this);
    if (it != lane_->open.end()) {
      held = std::move(it->second);
      lane_->open.erase(it);
    }
  }
  std::exception_ptr e;
  if (st != RM_OK) e = error(st, words.c_str());
  end(e);
}

std::exception_ptr P2PWork::error(rm_status_t st, const char* words) {
  if (lane_->fail) return lane_->fail(st, words, peer_, call_, what(), seq_);
  return std::make_exception_ptr(std::runtime_error(
      "ringmaster backend: " + call_ + " (" + what() + ") #" + std::to_string(seq_) +
      " of the " + lane_->label + " failed with status " + std::to_string(st)));
}

void P2PWork::end(std::exception_ptr e) {
  finish(e);  // wakes wait()
  settleFuture();
}

void P2PWork::settleFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> f;
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (!future_ || future_done_ || !completed_) return;
    future_done_ = true;
    f = future_;
    e = exception_;
  }
  if (e)
    f->setError(e);
  else
    f->markCompleted(c10::IValue(std::vector<at::Tensor>{tensor_}));
}

bool P2PWork::wait(std::chrono::milliseconds timeout) {
  bool ok;
  if (token_.try_lock()) {
    std::lock_guard<std::mutex> t(token_, std::adopt_lock);
    auto ms = timeout.count();
    ok = poll(timeout == kNoTimeout ? -1 : ms > 0x7fffffff ? 0x7fffffff : static_cast<int>(ms));
  } else {  // another thread waits in the library: its settle wakes us
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == kNoTimeout) {
      cv_.wait(lock, [&] { return completed_; });
      ok = true;
    } else {
      ok = cv_.wait_for(lock, timeout, [&] { return completed_; });
    }
  }
  TORCH_CHECK(ok, "ringmaster backend: wait on ", call_, " (", what(), ") #", seq_, " of the ",
              lane_->label, " timed out after ", timeout.count() / 1000.0, " s; the ", call_,
              " is still open");
  std::lock_guard<std::mutex> g(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

bool P2PWork::isCompleted() {
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (completed_) return true;
  }
  if (!token_.try_lock()) return false;
  std::lock_guard<std::mutex> t(token_, std::adopt_lock);
  return poll(0);
}

std::vector<at::Tensor> P2PWork::result() {
  wait();
  return {tensor_};
}

c10::intrusive_ptr<c10::ivalue::Future> P2PWork::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> f;
  bool fresh = false, done = false;
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(tensor_list_type());
      fresh = true;
    }
    f = future_;
    done = completed_;
  }
  if (fresh && done)
    settleFuture();
  else if (fresh)
    lane_->watch(c10::intrusive_ptr<P2PWork>::reclaim_copy(this));
  return f;
}

void P2PLane::watch(c10::intrusive_ptr<P2PWork> w) {
  std::lock_guard<std::mutex> g(mu);
  if (wstop) return;  // closed: every Work it had has ended and settled its Future
  watched.push_back(std::move(w));
  if (!waiter.joinable()) {
    waiter = std::thread([this] {
      pthread_setname_np(pthread_self(), "ringmaster-p2p");
      for (;;) {
        c10::intrusive_ptr<P2PWork> next;
        {
          std::unique_lock<std::mutex> l(mu);
          wcv.wait(l, [&] { return wstop || !watched.empty(); });
          if (watched.empty()) return;
          next = std::move(watched.front());
          watched.pop_front();
        }
        try {
          next->wait();  // its request's deadline bounds it
        } catch (...) {
        }
        next->settleFuture();
      }
    });
  }
  wcv.notify_all();
}

void P2PLane::close(int grace_ms) {
  std::vector<c10::intrusive_ptr<P2PWork>> left;
  {
    std::lock_guard<std::mutex> g(mu);
    closing = true;
    for (auto& kv : open) left.push_back(kv.second);
  }
  for (auto& w : left) {
    try {
      w->wait(std::chrono::milliseconds(grace_ms > 0 ? grace_ms : 1));
    } catch (...) {  // it failed (aborted): what matters is that it ended
    }
  }
  stopWaiter();
  std::lock_guard<std::mutex> g(mu);
  if (open.empty()) comm = nullptr;
  else
    TORCH_WARN("ringmaster backend: ", open.size(), " point-to-point requests of the ", label,
               " did not end within ", grace_ms, " ms of the lane's close");
}

void P2PLane::stopWaiter() {
  {
    std::lock_guard<std::mutex> g(mu);
    wstop = true;
  }
  wcv.notify_all();
  if (!waiter.joinable()) return;
  if (waiter.get_id() == std::this_thread::get_id())
    waiter.detach();  // the last reference went in the waiter itself
  else
    waiter.join();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::post(const char* call,
                                                           std::vector<at::Tensor>& ts,
                                                           int peer, int tag) {
  const bool any = std::strcmp(call, "recv_anysource") == 0;
  const bool recv = std::strcmp(call, "send") != 0;
  bool ok = valid() && ts.size() == 1 && tag >= 0 &&
            (any ? peer == -1 : peer >= 0 && peer < getSize() && peer != getRank());
  if (ok) {
    const at::Tensor& t = ts[0];
    ok = t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.is_contiguous();
  }
  if (!ok) return slowP2P(call, ts, peer, tag);  // the twin raises, copies or says why
  at::Tensor t = ts[0];
  size_t n = t.nbytes();
  c10::intrusive_ptr<P2PWork> w;
  rm_status_t st = RM_OK;
  {
    std::lock_guard<std::mutex> g(lane->mu);
    if (lane->comm != nullptr && !lane->closing) {
      w = c10::make_intrusive<P2PWork>(
          lane, call, ++lane->seq, peer, t,
          !recv ? c10d::OpType::SEND : any ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV);
      rm_p2p_req_t* r = nullptr;
      void* p = n ? t.data_ptr() : nullptr;
      uint64_t tg = static_cast<uint64_t>(tag);
      st = recv ? lane->lib.irecv(lane->comm, p, n, peer, tg, lane->timeout_ms, &r)
                : lane->lib.isend(lane->comm, p, n, peer, tg, lane->timeout_ms, &r);
      if (st == RM_OK) {
        w->req = r;
        w->comm = lane->comm;
        lane->open[w.get()] = w;
      }
    }
  }
  if (!w) return slowP2P(call, ts, peer, tag);  // no lane, or closed: the twin says so
  if (st != RM_OK) w->end(w->error(st, nullptr));  // its hook takes the GIL: not under mu
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::send(std::vector<at::Tensor>& tensors,
                                                           int dst, int tag) {
  return post("send", tensors, dst, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::recv(std::vector<at::Tensor>& tensors,
                                                           int src, int tag) {
  return post("recv", tensors, src, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRingmaster::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  return post("recv_anysource", tensors, -1, tag);
}

}  // namespace ringmaster_torch

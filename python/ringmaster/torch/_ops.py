"""_ops.py - what the ringmaster process group's collectives do with a
communicator, apart from the group: torch's reduce ops by name, how each
(dtype, op) is reduced with libringmaster's operators, the all-to-all with
splits, and the small conversions every collective uses. Pure functions:
they hold no state, take no lock and start no thread; the group's worker
(process_group.py) calls them, one call at a time per communicator.

REDUCTIONS BY DTYPE. libringmaster reduces f32 f64 f16 bf16 i32 i64 u8 with
SUM PROD MIN MAX AVG. Every other (dtype, op) torch defines is lowered onto
those, so that the result is what torch computes locally over the ranks'
tensors:
  native  the tensor itself (or a view of it) goes to the C call:
          complex SUM/AVG on the real view (view_as_real: re and im are
          summed apart); bool on its uint8 view, where SUM/MAX/BOR are a
          logical or (MAX of 0/1) and PRODUCT/MIN/BAND a logical and (MIN);
  widen   int8 / int16 SUM AVG MIN MAX reduce in an int32 copy and are cast
          back: the cast wraps modulo 2^8 / 2^16, the same bits as adding in
          the narrow type (two's complement);
  fold    what the C library has no operator for (bitwise BAND/BOR/BXOR on
          integers, bool BXOR, int8/int16 and complex PRODUCT) is an
          all-gather of the ranks' tensors then torch's own fold over them,
          in rank order: exact, at world times the bytes.
Anything else (MIN of complex numbers, bitwise ops on floats, AVG of bools)
is a ValueError before anything moves, on every rank alike: the group's
methods call _plan in the caller's thread, before they queue the call.

ALL-TO-ALL WITH SPLITS (rows along dim 0 for all_to_all_single, whole
tensors for all_to_all): first a small all-to-all of the row counts (each
rank learns what every rank will send it and checks that against its
output splits) and one all-reduce (MAX) of [largest split, any mismatch],
so that every rank agrees the exchange is consistent, or every rank raises
naming the first disagreeing pair; then the counted all-to-all
(rm_alltoallv), each pair moving exactly its rows. With a library older
than rm_alltoallv, equal blocks padded to the largest split instead.
"""
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

import ringmaster as _rm


# ---- REDUCE OPS --------------------------------------------------------------
_RED = dist.ReduceOp.RedOpType
_OPNAME = {_RED.SUM: "SUM", _RED.AVG: "AVG", _RED.PRODUCT: "PRODUCT", _RED.MIN: "MIN",
           _RED.MAX: "MAX", _RED.BAND: "BAND", _RED.BOR: "BOR", _RED.BXOR: "BXOR",
           _RED.PREMUL_SUM: "PREMUL_SUM"}
_RMOP = {"SUM": _rm.SUM, "AVG": _rm.AVG, "PRODUCT": _rm.PROD, "MIN": _rm.MIN, "MAX": _rm.MAX}


def _op_of(opts):
    """The torch reduce op of opts (or of a ReduceOp / RedOpType) by name."""
    op = getattr(opts, "reduceOp", opts)
    if op is None:
        return "SUM"
    if isinstance(op, dist.ReduceOp):
        op = op.op
    name = _OPNAME.get(op)
    if name is None or name == "PREMUL_SUM":
        raise ValueError("ringmaster backend: reduce op %s is not supported (SUM, AVG, "
                         "PRODUCT, MIN, MAX, BAND, BOR, BXOR)" % (op,))
    return name


# ---- REDUCTIONS BY DTYPE ----------------------------------------------------
_NATIVE = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
           torch.int64, torch.uint8)
_FOLD = {"SUM": lambda a, b: a + b, "PRODUCT": lambda a, b: a * b,
         "BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}


def _plan(dtype, op, call):
    """(kind, rm op, view) of a reduction; see REDUCTIONS BY DTYPE."""
    def bad(why):
        return ValueError("ringmaster backend: %s: reduce op %s on %s: %s"
                          % (call, op, str(dtype).replace("torch.", ""), why))
    bitwise = op in ("BAND", "BOR", "BXOR")
    if dtype in _NATIVE:
        if bitwise:
            if dtype.is_floating_point:
                raise bad("bitwise ops need an integer or bool tensor")
            return "fold", None, None
        return "native", _RMOP[op], None
    if dtype == torch.bool:
        if op == "AVG":
            raise bad("AVG is not defined for bool (SUM/MAX/BOR is or, PRODUCT/MIN/BAND "
                      "is and, BXOR is xor)")
        if op == "BXOR":
            return "fold", None, None
        rm_op = _rm.MAX if op in ("SUM", "MAX", "BOR") else _rm.MIN
        return "native", rm_op, lambda t: t.view(torch.uint8)
    if dtype in (torch.int8, torch.int16):
        if bitwise or op == "PRODUCT":
            return "fold", None, None
        return "widen", _RMOP[op], None
    if dtype.is_complex:
        if op in ("SUM", "AVG"):
            return "native", _RMOP[op], torch.view_as_real
        if op == "PRODUCT":
            return "fold", None, None
        raise bad("complex numbers have no order and no bitwise ops (SUM, AVG, PRODUCT)")
    raise bad("unsupported dtype (float32/64, float16, bfloat16, int8/16/32/64, uint8, "
              "bool, complex64/128)")


def _gathered(c, t):
    """(world,) + t.shape: every rank's t, by rank (bytes: any dtype)."""
    buf = torch.empty((c.world,) + tuple(t.shape), dtype=t.dtype)
    c.allgather_into(buf, t.contiguous())
    return buf


def _fold(op, g):
    f = _FOLD[op if op in _FOLD else "SUM"]
    acc = g[0].clone()
    for r in range(1, g.shape[0]):
        acc = f(acc, g[r])
    return acc


def _reduce_one(c, t, op, call, root=None):
    """All-reduce (root None) or reduce to root of one tensor in place."""
    kind, rm_op, view = _plan(t.dtype, op, call)
    buf = t if t.is_contiguous() else t.contiguous()
    if kind == "native":
        v = view(buf) if view is not None else buf
        if root is None:
            c.allreduce(v, rm_op)
        else:
            c.reduce(v, rm_op, root)
    elif kind == "widen":
        w = buf.to(torch.int32)
        if root is None:
            c.allreduce(w, rm_op)
        else:
            c.reduce(w, rm_op, root)
        if root is None or c.rank == root:
            buf.copy_(w)
    else:
        g = _gathered(c, buf)
        if root is None or c.rank == root:
            buf.copy_(_fold(op, g))
    if buf is not t:
        t.copy_(buf)


def _reduce_scatter_flat(c, out, flat, op, call):
    """out (contiguous, m elements) = block `rank` of flat (world * m),
    reduced over the ranks."""
    kind, rm_op, view = _plan(out.dtype, op, call)
    if kind == "native":
        if view is None:
            c.reduce_scatter_into(out, flat, rm_op)
        else:
            c.reduce_scatter_into(view(out), view(flat), rm_op)
    elif kind == "widen":
        w = torch.empty(out.shape, dtype=torch.int32)
        c.reduce_scatter_into(w, flat.to(torch.int32), rm_op)
        out.copy_(w)
    else:
        g = _gathered(c, flat)
        out.copy_(_fold(op, g).view(c.world, -1)[c.rank].view_as(out))


# ---- ALL-TO-ALL WITH SPLITS -------------------------------------------------
def _alltoallv_rows(c, out2d, in2d, out_splits, in_splits, call, local_err=None,
                    row_bytes=0):
    """out2d / in2d: contiguous (rows, row_bytes) uint8; splits in rows.
    local_err: this rank's arguments are wrong (a ValueError): it still
    takes part in the agreement, so that every rank raises.

    The agreement is one all-gather of each rank's [row bytes, bad
    arguments, input splits, output splits] (2 w + 2 int64): every rank
    then sees every pair and raises the same error, naming the pair, before
    a byte of data moves (a disagreement the data plane found would fail
    the communicator instead)."""
    w = c.world
    mine = torch.tensor([-1 if local_err else row_bytes, 1 if local_err else 0]
                        + list(in_splits) + list(out_splits), dtype=torch.int64)
    every = torch.empty((w, 2 * w + 2), dtype=torch.int64)
    c.allgather_into(every, mine)
    rows = every.tolist()
    if local_err is not None:
        raise local_err
    bad_args = [r for r in range(w) if rows[r][1]]
    if bad_args:
        raise ValueError("ringmaster backend: %s: rank %d's arguments are invalid (its "
                         "exception says why); nothing was moved" % (call, bad_args[0]))
    sizes = [rows[r][0] for r in range(w)]
    if min(sizes) != max(sizes):
        raise ValueError("ringmaster backend: %s: the ranks' rows differ in size (%d to %d "
                         "bytes; this rank's %d)" % (call, min(sizes), max(sizes), row_bytes))
    for d in range(w):  # rank d's output split from s against s's input split to d
        for s in range(w):
            sends, expects = rows[s][2 + d], rows[d][2 + w + s]
            if sends != expects:
                raise ValueError(
                    "ringmaster backend: %s: output_split_sizes disagree with the senders' "
                    "input_split_sizes (rank %d expects %d rows from rank %d, which sends "
                    "%d)" % (call, d, expects, s, sends))
    m = max(max(r[2:2 + w]) for r in rows) if w else 0
    rb = row_bytes
    if m == 0 or rb == 0:
        return
    if c.has_rooted():  # each pair moves exactly its rows (rm_alltoallv)
        c.alltoallv_into(out2d, in2d, [k * rb for k in out_splits],
                         [k * rb for k in in_splits])
        return
    send = torch.zeros((w, m, rb), dtype=torch.uint8)
    off = 0
    for r, k in enumerate(in_splits):
        send[r, :k] = in2d[off:off + k]
        off += k
    recv = torch.empty_like(send)
    c.alltoall_into(recv, send)
    off = 0
    for r, k in enumerate(out_splits):
        out2d[off:off + k] = recv[r, :k]
        off += k


# ---- SMALL CONVERSIONS -------------------------------------------------------
def _done(result):
    f = torch.futures.Future()
    f.set_result(result)
    return _create_work_from_future(f)


def _as_list(t):
    return [t] if isinstance(t, torch.Tensor) else list(t)


def _timeout_ms(td):
    """torch's timedelta as libringmaster's int milliseconds (at least 1)."""
    ms = int(td.total_seconds() * 1000) if td is not None else 0
    return min(max(ms, 1), 2 ** 31 - 1)

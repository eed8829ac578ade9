"""_buffers.py - what the collectives take: the op, dtype and algorithm codes of
libringmaster, and the buffers (C-contiguous numpy arrays, CPU torch tensors,
objects with ``__cuda_array_interface__``) turned into (pointer, count,
dtype) without a copy. The hot paths' foreign functions are module globals
(``_c_allreduce`` ...), so a call costs one lookup (see ``ringmaster._lib``).
"""
import ctypes
import sys

from . import _lib

__all__ = ["SUM", "PROD", "MIN", "MAX", "AVG", "OPS", "F32", "F64", "F16", "BF16", "I32", "I64", "U8",
           "ALGORITHMS"]

SUM, PROD, MIN, MAX, AVG = 0, 1, 2, 3, 4
OPS = {"sum": SUM, "prod": PROD, "product": PROD, "min": MIN, "max": MAX,
       "avg": AVG, "mean": AVG, SUM: SUM, PROD: PROD, MIN: MIN, MAX: MAX, AVG: AVG}
F32, F64, F16, BF16, I32, I64, U8 = 0, 1, 2, 3, 4, 5, 6
ALGORITHMS = {None: 0, "auto": 0, "ring": 1, "hd": 2, "halving_doubling": 2,
              "butterfly": 3, "tree": 4, "hierarchical": 5, "hier": 5, "nccl": 6,
              0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6}

# ---- dtype tables (filled lazily for torch) --------------------------------
try:
    import numpy as _np
    _ndarray = _np.ndarray
    _NP_DT = {_np.dtype(k): v for k, v in (("float32", F32), ("float64", F64),
                                           ("float16", F16), ("int32", I32),
                                           ("int64", I64), ("uint8", U8))}
except ImportError:  # numpy is optional
    _np = None
    _ndarray = type(None)
    _NP_DT = {}

_torch = None
_Tensor = ()  # isinstance(x, ()) is False until torch is seen
_TORCH_DT = {}


def _resolve_torch():
    global _torch, _Tensor, _TORCH_DT
    t = sys.modules.get("torch")
    if t is None or _torch is not None:
        return
    _torch = t
    _Tensor = t.Tensor
    _TORCH_DT = {t.float32: F32, t.float64: F64, t.float16: F16, t.bfloat16: BF16,
                 t.int32: I32, t.int64: I64, t.uint8: U8}


_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof

# hot-path prototypes as module globals
_c_allreduce = _lib.rm_allreduce
_c_allreduce_ex = _lib.rm_allreduce_ex
_c_broadcast = _lib.rm_broadcast
_c_allgather = _lib.rm_allgather
_c_reduce_scatter = _lib.rm_reduce_scatter
_c_alltoall = _lib.rm_alltoall
_c_reduce = _lib.rm_reduce
_c_barrier = _lib.rm_barrier


# __cuda_array_interface__ typestr -> rm dtype (no standard spelling for bf16)
_CAI_DT = {"<f4": F32, "<f8": F64, "<f2": F16, "<i4": I32, "<i8": I64, "|u1": U8,
           "<u1": U8}


def _cai(x, writable):
    """(pointer, count, dtype, stream) of an object with __cuda_array_interface__
    (version 2 or 3: CuPy, Numba, PyTorch CUDA tensors). The stream is the one
    the producer's work is ordered on (v3 "stream": absent or 1 = the legacy
    default stream, 2 = the per-thread default, else a cudaStream_t)."""
    a = x.__cuda_array_interface__
    shape = tuple(a["shape"])
    n = 1
    for d in shape:
        n *= int(d)
    typestr = a["typestr"]
    itemsize = int(typestr[2:])
    strides = a.get("strides")
    if strides is not None:
        want, acc = [], itemsize
        for d in reversed(shape):
            want.append(acc)
            acc *= int(d)
        if n > 1 and tuple(int(v) for v in strides) != tuple(reversed(want)):
            raise ValueError("ringmaster: device array is not C-contiguous")
    ptr, readonly = a["data"]
    if readonly and writable:
        raise ValueError("ringmaster: device array is read-only")
    st = a.get("stream")
    stream = 0 if st in (None, 1) else int(st)
    return int(ptr or 0), n, _CAI_DT.get(typestr), stream


def _buf4(x, writable=True):
    """(pointer, element count, rm dtype or None, stream) of a contiguous
    buffer: host memory (numpy arrays, CPU tensors; stream None) or device
    memory (CUDA tensors, objects with __cuda_array_interface__; stream: the
    cudaStream_t the collective waits for, 0 = the default stream)."""
    if type(x) is _ndarray:
        if not x.flags.c_contiguous:
            raise ValueError("ringmaster: numpy array is not C-contiguous "
                             "(use numpy.ascontiguousarray and copy back)")
        n = x.size
        if n == 0:
            return 0, 0, _NP_DT.get(x.dtype), None
        if x.flags.writeable:
            p = _addressof(_from_buffer(x))
        elif writable:
            raise ValueError("ringmaster: numpy array is read-only")
        else:
            p = x.ctypes.data
        return p, n, _NP_DT.get(x.dtype), None
    if _torch is None:
        _resolve_torch()
    if isinstance(x, _Tensor):
        if x.layout is not _torch.strided:
            raise TypeError("ringmaster: sparse tensors are not supported")
        if not x.is_contiguous():
            raise ValueError("ringmaster: tensor is not contiguous (use .contiguous() "
                             "and copy back)")
        stream = None
        if x.is_cuda:
            stream = _torch.cuda.current_stream(x.device).cuda_stream
        elif x.device.type != "cpu":
            raise TypeError("ringmaster: tensor on %s; CPU and CUDA tensors are "
                            "supported" % x.device)
        return x.data_ptr(), x.numel(), _TORCH_DT.get(x.dtype), stream
    if _np is not None and isinstance(x, _ndarray):  # subclasses
        return _buf4(x.view(_ndarray), writable)
    if hasattr(x, "__cuda_array_interface__"):
        return _cai(x, writable)
    raise TypeError("ringmaster: expected a numpy.ndarray, a torch.Tensor (CPU or CUDA) "
                    "or a device array (__cuda_array_interface__), got %s" % type(x).__name__)


def _buf(x, writable=True):
    """(pointer, element count, rm dtype or None) of a contiguous HOST buffer
    (the calls that compute on the CPU: aggregation, straggler steps)."""
    p, n, dt, stream = _buf4(x, writable)
    if stream is not None:
        raise TypeError("ringmaster: this call needs host memory (numpy or a CPU "
                        "tensor), not device memory; use .cpu() and copy back")
    return p, n, dt


def _nbytes(x):
    if type(x) is _ndarray or (_np is not None and isinstance(x, _ndarray)):
        return x.nbytes
    if hasattr(x, "numel"):
        return x.numel() * x.element_size()
    p, n, dt, _ = _cai(x, False)
    return n * int(x.__cuda_array_interface__["typestr"][2:])


def _dtype_err(x):
    return TypeError("ringmaster: dtype %s is not supported (f32 f64 f16 bf16 i32 i64 u8)"
                     % (x.dtype,))

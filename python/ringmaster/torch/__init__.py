"""PyTorch integration.

* ``import ringmaster.torch`` registers the ``torch.distributed`` backend
  ``"ringmaster"``: ``dist.init_process_group("ringmaster")`` (env://: the
  ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` the agent or torchrun
  sets) and an unchanged ``DistributedDataParallel(model)`` train on it. It is
  a Python subclass of ``torch.distributed.ProcessGroup`` (torch 1.13's
  ``c10d::PyProcessGroup`` trampoline dispatches the C++ calls DDP's reducer
  makes to the Python methods). It is asynchronous, as gloo and NCCL: each
  group's collectives run in order on its own worker thread, the caller
  gets a Work at once (arguments are checked before: a ValueError raises
  at the call), and DDP's bucket all-reduces overlap its backward pass
  (THE PROCESS GROUP; ``RINGMASTER_TORCH_SYNC=1`` keeps the synchronous
  path). In a ringmaster job the process group IS the
  session's communicator (its rank must equal ringmaster's rank); elsewhere the
  data-plane addresses are exchanged through the process group's store. A
  program that joins a job after a re-formation gets the session's rank and
  world without torch's store (A LATE JOINER below).
* ``DistributedOptimizer(optimizer, named_parameters=...)``: Horovod's manner,
  no ``torch.distributed`` needed: ``step()`` first averages the gradients
  over the ranks (flattened into few large buckets), then steps;
  ``aggregation=`` combines them by rm_aggregate (median, Krum, ...) instead.
* ``broadcast_parameters``, ``broadcast_optimizer_state``, ``broadcast_object``.
* ``ringmaster.torch.elastic``: in-place recovery (``run``, ``TorchState``; a
  DDP model held by a ``TorchState`` is rebuilt by it after a re-formation).

Modules (the design of each is at its top):
  process_group.py  ProcessGroupRingmaster, the process group in Python: the
                    backend, or each native group's twin (THE PROCESS GROUP);
  _work.py          its worker thread and Work (WHICH WORK);
  _ops.py           what its collectives do by dtype and op, all-to-all with
                    splits (REDUCTIONS BY DTYPE);
  p2p.py            its point-to-point: send, recv, batch_isend_irecv;
  _native_load.py   finding and loading the C++ backend (native/, loaded as
                    ringmaster.torch._native; THE NATIVE BACKEND);
  _groups.py        the backend's creator, init_process_group for a late
                    joiner, destroy_process_group, monitored_barrier;
  ddp.py            what DDP on it gets without code;
  optimizer.py      the Horovod-style API;
  elastic.py        recovery in place.
This file registers the backend and installs the patched torch.distributed
functions when imported, and names the public API.
"""
import torch.distributed as dist

import ringmaster as _rm  # noqa: F401  (tests reach the binding as ringmaster.torch._rm)

from ._native_load import active_backend
from .process_group import ProcessGroupRingmaster
from . import _groups
from ._groups import monitored_barrier, _rm_group, _rm_default_group  # noqa: F401  (ddp, elastic)

__all__ = ["ProcessGroupRingmaster", "active_backend", "DistributedOptimizer", "broadcast_parameters",
           "broadcast_optimizer_state", "broadcast_object", "allreduce_tensors",
           "monitored_barrier"]

if "RINGMASTER" not in dist.Backend._plugins:
    dist.Backend.register_backend("ringmaster", _groups._create)

# init_process_group for A LATE JOINER, destroy_process_group that stops the
# groups' workers first (_groups.py)
dist.init_process_group = _groups._rm_init_process_group
dist.distributed_c10d.init_process_group = _groups._rm_init_process_group
dist.destroy_process_group = _groups._rm_destroy_process_group
dist.distributed_c10d.destroy_process_group = _groups._rm_destroy_process_group


# DDP on this backend (ddp.py: steps without code, the job's spec applied to
# the step's whole gradient) patches DistributedDataParallel when imported;
# the Horovod-style API lives in optimizer.py.
from .ddp import _rm_ddp_init, _rm_ddp_register  # noqa: E402,F401
from .optimizer import (DistributedOptimizer, broadcast_parameters,  # noqa: E402,F401
                        broadcast_optimizer_state, broadcast_object, allreduce_tensors)

"""Counting what makes the host wait for a device, on the CPU: a loop that reads device values at every step
would idle a GPU between its kernels, and these counts see it without one."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HOST_READS = ("cpu", "numpy", "tolist", "item", "__array__")


class _Syncs(TorchDispatchMode):
    """Counts what would make the host wait for a device: scalar reads (``item``, ``float``, ``bool``…),
    data-dependent shapes (``nonzero``…) and copies to host memory (``cpu``, ``numpy``, ``tolist``)."""

    OPS = ("_local_scalar_dense", "nonzero", "masked_select", "unique", "is_nonzero", "equal",
           "_linalg_check_errors")  # torch.linalg's error check reads each factorisation's info on the host

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] in self.OPS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def count_host_reads(fn: Callable[[], object]) -> int:
    mode = _Syncs()
    saved = {name: getattr(torch.Tensor, name) for name in HOST_READS}
    for name, orig in saved.items():
        def counted(self, *a, _orig=orig, **kw):
            mode.count += 1
            return _orig(self, *a, **kw)

        setattr(torch.Tensor, name, counted)
    try:
        with mode:
            fn()
    finally:
        for name, orig in saved.items():
            setattr(torch.Tensor, name, orig)
    return mode.count

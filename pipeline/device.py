"""Which device a stage computes on, checked before any compute, and what it was (for provenance).

One place for the device: ``TRAINSCAPE_DEVICE`` (``cpu``, ``cuda`` or ``cuda:<n>``) if set, else CUDA
when torch sees a device, else the CPU. Asking for CUDA where there is none is bad input: a
:class:`~pipeline.config.ConfigError` (exit 2, one line), never a traceback half-way through a stage.
torch is asked only when the stage's code already imported it, so a stage that does not use torch
never pays its import.

The float32 matmul precision (TF32 on CUDA or not) is set and read here only, with torch's
``fp32_precision`` switches: torch refuses to read its legacy flags (``allow_tf32``,
``get_float32_matmul_precision``) once anything has used the new ones ("mix of legacy and new APIs").
"""

from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
import sys
from typing import Any

from pipeline.config import ConfigError

ENV = "TRAINSCAPE_DEVICE"
_FORM = re.compile(r"cpu|cuda(:\d+)?")


def _torch() -> Any:
    return sys.modules.get("torch")


def cuda_devices() -> int:
    """How many CUDA devices the loaded torch sees (0 when torch is not loaded or is a CPU build)."""
    torch = _torch()
    return torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0


def check_available(device: str, key: str, source: str) -> str:
    """``device`` if it names a device this process can use; else a ConfigError naming ``key``."""
    if not _FORM.fullmatch(device):
        raise ConfigError(f"{source}: {key} = {device!r} is not allowed; allowed: 'cpu', 'cuda' or 'cuda:<n>'")
    if device.startswith("cuda"):
        n = cuda_devices()
        index = int(device.partition(":")[2] or 0)
        if index >= n:
            torch = _torch()
            seen = (f"torch {torch.__version__} sees {n} CUDA device(s)" if torch is not None
                    else "torch is not loaded by this stage")
            raise ConfigError(f"{source}: {key} = {device!r} is not allowed here; allowed: 'cpu' ({seen}; "
                              f"a CUDA build of torch and a GPU are needed, see the README's GPU set-up)")
    return device


_cores_share: int | None = None  # a worker process's share of the cores (set by executor.process_map)


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def share_cores(n: int | None) -> None:
    """In a worker process of ``TRAINSCAPE_EXECUTOR=processes``: its share of the machine's cores (None: all)."""
    global _cores_share
    _cores_share = None if n is None else max(1, int(n))


def core_share() -> int | None:
    """The share set by :func:`share_cores`, None outside a worker."""
    return _cores_share


def cpu_threads(requested: int) -> int:
    """torch CPU threads for a task that asks for ``requested``: no more than its cores (a worker's share).

    More threads than cores only oversubscribe them: on a 2-core machine a dense float64 eigvalsh (MKL) at
    n = 8,192 took 19.47 s with 4 threads and 11.99 s with 2 (``benchmarks/hessian_spectrum.py --threads``)."""
    return max(1, min(int(requested), _cores_share or cores()))


def memory_bytes(device: str) -> int:
    """The memory a stage on ``device`` computes in: the GPU's (torch loaded), else the machine's RAM."""
    torch = _torch()
    if device.startswith("cuda") and torch is not None and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(int(device.partition(":")[2] or 0)).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def resolve() -> str:
    """The stage's device: ``TRAINSCAPE_DEVICE`` (checked), else ``cuda`` when available, else ``cpu``."""
    asked = os.environ.get(ENV, "")
    if asked and _torch() is None:  # the stage's code computes nothing with torch: the CPU, whatever was asked
        check_available("cpu" if _FORM.fullmatch(asked) else asked, ENV, "environment")
        return "cpu"
    if asked:
        return check_available(asked, ENV, "environment")
    return "cuda" if cuda_devices() else "cpu"


@functools.cache
def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def _driver() -> str:
    """The NVIDIA driver's version as ``nvidia-smi`` reports it ('unknown' without it)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.splitlines()[0].strip() if out.strip() else "unknown"


MATMUL_PRECISIONS = ("ieee", "tf32")  # full float32 products, or TF32 (CUDA only)


def _fp32_backends(device: str) -> list[Any]:
    """The ``fp32_precision`` switches that govern float32 products on ``device``: cuBLAS and cuDNN's
    convolutions on CUDA, oneDNN's matmul on the CPU."""
    torch = _torch()
    if torch is None:
        return []
    b = torch.backends
    return [b.cuda.matmul, b.cudnn.conv] if str(device).startswith("cuda") else [b.mkldnn.matmul]


def _effective(switch: str) -> str:
    """A switch's value with ``none`` (inherit) resolved through torch's global one, then ``ieee``."""
    torch = _torch()
    if switch == "none" and torch is not None:
        switch = torch.backends.fp32_precision
    return "ieee" if switch == "none" else switch


def matmul_precision(device: str) -> str:
    """How float32 matrix products compute on ``device`` now: ``ieee`` (full float32) or ``tf32``."""
    backends = _fp32_backends(device)
    return _effective(backends[0].fp32_precision) if backends else "ieee"


def set_matmul_precision(device: str, precision: str) -> None:
    """Make float32 products on ``device`` compute as ``precision`` says (``tf32``: CUDA only; anything
    else, such as ``float32`` or ``float64``, means full precision). A no-op on the CPU, whose products
    stay ``ieee``, and where torch is not loaded."""
    if not str(device).startswith("cuda"):
        return
    value = "tf32" if precision == "tf32" else "ieee"
    for backend in _fp32_backends(device):
        backend.fp32_precision = value


def describe(device: str) -> dict[str, Any]:
    """What ``device`` is, for ``meta.json`` and the MLflow tags: its name, torch's version, CUDA and
    driver versions on a GPU, and how float32 products compute now (``float32_matmul``: ``ieee`` or
    ``tf32``; set the stage's precision before describing it, so the record says what ran)."""
    torch = _torch()
    info: dict[str, Any] = {"device": device}
    if torch is None:
        return {**info, "name": _cpu_name(), "torch": None}
    info["torch"] = torch.__version__
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        props = torch.cuda.get_device_properties(index)
        info.update(name=props.name, capability=f"{props.major}.{props.minor}", cuda=torch.version.cuda,
                    driver=_driver(), memory_gib=round(props.total_memory / 2**30, 1))
    else:
        info["name"] = _cpu_name()
    info["float32_matmul"] = matmul_precision(device)
    return info


def record(device: str, precision: str | None) -> dict[str, Any]:
    """Set a unit's declared float32 matmul ``precision`` on its device (None: as torch's defaults leave it),
    then :func:`describe` it: the record says what the unit computes in."""
    if precision is not None:
        set_matmul_precision(device, precision)
    return describe(device)


def line(info: dict[str, Any]) -> str:
    """One line for the stage's log: ``device: cuda (NVIDIA H100, CUDA 13.0, driver 580.1); float32 …``."""
    if info.get("torch") is None:
        return f"device: {info['device']} ({info['name']}); torch not used"
    extra = f", CUDA {info['cuda']}, driver {info['driver']}" if str(info["device"]).startswith("cuda") else ""
    return (f"device: {info['device']} ({info['name']}{extra}); torch {info['torch']}; "
            f"float32 matmul: {info['float32_matmul']}")

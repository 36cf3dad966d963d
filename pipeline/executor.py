"""Where a stage's independent tasks run: in the stage's process (``local``) or on Ray (``ray``).

A study hands :meth:`Context.map <pipeline.contract.Context.map>` a module-level function and its
inputs (a sweep's stacked groups, say) and gets ``(index, result)`` pairs as tasks finish. The DVC
stage stays the unit of caching: whichever executor ran the tasks, the study yields the same parts
and the framework writes them the same way, so outputs and resume-after-kill are identical.

``TRAINSCAPE_EXECUTOR=ray`` runs each task as a Ray task: ``RAY_ADDRESS`` joins an existing cluster,
otherwise a local Ray starts with the machine's CPUs; on CUDA each task asks for one GPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pipeline.config import ConfigError

EXECUTORS = ("local", "ray")
Mapper = Callable[..., Iterator[tuple[int, Any]]]


def executor_name() -> str:
    """``TRAINSCAPE_EXECUTOR`` (default ``local``), checked before any compute."""
    name = os.environ.get("TRAINSCAPE_EXECUTOR", "local") or "local"
    if name not in EXECUTORS:
        raise ConfigError(f"TRAINSCAPE_EXECUTOR = {name!r} is not allowed; allowed: {list(EXECUTORS)}")
    return name


def figure_workers_setting() -> int | None:
    """``TRAINSCAPE_FIGURE_WORKERS``: how many processes save a render unit's figures (``None``: one per
    usable core); checked before any compute."""
    value = os.environ.get("TRAINSCAPE_FIGURE_WORKERS")
    if value is None:
        return None
    if not (value.isdigit() and int(value) >= 1):
        raise ConfigError(f"TRAINSCAPE_FIGURE_WORKERS = {value!r} is not allowed; allowed: a whole number >= 1")
    return int(value)


def local_map(fn: Callable[[Any], Any], items: Sequence[Any], *, gpus: float = 0) -> Iterator[tuple[int, Any]]:
    """One task after the other, in this process (``gpus`` is what a Ray task would ask for)."""
    for i, item in enumerate(items):
        yield i, fn(item)


def ray_map(fn: Callable[[Any], Any], items: Sequence[Any], *, gpus: float = 0) -> Iterator[tuple[int, Any]]:
    """Every item a Ray task; results in the order tasks finish."""
    import ray  # only where a cluster is asked for: importing Ray costs seconds

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, include_dashboard=False, log_to_driver=True,
                 configure_logging=False)
    task = ray.remote(num_cpus=1, num_gpus=gpus)(fn)
    index = {task.remote(item): i for i, item in enumerate(items)}
    pending = list(index)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        yield index[done[0]], ray.get(done[0])


def mapper(name: str) -> Mapper:
    return {"local": local_map, "ray": ray_map}[name]

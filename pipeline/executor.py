"""Where a stage's independent tasks run: in the stage's process (``local``), in worker processes on this
machine (``processes``) or on Ray (``ray``).

A study hands :meth:`Context.map <pipeline.contract.Context.map>` a module-level function and its
inputs (a sweep's stacked groups, say) and gets ``(index, result)`` pairs as tasks finish. The DVC
stage stays the unit of caching: whichever executor ran the tasks, the study yields the same parts
and the framework writes them the same way, so outputs and resume-after-kill are identical.

``TRAINSCAPE_EXECUTOR=processes`` runs the tasks side by side in a pool of ``TRAINSCAPE_WORKERS`` worker
processes (default: one per CPU; the standard library's ``concurrent.futures``), for a machine without Ray,
such as a GPU machine whose CPU tasks would otherwise wait for each other. ``TRAINSCAPE_EXECUTOR=ray`` runs
each task as a Ray task: ``RAY_ADDRESS`` joins an existing cluster, otherwise a local Ray starts with the
machine's CPUs; on CUDA each task asks for one GPU.

Where each task ran (which node, which attempt: Ray retries a task whose node died) is handed back in
``where`` for the run records and MLflow, never for an output: outputs are the same on every executor.
When the cluster's head is lost, the stage stops with :class:`ClusterLostError` within seconds (Ray's
own driver would wait a minute, then abort without a word the stage could add); the parts already
written stay, and a rerun on a running cluster resumes from them.
"""

from __future__ import annotations

import os
import pickle
import socket
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pipeline import device
from pipeline.config import ConfigError

EXECUTORS = ("local", "processes", "ray")
WORKERS_ENV = "TRAINSCAPE_WORKERS"
Mapper = Callable[..., Iterator[tuple[int, Any]]]
Where = dict[int, dict[str, Any]]  # task index -> where it ran (executor, node, attempt)
HEAD_LOST_AFTER_S = 10.0  # the head unreachable this long (Ray's driver gives up after 60 s): the stage stops


class ClusterLostError(RuntimeError):
    """The Ray cluster's head stopped answering while tasks were pending."""


def executor_name() -> str:
    """``TRAINSCAPE_EXECUTOR`` (default ``local``), checked before any compute."""
    name = os.environ.get("TRAINSCAPE_EXECUTOR", "local") or "local"
    if name not in EXECUTORS:
        raise ConfigError(f"TRAINSCAPE_EXECUTOR = {name!r} is not allowed; allowed: {list(EXECUTORS)}")
    if name == "processes":
        worker_count()
    return name


def local_map(fn: Callable[[Any], Any], items: Sequence[Any], *, gpus: float = 0,
              where: Where | None = None) -> Iterator[tuple[int, Any]]:
    """One task after the other, in this process (``gpus`` is what a Ray task would ask for)."""
    for i, item in enumerate(items):
        if where is not None:
            where[i] = {"executor": "local", "host": socket.gethostname()}
        yield i, fn(item)


def worker_count() -> int:
    """``TRAINSCAPE_WORKERS`` (default: the cores this process may run on), checked before any compute."""
    raw = os.environ.get(WORKERS_ENV, "")
    if not raw:
        return device.cores()
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{WORKERS_ENV} = {raw!r} is not allowed; allowed: a whole number of worker processes, 1 "
                          f"or more (unset: one per core, {device.cores()} here)")
    return int(raw)


def side_by_side() -> int:
    """How many of a stage's ``ctx.map`` tasks run at once on this machine: the workers of
    ``TRAINSCAPE_EXECUTOR=processes``; one in the stage's process, and one for Ray, whose cluster this machine
    cannot see (the plan sums a unit's tasks there)."""
    return worker_count() if executor_name() == "processes" else 1


class TaskError(RuntimeError):
    """A task's error that could not travel back from its worker process as itself (its class does not survive
    pickling, as scipy's ``ArpackNoConvergence``): its type, message and traceback, as text. Without it the pool
    broke with a ``TypeError`` about the class's arguments, and the cause was lost."""


def _in_worker(fn: Callable[[Any], Any], item: Any) -> tuple[dict[str, Any], Any]:
    try:
        result = fn(item)
    except Exception as exc:
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:
            raise TaskError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}") from None
        raise
    return {"executor": "processes", "host": socket.gethostname(), "pid": os.getpid()}, result


def process_map(fn: Callable[[Any], Any], items: Sequence[Any], *, gpus: float = 0,
                where: Where | None = None) -> Iterator[tuple[int, Any]]:
    """Every item a task in a pool of worker processes; results in the order tasks finish. Workers are
    spawned, not forked: a task may use CUDA, which a forked child of a CUDA process cannot. Each worker's torch
    threads are capped at its share of the cores (``device.cpu_threads``). A task's error
    ends the map; tasks not started are cancelled. ``gpus`` is what a Ray task would ask for: the workers
    share this machine's devices."""
    import concurrent.futures as cf
    import multiprocessing

    if not items:
        return
    workers = min(worker_count(), len(items))
    pool = cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                  initializer=device.share_cores, initargs=(device.cores() // workers,))
    try:
        futures = {pool.submit(_in_worker, fn, item): i for i, item in enumerate(items)}
        for future in cf.as_completed(futures):
            node, result = future.result()
            if where is not None:
                where[futures[future]] = node
            yield futures[future], result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def located_task(fn: Callable[[Any], Any], item: Any) -> tuple[dict[str, Any], Any]:
    """The Ray task: ``fn(item)`` and where it ran: the Ray node, its address and the attempt (0 the
    first; Ray retries a task whose node died). ``fn`` travels by reference (a module-level function)."""
    import ray

    worker = ray._private.worker.global_worker
    node = {"executor": "ray", "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(), "host": socket.gethostname(),
            "attempt": int(worker.core_worker.get_current_task_attempt_number())}
    return node, fn(item)


def _reachable(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def ray_map(fn: Callable[[Any], Any], items: Sequence[Any], *, gpus: float = 0,
            where: Where | None = None) -> Iterator[tuple[int, Any]]:
    """Every item a Ray task; results in the order tasks finish. A task whose node dies is retried
    elsewhere (Ray's default of 3 retries); a lost head raises :class:`ClusterLostError`."""
    import ray  # only where a cluster is asked for: importing Ray costs seconds

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, include_dashboard=False, log_to_driver=True,
                 configure_logging=False)
    head = ray.get_runtime_context().gcs_address
    task = ray.remote(num_cpus=1, num_gpus=gpus)(located_task)
    index = {task.remote(fn, item): i for i, item in enumerate(items)}
    pending = list(index)
    lost_since: float | None = None

    def lost(unfinished: int) -> ClusterLostError:
        return ClusterLostError(
            f"the Ray cluster's head at {head} stopped answering (node lost) with {unfinished} of {len(index)} "
            f"tasks unfinished; what finished is kept: rerun the stage on a running cluster to resume")

    while pending:
        try:
            done, still = ray.wait(pending, num_returns=1, timeout=1.0)
            node, result = ray.get(done[0]) if done else (None, None)
        except ray.exceptions.RayError as exc:  # the head died between the wait and the fetch of a result
            if isinstance(exc, ray.exceptions.RayTaskError) or _reachable(head):
                raise  # the task's own error, or one with the cluster up: not a lost cluster
            raise lost(len(pending)) from exc
        pending = still
        if not done:
            if _reachable(head):
                lost_since = None
            else:
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since >= HEAD_LOST_AFTER_S:
                    raise lost(len(pending))
            continue
        if where is not None:
            where[index[done[0]]] = node
        yield index[done[0]], result


def mapper(name: str) -> Mapper:
    return {"local": local_map, "processes": process_map, "ray": ray_map}[name]

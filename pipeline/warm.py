"""A warm host for stage processes: one process imports the heavy libraries once (torch and its compiler,
numpy, scipy, pandas, matplotlib, plotly) and forks a fresh child for each stage command that asks, so a
build of about a hundred stage processes pays those imports (≈ 2.5 s each on a 2-core machine) once.

    python -m pipeline.warm serve SOCKET     # `make repro` starts one beside `dvc repro` and stops it after

A stage command (``python -m stages.<kind> …``) hands itself over when ``TRAINSCAPE_WARM_HOST`` names a
host's socket and the host answers; otherwise it runs in its own process as before. The host changes where a
stage runs, never what it computes: the child runs the stage's module with the stage's arguments, working
directory, environment and standard streams (passed over the socket), and imports every project module afresh
from that directory; the host itself holds no project module but this one, and declines a command whose
interpreter or import-time environment (threads, backends, ``PYTHON*``) differs from its own. The command's
exit status is the child's; a signal the command receives is passed on to the child.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import importlib.util
import io
import json
import os
import random
import resource
import runpy
import select
import signal
import socket
import struct
import sys
import traceback
from dataclasses import dataclass
from typing import Any, NoReturn

ENV = "TRAINSCAPE_WARM_HOST"
PRELOAD = ("numpy", "scipy.linalg", "scipy.sparse", "pandas", "torch", "torch._dynamo", "matplotlib",
           "matplotlib.pyplot", "matplotlib.backends.backend_agg", "plotly.graph_objects", "kaleido", "narwhals",
           "PIL.Image", "PIL.PngImagePlugin", "yaml", "tqdm", "tabulate")
# environment variables read when those libraries are imported or the interpreter starts: a command whose
# values differ runs itself (PYTHONPATH is honoured instead: see _path)
IMPORT_TIME = ("OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOTO", "NUMEXPR", "VECLIB", "CUDA_", "NVIDIA_", "PYTORCH_",
               "TORCH", "MPL", "LD_")
STARTUP = frozenset({"PYTHONHOME", "PYTHONHASHSEED", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH",
                     "PYTHONOPTIMIZE", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONWARNINGS",
                     "PYTHONDEVMODE", "PYTHONUTF8", "PYTHONIOENCODING", "PYTHONINTMAXSTRDIGITS", "PYTHONFAULTHANDLER",
                     "PYTHONTRACEMALLOC", "PYTHONMALLOC", "PYTHONPLATLIBDIR", "PYTHONUNBUFFERED", "PYTHONVERBOSE",
                     "PYTHONDEBUG", "PYTHONINSPECT", "PYTHONCOERCECLOCALE", "PYTHONLEGACYWINDOWSSTDIO"})
PROJECT = ("pipeline", "stages")
MAX_MESSAGE = 1 << 22
_HEADER = struct.Struct("!I")


def import_env(env: dict[str, str]) -> dict[str, str]:
    """The part of an environment the interpreter reads when it starts and the preloaded libraries when
    imported."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME) or k in STARTUP}


def context() -> dict[str, Any]:
    """What a process runs within besides its environment: user, namespaces (network, mounts, …), control
    group, resource limits, the cores it may use and its priority. A command whose context is not the host's
    runs itself (a stage started in another network namespace, under a memory limit or pinned to one core
    must run there)."""
    ns = {}
    for name in ("mnt", "net", "pid", "user", "ipc", "uts", "cgroup"):
        with contextlib.suppress(OSError):
            ns[name] = os.readlink(f"/proc/self/ns/{name}")
    try:
        with open("/proc/self/cgroup") as fh:
            cgroup = fh.read()
    except OSError:
        cgroup = ""
    limits = {name: list(resource.getrlimit(getattr(resource, name))) for name in sorted(dir(resource))
              if name.startswith("RLIMIT_")}
    return {"uid": os.getuid(), "gid": os.getgid(), "ns": ns, "cgroup": cgroup, "limits": limits,
            "umask": _umask(), "cpus": sorted(os.sched_getaffinity(0)), "nice": os.getpriority(os.PRIO_PROCESS, 0)}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ----------------------------------------------------------------------------- the command's side


def hand_over() -> None:
    """Run this stage command (``python -m stages.<kind> …``) in the warm host named by ``TRAINSCAPE_WARM_HOST``
    and exit with its status; return, to run here, where none is named, none answers, or it declines."""
    path = os.environ.get(ENV)
    argv = list(getattr(sys, "orig_argv", []))
    if not path or "-m" not in argv[:-1] or not argv[argv.index("-m") + 1].startswith("stages."):
        return
    request = {"argv": argv, "module": argv[argv.index("-m") + 1], "args": argv[argv.index("-m") + 2:],
               "cwd": os.getcwd(), "env": dict(os.environ), "executable": sys.executable, "context": context()}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        data = json.dumps(request).encode()
        socket.send_fds(sock, [_HEADER.pack(len(data)) + data], [0, 1, 2])
        reply = sock.makefile("rb")
        first = json.loads(reply.readline() or b"{}")
    except (OSError, ValueError):
        sock.close()
        return
    if "pid" not in first:  # declined (or a host that stopped): run here
        sock.close()
        return
    pid = first["pid"]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, _frame: _kill(pid, s))
    last = reply.readline()
    status = json.loads(last)["status"] if last else None
    if status is None:
        sys.stderr.write(f"error: the warm host at {path} lost the stage process {pid}\n")
        os._exit(1)
    if status < 0:  # the stage process was killed by signal -status: so is the command
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status if status >= 0 else 128 - status)


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it has just ended
        os.kill(pid, sig)


# ----------------------------------------------------------------------------- the host's side


@dataclass
class Request:
    """One stage command, as the forked child runs it."""

    module: str
    args: list[str]
    argv: list[str]
    cwd: str
    env: dict[str, str]
    fds: list[int]


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    if len(msg) < _HEADER.size:
        raise ValueError("short request")
    (size,) = _HEADER.unpack_from(msg)
    if size > MAX_MESSAGE:
        raise ValueError(f"request of {size} bytes")
    data = msg[_HEADER.size:]
    while len(data) < size:
        more = conn.recv(size - len(data))
        if not more:
            raise ValueError("truncated request")
        data += more
    return json.loads(data), fds


def _declines(request: dict[str, Any], ours: dict[str, str], loaded: dict[str, str]) -> str | None:
    """Why the host cannot run ``request`` as the command's own process would, or None. ``ours``: the host's
    import-time environment as started; ``loaded``: what the preloaded libraries set in it (a command that
    imported them itself, or whose parent did, has the same values)."""
    if request.get("executable") != sys.executable:
        return f"interpreter {request.get('executable')} is not the host's {sys.executable}"
    theirs_ctx, ours_ctx = request.get("context", {}), context()
    if theirs_ctx != ours_ctx:
        return "process context differs: " + ", ".join(k for k in ours_ctx if theirs_ctx.get(k) != ours_ctx[k])
    env = request.get("env", {})
    theirs = {k: v for k, v in import_env(env).items() if loaded.get(k) != v}
    if theirs != ours:
        return f"import-time environment differs: {sorted(set(theirs.items()) ^ set(ours.items()))}"
    if not str(request.get("module", "")).startswith("stages."):
        return f"{request.get('module')!r} is not a stage module"
    shadowing = [f"{entry}/{name}" for entry in _pythonpath(env) for name in _preloaded()
                 if os.path.exists(os.path.join(entry, name)) or os.path.exists(os.path.join(entry, name + ".py"))]
    if shadowing:
        return f"PYTHONPATH holds libraries the host has loaded: {shadowing}"
    return None


def _pythonpath(env: dict[str, str]) -> list[str]:
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _preloaded() -> set[str]:
    """The top-level packages the preloading brought in (not the standard library's)."""
    stdlib = set(sys.stdlib_module_names)
    return {m.split(".")[0] for m in sys.modules if m.split(".")[0] not in stdlib and not m.startswith("_")} - set(
        PROJECT)


def _send(conn: socket.socket, obj: dict[str, Any]) -> None:
    conn.sendall(json.dumps(obj).encode() + b"\n")


def serve(path: str) -> Request:
    """Preload, then accept stage commands until stopped (SIGTERM, SIGINT). Returns only in a forked stage
    process, with the command it is to run."""
    before = dict(os.environ)
    started = import_env(before)  # as started: the libraries may set some while loading (torch's compiler)
    missing = []
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:  # a machine without it (the GPU machines have no plotly): its stages import it
            missing.append(name)
    loaded = {k: v for k, v in os.environ.items() if k not in before}  # what they set, as in any process
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    gc.freeze()  # the loaded modules' objects: no collection in a child writes to (and so copies) their pages
    listener.bind(path)  # bound after the imports: a command that comes earlier finds no host and runs itself
    listener.listen(64)

    def stop(_sig: int, _frame: Any) -> None:
        listener.close()
        if os.path.exists(path):
            os.unlink(path)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the handlers below are reaped by the kernel
    print(f"warm host {os.getpid()} on {path}: {', '.join(n for n in PRELOAD if n not in missing)} loaded"
          + (f"; not installed: {', '.join(missing)}" if missing else ""), flush=True)
    while True:
        conn, _ = listener.accept()
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork():  # the host: on to the next command
            conn.close()
            continue
        # the handler of one command: checks it, forks the stage process, waits for it and reports its status
        listener.close()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError) as exc:
            print(f"warm host: bad request: {exc}", file=sys.stderr, flush=True)
            os._exit(1)
        why = _declines(request, started, import_env(loaded))
        if why:
            print(f"warm host: declined {request.get('argv')}: {why}", file=sys.stderr, flush=True)
            _send(conn, {"declined": why})
            os._exit(0)
        pid = os.fork()
        if pid == 0:
            conn.close()
            return Request(request["module"], list(request["args"]), list(request["argv"]), request["cwd"],
                           {**loaded, **request["env"]}, fds)
        for fd in fds:
            os.close(fd)
        _send(conn, {"pid": pid})
        code = _wait(pid, conn)
        print(f"warm host: ran {' '.join(request['argv'][1:])} in process {pid}: status {code}", flush=True)
        with contextlib.suppress(OSError):  # the command is gone (killed): nobody to tell
            _send(conn, {"status": code})
        os._exit(0)


def _wait(pid: int, conn: socket.socket) -> int:
    """The stage process's exit status. Should the command end first (killed outright, so that it could pass
    nothing on), the stage process is killed the same way, as it would have died with it."""
    done = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([done, conn], [], [])
        if done in ready:
            break
        with contextlib.suppress(OSError):
            if conn.recv(1):  # the command sends nothing after its request: only its end wakes this
                continue
        os.kill(pid, signal.SIGKILL)
        break
    os.close(done)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _stream(fd: int, mode: str) -> io.TextIOWrapper:
    """A standard stream on ``fd`` as the interpreter would open it for the command (line-buffered on a
    terminal, written through where PYTHONUNBUFFERED is set)."""
    raw = open(fd, mode + "b", buffering=0 if mode == "w" else -1, closefd=False)  # noqa: SIM115
    tty = os.isatty(fd)
    if mode == "r":
        return io.TextIOWrapper(raw, encoding=sys.stdin.encoding, errors=sys.stdin.errors)
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    buffered = raw if unbuffered else io.BufferedWriter(raw)
    return io.TextIOWrapper(buffered, encoding="utf-8", errors="backslashreplace" if fd == 2 else "strict",
                            line_buffering=tty or fd == 2, write_through=unbuffered)


def become(req: Request) -> NoReturn:
    """Turn the forked child into the command's own process, run its module as ``__main__`` and end the
    process with its exit status."""
    for target, fd in enumerate(req.fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(req.cwd)
    sys.path[:] = _path(req.cwd, req.env)
    os.environ.clear()
    os.environ.update({k: v for k, v in req.env.items() if k != ENV})  # the child never hands over again
    sys.stdin, sys.stdout, sys.stderr = _stream(0, "r"), _stream(1, "w"), _stream(2, "w")
    for name in [m for m in sys.modules if m.split(".")[0] in PROJECT]:
        del sys.modules[name]  # the project is imported afresh, from the command's working directory
    importlib.invalidate_caches()
    sys.orig_argv = req.argv
    spec = importlib.util.find_spec(req.module)  # argv[0] is the module's file, as under ``python -m``
    sys.argv = [spec.origin if spec and spec.origin else req.module, *req.args]
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises KeyboardInterrupt, as in any process
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    try:
        runpy.run_module(req.module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        _leave(-signal.SIGINT)
    except BaseException:  # as the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    _leave(code)


def _path(cwd: str, env: dict[str, str]) -> list[str]:
    """``sys.path`` as the interpreter builds it for ``python -m`` in ``cwd`` under ``env``: the working
    directory, then PYTHONPATH's entries, then the rest (standard library, site-packages) as the host has it."""
    rest = sys.path[1 + len(_pythonpath(dict(os.environ))):]  # the host's own environment: call this first
    path = [cwd, *(os.path.abspath(os.path.join(cwd, p)) for p in _pythonpath(env)), *rest]
    return list(dict.fromkeys(path))  # as site does: each entry once, the first kept


def _exit_code(code: object) -> int:
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def _leave(code: int) -> NoReturn:
    """End the child as the interpreter ends a process (exit handlers, then the streams flushed) but without
    tearing its modules down: in a forked child that touches every object the host loaded, copying its pages
    (0.76 s with torch loaded, against 0.01 s for the rest of a fork)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if code < 0:  # killed by a signal, as it would have been in its own process
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "serve":
        print("usage: python -m pipeline.warm serve SOCKET", file=sys.stderr)
        return 2
    become(serve(os.path.abspath(argv[1])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

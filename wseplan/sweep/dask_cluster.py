"""Dask clusters for the sweep engine (:mod:`wseplan.sweep.engine`): the ``distributed`` import, ``--scheduler``
addresses (parsed, then probed within a timeout for a Dask handshake before a client connects), a local cluster
of single-threaded worker processes bound to 127.0.0.1, quiet logs, and the one-line error of every cluster
failure. ``dask`` and ``distributed`` are optional: they are imported where a cluster is made."""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import socket
import struct
import sys
import time
import warnings

from ..errors import InputError


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


UNSUPPORTED_PROTOCOLS = ("tls", "ucx", "ucxx", "ws", "wss", "inproc", "inplace")


def _distributed():
    try:
        import distributed
    except ImportError:
        raise InputError("--engine dask: dask[distributed] is not installed; pip install 'wseplan[dask]'") from None
    return distributed


def parse_scheduler_address(address: str) -> tuple[str, str, int]:
    """``(tcp://HOST:PORT, HOST, PORT)`` of a ``--scheduler`` value (``HOST:PORT`` means tcp; port 8786 if none)."""
    text = str(address).strip()
    proto, sep, rest = text.partition("://")
    if not sep:
        proto, rest = "tcp", text
    proto = proto.lower()
    if proto in UNSUPPORTED_PROTOCOLS:
        raise InputError(f"--scheduler: {proto}:// is not supported by the CLI (it takes no certificates or UCX "
                         "setup); use tcp://HOST:PORT, or pass a connected distributed.Client to run_sweep")
    if proto != "tcp":
        raise InputError(f"--scheduler: unknown protocol {proto}:// in {text!r}; use tcp://HOST:PORT")
    host, port = rest, "8786"
    if rest.startswith("["):
        end = rest.find("]")
        host, tail = rest[1:end] if end > 0 else "", rest[end + 1:] if end > 0 else ""
        if tail.startswith(":"):
            port = tail[1:]
        elif tail:
            host = ""
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    elif ":" in rest:
        host = ""
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c in host for c in "/?#@ "):
        raise InputError(f"--scheduler: {text!r} is not a scheduler address; use tcp://HOST:PORT (e.g. tcp://10.0.0.5:8786)")
    shown = f"[{host}]" if ":" in host else host
    return f"tcp://{shown}:{int(port)}", host, int(port)


def _recv_exactly(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        got = sock.recv(n - len(buf))
        if not got:
            raise EOFError
        buf += got
    return bytes(buf)


def probe_scheduler(address: str, timeout_s: float = 10.0) -> str:
    """Check within ``timeout_s`` that ``address`` is a Dask server: connect, then read the handshake a Dask
    server sends first (an 8-byte frame length and a small msgpack message naming its pickle protocol).
    Returns the normalised address; raises a one-line InputError otherwise."""
    addr, host, port = parse_scheduler_address(address)
    deadline = time.monotonic() + timeout_s
    not_dask = InputError(f"--scheduler: {addr} answered, but not as a Dask scheduler; check the address (a "
                          "scheduler listens on port 8786 by default)")
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except socket.timeout:
        raise InputError(f"--scheduler: no answer from {addr} within {timeout_s:g} s; check the address and that "
                         "`dask scheduler` runs there") from None
    except OSError as exc:
        raise InputError(f"--scheduler: cannot connect to {addr} ({exc.strerror or exc.__class__.__name__}); check "
                         "the address and that `dask scheduler` runs there") from None
    try:
        sock.settimeout(max(deadline - time.monotonic(), 0.1))
        (n,) = struct.unpack("<Q", _recv_exactly(sock, 8))
        if not 0 < n <= 1 << 16:
            raise not_dask
        if b"pickle-protocol" not in _recv_exactly(sock, n):
            raise not_dask
    except socket.timeout:
        raise InputError(f"--scheduler: {addr} accepted the connection but sent no Dask handshake within "
                         f"{timeout_s:g} s; it is not a Dask scheduler (check the address and port)") from None
    except (OSError, EOFError):
        raise not_dask from None
    finally:
        sock.close()
    return addr


def connect(scheduler: str, timeout_s: float = 10.0):
    """A distributed Client of the scheduler at ``scheduler``, after :func:`probe_scheduler`."""
    dist = _distributed()
    addr = probe_scheduler(scheduler, timeout_s)
    try:
        client = dist.Client(addr, timeout=timeout_s, set_as_default=False)
    except Exception as exc:  # noqa: BLE001 - any failure of the handshake is the same one line
        raise InputError(f"--scheduler: cannot use the Dask scheduler at {addr} ({exc.__class__.__name__}: "
                         f"{' '.join(str(exc).split())[:200]})") from None
    return client


def local_cluster(workers: int | None = None, dashboard: str | None = None, *, malloc_trim_threshold: str | None = None,
                  start_method: str | None = None):
    """A LocalCluster of ``workers`` single-threaded worker processes bound to 127.0.0.1, no dashboard unless
    ``dashboard`` (HOST:PORT or PORT) is given, ``MALLOC_TRIM_THRESHOLD_`` cleared for the workers (or set to
    ``malloc_trim_threshold``). ``start_method``: how the worker processes start (``fork``, ``spawn``,
    ``forkserver``); default fork on Linux without a threshold to set, else Dask's own."""
    import dask

    dist = _distributed()
    dash = None
    if dashboard:
        text = str(dashboard).strip()
        dash = f"127.0.0.1:{text}" if text.isdigit() else text
        try:
            import bokeh  # noqa: F401
        except ImportError:
            raise InputError("--dashboard: the Dask dashboard needs bokeh; pip install 'bokeh>=3.1'") from None
    cfg = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": malloc_trim_threshold}
    if start_method is not None:
        cfg["distributed.worker.multiprocessing-method"] = start_method
    elif malloc_trim_threshold is None and sys.platform.startswith("linux"):
        # the workers are forks of this process (Linux's multiprocessing default before Python 3.14): they start with
        # numpy, the catalog and wseplan already imported instead of importing them again (spawn: ~1 s and ~1 CPU-s
        # per worker, as much as a 10^6-configuration sweep's evaluation), and with this process's malloc settings
        # (no trim threshold, as the engine wants). A threshold to set needs a fresh process: spawn
        cfg["distributed.worker.multiprocessing-method"] = "fork"
    scheduler_kwargs = {}
    if dash is None:  # Dask's scheduler serves HTTP pages even without a dashboard: keep only /health, any free port
        cfg.update({"distributed.scheduler.http.routes": ["distributed.http.health"],
                    "distributed.worker.http.routes": ["distributed.http.health"]})
        scheduler_kwargs = {"dashboard": False, "dashboard_address": "127.0.0.1:0"}
    with dask.config.set(cfg):
        return dist.LocalCluster(n_workers=workers or usable_cores(), threads_per_worker=1, processes=True,
                                 host="127.0.0.1", scheduler_port=0, dashboard_address=dash,
                                 worker_dashboard_address=None, silence_logs=logging.CRITICAL,
                                 scheduler_kwargs=scheduler_kwargs)


@contextlib.contextmanager
def _quiet():
    """Keep Dask's own log lines and warnings off the terminal (errors reach the user as one line)."""
    if os.environ.get("WSEPLAN_DEBUG") == "1":
        yield
        return
    names = ("distributed", "tornado", "asyncio")
    saved = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for n, lv in saved.items():
            logging.getLogger(n).setLevel(lv)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _dask_error(dist, exc: BaseException, where: str) -> InputError:
    killed = getattr(dist, "KilledWorker", None)
    if killed is not None and isinstance(exc, killed):
        return InputError("--engine dask: a task was lost together with the workers that ran it (most likely out of "
                          "memory); use a smaller --chunk or workers with more memory")
    if isinstance(exc, (asyncio.CancelledError, concurrent.futures.CancelledError, OSError, TimeoutError)) \
            or exc.__class__.__name__ in ("CommClosedError", "FutureCancelledError"):
        return InputError(f"--engine dask: lost the connection to the scheduler at {where} "
                          f"({exc.__class__.__name__}); check that it is running and run again")
    return InputError(f"--engine dask: a task failed on a worker: {exc.__class__.__name__}: {_one_line(exc)}")


def _n_workers(client) -> int | None:
    try:
        try:
            info = client.scheduler_info(n_workers=0)
        except TypeError:
            info = client.scheduler_info()
        n = info.get("n_workers")
        return len(info.get("workers", {})) if n is None else int(n)
    except Exception:  # noqa: BLE001 - unknown: let the connection check decide
        return None

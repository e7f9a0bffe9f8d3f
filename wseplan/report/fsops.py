"""File-system primitives of :mod:`wseplan.report.atomic`: every call through one hook, the atomic exchange, the
per-destination lock, crash recovery from the swap journal, and one-line reasons for ``OSError``.

Every file-system call the writers make goes through :func:`_call`, which runs :data:`_HOOK` (a test hook, None in
normal use) with the operation's name first, so a test can fail or kill the process at each call in turn.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import json
import os
import platform
import re
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import InputError

LOCK_SUFFIX = ".wseplan-lock"
JOURNAL_SUFFIX = ".wseplan-journal"
LOCK_TIMEOUT_S = 10.0
"""How long a second writer of the same destination waits for the first [s] before it gives up."""

# test hook: called with the operation's name before every file-system call of the writers
_HOOK: Callable[[str], None] | None = None
# set False to force the documented two-rename fallback (tests; platforms without renameat2)
USE_EXCHANGE = True


def _call(name: str, fn: Callable, *args, **kwargs):
    if _HOOK is not None:
        _HOOK(name)
    return fn(*args, **kwargs)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100
_SYS_RENAMEAT2 = {"x86_64": 316, "amd64": 316, "aarch64": 276, "arm64": 276, "riscv64": 276, "ppc64le": 357,
                  "s390x": 347, "i386": 353, "i686": 353}


def _load_renameat2() -> Callable[[bytes, bytes, int], int] | None:
    """``renameat2`` from libc (glibc >= 2.28), else through ``syscall(2)``; None off Linux."""
    if not platform.system() == "Linux":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        fn.restype = ctypes.c_int
        return lambda a, b, flags: fn(_AT_FDCWD, a, _AT_FDCWD, b, flags)
    nr = _SYS_RENAMEAT2.get(platform.machine().lower())
    sc = getattr(libc, "syscall", None)
    if nr is None or sc is None:
        return None
    sc.restype = ctypes.c_long
    return lambda a, b, flags: sc(ctypes.c_long(nr), ctypes.c_int(_AT_FDCWD), ctypes.c_char_p(a),
                                  ctypes.c_int(_AT_FDCWD), ctypes.c_char_p(b), ctypes.c_uint(flags))


_RENAMEAT2 = _load_renameat2()


def _exchange(a: Path, b: Path) -> None:
    """Swap two paths atomically (``renameat2(RENAME_EXCHANGE)``); OSError(ENOSYS) where unavailable."""
    if _RENAMEAT2 is None or not USE_EXCHANGE:
        raise OSError(errno.ENOSYS, "renameat2 is not available", str(a))
    if _RENAMEAT2(os.fsencode(a), os.fsencode(b), _RENAME_EXCHANGE) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), str(a), None, str(b))


def _fsync_dir_after(path: Path) -> None:
    """fsync a folder after the swap already happened: best effort (the new output is in place either way)."""
    try:
        _fsync_dir(path)
    except OSError:
        pass


def _fsync_dir(path: Path) -> None:
    fd = _call("open_dir", os.open, path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        _call("fsync_dir", os.fsync, fd)
    finally:
        _call("close_dir", os.close, fd)


def _write_new_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Create ``path`` (it must not exist), write ``data`` whole, fsync, close."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = _call("open", os.open, path, flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            n = _call("write", os.write, fd, view[: 1 << 20])
            view = view[n:]
        _call("fchmod", os.fchmod, fd, mode)
        _call("fsync", os.fsync, fd)
    finally:
        _call("close", os.close, fd)


def _remove_tree(path: Path) -> None:
    """Best-effort removal of a temporary file or folder of ours (errors left for the next run)."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    try:
        if stat.S_ISDIR(st.st_mode):
            _call("rmtree", shutil.rmtree, path)
        else:
            _call("unlink", os.unlink, path)
    except OSError:
        pass


_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file size limit reached (ulimit -f)",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ELOOP: "symlink loop",
    errno.ENAMETOOLONG: "name too long",
    errno.ENOTDIR: "a path component is not a folder",
    errno.EIO: "input/output error",
}


def _reason(exc: OSError) -> str:
    return _REASONS.get(exc.errno, exc.strerror or exc.__class__.__name__)


# --------------------------------------------------------------------------------------------- destinations
def _real_destination(out: Path, *, what: str) -> Path:
    """The absolute path to replace: ``out`` itself, or for a symlink the path it points to (resolved)."""
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(f"--out: cannot inspect {out} ({_reason(exc)}); choose another path") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            real = out.resolve(strict=True)
        except FileNotFoundError:
            raise InputError(f"--out: {out} is a symlink to {os.readlink(out)!r}, which does not exist; "
                             f"create the {what} or remove the link") from None
        except (OSError, RuntimeError):
            raise InputError(f"--out: {out} is a symlink loop; remove the link or choose another path") from None
        return real
    absolute = Path(os.path.abspath(out))
    try:
        parent = absolute.parent.resolve()
    except (OSError, RuntimeError):
        raise InputError(f"--out: the folder of {out} is a symlink loop; choose another path") from None
    return parent / absolute.name


def _ensure_parent(parent: Path, out: Path) -> None:
    try:
        st = os.stat(parent)
    except FileNotFoundError:
        try:
            _call("makedirs", os.makedirs, parent, exist_ok=True)
        except OSError as exc:
            raise InputError(f"--out: cannot create the folder {parent} ({_reason(exc)}); choose another path") \
                from None
        return
    except OSError as exc:
        raise InputError(f"--out: cannot use the folder of {out} ({_reason(exc)}); choose another path") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"--out: {parent} is not a folder; choose another path")


# --------------------------------------------------------------------------------------------- lock
@contextlib.contextmanager
def _locked(parent: Path, name: str, *, timeout_s: float, out: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``parent/.<name>.wseplan-lock``; waits at most ``timeout_s``."""
    import fcntl

    path = parent / f".{name}{LOCK_SUFFIX}"
    deadline = time.monotonic() + max(0.0, timeout_s)
    delay = 0.01
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        try:
            fd = _call("lock_open", os.open, path, flags, 0o644)
        except OSError as exc:
            raise InputError(f"--out: cannot write beside {out} ({_reason(exc)}: {path.name}); "
                             "the previous output is unchanged") from None
        try:
            _call("flock", fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() >= deadline:
                raise InputError(f"--out: another wseplan run is writing {out} (lock {path.name} held for "
                                 f"{timeout_s:g} s); wait for it to finish or choose another path") from None
            time.sleep(delay)
            delay = min(0.1, delay * 2)
            continue
        except OSError as exc:
            os.close(fd)
            raise InputError(f"--out: cannot lock {path} ({_reason(exc)}); the previous output is unchanged") \
                from None
        try:  # the holder we waited for may have removed the file: then lock the new one instead
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except OSError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        try:
            _call("lock_unlink", os.unlink, path)
        except OSError:
            pass
        os.close(fd)


def _tmp_name(name: str, kind: str) -> str:
    return f".{name}.{kind}-{secrets.token_hex(4)}"


def _stale_pattern(name: str) -> re.Pattern:
    return re.compile(rf"^\.{re.escape(name)}\.(?:tmp|old)-[0-9a-f]{{8}}$")


# --------------------------------------------------------------------------------------------- recovery
def _journal_path(parent: Path, name: str) -> Path:
    return parent / f".{name}{JOURNAL_SUFFIX}"


def _recover(parent: Path, name: str) -> None:
    """Finish or undo a two-rename swap that a killed run left half done, then delete stale temporaries.

    Called with the lock held. Journal states: (a) written, no rename yet: the destination is the old report,
    the new folder is discarded; (b) old moved aside: the new folder is moved in (roll forward); (c) both
    renames done: the old folder is deleted.
    """
    target = parent / name
    journal = _journal_path(parent, name)
    pattern = _stale_pattern(name)
    if os.path.lexists(journal):
        try:
            with open(journal, encoding="utf-8") as fh:
                doc = json.load(fh)
            new, old = parent / doc["new"], parent / doc["old"]
            if not (pattern.match(doc["new"]) and pattern.match(doc["old"])):
                raise ValueError("foreign names")
        except (OSError, ValueError, KeyError, TypeError):
            raise InputError(f"--out: the journal {journal} of an interrupted write cannot be read; the last "
                             f"complete version of {target} is in a .{name}.old-* or .{name}.tmp-* folder beside "
                             "it: move it back by hand, then delete the journal") from None
        if not os.path.lexists(target):
            src = new if os.path.isdir(new) else old if os.path.isdir(old) else None
            if src is not None:
                try:
                    _call("recover_rename", os.rename, src, target)
                    _fsync_dir(parent)
                except OSError as exc:
                    raise InputError(f"--out: cannot repair the interrupted write of {target} ({_reason(exc)}); "
                                     f"its last complete version is {src}") from None
        if os.path.lexists(target):
            try:
                _call("journal_unlink", os.unlink, journal)
            except OSError:
                pass
    try:
        entries = os.listdir(parent)
    except OSError:
        return
    for entry in entries:
        if pattern.match(entry):
            _remove_tree(parent / entry)


# --------------------------------------------------------------------------------------------- swap
def _swap(tmp: Path, target: Path, out: Path) -> bool:
    """Put the complete folder ``tmp`` at ``target`` in one atomic step (or the journalled two-step)."""
    parent = target.parent
    if not os.path.lexists(target):
        _call("rename", os.rename, tmp, target)
        _fsync_dir_after(parent)
        return True
    if _RENAMEAT2 is not None and USE_EXCHANGE:
        try:
            _call("exchange", _exchange, tmp, target)
        except OSError as exc:  # this file system cannot exchange: fall back to the journalled two-step
            if exc.errno not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
                raise
        else:
            _fsync_dir_after(parent)
            _remove_tree(tmp)  # now the old report
            return True
    # fallback: journal, old aside, new in; a kill in between is repaired by _recover on the next run
    old = parent / _tmp_name(target.name, "old")
    journal = _journal_path(parent, target.name)
    jtmp = parent / _tmp_name(target.name, "tmp")
    _write_new_file(jtmp, (json.dumps({"new": tmp.name, "old": old.name}) + "\n").encode("utf-8"))
    _call("journal_rename", os.rename, jtmp, journal)
    _fsync_dir(parent)
    try:
        _call("rename_aside", os.rename, target, old)
    except BaseException:
        _discard_journal(journal)
        raise
    try:
        _call("rename_in", os.rename, tmp, target)
    except BaseException:
        try:
            _call("rollback", os.rename, old, target)
        except OSError:
            raise InputError(f"--out: the write of {out} was interrupted and could not be undone; the previous "
                             f"report is in {old} and the next run puts it back") from None
        _discard_journal(journal)
        raise
    _fsync_dir_after(parent)
    _discard_journal(journal)
    _remove_tree(old)
    return True


def _discard_journal(journal: Path) -> None:
    try:
        _call("journal_unlink", os.unlink, journal)
    except OSError:
        pass


class _HookedFile:
    """A binary file whose ``write`` goes through the test hook (so failures can be injected per chunk)."""

    def __init__(self, fh):
        self._fh = fh

    def write(self, data) -> int:
        return _call("write", self._fh.write, data)

    def __getattr__(self, item):
        return getattr(self._fh, item)

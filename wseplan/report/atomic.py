"""Output writing that cannot lose data: report folders and single files, swapped in atomically.

Report folders (:func:`write_files_atomically`)
    The files go into a fresh temporary folder beside the destination (``.<name>.tmp-XXXXXXXX``), each one
    fsynced, together with a marker file ``.wseplan-report`` that lists them. The new folder then replaces the
    old one in ONE atomic step: on Linux ``renameat2(RENAME_EXCHANGE)`` (called through ``ctypes``) swaps the two
    folders, so at every instant the destination holds either the whole old report or the whole new one. Where
    the exchange is not available (another OS, or a file system that refuses it) the documented fallback is two
    renames (old folder aside to ``.<name>.old-XXXXXXXX``, new folder into place) preceded by a journal file
    ``.<name>.wseplan-journal``; a run killed between the two renames is repaired by the next run, which rolls
    the swap forward from the journal before it does anything else.

Ownership
    An existing destination is replaced only when it is empty or holds the marker (wseplan made it); any other
    folder is refused unless ``force=True``. Files in the destination that wseplan did not write (not listed in
    the marker: a user's ``thesis.md`` dropped into a report folder, or everything in a foreign folder written
    with ``force``) are carried into the new folder (hard links, or copies where linking is refused), so they are
    never deleted. Without ``force`` a report file that would overwrite such a user file is refused.

Concurrency and leftovers
    Runs that write the same destination take an exclusive ``flock`` on ``.<name>.wseplan-lock`` beside it; a
    second run waits up to ``lock_timeout_s`` and then fails with one line. The lock file is removed on release
    (a waiter that wakes on a removed lock file retries). The lock holder first repairs an interrupted swap (from
    the journal) and then deletes stale ``.<name>.tmp-*`` / ``.<name>.old-*`` entries: they can only belong to
    runs that died, since any live writer of the same destination would hold the lock.

Symlinks
    A destination that is a symlink is written through: the folder (or file) it points to is replaced and the
    link stays a link. A dangling link or a link loop is refused with one line.

Errors
    Every ``OSError`` (read-only folder, full disk, ``ulimit -f``, permission, symlink loop) becomes one
    :class:`~wseplan.errors.InputError` line that says whether the previous output is unchanged; temporaries are
    removed on the way out (or by the next run, if the process was killed).

Single files (:func:`write_file_atomically`, :func:`open_atomic`)
    A temporary file in the same folder, fsynced, then ``rename`` over the destination (atomic on POSIX), under
    the same lock and with the same stale-temporary cleanup; :func:`open_atomic` yields a binary file object for
    writers that stream their output in chunks.

Every file-system call the writers make goes through :func:`wseplan.report.fsops._call` (which also holds the lock,
the exchange, the journal recovery and the swap), so a test can fail (or kill the process) at each one in turn
(``tests/test_hardening_atomic.py``).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from ..errors import InputError
from .fsops import (JOURNAL_SUFFIX, LOCK_SUFFIX, LOCK_TIMEOUT_S, _call, _ensure_parent, _fsync_dir_after,
                    _HookedFile, _locked, _real_destination, _reason, _recover, _remove_tree, _swap, _tmp_name,
                    _write_new_file, _fsync_dir)

__all__ = ["MARKER", "LOCK_SUFFIX", "JOURNAL_SUFFIX", "LOCK_TIMEOUT_S", "safe_filename", "check_out_dir",
           "write_files_atomically", "read_marker", "repair", "open_atomic", "write_file_atomically"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RESERVED = {"", ".", ".."}

MARKER = ".wseplan-report"
"""File inside every report folder wseplan writes: JSON naming the tool and the files it wrote."""
MAX_CARRIED_ENTRIES = 10_000
"""Most files and folders of a user's that a report folder carries over (more is refused, not copied)."""


def safe_filename(name: str, *, default: str = "item") -> str:
    """A file-name component made only of ``[A-Za-z0-9._-]``, with no path separators and no leading dot.

    ``"../../etc/passwd"`` becomes ``"etc_passwd"``; an empty or all-unsafe name becomes ``default``.
    """
    text = _UNSAFE.sub("_", str(name)).strip("._-")
    text = re.sub(r"_+", "_", text)[:100].strip("._-")
    return default if text in _RESERVED else text


# --------------------------------------------------------------------------------------------- paths
def _inside(root: Path, rel: str) -> Path:
    """``root / rel`` for a plain relative name; refuse absolute paths and anything that leaves ``root``."""
    if not isinstance(rel, str) or not rel or os.path.isabs(rel) or "\\" in rel or "\x00" in rel or \
            any(p in ("..", ".", "") for p in rel.split("/")):
        raise InputError(f"output file {rel!r}: must be a relative name inside the report folder")
    if rel == MARKER or rel.split("/")[0] == MARKER:
        raise InputError(f"output file {rel!r}: the name is reserved for wseplan's marker file")
    return root / rel


def _protected(path: Path) -> bool:
    """The current folder, its ancestors, the home folder and its ancestors, and the file-system root."""
    cwd = Path.cwd().resolve()
    home = Path.home().resolve() if os.environ.get("HOME") else None
    guarded = {cwd, *cwd.parents, Path(path.anchor)}
    if home is not None:
        guarded |= {home, *home.parents}
    return path in guarded


def repair(out: str | Path, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
    """Finish an interrupted write of ``out`` and delete its stale temporaries (every write does this first)."""
    out = Path(out)
    target = _real_destination(out, what="folder")
    if not os.path.isdir(target.parent):
        return
    with _locked(target.parent, target.name, timeout_s=lock_timeout_s, out=out):
        _recover(target.parent, target.name)


# --------------------------------------------------------------------------------------------- report folders
def read_marker(folder: str | Path) -> list[str] | None:
    """The files a report folder's marker lists, or None when the folder has no readable wseplan marker."""
    p = Path(folder) / MARKER
    try:
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20:
            return None
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("written_by") != "wseplan" or not isinstance(doc.get("files"), list):
        return None
    files = doc["files"]
    return [f for f in files if isinstance(f, str)]


def _marker_bytes(names: list[str], owner: str | None = None) -> bytes:
    doc = {"written_by": "wseplan", "format": 1,
           "note": "this folder was written by wseplan; files not listed here are kept on every rewrite",
           "files": sorted(names)}
    if owner is not None:  # the study whose report the folder holds
        doc["study"] = owner
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8")


def marker_owner(folder: str | Path) -> str | None:
    """The study a report folder's marker names (None: no marker, or one written before markers named it)."""
    try:
        doc = json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    owner = doc.get("study") if isinstance(doc, dict) else None
    return owner if isinstance(owner, str) else None


def _carry_plan(target: Path, new_names: set[str], *, force: bool, out: Path,
                owner: str | None = None) -> list[tuple[str, os.stat_result]]:
    """Entries of the existing destination to carry into the new folder (relative path, lstat), in walk order."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise InputError(f"--out: cannot inspect {out} ({_reason(exc)}); choose another path") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"--out: {out} exists and is not a folder; choose another path")
    try:
        top = sorted(os.listdir(target))
    except OSError as exc:
        raise InputError(f"--out: cannot list {out} ({_reason(exc)}); choose another path") from None
    if not top:
        return []
    listed = read_marker(target)
    ours = set(listed) | {MARKER} if listed is not None else set()
    if listed is None and not force:
        example = ", ".join(top[:3]) + (", ..." if len(top) > 3 else "")
        raise InputError(f"--out: {out} is not a folder wseplan wrote (it holds {example}); choose a new or empty "
                         "folder, or pass --force to add the report beside those files (they are kept)")
    held = marker_owner(target) if listed is not None and owner is not None else None
    if held is not None and held != owner and not force:  # audit29b L4: another study's report was replaced silently
        raise InputError(f"--out: {out} holds the report of study {held!r}, not {owner!r}; choose another folder, or "
                         "pass --force to replace it")
    carry: list[tuple[str, os.stat_result]] = []
    root_dev = st.st_dev
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        d = target / rel_dir if rel_dir else target
        try:
            names = sorted(os.listdir(d))
        except OSError as exc:
            raise InputError(f"--out: cannot list {d} ({_reason(exc)}); choose another path") from None
        for entry in names:
            rel = f"{rel_dir}/{entry}" if rel_dir else entry
            if rel in ours:
                continue
            est = os.lstat(target / rel)
            if stat.S_ISDIR(est.st_mode):
                if est.st_dev != root_dev:
                    raise InputError(f"--out: {out}/{rel} is a mount point; choose another folder")
                if any(n.startswith(rel + "/") for n in new_names) or rel in new_names:
                    if rel in new_names:
                        raise InputError(f"--out: {out}/{rel} is a folder and the report writes a file there; "
                                         "choose another folder")
                carry.append((rel, est))
                stack.append(rel)
            elif stat.S_ISREG(est.st_mode) or stat.S_ISLNK(est.st_mode):
                if rel in new_names:
                    if not force:
                        raise InputError(f"--out: {out}/{rel} was not written by wseplan and the report would "
                                         "overwrite it; move it away, or pass --force to overwrite it")
                    continue  # --force: the report's file replaces the user's
                if any(n.startswith(rel + "/") for n in new_names):
                    raise InputError(f"--out: {out}/{rel} is a file where the report needs a folder; "
                                     "choose another folder")
                carry.append((rel, est))
            else:
                raise InputError(f"--out: {out}/{rel} is a special file (FIFO, socket or device); "
                                 "choose another folder")
            if len(carry) > MAX_CARRIED_ENTRIES:
                raise InputError(f"--out: {out} holds more than {MAX_CARRIED_ENTRIES:,} entries wseplan did not "
                                 "write; choose a new or empty folder")
    return carry


def _carry(src_root: Path, dst_root: Path, plan: list[tuple[str, os.stat_result]]) -> None:
    """Recreate the planned entries under ``dst_root``: folders made, files hard-linked (copied if refused)."""
    for rel, st in plan:
        src, dst = src_root / rel, dst_root / rel
        if stat.S_ISDIR(st.st_mode):
            if not os.path.isdir(dst):  # a report file may already have made it
                _call("mkdir", os.mkdir, dst, 0o700)
        elif stat.S_ISLNK(st.st_mode):
            _call("symlink", os.symlink, os.readlink(src), dst)
        else:
            try:
                _call("link", os.link, src, dst, follow_symlinks=False)
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EACCES, errno.EXDEV, errno.EMLINK, errno.ENOTSUP,
                                     errno.EOPNOTSUPP):
                    raise
                _call("copy", shutil.copy2, src, dst, follow_symlinks=False)
    for rel, st in reversed(plan):  # folder modes last, deepest first (a read-only folder could not be filled)
        if stat.S_ISDIR(st.st_mode):
            _call("chmod", os.chmod, dst_root / rel, stat.S_IMODE(st.st_mode))


def check_out_dir(out_dir: str | Path, *, force: bool = False, owner: str | None = None) -> Path:
    """Refuse, before any work, a report destination that :func:`write_files_atomically` would refuse.

    Returns the real folder that would be replaced (a symlink resolved). Writes nothing. The write checks again
    under its lock, so a folder that changes in between is still refused then.
    """
    out = Path(out_dir)
    if not str(out_dir):
        raise InputError("--out: empty; give a report folder path")
    target = _real_destination(out, what="folder")
    if not target.name or _protected(target):
        raise InputError(f"--out: {out} is the current folder, the home folder or one of their parents; "
                         "name a report folder")
    _carry_plan(target, set(), force=force, out=out, owner=owner)
    return target


def write_files_atomically(out_dir: str | Path, files: Mapping[str, bytes | str], *, force: bool = False,
                           lock_timeout_s: float = LOCK_TIMEOUT_S, owner: str | None = None,
                           _after_each: Callable[[str], None] | None = None) -> Path:
    """Write ``files`` (relative name -> content) as the report folder ``out_dir``, atomically.

    Parameters
    ----------
    out_dir
        The report folder. It may be missing, empty, a folder wseplan wrote before (it holds the marker
        ``.wseplan-report``) or, with ``force``, any other folder; a symlink is written through.
    files
        Relative file name -> content (``str`` is written as UTF-8).
    force
        Accept a destination wseplan did not write, and let report files overwrite same-named files there.
        Files that are not part of the report are kept either way.
    lock_timeout_s
        How long to wait for another run that writes the same folder [s].
    owner
        The study the report is of, kept in the marker: a folder holding another study's report is refused without
        ``force``.
    _after_each
        Test hook, called after each report file is written into the temporary folder.

    Returns
    -------
    Path
        ``out_dir`` as given.

    Raises
    ------
    InputError
        One line for any refused destination or failed write; the previous report is then unchanged (or, after
        a kill between the fallback's two renames, restored by the next run).
    """
    out = Path(out_dir)
    if not str(out_dir):
        raise InputError("--out: empty; give a report folder path")
    raw = {rel: (data.encode("utf-8") if isinstance(data, str) else bytes(data)) for rel, data in files.items()}
    for rel in raw:
        _inside(Path("/"), rel)
    target = _real_destination(out, what="folder")
    if not target.name or _protected(target):
        raise InputError(f"--out: {out} is the current folder, the home folder or one of their parents; "
                         "name a report folder")
    parent, name = target.parent, target.name
    _ensure_parent(parent, out)
    with _locked(parent, name, timeout_s=lock_timeout_s, out=out):
        _recover(parent, name)
        plan = _carry_plan(target, set(raw), force=force, out=out, owner=owner)
        try:
            old_mode = stat.S_IMODE(os.stat(target).st_mode)
        except OSError:
            old_mode = 0o755
        tmp = parent / _tmp_name(name, "tmp")
        try:
            _call("mkdir", os.mkdir, tmp, 0o700)
        except OSError as exc:
            raise InputError(f"--out: cannot write beside {out} ({_reason(exc)}); the previous report is "
                             "unchanged") from None
        swapped = False
        try:
            _write_new_file(tmp / MARKER, _marker_bytes(list(raw), owner))
            for rel in sorted(raw):
                dest = _inside(tmp, rel)
                if len(rel.split("/")) > 1:
                    _call("makedirs", os.makedirs, dest.parent, exist_ok=True)
                _write_new_file(dest, raw[rel])
                if _after_each is not None:
                    _after_each(rel)
            _carry(target, tmp, plan)
            _call("chmod", os.chmod, tmp, old_mode)
            _fsync_dir(tmp)
            swapped = _swap(tmp, target, out)
        except OSError as exc:
            raise InputError(f"--out: cannot write {out} ({_reason(exc)}); the previous report is unchanged") \
                from None
        finally:
            if not swapped:
                _remove_tree(tmp)
    return out


# --------------------------------------------------------------------------------------------- single files
@contextlib.contextmanager
def open_atomic(path: str | Path, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> Iterator:
    """Yield a binary file object whose content replaces ``path`` atomically when the block ends normally.

    The data go to ``.<name>.tmp-XXXXXXXX`` beside ``path``; on success it is fsynced and renamed over ``path``
    (a symlink is written through: the file it points to is replaced). On any exception the temporary file is
    removed and ``path`` is unchanged. An existing ``path`` must be a regular file. ``OSError`` becomes one
    :class:`InputError` line.
    """
    out = Path(path)
    if not str(path) or not out.name or out.name in (".", ".."):
        raise InputError(f"--out: {path!r} names no file; give a file path")
    target = _real_destination(out, what="file")
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(f"--out: cannot inspect {out} ({_reason(exc)}); choose another path") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise InputError(f"--out: {out} is {kind}; choose another file name")
    parent, name = target.parent, target.name
    _ensure_parent(parent, out)
    with _locked(parent, name, timeout_s=lock_timeout_s, out=out):
        _recover(parent, name)
        tmp = parent / _tmp_name(name, "tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = _call("open", os.open, tmp, flags, 0o600)
        except OSError as exc:
            raise InputError(f"--out: cannot write beside {out} ({_reason(exc)}); the previous file is "
                             "unchanged") from None
        done = False
        try:
            with os.fdopen(fd, "wb") as fh:
                yield _HookedFile(fh)
                _call("flush", fh.flush)
                _call("fchmod", os.fchmod, fh.fileno(), stat.S_IMODE(st.st_mode) if st is not None else 0o644)
                _call("fsync", os.fsync, fh.fileno())
            _call("rename", os.rename, tmp, target)
            done = True
            _fsync_dir_after(parent)
        except OSError as exc:
            raise InputError(f"--out: cannot write {out} ({_reason(exc)}); the previous file is unchanged") \
                from None
        finally:
            if not done:
                _remove_tree(tmp)


def write_file_atomically(path: str | Path, data: bytes | str, *, lock_timeout_s: float = LOCK_TIMEOUT_S) -> Path:
    """Replace the file ``path`` by ``data`` atomically (see :func:`open_atomic`); returns ``path``."""
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    with open_atomic(path, lock_timeout_s=lock_timeout_s) as fh:
        fh.write(raw)
    return Path(path)

"""The output file of a sweep, written as the rows are evaluated: :class:`StreamWriter` joins the encoded parts
(:mod:`wseplan.sweep.output`) in task order into a temporary file beside the target (Parquet parts through
:mod:`wseplan.sweep.parquet_concat`, CSV parts by concatenation) and renames it into place on commit; a run that
dies leaves no partial file, and the next run removes what a dead run left (:func:`clean_stale`). Names that
would leave the output folder are refused (:func:`check_target`)."""
from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

from ..errors import InputError
from ..report.atomic import safe_filename
from ..report.fsops import _real_destination
from .output import OutputSpec, _require_pyarrow, csv_header, frame_bytes, output_format
from .parquet_concat import MAGIC, Concatenator, read_part, split_footer


_HOST = re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:32]
_STALE = re.compile(r"\.(?:tmp|parts)-(\d+)@([A-Za-z0-9]*)\.")


def _check_name(name: str) -> None:

    if name != safe_filename(name) or name in ("", ".", ".."):
        raise InputError(f"output: {name!r} is not a plain file name; use letters, digits, '.', '_' or '-'")


def check_target(out_dir: str | Path, name: str) -> None:
    """Refuse, before any work, an output that cannot be written: a name that is not a plain file name, an
    ``--out`` that is a file, a dangling symlink or a symlink loop, an output name that is a folder."""
    _check_name(name)
    out = Path(out_dir)
    _real_destination(out, what="folder")  # a symlink is written through; a dangling one or a loop is refused
    if out.exists() and not out.is_dir():
        raise InputError(f"--out: {out} exists and is not a folder; choose another path")
    if (out / name).is_dir():
        raise InputError(f"output: {out / name} is a folder; choose another output name")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def clean_stale(out: Path, name: str) -> list[str]:
    """Remove temporaries of ``name`` left in ``out`` by killed runs on this host (their process is gone)."""
    removed = []
    prefix = f".{name}."
    try:
        entries = list(os.scandir(out))
    except OSError:
        return removed
    for e in entries:
        if not e.name.startswith(prefix):
            continue
        m = _STALE.match(e.name, len(prefix) - 1)
        if not m or m.group(2) != _HOST:
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        try:
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                os.unlink(e.path)
            removed.append(e.name)
        except OSError:
            pass
    return removed


def _write_all(fd: int, data) -> None:
    mv = memoryview(data)
    while len(mv):
        n = os.write(fd, mv)
        mv = mv[n:]


def _os_error(path, exc: OSError) -> InputError:
    return InputError(f"output: cannot write {path}: {exc.strerror or str(exc) or exc.__class__.__name__}"
                      + (" (the disk is full)" if getattr(exc, "errno", None) == 28 else ""))


class StreamWriter:
    """Writes the output file ``out_dir/name`` from parts, atomically.

    The parts go, in order, into a temporary file beside the target (``.NAME.tmp-PID@HOST.*``); :meth:`commit`
    writes the Parquet footer, syncs and renames the file into place, so a reader sees the old file or the whole
    new one, never a part. :meth:`abort` (or leaving the ``with`` block on an exception, Ctrl-C included)
    removes the temporary file and any part folder. Temporaries left by killed runs are removed when the next
    run writes the same name. Errors of the file system (full disk, read-only folder) become one-line
    :class:`~wseplan.errors.InputError`s.
    """

    def __init__(self, out_dir: str | Path, name: str, spec: OutputSpec | None = None, *, fmt: str | None = None):
        check_target(out_dir, name)
        self.fmt = spec.fmt if spec is not None else (fmt or output_format(name))
        _require_pyarrow(self.fmt)
        out = Path(out_dir)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _os_error(out, exc) from None
        self.out, self.name = out, name
        self.target = out / name
        if self.target.resolve().parent != out.resolve():
            raise InputError(f"output: {name!r} escapes the output folder {out}")
        clean_stale(out, name)
        self._parts_dir: Path | None = None
        self.concat = None
        try:
            self.fd, self.tmp = tempfile.mkstemp(prefix=f".{name}.tmp-{os.getpid()}@{_HOST}.", dir=out)
        except OSError as exc:
            raise _os_error(out, exc) from None
        try:
            if spec is not None and self.fmt == "parquet":

                self.concat = Concatenator()
                self._write(MAGIC)
            elif spec is not None:
                self._write(csv_header(spec))
        except BaseException:
            self.abort()
            raise

    # -- writing ------------------------------------------------------------------------------------
    def _write(self, data) -> None:
        try:
            _write_all(self.fd, data)
        except OSError as exc:
            raise _os_error(self.target, exc) from None

    def write_raw(self, data: bytes) -> None:
        """Bytes that are already the whole file's content (no part joining)."""
        self._write(data)

    def add_bytes(self, data: bytes) -> None:
        """Append one part given as bytes (from :func:`encode_part`)."""
        if self.concat is None:
            self._write(data)
            return

        start, footer = split_footer(data[-(1 << 20):], len(data))
        self.concat.add(read_part(footer, start))
        self._write(memoryview(data)[4:start])

    def add_file(self, path: str | Path) -> None:
        """Append one part given as a file (written by a worker), then delete that file."""
        try:
            with open(path, "rb") as src:
                size = os.fstat(src.fileno()).st_size
                start, end = 0, size
                if self.concat is not None:
            
                    tail_n = min(size, 1 << 20)
                    src.seek(size - tail_n)
                    start_f, footer = split_footer(src.read(tail_n), size)
                    self.concat.add(read_part(footer, start_f))
                    start, end = 4, start_f
                self._copy(src.fileno(), start, end)
            os.unlink(path)
        except OSError as exc:
            raise _os_error(path, exc) from None

    def _copy(self, src_fd: int, start: int, end: int) -> None:
        n = end - start
        done = 0
        if hasattr(os, "copy_file_range"):
            try:
                while done < n:
                    k = os.copy_file_range(src_fd, self.fd, n - done, start + done)
                    if k == 0:
                        break
                    done += k
            except OSError:
                pass  # another file system or kernel: copy through user space
        while done < n:
            os.lseek(src_fd, start + done, os.SEEK_SET)
            buf = os.read(src_fd, min(n - done, 1 << 24))
            if not buf:
                raise OSError(5, "part file shorter than its footer says")
            self._write(buf)
            done += len(buf)

    def parts_dir(self) -> Path:
        """A fresh folder beside the output for workers' part files (removed on commit or abort)."""
        if self._parts_dir is None:
            try:
                self._parts_dir = Path(tempfile.mkdtemp(prefix=f".{self.name}.parts-{os.getpid()}@{_HOST}.", dir=self.out))
            except OSError as exc:
                raise _os_error(self.out, exc) from None
        return self._parts_dir

    # -- finishing ----------------------------------------------------------------------------------
    def commit(self) -> Path:
        """Finish the file (Parquet footer), sync it and rename it over ``out_dir/name``."""
        try:
            if self.concat is not None:
                self._write(self.concat.footer())
            os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1
            os.chmod(self.tmp, 0o644)
            os.replace(self.tmp, self.target)
        except OSError as exc:
            self.abort()
            raise _os_error(self.target, exc) from None
        except BaseException:
            self.abort()
            raise
        self._remove_parts()
        try:  # make the rename durable
            dfd = os.open(self.out, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
        return self.target

    def size(self) -> int:
        return os.fstat(self.fd).st_size if self.fd >= 0 else self.target.stat().st_size

    def _remove_parts(self) -> None:
        if self._parts_dir is not None:
            shutil.rmtree(self._parts_dir, ignore_errors=True)
            self._parts_dir = None

    def abort(self) -> None:
        if getattr(self, "fd", -1) >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1
        try:
            os.unlink(self.tmp)
        except OSError:
            pass
        self._remove_parts()

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is not None:
            self.abort()
        return False


def write_output(df, out_dir: str | Path, name: str) -> Path:
    """Write a DataFrame of a sweep to ``out_dir/name`` atomically (temporary file beside it, then a rename).

    ``name`` must already be a safe file name (:meth:`Sweep.output_name`); a name that would leave ``out_dir``
    is refused.
    """
    _check_name(name)
    data = frame_bytes(df, name)
    with StreamWriter(out_dir, name, fmt=output_format(name)) as w:
        w.write_raw(data)
        return w.commit()

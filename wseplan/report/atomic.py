"""Atomic, sandboxed writes of a report folder.

A report is a set of named files (``report.md``, CSVs, PNGs). :func:`write_files_atomically` writes them all into
a fresh temporary folder beside the destination and only then swaps that folder into place, so a run that fails
or is killed part-way leaves the previous report whole. File names come from study files, so every name is
sanitised with :func:`safe_filename` and checked to stay inside the output folder.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from ..errors import InputError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RESERVED = {"", ".", ".."}


def safe_filename(name: str, *, default: str = "item") -> str:
    """A file-name component made only of ``[A-Za-z0-9._-]``, with no path separators and no leading dot.

    ``"../../etc/passwd"`` becomes ``"etc_passwd"``; an empty or all-unsafe name becomes ``default``.
    """
    text = _UNSAFE.sub("_", str(name)).strip("._-")
    text = re.sub(r"_+", "_", text)[:100].strip("._-")
    return default if text in _RESERVED else text


def _inside(root: Path, rel: str) -> Path:
    """Resolve ``rel`` under ``root``; refuse absolute paths and anything that leaves ``root``."""
    if not rel or os.path.isabs(rel) or "\\" in rel or any(p in ("..", "") for p in rel.split("/")):
        raise InputError(f"output file {rel!r}: must be a relative name inside the report folder")
    path = (root / rel).resolve()
    if root.resolve() not in path.parents:
        raise InputError(f"output file {rel!r}: escapes the report folder {root}")
    return path


REPORT_SUFFIXES = (".md", ".csv", ".png", ".xlsx")


def _check_replaceable(out: Path) -> None:
    """Refuse to replace anything but a missing folder, an empty one, or a previous report folder.

    A report folder holds only ``report.md`` and ``.md``/``.csv``/``.png``/``.xlsx`` files, no sub-folders; the current
    folder, its ancestors and the filesystem root are never replaced.
    """
    resolved = out.resolve()
    cwd = Path.cwd().resolve()
    if not out.name or resolved == cwd or resolved in cwd.parents or resolved == Path(resolved.anchor):
        raise InputError(f"--out: {out} is the current folder or one of its parents; name a report folder")
    if not out.exists():
        return
    if not out.is_dir():
        raise InputError(f"--out: {out} exists and is not a folder; choose another path")
    entries = list(out.iterdir())
    if entries and (not (out / "report.md").is_file()
                    or any(e.is_dir() or e.suffix not in REPORT_SUFFIXES for e in entries)):
        raise InputError(f"--out: {out} holds files that are not a wseplan report; choose a new or empty folder")


def write_files_atomically(out_dir: str | Path, files: Mapping[str, bytes | str],
                           *, _after_each: Callable[[str], None] | None = None) -> Path:
    """Write ``files`` (relative name -> content) as the whole content of ``out_dir``, atomically.

    The files go into a temporary sibling folder first; the old ``out_dir`` (if any, and only if it is empty or a
    previous report folder) is renamed aside, the new folder renamed into place, and the old one deleted. Any exception before the swap removes the temporary
    folder and leaves ``out_dir`` untouched. ``_after_each`` is a test hook called after each file is written.

    Returns the output folder.
    """
    out = Path(out_dir)
    _check_replaceable(out)
    parent = out.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    try:
        for rel in sorted(files):
            target = _inside(tmp, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = files[rel]
            raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
            with open(target, "wb") as fh:
                fh.write(raw)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(target, 0o644)
            if _after_each is not None:
                _after_each(rel)
        os.chmod(tmp, 0o755)
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=parent))
            os.rmdir(old)
            os.replace(out, old)
        try:
            os.replace(tmp, out)
        except BaseException:
            if old is not None:
                os.replace(old, out)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out

"""A cache of the parsed bundled catalog files, so a cold ``wseplan`` command does not parse ~100 kB of YAML again.

Parsing the bundled ``catalogs/`` YAML (with its safety checks) is about a tenth of a cold ``wseplan fit``. The
parsed data of each bundled file is kept as JSON text in one cache file, under the file's path relative to the bundled
folder with the SHA-256 of its text: an entry is used only when the text read now hashes the same, so an edited
catalog is parsed again (and the entry replaced), and the result is the same data the parser returns. Only data
JSON keeps exactly is cached (mappings with text keys, lists, text, integers, finite floats, booleans, null); a file
with anything else (a YAML date, say) is parsed every time. Files outside the bundled folder (``--catalog``
folders, studies, sweep specs) are never cached.

Where: ``$WSEPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/wseplan``, else ``~/.cache/wseplan``;
``WSEPLAN_CACHE_DIR=off`` turns the cache off. The cache file is JSON (never executed), replaced atomically, and a
missing, unreadable or malformed cache file is the same as an empty one; a cache folder that cannot be written
leaves the cache off for that run.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import tempfile
from pathlib import Path

FORMAT = 1
"""Version of the cache file's layout; a new layout uses a new file name."""

OFF = ("off", "0", "none", "false")


def cache_dir() -> Path | None:
    """The cache folder, or None when ``WSEPLAN_CACHE_DIR`` turns the cache off (or there is no home folder)."""
    env = os.environ.get("WSEPLAN_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in OFF or not env.strip() else Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "wseplan"
    try:
        return Path.home() / ".cache" / "wseplan"
    except (RuntimeError, KeyError, OSError):  # no home folder to be found: no cache
        return None


def parser_id() -> str:
    """Which PyYAML parses, without importing it: the size and time of its ``__init__.py`` and of its libyaml
    extension (``_yaml*``), when there is one. A new or reinstalled PyYAML gives a new cache file name, so nothing it
    might parse differently is reused."""
    parts = []
    try:
        spec = importlib.util.find_spec("yaml")  # a top-level name: found, not imported
    except (ImportError, ValueError):
        spec = None
    folders = list(getattr(spec, "submodule_search_locations", None) or [])
    for folder in folders[:1]:
        try:
            names = sorted(n for n in os.listdir(folder) if n == "__init__.py" or n.startswith("_yaml"))
        except OSError:
            names = []
        for n in names:
            try:
                st = os.stat(os.path.join(folder, n))
                parts.append(f"{folder}/{n}:{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                parts.append(n)
    return hashlib.sha256("|".join(parts or ["yaml:absent"]).encode()).hexdigest()[:16]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def faithful(x, depth: int = 0) -> bool:
    """Whether JSON gives back exactly ``x`` (types included)."""
    if depth > 100:
        return False
    t = type(x)
    if t is dict:
        return all(type(k) is str and faithful(v, depth + 1) for k, v in x.items())
    if t is list:
        return all(faithful(v, depth + 1) for v in x)
    if t is float:
        return math.isfinite(x)
    return t in (str, int, bool) or x is None


class ParseCache:
    """The parsed bundled files of one cache file (:data:`FORMAT`, :func:`parser_id`): ``lookup`` then ``store``."""

    def __init__(self, folder: Path | None, parser: str):
        self.path = None if folder is None else folder / f"catalog-parse-v{FORMAT}-{parser}.json"
        self._entries: dict | None = None

    def _load(self) -> dict:
        if self._entries is None:
            self._entries = {}
            if self.path is not None:
                try:
                    data = json.loads(self.path.read_bytes())
                    if isinstance(data, dict):
                        self._entries = data
                except (OSError, ValueError):
                    pass  # no cache file yet, or a damaged one: parse, and write a new one
        return self._entries

    def lookup(self, rel: str, text: str):
        """``(True, data)``: the cached parse of bundled file ``rel`` whose text is ``text`` (a fresh object on each
        call, so a caller may change it); ``(False, None)`` when not cached."""
        if self.path is None:
            return False, None
        e = self._load().get(rel)
        if isinstance(e, dict) and e.get("sha256") == digest(text) and isinstance(e.get("json"), str):
            try:
                return True, json.loads(e["json"])
            except ValueError:
                return False, None
        return False, None

    def store(self, rel: str, text: str, data) -> None:
        """Keep ``data`` (the parse of ``text``) for ``rel`` when JSON keeps it exactly; write the cache file."""
        if self.path is None or not faithful(data):
            return
        entries = self._load()
        entries[rel] = {"sha256": digest(text), "json": json.dumps(data, separators=(",", ":"), allow_nan=False)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(prefix=".catalog-parse-", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(entries, f, separators=(",", ":"), allow_nan=False)
                os.replace(tmp, self.path)
            except BaseException:
                with_suppressed_unlink(tmp)
                raise
        except OSError:
            self.path = None  # a read-only or full cache folder: parse every file this run, as without a cache


def with_suppressed_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

"""Load catalogs/*.yaml into frozen schemas; user folders (``--catalog DIR``) override or add entries."""
from __future__ import annotations

import errno
import fnmatch
import json
import math
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from pydantic import ValidationError

from ..errors import CatalogError, InputError, suggest, validation_detail
from ..plugins import load_plugins
from .parse_cache import ParseCache, cache_dir, parser_id
from .yaml_nodes import MAX_EXPANDED_VALUES, MAX_INT_DIGITS, MAX_NESTING, check_yaml_nodes, label  # noqa: F401
from .schema import (DEVICE_ENTRY_SCHEMAS, Defaults, DeviceEntry, GenericModel, Gpu, MemoryX, Model, Quantity, Source,
                     SwarmX, System, USER_BASES, Wafer, check_hardware_key, check_key)



def _yaml():
    """PyYAML and its safe loader (libyaml's when present: much faster). Imported on first use: a start whose
    bundled catalog files all come from the parse cache (:mod:`.parse_cache`) never needs it."""
    import yaml

    return yaml, getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# top-level key -> schema. Files may hold any subset of these keys.
SECTIONS = {
    "sources": Source,
    "wafers": Wafer,
    "systems": System,
    "memoryx": MemoryX,
    "swarmx": SwarmX,
    "gpus": Gpu,
    "models": Model,
    "generic_models": GenericModel,
    "defaults": Defaults,
    "devices": DeviceEntry,  # plug-in hardware kinds; each entry is validated by its kind's registered schema
}
# sub-folders owned by other modules (loaded by them, not here)
_OTHER_DIRS = {"calibration", "prices", "validation", "software"}


def default_catalog_dir() -> Path:
    """The bundled catalog folder: $WSEPLAN_CATALOG_DIR, the source tree's ``catalogs/``, or the installed copy."""
    env = os.environ.get("WSEPLAN_CATALOG_DIR")
    if env:
        return Path(env)
    if _PACKAGED:  # where the package's own files are does not change while it runs
        return _PACKAGED[0]
    here = Path(__file__).resolve().parent.parent
    for cand in (here.parent / "catalogs", here / "_catalogs"):
        if (cand / "sources.yaml").is_file():
            _PACKAGED.append(cand)
            return cand
    raise CatalogError("bundled catalogs not found; set WSEPLAN_CATALOG_DIR to the catalogs/ folder")


_PACKAGED: list[Path] = []


def _fmt_validation(path: Path, where: str, exc: ValidationError) -> str:
    loc, msg = validation_detail(exc)
    full = f"{where}.{loc}" if loc else where
    return f"{path}: {full}: {msg}"


# ---------------------------------------------------------------------------------------------
# bounded, non-blocking reading of input files
# ---------------------------------------------------------------------------------------------
MAX_INPUT_BYTES = 64 * 2**20
"""Largest YAML or JSON input file [bytes] (the bundled catalog files are below 40 kB)."""
MAX_CATALOG_FILES = 10_000
"""Most entries scanned in a ``--catalog`` folder (a folder of catalog YAML files holds a handful)."""

_KIND = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
         stat.S_IFBLK: "a block device", stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symlink"}


def file_kind(mode: int) -> str:
    """'a FIFO (named pipe)', 'a socket', ... for a ``st_mode`` that is not a regular file."""
    return _KIND.get(stat.S_IFMT(mode), "not a regular file")


def read_regular_bytes(path: str | Path, *, what: str = "input", max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file, read without ever blocking.

    The file is opened with ``O_NONBLOCK`` and checked with ``fstat`` before any read, so a FIFO, socket or
    device is refused in one line instead of blocking; a symlink loop, a missing file or a file larger than
    ``max_bytes`` are refused likewise (:class:`InputError`).
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        reason = {errno.ENOENT: "not found", errno.ELOOP: "a symlink loop", errno.ENXIO: "a socket or a device",
                  errno.EACCES: "permission denied", errno.EISDIR: "a folder"}.get(exc.errno, exc.strerror)
        raise InputError(f"{what} {p}: cannot read ({reason}); give a readable file") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {p}: is {file_kind(st.st_mode)}, not a file; give a regular file")
        if st.st_size > max_bytes:
            raise InputError(f"{what} {p}: {st.st_size:,} bytes, more than the {max_bytes:,} allowed; "
                             "give a smaller file")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise InputError(f"{what} {p}: more than the {max_bytes:,} bytes allowed; give a smaller file")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"{what} {p}: cannot read ({exc.strerror}); give a readable file") from None
    finally:
        os.close(fd)


def read_regular_text(path: str | Path, *, what: str = "input", max_bytes: int = MAX_INPUT_BYTES) -> str:
    """:func:`read_regular_bytes` decoded as UTF-8 (a leading byte-order mark is dropped)."""
    raw = read_regular_bytes(path, what=what, max_bytes=max_bytes)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {path}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None


def read_yaml(path: Path) -> object:
    """Parse one YAML file safely; every problem becomes a one-line :class:`CatalogError`.

    The file must be a regular file (a FIFO or device is refused without blocking, see
    :func:`read_regular_bytes`) of at most :data:`MAX_INPUT_BYTES`; syntax errors, nesting deeper than
    :data:`MAX_NESTING`, integers longer than :data:`MAX_INT_DIGITS` digits, non-finite floats and alias bombs are
    refused with the line and the field. A file of the bundled catalog whose text was parsed before comes from
    the parse cache (:mod:`.parse_cache`: the same data, without parsing again).
    """
    try:
        text = read_regular_text(path, what="file")
    except InputError as exc:
        raise CatalogError(str(exc).removeprefix("file ")) from None
    rel = _bundled_name(path)
    if rel is not None:
        hit, data = _parse_cache().lookup(rel, text)
        if hit:
            return data
    data = _parse_yaml(text, path)
    if rel is not None:
        _parse_cache().store(rel, text, data)
    return data


def _parse_yaml(text: str, path: Path) -> object:
    yaml, loader_cls = _yaml()
    try:
        loader = loader_cls(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            check_yaml_nodes(node, Path(path))
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CatalogError(f"{path}:{line}: malformed YAML ({problem}); fix the syntax") from None
    except (ValueError, OverflowError, RecursionError, MemoryError) as exc:
        raise CatalogError(f"{path}: cannot read ({exc.__class__.__name__}: {str(exc)[:120]}); fix the file") \
            from None


def _bundled_name(path) -> str | None:
    """``path`` relative to the bundled catalog folder ('/'-separated), or None for a file outside it."""
    try:
        base = os.path.abspath(default_catalog_dir())
    except CatalogError:
        return None
    p = os.path.abspath(path)
    if not p.startswith(base + os.sep):
        return None
    return p[len(base) + 1:].replace(os.sep, "/")


_PARSE_CACHE: dict[str, ParseCache] = {}


def _parse_cache() -> ParseCache:
    """The parse cache of this cache folder and this PyYAML (one per process)."""
    folder = cache_dir()
    key = str(folder)
    if key not in _PARSE_CACHE:
        _PARSE_CACHE[key] = ParseCache(folder, parser_id())
    return _PARSE_CACHE[key]


class _Bad:
    """A JSON number or constant that cannot be used; reported with its field after parsing."""

    def __init__(self, msg: str):
        self.msg = msg


_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def read_json(path: str | Path, *, what: str = "input", max_bytes: int = MAX_INPUT_BYTES) -> object:
    """Parse one JSON file with the same bounds as :func:`read_yaml`; problems raise a one-line InputError.

    ``NaN``/``Infinity``, floats that overflow and integers longer than :data:`MAX_INT_DIGITS` (which Python
    cannot convert) are refused naming their field; nesting deeper than :data:`MAX_NESTING` is refused before
    the recursive parser sees it.
    """
    text = read_regular_text(path, what=what, max_bytes=max_bytes)
    cur = 0
    for m in _JSON_TOKENS.finditer(text):
        t = m.group()
        if t in "[{":
            cur += 1
            if cur > MAX_NESTING:
                line = text.count("\n", 0, m.start()) + 1
                raise InputError(f"{what} {path}: line {line}: nested deeper than {MAX_NESTING} levels; "
                                 "flatten the file")
        elif t in "]}":
            cur -= 1

    def big_int(s: str):
        n = len(s.lstrip("-"))
        return _Bad(f"an integer of {n:,} digits; numbers have at most {MAX_INT_DIGITS:,}") \
            if n > MAX_INT_DIGITS else int(s)

    def finite_float(s: str):
        v = float(s)
        return v if math.isfinite(v) else _Bad(f"{s[:40]} overflows a float (above 1.8e308); give a smaller value")

    try:
        data = json.loads(text, parse_constant=lambda c: _Bad(f"{c} is not a finite number; give a finite value"),
                          parse_int=big_int, parse_float=finite_float)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} {path}: not valid JSON (line {exc.lineno}: {exc.msg}); fix the file") from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{what} {path}: cannot read ({exc.__class__.__name__}); fix the file") from None
    stack = [(data, [])]
    while stack:
        obj, where = stack.pop()
        if isinstance(obj, _Bad):
            raise InputError(f"{what} {path}: {label(where)}: {obj.msg}")
        if isinstance(obj, dict):
            stack.extend((v, [*where, k[:80]]) for k, v in obj.items())
        elif isinstance(obj, list):
            stack.extend((v, [*where, i]) for i, v in enumerate(obj))
    return data


def _claim_name(index: dict, name: str, entry: tuple[str, str], who: str | None = None) -> None:
    """Add ``name`` (lower-cased) for ``entry`` to ``index``; refuse a name another entry already holds."""
    k = name.lower()
    prev = index.get(k)
    if prev is not None and prev != entry:
        raise CatalogError(f"catalog: the name {name!r} is both {prev[0]}.{prev[1]} and {who or '.'.join(entry)}; give "
                           "the user entry another key or drop the alias (a name must resolve to one entry)")
    index[k] = entry


@dataclass
class Catalog:
    """All catalog entries, by section and key, plus a lower-case alias index."""

    sources: dict[str, Source] = field(default_factory=dict)
    wafers: dict[str, Wafer] = field(default_factory=dict)
    systems: dict[str, System] = field(default_factory=dict)
    memoryx: dict[str, MemoryX] = field(default_factory=dict)
    swarmx: dict[str, SwarmX] = field(default_factory=dict)
    gpus: dict[str, Gpu] = field(default_factory=dict)
    models: dict[str, Model] = field(default_factory=dict)
    generic_models: dict[str, GenericModel] = field(default_factory=dict)
    devices: dict[str, DeviceEntry] = field(default_factory=dict)
    defaults: Defaults | None = None
    files: list[str] = field(default_factory=list)
    extra_dirs: list[str] = field(default_factory=list)

    # -- lookups -----------------------------------------------------------------------------
    def _cached_index(self, name: str, sections: tuple[str, ...], build):
        """``build()`` (a read-only view), rebuilt when an entry of ``sections`` is added, removed or replaced (entries
        are frozen: the same key bound to the same object has the same names), else from the last call: a question
        resolves its model and target once each, and the index of every alias costs more than the rest of it."""
        stamp = tuple((tuple(d), tuple(map(id, d.values()))) for d in (getattr(self, sec) for sec in sections))
        cache = self.__dict__.setdefault("_index_cache", {})
        hit = cache.get(name)
        if hit is not None and hit[0] == stamp:
            return MappingProxyType(hit[1])
        idx = build()
        cache[name] = (stamp, idx)  # plain dicts: a catalog still pickles (Dask ships it to workers)
        return MappingProxyType(idx)

    def _aliases(self, sections: tuple[str, ...]) -> Mapping[str, tuple[str, str]]:
        """Lower-case names and aliases of the entries of ``sections`` -> (section, key); the first entry wins."""
        return self._cached_index(",".join(sections), sections, lambda: self._build_aliases(sections))

    def _build_aliases(self, sections: tuple[str, ...]) -> dict[str, tuple[str, str]]:
        """Lower-case keys and aliases -> (section, key); a name two entries claim is a :class:`CatalogError` (a user
        entry keyed or aliased like a bundled alias would otherwise be listed and never reached)."""
        out: dict[str, tuple[str, str]] = {}
        for sec in sections:
            for key, entry in getattr(self, sec).items():
                for a in [key, *(getattr(entry, "aliases", []) or [])]:
                    _claim_name(out, a, (sec, key))
        return out

    def resolve_model_name(self, name: str) -> tuple[str, str]:
        """Return (section, key) for a model name or alias; raise InputError with suggestions."""
        idx = self._aliases(("models", "generic_models"))
        hit = idx.get(name.lower())
        if hit is None:
            shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}... ({len(name):,} characters)"
            raise InputError(
                f"model: unknown model {shown}{suggest(name[:200], idx)}; "
                "see `wseplan catalog list models`, or give a config.json / layer-list YAML path"
            )
        return hit

    def hardware_keys(self) -> Mapping[str, tuple[str, str]]:
        """Lower-case hardware names and aliases -> (section, key); systems map to their wafer (a read-only view)."""
        return self._cached_index("hardware", ("wafers", "gpus", "devices", "systems"), self._build_hardware_keys)

    def _build_hardware_keys(self) -> dict[str, tuple[str, str]]:
        idx = self._build_aliases(("wafers", "gpus", "devices"))
        for key, sysm in self.systems.items():
            for a in [key, *sysm.aliases]:
                _claim_name(idx, a, ("wafers", sysm.wafer), f"systems.{key}")
        return idx

    def system_for_wafer(self, wafer_key: str) -> System:
        return self.systems[self.wafers[wafer_key].system]

    def all_source_ids(self) -> set[str]:
        return set(self.sources)


def _merge_file(cat: Catalog, path: Path) -> None:
    data = read_yaml(path)
    if data is None:
        return
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: top level must be a mapping with keys {', '.join(SECTIONS)}")
    for sec, body in data.items():
        if sec not in SECTIONS:
            raise CatalogError(f"{path}: unknown top-level key {sec!r}{suggest(str(sec), SECTIONS)}; allowed: {', '.join(SECTIONS)}")
        schema = SECTIONS[sec]
        if sec == "defaults":
            try:
                if cat.defaults is not None and isinstance(body, dict):
                    merged = cat.defaults.model_dump(exclude_none=True)
                    merged = {k: v for k, v in merged.items()}
                    merged.update(body)
                    body = merged
                cat.defaults = schema.model_validate(body)
            except ValidationError as exc:
                raise CatalogError(_fmt_validation(path, "defaults", exc)) from None
            continue
        if not isinstance(body, dict):
            raise CatalogError(f"{path}: {sec} must be a mapping of name -> entry")
        target = getattr(cat, sec)
        for key, entry in body.items():
            try:
                (check_hardware_key if sec in _HARDWARE_SECTIONS else check_key)(str(key))
            except ValueError as exc:
                raise CatalogError(f"{path}: {sec}: {exc}") from None
            if not isinstance(entry, dict):
                raise CatalogError(f"{path}: {sec}.{key} must be a mapping of fields")
            if sec == "devices":
                schema = _device_schema(path, key, entry)
            try:
                target[str(key)] = schema.model_validate(entry)
            except (ValidationError, InputError) as exc:
                if isinstance(exc, ValidationError):
                    raise CatalogError(_fmt_validation(path, f"{sec}.{key}", exc)) from None
                raise CatalogError(f"{path}: {sec}.{key}: {exc}") from None
    cat.files.append(str(path))


def _device_schema(path: Path, key, entry: dict) -> type:
    """The registered schema of a ``devices:`` entry's kind (plug-ins are imported first)."""
    load_plugins()
    kind = entry.get("kind")
    if kind not in DEVICE_ENTRY_SCHEMAS:
        known = ", ".join(sorted(DEVICE_ENTRY_SCHEMAS)) or "none registered"
        raise CatalogError(f"{path}: devices.{key}.kind: no device family registers kind {kind!r} ({known}); "
                           "load its plug-in with WSEPLAN_PLUGINS")
    return DEVICE_ENTRY_SCHEMAS[kind]


_HARDWARE_SECTIONS = ("wafers", "systems", "gpus", "devices")


def _yaml_files(folder: Path, *, skip_other: bool) -> list[Path]:
    """The ``*.y*ml`` files under ``folder`` (sorted), found without following symlinked folders.

    A YAML-named entry that is not a regular file (a FIFO, socket, device, folder, dangling symlink or symlink
    loop) is refused with one line before anything is opened, so nothing blocks; other names are ignored.
    At most :data:`MAX_CATALOG_FILES` entries are scanned.
    """
    files: list[Path] = []
    scanned = 0
    stack = [folder]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise CatalogError(f"{d}: cannot list the catalog folder ({exc.strerror}); check the path") from None
        for e in entries:
            scanned += 1
            if scanned > MAX_CATALOG_FILES:
                raise InputError(f"--catalog: {folder} holds more than {MAX_CATALOG_FILES:,} entries; give a folder "
                                 "of catalog YAML files")
            if d == folder and (e.name == "software" or (skip_other and e.name in _OTHER_DIRS)):
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
                    continue
            except OSError:
                pass
            if not fnmatch.fnmatchcase(e.name, "*.y*ml"):
                continue
            p = Path(e.path)
            try:
                st = os.stat(p)
            except OSError as exc:
                what = {errno.ELOOP: "a symlink loop", errno.ENOENT: "a dangling symlink"}.get(exc.errno, exc.strerror)
                raise CatalogError(f"{p}: is {what}; remove it from the catalog folder") from None
            if not stat.S_ISREG(st.st_mode):
                raise CatalogError(f"{p}: is {file_kind(st.st_mode)}, not a YAML file; remove it from the catalog "
                                   "folder")
            files.append(p)
    return sorted(files)


def _check_references(cat: Catalog) -> None:
    known = cat.all_source_ids()

    def check(where: str, obj) -> None:
        if isinstance(obj, Quantity):
            for sid in (obj.source_ids if obj.cites_ids else ()):
                if sid not in known:
                    raise CatalogError(f"{where}: unknown source id {sid!r}{suggest(sid, known)}; add it to sources.yaml")
        elif isinstance(obj, dict):
            for k, v in obj.items():
                check(f"{where}.{k}", v)
        elif hasattr(type(obj), "model_fields"):
            for name in type(obj).model_fields:
                check(f"{where}.{name}", getattr(obj, name))
            if isinstance(obj, (Model, GenericModel)) and obj.basis not in USER_BASES:  # a user's entry: free text
                ids = [obj.source] if isinstance(obj.source, str) else obj.source
                for sid in ids:
                    if sid not in known:
                        raise CatalogError(f"{where}: unknown source id {sid!r}{suggest(sid, known)}; add it to sources.yaml")

    for sec in ("wafers", "systems", "memoryx", "swarmx", "gpus", "devices", "models", "generic_models"):
        for key, entry in getattr(cat, sec).items():
            check(f"{sec}.{key}", entry)
    if cat.defaults is not None:
        check("defaults", cat.defaults)
    for key, sysm in cat.systems.items():
        for attr, sec in (("wafer", "wafers"), ("memoryx", "memoryx"), ("swarmx", "swarmx")):
            ref = getattr(sysm, attr)
            if ref not in getattr(cat, sec):
                raise CatalogError(f"systems.{key}.{attr}: unknown {sec} entry {ref!r}")
    for key, w in cat.wafers.items():
        if w.system not in cat.systems:
            raise CatalogError(f"wafers.{key}.system: unknown system {w.system!r}")
    for key, mx in cat.memoryx.items():
        if mx.default_capacity not in mx.capacity_options_bytes:
            raise CatalogError(f"memoryx.{key}.default_capacity: {mx.default_capacity!r} is not one of its capacity_options_bytes")
    if cat.defaults is None:
        raise CatalogError("catalog has no 'defaults' section; the bundled catalogs/defaults.yaml is missing")


_CACHE: dict[tuple[str, ...], Catalog] = {}


def load_catalog(extra_dirs: list[str | Path] | tuple = (), *, base_dir: str | Path | None = None) -> Catalog:
    """Load the bundled catalogs, then each folder in ``extra_dirs`` (its entries override same-named ones).

    Raises
    ------
    CatalogError
        On malformed YAML, an unknown key or section, a bad unit, or an unknown source id.
    """
    base = Path(base_dir) if base_dir else default_catalog_dir()
    extras = [Path(d) for d in extra_dirs]
    key = (str(base), *[str(p.resolve()) for p in extras])
    if key in _CACHE and not extras:
        return _CACHE[key]
    cat = Catalog()
    for p in _yaml_files(base, skip_other=True):
        _merge_file(cat, p)
    for d in extras:
        if not d.is_dir():
            raise InputError(f"--catalog: {d} is not a folder; give a folder of YAML files")
        for p in _yaml_files(d, skip_other=False):
            _merge_file(cat, p)
    cat.extra_dirs = [str(d) for d in extras]
    _check_references(cat)
    if extras:  # a user name that collides with a bundled one: refused at load, not met later as the wrong entry
        cat.hardware_keys()
        cat._aliases(("models", "generic_models"))
    if not extras:
        _CACHE[key] = cat
    return cat

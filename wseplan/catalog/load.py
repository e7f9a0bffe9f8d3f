"""Load catalogs/*.yaml into frozen schemas; user folders (``--catalog DIR``) override or add entries."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ValidationError

from ..errors import CatalogError, InputError, suggest, validation_detail
from .schema import (DEVICE_ENTRY_SCHEMAS, Defaults, DeviceEntry, GenericModel, Gpu, MemoryX, Model, Source, SwarmX,
                     System, Wafer)

try:  # libyaml is much faster when present
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader

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
    here = Path(__file__).resolve().parent.parent
    for cand in (here.parent / "catalogs", here / "_catalogs"):
        if (cand / "sources.yaml").is_file():
            return cand
    raise CatalogError("bundled catalogs not found; set WSEPLAN_CATALOG_DIR to the catalogs/ folder")


def _fmt_validation(path: Path, where: str, exc: ValidationError) -> str:
    loc, msg = validation_detail(exc)
    full = f"{where}.{loc}" if loc else where
    return f"{path}: {full}: {msg}"


def read_yaml(path: Path) -> object:
    """Parse one YAML file safely; a syntax error becomes a one-line :class:`CatalogError`."""
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.load(fh, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CatalogError(f"{path}:{line}: malformed YAML ({problem}); fix the syntax") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: cannot read ({exc.__class__.__name__}); check the path") from None


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
    def _aliases(self, sections: tuple[str, ...]) -> dict[str, tuple[str, str]]:
        out: dict[str, tuple[str, str]] = {}
        for sec in sections:
            for key, entry in getattr(self, sec).items():
                out.setdefault(key.lower(), (sec, key))
                for a in getattr(entry, "aliases", []) or []:
                    out.setdefault(a.lower(), (sec, key))
        return out

    def resolve_model_name(self, name: str) -> tuple[str, str]:
        """Return (section, key) for a model name or alias; raise InputError with suggestions."""
        idx = self._aliases(("models", "generic_models"))
        hit = idx.get(name.lower())
        if hit is None:
            raise InputError(
                f"model: unknown model {name!r}{suggest(name, idx)}; "
                "see `wseplan catalog list models`, or give a config.json / layer-list YAML path"
            )
        return hit

    def hardware_keys(self) -> dict[str, tuple[str, str]]:
        """Lower-case hardware names and aliases -> (section, key); systems map to their wafer."""
        idx = self._aliases(("wafers", "gpus", "devices"))
        for key, sysm in self.systems.items():
            for a in [key, *sysm.aliases]:
                idx.setdefault(a.lower(), ("wafers", sysm.wafer))
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
    from ..plugins import load_plugins

    load_plugins()
    kind = entry.get("kind")
    if kind not in DEVICE_ENTRY_SCHEMAS:
        known = ", ".join(sorted(DEVICE_ENTRY_SCHEMAS)) or "none registered"
        raise CatalogError(f"{path}: devices.{key}.kind: no device family registers kind {kind!r} ({known}); "
                           "load its plug-in with WSEPLAN_PLUGINS")
    return DEVICE_ENTRY_SCHEMAS[kind]


def _yaml_files(folder: Path, *, skip_other: bool) -> list[Path]:
    files = []
    for p in sorted(folder.rglob("*.y*ml")):
        rel = p.relative_to(folder).parts
        if rel and (rel[0] == "software" or (skip_other and rel[0] in _OTHER_DIRS)):
            continue
        files.append(p)
    return files


def _check_references(cat: Catalog) -> None:
    known = cat.all_source_ids()

    def check(where: str, obj) -> None:
        from .schema import Quantity

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
            if isinstance(obj, (Model, GenericModel)):
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
    if not extras:
        _CACHE[key] = cat
    return cat

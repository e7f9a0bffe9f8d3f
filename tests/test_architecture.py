"""The shape of the package (issue 10, docs/architecture.md): a one-way import tower, no import cycles, no module
over 600 lines, imports at module top.

Every module under ``wseplan/`` is parsed (``ast``, nothing is imported) and its imports of other wseplan modules
are resolved to modules. The rules:

1. **Tower.** A module imports only modules of its own layer or of lower layers (:data:`TOWER`, lowest first).
2. **No cycles** between modules (imports inside functions count too).
3. **Size.** No module over :data:`MAX_LINES` lines, except the temporary :data:`SIZE_ALLOW` list.
4. **Imports at module top.** An import inside a function is allowed only for a documented optional or heavy
   dependency (:data:`HEAVY`: loaded only by the commands that need it, so ``wseplan fit`` starts fast), for a
   documented (importer, imported) pair (:data:`LAZY`), and in the command line (:data:`CLI`) for a module its
   start-up does not load (:func:`_cli_startup_modules`).
5. **CLI start-up.** ``import wseplan.cli`` registers every command and loads no wseplan module beyond
   :data:`CLI_STARTUP` and the cli package, and none of :data:`NOT_AT_CLI_STARTUP`.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import wseplan

PKG = Path(wseplan.__file__).resolve().parent
MAX_LINES = 600

#: the layers, lowest first; a module belongs to the first entry naming it or a package above it
TOWER = (
    ("base", ("wseplan", "wseplan.units", "wseplan.errors", "wseplan.plugins",
              # the report package's writers (atomic files, Markdown tables, table/JSON/CSV rendering, plots) use
              # nothing of wseplan but errors: they are leaves every layer may write through
              "wseplan.report.fsops", "wseplan.report.atomic", "wseplan.report.markdown", "wseplan.report.formats",
              "wseplan.report.plots")),
    ("catalog", ("wseplan.catalog",)),
    ("model", ("wseplan.workload", "wseplan.architecture", "wseplan.model_files", "wseplan.targets", "wseplan.records",
               "wseplan.calibration_data", "wseplan.model_error")),
    ("analytic", ("wseplan.analytic",)),
    ("devices", ("wseplan.devices",)),
    ("plan", ("wseplan.plan", "wseplan.plan_notes", "wseplan.plan_sizes")),
    ("views", ("wseplan.pricing", "wseplan.costing", "wseplan.fit", "wseplan.timing", "wseplan.serving",
               "wseplan.serve_refine", "wseplan.serve_choice", "wseplan.scale",
               "wseplan.compare", "wseplan.admission", "wseplan.operating")),
    ("studies", ("wseplan.optimize", "wseplan.sim", "wseplan.validate", "wseplan.validate_stream", "wseplan.claims",
                 "wseplan.sweep",
                 # the refit of the wafer kernel constants predicts the validation rows: calibration, not physics
                 "wseplan.analytic.wse_fit")),
    ("report", ("wseplan.report",)),
    ("cli", ("wseplan.cli",)),
)

#: modules allowed over MAX_LINES for a while (none today); a NEW module over the limit fails
SIZE_ALLOW: set[str] = set()

#: optional or heavy third-party packages a function may import where it needs them (not on `wseplan fit`'s path);
#: yaml: the catalog loader imports PyYAML only when a file is not in the parse cache of the bundled catalog
#: (wseplan/catalog/parse_cache.py), which saves its import (~8 ms) on most cold starts;
#: fcntl (standard library, POSIX only): report.fsops takes its file lock with it, and the module still imports
#: where the platform lacks it
HEAVY = {"pandas", "scipy", "pulp", "highspy", "matplotlib", "openpyxl", "pyarrow", "dask", "distributed", "bokeh",
         "rich", "typer", "click", "yaml", "fcntl"}

_SCHEMA_WHY = ("`wseplan catalog schema KIND` loads only the package that reads KIND (the claims and study packages "
               "pull in the whole chain and scipy, ~0.5 s)")
#: wseplan imports kept inside functions on purpose: (importer, imported) -> why
LAZY: dict[tuple[str, str], str] = {
    ("wseplan.report.provenance", "wseplan.analytic.cost"):
        "every JSON record is stamped through provenance, `wseplan fit`'s too, which prices nothing: the cost "
        "package loads only when a record states a prices date (~11 ms on the fit path)",
    ("wseplan.report.schemas", "wseplan.analytic.cost"): _SCHEMA_WHY,
    ("wseplan.report.schemas", "wseplan.report.study"): _SCHEMA_WHY,
    ("wseplan.report.schemas", "wseplan.optimize.fleet"): _SCHEMA_WHY,
    ("wseplan.report.schemas", "wseplan.sweep"): _SCHEMA_WHY,
    ("wseplan.report.schemas", "wseplan.claims"): _SCHEMA_WHY,
}

#: the package's public names (PEP 562 ``__getattr__`` in wseplan/__init__.py): loaded from their layer on first
#: use, never at ``import wseplan``, so they are neither upward imports nor imports to move to the top
FACADE: dict[tuple[str, str], str] = {("wseplan", "wseplan.serving"): "wseplan.serve(...) is wseplan.serving.serve"}

#: the command line. ``import wseplan.cli`` registers every command (``wseplan --help`` lists them), so whatever a
#: command module imports at its top loads on every ``wseplan ...`` call; each command imports its implementation
#: (the chain, catalogs, numpy, pydantic) where it runs instead, so ``wseplan fit`` never loads the sweep, the
#: validation or the simulators. In the cli package a function may therefore import a module that the CLI's
#: start-up does not load; one that start-up loads anyway (errors, report.formats, the standard library the CLI
#: already uses) belongs at the top, and a function-level import of it fails.
CLI = "wseplan.cli"
#: the wseplan modules outside the cli package that ``import wseplan.cli`` may load (the error types and the text
#: formatters every command prints through)
CLI_STARTUP = {"wseplan", "wseplan.errors", "wseplan.report", "wseplan.report.formats"}
#: third-party packages the CLI's start-up must not load (each costs tens of ms; the commands load them). rich is
#: not listed: some typer versions import it themselves when it is installed
NOT_AT_CLI_STARTUP = ("numpy", "pydantic", "yaml", "pandas", "scipy", "matplotlib")


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(mod: str, path: Path):
    """(imported wseplan module or third-party top package, line, at module top?) of every import statement."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    top = {id(n) for n in tree.body}
    for n in tree.body:  # module-level try/if blocks run at import time too
        if isinstance(n, (ast.Try, ast.If)):
            top |= {id(c) for c in ast.walk(n)}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom):
            base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else [])) if node.level \
                else node.module or ""
            if base.split(".")[0] == "wseplan":
                names = [_resolve(f"{base}.{a.name}") if f"{base}.{a.name}" in MODULES else _resolve(base)
                         for a in node.names]
            else:
                names = [base]
        elif isinstance(node, ast.Import):
            names = [_resolve(a.name) if a.name.split(".")[0] == "wseplan" else a.name for a in node.names]
        for n in names:
            if n and n != mod:
                yield n, node.lineno, id(node) in top


def _layer(mod: str) -> int:
    best = None
    for i, (_, names) in enumerate(TOWER):
        for n in names:
            if n == "wseplan" and mod != n:  # the package itself, not everything under it
                continue
            if (mod == n or mod.startswith(n + ".")) and (best is None or len(n) > len(best[1])):
                best = (i, n)
    assert best is not None, f"{mod} is in no layer of TOWER; add it (and to docs/architecture.md)"
    return best[0]


def _graph() -> dict[str, set[str]]:
    return {m: {n for n, _, _ in _imports(m, p) if n.split(".")[0] == "wseplan" and not m.startswith(n + ".")}
            for m, p in MODULES.items()}


def test_every_module_has_a_layer_and_the_doc_names_the_tower():
    for m in MODULES:
        _layer(m)
    doc = (PKG.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for name, members in TOWER:
        for m in members:
            assert f"`{m.removeprefix('wseplan.') or 'wseplan'}`" in doc, f"docs/architecture.md does not name {m}"


def test_no_upward_imports():
    bad = []
    for m, p in MODULES.items():
        for n, line, _ in _imports(m, p):
            if n.split(".")[0] == "wseplan" and not m.startswith(n + ".") and _layer(n) > _layer(m) \
                    and (m, n) not in FACADE:
                bad.append(f"{p.relative_to(PKG.parent)}:{line}: {m} ({TOWER[_layer(m)][0]}) imports {n} "
                           f"({TOWER[_layer(n)][0]})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_import_cycles():
    g = _graph()
    state, cycles = {}, []

    def dfs(u, path):
        state[u] = 1
        path.append(u)
        for v in sorted(g.get(u, ())):
            if state.get(v) == 1:
                cycles.append(" -> ".join(path[path.index(v):] + [v]))
            elif not state.get(v):
                dfs(v, path)
        path.pop()
        state[u] = 2

    for m in sorted(g):
        if not state.get(m):
            dfs(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_module_over_the_line_limit():
    sizes = {m: p.read_text(encoding="utf-8").count("\n") for m, p in MODULES.items()}
    big = {m: n for m, n in sizes.items() if n > MAX_LINES and m not in SIZE_ALLOW}
    assert not big, f"modules over {MAX_LINES} lines (split them into cohesive parts): {big}"
    assert SIZE_ALLOW <= set(MODULES), "SIZE_ALLOW names a module that no longer exists: drop it"
    fixed = {m for m in SIZE_ALLOW if sizes[m] <= MAX_LINES}
    assert not fixed, f"{fixed} are within the limit now: drop them from SIZE_ALLOW"


@lru_cache(maxsize=1)
def _cli_startup_modules() -> frozenset[str]:
    """Every module in ``sys.modules`` after ``import wseplan.cli`` in a fresh interpreter (this checkout first)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PKG.parent), os.environ.get("PYTHONPATH", "")]))
    code = "import sys, wseplan.cli; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return frozenset(out.split())


def test_cli_startup_loads_only_the_cli_and_its_writers():
    loaded = _cli_startup_modules()
    ours = {m for m in loaded if m.split(".")[0] == "wseplan" and not (m == CLI or m.startswith(CLI + "."))}
    assert ours <= CLI_STARTUP, (f"`import wseplan.cli` loads {sorted(ours - CLI_STARTUP)}: import them inside the "
                                 "command that needs them (every command module loads at start-up)")
    heavy = [m for m in NOT_AT_CLI_STARTUP if m in loaded]
    assert not heavy, f"`import wseplan.cli` loads {heavy}: import them inside the command that needs them"


def test_imports_at_module_top():
    bad = []
    for m, p in MODULES.items():
        cli = m == CLI or m.startswith(CLI + ".")
        for n, line, at_top in _imports(m, p):
            if at_top or n.split(".")[0] in HEAVY or (m, n) in LAZY or (m, n) in FACADE:
                continue
            if cli and n not in _cli_startup_modules():  # kept out of the CLI's start-up on purpose
                continue
            bad.append(f"{p.relative_to(PKG.parent)}:{line}: {n}")
    assert not bad, "imports inside functions (move them to the module top, or document why not):\n" + "\n".join(bad)


def test_every_lazy_entry_is_still_a_function_level_import():
    inside = {(m, n) for m, p in MODULES.items() for n, _, at_top in _imports(m, p) if not at_top}
    stale = sorted(set(LAZY) - inside)
    assert not stale, f"LAZY names imports that are no longer inside a function: drop them: {stale}"

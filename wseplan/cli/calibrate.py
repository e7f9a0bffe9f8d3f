"""`wseplan calibrate` — fit the closed-form fabric and stream constants to the simulators, write or check them."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from .. import __file__ as package_init
from ..errors import InputError
from ..report import formats as F
from . import options as O
from .output import check_format, emit, json_out, print_table, rich_table, to_markdown


def calibrate_cmd(
    target: Optional[str] = O.target_opt("Wafer to calibrate the fabric constants for: wse2 | wse3 (default both).", default=None),
    out: Optional[str] = typer.Option(None, "--out", help="Folder to write fabric_sim_fit.yaml and stream_sim_fit.yaml "
                                                          "(default: the user data folder, $XDG_DATA_HOME/wseplan/"
                                                          "calibration; never the installed package)."),
    check: bool = typer.Option(False, "--check", help="Recompute and compare with the files in --out (default: the "
                                                      "shipped catalogs/calibration); exit 1 when a constant differs "
                                                      "by more than 1% or residuals are missing."),
    fmt: str = O.format_opt(),
    catalog: Optional[list[str]] = O.catalog_opt(),
) -> None:
    """Run the mesh and MemoryX simulators over the design grid, fit the closed-form constants with
    scipy.optimize.least_squares, and write them with their residuals (fit and held-out grids) to
    catalogs/calibration/fabric_sim_fit.yaml and stream_sim_fit.yaml. Also prints the simulated GEMV latency
    against the published WaferLLM GEMV rows (R358, R362). The files go to --out (default: the user data
    folder); the models read the shipped catalogs/calibration, so to ship new constants write them there from a
    source checkout (--out catalogs/calibration).

    One row per fitted constant: file, target, constant, value, then median/max |rel_error| on the fit grid
    and on the held-out grid (rel_error = closed_form / simulator - 1).
    Example: wseplan calibrate --check
    """
    from ..analytic.fabric import default_calibration_dir
    from ..sim import calibrate as C

    check_format(fmt)
    if target is not None and target not in C.CAL_TARGETS:
        raise InputError(f"--target: unknown {target!r}; use one of {', '.join(C.CAL_TARGETS)}")
    targets = (target,) if target else C.CAL_TARGETS
    cat = O.load_catalog(catalog)
    if check:
        cal_dir = Path(out) if out else default_calibration_dir()
        problems = C.check_files(cat, cal_dir, targets)
        if fmt == "json":
            json_out({"schema_version": 1, "checked": str(cal_dir), "targets": list(targets), "rel_tol": 0.01,
                      "ok": not problems, "problems": problems})
        elif problems:
            for p in problems:
                emit(f"calibrate --check: {p}\n")
        else:
            emit(f"calibrate --check: {cal_dir} matches a fresh calibration ({', '.join(targets)}, stream) within 1%\n")
        if problems:  # exit status 1 (not 2: the input was fine, the shipped constants are stale)
            raise typer.Exit(1)
        return
    cal_dir = _out_dir(out)
    results = C.run_calibration(cat, targets)
    existing = None
    fpath = cal_dir / "fabric_sim_fit.yaml"
    if target and not fpath.is_file():  # keep the other wafer's constants from the shipped file
        fpath = default_calibration_dir() / "fabric_sim_fit.yaml"
    if target and fpath.is_file():
        from ..catalog.load import read_yaml

        doc = read_yaml(fpath)
        existing = doc.get("targets") if isinstance(doc, dict) else None
    paths = C.write_files(cat, results, cal_dir, existing_fabric=existing)
    rows = []
    for t, r in results["fabric"].items():
        for k, v in r.values.items():
            rows.append({"file": "fabric_sim_fit.yaml", "target": t, "constant": k, "value": v,
                         "fit_points": r.fit["num_points"], "fit_median_abs_rel_error": r.fit["median_abs_rel_error"],
                         "fit_max_abs_rel_error": r.fit["max_abs_rel_error"],
                         "holdout_points": r.holdout["num_points"],
                         "holdout_max_abs_rel_error": r.holdout["max_abs_rel_error"]})
    s = results["stream"]
    for k, v in s.values.items():
        rows.append({"file": "stream_sim_fit.yaml", "target": "memoryx", "constant": k, "value": v,
                     "fit_points": s.fit["num_points"], "fit_median_abs_rel_error": s.fit["median_abs_rel_error"],
                     "fit_max_abs_rel_error": s.fit["max_abs_rel_error"], "holdout_points": s.holdout["num_points"],
                     "holdout_max_abs_rel_error": s.holdout["max_abs_rel_error"]})
    gemv_rows = C.gemv_validation(cat)
    if fmt == "csv":
        emit(F.to_csv(rows))
    elif fmt == "json":
        json_out({"schema_version": 1, "written": [str(p) for p in paths], "constants": rows,
                  "gemv_validation": gemv_rows})
    elif fmt == "md":
        emit("## Calibration against the simulators\n\n" + to_markdown(rows)
              + "\n### Simulated GEMV vs WaferLLM (WSE-2)\n\n" + to_markdown(gemv_rows))
    else:
        print_table(rich_table(rows, title=f"calibration written to {cal_dir}"),
                      rich_table(gemv_rows, title="simulated GEMV vs WaferLLM measurements (WSE-2)"))


def default_out_dir() -> Path:
    """Where calibrate writes by default: ``$XDG_DATA_HOME/wseplan/calibration`` (``~/.local/share`` when unset;
    ``%LOCALAPPDATA%`` on Windows, ``~/Library/Application Support`` on macOS)."""
    if sys.platform.startswith("win"):
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = str(Path.home() / "Library" / "Application Support")
    else:
        base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "wseplan" / "calibration"


CAL_FILES = ("fabric_sim_fit.yaml", "stream_sim_fit.yaml")


def real_parent_exists(out: str) -> bool:
    """Whether the folder ``out`` would be made in exists."""
    return Path(os.path.dirname(os.path.normpath(out)) or ".").is_dir()


def _out_dir(out: Optional[str]) -> Path:
    """The folder to write into, checked before the calibration runs: not empty, not a file, not a dangling
    symlink or a loop, no output name taken by a folder, never inside the installed package."""
    from ..report.fsops import _real_destination

    O.check_out(out)
    if out is not None and not real_parent_exists(out):  # a typo in a given folder's parent is not a new tree,
        # as for `report --out` (audit35a L5); the default user data folder is made
        raise InputError(f"--out: the folder {Path(out).parent} does not exist; create it first or give another --out")
    d = Path(out) if out else default_out_dir()
    real = _real_destination(d, what="folder")  # a symlink is written through; dangling links and loops refused
    if real.exists() and not real.is_dir():
        raise InputError(f"--out: {d} exists and is not a folder; choose another path")
    for name in CAL_FILES:
        if (real / name).is_dir() or ((real / name).exists() and not (real / name).is_file()):
            raise InputError(f"--out: {d / name} is not a regular file; remove it or choose another folder")
    package = Path(package_init).resolve().parent
    if real == package or package in real.parents:
        raise InputError(f"--out: {out or d} is inside the installed wseplan package ({package}); "
                         "choose a folder of your own")
    return d


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)

"""Frames, output files and the summary of a sweep."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputError
from .plan import Plan
from .schema import BOTTLENECKS, COLUMNS, INT_COLUMNS, NULLABLE_INT, RECOMPUTE, SCHEMA_VERSION

def to_frame(plan: Plan, parts: list[dict]):
    """Concatenate task columns (in task order) into one DataFrame with fixed dtypes and categories."""
    import pandas as pd

    groups = {g.index: g for g in plan.groups}
    if not parts:
        return pd.DataFrame(columns=list(COLUMNS))
    gidx = np.concatenate([np.full(len(p["batch"]), p["_group"]) for p in parts])
    data = {}
    for k in COLUMNS:
        if k in ("model", "target", "hardware", "device_kind", "precision", "phase"):
            continue
        data[k] = np.concatenate([np.asarray(p[k]) for p in parts])
    cats = {
        "model": [g.model_name for g in plan.groups], "target": [g.target.label for g in plan.groups],
        "hardware": [g.target.key for g in plan.groups], "device_kind": [g.target.kind for g in plan.groups],
        "precision": [g.precision for g in plan.groups], "phase": [g.phase for g in plan.groups],
    }
    cols = {}
    order = sorted(groups)
    pos = np.searchsorted(order, gidx)
    for k, vals in cats.items():
        uniq = list(dict.fromkeys(vals))
        codes = np.asarray([uniq.index(v) for v in vals])[pos]
        cols[k] = pd.Categorical.from_codes(codes, categories=uniq)
    for k in COLUMNS:
        if k in cols:
            continue
        v = data[k]
        if k == "bottleneck":
            cols[k] = pd.Categorical.from_codes(v.astype(int), categories=list(BOTTLENECKS))
        elif k == "recompute":
            cols[k] = pd.Categorical.from_codes(v.astype(int), categories=list(RECOMPUTE))
        elif k == "fits":
            cols[k] = v.astype(bool)
        elif k in INT_COLUMNS:
            cols[k] = v.astype(np.int64)
        elif k in NULLABLE_INT:
            nan_ = np.isnan(v)
            cols[k] = pd.arrays.IntegerArray(np.where(nan_, 0, v).astype(np.int64), nan_)
        else:
            cols[k] = v.astype(float)
    df = pd.DataFrame({k: cols[k] for k in COLUMNS})
    df.attrs.update(schema_version=SCHEMA_VERSION, sweep=plan.sweep.name, skipped=list(plan.skipped))
    return df


# =============================================================================================
# Output
# =============================================================================================
def frame_bytes(df, name: str) -> bytes:
    """The output file's bytes: CSV (``\\n`` line ends, shortest round-trip floats) or Parquet."""
    import io

    if name.endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InputError("output: a .parquet output needs pyarrow; pip install 'wseplan[parquet]' or name a .csv") from None
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        return buf.getvalue()
    buf = io.StringIO()
    df.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue().encode("utf-8")


def write_output(df, out_dir: str | Path, name: str) -> Path:
    """Write ``df`` to ``out_dir/name`` atomically (a temporary file in the same folder, then a rename).

    ``name`` must already be a safe file name (:meth:`Sweep.output_name`); a name that would leave ``out_dir``
    is refused.
    """
    import os
    import tempfile

    from ..report.atomic import safe_filename

    if name != safe_filename(name) or name in ("", ".", ".."):
        raise InputError(f"output: {name!r} is not a plain file name; use letters, digits, '.', '_' or '-'")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out: {out} exists and is not a folder; choose another path")
    data = frame_bytes(df, name)
    out.mkdir(parents=True, exist_ok=True)
    target = out / name
    if target.resolve().parent != out.resolve():
        raise InputError(f"output: {name!r} escapes the output folder {out}")
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.tmp-", dir=out)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


def summary_rows(df) -> list[dict]:
    """One summary row per model x target x precision: configurations, how many fit, and the fitting
    configuration with the lowest ``usd_per_mtok`` (the first such row in sweep order on a tie)."""
    import pandas as pd

    rows = []
    if len(df) == 0:
        return rows
    keys = ["model", "target", "precision"]
    for (mname, tname, prec), sub in df.groupby(keys, sort=False, observed=True):
        row = {"model": mname, "target": tname, "precision": prec, "configurations": int(len(sub)),
               "fitting": int(sub["fits"].sum())}
        ok = sub[sub["fits"] & sub["usd_per_mtok"].notna()]
        if len(ok):
            best = ok.iloc[int(np.argmin(ok["usd_per_mtok"].to_numpy()))]
            lay = ""
            if not pd.isna(best["tensor_parallel"]):
                lay = f"TP{int(best['tensor_parallel'])} PP{int(best['pipeline_parallel'])} DP{int(best['data_parallel'])}"
            row.update(best_usd_per_mtok=float(best["usd_per_mtok"]), best_batch=int(best["batch"]),
                       best_context=int(best["context"]), best_layout=lay,
                       best_tokens_per_s=float(best["tokens_per_s"]), best_bottleneck=str(best["bottleneck"]))
        else:
            row.update(best_usd_per_mtok=None, best_batch=None, best_context=None, best_layout="",
                       best_tokens_per_s=None, best_bottleneck="")
        rows.append(row)
    return rows

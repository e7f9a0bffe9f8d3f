"""Leave-one-source-out cross-validation speed (``wseplan validate --cv source``; issue 12's "keep LOSO fast").

Runs :func:`wseplan.validate.intervals.held_out` on the bundled public file (the GPU constants refitted without each
of the fit sources by the chord method, the wafer kernel constants likewise) once, from a loaded catalog, and prints
its wall time against a 120 s target (a command a user waits for, not a test).
"""
from __future__ import annotations

import time

from run import figure

from wseplan.catalog.load import load_catalog
from wseplan.validate import default_cases_path
from wseplan.validate.intervals import held_out


def main() -> None:
    cat = load_catalog()
    t0 = time.perf_counter()
    ho = held_out(default_cases_path(), catalog=cat)
    figure("validate --cv source, public file (one run)", time.perf_counter() - t0, "s", 120.0,
           higher_is_better=False, detail=f"{len(ho['rows'])} rows held out")


if __name__ == "__main__":
    main()

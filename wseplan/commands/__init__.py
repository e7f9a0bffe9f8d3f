"""CLI command modules. Each module here defines ``register(app)`` adding its commands to the Typer app.

Modules are discovered automatically (no central list to edit); they must import heavy libraries only
inside the command functions so that ``wseplan --help`` and ``wseplan fit`` stay fast.
"""
from __future__ import annotations

import importlib
import pkgutil


def register_all(app) -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        reg = getattr(mod, "register", None)
        if reg is not None:
            reg(app)

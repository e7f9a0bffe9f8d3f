"""Plug-in loading: device families that live outside wseplan.

A plug-in is a Python module that registers a device family (:func:`wseplan.devices.register`) and the schema of
its catalog entries. It is imported from a file named in ``$WSEPLAN_PLUGINS`` (``os.pathsep``-separated paths of
``.py`` files) or from an installed package's ``wseplan.devices`` entry point. The catalog loader calls
:func:`load_plugins` before it reads a ``devices:`` section, so plug-in kinds validate like built-in ones.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from .errors import InputError

_LOADED: set[str] = set()


def load_plugins() -> None:
    """Import every plug-in named in ``$WSEPLAN_PLUGINS`` and every ``wseplan.devices`` entry point, once each."""
    for raw in filter(None, os.environ.get("WSEPLAN_PLUGINS", "").split(os.pathsep)):
        path = Path(raw).expanduser()
        if path.suffix != ".py" or not path.is_file():
            raise InputError(f"WSEPLAN_PLUGINS: {raw} is not a readable .py file; name the plug-in module's path")
        key = f"file:{path.resolve()}"
        if key in _LOADED:
            continue
        _LOADED.add(key)
        name = f"wseplan_plugin_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    if "entry_points" not in _LOADED:
        _LOADED.add("entry_points")
        from importlib.metadata import entry_points

        for ep in entry_points(group="wseplan.devices"):
            ep.load()

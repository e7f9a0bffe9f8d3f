"""Bounds of every numeric command-line option, checked where the command line is parsed.

One table (:data:`RULES`, by option name) says what each ``int``/``float`` option accepts; :func:`attach` gives
every such option of every registered command the one check :func:`check_option`, so a value out of bounds
(``inf``, ``nan``, a negative count, ``--cp 0``, ``--time-limit -1``, ``--bytes 1e308``) is refused with one
line that names the option and the accepted range, before any work. ``tests/test_fuzz_options.py`` checks that
every numeric option of every command (a command added later included) has a rule.

Upper bounds follow the limits the library applies elsewhere: counts of sequences and tokens those of
:mod:`wseplan.workload` (``MAX_BATCH``, ``MAX_CONTEXT``), parallel degrees and system counts the largest GPU
count a target may name (:data:`wseplan.targets.MAX_GPUS`), magnitudes in SI units the catalog's bound
(:data:`wseplan.units.MAX_ABS_SI`, 1e30), Monte Carlo samples ``MAX_UNCERTAINTY_SAMPLES``.
"""
from __future__ import annotations

import inspect
import math
import typing
from dataclasses import dataclass

from ..errors import InputError

MAX_BATCH = 10_000_000          # == wseplan.workload.MAX_BATCH (tested)
MAX_CONTEXT = 100_000_000       # == wseplan.workload.MAX_CONTEXT (tested)
MAX_DEGREE = 2**20              # == wseplan.targets.MAX_GPUS (tested)
MAX_SI = 1e30                   # == wseplan.units.MAX_ABS_SI (tested)
MAX_SAMPLES = 100_000           # == wseplan.analytic.cost.MAX_UNCERTAINTY_SAMPLES (tested)
MAX_SEED = 2**63 - 1
MAX_TIME_LIMIT_S = 7 * 86_400.0
MAX_WORKERS = 1024
MAX_CHUNK = 10**8               # == wseplan.sweep.schema.MAX_CONFIGURATIONS (tested)
MAX_DIM = 2**31 - 1             # == wseplan.catalog.schema.MAX_COUNT (tested)
MAX_SCALE_SYSTEMS = 4096       # the largest `scale --max-systems` sweep
MAX_LIMIT_S = 1e9               # a latency limit beyond 31 years limits nothing


@dataclass(frozen=True)
class Rule:
    """``low <= value <= high`` (``<`` at an open end); ``what`` says what the number is."""

    low: float
    high: float
    what: str
    open_low: bool = False
    open_high: bool = False

    def problem(self, value) -> str | None:
        """Why ``value`` is refused, or None."""
        if value is None:
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        got = _show(value)
        if self.open_low and not value > self.low:
            return f"{self.what}: must be greater than {_show(self.low)}, got {got}"
        if not self.open_low and value < self.low:
            return f"{self.what}: must be at least {_show(self.low)}, got {got}"
        if self.open_high and not value < self.high:
            return f"{self.what}: must be less than {_show(self.high)}, got {got}"
        if value > self.high:
            return f"{self.what}: at most {_show(self.high)}, got {got}"
        return None


def _show(v) -> str:
    """A bound or a value in an error line: whole numbers with thousands separators, others in 6 digits."""
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    return f"{v:.6g}"


_COUNT = lambda what, high: Rule(1, high, what)  # noqa: E731
_DEGREE = _COUNT("a parallel degree", MAX_DEGREE)

RULES: dict[str, Rule] = {
    "--batch": _COUNT("sequences", MAX_BATCH),
    "--context": _COUNT("tokens", MAX_CONTEXT),
    "--output-tokens": _COUNT("tokens", MAX_CONTEXT),
    "--train-tokens": Rule(0, MAX_SI, "tokens in the run", open_low=True),
    "--reserve": Rule(0, 1, "a fraction of memory kept back", open_high=True),
    "--zero": Rule(0, 3, "a ZeRO stage"),
    "--tp": _DEGREE, "--pp": _DEGREE, "--dp": _DEGREE, "--cp": _DEGREE, "--vpp": _DEGREE, "--ep": _DEGREE, "--adp": _DEGREE,
    "--tensor-parallel": _DEGREE,
    "--micro-batch": _COUNT("sequences per micro-batch", MAX_BATCH),
    "--systems": _COUNT("systems", MAX_DEGREE),
    "--wafers": _COUNT("wafers per replica", MAX_DEGREE),
    "--max-systems": _COUNT("systems", MAX_SCALE_SYSTEMS),
    "--uncertainty": Rule(0, MAX_SAMPLES, "Monte Carlo samples (0: off)"),
    "--seed": Rule(0, MAX_SEED, "a seed"),
    "--time-limit": Rule(0, MAX_TIME_LIMIT_S, "seconds of solver time", open_low=True),
    "--workers": _COUNT("worker processes", MAX_WORKERS),
    "--chunk": _COUNT("configurations per task", MAX_CHUNK),
    "--k": _COUNT("elements", MAX_DIM), "--n": _COUNT("elements", MAX_DIM), "--m": _COUNT("elements", MAX_DIM),
    "--bytes": Rule(0, MAX_SI, "bytes", open_low=True),
    "--clock-hz": Rule(0, MAX_SI, "Hz", open_low=True),
    "--bandwidth": Rule(0, MAX_SI, "bytes/s", open_low=True),
    "--prefetch": Rule(0, MAX_DEGREE, "layers in flight"),
    # serving (wseplan serve; --min-speed also in cost and compare)
    "--input-len": _COUNT("tokens", MAX_CONTEXT),
    "--output-len": _COUNT("tokens", MAX_CONTEXT),
    "--concurrency": _COUNT("requests in flight", MAX_BATCH),
    "--rate": Rule(0, 1e12, "requests/s", open_low=True, open_high=True),  # as serve() takes it
    "--ttft-limit": Rule(0, MAX_LIMIT_S, "seconds", open_low=True),
    "--tpot-limit": Rule(0, MAX_LIMIT_S, "seconds", open_low=True),
    "--percentile": Rule(0, 100, "a percentile", open_low=True, open_high=True),
    "--draft-tokens": Rule(1, 16, "draft tokens per step"),
    "--acceptance": Rule(0, 1, "a per-token acceptance probability", open_high=True),
    "--utilization": Rule(0, 1, "a load fraction", open_low=True, open_high=True),
    "--min-speed": Rule(0, MAX_SI, "tokens/s per user", open_low=True),
}


def check_option(ctx, param, value):
    """Click callback: ``value`` if it is within its option's :data:`RULES` entry; else an
    :class:`~wseplan.errors.InputError` ``--option: what: the range, got value`` (one line, exit status 2, the
    style of every other input error)."""
    rule = RULES.get(param.opts[0]) if param.opts else None
    why = rule.problem(value) if rule is not None else None
    if why is not None:
        raise InputError(f"{param.opts[0]}: {why}")
    return value


def _numeric(annotation) -> bool:
    if annotation in (int, float):
        return True
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return len(args) == 1 and args[0] in (int, float)


def numeric_options(app) -> dict[str, list[str]]:
    """``{command path: [numeric option names]}`` for every command of ``app`` (sub-apps included)."""
    out: dict[str, list[str]] = {}
    for path, info, params in _commands(app, ()):
        out[" ".join(path)] = [decl for decl, ann, _ in params if _numeric(ann)]
    return out


def _commands(app, prefix):
    for c in app.registered_commands:
        name = c.name or c.callback.__name__
        params = []
        hints = None  # the callback's resolved annotations, evaluated once (string annotations: PEP 563)
        for p in inspect.signature(c.callback).parameters.values():
            info = p.default
            decls = getattr(info, "param_decls", None)
            if decls and str(decls[0]).startswith("--"):
                ann = p.annotation
                if isinstance(ann, str):
                    if hints is None:
                        hints = _resolve(c.callback)
                    ann = hints.get(p.name)
                params.append((str(decls[0]), ann, info))
        yield prefix + (name,), c, params
    for g in app.registered_groups:
        yield from _commands(g.typer_instance, prefix + (g.name,))


def _resolve(fn) -> dict:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # pragma: no cover - an unresolvable annotation is simply not numeric
        return {}


def attach(app) -> None:
    """Give every numeric option of every command of ``app`` that has a rule the :func:`check_option` callback
    (an option with its own callback keeps it)."""
    for _, _, params in _commands(app, ()):
        for decl, ann, info in params:
            if _numeric(ann) and decl in RULES and getattr(info, "callback", None) is None:
                info.callback = check_option

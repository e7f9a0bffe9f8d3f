"""Numbers of any size or kind in every numeric command-line option (issue 15, item 4).

Every ``int``/``float`` option of every registered command (found by walking the Typer app, so a command added
later, ``wseplan serve`` included, is covered as soon as it is registered) must have a bound in
:data:`wseplan.cli.bounds.RULES`; a hypothesis family (fixed seed) then gives each option values outside its
bound (inf, -inf, nan, negatives, zero where the bound is positive, the bound's neighbours, 4,301-digit
integers, huge floats) and checks the CLI contract: exit 2, one ``error:`` line naming the option, nothing on
stdout, no traceback, nothing written. The refusal happens while the command line is parsed, so each case
costs milliseconds. ``benchmarks/adversarial.py`` repeats the class against the installed script.
"""
from __future__ import annotations

import math
import os
import signal
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wseplan.cli as cli
from wseplan.cli import bounds as B
from wseplan.cli import main

OPTIONS = B.numeric_options(cli.app)
PAIRS = sorted((cmd, opt) for cmd, opts in OPTIONS.items() for opt in opts)


def test_every_numeric_option_has_a_bound():
    assert PAIRS, "no numeric options found: the walk of the Typer app is broken"
    missing = [(c, o) for c, o in PAIRS if o not in B.RULES]
    assert not missing, f"numeric options without a bound in wseplan/cli/bounds.py RULES: {missing}"


def test_every_numeric_option_is_checked():
    """attach() gave every ruled option the check (an option with its own callback would escape it)."""
    import typer.main

    cmd = typer.main.get_command(cli.app)
    unchecked = []

    def walk(group, prefix):
        for name, sub in group.commands.items():
            if hasattr(sub, "commands"):
                walk(sub, prefix + [name])
                continue
            for p in sub.params:
                ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
                if ann in (int, float) and p.opts[0] in B.RULES and p.callback is None:
                    unchecked.append((" ".join(prefix + [name]), p.opts[0]))

    walk(cmd, [])
    assert not unchecked, unchecked


def test_bounds_follow_the_library_limits():
    from wseplan.analytic.cost import MAX_UNCERTAINTY_SAMPLES
    from wseplan.catalog.schema import MAX_COUNT
    from wseplan.sweep.schema import MAX_CONFIGURATIONS
    from wseplan.targets import MAX_GPUS
    from wseplan.units import MAX_ABS_SI
    from wseplan.workload import MAX_BATCH, MAX_CONTEXT

    assert (B.MAX_BATCH, B.MAX_CONTEXT, B.MAX_DEGREE, B.MAX_SI, B.MAX_SAMPLES, B.MAX_CHUNK, B.MAX_DIM) == (
        MAX_BATCH, MAX_CONTEXT, MAX_GPUS, MAX_ABS_SI, MAX_UNCERTAINTY_SAMPLES, MAX_CONFIGURATIONS, MAX_COUNT)


@pytest.mark.parametrize("opt", sorted(B.RULES))
def test_rule_edges(opt):
    r = B.RULES[opt]
    inside = [r.high] if not r.open_high else [r.high - (r.high - r.low) * 1e-9]
    inside.append(r.low if not r.open_low else r.low + max(abs(r.low), 1) * 1e-9)
    for v in inside:
        assert r.problem(v) is None, (opt, v)
    for v in (math.inf, -math.inf, math.nan, r.high * 2 + 1, r.low - 1):
        assert r.problem(v) is not None, (opt, v)
    if r.open_low:
        assert r.problem(r.low) is not None
    if r.open_high:
        assert r.problem(r.high) is not None


# ------------------------------------------------------------------------------------------------ the family
def _float_opt(cmd: str, opt: str) -> bool:
    return _annotation(cmd, opt) is float


def _annotation(cmd: str, opt: str):
    for path, _, params in B._commands(cli.app, ()):
        if " ".join(path) == cmd:
            for decl, ann, _ in params:
                if decl == opt:
                    args = [a for a in typing.get_args(ann) if a is not type(None)] or [ann]
                    return args[0]
    raise KeyError((cmd, opt))


def _required(cmd: str) -> list[str]:
    """Placeholder values for the required arguments and options of ``cmd`` (the check fires while parsing)."""
    import typer.main

    node = typer.main.get_command(cli.app)
    for part in cmd.split():
        node = node.commands[part]
    out = []
    for p in node.params:
        if not p.required:
            continue
        ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
        val = "1" if ann in (int, float) else "x"
        out += [val] if p.param_type_name == "argument" else [p.opts[0], val]
    return out


@st.composite
def _bad_value(draw):
    cmd, opt = draw(st.sampled_from(PAIRS))
    r = B.RULES[opt]
    is_float = _float_opt(cmd, opt)
    below = r.low if r.open_low else r.low - (1e-9 * max(1, abs(r.low)) if is_float else 1)
    above = r.high if r.open_high else (r.high * (1 + 1e-9) + 1e-9 if is_float else r.high + 1)
    choices = [st.sampled_from(["-1", "-0.5" if is_float else "-7", str(int(below)) if not is_float else repr(below),
                                repr(above) if is_float else str(int(above))]),
               st.integers(max_value=-1).map(str),
               st.integers(4301, 5000).map(lambda n: "9" * n)]
    if is_float:
        choices += [st.sampled_from(["inf", "-inf", "nan", "NaN", "Infinity", "1e308", "1e999", "-1e308"]),
                    st.floats(min_value=r.high, exclude_min=not r.open_high, allow_infinity=False).map(repr)]
    else:
        choices += [st.integers(min_value=int(r.high) + 1, max_value=2**70).map(str)]
    value = draw(st.one_of(*choices))
    if not is_float and value.lstrip("-").isdigit() and len(value) < 4300:
        v = int(value)
        if r.problem(v) is None:  # not out of bounds after all (e.g. the generated neighbour of a float bound)
            value = "-1" if r.low >= 0 else str(int(r.high) + 1)
    return cmd, opt, value


class _Hang(Exception):
    pass


@settings(max_examples=250, deadline=None, derandomize=True, database=None, print_blob=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=_bad_value())
def test_fuzz_numeric_options_refused_in_one_line(capsys, tmp_path_factory, case):
    cmd, opt, value = case
    work = tmp_path_factory.mktemp("opt")
    old_cwd = os.getcwd()
    os.chdir(work)

    def alarm(signum, frame):
        raise _Hang(f"{cmd} {opt}={value[:40]} ran past 10 s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(10)
    try:
        capsys.readouterr()
        argv = [*cmd.split(), *_required(cmd), f"{opt}={value}"]
        rc = main(argv)
        out, err = capsys.readouterr()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(old_cwd)
    assert rc == 2, (argv[:6], rc, err[-300:])
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("error: "), err[-300:]
    assert opt in err, err
    assert len(err) < 1200, len(err)  # a 4,301-digit value is not echoed whole
    assert out == "" and os.listdir(work) == [], (out[:200], os.listdir(work))

"""Start-up shortcuts of the CLI change nothing a user sees (issue 14; docs/benchmarks.md, "Cold start").

``wseplan <command> ...`` runs on an app holding only that command (:func:`wseplan.cli._app_for`), because typer
builds the click objects of every registered command on each call. Help texts, usage errors and outputs must be
those of the full app.
"""
from __future__ import annotations

import pytest

import wseplan.cli as C
from wseplan.cli import COMMANDS, _app_for, app, main


def _run(the_app, args, capsys):
    """(stdout, error message or None, exit code) of one call, as :func:`wseplan.cli._main` sees it."""
    Exit, Abort, ClickException, _ = C._click_exceptions()
    err, code = None, 0
    try:
        rv = the_app(args=list(args), prog_name="wseplan", standalone_mode=False)
        code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
    except Exit as exc:
        code = exc.exit_code
    except ClickException as exc:
        err, code = exc.format_message(), 2
    return capsys.readouterr().out, err, code


def test_app_for_picks_the_command_or_the_full_app():
    assert _app_for(["--help"]) is app
    assert _app_for([]) is app
    assert _app_for(["--version"]) is app
    assert _app_for(["fitt", "llama-70b"]) is app  # misspelled: the full app suggests "fit"
    assert _app_for(["--debug", "--help"]) is app
    one = _app_for(["fit", "llama-70b"])
    assert one is not app and [c.name for c in one.registered_commands] == ["fit"]
    assert [c.name for c in _app_for(["--debug", "time", "x"]).registered_commands] == ["time"]
    assert [g.name for g in _app_for(["catalog", "list"]).registered_groups] == ["catalog"]


@pytest.mark.parametrize("command", COMMANDS)
def test_command_help_is_the_full_apps(command, capsys):
    full = _run(app, [command, "--help"], capsys)
    own = _run(_app_for([command, "--help"]), [command, "--help"], capsys)
    assert own == full
    assert f"Usage: wseplan {command}" in full[0]


@pytest.mark.parametrize("args", [
    ["fit"],                                   # missing argument
    ["fit", "llama-70b", "--bogus"],           # unknown option
    ["fit", "llama-70b", "--batch", "many"],   # bad value
    ["catalog", "lst"],                        # misspelled sub-command of a group
    ["simulate"],                              # a group alone
])
def test_usage_errors_are_the_full_apps(args, capsys):
    _, full_err, full_code = _run(app, args, capsys)
    _, own_err, own_code = _run(_app_for(args), args, capsys)
    assert full_err and full_code == 2
    assert (own_err, own_code) == (full_err, full_code)


def test_fit_output_is_unchanged_through_main(capsys):
    args = ["fit", "llama-70b", "--target", "wse3", "-f", "json"]
    full = _run(app, args, capsys)
    assert main(args) == 0
    assert capsys.readouterr().out == full[0]


def test_fit_does_not_build_the_full_app_nor_import_numpy_ma():
    """A cold ``wseplan fit`` registers only its own command (the full app, sixteen command modules, is built on
    first use) and never imports ``numpy.ma`` (``np.unique``'s first plain call does: ~45 ms of a cold start)."""
    import subprocess
    import sys
    code = ("import sys, io, contextlib; import wseplan.cli as C\n"
            "with contextlib.redirect_stdout(io.StringIO()): rc = C.main(['fit', 'llama-70b', '--target', 'wse3'])\n"
            "print(rc, 'numpy.ma' in sys.modules, bool(C._FULL_APP), 'wseplan.cli.sweep' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "False", "False", "False"]


def test_distinct_is_np_unique():
    import numpy as np
    from wseplan.analytic.rows import distinct
    rng = np.random.default_rng(7)
    cases = [np.array([]), np.array([3.0]), rng.integers(0, 5, 50), rng.normal(size=20).round(1),
             np.array([2.0, np.nan, 1.0, np.nan, 2.0]), np.array([[4, 1], [1, 4]])]
    for a in cases:
        got, want = distinct(a), np.unique(a)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), a


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_and_group_help_has_an_example(command, capsys):
    """Every command's --help shows an example, the group pages (`simulate`, `catalog`) too (audit31b L3); no run of
    spaces from a docstring's indentation leaks into a sentence."""
    out = _run(app, [command, "--help"], capsys)[0]
    assert "Example" in out
    prose = out.split("Options:")[0].splitlines()[1:]  # the description (the option and command tables align)
    assert not any("     " in line.strip() for line in prose)


def test_catalog_show_gives_unset_fields_as_null(capsys):
    """audit31b L2: an unset field was the string "None" in table, JSON and CSV."""
    import json

    assert main(["catalog", "show", "llama-3-8b", "-f", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows if isinstance(rows, list) else rows["rows"]
    head = next(r for r in rows if r["field"] == "head_dim")
    assert head["value"] is None
    assert main(["catalog", "show", "cs3", "-f", "csv"]) == 0
    assert "None" not in capsys.readouterr().out


def test_debug_after_the_command_is_the_root_option(capsys):
    """audit32b L5: `wseplan fit llama-70b --target wse3 --debug` printed a traceback about an unknown option --debug
    (only `wseplan --debug fit ...` worked); the root option is taken wherever it stands."""
    from wseplan.cli import main

    assert main(["fit", "llama-70b", "--target", "wse3", "--debug", "-f", "json"]) == 0
    assert '"fits": true' in capsys.readouterr().out


def test_a_stage_without_blocks_says_what_it_holds(capsys):
    """audit32b L5: a failed fit's stage table showed `-1--1` for a wafer holding the embedding (or the LM head) alone."""
    from wseplan.cli import main

    from wseplan.report.formats import layer_range
    from wseplan.records import Stage

    main(["fit", "llama-3.1-70b", "--target", "cs3", "--batch", "256", "--context", "131072"])
    out = capsys.readouterr().out
    assert "embedding only" in out and "│ 0      │ -1" not in out  # (the LM head's wafer is among the rows cut)
    head = Stage(device=81, first_layer=-1, last_layer=-1, embedding=False, lm_head=True, bytes=1.0)
    assert layer_range(head) == "LM head only"
    assert layer_range(head.model_copy(update={"first_layer": 3, "last_layer": 5})) == "3-5"

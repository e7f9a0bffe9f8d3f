"""The ``wseplan`` command line: a Typer app with one module per command (``wseplan/cli/<command>.py``).

Shared option definitions live in :mod:`.options`, the one output writer (table, json, csv, md) in
:mod:`.output`. Heavy libraries (pandas, scipy, pulp, matplotlib) load only inside the commands that need
them, so ``wseplan --help`` and ``wseplan fit`` start fast.

Errors: any :class:`~wseplan.errors.WseplanError` or usage error prints one red line and exits 2;
``--debug`` (or ``WSEPLAN_DEBUG=1``) shows the traceback instead.
"""
from __future__ import annotations

import importlib
import os
import signal
import sys

# The CLI's numpy work is elementwise; OpenBLAS's thread pool only costs start-up time (~40 ms measured).
# Users can still set the variable themselves.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# No pydantic plug-ins (e.g. logfire's) are used by the CLI; looking for them scans every installed package's entry
# points when the first model class is built (~7 ms of a cold `wseplan fit`). Set the variable empty to look again.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process ended by Ctrl-C


def _interrupted() -> int:
    try:
        sys.stderr.write("\nerror: interrupted\n" if sys.stderr.isatty() else "error: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed
        pass
    return INTERRUPTED


def _exit_interrupted(signum, frame):  # pragma: no cover - signal handler outside a command
    _interrupted()
    os._exit(INTERRUPTED)


# Run as the installed `wseplan` script, a Ctrl-C while the CLI is still importing ends it with one line
# (main() restores Python's KeyboardInterrupt for the command itself). Imported as a library (notebooks,
# tests), the handler is left alone.
if os.path.basename(sys.argv[0] if sys.argv else "") in ("wseplan", "wseplan.exe"):
    signal.signal(signal.SIGINT, _exit_interrupted)

import typer  # noqa: E402

from .. import __version__  # noqa: E402
from ..errors import WseplanError  # noqa: E402
from ..report.formats import safe_text  # noqa: E402

_HELP = ("Plan AI compute: does a model fit, how fast, how many systems, what cost — Cerebras WSE vs GPU clusters.\n\n"
         "Example: wseplan fit llama-70b --target wse3")

_STATE = {"debug": False}

# One module per command, registered in this order (the order of `wseplan --help`). Each module defines
# ``register(app)``; adding a command is one module plus its name here.
COMMANDS = ("fit", "time", "serve", "stream", "scale", "cost", "compare", "place", "fleet", "report", "check", "sweep",
            "validate", "simulate", "calibrate", "catalog")


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"wseplan {__version__}\n")
        raise typer.Exit()


def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors."),
          version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    _STATE["debug"] = debug


def _new_app(commands: tuple[str, ...]) -> typer.Typer:
    """A Typer app with the root options (``--debug``, ``--version``) and the given commands registered."""
    a = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None, pretty_exceptions_enable=False,
                    help=_HELP)
    a.callback()(_root)
    for name in commands:
        importlib.import_module(f"{__name__}.{name}").register(a)
    importlib.import_module(f"{__name__}.bounds").attach(a)  # every numeric option checked against its bounds
    return a


_FULL_APP: list[typer.Typer] = []


def _full_app() -> typer.Typer:
    """The app with every command (built on first use: importing and registering all sixteen command modules costs
    ~0.1 s that ``wseplan <command>`` does not need)."""
    if not _FULL_APP:
        _FULL_APP.append(_new_app(COMMANDS))
    return _FULL_APP[0]


def __getattr__(name: str):
    """``wseplan.cli.app``: the full app, built when first asked for (tests and typer's CliRunner use it)."""
    if name == "app":
        return _full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: root options that may come before the command name and still let :func:`_app_for` pick the command's own app
_ROOT_FLAGS = ("--debug",)


def _app_for(args: list[str]) -> typer.Typer:
    """The app to run ``args`` with: for ``wseplan <command> ...`` an app holding only that command (typer builds the
    click objects of every registered command on each call, ~25 ms for all of them, ~2 ms for one; the command's
    help, usage lines and errors are the same), else the full app (``wseplan.cli.app``) (``--help``, no command, an unknown or
    misspelled command, ``--version``)."""
    for a in args:
        if a not in _ROOT_FLAGS:
            return _new_app((a,)) if a in COMMANDS else _full_app()
    return _full_app()


MAX_ERROR_WORD = 512
"""Longest run of non-blank characters an error line shows whole (file paths fit); longer ones (a 10,000-character
name, a 4,301-digit number echoed back) are cut to their start and end with the length between."""


def _one_line(msg: str) -> str:
    words = []
    for w in str(msg).split():
        if len(w) > MAX_ERROR_WORD:
            w = f"{w[:160]}…({len(w):,} characters)…{w[-60:]}"
        words.append(w)
    return safe_text(" ".join(words))


def main(argv: list[str] | None = None) -> int:
    """Console entry point: run the app, turning errors into one line and exit status 2, and Ctrl-C into one
    line and exit status 130."""
    try:
        if signal.getsignal(signal.SIGINT) is _exit_interrupted:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        return _main(argv)
    except KeyboardInterrupt:
        return _interrupted()


def _main(argv: list[str] | None) -> int:
    Exit, Abort, ClickException, NoArgsIsHelp = _click_exceptions()
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("WSEPLAN_DEBUG") == "1"
    if "--debug" in args:  # a root option, also where it follows the command (audit32b L5: a traceback about it)
        args = ["--debug"] + [a for a in args if a != "--debug"]
    if sys.stdout is None:  # started with its standard output closed (`>&-`)
        sys.stderr.write("error: standard output is closed; redirect it to a file or a pipe\n")
        return 2
    for stream in (sys.stdout, sys.stderr):  # a terminal or redirect in a legacy encoding (cp1252, ascii): a character
        enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if stream is not None and not enc.startswith("utf") and hasattr(stream, "reconfigure"):
            try:  # it cannot show (x, superscripts, box lines) becomes '?', not a traceback (audit30a M1)
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):
                pass
    try:
        rv = _app_for(args)(args=args, prog_name="wseplan", standalone_mode=False)
        sys.stdout.flush()  # a full disk or a closed pipe fails here, inside the error handling, not at exit
        if rv == INTERRUPTED and not isinstance(rv, bool):  # typer turns Ctrl-C into Exit(130), returned silently
            return _interrupted()
        if isinstance(rv, int) and not isinstance(rv, bool):  # typer.Exit(code) is returned, not raised
            return rv
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as a filter does
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141
    except OSError as exc:
        if debug:
            raise
        sys.stderr.write(f"error: cannot write the output ({_one_line(exc.strerror or str(exc))}); "
                         "check the disk or the redirect\n")
        return 2
    except Exit as exc:
        code = getattr(exc, "exit_code", 0)
        return _interrupted() if code == INTERRUPTED else code
    except Abort:  # click's answer to Ctrl-C or end of input at a prompt
        return _interrupted()
    except NoArgsIsHelp as exc:  # `wseplan` or a group alone: show help, as --help does
        sys.stdout.write(str(getattr(exc, "ctx", None) and exc.ctx.get_help() or exc) + "\n")
        return 0
    except ClickException as exc:  # usage errors: bad option, missing argument
        if debug:
            raise
        ctx = getattr(exc, "ctx", None)
        where = getattr(ctx, "command_path", None) or "wseplan " + " ".join(a for a in args[:1] if not a.startswith("-"))
        sys.stderr.write(f"error: {_one_line(exc.format_message())} (see `{_one_line(where)} --help`)\n")
        return 2
    except WseplanError as exc:
        if debug:
            raise
        sys.stderr.write(_red(f"error: {_one_line(str(exc))}") + "\n")
        return 2
    return 0


def _click_exceptions():
    """Exit/Abort/ClickException/NoArgsIsHelpError from typer's vendored click (>= 0.20) or click itself."""
    try:
        from typer._click.exceptions import ClickException, NoArgsIsHelpError
        from typer.exceptions import Abort, Exit
    except ImportError:  # older typer on top of click
        from click.exceptions import Abort, ClickException, Exit

        try:
            from click.exceptions import NoArgsIsHelpError
        except ImportError:
            NoArgsIsHelpError = type("NoArgsIsHelpError", (Exception,), {})
    return Exit, Abort, ClickException, NoArgsIsHelpError


def _red(text: str) -> str:
    return f"\x1b[31m{text}\x1b[0m" if sys.stderr.isatty() else text


def console() -> None:  # pragma: no cover - the installed console script
    """The installed ``wseplan`` script: :func:`main`, then exit with its status. A Ctrl-C that arrives after the
    command finished and its output was flushed (while Python shuts down) is ignored: the status is the command's,
    never a traceback or death by signal."""
    try:
        rc = main()
        try:
            sys.stdout.flush()
        except (OSError, ValueError, AttributeError):  # a broken pipe, a closed stream, no stream at all
            pass
    except KeyboardInterrupt:  # between the command's end and here
        rc = _interrupted()
    # The command is over and its output flushed. Python's finalization restores the default SIGINT action (death
    # by signal, status -2) before it unloads numpy, pandas, matplotlib ... (tens of ms): a Ctrl-C then would kill
    # the process with nothing left to interrupt, so it is ignored and the process ends with the command's status.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(rc)

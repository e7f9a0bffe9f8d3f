"""Safety (issue 7, items 2 and 6): light start-up, safe YAML, no eval/exec, no network, bounded memory.

The start-up, network and memory checks run the CLI in a fresh subprocess (a cold interpreter is the point:
``sys.modules`` and socket state of the pytest process would hide what a real invocation does). Each
subprocess runs in an empty temporary folder that must stay empty.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import wseplan
from wseplan.catalog import read_yaml
from wseplan.cli import main
from wseplan.errors import CatalogError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(wseplan.__file__).resolve().parent
HEAVY = ("pandas", "scipy", "pulp", "matplotlib")


def _run_python(code: str, cwd: Path, *, extra_path: list[Path] = (), env: dict | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter importing wseplan from this checkout."""
    e = dict(os.environ)
    e.pop("WSEPLAN_DEBUG", None)
    e["PYTHONPATH"] = os.pathsep.join([*map(str, extra_path), str(PACKAGE.parent), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# start-up: fit and --help import no heavy library
# ---------------------------------------------------------------------------------------------
_IMPORTS_AFTER = """
import io, json, sys, contextlib
from wseplan.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main({argv!r})
print(json.dumps({{"rc": rc, "heavy": [m for m in {heavy!r} if m in sys.modules], "out": len(out.getvalue())}}))
"""


@pytest.mark.parametrize("argv", [
    ["fit", "llama-70b", "--target", "wse3"],
    ["fit", "llama-70b", "--target", "h100x8", "--format", "json"],
    ["fit", "llama-70b", "--target", "cs3x2", "--phase", "train", "--format", "csv"],
    ["--help"],
    ["fit", "--help"],
])
def test_fit_does_not_import_heavy(tmp_path, argv):
    """`wseplan fit` and `wseplan --help` answer without importing pandas, scipy, pulp or matplotlib."""
    proc = _run_python(_IMPORTS_AFTER.format(argv=argv, heavy=HEAVY), tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec["rc"] == 0 and rec["out"] > 0, rec
    assert rec["heavy"] == [], f"{' '.join(argv)} imported {rec['heavy']}; import them inside the commands that need them"
    assert list(tmp_path.iterdir()) == []


def test_heavy_import_check_can_fail(tmp_path):
    """The check above sees a heavy import when one happens (numpy stands in for the heavy libraries here)."""
    code = _IMPORTS_AFTER.format(argv=["fit", "llama-70b", "--target", "wse3"], heavy=("numpy",))
    rec = json.loads(_run_python(code, tmp_path).stdout.strip().splitlines()[-1])
    assert rec["heavy"] == ["numpy"]


# ---------------------------------------------------------------------------------------------
# YAML is loaded safely
# ---------------------------------------------------------------------------------------------
_UNSAFE_DOCS = [
    "!!python/object/apply:os.system ['touch {marker}']\n",
    "defaults: !!python/object/apply:os.system ['touch {marker}']\n",
    "gpus: {{x: !!python/object/new:subprocess.Popen [['touch', '{marker}']]}}\n",
    "name: !!python/name:os.system\nlayers: []\n",
    "name: n\nlayers: [!!python/object:wseplan.errors.InputError {{}}]\n",
]


@pytest.mark.parametrize("doc", _UNSAFE_DOCS)
def test_yaml_python_tags_rejected(tmp_path, capsys, monkeypatch, doc):
    """Python object tags in catalog and layer-list YAML give a one-line error (exit 2) and run nothing."""
    work, inputs = tmp_path / "work", tmp_path / "inputs"
    work.mkdir()
    (inputs / "cat").mkdir(parents=True)
    marker = tmp_path / "MARKER"
    text = doc.format(marker=marker)
    (inputs / "cat" / "evil.yaml").write_text(text)
    (inputs / "evil.yaml").write_text(text)
    monkeypatch.chdir(work)
    for argv in (["fit", "llama-70b", "--target", "wse3", "--catalog", str(inputs / "cat")],
                 ["fit", str(inputs / "evil.yaml"), "--target", "wse3"],
                 ["catalog", "list", "--catalog", str(inputs / "cat")]):
        capsys.readouterr()
        rc = main(argv)
        out, err = capsys.readouterr()
        assert rc == 2, (argv, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert out == ""
    assert not marker.exists(), "a YAML tag ran a command"
    assert list(work.iterdir()) == []
    with pytest.raises(CatalogError, match="malformed YAML"):
        read_yaml(inputs / "evil.yaml")


def _package_sources() -> list[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 10, files  # the scan below must see the package
    return files


def test_yaml_loaders_are_safe():
    """The package never names PyYAML's unsafe loaders (yaml.Loader, FullLoader, UnsafeLoader, full/unsafe_load)."""
    bad = ("yaml.Loader", "yaml.FullLoader", "yaml.UnsafeLoader", "yaml.CLoader", "yaml.CFullLoader",
           "yaml.CUnsafeLoader", "yaml.unsafe_load", "yaml.full_load", "yaml.load_all(")
    hits = [f"{p.relative_to(PACKAGE.parent)}: {b}" for p in _package_sources() for b in bad if b in p.read_text(encoding="utf-8")]
    assert hits == []
    unsafe = yaml.safe_load  # the loaders the package may use construct no Python objects
    with pytest.raises(yaml.YAMLError):
        unsafe("!!python/object/apply:os.system ['true']")


# ---------------------------------------------------------------------------------------------
# no eval / exec in the package
# ---------------------------------------------------------------------------------------------
_FORBIDDEN_CALLS = {"eval", "exec"}


def _forbidden_calls(source: str) -> list[tuple[int, str]]:
    """Calls of eval/exec by name or as an attribute (builtins.eval, frame.eval), with line numbers."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in _FORBIDDEN_CALLS:
                out.append((node.lineno, name))
    return out


def test_scanner_finds_eval_and_exec():
    assert _forbidden_calls("x = eval('1+1')\nexec('y=2')\nimport builtins\nbuiltins.eval('3')\n") == [
        (1, "eval"), (2, "exec"), (4, "eval")]
    assert _forbidden_calls("evaluate(1)\nself.executor.run()\n") == []


def _unparsable() -> list[str]:
    bad = []
    for p in _package_sources():
        try:
            ast.parse(p.read_text(encoding="utf-8"))
        except SyntaxError as exc:
            bad.append(f"{p.relative_to(PACKAGE.parent)}:{exc.lineno}: {exc.msg}")
    return bad


def test_no_eval_or_exec_in_package():
    hits = []
    for p in _package_sources():
        try:
            calls = _forbidden_calls(p.read_text(encoding="utf-8"))
        except SyntaxError:  # reported by test_package_parses_on_this_python
            continue
        hits += [f"{p.relative_to(PACKAGE.parent)}:{line}: {name}()" for line, name in calls]
    assert hits == [], "eval/exec in the package: " + "; ".join(hits)


def test_package_parses_on_this_python():
    """Every module of the package parses on the running Python (requires-python >= 3.11)."""
    assert _unparsable() == []


# ---------------------------------------------------------------------------------------------
# nothing reaches the network at run time
# ---------------------------------------------------------------------------------------------
_SITECUSTOMIZE = '''
"""Test shim: every attempt to open a network connection raises and is recorded in $WSEPLAN_NET_LOG."""
import os
import socket

_LOG = os.environ["WSEPLAN_NET_LOG"]


def _blocked(what):
    def f(*args, **kwargs):
        with open(_LOG, "a") as fh:
            fh.write(f"{what} {args[1:] if what.startswith('socket.') else args}\\n")
        raise OSError(f"network blocked by test: {what}")
    return f


socket.socket.connect = _blocked("socket.connect")
socket.socket.connect_ex = _blocked("socket.connect_ex")
socket.socket.sendto = _blocked("socket.sendto")
socket.create_connection = _blocked("create_connection")
socket.getaddrinfo = _blocked("getaddrinfo")
'''

_CLI_RUNS = """
import io, json, sys, contextlib
from wseplan.cli import main
results = []
for argv in {runs!r}:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    results.append([argv, rc, err.getvalue()[-300:]])
print(json.dumps(results))
"""


@pytest.fixture
def blocked_net(tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    log = tmp_path / "net.log"
    work = tmp_path / "work"
    work.mkdir()
    return shim, log, work


def test_network_block_is_effective(blocked_net):
    """The shim really blocks (and logs) a connection attempt, so the test below can fail."""
    shim, log, work = blocked_net
    code = """
    import socket
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    except OSError as exc:
        print("blocked" if "blocked by test" in str(exc) else "other")
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", 9))
    except OSError as exc:
        print("blocked" if "blocked by test" in str(exc) else "other")
    """
    proc = _run_python(code, work, extra_path=[shim], env={"WSEPLAN_NET_LOG": str(log)})
    assert proc.stdout.split() == ["blocked", "blocked"], proc.stderr
    assert log.read_text().count("\n") == 2


def test_cli_works_without_network(blocked_net):
    """fit (wafer and GPU, every format), catalog list/show and --help work with networking blocked,
    never try to connect, and write nothing to the working folder."""
    shim, log, work = blocked_net
    runs = [["fit", "llama-70b", "--target", "wse3"],
            ["fit", "llama-70b", "--target", "h100x8", "--format", "json"],
            ["fit", "llama-70b", "--target", "cs3x2", "--phase", "train", "--format", "csv"],
            ["fit", "llama-3-8b", "--target", "h100", "--phase", "prefill", "--format", "md"],
            ["catalog", "list", "hardware", "--format", "csv"],
            ["catalog", "show", "h100", "--format", "json"],
            ["--help"]]
    proc = _run_python(_CLI_RUNS.format(runs=runs), work, extra_path=[shim], env={"WSEPLAN_NET_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r[1] for r in results] == [0] * len(runs), results
    assert not log.exists(), "network access attempted: " + log.read_text()
    assert list(work.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# bounded memory on absurd input (found while fuzzing)
# ---------------------------------------------------------------------------------------------
_LIMITED = """
import resource, sys, json, io, contextlib
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from wseplan.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    rc = main({argv!r})
print(json.dumps([rc, err.getvalue()]))
"""


def test_bug_huge_layer_count_bounded_memory(tmp_path):
    cfg = {"num_hidden_layers": 100_000, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
           "vocab_size": 100}
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(cfg))
    work = tmp_path / "work"
    work.mkdir()
    code = _LIMITED.format(limit=3 * 2**30, argv=["fit", str(path), "--target", "wse3x2"])
    proc = _run_python(code, work, env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-500:]
    rc, err = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rc in (0, 2) and len(err.splitlines()) <= 1, err


# ---------------------------------------------------------------------------------------------
# bounded time on the largest accepted input (found while fuzzing)
# ---------------------------------------------------------------------------------------------
_CPU_LIMITED = """
import resource, sys, io, contextlib
resource.setrlimit(resource.RLIMIT_CPU, ({limit}, {limit}))
from wseplan.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    rc = main({argv!r})
sys.exit(rc)
"""


def test_bug_deepest_model_fits_in_bounded_time(tmp_path):
    cfg = {"num_hidden_layers": 4096, "hidden_size": 16384, "num_attention_heads": 128, "intermediate_size": 65536,
           "vocab_size": 32000}
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(cfg))
    work = tmp_path / "work"
    work.mkdir()
    code = _CPU_LIMITED.format(limit=5, argv=["fit", str(path), "--target", "wse3", "--format", "csv"])
    proc = _run_python(code, work, env={"OPENBLAS_NUM_THREADS": "1"})
    assert proc.returncode == 0, f"exit {proc.returncode} (killed after 5 CPU-seconds?) {proc.stderr[-300:]}"

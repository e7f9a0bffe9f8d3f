"""Output writing that cannot lose data (issue 15, item 1): failure and kill injection at every file operation,
concurrent writers, the user's thesis.md/data.csv case, symlinked outputs, stale temporaries, one-line errors.

Every file-system call of :mod:`wseplan.report.atomic` goes through ``wseplan.report.fsops._HOOK``; the tests
count the calls of a clean write, then fail (raise ``OSError``) or kill the process (``os._exit`` in a forked child)
at each call in turn, for both swap methods (``renameat2(RENAME_EXCHANGE)`` and the journalled two-rename
fallback).
"""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wseplan.errors import InputError
from wseplan.report import atomic as A
from wseplan.report import fsops as F

ROOT = Path(__file__).resolve().parents[1]
OLD = {"report.md": b"# old report\n", "a.csv": b"x\n1\n", "plot.png": b"\x89PNG old"}
NEW = {"report.md": b"# new report\n", "b.csv": b"y\n2\n", "plot.png": b"\x89PNG new"}
USER = {"thesis.md": b"my thesis\n", "data.csv": b"my,data\n"}

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="flock/fork/renameat2 semantics tested on Linux")


@pytest.fixture(autouse=True)
def _reset(monkeypatch):
    monkeypatch.setattr(F, "_HOOK", None)
    monkeypatch.setattr(F, "USE_EXCHANGE", True)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)  # no test here may hang
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _alarm(signum, frame):
    raise TimeoutError("test ran past its 20 s guard")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every regular file under ``folder`` (relative path -> bytes), the marker included."""
    out = {}
    for dirpath, _dirs, files in os.walk(folder):
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(folder))] = p.read_bytes()
    return out


def expected(report: dict[str, bytes], user: dict[str, bytes] = USER) -> dict[str, bytes]:
    return {**report, **user, A.MARKER: A._marker_bytes(list(report))}


def make_old(parent: Path) -> Path:
    out = parent / "rep"
    A.write_files_atomically(out, OLD)
    for k, v in USER.items():
        (out / k).write_bytes(v)
    return out


class Counter:
    def __init__(self, fail_at: int | None = None, exc: BaseException | None = None, kill: bool = False):
        self.n, self.names, self.fail_at, self.exc, self.kill = 0, [], fail_at, exc, kill

    def __call__(self, name: str) -> None:
        self.n += 1
        self.names.append(name)
        if self.n == self.fail_at:
            if self.kill:
                os._exit(0)
            raise self.exc or OSError(errno.EIO, "injected failure")


def count_ops(tmp: Path, write) -> list[str]:
    tmp.mkdir()
    make_old(tmp)
    c = Counter()
    F._HOOK = c
    try:
        write(tmp / "rep")
    finally:
        F._HOOK = None
    return c.names


def _write_new(out: Path):
    return A.write_files_atomically(out, NEW)


# --------------------------------------------------------------------------------------------- failure injection
@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-step"])
def test_failure_at_every_operation_keeps_previous_report(tmp_path, exchange):
    F.USE_EXCHANGE = exchange
    names = count_ops(tmp_path / "count", _write_new)
    assert len(names) >= 25 and "mkdir" in names and ("exchange" in names) == exchange
    if not exchange:
        assert {"rename_aside", "rename_in", "journal_rename"} <= set(names)
    failed = succeeded = 0
    for k in range(1, len(names) + 1):
        base = tmp_path / f"k{k}"
        base.mkdir()
        out = make_old(base)
        before = snapshot(out)
        F._HOOK = Counter(fail_at=k)
        try:
            _write_new(out)
            ok = True
        except InputError as exc:
            ok = False
            msg = str(exc)
            assert "\n" not in msg and ("unchanged" in msg or "next run" in msg), msg
        finally:
            F._HOOK = None
        assert out.is_dir(), f"folder missing after a failure at operation {k} ({names[k - 1]})"
        if ok:  # only best-effort steps (cleanup after the swap, lock removal) may fail without an error
            succeeded += 1
            assert snapshot(out) == expected(NEW), names[k - 1]
            assert names[k - 1] in ("rmtree", "unlink", "lock_unlink", "journal_unlink", "open_dir", "fsync_dir",
                                    "close_dir"), names[k - 1]
        else:
            failed += 1
            assert snapshot(out) == before, f"previous report changed by a failure at {k} ({names[k - 1]})"
        # the next run succeeds, carries the user's files and leaves nothing else behind
        _write_new(out)
        assert snapshot(out) == expected(NEW)
        assert sorted(os.listdir(base)) == ["rep"], (k, names[k - 1], os.listdir(base))
    assert failed >= 20 and failed + succeeded == len(names)


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-step"])
def test_kill_at_every_operation_then_next_run_repairs(tmp_path, exchange):
    """A process killed at any file operation leaves the old or the new report whole (the two-step fallback may
    leave the folder aside for the next run, which puts it back before anything else)."""
    F.USE_EXCHANGE = exchange
    names = count_ops(tmp_path / "count", _write_new)
    gaps = 0
    for k in range(1, len(names) + 1):
        base = tmp_path / f"k{k}"
        base.mkdir()
        out = make_old(base)
        before = snapshot(out)
        pid = os.fork()
        if pid == 0:  # child: die at operation k, no cleanup, no atexit
            try:
                F._HOOK = Counter(fail_at=k, kill=True)
                _write_new(out)
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, 3)
        if out.is_dir():
            assert snapshot(out) in (before, expected(NEW)), f"mixed report after a kill at {k} ({names[k - 1]})"
        else:  # only the fallback, only between its two renames
            assert not exchange and names[k - 1] == "rename_in", (k, names[k - 1])
            gaps += 1
        A.write_files_atomically(out, {"report.md": b"third"})
        assert snapshot(out) == expected({"report.md": b"third"}), (k, names[k - 1])
        assert sorted(os.listdir(base)) == ["rep"], (k, names[k - 1], os.listdir(base))
    assert gaps == (0 if exchange else 1)


def test_kill_between_the_two_renames_is_rolled_forward(tmp_path):
    F.USE_EXCHANGE = False
    out = make_old(tmp_path)
    pid = os.fork()
    if pid == 0:
        try:
            F._HOOK = lambda name: os._exit(0) if name == "rename_in" else None
            _write_new(out)
        finally:
            os._exit(3)
    os.waitpid(pid, 0)
    assert not out.exists() and any(p.name.endswith(A.JOURNAL_SUFFIX) for p in tmp_path.iterdir())
    A.repair(out)  # what the next run does first, under the lock
    assert snapshot(out) == expected(NEW)  # the complete new report, the user's files with it
    assert sorted(os.listdir(tmp_path)) == ["rep"]


def test_failure_in_rollback_is_repaired_by_next_run(tmp_path):
    F.USE_EXCHANGE = False
    out = make_old(tmp_path)
    before = snapshot(out)

    def hook(name):
        if name in ("rename_in", "rollback"):
            raise OSError(errno.EIO, "injected")

    F._HOOK = hook
    with pytest.raises(InputError, match="next run puts it back"):
        _write_new(out)
    F._HOOK = None
    assert not out.exists()
    A.repair(out)
    assert snapshot(out) == before and sorted(os.listdir(tmp_path)) == ["rep"]


@pytest.mark.parametrize("err,words", [(errno.ENOSPC, "no space left"), (errno.EFBIG, "ulimit -f"),
                                       (errno.EROFS, "read-only"), (errno.EACCES, "permission denied"),
                                       (errno.EDQUOT, "quota")])
@pytest.mark.parametrize("at", ["write", "mkdir", "lock_open", "fsync"])
def test_disk_errors_give_one_line(tmp_path, err, words, at):
    out = make_old(tmp_path)
    before = snapshot(out)

    def hook(name):
        if name == at:
            raise OSError(err, os.strerror(err))

    F._HOOK = hook
    with pytest.raises(InputError) as ei:
        _write_new(out)
    msg = str(ei.value)
    assert "\n" not in msg and words in msg and "unchanged" in msg, msg
    F._HOOK = None
    assert snapshot(out) == before
    assert sorted(os.listdir(tmp_path)) == ["rep"]


def test_real_file_size_limit(tmp_path):
    """``ulimit -f`` for real: the write fails with one line (exit 2 from a CLI), the old report stays."""
    out = make_old(tmp_path)
    before = snapshot(out)
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        from wseplan.errors import InputError
        from wseplan.report.atomic import write_files_atomically
        try:
            write_files_atomically({str(out)!r}, {{"report.md": b"x" * 100_000}})
        except InputError as exc:
            sys.stderr.write(f"error: {{exc}}\\n"); sys.exit(2)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env,
                       cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "file size limit" in r.stderr and "Traceback" not in r.stderr
    assert snapshot(out) == before and sorted(os.listdir(tmp_path)) == ["rep"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_real_read_only_folder(tmp_path):
    out = make_old(tmp_path)
    before = snapshot(out)
    os.chmod(tmp_path, 0o555)
    try:
        with pytest.raises(InputError, match="permission denied"):
            _write_new(out)
    finally:
        os.chmod(tmp_path, 0o755)
    assert snapshot(out) == before


# --------------------------------------------------------------------------------------------- ownership
def test_user_folder_with_thesis_is_refused_then_kept_with_force(tmp_path):
    """The issue's data-loss case: a folder holding report.md plus the user's thesis.md and data.csv."""
    folder = tmp_path / "mine"
    folder.mkdir()
    for k, v in {"report.md": b"my own report", **USER}.items():
        (folder / k).write_bytes(v)
    before = snapshot(folder)
    with pytest.raises(InputError, match="not a folder wseplan wrote.*--force"):
        _write_new(folder)
    assert snapshot(folder) == before
    A.write_files_atomically(folder, {"summary.md": b"s", "t.csv": b"1"}, force=True)
    assert snapshot(folder) == {**before, "summary.md": b"s", "t.csv": b"1",
                                A.MARKER: A._marker_bytes(["summary.md", "t.csv"])}
    # report.md is the user's (not in the marker): a report that would overwrite it is refused without force
    with pytest.raises(InputError, match="not written by wseplan"):
        _write_new(folder)
    assert (folder / "report.md").read_bytes() == b"my own report" and (folder / "thesis.md").exists()


def test_user_files_dropped_into_a_report_folder_survive(tmp_path):
    out = tmp_path / "rep"
    A.write_files_atomically(out, OLD)
    (out / "notes").mkdir()
    (out / "notes" / "n.txt").write_bytes(b"n")
    os.symlink("notes/n.txt", out / "link")
    A.write_files_atomically(out, NEW)
    snap = snapshot(out)
    assert snap["notes/n.txt"] == b"n" and os.readlink(out / "link") == "notes/n.txt"
    assert "a.csv" not in snap and snap["b.csv"] == NEW["b.csv"]  # the old report's own file is gone


def test_cli_report_refuses_thesis_folder(tmp_path, capsys, monkeypatch):
    from wseplan.cli import main

    folder = tmp_path / "thesis"
    folder.mkdir()
    for k, v in {"report.md": b"mine", **USER}.items():
        (folder / k).write_bytes(v)
    before = snapshot(folder)
    monkeypatch.chdir(tmp_path)
    rc = main(["report", str(ROOT / "studies" / "claims-audit.yaml"), "--out", str(folder)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err and "--force" in err
    assert snapshot(folder) == before


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_special_files_in_a_forced_folder_are_refused(tmp_path, kind):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "keep.txt").write_text("k")
    if kind == "fifo":
        os.mkfifo(folder / "p")
    else:
        import socket

        s = socket.socket(socket.AF_UNIX)
        s.bind(str(folder / "p"))
        s.close()
    with pytest.raises(InputError, match="special file"):
        A.write_files_atomically(folder, NEW, force=True)
    assert (folder / "keep.txt").read_text() == "k"


def test_protected_destinations(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for out in (".", "..", "/", str(tmp_path)):
        with pytest.raises(InputError, match="current folder"):
            A.write_files_atomically(out, NEW, force=True)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    with pytest.raises(InputError, match="home folder"):
        A.write_files_atomically(tmp_path / "home", NEW, force=True)
    (tmp_path / "file").write_text("f")
    with pytest.raises(InputError, match="not a folder"):
        A.write_files_atomically(tmp_path / "file", NEW)
    with pytest.raises(InputError, match="reserved"):
        A.write_files_atomically(tmp_path / "r", {A.MARKER: b"x"})


# --------------------------------------------------------------------------------------------- symlinks
def test_symlinked_out_stays_a_symlink(tmp_path):
    real = tmp_path / "real"
    A.write_files_atomically(real, OLD)
    link = tmp_path / "link"
    os.symlink("real", link)
    A.write_files_atomically(link, NEW)
    assert link.is_symlink() and os.readlink(link) == "real"
    assert snapshot(real) == expected(NEW, {})
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]
    # a symlink to a folder that does not exist yet, a dangling one, a loop, a link to a file
    os.symlink("nowhere", tmp_path / "dangling")
    os.symlink("loop", tmp_path / "loop")
    (tmp_path / "f").write_text("f")
    os.symlink("f", tmp_path / "tofile")
    for name, words in (("dangling", "does not exist"), ("loop", "symlink loop"), ("tofile", "not a folder")):
        with pytest.raises(InputError, match=words):
            A.write_files_atomically(tmp_path / name, NEW)
    assert os.readlink(tmp_path / "dangling") == "nowhere" and (tmp_path / "f").read_text() == "f"


# --------------------------------------------------------------------------------------------- leftovers, locks
def test_stale_temporaries_are_cleaned_and_foreign_names_kept(tmp_path):
    out = make_old(tmp_path)
    stale = [".rep.tmp-0123abcd", ".rep.old-89abcdef"]
    for s in stale:
        (tmp_path / s).mkdir()
        (tmp_path / s / "report.md").write_text("half")
    (tmp_path / ".rep.tmp-deadbeef").write_text("a killed single-file write")
    (tmp_path / f".rep{A.LOCK_SUFFIX}").write_text("")  # left by a killed run
    keep = [".rep.tmp-mine", ".other.tmp-0123abcd", "rep.tmp-0123abcd"]
    for k in keep:
        (tmp_path / k).mkdir()
    _write_new(out)
    assert sorted(os.listdir(tmp_path)) == sorted(["rep", *keep])
    assert snapshot(out) == expected(NEW)


def test_second_writer_waits_then_fails_in_one_line(tmp_path):
    out = make_old(tmp_path)
    before = snapshot(out)
    fd = os.open(tmp_path / f".rep{A.LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        t0 = time.monotonic()
        with pytest.raises(InputError, match="another wseplan run is writing") as ei:
            A.write_files_atomically(out, NEW, lock_timeout_s=0.3)
        assert 0.3 <= time.monotonic() - t0 < 5 and "\n" not in str(ei.value)
    finally:
        os.close(fd)
    (tmp_path / "t.csv").write_text("old")
    fd = os.open(tmp_path / f".t.csv{A.LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(InputError, match="another wseplan run"):
            A.write_file_atomically(tmp_path / "t.csv", b"x", lock_timeout_s=0.1)
    finally:
        os.close(fd)
    assert (tmp_path / "t.csv").read_text() == "old"
    assert snapshot(out) == before


def test_concurrent_writers_never_mix_or_lose_the_folder(tmp_path):
    """Four processes rewrite the same report ten times each while the parent keeps reading it."""
    out = make_old(tmp_path)
    pids = []
    for w in range(4):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                F.USE_EXCHANGE = True
                for i in range(10):
                    body = f"writer {w} round {i}".encode()
                    A.write_files_atomically(out, {"report.md": body, "copy.csv": body}, lock_timeout_s=15)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    reads = 0
    while any([_alive(p) for p in pids]):
        assert (out / "thesis.md").read_bytes() == USER["thesis.md"]  # present at every instant
        reads += 1
    codes = [_status.pop(p) for p in pids]
    assert codes == [0, 0, 0, 0], codes
    snap = snapshot(out)
    assert snap["report.md"] == snap["copy.csv"] and snap["report.md"].startswith(b"writer ")
    assert snap["thesis.md"] == USER["thesis.md"] and snap["data.csv"] == USER["data.csv"]
    assert sorted(os.listdir(tmp_path)) == ["rep"] and reads > 0


_status: dict[int, int] = {}


def _alive(pid: int) -> bool:
    if pid in _status:
        return False
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        _status[pid] = os.waitstatus_to_exitcode(status)
        return False
    return True


# --------------------------------------------------------------------------------------------- single files
def test_single_file_failure_at_every_operation(tmp_path):
    def write(out: Path):
        A.write_file_atomically(out.parent / "table.csv", b"new,data\n")

    names = count_ops(tmp_path / "count", write)
    assert {"open", "write", "fsync", "rename", "lock_open", "flock"} <= set(names)
    for k in range(1, len(names) + 1):
        base = tmp_path / f"k{k}"
        base.mkdir()
        target = base / "table.csv"
        target.write_bytes(b"old,data\n")
        F._HOOK = Counter(fail_at=k)
        try:
            A.write_file_atomically(target, b"new,data\n")
            ok = True
        except InputError as exc:
            ok = False
            assert "\n" not in str(exc)
        finally:
            F._HOOK = None
        assert target.read_bytes() == (b"new,data\n" if ok else b"old,data\n"), (k, names[k - 1])
        A.write_file_atomically(target, b"third\n")
        assert sorted(os.listdir(base)) == ["table.csv"], (k, names[k - 1], os.listdir(base))


def test_single_file_kill_at_every_operation(tmp_path):
    names = count_ops(tmp_path / "count", lambda out: A.write_file_atomically(out.parent / "t.csv", b"new"))
    for k in range(1, len(names) + 1):
        base = tmp_path / f"k{k}"
        base.mkdir()
        target = base / "t.csv"
        target.write_bytes(b"old")
        pid = os.fork()
        if pid == 0:
            try:
                F._HOOK = Counter(fail_at=k, kill=True)
                A.write_file_atomically(target, b"new")
            finally:
                os._exit(3)
        os.waitpid(pid, 0)
        assert target.read_bytes() in (b"old", b"new"), (k, names[k - 1])
        A.write_file_atomically(target, b"third")
        assert sorted(os.listdir(base)) == ["t.csv"] and target.read_bytes() == b"third"


def test_single_file_symlinks_folders_fifos(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old")
    os.chmod(real, 0o600)
    link = tmp_path / "link.csv"
    os.symlink("real.csv", link)
    A.write_file_atomically(link, "new")
    assert link.is_symlink() and real.read_text() == "new" and (real.stat().st_mode & 0o777) == 0o600
    os.mkfifo(tmp_path / "pipe.csv")
    (tmp_path / "dir.csv").mkdir()
    os.symlink("gone.csv", tmp_path / "dangling.csv")
    for name, words in (("pipe.csv", "not a regular file"), ("dir.csv", "a folder"),
                        ("dangling.csv", "does not exist")):
        with pytest.raises(InputError, match=words):
            A.write_file_atomically(tmp_path / name, "x")  # never blocks on the FIFO
    A.write_file_atomically(tmp_path / "deep" / "er" / "x.csv", "made")
    assert (tmp_path / "deep" / "er" / "x.csv").read_text() == "made"


def test_open_atomic_streams_chunks_and_discards_on_error(tmp_path):
    target = tmp_path / "big.csv"
    with A.open_atomic(target) as fh:
        for i in range(1000):
            fh.write(f"{i}\n".encode())
    assert target.read_text().splitlines()[-1] == "999"
    with pytest.raises(RuntimeError):
        with A.open_atomic(target) as fh:
            fh.write(b"partial")
            raise RuntimeError("generator failed half way")
    assert target.read_text().splitlines()[-1] == "999" and sorted(os.listdir(tmp_path)) == ["big.csv"]


def test_a_folder_holding_another_studys_report_needs_force(tmp_path):
    """audit29b L4: `report B --out <A's folder>` replaced study A's report (13 files) with B's without --force, since
    the folder carried wseplan's marker. The marker names its study; another study's folder is refused in one line,
    the same study rewrites it, and --force replaces it."""
    from wseplan.errors import InputError
    from wseplan.report.atomic import marker_owner, write_files_atomically

    out = tmp_path / "r"
    write_files_atomically(out, {"a.md": "A"}, owner="study-a")
    assert marker_owner(out) == "study-a"
    with pytest.raises(InputError, match="holds the report of study 'study-a', not 'study-b'") as e:
        write_files_atomically(out, {"b.md": "B"}, owner="study-b")
    assert "\n" not in str(e.value) and (out / "a.md").read_text() == "A"
    write_files_atomically(out, {"a.md": "A2"}, owner="study-a")
    write_files_atomically(out, {"b.md": "B"}, owner="study-b", force=True)
    assert marker_owner(out) == "study-b" and (out / "b.md").read_text() == "B"

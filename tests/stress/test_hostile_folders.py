"""Hostile memory folders: files that vanish, appear or change during a scan, unreadable
files and folders, FIFOs, devices, symlink loops and links leaving the root.  Each
gives a problem, never an exception or a hang, and nothing outside the root is opened."""

from __future__ import annotations

import ast
import errno
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from provgraph import Memory, ProblemKind, Report
from provgraph.cli import cli

from .helpers import (
    IS_ROOT,
    NOW,
    TIMEOUT,
    DenyingFiles,
    MutatingFiles,
    assert_clean,
    deny_listing,
    derived,
    environment,
    provgraph,
    write,
)

LATER = NOW + timedelta(hours=1)


def _shape(report: Report) -> tuple:
    """What must not depend on the history of scans: files, edges, staleness, cycles, problems."""
    return (
        report.file_count,
        tuple((edge.source, edge.derived, edge.status) for edge in report.edges),
        tuple(entry.path for entry in report.stale),
        report.cycles,
        report.problems,
    )


def _problems_of(report: Report, path: str) -> list[tuple[ProblemKind, str]]:
    return [(problem.kind, problem.detail) for problem in report.problems if problem.path == path]


# -- the folder changes during a scan ------------------------------------------------------------


def _replace_by_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _replace_by_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _replace_by_link_outside(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.parent.parent / "outside" / "secret.md")


def _grow(path: Path) -> None:
    with path.open("ab") as handle:
        handle.write(b"grown\n" * 4_000_000)


MUTATIONS: dict[str, tuple[Callable[[Path], None], str, Callable[[Report], None]]] = {}


def mutation(name: str, when: str = "between"):
    """Register ``check(report)`` for a mutation of the root applied at ``when``."""

    def register(check: Callable[[Report], None]) -> Callable[[Report], None]:
        MUTATIONS[name] = (ACTIONS[name], when, check)
        return check

    return register


ACTIONS: dict[str, Callable[[Path], None]] = {
    "derived-file-vanishes": lambda root: (root / "d.md").unlink(),
    "source-vanishes": lambda root: (root / "a.md").unlink(),
    "file-appears": lambda root: write(root, "new.md", derived("a.md")),
    "declaration-changes": lambda root: write(root, "d.md", derived("b.md")),
    "replaced-by-folder": lambda root: _replace_by_folder(root / "d.md"),
    "replaced-by-fifo": lambda root: _replace_by_fifo(root / "d.md"),
    "replaced-by-link-outside": lambda root: _replace_by_link_outside(root / "d.md"),
    "folder-vanishes": lambda root: shutil.rmtree(root / "sub"),
    "source-grows-huge": lambda root: _grow(root / "a.md"),
    "source-changes-before-hash": lambda root: write(root, "data.txt", "changed before it was hashed\n"),
    "source-changes-after-it-was-read": lambda root: write(root, "a.md", "a changed after it was read\n"),
    "non-memory-source-vanishes-before-hash": lambda root: (root / "data.txt").unlink(),
}


@mutation("derived-file-vanishes")
def _(report: Report) -> None:
    assert _problems_of(report, "d.md") == [(ProblemKind.UNREADABLE, os.strerror(errno.ENOENT))]


@mutation("source-vanishes")
def _(report: Report) -> None:
    assert _problems_of(report, "a.md") == [(ProblemKind.UNREADABLE, os.strerror(errno.ENOENT))]
    assert [(e.source, e.status.value) for e in report.edges if e.derived == "d.md"] == [("a.md", "missing")]


@mutation("file-appears")
def _(report: Report) -> None:
    assert "new.md" not in report.derived  # listed by the next scan


@mutation("declaration-changes")
def _(report: Report) -> None:
    assert [e.source for e in report.edges if e.derived == "d.md"] == ["b.md"]


@mutation("replaced-by-folder")
def _(report: Report) -> None:
    assert _problems_of(report, "d.md") == [(ProblemKind.UNREADABLE, "not a regular file")]


@mutation("replaced-by-fifo")
def _(report: Report) -> None:
    assert _problems_of(report, "d.md") == [(ProblemKind.UNREADABLE, "not a regular file")]


@mutation("replaced-by-link-outside")
def _(report: Report) -> None:
    assert _problems_of(report, "d.md") == [(ProblemKind.UNREADABLE, "resolves outside the root")]
    assert "leaked.md" not in {edge.source for edge in report.edges}


@mutation("folder-vanishes")
def _(report: Report) -> None:
    assert _problems_of(report, "sub/s.md") == [(ProblemKind.UNREADABLE, os.strerror(errno.ENOENT))]


@mutation("source-grows-huge")
def _(report: Report) -> None:
    assert [(e.source, e.status.value) for e in report.edges if e.derived == "d.md"] == [("a.md", "clean")]


@mutation("source-changes-before-hash", when="before_hash")
def _(report: Report) -> None:
    assert [(e.source, e.status.value) for e in report.edges if e.derived == "t.md"] == [("data.txt", "clean")]


@mutation("source-changes-after-it-was-read", when="before_hash")
def _(report: Report) -> None:
    """Adoption records the content the scan read; the edit came after it."""
    assert [(e.source, e.status.value) for e in report.edges if e.derived == "d.md"] == [("a.md", "clean")]


@mutation("non-memory-source-vanishes-before-hash", when="before_hash")
def _(report: Report) -> None:
    assert [(e.source, e.status.value) for e in report.edges if e.derived == "t.md"] == [("data.txt", "missing")]


def _folder(root: Path) -> None:
    write(root, "a.md", "a\n")
    write(root, "b.md", "b\n")
    write(root, "d.md", derived("a.md"))
    write(root, "sub/s.md", derived("../b.md"))
    write(root, "data.txt", "not memory, but a source\n")
    write(root, "t.md", derived("data.txt"))
    write(root.parent / "outside", "secret.md", derived("leaked.md"))


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_a_folder_that_changes_during_a_scan_gives_problems_then_settles(name: str, root: Path, tmp_path: Path) -> None:
    """The scan that saw the change reports it; the next scan agrees with a from-scratch one."""
    action, when, check = MUTATIONS[name]
    _folder(root)
    state = tmp_path / "state.json"
    files = MutatingFiles(root, **{when: lambda: action(root)})

    during = Memory(root, state=state, files=files).refresh(now=NOW)
    check(during)

    settled = Memory(root, state=state).refresh(now=LATER)
    scratch = Memory(root, state=tmp_path / "scratch.json").refresh(now=LATER)
    if name == "source-changes-after-it-was-read":  # a change after adoption is a change: not lost
        assert [e.status.value for e in settled.edges if e.derived == "d.md"] == ["changed"]
        assert [e.status.value for e in scratch.edges if e.derived == "d.md"] == ["clean"]
    else:
        assert _shape(settled) == _shape(scratch)


def test_a_file_swapped_for_a_link_outside_just_before_its_open_is_not_followed(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last-moment race: the file was listed (and checked) inside the root, then is
    replaced by a symlink to a file outside right before it is opened."""
    _folder(root)
    victim = os.path.join(root, "d.md")
    secret = (tmp_path / "outside" / "secret.md").stat()
    open_ = os.open
    swapped, opened_secret = [], []

    def racing_open(path: str | os.PathLike[str], *args: object, **options: object) -> int:
        if os.fspath(path) in (victim, "d.md") and not swapped:  # by its path, or by its name in its folder
            swapped.append(path)
            _replace_by_link_outside(Path(victim))
        descriptor = open_(path, *args, **options)  # type: ignore[arg-type]
        if (os.fstat(descriptor).st_ino, os.fstat(descriptor).st_dev) == (secret.st_ino, secret.st_dev):
            opened_secret.append(path)
        return descriptor

    monkeypatch.setattr(os, "open", racing_open)
    report = Memory(root, state=tmp_path / "state.json").refresh(now=NOW)

    assert swapped
    assert opened_secret == []
    assert "leaked.md" not in {edge.source for edge in report.edges}
    assert [kind for kind, _ in _problems_of(report, "d.md")] == [ProblemKind.UNREADABLE]


# -- unreadable files and folders --------------------------------------------------------------


def _unreadable_folder(root: Path) -> None:
    write(root, "a.md", "a\n")
    write(root, "d.md", derived("a.md"))
    write(root, "e.md", derived("b.md"))
    write(root, "b.md", "b\n")
    write(root, "locked/inside.md", derived("../a.md"))
    write(root, "open/visible.md", "still listed\n")


def _check_unreadable(report: Report) -> None:
    """An unreadable derived file declares nothing; an unreadable source cannot be compared."""
    denied = os.strerror(errno.EACCES)
    assert _problems_of(report, "d.md") == [(ProblemKind.UNREADABLE, denied)]
    assert _problems_of(report, "b.md") == [(ProblemKind.UNREADABLE, denied)]
    assert "d.md" not in report.derived
    assert [(e.source, e.status.value) for e in report.edges if e.derived == "e.md"] == [("b.md", "missing")]
    assert [(e.source, e.status.value) for e in report.edges if e.derived != "e.md"] == [("a.md", "clean")]


def test_unreadable_files_are_problems(root: Path, tmp_path: Path) -> None:
    _unreadable_folder(root)
    files = DenyingFiles(root, {"d.md", "b.md"})
    _check_unreadable(Memory(root, state=tmp_path / "state.json", files=files).refresh(now=NOW))


@pytest.mark.skipif(IS_ROOT, reason="mode 000 does not stop root; the wrapper variant covers it")
def test_files_of_mode_000_are_problems(root: Path, tmp_path: Path) -> None:
    _unreadable_folder(root)
    for name in ("d.md", "b.md"):
        (root / name).chmod(0)
    _check_unreadable(Memory(root, state=tmp_path / "state.json").refresh(now=NOW))


def _check_unreadable_folder(code: int, output: str) -> None:
    assert code == 0
    status = json.loads(output)
    assert {"path": "locked", "kind": "unreadable", "detail": os.strerror(errno.EACCES)} in status["problems"]
    assert status["counts"]["files"] == 5  # everything but the locked folder's file


def test_an_unreadable_folder_is_a_problem_and_the_rest_is_scanned(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _unreadable_folder(root)
    deny_listing(monkeypatch, root / "locked")
    code = cli("status", "--json", str(root))
    _check_unreadable_folder(code, capsys.readouterr().out)


@pytest.mark.skipif(IS_ROOT, reason="mode 000 does not stop root; the os.scandir variant covers it")
def test_a_folder_of_mode_000_is_a_problem_and_the_rest_is_scanned(root: Path) -> None:
    _unreadable_folder(root)
    (root / "locked").chmod(0)
    try:
        done = provgraph("status", "--json", root)
    finally:
        (root / "locked").chmod(0o755)
    assert_clean(done, 0)
    _check_unreadable_folder(done.code, done.stdout)


# -- things that are not regular files, and links that leave the root ---------------------------

AUDITED = """
import os, sys
log = open(sys.argv[1], "w", encoding="utf-8")
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)):
        log.write(repr(os.fsdecode(args[0])) + "\\n")
        log.flush()
sys.addaudithook(hook)
from provgraph.cli import cli
sys.exit(cli(*sys.argv[2:]))
"""


def _audited(log: Path, *args: str | os.PathLike[str], cwd: Path) -> tuple[int, str, list[str]]:
    """Run the command line with every ``open`` recorded (a Python audit hook)."""
    done = subprocess.run(
        [sys.executable, "-c", AUDITED, log, *map(os.fspath, args)],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        timeout=TIMEOUT,
    )
    assert "Traceback" not in done.stderr.decode(), done.stderr.decode()
    opened = [ast.literal_eval(line) for line in log.read_text(encoding="utf-8").splitlines()]
    return done.returncode, done.stdout.decode(), opened


def _special_folder(root: Path, outside: Path) -> list[str]:
    """FIFOs, devices, loops and links out of the root; returns the in-root names never to open."""
    write(root, "a.md", "a\n")
    write(outside, "secret.md", derived("leaked.md"))
    os.mkfifo(outside / "trap.fifo")
    os.mkfifo(root / "fifo.md")
    (root / "null.md").symlink_to("/dev/null")
    (root / "zero.md").symlink_to("/dev/zero")
    (root / "outfifo.md").symlink_to(outside / "trap.fifo")
    (root / "secret.md").symlink_to(outside / "secret.md")
    (root / "loop1.md").symlink_to("loop2.md")
    (root / "loop2.md").symlink_to("loop1.md")
    (root / "self.md").symlink_to("self.md")
    (root / "dangling.md").symlink_to("nowhere.md")
    (root / "sub").mkdir()
    (root / "sub" / "up").symlink_to("..")
    (root / "sub" / "here").symlink_to(".")
    (root / "linkdir").symlink_to(outside)
    never = ["fifo.md", "null.md", "zero.md", "outfifo.md", "secret.md", "loop1.md", "loop2.md", "self.md"]
    try:
        os.mknod(root / "dev.md", 0o600 | 0o020000, os.makedev(1, 3))  # a character device
        never.append("dev.md")
    except PermissionError:
        pass  # only root may make device nodes; the /dev links cover devices then
    entries = [
        *never,
        "a.md",
        "dangling.md",
        "sub/up/a.md",
        "sub/here/sub/up/a.md",
        "linkdir/secret.md",
        "../outside/secret.md",
        "/../outside/secret.md",
        "sub/up/../../outside/secret.md",
    ]
    write(root, "d.md", derived(*entries))
    return never


def test_special_files_and_links_out_of_the_root_are_never_opened(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    never = _special_folder(root, outside)
    forbidden = {os.path.realpath(root / name) for name in never} | {"/dev/null", "/dev/zero"}

    runs = [
        ("status", "--json", root),
        ("why", root / "d.md"),
        ("graph", "--format", "dot", root),
        ("prompt", root),
        ("check", root),
    ]
    outputs = []
    for number, args in enumerate(runs):
        code, stdout, opened = _audited(tmp_path / f"opened-{number}.log", *args, cwd=tmp_path)
        assert code in (0, 1), (args, code)
        outputs.append(stdout)
        resolved = {os.path.realpath(os.path.join(tmp_path, path)) for path in opened}
        assert not {path for path in resolved if path.startswith(os.fspath(outside) + os.sep)}, args
        assert not resolved & forbidden, args

    status = json.loads(outputs[0])
    problems = {(p["path"], p["kind"], p["detail"]) for p in status["problems"]}
    for name in ("fifo.md", "dev.md"):
        if name in never:
            assert ("d.md", "bad-entry", f"not a regular file: {name}") in problems
    for name in ("null.md", "zero.md", "outfifo.md", "secret.md"):
        assert (name, "outside-root", "symlink to a path outside the root") in problems
        assert ("d.md", "outside-root", f"{name} resolves outside the root") in problems
    assert ("d.md", "outside-root", "linkdir/secret.md resolves outside the root") in problems
    assert ("d.md", "outside-root", "../outside/secret.md") in problems
    assert ("d.md", "outside-root", "/../outside/secret.md") in problems
    for loop in ("loop1.md", "loop2.md", "self.md"):
        assert (loop, "unreadable", os.strerror(errno.ELOOP)) in problems
    edges = {(cause["source"], cause["kind"]) for entry in status["stale"] for cause in entry["causes"]}
    assert ("dangling.md", "missing") in edges
    assert "leaked.md" not in json.dumps(status)


def test_a_fifo_outside_the_root_cannot_make_a_scan_hang(root: Path, tmp_path: Path) -> None:
    """A FIFO blocks whoever opens it for reading until a writer comes: nothing may open one."""
    outside = tmp_path / "outside"
    os.mkfifo(outside / "block.md")
    os.mkfifo(root / "block.md")
    (root / "via-link.md").symlink_to(outside / "block.md")
    write(root, "a.md", "a\n")
    write(root, "d.md", derived("a.md", "block.md", "via-link.md", "../outside/block.md"))
    for args in (("status", root), ("why", root / "d.md"), ("stamp", root / "d.md")):
        done = provgraph(*args, cwd=tmp_path)
        assert_clean(done, 0)


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` but provgraph's own folder: type, mode, times, content."""
    found = {}
    for folder, folders, files in os.walk(root):
        folders[:] = [name for name in folders if name != ".provgraph"]
        files = [name for name in files if (folder, name) != (os.fspath(root), "provgraph.lock")]
        for name in folders + files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            content = (
                Path(path).read_bytes() if stat.S_ISREG(info.st_mode) else os.path.islink(path) and os.readlink(path)
            )
            found[os.path.relpath(path, root)] = (
                info.st_mode,
                info.st_mtime_ns,
                info.st_ctime_ns,
                info.st_ino,
                content,
            )
    return found


def test_no_command_changes_anything_in_the_memory_folder(root: Path, tmp_path: Path) -> None:
    """Informational only: every command, a stamp and a rebuilt state included, leaves every
    memory file, folder and link exactly as it was (provgraph writes only its lock and in .provgraph)."""
    _special_folder(root, tmp_path / "outside")
    write(root, "MEMORY.md", "# index\n")
    write(root, "e.md", derived("a.md"))
    before = _snapshot(root)
    outside = _snapshot(tmp_path / "outside")

    write(root, ".provgraph/state.json", "not a state file")
    commands = [
        ("status", root),
        ("status", "--json", root),
        ("check", root),
        ("why", root / "e.md"),
        ("stamp", root / "e.md"),
        ("graph", "--format", "mermaid", root),
        ("prompt", root),
        ("hook", "claude-code", root),
    ]
    for args in commands:
        assert_clean(provgraph(*args, cwd=tmp_path), 0, 1)

    assert _snapshot(root) == before
    assert _snapshot(tmp_path / "outside") == outside
    elsewhere = tmp_path / "elsewhere.json"
    shutil.rmtree(root / ".provgraph")
    assert_clean(provgraph("status", "--state", elsewhere, root), 0)
    assert _snapshot(root) == before and not (root / ".provgraph").exists()

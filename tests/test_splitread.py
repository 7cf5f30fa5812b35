"""A first scan of a large folder read by two processes gives the answer of one.

With no state yet, the command forks a child from its quick answer, before importing the
rest of provgraph, and the child reads the last part of the sorted listing
(``provgraph.splitread``).  ``PROVGRAPH_PROCESSES=2`` makes the command fork on any folder
and ``PROVGRAPH_PROCESSES=1`` never; these tests run the real command with each and compare
everything it leaves: the output, the exit code, the lock and the cache.  A child that
fails in any way leaves the parent to read its files, and no process is left behind.
"""

from __future__ import annotations

import marshal
import os
import posixpath
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import PROVGRAPH, launch
from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from scratch import scratch_folder

import provgraph.cli
import provgraph.files
import provgraph.reading
import provgraph.replay
import provgraph.scan
import provgraph.splitread
import provgraph.walk
from provgraph import Memory
from provgraph.splitread import FILES_FOR_TWO, SETTING
from provgraph.state import State, StateStore

NOW = "2026-11-10T12:00:00+00:00"


@dataclass(frozen=True)
class Left:
    """Everything a first scan leaves: what it printed, its exit code, the lock, the cache."""

    code: int
    stdout: bytes
    stderr: bytes
    lock: bytes | None
    cache: State
    state_files: frozenset[str]


def first_scan(root: Path, processes: int, *args: str, lock: bytes | None = None) -> Left:
    """``provgraph status --json ROOT`` (or ``args``) on ``root`` with no state, the lock
    being ``lock`` (none when None), read by ``processes`` processes."""
    shutil.rmtree(root / ".provgraph", ignore_errors=True)
    (root / "provgraph.lock").unlink(missing_ok=True)
    if lock is not None:
        (root / "provgraph.lock").write_bytes(lock)
    env = {**os.environ, "PROVGRAPH_NOW": NOW, SETTING: str(processes)}
    command, *options = args or ("status", "--json")
    done = launch([command, root, *options], env=env)
    store = StateStore(root)
    with store.locked():
        cache = store.load()._replace(scan_started_ns=0)  # the only clock a cache holds
    written = root / "provgraph.lock"
    return Left(
        done.code,
        done.stdout,
        done.stderr,
        written.read_bytes() if written.exists() else None,
        cache,
        frozenset(os.listdir(root / ".provgraph")),
    )


def readers(monkeypatch: pytest.MonkeyPatch, log: Path, *, second: bool = True) -> None:
    """Append to ``log`` each file read for a scan, and whether the command (a process this
    test started) or a process the command started read it.  So that on these small folders
    the two meet before the command has read every file, as on a large one, the second
    process sends its readings a few files at a time, and the command reads slowly, starting
    once the second has sent some (unless ``second`` is False: none is expected)."""
    read_one, test = provgraph.reading.read_one, os.getpid()

    def spied(*args):  # type: ignore[no-untyped-def]
        command = os.getppid() == test
        if command and second and os.environ[SETTING] == "2":
            _until_read_by_second(log, min(BATCH + 1, len(args[0]._listed)))
        with log.open("a") as lines:
            lines.write(f"{'command' if command else 'second'} {os.nice(0)} {args[1]}\n")
        if command:
            time.sleep(0.005)
        return read_one(*args)

    monkeypatch.setattr(provgraph.scan, "read_one", spied)  # the command's reads
    monkeypatch.setattr(provgraph.reading, "read_one", spied)  # the second process's
    monkeypatch.setattr(provgraph.splitread, "BATCH", BATCH)
    monkeypatch.setattr(provgraph.splitread, "LOOK_EVERY", 1)


BATCH = 3


def _until_read_by_second(log: Path, files: int) -> None:
    waited = time.monotonic()
    while time.monotonic() - waited < 10:
        if log.exists() and log.read_text().count("second ") >= files:
            return
        time.sleep(0.002)


def read_by(log: Path) -> list[str]:
    """Which process read each file since the last call: ``command`` or ``second``."""
    return [who for who, _ in read_paths(log)]


def read_paths(log: Path) -> list[tuple[str, str]]:
    """Each file read since the last call, and by which process."""
    return [(who, path) for who, _, path in _lines(log)]


def _lines(log: Path) -> list[tuple[str, int, str]]:
    """Each file read since the last call: by which process, at which priority (niceness)."""
    found = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return [(who, int(nice), path) for who, nice, path in (line.split(" ", 2) for line in found)]


def met(readings: list[str], files: int) -> bool:
    """Whether the second process read files, and the command fewer than all ``files``."""
    return "second" in readings and readings.count("command") < files


def children_at_exit(monkeypatch: pytest.MonkeyPatch, log: Path) -> None:
    """Write to ``log``, as the command leaves, whether it still has a child (running, or
    dead and not waited for)."""
    leave = provgraph.cli._leave

    def checked(code: int):  # type: ignore[no-untyped-def]
        try:
            os.waitpid(-1, os.WNOHANG)
            log.write_text("a child is left")
        except ChildProcessError:
            log.write_text("none")
        leave(code)

    monkeypatch.setattr(provgraph.cli, "_leave", checked)


def write(root: Path, path: str, text: str | bytes) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        target.write_bytes(text)
    else:
        target.write_text(text, encoding="utf-8")


def a_folder_of_every_kind(root: Path) -> None:
    """Derived files in every form, broken frontmatter, invalid UTF-8, a missing source,
    symlinks leaving the root, and a section under ``## Sources``, in both processes' parts
    of the sorted listing (the child reads the last part)."""
    for half in ("a", "z"):
        write(root, f"{half}/fact.md", f"---\nname: {half} fact\n---\nThe user lives in Lyon.\n")
        write(root, f"{half}/notes.md", f"Plain notes of {half}.\n")
        write(root, f"{half}/profile.md", "---\nderived_from: fact.md, notes.md\nderived_at: 2026-11-01\n---\nLyon.\n")
        write(root, f"{half}/digest.md", "---\nderived_from:\n  - '[Profile](profile.md)'\n  - '[[fact]]'\n---\n")
        write(root, f"{half}/broken.md", "---\ndescription: a: b: [c\nderived_from: fact.md\n")
        write(root, f"{half}/latin.md", b"---\nname: \xff\xfe\nderived_from: fact.md\n---\n")
        write(root, f"{half}/gone.md", "---\nderived_from: nowhere.md\n---\n")
        write(root, f"{half}/outside.md", "---\nderived_from: link.txt\n---\n")
        write(root, f"{half}/sourced.md", "# Sourced\n\n## Sources\n\n- [[notes]]\n- [Fact](fact.md)\n")
        (root / half / "link.txt").symlink_to("/etc/hostname")
        (root / half / "away.md").symlink_to("/etc/hostname")
    for index in range(12):
        write(root, f"m/note-{index:02d}.md", f"---\nname: note {index}\n---\nbody {index}\n")


FILES = 30
"""The memory files of ``a_folder_of_every_kind`` (a symlink that leaves the root is not one)."""


@pytest.mark.parametrize("heading", [None, "--sources-heading"], ids=["plain", "sources-heading"])
def test_a_first_scan_read_by_two_processes_leaves_what_one_process_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, heading: str | None
) -> None:
    root = tmp_path / "memory"
    a_folder_of_every_kind(root)
    args = ("status", "--json", *([heading] if heading else []))
    log = tmp_path / "readers"
    readers(monkeypatch, log)

    one = first_scan(root, 1, *args)
    assert set(read_by(log)) == {"command"}
    two = first_scan(root, 2, *args)
    assert met(read_by(log), FILES)

    assert two == one
    assert one.code == 0 and one.stderr == b""
    for kind in (b'"unreadable"', b'"bad-frontmatter"', b'"outside-root"', b'"bad-entry"'):
        assert kind in one.stdout
    assert (b"a/sourced.md" in one.lock) is (heading is not None)  # type: ignore[operator]


def test_with_a_lock_the_stamps_it_remembers_are_kept_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock present, no cache: each remembered derived file is checked against its stamps
    (one whose frontmatter is now cut short keeps them), and ``check`` exits 1 alike."""
    root = tmp_path / "memory"
    a_folder_of_every_kind(root)
    lock = first_scan(root, 1).lock
    write(root, "z/fact.md", "---\nname: z fact\n---\nThe user moved to Paris.\n")
    write(root, "a/profile.md", "---\nderived_from: fact.md, notes.md\n")  # being rewritten
    write(root, "z/profile.md", "---\n")
    log = tmp_path / "readers"
    readers(monkeypatch, log)

    one = first_scan(root, 1, "check", lock=lock)
    assert set(read_by(log)) == {"command"}
    two = first_scan(root, 2, "check", lock=lock)
    assert met(read_by(log), FILES)

    assert two == one
    assert one.code == 1 and b"z/fact.md changed" in one.stdout
    assert b"a/profile.md" in one.lock and b"z/profile.md" in one.lock  # type: ignore[operator]


def test_a_file_gone_after_the_walk_is_unreadable_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "memory"
    a_folder_of_every_kind(root)
    hand_over = provgraph.replay.hand_over

    def walked_then_removed(*args):  # type: ignore[no-untyped-def]
        hand_over(*args)
        for half in ("a", "z"):
            (root / half / "notes.md").unlink()

    monkeypatch.setattr(provgraph.replay, "hand_over", walked_then_removed)
    readers(monkeypatch, tmp_path / "readers")
    left = []
    for processes in (1, 2):
        for half in ("a", "z"):
            write(root, f"{half}/notes.md", "Plain notes.\n")
        left.append(first_scan(root, processes))
    one, two = left
    assert two == one
    assert one.stdout.count(b'"unreadable"') == 4  # the two gone files and the two invalid ones


def _garbled(*args: object) -> Iterator[bytes]:
    yield b"\xff not marshalled"


def _another_shape(*args: object) -> Iterator[bytes]:
    yield marshal.dumps((0, [0], [b"not a digest"], {}))


def _other_files(walk: object, heading: object, paths: list[str]) -> Iterator[bytes]:
    """A batch for the last file of the sorted listing that names the walk's first file."""
    yield marshal.dumps((len(paths) - 1, [0], [None], {}))


def _killed(*args: object) -> Iterator[bytes]:
    os.kill(os.getpid(), signal.SIGKILL)
    yield b""


def _raises(*args: object) -> Iterator[bytes]:
    raise ZeroDivisionError
    yield b""


FAILURES = {
    "killed": _killed,
    "raises": _raises,
    "not marshalled": _garbled,
    "another shape": _another_shape,
    "other files": _other_files,
}


@pytest.mark.parametrize("failure", [*FAILURES, "pipe closed"])
def test_a_child_that_fails_leaves_the_answer_of_one_process_and_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    root = tmp_path / "memory"
    a_folder_of_every_kind(root)
    one = first_scan(root, 1)
    if failure == "pipe closed":
        monkeypatch.setattr(provgraph.splitread, "_child", lambda pipe, *args: (os.close(pipe), os._exit(0)))
    else:
        monkeypatch.setattr(provgraph.splitread, "_batches", FAILURES[failure])
    log, exits = tmp_path / "readers", tmp_path / "children"
    readers(monkeypatch, log, second=False)
    children_at_exit(monkeypatch, exits)

    two = first_scan(root, 2)

    assert two == one
    assert read_by(log) == ["command"] * FILES  # the command read every file itself
    assert exits.read_text() == "none"


@pytest.mark.parametrize("error", ["an error exit", "an exception"])
def test_a_child_whose_readings_no_scan_takes_is_killed_and_reaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    """An error before the scan (here instead of the whole command line) leaves no child
    behind, whether the command says it or an exception ends it."""
    root = tmp_path / "memory"
    a_folder_of_every_kind(root)
    started = tmp_path / "started"

    def slow(*args: object) -> Iterator[bytes]:
        writing = started.with_suffix(".writing")
        writing.write_text(str(os.getpid()))
        writing.rename(started)  # whole when it appears: the child may be killed right after
        time.sleep(60)
        yield b""

    def fails(*args: str) -> int:
        while not started.exists():
            time.sleep(0.01)
        if error == "an exception":
            raise KeyboardInterrupt
        return provgraph.cli.EXIT_ERROR

    monkeypatch.setattr(provgraph.splitread, "_batches", slow)
    monkeypatch.setattr(provgraph.cli, "cli", fails)
    exits = tmp_path / "children"
    children_at_exit(monkeypatch, exits)
    begun = time.monotonic()
    done = launch(["status", root], env={**os.environ, SETTING: "2"})
    assert done.code != 0
    assert time.monotonic() - begun < 30  # the child's minute of sleep was cut short
    with pytest.raises(ProcessLookupError):
        os.kill(int(started.read_text()), 0)
    if error == "an error exit":
        assert exits.read_text() == "none"


def test_a_child_for_another_listing_is_let_go_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan that walks again rather than taking the quick answer's walk reads every file."""
    root = tmp_path / "memory"
    a_folder_of_every_kind(root)
    one = first_scan(root, 1)
    walk = provgraph.files.LocalFiles.walk

    def walked_again(files):  # type: ignore[no-untyped-def]
        provgraph.walk.handed_over(files._root, files._real_root)
        return walk(files)

    monkeypatch.setattr(provgraph.files.LocalFiles, "walk", walked_again)
    log, exits = tmp_path / "readers", tmp_path / "children"
    readers(monkeypatch, log, second=False)
    children_at_exit(monkeypatch, exits)
    two = first_scan(root, 2)
    assert two == one
    assert read_by(log) == ["command"] * FILES
    assert exits.read_text() == "none"


def test_a_file_listed_with_other_metadata_than_the_child_read_it_under_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "memory"
    a_folder_of_every_kind(root)
    walk = provgraph.files.LocalFiles.walk

    def another_size(files):  # type: ignore[no-untyped-def]
        found, problems = walk(files)
        meta = found["z/notes.md"]
        found["z/notes.md"] = meta._replace(size=meta.size + 1)
        return found, problems

    monkeypatch.setattr(provgraph.files.LocalFiles, "walk", another_size)
    log = tmp_path / "readers"
    readers(monkeypatch, log)
    one = first_scan(root, 1)
    read_paths(log)
    two = first_scan(root, 2)
    read = read_paths(log)
    assert two == one
    assert met([who for who, _ in read], FILES)
    assert ("command", "z/notes.md") in read  # the last files of the listing: read by the child too


@pytest.mark.parametrize("processes", [1, 2])
def test_a_first_scan_walks_the_folder_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, processes: int) -> None:
    """The quick answer walks a folder with no state yet, and the full run takes that walk over."""
    root = tmp_path / "memory"
    a_folder_of_every_kind(root)
    walks = tmp_path / "walks"
    for module, name in ((provgraph.replay, "walk_in_two"), (provgraph.files, "walk_in_order")):
        walk = getattr(module, name)

        def counted(*args, module=module, walk=walk):  # type: ignore[no-untyped-def]
            with walks.open("a") as lines:
                lines.write(f"{module.__name__}\n")
            return walk(*args)

        monkeypatch.setattr(module, name, counted)
    assert first_scan(root, processes).code == 0
    assert walks.read_text().split() == ["provgraph.replay"]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="processes are listed from /proc")
def test_no_process_is_left_after_the_command(tmp_path: Path) -> None:
    """The installed command in a session of its own: when it has exited, nothing of that
    session still runs, after a first scan (a child walks, another reads) and after a
    change (a child walks)."""
    root = tmp_path / "memory"
    a_folder_of_every_kind(root)
    for _ in range(2):
        command = subprocess.Popen(
            [PROVGRAPH, "status", "--json", root],
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, SETTING: "2"},
        )
        out, err = command.communicate(timeout=60)
        assert command.returncode == 0, err
        assert b'"files": ' in out
        assert _in_session(command.pid) == []
        write(root, "z/fact.md", "---\nname: z fact\n---\nThe user moved to Paris.\n")


def _in_session(session: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[3]) == session:
                found.append(int(entry))
    return found


def test_the_second_process_reads_at_the_lowest_priority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It takes only a core nothing else wants, never half of the command's own."""
    root = tmp_path / "memory"
    a_folder_of_every_kind(root)
    log = tmp_path / "readers"
    readers(monkeypatch, log)
    first_scan(root, 2)
    lines = _lines(log)
    priorities = {who: {nice for reader, nice, _ in lines if reader == who} for who in ("command", "second")}
    assert priorities["second"] == {19}
    # on a loaded machine the second may read every file before the command reads one
    assert priorities["command"] <= {os.nice(0)}


@pytest.mark.parametrize(
    ("setting", "threads", "cores", "files", "forks"),
    [
        (None, 1, 2, FILES_FOR_TWO, True),
        (None, 1, 2, FILES_FOR_TWO - 1, False),
        (None, 1, 1, FILES_FOR_TWO, False),
        (None, 2, 2, FILES_FOR_TWO, False),
        ("1", 1, 8, 10 * FILES_FOR_TWO, False),
        ("2", 1, 1, 1, True),
        ("2", 2, 8, FILES_FOR_TWO, False),
        ("auto", 1, 2, FILES_FOR_TWO, True),
    ],
)
def test_a_first_scan_forks_for_enough_files_beside_one_thread_and_a_second_core(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, threads: int, cores: int, files: int, forks: bool
) -> None:
    import threading

    if setting is None:
        monkeypatch.delenv(SETTING, raising=False)
    else:
        monkeypatch.setenv(SETTING, setting)
    monkeypatch.setattr(threading, "active_count", lambda: threads)
    monkeypatch.setattr(provgraph.walk, "usable_cores", lambda: cores)
    assert provgraph.splitread._worth_it(files) is forks


def test_a_library_refresh_never_forks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "memory"
    a_folder_of_every_kind(root)
    monkeypatch.setenv(SETTING, "2")

    def fork() -> int:
        raise AssertionError("a library refresh forked")

    monkeypatch.setattr(os, "fork", fork)
    assert Memory(root).refresh().file_count == FILES


NAMES = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")
FOLDERS = ("", "notes/", "notes/deep/", "people/")
FORMS = ("list", "wiki", "broken", "missing", "plain", "none", "relative", "links", "refused", "absolute")


def _random_folder(root: Path, files: list[tuple[str, list[int], str]]) -> None:
    """Files named from ``files``: each with the sources given by index, in one of a few
    forms (a list, a wiki link, a line YAML cannot read, a missing source, none)."""
    paths = [f"{folder}{NAMES[index % len(NAMES)]}{index}.md" for index, (folder, _, _) in enumerate(files)]
    for path, (_, sources, form) in zip(paths, files, strict=True):
        named = [paths[source % len(paths)] for source in sources]
        relative = [posixpath.relpath(name, posixpath.dirname(path) or ".") for name in named]
        heads = {
            "list": f"derived_from: [{', '.join('/' + name for name in named)}]\n",
            "wiki": f"derived_from: {', '.join(f'[[{name}]]' for name in named)}\n",
            "broken": f"description: a: b: [c\nderived_from: {', '.join('/' + name for name in named)}\n",
            "missing": "derived_from: /gone.md\n",
            "plain": "type: note\n",
            "relative": f"derived_from: {', '.join(relative)}\n",
            "links": "derived_from:\n" + "".join(f"  - '[{name}]({name})'\n" for name in relative),
            "refused": "derived_from: ../../../../out.md, .provgraph/state, notes/, https://example.com/a.md\n",
            "absolute": f"derived_from: {', '.join(f'{root.resolve()}/{name}' for name in named)}\n",
        }
        text = f"---\nname: {path}\n{heads[form]}---\n\n" if form in heads else "no frontmatter\n"
        write(root, path, text + "body\n" * (len(path) % 7))


@settings(max_examples=examples(20), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(FOLDERS), st.lists(st.integers(0, 40), max_size=3), st.sampled_from(FORMS)),
        min_size=1,
        max_size=30,
    )
)
def test_random_folders_get_the_same_first_scan_from_one_or_two_processes(files) -> None:
    with scratch_folder() as scratch, pytest.MonkeyPatch.context() as monkeypatch:
        root = Path(scratch) / "memory"
        _random_folder(root, files)
        readers(monkeypatch, Path(scratch) / "readers")
        assert first_scan(root, 2) == first_scan(root, 1)

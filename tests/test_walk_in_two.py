"""The command's walk in two processes gives exactly the walk of one.

The quick answer walks the folder with ``walk.walk_in_two``: once the walk has found enough
files, a forked child walks the folders at the bottom of its stack while the command walks
the rest, and the child's answer comes after the command's.  These tests compare it with
``walk_in_order`` on generated trees (split at every point), with children that fail in every
way, and through the real command; ``PROVGRAPH_PROCESSES=1`` never forks.
"""

from __future__ import annotations

import marshal
import os
import shutil
import signal
import time
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from conftest import launch
from depth import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from scratch import scratch_folder

import provgraph.walk
from provgraph.walk import FILES_BEFORE_SPLIT, SETTING, split_after, walk_in_order, walk_in_two

NOW = "2026-11-10T12:00:00+00:00"


@pytest.fixture(autouse=True)
def _forks_beside_the_test_runners_threads() -> Iterator[None]:
    """A test worker may run a thread of the test runner's: the child only walks and
    leaves, which holds no lock of it (Python 3.12 warns of any fork beside a thread)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        yield


def split_at(monkeypatch: pytest.MonkeyPatch, files: int) -> None:
    """The walk forks once it has found ``files`` files (in this test's process, whatever
    its threads and cores)."""
    monkeypatch.setattr(provgraph.walk, "split_after", lambda: files)


def no_child_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


# -- generated trees ------------------------------------------------------------------

FOLDER_NAMES = st.sampled_from([b"a", b"notes", b"deep", b".hidden", b"caf\xc3\xa9", b"\xff\xfe", b"locked"])
FILE_NAMES = st.sampled_from([b"x", b"y z", b".secret", b"r\xc3\xa9sum\xc3\xa9", b"\xfe"])
KINDS = st.sampled_from(["md", "md", "md", "txt", "link-in", "link-out", "link-folder", "dangling", "fifo"])
TREES = st.lists(st.tuples(st.lists(FOLDER_NAMES, max_size=3), FILE_NAMES, KINDS), max_size=30)


def write_tree(root: bytes, outside: bytes, entries: list[tuple[list[bytes], bytes, str]]) -> None:
    """Each entry below its folders: a memory file, another file, a symlink to a file inside
    the root, to one outside it, to a folder, a dangling one, a FIFO."""
    os.makedirs(root)
    with open(os.path.join(root, b"inside.md"), "wb") as target:
        target.write(b"inside\n")
    for folders, name, kind in entries:
        folder = os.path.join(root, *folders)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name + (b".txt" if kind == "txt" else b".md"))
        if os.path.lexists(path):
            continue
        make = {
            "link-in": partial(os.symlink, os.path.join(root, b"inside.md"), path),
            "link-out": partial(os.symlink, outside, path),
            "link-folder": partial(os.symlink, os.path.join(root, b"a"), path),
            "dangling": partial(os.symlink, os.path.join(root, b"gone"), path),
            "fifo": partial(os.mkfifo, path),
        }
        if kind in make:
            make[kind]()
        else:
            with open(path, "wb") as file:
                file.write(b"---\nname: " + name + b"\n---\n" * (len(folders) + 1))


def unreadable_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every folder named ``locked`` cannot be opened, for the command and its child alike
    (the tests may run as root, whom permissions do not stop)."""
    real_open = os.open

    def refusing(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if isinstance(path, str) and os.path.basename(path) == "locked":
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refusing)


@settings(max_examples=examples(120), deadline=None)
@given(TREES, st.integers(0, 12))
def test_the_walk_in_two_gives_the_walk_in_order_on_any_tree(
    entries: list[tuple[list[bytes], bytes, str]], files: int
) -> None:
    with scratch_folder() as scratch, pytest.MonkeyPatch.context() as monkeypatch:
        root = os.path.join(os.fsencode(scratch), b"memory")
        outside = os.path.join(os.fsencode(scratch), b"outside.md")
        with open(outside, "wb") as file:
            file.write(b"outside\n")
        write_tree(root, outside, entries)
        unreadable_folders(monkeypatch)
        split_at(monkeypatch, files)
        named = os.fsdecode(root)
        one = walk_in_order(named, named)
        assert walk_in_two(named, named) == one
        assert no_child_left()


# -- the child's share ----------------------------------------------------------------


def a_folder_in_six(root: Path, files: int = 4) -> None:
    """Six top folders of ``files`` memory files each, one with a subfolder, and a problem."""
    for top in ("journal", "notes", "people", "projects", "reference", "topics"):
        for index in range(files):
            (root / top / "sub").mkdir(parents=True, exist_ok=True)
            (root / top / f"{index}.md").write_text(f"{top} {index}\n", encoding="utf-8")
            (root / top / "sub" / f"{index}.md").write_text(f"{top} sub {index}\n", encoding="utf-8")
    (root / "notes" / "away.md").symlink_to("/etc/hostname")
    (root / "top.md").write_text("top\n", encoding="utf-8")


def walked_by(monkeypatch: pytest.MonkeyPatch, log: Path) -> None:
    """Append to ``log`` each folder listed, and whether the test's process or another listed it."""
    folder, test = provgraph.walk._Walker.folder, os.getpid()

    def logged(walker, path: str, prefix: str) -> None:  # type: ignore[no-untyped-def]
        with log.open("a") as lines:
            lines.write(f"{'command' if os.getpid() == test else 'child'} {prefix}\n")
        folder(walker, path, prefix)

    monkeypatch.setattr(provgraph.walk._Walker, "folder", logged)


def listed(log: Path) -> list[tuple[str, str]]:
    """Each folder listed, in order, and by which process."""
    return [tuple(line.split(" ", 1)) for line in log.read_text().splitlines()]  # type: ignore[misc]


def tops(paths: list[str]) -> list[str]:
    """The top folders of the walk's files, in the order the walk gives them."""
    return list(dict.fromkeys(path.split("/")[0] for path in paths if "/" in path))


@pytest.mark.parametrize("files", [0, 5], ids=["after the root", "after a first folder"])
def test_the_child_walks_the_top_folders_walked_last_and_its_answer_comes_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: int
) -> None:
    """Split after the root, the child takes three of the six top folders; after the root
    and a first top folder (5 files), three of the five left (the first one's subfolder
    lies above them on the stack): in both, the three the walk takes last."""
    root = tmp_path / "memory"
    a_folder_in_six(root)
    one = walk_in_order(str(root), str(root))
    log = tmp_path / "listed"
    walked_by(monkeypatch, log)
    split_at(monkeypatch, files)

    two = walk_in_two(str(root), str(root))

    assert two == one
    assert one[2] == [("notes/away.md", "outside-root", "symlink to a path outside the root")]
    walked = listed(log)
    assert {prefix.split("/")[0] for who, prefix in walked if who == "child"} == set(tops(one[0])[-3:])
    before = 2 if files else 1  # the root, and the first top folder
    assert [who for who, _ in walked[:before]] == ["command"] * before


def test_a_folder_with_fewer_files_than_the_split_needs_never_forks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "memory"
    a_folder_in_six(root)
    monkeypatch.setattr(provgraph.walk, "second_process", lambda *, large: large)
    monkeypatch.setattr(os, "fork", _never)
    assert split_after() == FILES_BEFORE_SPLIT > 6 * 8 + 1
    assert walk_in_two(str(root), str(root)) == walk_in_order(str(root), str(root))


def _never() -> int:
    raise AssertionError("forked")


@pytest.mark.parametrize(
    ("setting", "threads", "cores", "files"),
    [
        (None, 1, 2, FILES_BEFORE_SPLIT),
        ("auto", 1, 2, FILES_BEFORE_SPLIT),
        (None, 1, 1, None),
        (None, 2, 8, None),
        ("1", 1, 8, None),
        ("2", 1, 1, 0),
        ("2", 2, 8, None),
    ],
)
def test_a_walk_forks_beside_one_thread_and_a_second_core_or_as_the_setting_says(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, threads: int, cores: int, files: int | None
) -> None:
    if setting is None:
        monkeypatch.delenv(SETTING, raising=False)
    else:
        monkeypatch.setenv(SETTING, setting)
    monkeypatch.setattr("threading.active_count", lambda: threads)
    monkeypatch.setattr(provgraph.walk, "usable_cores", lambda: cores)
    assert split_after() == files


def test_a_system_that_cannot_fork_walks_in_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SETTING, "2")
    monkeypatch.delattr(os, "fork")
    assert split_after() is None


# -- a child that fails --------------------------------------------------------------


def _send(pipe: int, data: bytes, status: int = 0) -> None:
    os.write(pipe, data)
    os._exit(status)


def _cut_short(pipe: int, real_root: str, folders: list[tuple[str, str]]) -> None:
    walker = provgraph.walk._Walker(real_root)
    walker.pending = folders
    while walker.pending:
        walker.next_folder()
    _send(pipe, marshal.dumps((walker.paths, walker.numbers, walker.problems))[:-3])


CHILDREN: dict[str, Callable[..., None]] = {
    "killed": lambda *args: os.kill(os.getpid(), signal.SIGKILL),
    "garbled": lambda pipe, *args: _send(pipe, b"\xff not marshalled"),
    "another shape": lambda pipe, *args: _send(pipe, marshal.dumps(([], [1], []))),
    "nothing sent": lambda pipe, *args: _send(pipe, b""),
    "cut short": _cut_short,
    "an error exit": lambda pipe, *args: _send(pipe, marshal.dumps(([], [], [])), 1),
}


@pytest.mark.parametrize("failure", [*CHILDREN, "raises", "no process", "no pipe"])
def test_a_child_that_fails_leaves_the_walk_of_one_process_and_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    root = tmp_path / "memory"
    a_folder_in_six(root)
    one = walk_in_order(str(root), str(root))
    split_at(monkeypatch, 0)
    if failure in CHILDREN:
        monkeypatch.setattr(provgraph.walk, "_child", CHILDREN[failure])
    elif failure == "raises":
        test, folder = os.getpid(), provgraph.walk._Walker.folder

        def failing(walker, *args):  # type: ignore[no-untyped-def]
            if os.getpid() != test:
                raise ZeroDivisionError
            folder(walker, *args)

        monkeypatch.setattr(provgraph.walk._Walker, "folder", failing)
    else:
        monkeypatch.setattr(os, "fork" if failure == "no process" else "pipe", _refused)

    assert walk_in_two(str(root), str(root)) == one
    assert no_child_left()


def _refused() -> int:
    raise OSError(11, "Resource temporarily unavailable")


def test_a_walk_interrupted_after_the_fork_kills_and_reaps_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "memory"
    a_folder_in_six(root)
    split_at(monkeypatch, 0)
    monkeypatch.setattr(provgraph.walk, "_child", lambda *args: (time.sleep(60), os._exit(0)))
    folder, listed_folders = provgraph.walk._Walker.folder, []

    def interrupted(walker, *args):  # type: ignore[no-untyped-def]
        listed_folders.append(args)
        if len(listed_folders) > 1:  # the root, then the first folder after the fork
            raise KeyboardInterrupt
        folder(walker, *args)

    monkeypatch.setattr(provgraph.walk._Walker, "folder", interrupted)
    begun = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        walk_in_two(str(root), str(root))
    assert time.monotonic() - begun < 30  # the child's minute of sleep was cut short
    assert no_child_left()


# -- through the command ----------------------------------------------------------------


def status_json(root: Path, processes: int, state: Path) -> tuple[int, bytes, bytes, bytes]:
    """``status --json`` from the state saved in ``state``: exit code, output, errors, lock."""
    shutil.rmtree(root / ".provgraph")
    shutil.copytree(state / ".provgraph", root / ".provgraph", symlinks=True)
    shutil.copy2(state / "provgraph.lock", root / "provgraph.lock")
    done = launch(["status", "--json", root], env={**os.environ, "PROVGRAPH_NOW": NOW, SETTING: str(processes)})
    return done.code, done.stdout, done.stderr, (root / "provgraph.lock").read_bytes()


def forks_logged(monkeypatch: pytest.MonkeyPatch, log: Path) -> None:
    """Append a line to ``log`` for each child the walk forks."""
    fork = provgraph.walk._fork

    def logged(walker):  # type: ignore[no-untyped-def]
        child = fork(walker)
        if child is not None:
            with log.open("a") as lines:
                lines.write(f"{len(child.folders)}\n")
        return child

    monkeypatch.setattr(provgraph.walk, "_fork", logged)


def test_a_changed_folder_gets_the_same_status_from_a_walk_in_one_or_two_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, state = tmp_path / "memory", tmp_path / "saved"
    a_folder_in_six(root)
    (root / "people" / "profile.md").write_text("---\nderived_from: [../notes/1.md, sub/2.md]\n---\n")
    (root / "topics" / "digest.md").write_text("---\nderived_from: [[people/profile]]\n---\n")
    env = {**os.environ, "PROVGRAPH_NOW": "2026-11-01T12:00:00+00:00", SETTING: "1"}
    assert launch(["status", "--json", root], env=env).code == 0  # its answer recorded
    shutil.copytree(root, state, symlinks=True)
    (root / "notes" / "1.md").write_text("notes 1, changed\n", encoding="utf-8")
    log = tmp_path / "forks"
    forks_logged(monkeypatch, log)

    one = status_json(root, 1, state)
    assert not log.exists()
    two = status_json(root, 2, state)

    assert log.read_text() == "3\n"
    assert two == one
    assert one[0] == 0 and one[2] == b""
    assert b'"stale": 2' in one[1] and b"people/profile.md" in one[1] and b"topics/digest.md" in one[1]


def test_with_one_process_the_command_never_forks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither to walk nor to read: a first scan of a folder whose walk forks otherwise, a
    run after a change, a run after none."""
    root = tmp_path / "memory"
    a_folder_in_six(root, files=FILES_BEFORE_SPLIT // 4)
    log = tmp_path / "forks"
    forks_logged(monkeypatch, log)
    with monkeypatch.context() as otherwise:
        otherwise.setattr(provgraph.walk, "second_process", lambda *, large: large)  # two cores, one thread
        assert walk_in_two(str(root), str(root)) == walk_in_order(str(root), str(root))
    assert log.read_text() == "2\n"  # after two top folders (1,001 files), two of the four left
    log.unlink()
    fork, test = os.fork, os.getpid()

    def only_the_test_forks() -> int:  # the test starts each command by forking
        if os.getpid() != test:
            raise AssertionError("the command forked")
        return fork()

    monkeypatch.setattr(os, "fork", only_the_test_forks)
    env = {**os.environ, SETTING: "1"}
    for change in (False, True, False):
        if change:
            (root / "top.md").write_text("top, changed\n", encoding="utf-8")
        done = launch(["status", "--json", root], env=env)
        assert done.code == 0 and done.stderr == b"", done.stderr
        assert b'"files": 3001' in done.stdout
    assert not log.exists()

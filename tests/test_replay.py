"""The command's quick answer (``provgraph.replay``) prints what the full path would print.

Every test runs the real ``provgraph`` command twice on the same folder: first as it
is installed (it may answer from the record of the last run), then with the quick
answer switched off, so that the full path answers.  Stdout, stderr and the exit code
must be the same, byte for byte, after every kind of change and none; and the quick
answer must really answer when nothing changed.  A record is only trusted for files
older than the racy window, so each folder is prepared, then left alone for longer
than that window before the runs that write the records.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import importing, launch

import provgraph.clock as clock
import provgraph.nochange
import provgraph.replay as replay
from provgraph.cli import cli

COMMANDS = (("status",), ("status", "--json"), ("check",))
T0 = datetime(2026, 11, 10, 9, 0, tzinfo=UTC)
T1 = datetime(2026, 11, 17, 9, 0, tzinfo=UTC)
T2 = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
AGING_MARGIN = 0.3
"""Seconds waited beyond a racy window, so that a file's time is surely out of it."""
RACY_WINDOW_NS = provgraph.nochange.RACY_WINDOW_NS
PAST_THE_RACY_WINDOW = RACY_WINDOW_NS / 1e9 + AGING_MARGIN
SETTINGS = {"PROVGRAPH_NOW": T2.isoformat(), "TZ": "UTC"}


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    quick: bool
    """True when the quick answer printed it (the API was never imported)."""


QUICK_MARK = "quick answer printed it\n"
"""A last stderr line the tests add when ``replay.answer`` answered; taken off again."""


def provgraph(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Run:
    """The ``provgraph`` command (its console script, ``launch``), marked when the quick answer
    printed it.  That it then imports no API is shown once, in a fresh interpreter, below."""
    answer = replay.answer

    def marked(argv: Sequence[str]) -> int | None:
        code = answer(argv)
        if code is not None:
            os.write(2, QUICK_MARK.encode())
        return code

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replay, "answer", marked)
        done = launch(args, cwd=cwd, env={**os.environ, **SETTINGS, **(env or {})})
    stderr = done.stderr.decode()
    quick = stderr.endswith(QUICK_MARK)
    return Run(done.code, done.stdout.decode(), stderr.removesuffix(QUICK_MARK) if quick else stderr, quick)


@contextlib.contextmanager
def settings(env: dict[str, str] | None) -> Iterator[None]:
    """This process's environment (the clock, the time zone) as a command would get it."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**SETTINGS, **(env or {})}.items():
            patch.setenv(key, value)
        time.tzset()
        yield
    time.tzset()


def full_path(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Run:
    """The full path alone: ``cli`` never answers from a record (only the console script does)."""
    out, err = io.StringIO(), io.StringIO()
    with settings(env), contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli(*args)
    return Run(code, out.getvalue(), err.getvalue(), False)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def memory_folder(root: Path) -> Path:
    """A profile derived from a fact file, a non-Markdown source and a missing one, a digest
    derived from the profile; the fact changed after the profile was derived."""
    write(root / "facts.md", "---\nname: Facts\n---\nThe user lives in Lyon.\n")
    write(root / "data.txt", "measurements\n")
    write(root / "profile.md", "---\nname: Profile\nderived_from: facts.md, data.txt, gone.md\n---\nLyon.\n")
    write(root / "notes" / "digest.md", "---\nname: Digest\nderived_from: ../profile.md\n---\nDigest.\n")
    write(root / "notes" / "other.md", "---\nname: Other\n---\nUnrelated.\n")
    assert full_path("status", cwd=root, env={"PROVGRAPH_NOW": T0.isoformat()}).code == 0
    write(root / "facts.md", "---\nname: Facts\n---\nThe user lives in Paris.\n")
    assert full_path("status", cwd=root, env={"PROVGRAPH_NOW": T1.isoformat()}).code == 0
    return root


def keep_times_edit(root: Path) -> None:
    """Same size, same mtime, other content: only the ctime (and the sha256) moves."""
    path = root / "notes" / "other.md"
    before = path.stat()
    path.write_text(path.read_text(encoding="utf-8").replace("Unrelated", "Unrelatxd"), encoding="utf-8")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size


def another_clones_stamps(root: Path) -> None:
    """The lock another clone wrote after re-deriving the profile: the profile is fresh there."""
    clone = root.parent / (root.name + "-clone")
    shutil.copytree(root, clone, ignore=shutil.ignore_patterns(".provgraph"))
    done = full_path("stamp", "profile.md", cwd=clone, env={"PROVGRAPH_NOW": T1.isoformat()})
    assert done.code == 0, done.stderr
    shutil.copyfile(clone / "provgraph.lock", root / "provgraph.lock")


def renamed(root: Path) -> None:
    (root / "notes" / "other.md").rename(root / "notes" / "renamed.md")


CHANGES: dict[str, Callable[[Path], object]] = {
    "an edit that keeps the mtime and the size": keep_times_edit,
    "a new file": lambda root: write(root / "new.md", "---\nname: New\nderived_from: facts.md\n---\n"),
    "a deleted file": lambda root: (root / "notes" / "other.md").unlink(),
    "a renamed file": renamed,
    "a source re-derived elsewhere (another clone's lock)": another_clones_stamps,
    "a watched source outside the listing changed": lambda root: write(root / "data.txt", "new measurements\n"),
    "a watched missing source appears": lambda root: write(root / "gone.md", "---\nname: Back\n---\n"),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One folder per case, all copied from one, then left alone past the racy window
    once, then each command run once, so that each writes its record."""
    base = tmp_path_factory.mktemp("replay")
    first = memory_folder(base / "first")
    cases = [*CHANGES, *map(proven, CHANGES), "sync copy", "linked", "nothing changed", "other settings"]
    cases += ["state elsewhere", "racy", "damaged", "proof of another walk"]
    made = {case: Path(shutil.copytree(first, base / f"case{index}")) for index, case in enumerate(cases)}
    elsewhere = base / "states" / "one"
    full_path("status", "--state", str(elsewhere), cwd=made["state elsewhere"])
    time.sleep(PAST_THE_RACY_WINDOW)
    (base / "link").symlink_to(made["linked"])
    for case, root in made.items():
        state = ("--state", str(elsewhere)) if case == "state elsewhere" else ()
        state += (str(base / "link"),) if case == "linked" else ()
        for args in COMMANDS:
            if case == "racy":
                write(root / "notes" / "other.md", f"---\nname: Other\n---\nJust written for {args}.\n")
            assert full_path(*args, *state, cwd=root).code in (0, 1)
    for case in [*map(proven, CHANGES), "proof of another walk"]:
        for args in COMMANDS:
            assert quick_in_process(*args, cwd=made[case]) in (0, 1), (case, args)
    return made


def proven(change: str) -> str:
    """The case of ``change`` made after a quick answer kept the walk it proved."""
    return f"{change}, after a quick answer"


def quick_in_process(*args: str, cwd: Path) -> int | None:
    """The quick answer alone, in this process: its exit code, None when it left it to the full path."""
    with settings(None), contextlib.chdir(cwd), contextlib.redirect_stdout(io.StringIO()):
        return replay.answer(args)


def same_answers(root: Path, *extra: str, env: dict[str, str] | None = None) -> list[bool]:
    """Each covered command, quick path first, then the full path: the same bytes and
    exit code.  Which of them the quick answer printed."""
    quick = []
    for args in COMMANDS:
        first = provgraph(*args, *extra, cwd=root, env=env)
        full = full_path(*args, *extra, cwd=root, env=env)
        assert (first.code, first.stdout, first.stderr) == (full.code, full.stdout, full.stderr), args
        assert first.code in (0, 1) and first.stderr == "", args
        quick.append(first.quick)
    return quick


def test_an_unchanged_folder_gets_the_full_paths_answer_without_importing_the_api(folders) -> None:
    root = folders["nothing changed"]
    assert same_answers(root) == [True, True, True]
    assert "2 stale" in provgraph("status", cwd=root).stdout
    module, imported = importing("-m", "provgraph", "check", cwd=root)
    assert module.returncode == 1 and "2 stale" in module.stdout
    assert "provgraph.replay" in imported


@pytest.mark.parametrize("after_a_quick_answer", [False, True])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_after_any_change_the_command_answers_as_the_full_path(folders, change, after_a_quick_answer) -> None:
    """Whether the record was just written by the full path (the rule is applied in full)
    or a quick answer since kept the walk it proved (the walk is compared with it)."""
    root = folders[proven(change) if after_a_quick_answer else change]
    CHANGES[change](root)
    assert same_answers(root) == [False, False, False]


def test_an_unchanged_folder_is_answered_quickly_again_and_again(folders) -> None:
    """The first quick answer applies the rule in full and keeps the walk it proved;
    the next ones compare the walk with it, and still print the full path's answer."""
    root = folders["nothing changed"]
    for _ in range(3):
        assert same_answers(root) == [True, True, True]


def test_the_quick_answer_leaves_the_garbage_collector_as_it_found_it(folders, tmp_path) -> None:
    """It pauses the collector while it walks; whatever it answers, the process (a full
    run that follows, or a program calling it) gets the collector back as it was."""
    assert gc.isenabled()
    assert quick_in_process("status", cwd=folders["nothing changed"]) == 0
    assert gc.isenabled()
    assert quick_in_process("status", cwd=tmp_path) is None
    assert gc.isenabled()
    gc.disable()
    try:
        assert quick_in_process("status", cwd=folders["nothing changed"]) == 0
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_proof_of_another_walk_is_never_trusted(folders) -> None:
    """A record whose kept walk is not this folder's (another order, other files) falls through."""
    root = folders["proof of another walk"]
    for record in (root / ".provgraph").glob("answer-*"):
        fields = replay._Fields(record.read_bytes()).tail(0)
        assert fields is not None
        proof = 6 + int(fields[4])
        assert fields[proof], "a quick answer keeps the walk it proved"
        other = fields[proof].replace(b"facts.md\0", b"facts.me\0")
        assert other != fields[proof]
        fields[proof] = other
        record.write_bytes(b"".join(replay._packed(fields)))
    assert same_answers(root) == [False, False, False]
    assert same_answers(root) == [True, True, True]


def test_a_file_written_just_before_the_last_run_is_never_trusted(folders) -> None:
    """Its metadata proves nothing yet (the racy window): the full path answers."""
    assert same_answers(folders["racy"]) == [False, False, False]


def test_another_time_zone_or_state_folder_is_answered_by_the_full_path(folders, tmp_path) -> None:
    root = folders["other settings"]
    assert same_answers(root, env={"TZ": "Pacific/Kiritimati"}) == [False, False, False]
    assert same_answers(root, "--state", str(tmp_path / "state")) == [False, False, False]
    assert same_answers(root, "--sources-heading") == [False, False, False]


def test_a_root_named_through_a_symlink_gets_its_quick_answer(folders) -> None:
    root = folders["linked"]
    assert same_answers(root.parent, str(root.parent / "link")) == [True, True, True]
    assert same_answers(root) == [False, False, False]  # named otherwise: recorded anew


def test_a_state_folder_elsewhere_gets_its_own_quick_answer(folders) -> None:
    root = folders["state elsewhere"]
    state = root.parent / "states" / "one"
    assert same_answers(root, "--state", str(state)) == [True, True, True]
    assert same_answers(root, f"--state={state}") == [True, True, True]


@pytest.mark.parametrize("damage", ["missing", "empty", "cut short", "garbage", "torn text", "a folder"])
def test_a_missing_or_damaged_record_falls_through_never_a_traceback(folders, damage) -> None:
    """The record is not synced to the disk: a crash of the machine may leave it torn, its
    text zeroed where every other part still reads (``torn text``).  It is never printed."""
    root = folders["damaged"]
    for record in (root / ".provgraph").glob("answer-*"):
        data = record.read_bytes()
        record.unlink()
        if damage == "torn text":
            start, end = replay._Fields(data).spans[5]
            assert end - start > 2
            record.write_bytes(data[: start + 1] + bytes(end - start - 2) + data[end - 1 :])
        elif damage == "empty":
            record.write_bytes(b"")
        elif damage == "cut short":
            record.write_bytes(data[: len(data) // 2])
        elif damage == "garbage":
            record.write_bytes(b"18\nprovgraph-answer 1\n99999999999999999999\n\x00\xff")
        elif damage == "a folder":
            record.mkdir()
    assert same_answers(root) == [False, False, False]


def test_the_answers_record_is_not_synced_to_the_disk_only_the_lock_is(tmp_path, synced) -> None:
    """The record is derived again by any full run, as the cache is: a full run that writes
    the lock, the cache and a record syncs the lock (and its folder) alone.  A record torn
    by a crash of the machine is never printed (``torn text`` above)."""
    root = memory_folder(tmp_path / "memory")  # two runs, each writing the lock
    assert sorted((root / ".provgraph").glob("answer-*")) == [root / ".provgraph" / "answer-status"]
    assert [name.split(".")[:2] for name in synced] == [["provgraph", "lock"], ["memory"]] * 2


def test_the_quick_json_answer_carries_the_real_now_not_the_stored_one(folders) -> None:
    root = folders["state elsewhere"]
    state = ("--state", str(root.parent / "states" / "one"))
    before = datetime.now(UTC).replace(microsecond=0)
    done = provgraph("status", "--json", *state, cwd=root, env={"PROVGRAPH_NOW": ""})
    after = datetime.now(UTC)
    assert done.quick
    scanned_at = datetime.fromisoformat(done.stdout.split('"scanned_at": "')[1].split('"')[0])
    assert before <= scanned_at <= after + timedelta(seconds=1)
    pinned = provgraph("status", "--json", *state, cwd=root)
    assert pinned.quick and f'"scanned_at": "{T2.isoformat()}"' in pinned.stdout


def test_a_bad_clock_is_the_full_paths_error(folders) -> None:
    root = folders["state elsewhere"]
    state = ("--state", str(root.parent / "states" / "one"))
    quick = provgraph("status", *state, cwd=root, env={"PROVGRAPH_NOW": "tomorrow"})
    full = full_path("status", *state, cwd=root, env={"PROVGRAPH_NOW": "tomorrow"})
    assert (quick.code, quick.stdout, quick.stderr) == (full.code, full.stdout, full.stderr)
    assert quick.code == 2 and not quick.quick


def test_a_sync_tools_copy_of_the_lock_is_merged_by_the_full_path(folders) -> None:
    """The first run after a copy appears merges it and says so: only the full path does."""
    root = folders["sync copy"]
    shutil.copyfile(root / "provgraph.lock", root / "provgraph.sync-conflict-20261124-ABC.lock")
    first = provgraph("status", cwd=root)
    assert not first.quick and "merged" in first.stderr
    full = full_path("status", cwd=root)
    assert (first.code, first.stdout) == (full.code, full.stdout)


def test_the_package_gives_every_public_name_and_imports_the_api_only_when_asked() -> None:
    script = (
        "import sys, provgraph\n"
        "assert 'provgraph.api' not in sys.modules\n"
        "from provgraph import Memory, StateError\n"
        "from provgraph.api import Memory as Same\n"
        "assert Memory is Same and StateError.__name__ == 'StateError'\n"
        "assert [name for name in provgraph.__all__ if getattr(provgraph, name) is None] == []\n"
        "assert set(provgraph.__all__) <= set(dir(provgraph))\n"
        "try:\n"
        "    provgraph.nothing_of_that_name\n"
        "except AttributeError:\n"
        "    print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


@pytest.mark.parametrize(
    ("args", "name", "root", "state", "heading"),
    [
        (["status"], "status", ".", None, None),
        (["status", "mem", "--json"], "status --json", "mem", None, None),
        (["check", "--allow-broken", "--state", "s", "mem"], "check --allow-broken", "mem", "s", None),
        (["check", "--state=s", "--sources-heading"], "check", ".", "s", "## Sources"),
        (["status", "--sources-heading", "--json"], "status --json", ".", None, "## Sources"),
        (["status", "--sources-heading=## Provenance"], "status", ".", None, "## Provenance"),
    ],
)
def test_the_command_lines_the_quick_answer_reads_as_the_full_path_does(args, name, root, state, heading) -> None:
    command = replay.parse(args)
    assert command is not None
    assert (command.name, command.root, command.state, command.heading) == (name, root, state, heading)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["why", "x.md"],
        ["prompt"],
        ["status", "--js"],
        ["status", "--no-cache"],
        ["status", "-h"],
        ["status", "a", "b"],
        ["status", "--"],
        ["check", "--json"],
        ["status", "--allow-broken"],
        ["status", "~/memory"],
        ["status", "--state"],
        ["status", "--state", "--json"],
        ["status", "--state="],
        ["status", "--sources-heading", "mem"],
        ["status", "--sources-heading=Sources"],
    ],
)
def test_any_other_command_line_is_left_to_the_full_path(args) -> None:
    assert replay.parse(args) is None


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/St_Johns", "Pacific/Kiritimati", "Europe/Paris"])
def test_the_quick_answers_now_is_written_as_the_full_path_writes_it(zone, monkeypatch) -> None:
    monkeypatch.setenv("TZ", zone)
    monkeypatch.delenv("PROVGRAPH_NOW", raising=False)
    time.tzset()
    before = datetime.now().astimezone().isoformat(timespec="seconds")
    written = clock.now_text()
    after = datetime.now().astimezone().isoformat(timespec="seconds")
    assert written in (before, after)
    monkeypatch.setenv("PROVGRAPH_NOW", "2026-11-24T10:00:00+05:30")
    assert clock.now_text() == "2026-11-24T10:00:00+05:30"


_COUNTING_LOCK_OPENS = """
import sys
opened = []
def hook(event, args):
    if event == "open" and str(args[0]).endswith("provgraph.lock"):
        opened.append(args[0])
sys.addaudithook(hook)
"""
OPENED_LOCK = (
    _COUNTING_LOCK_OPENS
    + """
import provgraph.nochange
provgraph.nochange.RACY_WINDOW_NS = int(sys.argv[1])
from provgraph.replay import answer
code = answer(sys.argv[2:])
print(code, len(opened), file=sys.stderr)
"""
)
SHORT_RACY_WINDOW_NS = 500_000_000
"""A racy window for the tests that only need files to age past it: the rule is the same
whatever its length, and the folders of ``folders`` show it at its real length."""


def shorter_racy_window(patch: pytest.MonkeyPatch) -> float:
    """Every copy of the window in the package (and in each forked command) at
    ``SHORT_RACY_WINDOW_NS``; returns the seconds to wait for a file to age past it."""
    for module in [module for name, module in sys.modules.items() if name.partition(".")[0] == "provgraph"]:
        if hasattr(module, "RACY_WINDOW_NS"):
            patch.setattr(module, "RACY_WINDOW_NS", SHORT_RACY_WINDOW_NS)
    return SHORT_RACY_WINDOW_NS / 1e9 + AGING_MARGIN


def test_a_lock_read_because_it_was_young_is_sealed_again_once_old_and_a_change_is_still_seen(
    tmp_path, monkeypatch
) -> None:
    """The last full run wrote the lock, so its metadata proves nothing yet and every quick
    answer reads it.  Once it is past the racy window, the quick answer that read it seals
    it again: the next ones leave it unopened, and another lock, or the same bytes written
    again, are still told apart."""
    past_the_window = shorter_racy_window(monkeypatch)
    root = memory_folder(tmp_path / "memory")
    time.sleep(past_the_window)  # the files age; then a stamp writes the lock, a full run records it
    assert full_path("stamp", "profile.md", cwd=root).code == 0
    assert full_path("status", cwd=root).code == 0
    time.sleep(past_the_window)
    environment = {**os.environ, **SETTINGS}

    def quick_opens() -> tuple[str, str]:
        done = subprocess.run(
            [sys.executable, "-c", OPENED_LOCK, str(SHORT_RACY_WINDOW_NS), "status"],
            cwd=root,
            env=environment,
            capture_output=True,
            text=True,
        )
        code, opened = done.stderr.split()
        return code, opened

    assert quick_opens() == ("0", "1")  # read, found to be the sealed bytes, sealed again
    assert quick_opens() == ("0", "0")
    lock = root / "provgraph.lock"
    lock.write_bytes(lock.read_bytes())  # the same bytes, new metadata: read and compared again
    assert same_answers(root)[0]
    another_clones_stamps(root)
    assert same_answers(root) == [False, False, False]


def test_a_record_keeps_the_locks_bytes_only_while_its_metadata_cannot_prove_them(tmp_path) -> None:
    """A run right after the lock was written keeps its bytes, to compare a young lock with;
    a run that seals a lock older than the racy window keeps none (they would only be read
    with the record at every answer), and its quick answer never opens the lock."""
    root = memory_folder(tmp_path / "memory")  # its last run wrote the lock

    def kept_lock_bytes() -> bytes:
        fields = replay._Fields((root / ".provgraph" / "answer-status").read_bytes()).tail(0)
        assert fields is not None and fields[4] == b"1"
        return fields[6]

    assert full_path("status", cwd=root).code == 0
    assert kept_lock_bytes() == b"=" + (root / "provgraph.lock").read_bytes()
    time.sleep(PAST_THE_RACY_WINDOW)
    assert full_path("status", cwd=root).code == 0
    assert kept_lock_bytes() == b""
    done = subprocess.run(
        [sys.executable, "-c", OPENED_LOCK, str(RACY_WINDOW_NS), "status"],
        cwd=root,
        env={**os.environ, **SETTINGS},
        capture_output=True,
        text=True,
    )
    assert done.stderr.split() == ["0", "0"]  # answered, the lock unopened
    assert same_answers(root)[0]  # ``status``, the full path's very answer


OPENED_LOCK_BY_A_FULL_RUN = (
    _COUNTING_LOCK_OPENS
    + """
from provgraph.replay import answer
code = answer(sys.argv[1:])
if code is None:
    from provgraph.cli import cli
    code = cli(*sys.argv[1:])
print(code, len(opened), file=sys.stderr)
"""
)


def test_a_change_run_while_the_lock_is_young_reads_it_once_and_its_record_keeps_those_bytes(tmp_path) -> None:
    """Right after a run wrote the lock, its metadata proves nothing: the command after a small
    change reads it once, both to find it is the lock the cache was written with and to
    patch it, and the record it leaves keeps those very bytes (to compare a young lock
    with) without reading the lock again; the answers stay the full path's."""
    root = memory_folder(tmp_path / "memory")  # its last run wrote the lock
    write(root / "notes" / "other.md", "---\nname: Other\n---\nEdited.\n")
    done = subprocess.run(
        [sys.executable, "-c", OPENED_LOCK_BY_A_FULL_RUN, "status"],
        cwd=root,
        env={**os.environ, **SETTINGS},
        capture_output=True,
        text=True,
    )
    assert done.stderr.split() == ["0", "1"]
    fields = replay._Fields((root / ".provgraph" / "answer-status").read_bytes()).tail(0)
    assert fields[6] == b"=" + (root / "provgraph.lock").read_bytes()
    time.sleep(PAST_THE_RACY_WINDOW)
    same_answers(root)
    assert same_answers(root) == [True, True, True]
    another_clones_stamps(root)
    assert same_answers(root) == [False, False, False]


def test_a_lock_is_sealed_again_only_when_old_enough_and_not_already_proven() -> None:
    from provgraph.nochange import RACY_WINDOW_NS, LockSeal, lock_as_sealed, renewed_seal

    written = time.time_ns()
    meta = (4, written, written, 7)
    young = LockSeal(meta, hashlib.sha256(b"lock").hexdigest(), written + 1)
    later = written + RACY_WINDOW_NS + 1
    assert renewed_seal(young, meta, written + RACY_WINDOW_NS) is None  # still within the window
    renewed = renewed_seal(young, meta, later)
    assert renewed == LockSeal(meta, young.sha256, later)
    assert lock_as_sealed(renewed, meta, lambda: b"never read")
    assert not lock_as_sealed(renewed, (4, written, written + 1, 7), lambda: b"lokc")
    assert renewed_seal(renewed, meta, later + 1) is None  # already proven by its metadata
    assert renewed_seal(None, meta, later) is None and renewed_seal(young, None, later) is None


def test_a_lock_younger_than_its_seal_is_compared_by_content_hashed_or_known() -> None:
    """Rule 2: metadata proves the lock only once it is older than the racy window; before
    that its bytes decide, hashed, or compared with bytes known to have the seal's sha256."""
    from provgraph.nochange import RACY_WINDOW_NS, LockSeal, lock_as_sealed

    written = time.time_ns()
    meta = (4, written, written, 7)
    seal = LockSeal(meta, hashlib.sha256(b"lock").hexdigest(), written + 1)
    for known in (None, b"lock"):
        assert lock_as_sealed(seal, meta, lambda: b"lock", known)
        assert not lock_as_sealed(seal, meta, lambda: b"lokc", known)
        assert not lock_as_sealed(seal, meta, lambda: None, known)
    old = LockSeal(meta, seal.sha256, written + RACY_WINDOW_NS + 1)
    assert lock_as_sealed(old, meta, lambda: b"never read")
    assert not lock_as_sealed(old, (4, written, written + 1, 7), lambda: b"lokc")
    assert lock_as_sealed(None, None, lambda: None) and not lock_as_sealed(seal, None, lambda: None)

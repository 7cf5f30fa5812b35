"""Faults: a process killed while it writes the lock or the cache, a full disk, a
read-only state folder, a corrupt lock or cache.  What is on disk is always the previous
or the next whole file; errors are one line and exit 2; an unreadable file is kept and
rebuilt."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from cachefile import check_line, document, written
from depth import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provgraph import Memory
from provgraph.cli import cli
from provgraph.stamps import Derivation
from provgraph.store.cache import Cache
from provgraph.store.lock import decode_lock
from provgraph.store.state import StateStore

from .helpers import (
    IS_ROOT,
    NOW,
    TIMEOUT,
    Done,
    assert_clean,
    assert_one_error_line,
    derived,
    environment,
    provgraph,
    write,
)

SOURCES = 200


def _folder(root: Path, files: int) -> None:
    """``files`` small memory files, and ``d.md`` derived from the first ``SOURCES`` of them."""
    folder = root / "f"
    folder.mkdir()
    for index in range(files):
        descriptor = os.open(folder / f"{index}.md", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(descriptor, b"fact %d\n" % index)
        os.close(descriptor)
    write(root, "d.md", derived(*(f"f/{index}.md" for index in range(SOURCES))))
    write(root, "MEMORY.md", "# index\n")


def _load(root: Path) -> dict[str, Derivation]:
    """The stamps in the lock, and the cache on disk, which must be whole: loading them warns about nothing."""
    warnings: list[str] = []
    store = StateStore(root, warn=warnings.append, settings=Memory(root)._settings)
    with store.locked():
        stamps = store.stamps()
        assert store.cache() is not None
    assert warnings == []
    return stamps


def _stamped_at(lock: Path) -> float | None:
    """When ``d.md`` was last stamped according to the lock (None: no lock yet)."""
    if not lock.exists():
        return None
    read = decode_lock(lock.read_bytes())
    assert read.damaged == read.merged == 0
    times = {record.stamp.stamped_at for key, record in read.records.items() if key[0] == "d.md"}
    assert len(times) == 1 and len(read.records) == SOURCES
    return times.pop()


def _leftovers(folder: Path) -> list[str]:
    """What is in the state folder besides the cache and the lock's lock file."""
    own = {"cache.json", "flock"}
    return sorted(path.name for path in folder.iterdir() if path.name not in own)


def test_kill_9_at_random_moments_leaves_the_previous_or_the_next_state(root: Path) -> None:
    _folder(root, 3_000)
    state = root / "provgraph.lock"
    assert_clean(provgraph("stamp", root / "d.md"), 0)
    started = time.monotonic()
    assert_clean(provgraph("stamp", root / "d.md"), 0)
    duration = time.monotonic() - started  # the kills land across the second half of a run
    previous = _stamped_at(state)
    chance = random.Random(20261120)

    for round_ in range(1, 13):
        now = NOW + timedelta(minutes=round_)
        command = [sys.executable, "-m", "provgraph", "stamp", os.fspath(root / "d.md")]
        with subprocess.Popen(
            command, env=environment(PROVGRAPH_NOW=now.isoformat()), stdout=subprocess.DEVNULL
        ) as run:
            time.sleep(chance.uniform(0.5, 1.2) * duration)
            run.kill()
        recorded = _stamped_at(state)
        assert recorded in (previous, now.timestamp())
        previous = recorded

    assert_clean(provgraph("status", root), 0)
    assert _leftovers(root / ".provgraph") == []  # temporaries of killed writers are cleaned up, nothing set aside


PAUSE = """
import os, sys, time
point, argv = sys.argv[1], sys.argv[2:]

def pause():
    print("paused", flush=True)
    time.sleep(600)

if point == "before-sync":
    os.fsync = lambda descriptor: pause()
elif point == "after-rename":
    rename = os.rename
    def renamed(*args, **options):
        rename(*args, **options)
        if os.fspath(args[1]).endswith("provgraph.lock"):  # the lock's own write, not the cache's
            pause()
    os.rename = renamed
else:  # mid-write: the temporary file holds half of the new lock when the process dies
    fdopen = os.fdopen
    def half_written(*args, **options):
        handle = fdopen(*args, **options)
        def writelines(chunks):
            handle.write(b"# provgraph lock 2: half\\n[\\"d.md\\", ")
            handle.flush()
            pause()
        handle.writelines = writelines
        return handle
    os.fdopen = half_written

from provgraph.cli import cli
sys.exit(cli(*argv))
"""


@pytest.mark.parametrize(
    ("point", "keeps"), [("mid-write", "previous"), ("before-sync", "previous"), ("after-rename", "next")]
)
def test_kill_9_at_each_step_of_a_write_leaves_a_whole_state(point: str, keeps: str, root: Path) -> None:
    """The deterministic counterpart of the random kills: the writer dies at a known step."""
    _folder(root, SOURCES)
    state = root / "provgraph.lock"
    assert_clean(provgraph("stamp", root / "d.md"), 0)
    previous = _stamped_at(state)
    now = NOW + timedelta(days=1)
    command = [sys.executable, "-c", PAUSE, point, "stamp", os.fspath(root / "d.md")]
    with subprocess.Popen(command, env=environment(PROVGRAPH_NOW=now.isoformat()), stdout=subprocess.PIPE) as run:
        assert run.stdout is not None
        assert run.stdout.readline() == b"paused\n"
        run.kill()

    assert _stamped_at(state) == (previous if keeps == "previous" else now.timestamp())
    assert_clean(provgraph("status", root), 0)
    assert _leftovers(root / ".provgraph") == []


# -- full disk and read-only state ---------------------------------------------------------------


def _lived(root: Path) -> Path:
    """A root with a lock, then a change, so that the next scan must write the lock."""
    _folder(root, SOURCES)
    assert_clean(provgraph("status", root), 0)
    write(root, "f/0.md", "changed\n")
    return root / "provgraph.lock"


def _refuse_state_files(monkeypatch: pytest.MonkeyPatch, folder: Path, code: int, *, writes_only: bool) -> None:
    """``os.open`` fails with ``code`` for files opened in ``folder``: new files only (a full
    disk), or any open for writing (a read-only file system)."""
    open_ = os.open

    def refusing(path: str | os.PathLike[str], flags: int, *args: object, **options: object) -> int:
        writing = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        creating = flags & os.O_EXCL
        dir_fd = options.get("dir_fd")
        where = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else os.path.dirname(path)
        if where == os.fspath(folder) and (creating or (writing and not writes_only)):
            raise OSError(code, os.strerror(code), os.fspath(path))
        return open_(path, flags, *args, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refusing)


def _no_space(*args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fail_handle_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file object made from a descriptor refuses to write, as on a full disk."""
    fdopen = os.fdopen

    def full_disk(*args: object, **options: object) -> object:
        handle = fdopen(*args, **options)  # type: ignore[call-overload]
        handle.write = _no_space
        return handle

    monkeypatch.setattr(os, "fdopen", full_disk)


@pytest.mark.parametrize("where", ["new-file", "handle-write", "fsync"])
def test_a_full_disk_is_one_error_line_and_the_old_state_is_kept(
    where: str, root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _lived(root)
    before = state.read_bytes()
    if where == "fsync":
        monkeypatch.setattr(os, "fsync", _no_space)
    elif where == "handle-write":
        _fail_handle_writes(monkeypatch)
    else:
        _refuse_state_files(monkeypatch, root / ".provgraph", errno.ENOSPC, writes_only=True)
    monkeypatch.setenv("PROVGRAPH_NOW", NOW.isoformat())

    code = cli("status", str(root))
    captured = capsys.readouterr()

    line = assert_one_error_line(Done(code, captured.out, captured.err))
    assert os.strerror(errno.ENOSPC) in line and str(state) in line
    assert state.read_bytes() == before
    assert _leftovers(root / ".provgraph") == []


FILE_SIZE_LIMIT = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from provgraph.cli import cli
sys.exit(cli(*sys.argv[2:]))
"""


def test_a_write_cut_short_by_the_system_is_one_error_line_and_the_old_state_is_kept(root: Path) -> None:
    """A real failed write, not a simulated one: the kernel refuses bytes past a file size limit."""
    state = _lived(root)
    before = state.read_bytes()
    limit = len(before) // 2
    done = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMIT, str(limit), "status", os.fspath(root)],
        env=environment(),
        capture_output=True,
        timeout=TIMEOUT,
    )
    stderr = done.stderr.decode()
    assert done.returncode == 2 and len(stderr.splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert stderr.startswith("provgraph: error: cannot write the lock file") and os.strerror(errno.EFBIG) in stderr
    assert state.read_bytes() == before
    assert _leftovers(root / ".provgraph") == []


def test_a_read_only_state_folder_is_one_error_line_and_state_elsewhere_works(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _lived(root)
    before = state.read_bytes()
    _refuse_state_files(monkeypatch, root / ".provgraph", errno.EROFS, writes_only=False)
    monkeypatch.setenv("PROVGRAPH_NOW", NOW.isoformat())

    code = cli("status", str(root))
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("provgraph: error: ")
    assert os.strerror(errno.EROFS) in err and "--state" in err
    assert state.read_bytes() == before

    assert cli("status", "--state", str(tmp_path / "elsewhere"), str(root)) == 0
    assert state.read_bytes() == before


@pytest.mark.skipif(IS_ROOT, reason="mode 555 does not stop root; the EROFS variant covers it")
def test_a_state_folder_of_mode_555_is_one_error_line(root: Path) -> None:
    state = _lived(root)
    before = state.read_bytes()
    (root / ".provgraph").chmod(0o555)
    try:
        line = assert_one_error_line(provgraph("status", root))
    finally:
        (root / ".provgraph").chmod(0o755)
    assert os.strerror(errno.EACCES) in line and "--state" in line
    assert state.read_bytes() == before


# -- corrupt, truncated and foreign state files --------------------------------------------------


def _damaged(valid: bytes) -> dict[str, bytes]:
    header, first, *rest = valid.splitlines(keepends=True)
    return {
        "garbage": b"\x00\xff\xfe not a lock at all",
        "truncated": valid[: len(valid) // 2],
        "empty": b"",
        "foreign": b'{"name": "another program", "version": 1}',
        "array": b"[1, 2, 3]",
        "unknown-version": valid.replace(b"# provgraph lock 2:", b"# provgraph lock one:"),
        "wrong-types": b"".join([header, b'["d.md", 3, {}, "x", [], 1]\n', *rest]),
        "wrong-rows": b"".join([header, first[:-3] + b"]\n", *rest]),
        "deep-nesting": b"".join([header, b"[" * 100_000 + b"\n", *rest]),
        "huge-number": b"".join([header, first.replace(b'",1', b'",1e999999', 1), *rest]),
        "out-of-range-date": b"".join([header, first.replace(b'",1', b'",99999999999', 1), *rest]),
    }


@pytest.mark.parametrize(
    "damage",
    [
        "garbage",
        "truncated",
        "empty",
        "foreign",
        "array",
        "unknown-version",
        "wrong-types",
        "wrong-rows",
        "deep-nesting",
        "huge-number",
        "out-of-range-date",
    ],
)
def test_a_damaged_lock_is_kept_aside_and_rebuilt_with_one_warning(damage: str, root: Path) -> None:
    _folder(root, SOURCES)
    assert_clean(provgraph("status", root), 0)
    state = root / "provgraph.lock"
    content = _damaged(state.read_bytes())[damage]
    state.write_bytes(content)

    done = provgraph("status", "--json", root)

    assert_clean(done, 0)
    (warning,) = done.stderr.splitlines()
    assert warning.startswith(f"provgraph: warning: {state} could not be read")
    (kept,) = [path for path in (root / ".provgraph").iterdir() if ".corrupt-" in path.name]
    assert kept.read_bytes() == content and kept.name in warning
    assert json.loads(done.stdout)["counts"] == {
        "files": SOURCES + 2,
        "derived": 1,
        "stale": 0,
        "cycles": 0,
        "problems": 0,
    }
    assert _load(root).keys() == {"d.md"}


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    """Every position in a JSON document, as a tuple of keys and indexes."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _replaced(document: object, path: tuple, value: object) -> object:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(document, dict):
        return {**document, head: _replaced(document[head], rest, value)}
    copy = list(document)  # type: ignore[call-overload]
    copy[head] = _replaced(copy[head], rest, value)
    return copy


@pytest.fixture(scope="module")
def lived_state(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A memory root whose state holds every kind of row: stamps, stale files, a cycle, problems."""
    root = tmp_path_factory.mktemp("lived") / "memory"
    write(root, "a.md", "a\n")
    write(root, "b.md", derived("a.md", "gone.md", "../outside.md"))
    write(root, "c.md", derived("b.md", "d.md"))
    write(root, "d.md", derived("c.md"))
    memory = Memory(root, state=root.parent / "state")
    memory.refresh(now=NOW)
    write(root, "a.md", "changed\n")
    memory.refresh(now=NOW + timedelta(days=1))
    return root, (root.parent / "state" / "cache.json").read_bytes()


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_damage_to_a_cache_document_loads_or_is_set_aside(
    data: st.DataObject, lived_state: tuple[Path, bytes], tmp_path: Path
) -> None:
    """Replace any one value of a real cache document by any JSON value: loading never raises,
    and whatever loads can be scanned with."""
    root, valid = lived_state
    found = document(valid)
    where = data.draw(st.sampled_from(_paths(found)))
    damaged = _replaced(found, where, data.draw(_JSON))
    folder = tmp_path / f"state-{os.getpid()}-{time.monotonic_ns()}"
    shutil.copytree(root.parent / "state", folder)
    path = folder / "cache.json"
    path.write_bytes(written(damaged, check_line(valid)))
    warnings: list[str] = []

    store = StateStore(root, folder, warn=warnings.append, settings=Memory(root, state=folder)._settings)
    with store.locked():
        loaded = store.cache()

    assert loaded is None or isinstance(loaded, Cache)
    assert path.exists() != bool(warnings)  # set aside exactly when it could not be read
    report = Memory(root, state=folder, warn=warnings.append).refresh(now=NOW + timedelta(days=2))
    assert report.file_count == 4


def test_a_state_of_another_format_is_never_overwritten_in_place(root: Path) -> None:
    """A file that is not provgraph's at the state path is moved aside before anything is written."""
    state = root / ".provgraph" / "state.json"
    write(root, ".provgraph/state.json", json.dumps({"format": "provgraph-state-other", "data": [1, 2, 3]}))
    original = state.read_bytes()
    write(root, "a.md", "a\n")
    done = provgraph("status", root)
    assert_clean(done, 0)
    (kept,) = [path for path in state.parent.iterdir() if ".corrupt-" in path.name]
    assert kept.read_bytes() == original


@pytest.mark.parametrize("name", ["provgraph.lock", ".provgraph/cache.json"])
@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero", "folder"])
def test_a_state_path_that_is_not_a_regular_file_is_one_error_line_not_a_hang(kind: str, name: str, root: Path) -> None:
    """A FIFO at the lock or the cache would block a reader forever and ``/dev/zero`` never
    end: neither is read, whoever planted it in the memory folder."""
    write(root, "a.md", "a\n")
    state = root / name
    (root / ".provgraph").mkdir()
    if kind == "fifo":
        os.mkfifo(state)
    elif kind == "folder":
        state.mkdir()
    else:
        state.symlink_to("/dev/zero")
    for command in ("status", "prompt"):
        line = assert_one_error_line(provgraph(command, root))
        assert str(state) in line

"""Shared fixtures: a memory folder to write into, a pinned clock, and the real command.

- ``memory``: a temporary memory root (``memory.root``) with ``write`` for
  memory files with frontmatter, ``write_bytes`` for anything else,
  ``set_mtime`` and ``open`` (a ``provgraph.Memory`` on the root).
- ``clock``: a fixed, aware ``datetime`` that tests move forward explicitly.
- every test runs with ``TZ=UTC``, so dates print the same everywhere.
- ``run``: the ``provgraph`` command in a process of its own, returning
  ``(exit code, stdout, stderr)``.

Every process a test starts runs the code under test, the package this file
imports (the checkout's ``provgraph/``, which ``pythonpath`` in pyproject.toml
puts first), whether the package is installed editable or as a copy:
``PYTHONPATH`` names its folder, and ``PROVGRAPH`` is a launcher of that code,
not the console script an install put beside the interpreter.

A command is started by ``launch``: a fork of the test process that runs the
console script's ``main()`` with its own arguments, folder, environment and
standard streams, and exits with its code, as the launcher would, without paying
again for an interpreter start and the imports (a tenth of a second each time, a
few hundred times a run).  Whatever only a new interpreter honours (its
``PYTHON*`` variables, ``-X`` options) goes to a real process.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import importlib
import logging
import os
import pkgutil
import selectors
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import pytest
from depth import default_examples
from hypothesis import settings
from scratch import temporary_folders_in_memory

import provgraph
from provgraph import Memory

CODE_UNDER_TEST = Path(provgraph.__file__).resolve().parent.parent
"""The folder holding the ``provgraph`` package the tests import."""


def _code_under_test_for_every_process() -> None:
    """Put the tested package first on every child interpreter's path, as on ours."""
    inherited = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.fspath(CODE_UNDER_TEST), inherited]))


def _launcher() -> Path:
    """A ``provgraph`` command in a private folder that runs the code under test with
    this interpreter: what the console script does, whatever was installed."""
    folder = Path(tempfile.mkdtemp(prefix="provgraph-command-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    command = folder / "provgraph"
    command.write_text(f"#!{sys.executable}\nimport sys\n\nfrom provgraph.cli import main\n\nsys.exit(main())\n")
    command.chmod(0o755)
    return command


def _bytecode_kept_for_every_process() -> None:
    """Let the processes of the run compile each module once, not at every start.

    Under ``PYTHONDONTWRITEBYTECODE`` every worker of the run and every ``provgraph`` a
    test starts would compile the package, the tests and the modules pytest rewrites
    (hypothesis, anyio) from source again: seconds of each worker's start.  They keep
    their bytecode in a folder of the user's under the temporary folder instead
    (``PYTHONPYCACHEPREFIX``), kept from run to run, so nothing is written beside the
    sources, as the variable asks.  Set before the parallel workers start, it is theirs
    too."""
    if not os.environ.pop("PYTHONDONTWRITEBYTECODE", ""):
        return
    if not os.environ.get("PYTHONPYCACHEPREFIX"):
        os.environ["PYTHONPYCACHEPREFIX"] = _bytecode_folder()


def _bytecode_folder() -> str:
    """``provgraph-test-bytecode-UID`` in the temporary folder, when it is this user's own
    folder (not a link, not another user's); else a new folder for this run alone."""
    folder = Path(tempfile.gettempdir()) / f"provgraph-test-bytecode-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    seen = folder.lstat()
    if stat.S_ISDIR(seen.st_mode) and seen.st_uid == os.getuid() and not seen.st_mode & 0o022:
        if "PYTEST_XDIST_WORKER" not in os.environ:  # once a run, by the process that starts it
            _forget_bytecode_of_removed_folders(folder)
        return os.fspath(folder)
    fresh = tempfile.mkdtemp(prefix="provgraph-bytecode-")
    atexit.register(shutil.rmtree, fresh, ignore_errors=True)
    return fresh


def _forget_bytecode_of_removed_folders(folder: Path, mirror: Path | None = None, depth: int = 4) -> None:
    """The folder mirrors the source folders by their whole path (``/tmp/clone/x.py`` is
    kept as ``folder/tmp/clone/x.cpython-311.pyc``): the copy of a folder that no longer
    exists (a removed clone, an old virtual environment), looked for ``depth`` levels
    down, is removed, so that the folder, in memory, does not grow with every clone that
    ran once."""
    for copy in (mirror or folder).iterdir():
        if copy.is_symlink() or not copy.is_dir():
            continue
        source = Path("/") / copy.relative_to(folder)
        if not source.is_dir():
            shutil.rmtree(copy, ignore_errors=True)
        elif depth > 1:
            _forget_bytecode_of_removed_folders(folder, copy, depth - 1)


temporary_folders_in_memory()
settings.register_profile("provgraph", max_examples=default_examples())
settings.load_profile("provgraph")  # the depth of a property that names none (``depth.py``)
_code_under_test_for_every_process()
_bytecode_kept_for_every_process()
PROVGRAPH = _launcher()
"""The ``provgraph`` command of the tests, first on every process's ``PATH``: a command
provgraph prints as ``provgraph ...`` runs the code under test, as an installed one would."""
os.environ["PATH"] = os.pathsep.join([os.fspath(PROVGRAPH.parent), os.environ.get("PATH", "")])


def importing(*command: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``python -X importtime *command`` (``str(PROVGRAPH), "status"``, ``"-m", "provgraph", ...``):
    what it did, and the name of every module it imported (its stderr also holds those lines)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *command], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    lines = done.stderr.splitlines()
    return done, {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}


START = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
"""Where every clock starts: before any real file time, so a file written by a
test never has an mtime inside the window between a stamp and a scan unless
the test sets it there with ``set_mtime``."""


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    """Dates are rendered in the local zone; pin it so that expected dates hold anywhere."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", "UTC")
        time.tzset()
        yield
    time.tzset()


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files and folders synced to the disk (``os.fsync``) from now on, in order."""
    names: list[str] = []
    fsync = os.fsync

    def noted(descriptor: int) -> None:
        names.append(os.path.basename(os.readlink(f"/proc/self/fd/{descriptor}")))
        fsync(descriptor)

    monkeypatch.setattr(os, "fsync", noted)
    return names


class Clock:
    """A clock that only moves when told: ``clock.now``, ``clock.advance(days=1)``."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def advance(self, **delta: float) -> datetime:
        """Move forward by ``timedelta(**delta)`` and return the new time."""
        self.now = self.now + timedelta(**delta)
        return self.now

    @property
    def epoch(self) -> float:
        return self.now.timestamp()

    @property
    def iso(self) -> str:
        """The value for ``PROVGRAPH_NOW``."""
        return self.now.isoformat()

    @property
    def day(self) -> str:
        return self.now.date().isoformat()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@dataclass
class MemoryFolder:
    """A memory root under a temporary folder, and ways to fill it."""

    root: Path

    def path(self, relative: str) -> Path:
        return self.root / relative

    def write(
        self,
        relative: str,
        body: str = "",
        *,
        derived_from: str | Sequence[str] | None = None,
        derived_at: str | None = None,
        mtime: datetime | float | None = None,
    ) -> Path:
        """Write a memory file; frontmatter only when a derivation field is given.

        ``derived_from`` as a string is written verbatim after the key (any
        form of SPEC 1); as a list it becomes a block list.
        """
        lines = []
        if isinstance(derived_from, str):
            lines.append(f"derived_from: {derived_from}")
        elif derived_from is not None:
            lines += ["derived_from:", *(f"  - {entry}" for entry in derived_from)]
        if derived_at is not None:
            lines.append(f"derived_at: {derived_at}")
        text = "---\n" + "\n".join(lines) + "\n---\n" + body if lines else body
        return self.write_bytes(relative, text.encode(), mtime=mtime)

    def write_bytes(self, relative: str, data: bytes, *, mtime: datetime | float | None = None) -> Path:
        """Write exactly ``data`` (creating folders); optionally set the mtime afterwards."""
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if mtime is not None:
            self.set_mtime(relative, mtime)
        return target

    def set_mtime(self, relative: str, when: datetime | float) -> None:
        stamp = when.timestamp() if isinstance(when, datetime) else when
        os.utime(self.root / relative, (stamp, stamp))

    def open(self, **options: object) -> Memory:
        """A ``provgraph.Memory`` on this root (options: ``state``, ``files``, ``warn``)."""
        return Memory(self.root, **options)  # type: ignore[arg-type]


@pytest.fixture
def memory(tmp_path: Path) -> MemoryFolder:
    root = tmp_path / "memory"
    root.mkdir()
    return MemoryFolder(root)


@dataclass(frozen=True)
class Launched:
    """A finished ``provgraph`` command: exit code and the bytes of its two streams."""

    code: int
    stdout: bytes
    stderr: bytes


FRESH_INTERPRETER_ONLY = "PYTHON"
"""Variables read by an interpreter as it starts: a command whose environment changes
one of them runs in a real process, not in a fork that started long ago; except
``PYTHONUTF8``, which the fork honours already (its streams are UTF-8)."""
PIPE_CAPACITY = 4096
"""Bytes of standard input written before the fork starts reading (a pipe's least size)."""


def launch(
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    input: bytes = b"",
    timeout: float = 60,
) -> Launched:
    """``provgraph ARGS`` in a process of its own; ``env`` is its whole environment."""
    environment = dict(os.environ if env is None else env)
    argv = [os.fspath(arg) for arg in args]
    if _needs_fresh_interpreter(environment) or len(input) > PIPE_CAPACITY:
        return _launch_process(argv, cwd, environment, input, timeout)
    return _launch_fork(argv, cwd, environment, input, timeout)


def _needs_fresh_interpreter(environment: dict[str, str]) -> bool:
    return any(
        environment.get(key) != os.environ.get(key)
        for key in environment.keys() | os.environ.keys()
        if key.startswith(FRESH_INTERPRETER_ONLY) and key != "PYTHONUTF8"
    )


def _launch_process(
    argv: list[str], cwd: str | os.PathLike[str] | None, environment: dict[str, str], input: bytes, timeout: float
) -> Launched:
    done = subprocess.run(
        [os.fspath(PROVGRAPH), *argv], cwd=cwd, env=environment, input=input, capture_output=True, timeout=timeout
    )
    return Launched(done.returncode, done.stdout, done.stderr)


NO_COMMAND_IMPORTS = "provgraph.integrations.agentscope"
"""The AgentScope integration, which no command imports (``test_agentscope.py`` shows it):
importing it before a fork would cost every worker of the run AgentScope's seconds of imports."""


@functools.cache
def _imported_before_forking() -> None:
    """Import once, here, what a command may import: each fork then starts with it, as
    the launcher's interpreter finds it in its bytecode, instead of compiling it anew."""
    names = [module.name for module in pkgutil.walk_packages(provgraph.__path__, "provgraph.")]
    for name in ["argparse", "networkx", "yaml", *names]:
        if name != "provgraph.__main__" and not name.startswith(NO_COMMAND_IMPORTS):  # __main__ would run it
            with contextlib.suppress(ImportError):  # an integration whose extra is missing
                importlib.import_module(name)


def _launch_fork(
    argv: list[str], cwd: str | os.PathLike[str] | None, environment: dict[str, str], input: bytes, timeout: float
) -> Launched:
    _imported_before_forking()
    stdin_read, stdin_write = os.pipe()
    os.write(stdin_write, input)
    os.close(stdin_write)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        os.dup2(stdin_read, 0)
        os.dup2(out_write, 1)
        os.dup2(err_write, 2)
        for fd in (stdin_read, out_read, out_write, err_read, err_write):
            os.close(fd)
        os._exit(_command_in_child(argv, cwd, environment))
    for fd in (stdin_read, out_write, err_write):
        os.close(fd)
    streams = _read_until_closed(out_read, err_read, pid, timeout)
    _, status = os.waitpid(pid, 0)
    return Launched(os.waitstatus_to_exitcode(status), *streams)


def _command_in_child(argv: list[str], cwd: str | os.PathLike[str] | None, environment: dict[str, str]) -> int:
    """The console script's ``main()`` as a fresh process would run it; returns its exit code."""
    code = 1
    try:
        if cwd is not None:
            os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environment)
        time.tzset()
        sys.stdin, sys.stdout = _stream(0, "r"), _stream(1, "w")
        sys.stderr = _stream(2, "w", errors="backslashreplace", buffering=1)
        sys.argv = [os.fspath(PROVGRAPH), *argv]
        from provgraph.cli import main

        main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, int | None):
            print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - what a real process prints before it dies
        os.write(2, traceback.format_exc().encode("utf-8", "backslashreplace"))
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - a closed reader, as a real process at exit
        code = code or 120
    return code


def _stream(fd: int, mode: str, **options: Any) -> TextIO:
    """A standard stream as a new interpreter opens it; the child's for its whole life."""
    return open(fd, mode, encoding="utf-8", closefd=False, **options)  # noqa: SIM115


def _read_until_closed(out_read: int, err_read: int, pid: int, timeout: float) -> tuple[bytes, bytes]:
    """Both streams to their end, read together so that neither pipe fills and blocks."""
    chunks: dict[int, list[bytes]] = {out_read: [], err_read: []}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise subprocess.TimeoutExpired(["provgraph"], timeout)
            for key, _ in selector.select(left):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
    return b"".join(chunks[out_read]), b"".join(chunks[err_read])


class Runner:
    """Runs the real ``provgraph`` command; ``now`` becomes ``PROVGRAPH_NOW``."""

    timeout = 60

    def environment(self, now: datetime | str | None, env: dict[str, str] | None) -> dict[str, str]:
        environment = {key: value for key, value in os.environ.items() if key != "PROVGRAPH_NOW"}
        if now is not None:
            environment["PROVGRAPH_NOW"] = now.isoformat() if isinstance(now, datetime) else now
        environment.update(env or {})
        return environment

    def __call__(
        self,
        *args: str | os.PathLike[str],
        cwd: str | os.PathLike[str],
        now: datetime | str | None = None,
        env: dict[str, str] | None = None,
    ) -> tuple[int, str, str]:
        done = launch(args, cwd=cwd, env=self.environment(now, env), timeout=self.timeout)
        return done.code, done.stdout.decode(), done.stderr.decode()

    def popen(
        self,
        *args: str | os.PathLike[str],
        cwd: str | os.PathLike[str],
        now: datetime | str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """Start the command without waiting (for tests of concurrent processes)."""
        return subprocess.Popen(
            [os.fspath(PROVGRAPH), *map(os.fspath, args)],
            cwd=cwd,
            env=self.environment(now, env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def run() -> Runner:
    return Runner()


class Logged:
    """The warnings the library logged on the ``provgraph`` logger (it never prints them)."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.WARNING, logger="provgraph")
        self._caplog = caplog

    def take(self) -> list[str]:
        """The messages logged since the last call, one per warning; forgets them."""
        records = [record for record in self._caplog.records if record.name == "provgraph"]
        self._caplog.clear()
        return [record.getMessage() for record in records if record.levelno == logging.WARNING]


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Logged:
    return Logged(caplog)


IMPORTED_BY_COLLECTION = pytest.StashKey[frozenset[str]]()
"""The modules imported once this process had collected its tests, before any test ran."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything imported so far lives for the whole run: the collector need not walk it
    again at each collection (nor a forked command copy its pages by touching them)."""
    session.config.stash[IMPORTED_BY_COLLECTION] = frozenset(sys.modules)
    gc.collect()
    gc.freeze()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than there are cores.  Some tests wait (a held lock's
    bounded wait, the racy window, a notebook's kernel); the extra worker runs others
    meanwhile, where one worker per core would leave that core idle."""
    return (os.cpu_count() or 1) + 1

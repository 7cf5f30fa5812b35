"""Shared fixtures: a memory folder to write into, a pinned clock, and the real command.

- ``memory``: a temporary memory root (``memory.root``) with ``write`` for
  memory files with frontmatter, ``write_bytes`` for anything else,
  ``set_mtime`` and ``open`` (a ``provgraph.Memory`` on the root).
- ``clock``: a fixed, aware ``datetime`` that tests move forward explicitly.
- every test runs with ``TZ=UTC``, so dates print the same everywhere.
- ``run``: the ``provgraph`` command in a subprocess, returning
  ``(exit code, stdout, stderr)``.

Every process a test starts runs the code under test, the package this file
imports (the checkout's ``provgraph/``, which ``pythonpath`` in pyproject.toml
puts first), whether the package is installed editable or as a copy:
``PYTHONPATH`` names its folder, and ``PROVGRAPH`` is a launcher of that code,
not the console script an install put beside the interpreter.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

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
    """Let the processes the tests start compile each module once, not at every start.

    Under ``PYTHONDONTWRITEBYTECODE`` every ``provgraph`` a test starts would compile the
    package from source again, a quarter of its CPU time.  The children keep their bytecode
    in a temporary folder of this run instead (``PYTHONPYCACHEPREFIX``), so nothing is
    written beside the sources, as the variable asks.  Set before the parallel workers
    start, it is theirs too."""
    if not os.environ.pop("PYTHONDONTWRITEBYTECODE", ""):
        return
    if not os.environ.get("PYTHONPYCACHEPREFIX"):
        folder = tempfile.mkdtemp(prefix="provgraph-bytecode-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ["PYTHONPYCACHEPREFIX"] = folder


_code_under_test_for_every_process()
_bytecode_kept_for_every_process()
PROVGRAPH = _launcher()
"""The ``provgraph`` command of the tests; its folder may be put on ``PATH``."""

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
        done = subprocess.run(
            [os.fspath(PROVGRAPH), *map(os.fspath, args)],
            cwd=cwd,
            env=self.environment(now, env),
            capture_output=True,
            text=True,
            timeout=self.timeout,
        )
        return done.returncode, done.stdout, done.stderr

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

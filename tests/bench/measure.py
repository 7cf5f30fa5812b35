"""Timing, and the floors provgraph is timed against.

A floor is the cost of looking at the files, measured in the same run on the
same folder: a walk that stats every memory file (in process, or as a Python
process of its own), and a process that reads and sha256-hashes every memory
file.  The walk skips hidden entries, as provgraph's own walk does.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

IN_PROCESS_WALK = "in-process stat walk"
STAT_WALK_PROCESS = "stat-walk process"
HASH_PROCESS = "read + sha256 process"

_WALK = """
import os, sys
def walk(folder):
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                walk(entry.path)
            elif entry.name.endswith(".md"):
                VISIT
walk(sys.argv[1])
"""
STAT_WALK_CODE = _WALK.replace("VISIT", "entry.stat(follow_symlinks=False)")
HASH_CODE = "import hashlib\n" + _WALK.replace(
    "VISIT", "\n                with open(entry.path, 'rb') as f: hashlib.sha256(f.read()).hexdigest()"
)


def stat_walk(folder: str) -> int:
    """The in-process floor: scandir every folder, stat every memory file."""
    count = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                count += stat_walk(entry.path)
            elif entry.name.endswith(".md"):
                entry.stat(follow_symlinks=False)
                count += 1
    return count


@dataclass(frozen=True)
class Sample:
    """One timed run: wall seconds, and for a process its peak resident memory and its output."""

    seconds: float
    max_rss_mb: float = 0.0
    stdout: bytes = b""


def run(command: Sequence[str], env: dict[str, str], stdin: bytes = b"") -> Sample:
    """Run a whole process to its end: its wall time and peak RSS (``wait4``), and what it printed."""
    with tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        given.write(stdin)
        given.seek(0)
        started = time.perf_counter()
        process = subprocess.Popen(command, stdin=given, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait again
        if process.returncode != 0:
            err.seek(0)
            message = err.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(command[:4])} ... exited {process.returncode}: {message}")
        out.seek(0)
        return Sample(seconds, usage.ru_maxrss / 1024, out.read())


def per_call(call: Callable[[], object], calls: int = 1) -> Sample:
    """``calls`` calls in a row; the time of one, on average."""
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return Sample((time.perf_counter() - started) / calls)


def alternate(
    runs: int, floor: Callable[[], Sample], measured: Callable[[], Sample]
) -> tuple[list[Sample], list[Sample]]:
    """The floor and the measured thing in turn, ``runs`` times each: a burst of load lands on both."""
    floors, samples = [], []
    for _ in range(runs):
        floors.append(floor())
        samples.append(measured())
    return floors, samples


AGE_SECONDS = 2.2
"""A file written less than about 2 s before a scan is read again by the next scan, by design
(its metadata proves nothing yet): the figures wait that long after writing a folder, to
measure the steady state."""


def let_files_age(seconds: float = AGE_SECONDS) -> None:
    time.sleep(seconds)


class Edits:
    """Rewrites one file with each call, alternating two contents, both unlike the first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        text = path.read_text(encoding="utf-8")
        self.contents = (text + "An edit.\n", text + "Another edit.\n")
        self.count = 0

    def __call__(self) -> str:
        content = self.contents[self.count % 2]
        self.path.write_text(content, encoding="utf-8")
        self.count += 1
        return content

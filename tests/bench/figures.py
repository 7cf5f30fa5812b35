"""The figures of the goal table, each timed beside its floor on the same folder.

Whole processes of the install under test: ``provgraph status --json`` (cold,
nothing changed, one file changed) and ``provgraph hook claude-code ROOT`` fed a
PostToolUse event on stdin (a ``Read`` of a memory file; a ``Write`` of a derived
file rewritten just before).  Inside one process of that install, as an
application or an agent holds them (``inprocess.py``): ``Memory.refresh()``
(nothing changed, one file changed) and the AgentScope middleware's
``on_system_prompt``, which runs before each model call.

A "one file changed" run first rewrites a plain file that chains of derived
files are built from, alternating two contents, so that every run is a real
change; the time of the write is not counted.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from statistics import median

from .generate import Workload, generate
from .install import Interpreter
from .measure import HASH_CODE, STAT_WALK_CODE, Edits, Sample, alternate, let_files_age, run

MIDDLEWARE = "AgentScope middleware per model call, nothing changed"
REFRESH_UNCHANGED = "Memory.refresh() in process, nothing changed"
REFRESH_CHANGED = "Memory.refresh() in process, one file changed"
HOOK_READ = "Claude Code hook per PostToolUse event: Read"
HOOK_WRITE = "Claude Code hook per PostToolUse event: Write of a derived file"
STATUS_UNCHANGED = "provgraph status --json, nothing changed"
STATUS_CHANGED = "provgraph status --json, one file changed"
STATUS_COLD = "provgraph status --json, cold"
PYTHON_START = "Python's start: `python -c pass`"
STACK_IMPORT = "importing the standard modules and orjson the package is built on, not the package"
PACKAGE_IMPORT = "importing the command line: `import provgraph.cli`"
STACK = "dataclasses, enum, typing, re, pathlib, argparse, hashlib, orjson"
"""What provgraph's command imports besides itself (networkx and PyYAML are imported when used)."""
SESSION = "provgraph-bench"


@dataclass(frozen=True)
class Timed:
    """One figure at one folder size: provgraph's runs beside its floor's, in the order they ran."""

    figure: str
    files: int
    floor: list[Sample]
    measured: list[Sample]

    @property
    def floor_median(self) -> float:
        return median(sample.seconds for sample in self.floor)

    @property
    def median(self) -> float:
        return median(sample.seconds for sample in self.measured)

    @property
    def ratio(self) -> float:
        return self.median / self.floor_median

    @property
    def peak_rss_mb(self) -> float:
        return max(sample.max_rss_mb for sample in self.measured)


# -- whole processes ------------------------------------------------------------------------


def process_figures(workload: Workload, interpreter: Interpreter, runs: int, wanted: Collection[str]) -> list[Timed]:
    """The status and hook figures named in ``wanted``: those that change nothing first."""
    root, env, files = str(workload.root), interpreter.env, len(workload.files)
    stat_floor = partial(run, [interpreter.python, "-c", STAT_WALK_CODE, root], env)
    status = partial(run, [*interpreter.provgraph, "status", "--json", root], env)
    hook_command = [*interpreter.provgraph, "hook", "claude-code", root]
    timed: list[Timed] = []

    def measure(figure: str, floor: Callable[[], Sample], measured: Callable[[], Sample]) -> None:
        if figure in wanted:
            measured()  # settles what the run before left
            timed.append(Timed(figure, files, *alternate(runs, floor, measured)))

    run(hook_command, env, _event(workload.root))  # a session starts: its first scan
    hash_floor = partial(run, [interpreter.python, "-c", HASH_CODE, root], env)
    measure(STATUS_COLD, hash_floor, partial(_cold, workload, status))
    measure(STATUS_UNCHANGED, stat_floor, status)
    measure(HOOK_READ, stat_floor, partial(run, hook_command, env, _event(workload.root, "Read", workload.leaf)))
    measure(STATUS_CHANGED, stat_floor, _after(Edits(workload.root / workload.leaf), status))
    rewrite = Edits(workload.root / workload.derived)

    def write() -> Sample:
        return run(hook_command, env, _event(workload.root, "Write", workload.derived, rewrite()))

    measure(HOOK_WRITE, stat_floor, write)
    _check(timed)
    return timed


def start_figures(workload: Workload, interpreter: Interpreter, runs: int) -> list[Timed]:
    """What a process pays before any work, beside the stat-walk process on the same folder: the
    part of a whole-process figure that no change to provgraph's work can take away."""
    env, files = interpreter.env, len(workload.files)
    stat_floor = partial(run, [interpreter.python, "-c", STAT_WALK_CODE, str(workload.root)], env)
    starts = {PYTHON_START: "pass", STACK_IMPORT: f"import {STACK}", PACKAGE_IMPORT: "import provgraph.cli"}
    return [
        Timed(figure, files, *alternate(runs, stat_floor, partial(run, [interpreter.python, "-c", code], env)))
        for figure, code in starts.items()
    ]


def _cold(workload: Workload, status: Callable[[], Sample]) -> Sample:
    """``status`` with no state yet: provgraph's folder and lock removed."""
    shutil.rmtree(workload.root / ".provgraph", ignore_errors=True)
    (workload.root / "provgraph.lock").unlink(missing_ok=True)
    return status()


def _after(edit: Callable[[], object], measured: Callable[[], Sample]) -> Callable[[], Sample]:
    def edited() -> Sample:
        edit()
        return measured()

    return edited


def _event(root: Path, tool: str | None = None, path: str = "", content: str | None = None) -> bytes:
    """A Claude Code hook event as it arrives on the hook's stdin: SessionStart, or a tool's PostToolUse."""
    event: dict[str, object] = {"session_id": SESSION, "cwd": str(root), "hook_event_name": "SessionStart"}
    if tool is not None:
        tool_input: dict[str, str] = {"file_path": str(root / path)}
        if content is not None:
            tool_input["content"] = content
        event |= {"hook_event_name": "PostToolUse", "tool_name": tool, "tool_input": tool_input}
    return json.dumps(event).encode()


def _check(timed: list[Timed]) -> None:
    """What the runs printed is the answer they are meant to give: the same report with or
    without a state, and stale files after a source changed."""
    statuses = (STATUS_COLD, STATUS_UNCHANGED, STATUS_CHANGED)
    printed = {result.figure: json.loads(result.measured[-1].stdout) for result in timed if result.figure in statuses}
    for report in printed.values():
        report.pop("scanned_at", None)
    if STATUS_COLD in printed and STATUS_UNCHANGED in printed and printed[STATUS_COLD] != printed[STATUS_UNCHANGED]:
        raise RuntimeError("status on an unchanged folder differs from the first scan's")
    if STATUS_CHANGED in printed and not printed[STATUS_CHANGED]["counts"]["stale"]:
        raise RuntimeError("a source changed and nothing is stale")


# -- in process ------------------------------------------------------------------------------

IN_PROCESS = Path(__file__).with_name("inprocess.py")
MIDDLEWARE_CALLS = 20
"""Calls timed together in a round of the middleware: one alone is too short to time well."""


def refresh_figures(workload: Workload, state: Path, interpreter: Interpreter, runs: int) -> list[Timed]:
    """``Memory.refresh()`` nothing changed, then one file changed, in one process of the install."""
    command = [interpreter.python, str(IN_PROCESS), "refresh", str(workload.root), str(state), str(runs), workload.leaf]
    done = run(command, interpreter.env)
    printed = json.loads(done.stdout)
    files = len(workload.files)
    return [
        _timed(REFRESH_UNCHANGED, files, printed["unchanged"], done.max_rss_mb),
        _timed(REFRESH_CHANGED, files, printed["changed"], done.max_rss_mb),
    ]


def middleware_figures(base: Path, sizes: list[int], interpreter: Interpreter, rounds: int, age: float) -> list[Timed]:
    """The middleware on unchanged folders of each size, in one process of the install."""
    folders = [str(generate(base / f"agent-{size}" / "Memory", size, seed=2).root) for size in sizes]
    let_files_age(age)
    command = [interpreter.python, str(IN_PROCESS), "middleware", str(rounds), str(MIDDLEWARE_CALLS), *folders]
    done = run(command, interpreter.env)
    printed = json.loads(done.stdout)
    return [_timed(MIDDLEWARE, size, printed[folder], 0.0) for size, folder in zip(sizes, folders, strict=True)]


def _timed(figure: str, files: int, seconds: dict[str, list[float]], max_rss_mb: float) -> Timed:
    floor = [Sample(value) for value in seconds["floor"]]
    return Timed(figure, files, floor, [Sample(value, max_rss_mb) for value in seconds["measured"]])

"""``python -m tests.bench``: provgraph timed against the cost of looking at the files.

Each figure is printed next to its *floor*, measured in the same run on the
same folder, and the ratio of the two; runs of provgraph and of the floor
alternate and the medians are compared, so a busy machine slows both.  The
ratio of CPU time (user + system) is printed too: on a shared machine it
moves less than the wall clock.

- cold ``provgraph status --json`` (no state yet), whole process, against a
  Python process that reads and sha256-hashes every memory file;
- warm ``provgraph status --json`` (nothing changed), whole process, against a
  Python process that walks the folder and stats every memory file;
- warm after one plain file changed (staleness flows down its chains), against
  the same stat walk;
- the agent hook on an unchanged 200-file folder, per call, in process,
  against an in-process scandir+stat walk of that folder;
- peak resident memory of each provgraph process;
- the AgentScope middleware through a sandbox that adds 5 ms to each backend
  call, at 200 and 2,000 files: backend calls and time of a check, against the
  memory middleware's own ``on_system_prompt`` (``sandbox.py``).

Then ``make -q`` and ``dvc status`` run on the same lineage, expressed as a
Makefile and a dvc.yaml pipeline, where those tools are available.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from .generate import Workload, generate, write_dvc_yaml, write_makefile
from .sandbox import bench_sandbox, print_sandbox
from .watcher import bench_watcher, print_watcher

GOALS = {"cold": 4.0, "warm": 3.0, "changed": 8.0, "hook": 5.0}
RSS_GOAL_MB = 400
HOOK_FILES = 200
DVC_MAX_FILES = 20_000
"""Above this, ``dvc commit`` alone takes many minutes: dvc is left out."""

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
STAT_FLOOR = _WALK.replace("VISIT", "entry.stat(follow_symlinks=False)")
HASH_FLOOR = "import hashlib\n" + _WALK.replace(
    "VISIT", "\n                with open(entry.path, 'rb') as f: hashlib.sha256(f.read()).hexdigest()"
)


@dataclass(frozen=True)
class Sample:
    """One timed run: wall seconds, CPU seconds (user + system), peak RSS in MB."""

    seconds: float
    cpu: float
    max_rss_mb: float = 0.0
    stdout: bytes = b""


@dataclass(frozen=True)
class Figure:
    name: str
    measured: list[Sample]
    floor: list[Sample]
    goal: float | None
    scale: float = 1e3
    unit: str = "ms"

    @property
    def wall(self) -> float:
        return median(sample.seconds for sample in self.measured)

    @property
    def floor_wall(self) -> float:
        return median(sample.seconds for sample in self.floor)

    @property
    def ratio(self) -> float:
        return self.wall / self.floor_wall

    @property
    def cpu_ratio(self) -> float:
        return median(sample.cpu for sample in self.measured) / median(sample.cpu for sample in self.floor)


def run(command: list[str], *, cwd: str | None = None, env: dict | None = None, timeout: float | None = None) -> Sample:
    """Run a whole process to its end: wall time, its own CPU time and peak RSS (``wait4``)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=cwd, env=env)
        _, status, usage = _wait4(process, timeout)
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            err.seek(0)
            message = err.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(command[:3])} ... exited {process.returncode}: {message}")
        out.seek(0)
        return Sample(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read())


def _wait4(process: subprocess.Popen, timeout: float | None):
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, 0 if deadline is None else os.WNOHANG)
        if pid:
            return pid, status, usage
        if time.monotonic() > deadline:
            process.kill()
            os.wait4(process.pid, 0)
            raise subprocess.TimeoutExpired(process.args, timeout)
        time.sleep(0.02)


def provgraph_command() -> list[str]:
    """The console script users run, next to this interpreter; else ``python -m provgraph``."""
    script = Path(sys.executable).with_name("provgraph")
    return [str(script)] if script.exists() else [sys.executable, "-m", "provgraph"]


def alternate(
    runs: int, floor: Callable[[], Sample], measured: Callable[[], Sample]
) -> tuple[list[Sample], list[Sample]]:
    """Call the floor and the measured command in turn, ``runs`` times each."""
    floors, samples = [], []
    for _ in range(runs):
        floors.append(floor())
        samples.append(measured())
    return floors, samples


def let_files_age() -> None:
    """A file written less than ~2 s before a scan is read again by the next scan, by
    design (its metadata proves nothing yet); the warm figures measure the steady state."""
    time.sleep(2.2)


# -- whole processes ----------------------------------------------------------


@dataclass
class CliResult:
    figures: list[Figure]
    stale_after_change: int


def bench_cli(workload: Workload, runs: int) -> CliResult:
    root = str(workload.root)
    status = [*provgraph_command(), "status", "--json", root]
    hash_floor = [sys.executable, "-c", HASH_FLOOR, root]
    stat_floor = [sys.executable, "-c", STAT_FLOOR, root]

    def cold() -> Sample:
        shutil.rmtree(workload.root / ".provgraph", ignore_errors=True)
        (workload.root / "provgraph.lock").unlink(missing_ok=True)
        return run(status)

    run(hash_floor), run(stat_floor), cold()  # fill the page cache and the bytecode caches
    let_files_age()
    floors, colds = alternate(runs, lambda: run(hash_floor), cold)
    stat_floors, warms = alternate(runs, lambda: run(stat_floor), lambda: run(status))
    _check_same(colds[-1].stdout, warms[-1].stdout)
    changed_floors, changeds = alternate(runs, lambda: run(stat_floor), _editing(workload, status))
    stale = json.loads(changeds[-1].stdout)["counts"]["stale"]
    if not stale:
        raise RuntimeError(f"editing {workload.leaf} left nothing stale")
    figures = [
        Figure("cold status --json (whole process)", colds, floors, GOALS["cold"]),
        Figure("warm status --json, nothing changed", warms, stat_floors, GOALS["warm"]),
        Figure("warm status --json, one file changed", changeds, changed_floors, GOALS["changed"]),
    ]
    return CliResult(figures, stale)


def _editing(workload: Workload, status: list[str]) -> Callable[[], Sample]:
    """Append a line to the plain file at the top of a chain, then run ``status``."""
    leaf = workload.root / workload.leaf
    edits = iter(range(1_000_000))

    def changed() -> Sample:
        with open(leaf, "a", encoding="utf-8") as handle:
            handle.write(f"An edit ({next(edits)}).\n")
        return run(status)

    return changed


def _check_same(cold: bytes, warm: bytes) -> None:
    """The reused result must be the very report the full scan produced."""
    first, second = json.loads(cold), json.loads(warm)
    first.pop("scanned_at"), second.pop("scanned_at")
    if first != second:
        raise RuntimeError("the warm status differs from the cold one on an unchanged folder")


# -- in process: the agent hook ----------------------------------------------


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


def bench_hook(base: Path, rounds: int, calls: int) -> tuple[Figure, str]:
    """Per-call cost of the agent hook on an unchanged folder (the middleware when it exists).

    Many short rounds, floor and hook in turn, so that a burst of load on a
    shared machine lands on both."""
    memory = base / "agent" / "Memory"
    generate(memory, HOOK_FILES, seed=2)
    let_files_age()
    call, label, note = _hook_call(memory.parent, memory)
    call()
    call()  # the first call scans; the later ones see an unchanged folder
    floors, measured = [], []
    for _ in range(rounds):
        floors.append(_per_call(lambda: stat_walk(str(memory)), calls))
        measured.append(_per_call(call, calls))
    return Figure(label, measured, floors, GOALS["hook"], 1e6, "µs"), note


def _per_call(call: Callable[[], object], calls: int) -> Sample:
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        call()
    return Sample((time.perf_counter() - started) / calls, (time.process_time() - cpu) / calls)


def _hook_call(workdir: Path, memory: Path) -> tuple[Callable[[], object], str, str]:
    try:
        from provgraph.integrations.agentscope import ProvenanceMiddleware
    except ImportError as error:
        from provgraph import Memory

        note = f"ProvenanceMiddleware is not available ({error}); Memory(root).refresh() was timed instead"
        return Memory(memory).refresh, f"Memory.refresh(), {HOOK_FILES} files, per call", note
    middleware = ProvenanceMiddleware(workdir=str(workdir), memory_dir=memory.name)
    loop = asyncio.new_event_loop()

    def call() -> str:
        return loop.run_until_complete(middleware.on_system_prompt(None, "You are a helpful assistant."))

    return call, f"ProvenanceMiddleware.on_system_prompt, {HOOK_FILES} files", ""


# -- other tools ----------------------------------------------------------------


def bench_make(workload: Workload, runs: int) -> tuple[float | None, str]:
    make = shutil.which("make")
    if make is None:
        return None, "make is not installed"
    write_makefile(workload)
    command = [make, "-q", "-C", str(workload.root), "all"]
    times = [_timed(command) for _ in range(runs + 1)][1:]
    return median(times), f"{len(workload.sources):,} rules"


def _timed(command: list[str], cwd: str | None = None, env: dict | None = None, timeout: float | None = None) -> float:
    """Wall time of a command whose exit code is an answer (``make -q``, ``dvc status``), not a failure."""
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=timeout, check=False)
    return time.perf_counter() - started


def dvc_command(explicit: str | None) -> list[str] | None:
    if explicit:
        return [explicit]
    try:
        import dvc  # noqa: F401
    except ImportError:
        found = shutil.which("dvc")
        return [found] if found else None
    return [sys.executable, "-m", "dvc"]


def bench_dvc(workload: Workload, runs: int, explicit: str | None, budget: float) -> tuple[float | None, str]:
    command = dvc_command(explicit)
    if command is None:
        return None, "dvc is not installed (install it in any environment and pass --dvc PATH)"
    if len(workload.files) > DVC_MAX_FILES:
        return None, f"left out above {DVC_MAX_FILES:,} files (its commit alone takes many minutes)"
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    root = str(workload.root)
    write_dvc_yaml(workload)
    try:
        for step in (
            ["init", "--no-scm", "-q", "-f"],
            ["config", "core.check_update", "false"],
            ["commit", "-f", "-q"],
        ):
            subprocess.run([*command, *step], cwd=root, env=env, check=True, capture_output=True, timeout=budget)
        times = [_timed([*command, "status", "-q"], root, env, budget) for _ in range(runs)]
    except subprocess.TimeoutExpired:
        return None, f"did not finish within {budget:.0f} s"
    except subprocess.CalledProcessError as error:
        return None, f"failed: {error.stderr.decode(errors='replace').strip()[-300:]}"
    finally:
        shutil.rmtree(workload.root / ".dvc", ignore_errors=True)
    return median(times), f"{len(workload.sources):,} stages"


# -- report -------------------------------------------------------------------


def print_figures(figures: list[Figure]) -> None:
    print(f"{'figure':<54} {'provgraph':>11} {'floor':>11} {'ratio':>7}  {'goal':<8} {'CPU ratio':>9}")
    for figure in figures:
        measured = f"{figure.wall * figure.scale:.1f} {figure.unit}"
        floor = f"{figure.floor_wall * figure.scale:.1f} {figure.unit}"
        goal = f"≤ {figure.goal:g}×" if figure.goal else ""
        verdict = "ok" if figure.goal is None or figure.ratio <= figure.goal else "OVER"
        print(
            f"{figure.name:<54} {measured:>11} {floor:>11} {figure.ratio:>6.1f}×  {goal:<5} {verdict:<4}"
            f" {figure.cpu_ratio:>6.1f}×"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--files", type=int, default=10_000, help="memory files in the generated folder (default 10000)"
    )
    parser.add_argument(
        "--runs", type=int, default=None, help="alternating runs per figure (default 7; 2 with --quick)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="few runs and no dvc: a smoke test of the benchmark itself"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated folder (default 1)")
    parser.add_argument("--dvc", metavar="PATH", help="the dvc executable (default: importable dvc, else dvc on PATH)")
    parser.add_argument("--keep", action="store_true", help="keep the generated folders")
    options = parser.parse_args(argv)
    runs = options.runs or (2 if options.quick else 7)
    base = Path(tempfile.mkdtemp(prefix="provgraph-bench-"))
    try:
        _bench(options, runs, base)
    finally:
        if options.keep:
            print(f"folders kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return 0


def _bench(options: argparse.Namespace, runs: int, base: Path) -> None:
    started = time.perf_counter()
    workload = generate(base / "memory", options.files, options.seed)
    print(
        f"provgraph benchmark: {len(workload.files):,} files, {len(workload.sources):,} derived, "
        f"longest chain {workload.depth}; {runs} alternating runs, medians"
    )
    print(
        f"machine: {os.cpu_count()} cores, {_cpu_model()}, Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')}"
    )
    cli = bench_cli(workload, runs)
    hook, note = bench_hook(base, rounds=5 if options.quick else 40, calls=10 if options.quick else 25)
    print()
    print_figures([*cli.figures, hook])
    peaks = ", ".join(
        f"{name} {max(s.max_rss_mb for s in figure.measured):.0f} MB"
        for name, figure in zip(("cold", "warm", "changed"), cli.figures, strict=True)
    )
    print(f"peak RSS of provgraph: {peaks} (goal ≤ {RSS_GOAL_MB} MB at 100,000 files)")
    print(f"after the edit of {workload.leaf}: {cli.stale_after_change} stale files")
    if note:
        print(f"note: {note}")
    print_watcher(bench_watcher(base, stat_walk, rounds=5 if options.quick else 40, calls=10 if options.quick else 100))
    print_sandbox(bench_sandbox(base, rounds=5 if options.quick else 20))
    _print_others(workload, runs, options, cli.figures)
    print(f"\nbenchmark time: {time.perf_counter() - started:.0f} s")


def _print_others(workload: Workload, runs: int, options: argparse.Namespace, figures: list[Figure]) -> None:
    """The same question, is anything out of date, asked of other tools on the folder as
    the edits left it."""
    make_time, make_note = bench_make(workload, runs)
    if options.quick:
        dvc_time, dvc_note = None, "left out with --quick"
    else:
        dvc_time, dvc_note = bench_dvc(workload, min(runs, 2), options.dvc, budget=300)
    print("\nthe same lineage in other tools, after the edits (wall time, median):")
    rows = [
        ("provgraph status --json", figures[2].wall, "hashes what changed; staleness through every level"),
        ("make -q all (Makefile)", make_time, f"{make_note}; compares mtimes only"),
        ("dvc status (dvc.yaml)", dvc_time, dvc_note),
    ]
    for name, seconds, note in rows:
        shown = "n/a" if seconds is None else f"{seconds * 1e3:.1f} ms"
        print(f"  {name:<26} {shown:>11}  {note}")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())

"""``python -m tests.bench``: provgraph timed against the cost of looking at the files.

provgraph is timed as users run it: by default a wheel of the checkout is
built and installed into a fresh virtual environment with its bytecode
compiled (``install.py``); ``--in-place`` times the current interpreter's
install instead (an editable one runs the checkout).

Each figure is printed next to its *floor*, measured in the same run on the
same folder, and the ratio of the two; runs of provgraph and of the floor
alternate and the medians are compared, so a busy machine slows both.  Min and
max are printed beside each median, and the ratio of CPU time (user + system)
too: on a shared machine it moves less than the wall clock.  For each size of
``--files`` (1,000 and 10,000 by default):

- cold ``provgraph status --json`` (no state yet), whole process, against a
  Python process that reads and sha256-hashes every memory file; and the same with
  ``PROVGRAPH_PROCESSES=1``, read by one process (from 2,000 files, a first scan forks
  a second one to read part of the folder);
- warm ``provgraph status --json`` (nothing changed), whole process, against a
  Python process that walks the folder and stats every memory file;
- warm after one plain file changed (staleness flows down its chains), against
  the same stat walk;
- warm with most derived files stale (the plain files above 90% of them
  edited, then seen once), nothing changed since, against the same stat walk;
- peak resident memory of each provgraph process.

Then, once:

- warm after the head of a 2,000-deep chain changed, against the stat walk;
- the agent hook on an unchanged 200-file and 2,000-file folder, per call, in
  process, against an in-process scandir+stat walk of that folder;
- the AgentScope middleware through a sandbox that adds 5 ms to each backend
  call, at 200 and 2,000 files: backend calls and time of a check, against the
  memory middleware's own ``on_system_prompt`` (``sandbox.py``);
- ``make -q`` and ``dvc status`` on the same lineage, expressed as a Makefile
  and a dvc.yaml pipeline, where those tools are available.

``--markdown`` prints the README's Performance tables from the run's figures.
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
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

from .generate import Workload, generate, generate_chain, write_dvc_yaml, write_makefile
from .install import Interpreter, in_place, installed
from .report import Measured, Other, Peak, markdown_tables
from .sandbox import bench_sandbox, markdown_sandbox, print_sandbox
from .watcher import bench_watcher, print_watcher

GOALS = {
    "cold": 2.5,  # cold status --json, 10,000 files / a read+sha256 process
    "warm": 1.5,  # warm, nothing changed, 1,000 and 10,000 files / a stat-walk process
    "many stale": 1.5,  # warm, 10,000 files, ~2,700 stale, nothing changed / a stat-walk process
    "changed": 3.0,  # one source changed, 10,000 and 100,000 files / a stat-walk process
    "hook": 0.05,  # on_system_prompt, nothing changed, 200 and 2,000 files / an in-process stat walk
}
"""The goals of the performance issue: each figure's ratio to its floor, at most."""
GOAL_SIZES = {"cold": (10_000,), "warm": (1_000, 10_000), "many stale": (10_000,), "changed": (10_000, 100_000)}
"""The folder sizes the issue sets those goals at (the hook's, at every size it is timed at).
A figure at another size is printed without a goal; ``--quick``, whose folders are too
small for any of them, prints every goal, as a smoke test of the printing itself."""
RSS_GOAL_MB = 200
"""Peak resident memory of any figure at 100,000 files, at most."""
RSS_GOAL_FILES = 100_000
SIZES = (1_000, 10_000)
AGENT_SIZES = (200, 2_000)
"""Sizes of the folders of the in-process figures: the hook, the watch and the sandbox."""
CHAIN_DEPTH = 2_000
STALE_SHARE = 0.9
"""The many-stale figure edits plain files until this share of the derived files is stale."""
ONE_PROCESS = "PROVGRAPH_PROCESSES"
"""The setting that keeps a first scan to one process at ``1``."""
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
STAT_WALK_PROCESS = "stat-walk process"
"""A Python process that walks the folder and stats every memory file."""
HASH_PROCESS = "read + sha256 process"
"""A Python process that reads and sha256-hashes every memory file."""
STAT_WALK_IN_PROCESS = "in-process stat walk"
"""A scandir + stat walk of the folder, in the process that calls the middleware."""


@dataclass(frozen=True)
class Sample:
    """One timed run: wall seconds, CPU seconds (user + system), peak RSS in MB."""

    seconds: float
    cpu: float
    max_rss_mb: float = 0.0
    stdout: bytes = b""


@dataclass(frozen=True)
class Figure:
    """One measured thing beside its floor, both timed in the same run, on the same folder."""

    name: str
    measured: list[Sample]
    floor: list[Sample]
    goal: float | None
    scale: float = 1e3
    unit: str = "ms"
    files: int = 0
    floor_name: str = STAT_WALK_PROCESS
    goal_sizes: tuple[int, ...] | None = None
    """The sizes the goal is set at (``GOAL_SIZES``); None: every size."""

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

    @property
    def peak_rss_mb(self) -> float:
        return max(sample.max_rss_mb for sample in self.measured)

    @property
    def within_goal(self) -> bool:
        return self.goal is None or self.ratio <= self.goal

    def at_goal_sizes(self) -> Figure:
        """The figure, with its goal only at a size the goal is set at."""
        if self.goal_sizes is None or self.files in self.goal_sizes:
            return self
        return replace(self, goal=None)

    def shown(self, samples: list[Sample], digits: int = 1) -> str:
        """The median, then min-max in brackets: ``148.0 ms [140.2-161.9]``."""
        seconds = [sample.seconds * self.scale for sample in samples]
        return f"{median(seconds):.{digits}f} {self.unit} [{min(seconds):.{digits}f}–{max(seconds):.{digits}f}]"


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


def alternate(
    runs: int, floor: Callable[[], Sample], measured: Callable[[], Sample]
) -> tuple[list[Sample], list[Sample]]:
    """Call the floor and the measured command in turn, ``runs`` times each."""
    floors, samples = [], []
    for _ in range(runs):
        floors.append(floor())
        samples.append(measured())
    return floors, samples


AGE_SECONDS = 2.2
"""How long the files are left to age before a warm figure (0 with ``--quick``, whose
figures only show that the benchmark runs)."""


def let_files_age() -> None:
    """A file written less than ~2 s before a scan is read again by the next scan, by
    design (its metadata proves nothing yet); the warm figures measure the steady state."""
    time.sleep(AGE_SECONDS)


# -- whole processes ----------------------------------------------------------


@dataclass(frozen=True)
class Commands:
    """The commands timed on one folder, all run by the interpreter under test."""

    status: list[str]
    stat_floor: list[str]
    hash_floor: list[str]
    env: dict[str, str]

    @classmethod
    def on(cls, root: Path, interpreter: Interpreter) -> Commands:
        python = interpreter.python
        return cls(
            [*interpreter.provgraph, "status", "--json", str(root)],
            [python, "-c", STAT_FLOOR, str(root)],
            [python, "-c", HASH_FLOOR, str(root)],
            interpreter.env,
        )

    def status_run(self) -> Sample:
        return run(self.status, env=self.env)

    def stat_run(self) -> Sample:
        return run(self.stat_floor, env=self.env)

    def hash_run(self) -> Sample:
        return run(self.hash_floor, env=self.env)


@dataclass(frozen=True)
class CliResult:
    """The whole-process figures of one folder size, and what the edits left stale."""

    files: int
    cold: Figure
    cold_one_process: Figure
    warm: Figure
    changed: Figure
    many_stale: Figure
    stale_after_change: int

    @property
    def figures(self) -> list[Figure]:
        return [self.cold, self.warm, self.many_stale, self.changed]

    @property
    def timed(self) -> list[Figure]:
        """Every figure, in the order of the tables."""
        return [self.cold, self.cold_one_process, self.warm, self.many_stale, self.changed]


def bench_cli(workload: Workload, runs: int, interpreter: Interpreter) -> CliResult:
    commands = Commands.on(workload.root, interpreter)
    files = len(workload.files)

    def cold(env: dict[str, str] = commands.env) -> Sample:
        shutil.rmtree(workload.root / ".provgraph", ignore_errors=True)
        (workload.root / "provgraph.lock").unlink(missing_ok=True)
        return run(commands.status, env=env)

    def cold_one_process() -> Sample:
        return cold({**commands.env, ONE_PROCESS: "1"})

    commands.hash_run(), commands.stat_run(), cold()  # fill the page cache
    let_files_age()
    floors, colds, one_process = [], [], []
    for _ in range(runs):  # the two ways side by side, each beside its floor
        floors.append(commands.hash_run())
        colds.append(cold())
        one_process.append(cold_one_process())
    stat_floors, warms = alternate(runs, commands.stat_run, commands.status_run)
    _check_same(colds[-1].stdout, warms[-1].stdout)
    changed_floors, changeds = alternate(runs, commands.stat_run, _editing(workload.root, [workload.leaf], commands))
    stale = _stale_count(changeds[-1], workload.leaf)
    many = bench_many_stale(workload, runs, commands)
    return CliResult(
        files,
        Figure(
            "cold status --json, no state yet",
            colds,
            floors,
            GOALS["cold"],
            files=files,
            floor_name=HASH_PROCESS,
            goal_sizes=GOAL_SIZES["cold"],
        ),
        Figure(
            f"cold status --json, no state yet, {ONE_PROCESS}=1",
            one_process,
            floors,
            None,
            files=files,
            floor_name=HASH_PROCESS,
        ),
        Figure(
            "warm status --json, nothing changed",
            warms,
            stat_floors,
            GOALS["warm"],
            files=files,
            goal_sizes=GOAL_SIZES["warm"],
        ),
        Figure(
            "warm status --json, one file changed",
            changeds,
            changed_floors,
            GOALS["changed"],
            files=files,
            goal_sizes=GOAL_SIZES["changed"],
        ),
        many,
        stale,
    )


def bench_many_stale(workload: Workload, runs: int, commands: Commands) -> Figure:
    """Most derived files stale, nothing changed since the scan that saw it: the answer
    is as large as it gets, and still nothing needs reading."""
    edited = workload.sources_reaching(STALE_SHARE)
    _editing(workload.root, edited, commands)()
    let_files_age()
    commands.status_run()  # reads again what the last scan saw inside the racy window
    floors, warms = alternate(runs, commands.stat_run, commands.status_run)
    stale = _stale_count(warms[-1], ", ".join(edited))
    name = f"warm status --json, {stale:,} stale, nothing changed"
    files = len(workload.files)
    return Figure(name, warms, floors, GOALS["many stale"], files=files, goal_sizes=GOAL_SIZES["many stale"])


def bench_chain(base: Path, depth: int, runs: int, interpreter: Interpreter) -> Figure:
    """The head of a chain of ``depth`` derived files changes: staleness flows all the way down."""
    workload = generate_chain(base / "chain", depth)
    commands = Commands.on(workload.root, interpreter)
    commands.status_run()  # adopts every declaration
    let_files_age()
    floors, changeds = alternate(runs, commands.stat_run, _editing(workload.root, [workload.leaf], commands))
    stale = _stale_count(changeds[-1], workload.leaf)
    if stale != depth:
        raise RuntimeError(f"editing the head of a {depth}-deep chain left {stale} stale files")
    name = f"warm status --json, head of a {depth:,}-deep chain changed"
    return Figure(name, changeds, floors, None, files=len(workload.files))


def _editing(root: Path, paths: list[str], commands: Commands) -> Callable[[], Sample]:
    """Append a line to each of ``paths``, then run ``status``."""
    edits = iter(range(1_000_000))

    def changed() -> Sample:
        number = next(edits)
        for path in paths:
            with open(root / path, "a", encoding="utf-8") as handle:
                handle.write(f"An edit ({number}).\n")
        return commands.status_run()

    return changed


def _stale_count(sample: Sample, edited: str) -> int:
    stale = json.loads(sample.stdout)["counts"]["stale"]
    if not stale:
        raise RuntimeError(f"editing {edited} left nothing stale")
    return stale


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


def bench_hook(base: Path, rounds: int, calls: int, files: int) -> tuple[Figure, str]:
    """Per-call cost of the agent hook on an unchanged folder (the middleware when it exists).

    Many short rounds, floor and hook in turn, so that a burst of load on a
    shared machine lands on both."""
    memory = base / f"agent-{files}" / "Memory"
    generate(memory, files, seed=2)
    let_files_age()
    call, label, note = _hook_call(memory.parent, memory)
    call(2)  # the first call scans; the later ones see an unchanged folder
    floors, measured = [], []
    for _ in range(rounds):
        floors.append(_per_call(lambda count: [stat_walk(str(memory)) for _ in range(count)], calls))
        measured.append(_per_call(call, calls))
    figure = Figure(label, measured, floors, GOALS["hook"], 1e6, "µs", files, STAT_WALK_IN_PROCESS)
    return figure, note


def _per_call(call: Callable[[int], object], calls: int) -> Sample:
    """``call(calls)`` makes that many calls; the time of one, on average."""
    started, cpu = time.perf_counter(), time.process_time()
    call(calls)
    return Sample((time.perf_counter() - started) / calls, (time.process_time() - cpu) / calls)


def _hook_call(workdir: Path, memory: Path) -> tuple[Callable[[], object], str, str]:
    try:
        from provgraph.integrations.agentscope import ProvenanceMiddleware
    except ImportError as error:
        from provgraph import Memory

        note = f"ProvenanceMiddleware is not available ({error}); Memory(root).refresh() was timed instead"
        refresh = Memory(memory).refresh
        return lambda count: [refresh() for _ in range(count)], "Memory.refresh(), nothing changed, per call", note
    middleware = ProvenanceMiddleware(workdir=str(workdir), memory_dir=memory.name)
    loop = asyncio.new_event_loop()

    async def awaited(count: int) -> None:
        """As an agent calls it: awaited inside its running event loop (starting a loop for
        each call would time the loop, not the middleware)."""
        for _ in range(count):
            await middleware.on_system_prompt(None, "You are a helpful assistant.")

    def call(count: int) -> None:
        loop.run_until_complete(awaited(count))

    return call, "ProvenanceMiddleware.on_system_prompt, nothing changed, per call", ""


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
    print(
        f"{'figure':<62} {'files':>7} {'provgraph [min–max]':>27} {'floor [min–max]':>27}"
        f" {'ratio':>7}  {'goal':<10} {'CPU ratio':>9}"
    )
    for figure in figures:
        goal = f"≤ {figure.goal:g}×" if figure.goal is not None else ""
        verdict = "" if figure.goal is None else "ok" if figure.within_goal else "OVER"
        print(
            f"{figure.name:<62} {figure.files:>7,} {figure.shown(figure.measured):>27}"
            f" {figure.shown(figure.floor):>27} {figure.ratio:>6.2f}×  {goal:<6} {verdict:<4}"
            f" {figure.cpu_ratio:>8.2f}×"
        )


def peaks(results: list[CliResult]) -> list[Peak]:
    names = ("cold", "warm", "many stale", "one change")
    return [
        Peak(result.files, {name: figure.peak_rss_mb for name, figure in zip(names, result.figures, strict=True)})
        for result in results
    ]


def print_peaks(found: list[Peak]) -> None:
    for peak in found:
        shown = ", ".join(f"{name} {value:.0f} MB" for name, value in peak.megabytes.items())
        print(f"peak RSS of provgraph, {peak.files:,} files: {shown} ({RSS_GOAL})")


RSS_GOAL = f"goal ≤ {RSS_GOAL_MB} MB at {RSS_GOAL_FILES:,} files"


def main(argv: list[str] | None = None) -> int:
    global AGE_SECONDS
    options = _parser().parse_args(argv)
    if options.quick:
        AGE_SECONDS = 0.0  # a smoke test of the benchmark: no steady state to wait for
    options.command = " ".join(["python -m tests.bench", *(sys.argv[1:] if argv is None else argv)])
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--files",
        type=int,
        nargs="+",
        default=list(SIZES),
        metavar="N",
        help="sizes of the generated folders (default 1000 10000; add 100000 for the large figures)",
    )
    parser.add_argument(
        "--agent-files",
        type=int,
        nargs=2,
        default=list(AGENT_SIZES),
        metavar=("SMALL", "LARGE"),
        help="sizes of the folders of the agent hook, the watch and the sandbox (default 200 2000)",
    )
    parser.add_argument(
        "--chain", type=int, default=CHAIN_DEPTH, help=f"derived files in the deep chain (default {CHAIN_DEPTH})"
    )
    parser.add_argument(
        "--runs", type=int, default=None, help="alternating runs per figure (default 7; 2 with --quick)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="few runs, no dvc, no wait for files to age: a smoke test of the benchmark itself",
    )
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="time the current interpreter's provgraph (maybe an editable install) instead of a fresh install",
    )
    parser.add_argument("--markdown", action="store_true", help="also print the README's Performance tables")
    parser.add_argument("--seed", type=int, default=1, help="seed of the generated folders (default 1)")
    parser.add_argument("--dvc", metavar="PATH", help="the dvc executable (default: importable dvc, else dvc on PATH)")
    parser.add_argument("--keep", action="store_true", help="keep the generated folders")
    return parser


def _bench(options: argparse.Namespace, runs: int, base: Path) -> None:
    started = time.perf_counter()
    interpreter = in_place() if options.in_place else installed(base / "install")
    load = os.getloadavg()[0]
    print(f"provgraph benchmark: {runs} alternating runs per figure; medians, min–max in brackets")
    print(f"provgraph timed: {interpreter.description}")
    workloads, results = [], []
    for files in options.files:
        workloads.append(generate(base / f"memory-{files}", files, options.seed))
        results.append(bench_cli(workloads[-1], runs, interpreter))
    figures = [figure for result in results for figure in result.timed]
    if not options.quick:
        figures = [figure.at_goal_sizes() for figure in figures]
    figures.append(bench_chain(base, options.chain, runs, interpreter))
    small, large = options.agent_files
    hook, note = bench_hook(base, rounds=5 if options.quick else 40, calls=10 if options.quick else 25, files=small)
    hook_large, _ = bench_hook(base, rounds=5 if options.quick else 20, calls=3 if options.quick else 10, files=large)
    print()
    print_figures([*figures, hook, hook_large])
    print_peaks(peaks(results))
    _print_edits(workloads, results, note)
    rounds, calls = (5, 10) if options.quick else (40, 100)
    print_watcher(bench_watcher(base, stat_walk, rounds, calls, sizes=tuple(options.agent_files)))
    sandbox = bench_sandbox(base, rounds=5 if options.quick else 20, age=AGE_SECONDS, sizes=tuple(options.agent_files))
    print_sandbox(sandbox)
    others = _others(workloads[-1], runs, options, results[-1].changed)
    print_others(others)
    machine = _machine(load)
    print(f"\nmachine: {machine}")
    if options.markdown:
        timed = "a non-editable install, bytecode compiled" if not options.in_place else "the current install"
        measured = Measured(
            options.command,
            machine,
            timed,
            [*figures, hook, hook_large],
            peaks(results),
            RSS_GOAL,
            markdown_sandbox(sandbox),
            others,
        )
        print("\n" + markdown_tables(measured))
    print(f"\nbenchmark time: {time.perf_counter() - started:.0f} s")


def _print_edits(workloads: list[Workload], results: list[CliResult], note: str) -> None:
    for workload, result in zip(workloads, results, strict=True):
        print(
            f"{result.files:,} files, {len(workload.sources):,} derived, longest chain {workload.depth}:"
            f" {result.stale_after_change} stale after the edit of {workload.leaf}"
        )
    if note:
        print(f"note: {note}")


def _others(workload: Workload, runs: int, options: argparse.Namespace, changed: Figure) -> list[Other]:
    """The same question, is anything out of date, asked of other tools on the folder as
    the edits left it."""
    files = len(workload.files)
    make_time, make_note = bench_make(workload, runs)
    if options.quick:
        dvc_time, dvc_note = None, "left out with --quick"
    else:
        dvc_time, dvc_note = bench_dvc(workload, min(runs, 2), options.dvc, budget=300)
    return [
        Other("provgraph status --json", files, changed.wall, "hashes what changed; staleness through every level"),
        Other("make -q all (Makefile)", files, make_time, f"{make_note}; compares mtimes only"),
        Other("dvc status (dvc.yaml)", files, dvc_time, dvc_note),
    ]


def print_others(others: list[Other]) -> None:
    print("\nthe same lineage in other tools, after the edits (wall time, median):")
    for other in others:
        shown = "n/a" if other.seconds is None else f"{other.seconds * 1e3:.1f} ms"
        print(f"  {other.name:<26} {other.files:>7,} files {shown:>11}  {other.note}")


def _machine(load_at_start: float) -> str:
    return (
        f"{os.cpu_count()} cores ({_cpu_model()}), Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')},"
        f" load average {load_at_start:.1f} at the start and {os.getloadavg()[0]:.1f} at the end"
    )


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

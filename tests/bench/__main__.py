"""``python -m tests.bench``: provgraph timed against the cost of looking at the files.

Each figure is printed next to its *floor*, measured in the same run on the
same folder, and the ratio of the two; runs of provgraph and of the floor
alternate and the medians are compared, so a noisy machine slows both.

- cold ``provgraph status --json`` (no state yet), whole process, against a
  Python process that reads and sha256-hashes every memory file;
- warm ``provgraph status --json`` (nothing changed), whole process, against a
  Python process that walks the folder and stats every memory file;
- warm after one plain file changed (staleness flows down its chains), against
  the same stat walk;
- the agent hook on an unchanged 200-file folder, per call, in process,
  against an in-process scandir+stat walk of that folder;
- peak resident memory of the cold and the warm process.

Then ``make -q`` and ``dvc status`` run on the same lineage, expressed as a
Makefile and a dvc.yaml pipeline, where those tools are available.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from .generate import Workload, generate, write_dvc_yaml, write_makefile

GOALS = {"cold": 4.0, "warm": 3.0, "changed": 8.0, "hook": 5.0}
RSS_GOAL_MB = 400
HOOK_FILES = 200

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
class Run:
    seconds: float
    max_rss_mb: float
    stdout: bytes


@dataclass(frozen=True)
class Figure:
    name: str
    measured: float
    floor: float
    goal: float | None
    unit_scale: float = 1e3
    unit: str = "ms"

    @property
    def ratio(self) -> float:
        return self.measured / self.floor if self.floor else float("inf")


def run(command: list[str], *, check: bool = True, env: dict | None = None, timeout: float | None = None) -> Run:
    """Run a whole process; its wall time and its own peak RSS (``wait4``)."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE, env=env)
        try:
            _, status, usage = _wait4(process, timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        seconds = time.perf_counter() - started
        code = os.waitstatus_to_exitcode(status)
        process.returncode = code
        error = process.stderr.read() if process.stderr else b""
        if process.stderr:
            process.stderr.close()
        if check and code != 0:
            raise RuntimeError(f"{' '.join(command)} exited {code}: {error.decode(errors='replace')[-2000:]}")
        out.seek(0)
        return Run(seconds, usage.ru_maxrss / 1024, out.read())


def _wait4(process: subprocess.Popen, timeout: float | None):
    if timeout is None:
        return os.wait4(process.pid, 0)
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            return pid, status, usage
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(process.args, timeout)
        time.sleep(0.01)


def provgraph_command() -> list[str]:
    """The console script users run, next to this interpreter; else ``python -m provgraph``."""
    script = Path(sys.executable).with_name("provgraph")
    return [str(script)] if script.exists() else [sys.executable, "-m", "provgraph"]


def alternate(runs: int, first, second) -> tuple[list, list]:
    """Call ``first`` and ``second`` in turn, ``runs`` times each."""
    a, b = [], []
    for _ in range(runs):
        a.append(first())
        b.append(second())
    return a, b


def wait_out_racy_window(workload: Workload) -> None:
    """Files written less than ~2 s before a scan are re-read on the next one, by
    design; the warm figures measure the steady state, so let them age."""
    time.sleep(2.2)


def bench_cli(workload: Workload, runs: int) -> tuple[list[Figure], dict[str, float], dict]:
    root = str(workload.root)
    status = [*provgraph_command(), "status", "--json", root]
    state = workload.root / ".provgraph"
    hash_floor = [sys.executable, "-c", HASH_FLOOR, root]
    stat_floor = [sys.executable, "-c", STAT_FLOOR, root]

    def cold() -> Run:
        shutil.rmtree(state, ignore_errors=True)
        return run(status)

    run(hash_floor), run(stat_floor), cold()  # warm the page cache and the bytecode caches
    floors, colds = alternate(runs, lambda: run(hash_floor), cold)
    cold_output = colds[-1].stdout
    stat_floors, warms = alternate(runs, lambda: run(stat_floor), lambda: run(status))
    _check_same(cold_output, warms[-1].stdout)

    leaf = workload.root / workload.leaf
    original = leaf.read_bytes()
    counter = iter(range(1_000_000))

    def changed() -> Run:
        with open(leaf, "ab") as handle:
            handle.write(f"An edit ({next(counter)}).\n".encode())
        return run(status)

    changed_floors, changeds = alternate(runs, lambda: run(stat_floor), changed)
    stale = _stale_count(changeds[-1].stdout)
    leaf.write_bytes(original)
    figures = [
        Figure("cold status --json (whole process)", median(r.seconds for r in colds), median(r.seconds for r in floors), GOALS["cold"]),
        Figure("warm status --json, nothing changed", median(r.seconds for r in warms), median(r.seconds for r in stat_floors), GOALS["warm"]),
        Figure("warm status --json, one file changed", median(r.seconds for r in changeds), median(r.seconds for r in changed_floors), GOALS["changed"]),
    ]
    rss = {"cold": max(r.max_rss_mb for r in colds), "warm": max(r.max_rss_mb for r in warms), "changed": max(r.max_rss_mb for r in changeds)}
    times = {"warm": figures[1].measured, "changed": figures[2].measured, "stat floor": figures[1].floor}
    return figures, rss, {"times": times, "stale_after_change": stale}


def _check_same(cold: bytes, warm: bytes) -> None:
    """The reused result must be the very report the full scan produced."""
    import json

    first, second = json.loads(cold), json.loads(warm)
    first.pop("scanned_at"), second.pop("scanned_at")
    if first != second:
        raise RuntimeError("the warm status differs from the cold one on an unchanged folder")


def _stale_count(output: bytes) -> int:
    import json

    return int(json.loads(output)["counts"]["stale"])


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


def bench_hook(base: Path, runs: int, calls: int) -> tuple[Figure, str]:
    """Per-call cost of the agent hook on an unchanged folder (the middleware when it exists)."""
    workdir = base / "agent"
    memory = workdir / "Memory"
    generate(memory, HOOK_FILES, seed=2)
    time.sleep(2.2)
    call, label, note = _hook_call(workdir, memory)
    call()
    call()  # the first call scans; later ones see an unchanged folder
    floors, measured = [], []
    for _ in range(runs):
        floors.append(_per_call(lambda: stat_walk(str(memory)), calls))
        measured.append(_per_call(call, calls))
    return Figure(label, median(measured), median(floors), GOALS["hook"], 1e6, "µs"), note


def _per_call(call, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls


def _hook_call(workdir: Path, memory: Path):
    try:
        from provgraph.integrations.agentscope import ProvenanceMiddleware
    except ImportError as error:
        from provgraph import Memory

        handle = Memory(memory)
        note = f"ProvenanceMiddleware is not available ({error}); timed Memory(root).refresh() instead"
        return handle.refresh, f"Memory.refresh(), {HOOK_FILES} files (in process, per call)", note
    middleware = ProvenanceMiddleware(workdir=str(workdir), memory_dir="Memory")
    loop = asyncio.new_event_loop()

    def call() -> str:
        return loop.run_until_complete(middleware.on_system_prompt(None, "You are helpful."))

    return call, f"ProvenanceMiddleware.on_system_prompt, {HOOK_FILES} files", ""


# -- other tools ----------------------------------------------------------------


def bench_make(workload: Workload, runs: int) -> tuple[float | None, str]:
    make = shutil.which("make")
    if make is None:
        return None, "make is not installed"
    write_makefile(workload)
    command = [make, "-q", "-C", str(workload.root), "all"]
    run(command, check=False)
    return median(run(command, check=False).seconds for _ in range(runs)), f"{len(workload.sources)} rules"


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
        return None, "dvc is not installed (install it into any environment and pass --dvc PATH)"
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    root = str(workload.root)
    shutil.rmtree(workload.root / ".dvc", ignore_errors=True)
    write_dvc_yaml(workload)
    try:
        subprocess.run([*command, "init", "--no-scm", "-q", "-f"], cwd=root, env=env, check=True, capture_output=True, timeout=budget)
        subprocess.run([*command, "config", "core.check_update", "false"], cwd=root, env=env, check=True, capture_output=True, timeout=budget)
        subprocess.run([*command, "commit", "-f", "-q"], cwd=root, env=env, check=True, capture_output=True, timeout=budget)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run([*command, "status", "-q"], cwd=root, env=env, capture_output=True, timeout=budget)
            times.append(time.perf_counter() - started)
    except subprocess.TimeoutExpired:
        return None, f"dvc did not finish within {budget:.0f} s"
    except subprocess.CalledProcessError as error:
        return None, f"dvc failed: {error.stderr.decode(errors='replace').strip()[-300:]}"
    return median(times), f"{len(workload.sources)} stages"


# -- report -------------------------------------------------------------------


def print_figures(figures: list[Figure]) -> None:
    print(f"{'figure':<52} {'provgraph':>11} {'floor':>11} {'ratio':>7}  goal")
    for figure in figures:
        measured = f"{figure.measured * figure.unit_scale:.1f} {figure.unit}"
        floor = f"{figure.floor * figure.unit_scale:.1f} {figure.unit}"
        goal = f"≤ {figure.goal:g}×" if figure.goal else ""
        mark = "" if figure.goal is None else ("  ok" if figure.ratio <= figure.goal else "  over")
        print(f"{figure.name:<52} {measured:>11} {floor:>11} {figure.ratio:>6.1f}×  {goal}{mark}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description="provgraph against the cost of looking at the files")
    parser.add_argument("--files", type=int, default=10_000, help="memory files in the generated folder (default 10000)")
    parser.add_argument("--runs", type=int, default=None, help="alternating runs per figure (default 7, 2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="few runs, no dvc: a smoke test of the benchmark itself")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dvc", metavar="PATH", help="the dvc executable (default: importable dvc, else dvc on PATH)")
    parser.add_argument("--keep", action="store_true", help="keep the generated folders")
    options = parser.parse_args(argv)
    runs = options.runs or (2 if options.quick else 7)
    base = Path(tempfile.mkdtemp(prefix="provgraph-bench-"))
    try:
        return _bench(options, runs, base)
    finally:
        if options.keep:
            print(f"folders kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def _bench(options: argparse.Namespace, runs: int, base: Path) -> int:
    started = time.perf_counter()
    workload = generate(base / "memory", options.files, options.seed)
    print(
        f"provgraph benchmark: {len(workload.files):,} files, {len(workload.sources):,} derived, "
        f"longest chain {workload.depth}; {runs} alternating runs, medians"
    )
    print(f"machine: {os.cpu_count()} cores, {_cpu_model()}, Python {sys.version.split()[0]}")
    wait_out_racy_window(workload)
    figures, rss, extra = bench_cli(workload, runs)
    hook, note = bench_hook(base, runs, 20 if options.quick else 200)
    print()
    print_figures([*figures, hook])
    print(f"peak RSS: cold {rss['cold']:.0f} MB, warm {rss['warm']:.0f} MB, changed {rss['changed']:.0f} MB (goal ≤ {RSS_GOAL_MB} MB)")
    print(f"after the change: {extra['stale_after_change']} stale files (edited: {workload.leaf})")
    if note:
        print(f"note: {note}")
    _print_others(workload, runs, options, extra["times"])
    print(f"\nbenchmark time: {time.perf_counter() - started:.0f} s")
    return 0


def _print_others(workload: Workload, runs: int, options: argparse.Namespace, times: dict[str, float]) -> None:
    print("\nother tools on the same lineage:")
    make_time, make_note = bench_make(workload, runs)
    if options.quick:
        dvc_time, dvc_note = None, "skipped with --quick"
    else:
        dvc_time, dvc_note = bench_dvc(workload, min(runs, 3), options.dvc, budget=240)
    for name, seconds, note in (("make -q (Makefile)", make_time, make_note), ("dvc status (dvc.yaml)", dvc_time, dvc_note)):
        if seconds is None:
            print(f"  {name:<26} n/a          {note}")
            continue
        print(
            f"  {name:<26} {seconds * 1e3:9.1f} ms  ({note}); it takes {seconds / times['warm']:.1f}× provgraph's "
            f"warm status, {seconds / times['changed']:.1f}× its status after one change"
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

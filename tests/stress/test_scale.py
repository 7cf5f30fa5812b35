"""Size: a memory folder of 20,000 files, a 3,000-deep chain of derivations (three times
Python's recursion limit), a cycle of 1,000 files.  Each completes with the right counts;
none recurses too deep or hangs (every command runs in a subprocess with a timeout)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from provgraph.render import json_chain

from .helpers import assert_clean, provgraph, write


def _fast_write(path: Path, content: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(descriptor, content)
    finally:
        os.close(descriptor)


def test_a_folder_of_20000_files_cold_then_warm(root: Path) -> None:
    """100 folders of 200 tiny files; every tenth file is derived from the file before it.
    (The benchmark measures 100,000 files.)"""
    for folder in range(100):
        (root / f"d{folder}").mkdir()
    for index in range(20_000):
        if index % 10 == 0 and index:
            content = b"---\nderived_from: /d%d/f%d.md\n---\n" % ((index - 1) % 100, index - 1)
        else:
            content = b"fact %d\n" % index
        _fast_write(root / f"d{index % 100}" / f"f{index}.md", content)
    expected = {"files": 20_000, "derived": 1_999, "stale": 0, "cycles": 0, "problems": 0}

    cold = provgraph("status", "--json", root)
    assert_clean(cold, 0)
    assert json.loads(cold.stdout)["counts"] == expected

    _fast_write(root / "d9" / "f9.md", b"fact 9, edited\n")
    warm = provgraph("status", "--json", root)
    assert_clean(warm, 0)
    status = json.loads(warm.stdout)
    assert status["counts"] == {**expected, "stale": 1}
    assert [(entry["path"], entry["causes"][0]["source"]) for entry in status["stale"]] == [("d10/f10.md", "d9/f9.md")]


def test_a_chain_3000_deep(root: Path) -> None:
    depth = 3_000
    _fast_write(root / "f0.md", b"origin\n")
    for index in range(1, depth):
        _fast_write(root / f"f{index}.md", b"---\nderived_from: f%d.md\n---\n" % (index - 1))

    done = provgraph("status", "--json", root)
    assert_clean(done, 0)
    assert json.loads(done.stdout)["counts"] == {
        "files": depth,
        "derived": depth - 1,
        "stale": 0,
        "cycles": 0,
        "problems": 0,
    }

    write(root, "f0.md", "origin, edited\n")
    done = provgraph("check", root)
    assert_clean(done, 1)
    assert (
        done.stdout.splitlines()[0]
        == f"{depth} memory files, {depth - 1} derived, {depth - 1} stale, 0 cycles, 0 problems"
    )

    done = provgraph("why", "--json", "--root", root, root / f"f{depth - 1}.md")
    assert_clean(done, 0)
    (cause,) = json.loads(done.stdout)["causes"]
    assert cause["source"] == "f0.md" and cause["via"] == [f"f{index}.md" for index in range(depth)]


def test_a_cycle_of_1000_files_is_reported_and_staleness_flows_through_and_out(root: Path) -> None:
    size = 1_000
    write(root, "entry.md", "entry\n")
    for index in range(size):
        sources = [f"c{(index - 1) % size}.md"] + (["entry.md"] if index == 0 else [])
        write(root, f"c{index}.md", "---\nderived_from: " + ", ".join(sources) + "\n---\n")
    write(root, "out.md", "---\nderived_from: c500.md\n---\n")

    done = provgraph("status", "--json", root)
    assert_clean(done, 0)
    status = json.loads(done.stdout)
    assert status["cycles"] == [[f"c{index}.md" for index in range(size)]]
    assert status["counts"]["stale"] == 0
    assert_clean(provgraph("check", root), 1)  # a cycle alone fails the check

    write(root, "entry.md", "entry, edited\n")
    status = json.loads(provgraph("status", "--json", root).stdout)
    assert status["counts"]["stale"] == size + 1
    (out,) = [entry for entry in status["stale"] if entry["path"] == "out.md"]
    chain = json_chain(status, "out.md", out["causes"][0])
    assert chain == ["entry.md", *(f"c{index}.md" for index in range(501)), "out.md"]

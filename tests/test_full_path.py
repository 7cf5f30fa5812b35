"""The command's run (a first scan, a changed folder) as a user starts it: a process of its
own, which ends with its exit code once its whole answer is out and its state written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import PROVGRAPH

STALE = 400
"""Derived files made stale: enough that the answer is larger than a pipe holds at once."""


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "memory"
    root.mkdir()
    (root / "facts.md").write_text("---\nname: facts\n---\nThe user likes tea.\n")
    for number in range(STALE):
        (root / f"summary-{number:03}.md").write_text(f"---\nname: s{number}\nderived_from: facts.md\n---\nTea.\n")
    return root


def test_the_command_ends_with_its_exit_code_and_its_whole_output(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    subprocess.run([PROVGRAPH, "status", str(root)], check=True, capture_output=True, timeout=60)
    (root / "facts.md").write_text("---\nname: facts\n---\nThe user likes coffee.\n")
    status = subprocess.run([PROVGRAPH, "status", "--json", str(root)], capture_output=True, timeout=60)
    check = subprocess.run([PROVGRAPH, "check", str(root)], capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert len(status.stdout) > 65536
    assert json.loads(status.stdout)["counts"]["stale"] == STALE
    assert check.returncode == 1
    assert check.stdout.count("facts.md changed") == STALE
    assert check.stderr == ""


def test_a_declaration_written_with_percent_escapes_still_reads_them(tmp_path: Path, run) -> None:
    """``urllib`` is imported only for a link that has an escape to decode."""
    root = _folder(tmp_path)
    (root / "my facts.md").write_text("The user likes tea.\n")
    (root / "profile.md").write_text("---\nderived_from: [Facts](my%20facts.md), [Plain](facts.md)\n---\n")
    code, out, _ = run("why", "--json", "--root", root, "profile.md", cwd=root)
    assert code == 0
    assert [source["source"] for source in json.loads(out)["sources"]] == ["facts.md", "my facts.md"]


def test_a_warning_of_a_full_run_is_one_line_on_stderr(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    subprocess.run([PROVGRAPH, "status", str(root)], check=True, capture_output=True, timeout=60)
    (root / "provgraph.lock").write_bytes(b"{not a lock at all")
    done = subprocess.run([PROVGRAPH, "status", str(root)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"provgraph: warning: {root / 'provgraph.lock'} could not be read")
    assert done.stdout.startswith(f"{STALE + 1} memory files, {STALE} derived")


def test_a_first_scan_holds_a_source_named_by_many_files_once(tmp_path: Path) -> None:
    """A large folder's sources are named tens of thousands of times: each name is kept as the
    listing's own string, not as one copy per declaration (the peak memory of a first scan)."""
    from provgraph.files import LocalFiles
    from provgraph.scan import scan

    root = _folder(tmp_path)
    (root / "notes").mkdir()
    (root / "notes" / "linked.md").write_text("---\nderived_from: [Facts](../facts.md)\n---\n")
    files = LocalFiles(root)
    listing, problems = files.walk()
    snapshot = scan(files, {}, 0, (listing, problems))
    named = [sources[0] for sources in snapshot.declarations.values()]
    assert len(named) == STALE + 1 and set(named) == {"facts.md"}
    (listed,) = (path for path in listing if path == "facts.md")
    assert all(name is listed for name in named)


def test_a_first_scan_stamps_a_source_named_by_many_files_once(tmp_path: Path) -> None:
    """A first scan adopts every edge: a source named by many files is stamped once for all."""
    from provgraph import Memory
    from provgraph.stamps import reconcile_as_table

    root = _folder(tmp_path)
    report = Memory(root).refresh()
    assert len(report.edges) == STALE
    stamps = {id(derivation.stamps["facts.md"]) for derivation in _adopted(root, reconcile_as_table).values()}
    assert len(stamps) == 1
    assert [edge.source for edge in report.edges] == ["facts.md"] * STALE


def _adopted(root: Path, reconcile):
    """The records a first scan of ``root`` adopts."""
    from provgraph.files import LocalFiles
    from provgraph.scan import scan

    files = LocalFiles(root)
    return reconcile({}, scan(files, {}, 0, files.walk()), 1.0)[0]


def test_the_help_is_as_wide_as_the_terminal(run, tmp_path: Path) -> None:
    """The parsers ask the terminal's width once, not once per option; the help still fits it."""
    _, narrow, _ = run("status", "--help", cwd=tmp_path, env={"COLUMNS": "50"})
    _, wide, _ = run("status", "--help", cwd=tmp_path, env={"COLUMNS": "200"})
    assert len(narrow.splitlines()) > len(wide.splitlines())
    assert max(map(len, wide.splitlines())) > 60
    assert sorted(map(len, narrow.splitlines()))[-3] <= 50  # argparse cannot break one usage group
    assert " ".join(narrow.split()) == " ".join(wide.split())


def test_the_help_without_a_command_lists_every_command(run, tmp_path: Path) -> None:
    code, help, _ = run("--help", cwd=tmp_path)
    _, none, error = run(cwd=tmp_path)
    _, _, unknown = run("statu", cwd=tmp_path)
    assert code == 0 and none == ""
    commands = help.split("COMMAND\n", 2)[-1].splitlines()
    listed = [line.split()[0] for line in commands if line.startswith("    ") and line[4] != " "]
    assert listed == ["status", "check", "why", "lineage", "stamp", "index", "graph", "prompt", "hook", "mcp", "demo"]
    assert "the following arguments are required: COMMAND" in error
    assert "invalid choice: 'statu'" in unknown and "'demo'" in unknown


def _reads_per_file(files, monkeypatch) -> dict[str, int]:
    """How many times each file is read (whole or for its frontmatter) or hashed by ``files``
    (a ``LocalFiles``)."""
    opened: dict[str, int] = {}

    def counting(method):  # type: ignore[no-untyped-def]
        def counted(path: str, *args):  # type: ignore[no-untyped-def]
            opened[path] = opened.get(path, 0) + 1
            return method(path, *args)

        return counted

    for name in ("read", "sha256"):
        monkeypatch.setattr(files, name, counting(getattr(files, name)))
    return opened


def test_a_first_scan_reads_each_memory_file_once_and_hashes_its_sources_as_they_were_read(
    tmp_path: Path, monkeypatch
) -> None:
    import hashlib

    from provgraph.files import LocalFiles
    from provgraph.scan import scan

    root = _folder(tmp_path)
    files = LocalFiles(root)
    listing, problems = files.walk()
    opened = _reads_per_file(files, monkeypatch)
    snapshot = scan(files, {}, 0, (listing, problems))
    assert snapshot.sources["facts.md"].sha256 == hashlib.sha256((root / "facts.md").read_bytes()).hexdigest()
    assert opened == dict.fromkeys(listing, 1)


def test_a_source_longer_than_the_part_read_for_frontmatter_is_read_again_and_hashed_whole(
    tmp_path: Path, monkeypatch
) -> None:
    import hashlib

    from provgraph.files import LocalFiles
    from provgraph.scan import scan

    root = _folder(tmp_path)
    long_body = b"---\nname: facts\n---\n" + b"The user likes tea.\n" * 5000
    (root / "facts.md").write_bytes(long_body)
    files = LocalFiles(root)
    listing, problems = files.walk()
    opened = _reads_per_file(files, monkeypatch)
    snapshot = scan(files, {}, 0, (listing, problems))
    assert snapshot.sources["facts.md"].sha256 == hashlib.sha256(long_body).hexdigest()
    assert opened == {**dict.fromkeys(listing, 1), "facts.md": 2}

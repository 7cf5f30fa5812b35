"""The ``provgraph`` command as an install puts it on ``PATH``.

It is a script of its own (``scripts/provgraph``), not a generated entry point: the
script pip generates for an entry point imports ``re`` before provgraph, which costs
about a third of the answer to an unchanged folder of a thousand files.  These tests
install a wheel of the checkout (the benchmark's own builder, ``tests/bench/install.py``)
into a fresh environment and run the command it installed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import provgraph.nochange

REPOSITORY = Path(__file__).resolve().parent.parent
PAST_THE_RACY_WINDOW = provgraph.nochange.RACY_WINDOW_NS / 1e9 + 0.3


def _install_module():
    """``tests/bench/install.py`` by its path: the benchmark is not a package pytest imports."""
    spec = importlib.util.spec_from_file_location("bench_install", REPOSITORY / "tests" / "bench" / "install.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory):
    """A wheel of the checkout installed in a fresh environment, and a memory folder written
    before the install (which takes longer than the racy window)."""
    base = tmp_path_factory.mktemp("command")
    root = base / "memory"
    (root / "notes").mkdir(parents=True)
    (root / "facts.md").write_text("---\nname: Facts\n---\nThe user lives in Lyon.\n", encoding="utf-8")
    (root / "notes" / "profile.md").write_text(
        "---\nname: Profile\nderived_from: ../facts.md\n---\nLyon.\n", encoding="utf-8"
    )
    written = time.monotonic()
    interpreter = _install_module().installed(base / "install")
    time.sleep(max(0.0, written + PAST_THE_RACY_WINDOW - time.monotonic()))
    return interpreter, root


def _imports(interpreter, *command: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``command`` with every import listed (``PYTHONPROFILEIMPORTTIME``): what it printed,
    and the modules it imported."""
    env = {**interpreter.env, "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    lines = done.stderr.splitlines()
    return done, {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}


def test_the_installed_command_is_a_script_that_starts_with_the_environments_python(installed) -> None:
    interpreter, _ = installed
    script = Path(interpreter.provgraph[0])
    assert os.access(script, os.X_OK)
    assert script.read_text(encoding="utf-8").splitlines()[0] == f"#!{interpreter.python}"


def test_the_installed_command_answers_an_unchanged_folder_without_importing_re(installed) -> None:
    """Nor ``enum``, which ``re`` would import too (``nochange.Sight`` is written out), nor
    ``operator`` or ``struct`` (the walk's bytes come from ``marshal``, built in): besides
    provgraph's own small modules, only ``fcntl`` (the lock), ``__future__`` and modules built
    into the interpreter."""
    interpreter, root = installed
    for _ in range(2):  # the full path answers, then a quick answer keeps the walk it proved
        first = subprocess.run([*interpreter.provgraph, "status"], cwd=root, env=interpreter.env, capture_output=True)
        assert first.returncode == 0, first.stderr
    _, at_start = _imports(interpreter, interpreter.python, "-c", "pass", cwd=root)
    done, imported = _imports(interpreter, *interpreter.provgraph, "status", cwd=root)
    assert done.returncode == 0 and done.stdout.encode() == first.stdout
    assert "provgraph.replay" in imported and "provgraph.api" not in imported  # the quick answer printed it
    added = {name for name in imported - at_start if name.split(".")[0] != "provgraph"}
    assert added <= {"__future__", "fcntl", "gc"}, added  # no re, enum, operator, struct, itertools
    assert "provgraph.cli" not in imported  # the script starts at the quick answer


def test_the_quick_answer_that_records_its_proof_imports_no_dataclasses(installed) -> None:
    """The first quick answer after a full run writes its record through ``statefolder``,
    whose ``Folders`` is a plain class: ``dataclasses`` (with ``inspect``, ``ast`` and ``re``)
    would cost that answer more than it spends on a small folder."""
    interpreter, root = installed
    recorded = False
    for _ in range(3):
        done, imported = _imports(interpreter, *interpreter.provgraph, "status", "--json", cwd=root)
        assert done.returncode == 0, done.stderr
        if "provgraph.api" not in imported:  # a quick answer
            assert "dataclasses" not in imported
            recorded = recorded or "provgraph.store.folder" in imported
    assert recorded


def test_the_installed_command_runs_the_demo(installed, tmp_path: Path) -> None:
    interpreter, _ = installed
    shown = subprocess.run(
        [*interpreter.provgraph, "demo"], cwd=tmp_path, env=interpreter.env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert "profile.md" in shown.stdout and "stale" in shown.stdout


PATHLIB = {"pathlib", "urllib.parse", "ipaddress", "fnmatch", "ntpath"}
"""``pathlib`` and what it imports: a run that refreshes works on paths as text."""


def test_the_installed_command_answers_a_changed_folder_without_importing_pathlib(installed, tmp_path: Path) -> None:
    """A first scan, a scan after a change and ``check`` all import the library, and none of
    them ``pathlib`` (nor ``urllib``, which a link with a ``%`` escape still imports)."""
    interpreter, _ = installed
    root = tmp_path / "memory"
    root.mkdir()
    (root / "facts.md").write_text("The user lives in Lyon.\n", encoding="utf-8")
    (root / "profile.md").write_text("---\nderived_from: [Facts](facts.md)\n---\nLyon.\n", encoding="utf-8")
    _, at_start = _imports(interpreter, interpreter.python, "-c", "pass", cwd=root)
    first, imported_first = _imports(interpreter, *interpreter.provgraph, "status", "--json", cwd=root)
    (root / "facts.md").write_text("The user lives in Paris.\n", encoding="utf-8")
    changed, imported_changed = _imports(interpreter, *interpreter.provgraph, "status", "--json", cwd=root)
    check, imported_check = _imports(interpreter, *interpreter.provgraph, "check", cwd=root)
    assert first.returncode == changed.returncode == 0 and check.returncode == 1, check.stderr
    assert "profile.md" in check.stdout and "facts.md changed" in check.stdout
    assert PATHLIB.isdisjoint(at_start)
    for imported in (imported_first, imported_changed, imported_check):
        assert "provgraph.scan" in imported  # the library answered, not the quick answer
        assert PATHLIB.isdisjoint(imported), PATHLIB & imported

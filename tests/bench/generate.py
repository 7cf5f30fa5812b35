"""A synthetic memory folder for the benchmark, deterministic by seed.

``generate(root, files, seed)`` writes ``files`` memory files of about 2 KB
spread over subfolders.  About 30% of them are derived from 2-4 earlier
files, half of the time from files that are themselves derived, so chains of
summaries of summaries form; the graph is acyclic because a file only names
files written before it.  Declarations use every form the contract accepts
(comma list, inline list, block list, Markdown links, root-relative entries),
and some descriptions hold an unquoted colon, as real memory files do.
"""

from __future__ import annotations

import os
import posixpath
import random
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Workload", "generate"]

DERIVED_SHARE = 0.30
BODY_BYTES = 2000
FILES_PER_FOLDER = 40
_TOPS = ("notes", "people", "projects", "topics", "journal", "reference")
_WORDS = tuple(
    " ".join(
        (
            "memory agent user prefers concise answers project deadline meeting review draft summary source",
            "note decision context budget team release schedule customer feedback issue design test plan",
            "weekly monthly digest profile preference language tooling deploy server database latency",
            "migration backlog priority risk owner status blocked done open question answer follow up",
        )
    ).split()
)


@dataclass(frozen=True)
class Workload:
    """What was written: every file and, for derived files, their root-relative sources."""

    root: Path
    files: tuple[str, ...]
    sources: dict[str, tuple[str, ...]]
    leaf: str
    """A file derived from nothing that some chain of derived files is built from:
    the file the benchmark edits."""
    derived: str
    """A derived file: the one the benchmark rewrites as an agent would."""

    @property
    def depth(self) -> int:
        """Length of the longest derivation chain (a summary of a summary is 2)."""
        depth: dict[str, int] = {}
        for path in self.files:  # written in order: sources come first
            depth[path] = 1 + max((depth.get(s, 0) for s in self.sources.get(path, ())), default=-1)
        return max(depth.values(), default=0)


def generate(root: str | os.PathLike[str], files: int, seed: int = 1) -> Workload:
    """Write ``files`` memory files (``MEMORY.md`` included) below ``root``."""
    rng = random.Random(seed)
    root = Path(root)
    folders = _folders(rng, max(1, files // FILES_PER_FOLDER))
    paths: list[str] = []
    derived: list[str] = []
    sources: dict[str, tuple[str, ...]] = {}
    for index in range(max(0, files - 1)):
        path = f"{rng.choice(folders)}/{rng.choice(_WORDS)}-{index:06d}.md"
        chosen = _sources(rng, paths, derived) if len(paths) >= 8 and rng.random() < DERIVED_SHARE else ()
        _write(root / path, _content(rng, path, chosen, index))
        if chosen:
            sources[path] = tuple(sorted(chosen))
            derived.append(path)
        paths.append(path)
    if files >= 1:
        _write(root / "MEMORY.md", _index(paths[:50]))
        paths.append("MEMORY.md")
    workload = Workload(root, tuple(paths), sources, "", "")
    derived_file = rng.choice(derived) if derived else ""
    return Workload(root, workload.files, sources, _pick_leaf(rng, workload), derived_file)


def _folders(rng: random.Random, count: int) -> list[str]:
    folders = []
    for index in range(count):
        top = _TOPS[index % len(_TOPS)]
        folders.append(top if index < len(_TOPS) else f"{top}/{rng.choice(_WORDS)}-{index:04d}")
    return folders


def _sources(rng: random.Random, paths: list[str], derived: list[str]) -> list[str]:
    """2-4 distinct earlier files, half of them derived ones when there are any."""
    chosen: set[str] = set()
    wanted = rng.randint(2, 4)
    while len(chosen) < wanted:
        pool = derived if derived and rng.random() < 0.5 else paths
        chosen.add(rng.choice(pool))
    return sorted(chosen)


def _pick_leaf(rng: random.Random, workload: Workload) -> str:
    """A plain file with a chain of at least two derivations below it."""
    used = {source for sources in workload.sources.values() for source in sources}
    children: dict[str, list[str]] = {}
    for derived, sources in workload.sources.items():
        for source in sources:
            children.setdefault(source, []).append(derived)
    plain = [path for path in workload.files if path in used and path not in workload.sources]
    # a child that is itself a source has children: a chain of two derivations or more
    deep = [path for path in plain if any(child in used for child in children[path])]
    candidates = deep or plain or list(workload.files)
    return rng.choice(candidates) if candidates else ""


def _entry(rng: random.Random, declaring: str, source: str) -> str:
    roll = rng.random()
    if roll < 0.15:
        return "/" + source
    relative = posixpath.relpath(source, posixpath.dirname(declaring) or ".")
    if roll < 0.30:
        title = posixpath.basename(source)[:-3].replace("-", " ").title()
        return f"[{title}]({relative})"
    return relative


def _declaration(rng: random.Random, declaring: str, chosen: list[str]) -> list[str]:
    entries = [_entry(rng, declaring, source) for source in chosen]
    style = rng.random()
    if style < 0.45:
        lines = ["derived_from: " + ", ".join(entries)]
    elif style < 0.70:
        lines = ["derived_from: [" + ", ".join(entries) + "]"]
    else:
        lines = ["derived_from:"] + [f"  - {entry}" for entry in entries]
    if rng.random() < 0.2:
        lines.append(f"derived_at: 2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}")
    return lines


def _content(rng: random.Random, path: str, chosen: list[str], index: int) -> str:
    name = posixpath.basename(path)[:-3].replace("-", " ")
    description = " ".join(rng.choices(_WORDS, k=8))
    if rng.random() < 0.2:
        description = "Note: " + description  # an unquoted colon: not valid YAML
    head = [
        "---",
        f"name: {name}",
        f"description: {description}",
        f"type: {rng.choice(('user', 'project', 'feedback'))}",
    ]
    if chosen:
        head += _declaration(rng, path, chosen)
    head.append("---")
    body = [f"# {name.title()}", ""]
    size = sum(len(line) + 1 for line in head) + len(body[0]) + 2
    while size < BODY_BYTES:
        line = " ".join(rng.choices(_WORDS, k=12)) + f" ({index})."
        body.append(line)
        size += len(line) + 1
    return "\n".join(head + body) + "\n"


def _index(paths: list[str]) -> str:
    lines = ["# Memory index", ""]
    lines += [f"- [{posixpath.basename(path)}]({path})" for path in paths]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

"""The README, CONTRIBUTING.md and the pages in ``docs/`` stay linked and honest: every link lands, every test
they cite exists, and the performance table is the same wherever it is shown."""

from __future__ import annotations

import ast
import functools
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
DOCS = {
    "agentscope.md",
    "claude-code.md",
    "command-line.md",
    "declaring.md",
    "guarantees.md",
    "mcp.md",
    "performance.md",
}
FENCE = re.compile(r"^ *(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CITED_TEST = re.compile(r"`(?:(?:tests/)?(?:stress/)?\w+\.py::)?(test_\w+)`")
CITED_FILE = re.compile(r"`(?:tests/)?((?:stress/)?test_\w+\.py)(?:::\w+)?`")


def prose(text: str, *, code: bool = False) -> list[str]:
    """The page's lines outside fenced code blocks (inline code removed unless asked): where links and headings live."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line if code else re.sub(r"`[^`]*`", "", line))
    return lines


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces turned into hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them (duplicates get ``-1``, ``-2``...)."""
    made: dict[str, int] = {}
    found = set()
    for line in prose(text, code=True):
        heading = re.match(r"#{1,6} +(.*?) *#*$", line)
        if heading:
            anchor = slug(heading.group(1))
            found.add(f"{anchor}-{made[anchor]}" if anchor in made else anchor)
            made[anchor] = made.get(anchor, 0) + 1
    return found


def relative_links(page: Path) -> list[str]:
    return [
        target
        for line in prose(page.read_text(encoding="utf-8"))
        for target in LINK.findall(line)
        if not re.match(r"[a-z]+:", target)
    ]


def test_every_relative_link_in_the_readme_and_the_docs_leads_to_a_file_and_heading_that_exist() -> None:
    broken = []
    for page in PAGES:
        for target in relative_links(page):
            path, _, anchor = target.partition("#")
            destination = (page.parent / path).resolve() if path else page
            if not destination.exists():
                broken.append((page.name, target, "no such file"))
            elif anchor and anchor not in anchors(destination.read_text(encoding="utf-8")):
                broken.append((page.name, target, "no such heading"))
    assert broken == []


def test_the_readme_links_each_page_in_docs_and_contributing_and_each_page_links_back() -> None:
    readme = {(ROOT / target.partition("#")[0]).resolve() for target in relative_links(ROOT / "README.md")}
    docs = [page for page in PAGES if page.parent == ROOT / "docs"]
    assert {page.name for page in docs} == DOCS
    for page in [*docs, ROOT / "CONTRIBUTING.md"]:
        assert page in readme, page.name
        back = {(page.parent / target.partition("#")[0]).resolve() for target in relative_links(page)}
        assert ROOT / "README.md" in back, page.name


PERFORMANCE_HEADER = "| figure | size | floor median | provgraph median | ratio | goal | met/OVER |"
"""The header of the table ``python -m tests.bench --markdown`` prints."""


def _performance_table(page: Path) -> list[str]:
    """The rows of the table of figures on ``page``, its header first."""
    lines = page.read_text(encoding="utf-8").splitlines()
    start = lines.index(PERFORMANCE_HEADER)
    return list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))


def test_the_readme_shows_the_one_performance_table_of_the_performance_page() -> None:
    """One table, as the benchmark prints it (each figure, its floor, its goal), the same in both places."""
    readme, page = ROOT / "README.md", ROOT / "docs" / "performance.md"
    for shown in (readme, page):
        text = shown.read_text(encoding="utf-8")
        assert text.count(PERFORMANCE_HEADER) == 1, shown.name
    tables = len(re.findall(r"^\| --- \|", page.read_text(encoding="utf-8"), re.M))
    assert tables == 2, "the benchmark's table and, in a section of its own, the sandbox benchmark's"
    table = _performance_table(page)
    assert len(table) >= 10
    assert _performance_table(readme) == table
    for row in table[2:]:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        assert len(cells) == 7 and cells[5].startswith("≤") and cells[6] in ("met", "OVER"), row


@functools.cache
def _tests_defined() -> tuple[frozenset[str], frozenset[str]]:
    """The names of every test function in the suite, and the suite's test files (``stress/x.py`` for stress);
    read once per process, as several tests ask (parsing every test file is most of their cost)."""
    names, files = set(), set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        files.add(path.relative_to(ROOT / "tests").as_posix())
        files.add(path.name)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names |= {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        }
    return frozenset(names), frozenset(files)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_test_a_page_cites_exists(page: Path) -> None:
    names, files = _tests_defined()
    text = page.read_text(encoding="utf-8")
    assert set(CITED_TEST.findall(text)) - names == set()
    assert set(CITED_FILE.findall(text)) - files == set()


def test_every_guarantee_names_tests_that_exist() -> None:
    """Each bold claim of ``docs/guarantees.md`` cites, before the next claim, a test or test file that exists."""
    names, files = _tests_defined()
    text = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    claims = re.split(r"\n\n(?=\*\*[^*\n]+\*\*)", text)[1:]
    assert len(claims) >= 15
    for claim in claims:
        cited = set(CITED_TEST.findall(claim)) | set(CITED_FILE.findall(claim))
        assert cited, claim.splitlines()[0]
        assert cited <= names | files, claim.splitlines()[0]

"""The ``provgraph`` command line.  ``cli(*args)`` returns the exit code, so
tests call it directly; ``main()`` is the console script.

Results go to stdout, errors and warnings to stderr, one line each: a user
never sees a traceback for a bad argument, a missing folder or a state file
that cannot be written.
"""

from __future__ import annotations

import gc
import os
import sys
import time

from . import __version__
from .errors import ProvgraphError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from datetime import datetime
    from pathlib import Path
    from types import SimpleNamespace
    from typing import Any, NoReturn, TextIO

    from .api import Memory
    from .integrations.claude_code import HookEvent, SessionReads
    from .model import Problem, Report
    from .nochange import Conditions

    _Sub = argparse.ArgumentParser
    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]
    Options = argparse.Namespace | SimpleNamespace
    """What a command reads from its arguments: argparse's, or the same attributes read without it."""

# The command imports the rest of provgraph (and ``pathlib``, ``contextlib``) only once the
# quick answer (``replay``) could not answer: an unchanged folder is answered without the API,
# YAML, networkx or orjson; ``logging`` waits for a warning (``log``), and ``argparse`` for a
# command line that the quick answer does not read (``_without_argparse``).

__all__ = ["cli", "main"]

EXIT_OK, EXIT_STALE, EXIT_ERROR = 0, 1, 2
DEFAULT_MAX_LINES = 20
"""Stale files the printed block lists at most."""


class UsageError(ProvgraphError):
    """A bad argument: one sentence for stderr, exit 2."""


def cli(*args: str) -> int:
    """Run the command line with ``args`` and return the exit code."""
    options = _read_arguments(args)
    if isinstance(options, int):
        return options  # --help, --version, or a bad argument (said on stderr)
    try:
        with _CollectorPaused():
            run: Callable[[Options], int] = options.run
            return run(options)
    except ProvgraphError as error:
        _say_error(error)
        return EXIT_ERROR
    except BrokenPipeError:
        # the reader went away (`provgraph status | head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as error:
        _say("error", _os_message(error))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def main() -> None:
    """The command (``python -m provgraph``; the ``provgraph`` script does the same without
    importing this module for the quick answer): an unchanged folder gets the last answer
    of the same command (``replay``); otherwise ``full_run``."""
    from .replay import answer

    quick = answer(sys.argv[1:])
    if quick is not None:
        sys.exit(quick)
    full_run()


def full_run() -> None:
    """The command once the quick answer could not answer: the library's logged warnings
    become ``provgraph: warning:`` lines of a full run (``logging`` itself is imported
    only if one is logged)."""
    from .errors import listening
    from .splitread import release

    with listening(_warn):
        try:
            code = cli(*sys.argv[1:])  # takes over the walk the quick answer made (``walk.handed_over``)
        finally:
            release()  # a child the quick answer forked and no scan took: never left behind
    _leave(code)


def _leave(code: int) -> NoReturn:
    """End the process once its output is flushed, without the interpreter's teardown.

    By then every state file is written and closed (``cli`` has returned), and what is
    left is freeing a scan's hundreds of thousands of objects one by one: about as long
    as writing the state, for nothing, since the process ends.  Only the command leaves
    this way (``main`` and the ``provgraph`` script, through ``full_run``); ``cli()``
    returns as a library function should.  A reader that went
    away before the last flush is not an error of ours, as in ``cli``."""
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # no console at all (pythonw)
                stream.flush()
    except BrokenPipeError:
        pass
    except OSError as error:
        _say("error", _os_message(error))
        code = code or EXIT_ERROR
    os._exit(code)


def _now() -> datetime | None:
    """``PROVGRAPH_NOW`` when set (``clock.pinned_now``), else None: the real clock."""
    from .clock import pinned_now

    return pinned_now()


class _CollectorPaused:
    """A scan builds hundreds of thousands of small objects and no reference cycle; the
    cyclic garbage collector would walk them all again and again for nothing.  Paused by
    the command, a short-lived process, never by the library inside its caller's."""

    def __enter__(self) -> None:
        self._enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exception: object) -> None:
        if self._enabled:
            gc.enable()


def _say(kind: str, message: str) -> None:
    """One line on stderr, ``provgraph: KIND: MESSAGE``.  The message goes through the
    escaping of every printed name (``render.safe_name``): a path the user typed, with a
    newline or an escape code in it, can neither fake a second line nor drive the terminal."""
    from .render import safe_name

    print(f"provgraph: {kind}: {safe_name(message)}", file=sys.stderr)


def _warn(message: str) -> None:
    _say("warning", message)


def _say_error(error: Exception) -> None:
    """``NotDerived`` escaped its names already (its message is read outside the command
    line too): escaping it again would double every backslash."""
    from .api import NotDerived

    if isinstance(error, NotDerived):
        print(f"provgraph: error: {error}", file=sys.stderr)
    else:
        _say("error", str(error))


def _os_message(error: OSError) -> str:
    where = f"{os.fsdecode(error.filename)} " if error.filename else ""
    return f"{where}{error.strerror or error}"


# -- commands ----------------------------------------------------------------


def _status(options: Options) -> int:
    from .render import status_json, status_text

    memory = _open(options)
    report = memory.refresh(now=_now())
    conditions = memory._saved_conditions()
    text = status_json(report) if options.json else status_text(report)
    sys.stdout.write(text)
    _remember(options, memory, conditions, text, EXIT_OK)
    return EXIT_OK


def _check(options: Options) -> int:
    """Exit 1 on a stale file, a cycle, or (unless ``--allow-broken``) a declaration that
    could not be read: a typo in ``derived_from`` must not pass CI quietly."""
    from .render import status_text

    memory = _open(options)
    report = memory.refresh(now=_now())
    conditions = memory._saved_conditions()
    if report.ok and (options.allow_broken or not broken_declarations(report)):
        _remember(options, memory, conditions, "", EXIT_OK)
        return EXIT_OK
    text = status_text(report)
    sys.stdout.write(text)
    _remember(options, memory, conditions, text, EXIT_STALE)
    return EXIT_STALE


def _remember(options: Options, memory: Memory, conditions: Conditions | None, text: str, code: int) -> None:
    """Keep what was printed for the quick answer of the next identical command, when the
    state was saved (a refresh that could not take the lock saves nothing)."""
    from . import replay

    if conditions is None or options.no_cache:
        return
    if options.command == "status":
        name = "status --json" if options.json else "status"
    else:
        name = "check --allow-broken" if options.allow_broken else "check"
    command = replay.Command(name, options.root, options.state, _sources_heading(options))
    store = memory._store
    replay.record(command, store.state_path, conditions, text, code, store.known_lock(conditions.lock))


def broken_declarations(report: Report) -> tuple[Problem, ...]:
    """The problems that make ``check`` fail unless ``--allow-broken`` is given: those that
    mean a declaration says something provgraph cannot follow."""
    from .model import ProblemKind

    broken = {ProblemKind.BAD_FRONTMATTER, ProblemKind.BAD_ENTRY}
    return tuple(problem for problem in report.problems if problem.kind in broken)


def _why(options: Options) -> int:
    from .render import explanation_document, explanation_text, safe_name

    root, (path,) = _locate(options, [options.file])
    memory = _open(options, root)
    explanation = memory.explain(path, memory.refresh(now=_now()))
    if options.json:
        _print_json(explanation_document(explanation))
    elif explanation.status is None and not (root / path).exists():
        print(f"{safe_name(path)} does not exist under {safe_name(str(root))} and no file names it as a source.")
    else:
        sys.stdout.write(explanation_text(explanation))
    return EXIT_OK


def _print_json(document: dict[str, Any]) -> None:
    """One indented JSON document on stdout (``why --json``, ``lineage --json``)."""
    import orjson

    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


def _lineage(options: Options) -> int:
    """What an agent's ``memory_lineage`` tool answers for the same file, word for word (or as data)."""
    from .answers import lineage_document, lineage_text

    root, (path,) = _locate(options, [options.file])
    memory = _open(options, root)
    found = memory.lineage(path, memory.refresh(now=_now()))
    if options.json:
        _print_json(lineage_document(found))
    else:
        print(lineage_text(found, max_lines=options.max_lines))
    return EXIT_OK


def _stamp(options: Options) -> int:
    from .render import safe_name, summary_line

    root, paths = _locate(options, options.files)
    report = _open(options, root).stamp(paths, now=_now())
    for path in sorted(set(paths)):
        count = sum(1 for edge in report.edges if edge.derived == path)
        print(f"stamped {safe_name(path)}: re-derived from {count} source{'s' * (count != 1)} as they are now")
    print(summary_line(report))
    return EXIT_OK


def _graph(options: Options) -> int:
    from . import render

    report = _open(options).refresh(now=_now())
    exporter = {"json": render.graph_json, "dot": render.dot, "mermaid": render.mermaid}[options.format]
    sys.stdout.write(exporter(report))
    return EXIT_OK


def _prompt(options: Options) -> int:
    from .render import prompt_block

    report = _open(options).refresh(now=_now())
    sys.stdout.write(prompt_block(report, max_lines=options.max_lines, more_hint=_more_hint(report, options)))
    return EXIT_OK


def _hook(options: Options) -> int:
    """Claude Code's hook: the event on stdin decides the answer (see ``integrations.claude_code``)."""
    from .integrations import claude_code

    if options.settings:
        root = os.path.abspath(os.path.expanduser(options.root))
        lines = ("--max-lines", str(options.max_lines)) if options.max_lines != DEFAULT_MAX_LINES else ()
        sys.stdout.write(claude_code.settings_json(root, _printed_options(options) + lines))
        return EXIT_OK
    data = _stdin_event()
    try:
        event = claude_code.parse_event(data) if data.strip() else None
    except claude_code.BadEvent as error:
        _say("hook", str(error))
        return EXIT_OK  # a hook must not break the session it serves
    from pathlib import Path

    if not Path(options.root).exists():
        return EXIT_OK  # no memory folder yet: nothing can be stale, and a session must not see an error
    if event is None or event.name == "SessionStart":
        report = _open(options).refresh(now=_now())
        printed = _printed_options(options)
        sys.stdout.write(claude_code.session_start_output(report, max_lines=options.max_lines, options=printed))
    elif event.name == "PostToolUse":
        _hook_tool_use(options, event)
    return EXIT_OK


def _hook_tool_use(options: Options, event: HookEvent) -> None:
    from pathlib import Path

    from .integrations import claude_code

    root = Path(os.path.abspath(options.root))
    path = claude_code.memory_path(root, event.file_path) if event.file_path else None
    if path is None or event.tool not in claude_code.WRITE_TOOLS | {claude_code.READ_TOOL}:
        return
    memory = _open(options)
    reads = claude_code.SessionReads.beside(memory.state_path, root=memory.root)
    if event.tool == claude_code.READ_TOOL:
        if path.endswith(".md"):
            _record_read(reads, event.session, path)
        return
    report = memory.refresh(now=_now())
    output = claude_code.post_tool_use_output(report, path, reads.reads(event.session), _printed_options(options))
    sys.stdout.write(output)


def _record_read(reads: SessionReads, session: str, path: str) -> None:
    """Remember a read for the suggestions; one line on stderr when something that is not
    provgraph's regular file stands in the way (a hook must not break the session)."""
    try:
        reads.record(session, path)
    except OSError as error:
        _say("hook", f"the read was not recorded: {_os_message(error)}")


STDIN_WAIT = 3.0
"""Seconds the hook waits for its event on a standard input that is neither a terminal nor closed."""


def _stdin_event() -> bytes:
    """The hook event Claude Code writes on stdin, or b"" when none is given (a terminal, nothing sent)."""
    import select

    stream = sys.stdin
    try:
        if stream is None or stream.isatty() or not select.select([stream], [], [], STDIN_WAIT)[0]:
            return b""
        return stream.buffer.read()
    except (OSError, ValueError, AttributeError):
        return b""


def _demo(options: Options) -> int:
    from .demo import run_demo

    return run_demo(sys.stdout)


# -- helpers -----------------------------------------------------------------


def _more_hint(report: Report, options: Options) -> str:
    from .paths import status_command

    return f"run `{status_command(report.root, _printed_options(options))}` to list them all"


def _printed_options(options: Options) -> tuple[str, ...]:
    """The options a printed command repeats, so that it reads the folder as this command did."""
    from .paths import command_options

    return command_options(options.state, _sources_heading(options))


def _open(options: Options, root: Path | None = None) -> Memory:
    from .api import Memory

    folder = root if root is not None else options.root
    if not os.path.isdir(folder):
        from pathlib import Path  # the folder as it is named everywhere else: as a Path prints it

        raise UsageError(f"memory root {Path(folder)} is not a folder")
    progress = Progress(sys.stderr) if sys.stderr is not None and sys.stderr.isatty() else None
    return Memory(
        folder,
        state=options.state,
        warn=_warn,
        progress=progress,
        sources_heading=_sources_heading(options),
        trust_cache=not options.no_cache,
    )


def _sources_heading(options: Options) -> str | None:
    """``--sources-heading``: None when not given; a Markdown heading otherwise."""
    heading = getattr(options, "sources_heading", None)
    if heading is not None and not heading.lstrip().startswith("#"):
        raise UsageError(
            f"--sources-heading takes a Markdown heading such as '## Sources', not {heading!r} "
            "(write --sources-heading='## Provenance', or put ROOT before the option)"
        )
    return heading


PROGRESS_AFTER = 1.0
"""Seconds a scan runs before its progress is shown."""


class Progress:
    """How far a long scan has got, on one terminal line rewritten in place.

    Nothing is shown for a scan that ends within ``after`` seconds of the
    command's start (most do), and the line is erased when the scan is done,
    before any result is printed.
    """

    def __init__(self, stream: TextIO, after: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._after = PROGRESS_AFTER if after is None else after
        self._clock = clock
        self._started = clock()
        self._shown = 0

    def __call__(self, done: int, total: int) -> None:
        if done >= total:
            self._erase()
        elif self._clock() - self._started >= self._after:
            line = f"\rprovgraph: scanning {done:,} of {total:,} memory files"
            self._stream.write(line)
            self._stream.flush()
            self._shown = len(line) - 1

    def _erase(self) -> None:
        if self._shown:
            self._stream.write("\r" + " " * self._shown + "\r")
            self._stream.flush()
            self._shown = 0


def _locate(options: Options, files: Sequence[str]) -> tuple[Path, list[str]]:
    """The memory root of ``files`` and their root-relative POSIX paths."""
    from pathlib import Path

    from .api import find_root

    roots = set()
    if options.root is not None:
        roots.add(Path(options.root).absolute())
        files = [os.path.join(options.root, os.path.expanduser(file)) for file in files]
    else:
        for file in files:
            found = find_root(Path(file).absolute().parent if not Path(file).is_dir() else file)
            if found is None:
                raise UsageError(
                    f"no memory root above {file} (no provgraph.lock, .provgraph/ or MEMORY.md); pass --root"
                )
            roots.add(found)
    if len(roots) > 1:
        raise UsageError("the files belong to different memory roots: " + ", ".join(sorted(map(str, roots))))
    root = roots.pop()
    return root, [_relative(root, file) for file in files]


def _relative(root: Path, file: str) -> str:
    from .paths import parts_under

    parts = parts_under(root, file)
    if parts is None or parts[0] == ".provgraph":
        raise UsageError(f"{file} is not under the memory root {root}")
    return "/".join(parts)


def _terminal_columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` gives it (``COLUMNS`` first, then
    the terminal on stdout, else 80), without importing ``shutil``, which brings the
    compression modules with it: the help is the only text the command wraps."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def _read_arguments(args: Sequence[str]) -> Options | int:
    """The options ``args`` give, or the exit code of a run that ended while they were read."""
    options = _without_argparse(args)
    if options is not None:
        return options
    try:
        return _parser(_wanted_command(args)).parse_args(args)
    except SystemExit as exit_:
        return int(exit_.code or 0)


def _without_argparse(args: Sequence[str]) -> SimpleNamespace | None:
    """The options of a command line that the quick answer reads (``replay.parse``: ``status``
    or ``check``, its flag, ROOT, ``--state`` and ``--sources-heading``, spelt as the help
    shows them), exactly as argparse would give them, or None for any other.  Those are the
    command lines that run most, and reading them this way spares a full run importing
    argparse, gettext and locale and building a parser: a few milliseconds each time."""
    from types import SimpleNamespace

    from .replay import parse

    command = parse(args)
    if command is None or "" in args:  # argparse keeps an empty ROOT as it is; the quick answer reads "."
        return None
    name, _, flag = command.name.partition(" ")
    options = SimpleNamespace(
        state=command.state, sources_heading=command.heading, no_cache=False, root=command.root, command=name
    )
    if name == "status":
        options.run, options.json = _status, bool(flag)
    else:
        options.run, options.allow_broken = _check, bool(flag)
    return options


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command's parser; with ``only`` (a command's name), the parser of that command
    alone.  Every parser argparse makes looks up the translations of its headings and of
    ``-h`` (a search for ``.mo`` files each time): building the dozen parsers of every
    command took longer than the run of the one that was asked for.  The help that lists
    every command (``provgraph --help``, or no command, or a name that is none) builds them all."""
    parser = _parser_class()(
        prog="provgraph",
        description="Tell which memory files were derived from files that changed afterwards.",
    )
    parser.add_argument("--version", action="version", version=f"provgraph {__version__}")
    commands = parser.add_subparsers(metavar="COMMAND", required=True)
    for name, add in _COMMAND_PARSERS.items():
        if only is None or name == only:
            add(commands)
    return parser


def _wanted_command(args: Sequence[str]) -> str | None:
    """The command ``args`` run when its name comes first, the only place argparse takes it
    (the parser's own options, ``--help`` and ``--version``, end the run); None otherwise."""
    return args[0] if args and args[0] in _COMMAND_PARSERS else None


def _parser_class() -> type[argparse.ArgumentParser]:
    import argparse

    width = _terminal_columns() - 2

    class _Formatter(argparse.HelpFormatter):
        """argparse's help, as wide as the terminal, which is asked once: argparse asks it
        again (an environment lookup and a system call) for each of the dozens of
        formatters it makes while the parsers are built, for every command run."""

        def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24) -> None:
            super().__init__(prog, indent_increment, max_help_position, width)

    class _Parser(argparse.ArgumentParser):
        """Reports a bad argument in one line (no usage dump), like every other error."""

        def __init__(self, **options: Any) -> None:
            options.setdefault("formatter_class", _Formatter)
            super().__init__(**options)

        def error(self, message: str) -> NoReturn:
            from .render import safe_name

            self.exit(EXIT_ERROR, f"{self.prog}: error: {safe_name(message)} (see '{self.prog} --help')\n")

    return _Parser


def _add_common(sub: argparse.ArgumentParser) -> None:
    """The options every command takes, right after ``-h`` (added to each parser rather than
    through a parent parser, which would be one more parser to build)."""
    from .api import DEFAULT_SOURCES_HEADING

    sub.add_argument(
        "--state",
        metavar="DIR",
        help="folder for provgraph.lock and the cache, outside the memory folder (default: the lock in ROOT, "
        "the cache in ROOT/.provgraph/)",
    )
    sub.add_argument(
        "--sources-heading",
        nargs="?",
        const=DEFAULT_SOURCES_HEADING,
        metavar="HEADING",
        help=f"the links under this heading declare sources too (alone: '{DEFAULT_SOURCES_HEADING}')",
    )
    sub.add_argument(
        "--no-cache", action="store_true", help="read and hash every file, trusting no recorded size and times"
    )


def _command(commands: _Commands, name: str, run: Callable[[Options], int], help: str) -> _Sub:
    sub = commands.add_parser(name, help=help, description=help)
    _add_common(sub)
    sub.set_defaults(run=run, command=name)
    return sub


def _rooted(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("root", nargs="?", default=".", metavar="ROOT", help="memory folder (default: .)")


def _status_parser(commands: _Commands) -> None:
    status = _command(commands, "status", _status, "scan, update state, report stale files, cycles and problems")
    _rooted(status)
    status.add_argument("--json", action="store_true", help="one JSON object (schema version 2)")


def _check_parser(commands: _Commands) -> None:
    check = _command(
        commands,
        "check",
        _check,
        "exit 1 if a derived file is stale, a cycle exists or a declaration is broken (else quiet)",
    )
    _rooted(check)
    check.add_argument(
        "--allow-broken",
        action="store_true",
        help="do not fail on bad-frontmatter or bad-entry problems (stale files and cycles still fail)",
    )


def _why_parser(commands: _Commands) -> None:
    why = _command(commands, "why", _why, "explain one file: its sources, each cause and its chain")
    why.add_argument("file", metavar="FILE")
    why.add_argument("--root", help="memory root (default: nearest folder above FILE with .provgraph/ or MEMORY.md)")
    why.add_argument("--json", action="store_true", help="one JSON object")


def _lineage_parser(commands: _Commands) -> None:
    lineage = _command(commands, "lineage", _lineage, "one file's status and sources, and every file derived from it")
    lineage.add_argument("file", metavar="FILE")
    lineage.add_argument(
        "--root", help="memory root (default: nearest folder above FILE with .provgraph/ or MEMORY.md)"
    )
    lineage.add_argument("--json", action="store_true", help="one JSON object, every derived file listed")
    lineage.add_argument(
        "--max-lines", type=int, default=20, metavar="N", help="derived files listed at most (default 20)"
    )


def _stamp_parser(commands: _Commands) -> None:
    stamp = _command(commands, "stamp", _stamp, "record that derived files were just re-derived from their sources")
    stamp.add_argument("files", nargs="+", metavar="FILE")
    stamp.add_argument(
        "--root",
        help="memory root, to which FILEs are then relative (default: nearest folder above FILE with .provgraph/ "
        "or MEMORY.md)",
    )


def _graph_parser(commands: _Commands) -> None:
    graph = _command(commands, "graph", _graph, "export the lineage graph with each node's status")
    _rooted(graph)
    graph.add_argument("--format", choices=("json", "dot", "mermaid"), default="json")


def _prompt_parser(commands: _Commands) -> None:
    prompt = _command(
        commands, "prompt", _prompt, "print the block an agent gets in its system prompt (empty when nothing is stale)"
    )
    _rooted(prompt)
    prompt.add_argument(
        "--max-lines", type=int, default=20, metavar="N", help="stale files listed at most (default 20)"
    )


def _hook_parser(commands: _Commands) -> None:
    hook = commands.add_parser("hook", help="print hook output for an agent framework")
    frameworks = hook.add_subparsers(metavar="FRAMEWORK", required=True)
    claude = frameworks.add_parser(
        "claude-code",
        help="Claude Code hook: answers the event on stdin (SessionStart, PostToolUse), or prints nothing",
    )
    _add_common(claude)
    claude.set_defaults(run=_hook)
    _rooted(claude)
    claude.add_argument("--settings", action="store_true", help="print the settings JSON that installs the hooks")
    claude.add_argument(
        "--max-lines", type=int, default=DEFAULT_MAX_LINES, metavar="N", help="stale files listed at most (default 20)"
    )


def _demo_parser(commands: _Commands) -> None:
    _command(commands, "demo", _demo, "show provgraph at work on a small memory folder in a temporary directory")


_COMMAND_PARSERS: dict[str, Callable[[_Commands], None]] = {
    "status": _status_parser,
    "check": _check_parser,
    "why": _why_parser,
    "lineage": _lineage_parser,
    "stamp": _stamp_parser,
    "graph": _graph_parser,
    "prompt": _prompt_parser,
    "hook": _hook_parser,
    "demo": _demo_parser,
}
"""Each command's parser, in the order ``provgraph --help`` lists them."""

"""Many processes and threads refreshing and stamping one root at once: no stamp is ever
lost, and no reader ever sees a partial lock or cache."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from cachefile import document, is_whole

from provgraph import Memory
from provgraph.store.cache import FORMAT
from provgraph.store.lock import decode_lock
from provgraph.store.state import StateStore

from .helpers import NOW, TIMEOUT, assert_clean, derived, environment, provgraph, write

PAIRS = 8
"""Sources ``s{i}.md`` and derived files ``d{i}.md``: the even ones are stamped by
processes, the odd ones by threads."""

ROUNDS = 3

READER = """
import binascii, os, sys
from provgraph.store.lock import decode_lock
path, lock, stop = sys.argv[1], sys.argv[2], sys.argv[3]
reads, stopping = 0, False
while not stopping:
    stopping = os.path.exists(stop)  # one more read after the writers are done
    try:
        data = open(path, "rb").read()
        locked = open(lock, "rb").read()
    except FileNotFoundError:
        continue
    body, _, check = data.rstrip(b"\\n").rpartition(b"\\n")  # a whole file ends with the checksum of the rest
    assert data.endswith(b"\\n") and binascii.crc32(body + b"\\n") == int(check), data[-200:]
    assert data.startswith(b'{"format":"provgraph-cache"'), data[:200]
    read = decode_lock(locked)
    assert read.damaged == read.merged == 0
    reads += 1
print(reads)
"""
"""Reads the cache and the lock over and over until the file ``stop`` exists, that is for
as long as the writers run."""


def _moment(round_: int, index: int) -> datetime:
    """When the stamp of ``d{index}.md`` in ``round_`` happens: unique to that stamp."""
    return NOW + timedelta(days=round_, seconds=index)


def _in_thread(work: Callable[[], None], failures: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            work()
        except BaseException as error:  # reported by the test, not lost in the thread
            failures.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _read_while(state: Path, running: threading.Event, failures: list[BaseException]) -> Callable[[], None]:
    def read() -> None:
        while running.is_set():
            try:
                data = state.read_bytes()
                locked = (state.parent.parent / "provgraph.lock").read_bytes()
            except FileNotFoundError:
                continue
            assert is_whole(data) and document(data)["format"] == FORMAT  # a partial file fails here
            assert decode_lock(locked).damaged == 0

    return read


def test_concurrent_stamps_and_refreshes_lose_nothing_and_readers_see_whole_files(root: Path) -> None:
    write(root, "MEMORY.md", "index\n")
    for index in range(PAIRS):
        write(root, f"s{index}.md", "v0\n")
        write(root, f"d{index}.md", derived(f"s{index}.md"))
    state = root / ".provgraph" / "cache.json"
    assert_clean(provgraph("status", root), 0)

    for round_ in range(1, ROUNDS + 1):
        for index in range(PAIRS):
            write(root, f"s{index}.md", f"v{round_}\n")
        failures: list[BaseException] = []
        running = threading.Event()
        running.set()
        stop = root.parent / f"writers-done-{round_}"
        readers = [
            subprocess.Popen(
                [sys.executable, "-c", READER, os.fspath(state), os.fspath(root / "provgraph.lock"), os.fspath(stop)],
                env=environment(),
                stdout=subprocess.PIPE,
            )
            for _ in range(2)
        ]
        processes = [
            subprocess.Popen(
                [sys.executable, "-m", "provgraph", "stamp", os.fspath(root / f"d{index}.md")],
                env=environment(PROVGRAPH_NOW=_moment(round_, index).isoformat()),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for index in range(0, PAIRS, 2)
        ]
        threads = [_in_thread(_read_while(state, running, failures), failures)]
        for index in range(1, PAIRS, 2):
            moment = _moment(round_, index)
            threads.append(
                _in_thread(
                    lambda index=index, moment=moment: Memory(root).stamp([f"d{index}.md"], now=moment), failures
                )
            )
        for _ in range(3):
            threads.append(_in_thread(lambda: [Memory(root).refresh(now=NOW) for _ in range(3)], failures))

        for process in processes:
            _, stderr = process.communicate(timeout=TIMEOUT)
            assert process.returncode == 0 and b"Traceback" not in stderr, stderr.decode()
        for thread in threads[1:]:
            thread.join(TIMEOUT)
        running.clear()
        threads[0].join(TIMEOUT)
        stop.touch()
        for reader in readers:
            output, _ = reader.communicate(timeout=TIMEOUT)
            assert reader.returncode == 0 and int(output) > 0
        assert failures == []

        warnings: list[str] = []
        store = StateStore(root, warn=warnings.append)
        with store.locked():
            saved = store.stamps()
        assert warnings == []
        for index in range(PAIRS):
            (stamp,) = saved[f"d{index}.md"].stamps.values()
            assert stamp.stamped_at == _moment(round_, index).timestamp(), (round_, index)
            assert stamp.sha256 == hashlib.sha256(f"v{round_}\n".encode()).hexdigest()
        assert Memory(root).refresh(now=NOW + timedelta(days=10)).stale == ()
        kept = sorted(path.name for path in state.parent.iterdir())
        assert kept == ["cache.json", "flock"]

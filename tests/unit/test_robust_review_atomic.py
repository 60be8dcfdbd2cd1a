"""write_atomically between threads of one process (the node agent serves Prologs in
parallel threads that write the same files): each call has its own temporary file, so no
call removes or renames another's."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from slurm_triage.atomic import write_atomically


def test_a_write_that_starts_while_another_is_under_way_spoils_neither(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread's write of the same file begins and ends between this one's creating
    its temporary file and filling it: both succeed, and the file is the later rename's,
    whole."""
    target = tmp_path / "health" / "node1.last.json"
    real_fchmod = os.fchmod
    interleaved: list[bool] = []

    def fchmod_then_another_writer(fd: int, mode: int) -> None:
        real_fchmod(fd, mode)
        if not interleaved:
            interleaved.append(True)
            write_atomically(target, "from the other thread")

    monkeypatch.setattr(os, "fchmod", fchmod_then_another_writer)
    write_atomically(target, "from this thread")
    assert interleaved
    assert target.read_text() == "from this thread"
    assert os.listdir(target.parent) == ["node1.last.json"]


def test_threads_writing_one_file_never_fail_nor_show_half_a_file(tmp_path: Path) -> None:
    """Two writers and a reader of one file: no writer fails, the reader only ever sees a
    whole file, and no temporary file is left."""
    target = tmp_path / "health" / "node1.last.json"
    write_atomically(target, json.dumps({"x": "0" * 200_000}))
    errors: list[str] = []
    torn: list[Any] = []
    done = threading.Event()

    def writer(tag: str) -> None:
        for _ in range(25):
            try:
                write_atomically(target, json.dumps({"x": tag * 200_000}))
            except OSError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    def reader() -> None:
        while not done.is_set():
            try:
                json.loads(target.read_text())
            except (ValueError, FileNotFoundError) as exc:
                torn.append(exc)

    threads = [threading.Thread(target=writer, args=(tag,)) for tag in "ab"]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    watcher.join()
    assert errors == [] and torn == []
    assert os.listdir(target.parent) == ["node1.last.json"]


def test_each_temporary_name_is_new(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No two calls, in one thread or process, open the same temporary name: a name seen
    before would be another call's file."""
    opened: list[str] = []
    real_open = os.open

    def recording_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT:
            opened.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    for _ in range(3):
        write_atomically(tmp_path / "f", "x")
    assert len(opened) == len(set(opened)) == 3

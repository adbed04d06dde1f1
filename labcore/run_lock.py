"""One writer per run folder: a lock the operating system releases when its process ends.

    hold_folder(Path("runs/x"))       # this process writes runs/x; FolderInUse if another one does
    holds(Path("runs/x"))             # True
    release_folder(Path("runs/x"))    # done (a process that ends, however it ends, releases it too)

The lock is ``fcntl.flock`` on ``LOCK_NAME`` in the folder, which names its holder (pid, host,
start) for the refusal a second writer gets. It is never removed: a process waiting on a removed
file's lock would hold a lock nobody else sees. Where the operating system has no flock (Windows)
nothing is locked. ``labcore.runs.RunDir.open`` takes it for the process that writes a folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

LOCK_NAME = ".labcore-writer.lock"  # held (flock) by the process writing the folder; says which one


class FolderInUse(FileExistsError):
    """Another process is writing this run folder."""


_held_locks: dict[Path, Any] = {}  # run folder -> the open lock file this process holds


def hold_folder(run_path: Path) -> None:
    """Take the folder's writer lock for this process, or raise FolderInUse naming its holder. No-op
    where the OS has no flock (Windows): there a second writer is not detected."""
    try:
        import fcntl
    except ImportError:
        return
    run_path = run_path.absolute()
    if run_path in _held_locks:
        return
    run_path.mkdir(parents=True, exist_ok=True)
    lock = open(run_path / LOCK_NAME, "a+")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise FolderInUse(f"run folder {run_path} is being written by {holder}: wait for it to end, stop it, or "
                          "choose another folder (reading it, eval and TensorBoard need no lock)") from None
    import datetime
    import socket

    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()} on host {socket.gethostname()}, started {started}\n")
    lock.flush()
    _held_locks[run_path] = lock


def holds(run_path: Path) -> bool:
    """Whether this process holds the folder's lock."""
    return run_path.absolute() in _held_locks


def release_folder(run_path: Path) -> None:
    """Give up this process's writer lock on the folder (the lock file stays, naming no holder)."""
    lock = _held_locks.pop(run_path.absolute(), None)
    if lock is not None:
        lock.close()  # closing the file releases the flock

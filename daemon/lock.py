"""One daemon per state directory: an exclusive ``fcntl`` lock on a file in it.

Owns the lock file ``daemon.lock`` (it holds the pid of the holder, for the
message a second instance prints). The kernel drops the lock when the holder
dies, even by SIGKILL, so a crashed daemon never blocks its successor.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from slurmpolicy.errors import ConfigError, SlurmPolicyError

LOCK_NAME = "daemon.lock"


class AlreadyRunning(SlurmPolicyError):
    """Another slurmpolicy daemon holds the state directory."""

    exit_code = 6


class StateLock:
    def __init__(self, state_dir: str | Path) -> None:
        self.path = Path(state_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        directory = self.path.parent
        try:
            if not directory.exists():
                # Private whatever the umask: the journal beside it is nobody else's.
                directory.mkdir(mode=0o700, parents=True)
                os.chmod(directory, 0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ConfigError(
                f"{self.path}: cannot create the daemon's lock: {exc.strerror}; the state"
                " directory must be writable by the daemon's user - at `$.daemon.state_dir`"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise AlreadyRunning(
                f"another slurmpolicy daemon (pid {holder}) already runs on state directory "
                f"{self.path.parent}; stop it first, or give this one another "
                "daemon.state_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StateLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

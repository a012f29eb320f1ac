"""The daemon's stop request: safe to raise from a signal handler.

``threading.Event`` is not. ``Event.set()`` takes the Condition's plain
(non-reentrant) lock, and ``Event.wait()`` holds that same lock for a moment
before it blocks. A SIGTERM whose Python handler runs in that moment, in the
main thread that holds the lock, waits on it for good: the daemon hangs and
every later SIGTERM hangs behind it (seen once in CI: the daemon did not end
within 60 s of two SIGTERMs). Here ``set()`` takes no lock at all: it flips a
flag and writes one byte to a pipe, and ``wait()`` sleeps in ``poll()`` on
that pipe, so a request raised at any point, from a handler or another
thread, ends the wait at once. ``poll()``, not ``select()``:
a daemon that opened a thousand descriptors (sockets, the journal, the
notify socket) would get a pipe numbered past ``FD_SETSIZE``, which
``select()`` refuses.
"""

from __future__ import annotations

import contextlib
import os
import select


class StopRequest:
    """A flag that, once set, stays set, and wakes whoever waits on it."""

    def __init__(self) -> None:
        self._set = False
        self._pipe: tuple[int, int] | None = None
        self._poller: select.poll | None = None

    def _fds(self) -> tuple[int, int]:
        # Made on first use, so that a daemon object that never waits (unit
        # tests, ``daemon once``) holds no file descriptors.
        if self._pipe is None:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self._pipe = (r, w)
            self._poller = select.poll()
            self._poller.register(r, select.POLLIN)
        return self._pipe

    def set(self) -> None:
        self._set = True
        if self._pipe is not None:
            # A full pipe already wakes the waiter; a closed one has none.
            with contextlib.suppress(OSError):
                os.write(self._pipe[1], b"\0")

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds or until set; True when set."""
        # The pipe first, the flag second: set() writes the flag first and
        # the pipe second, so one of the two sees the other. A set() after
        # the check below wrote to the pipe already: poll() returns at
        # once. After a signal handler ran, Python retries poll() (PEP 475),
        # and the pipe is readable by then.
        self._fds()
        if self._set:
            return True
        assert self._poller is not None
        self._poller.poll(max(0.0, timeout) * 1000.0)  # milliseconds
        return self._set

    def close(self) -> None:
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None
            self._poller = None

"""systemd's notify protocol, by hand: READY=1, STATUS=..., WATCHDOG=1 and
STOPPING=1 as datagrams to $NOTIFY_SOCKET (no libsystemd needed).

Owns the socket and the watchdog interval ($WATCHDOG_USEC). Outside systemd
($NOTIFY_SOCKET unset) every call is a no-op, so the daemon runs the same in
a terminal, in tests and under ``Type=notify``.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("slurmpolicy.daemon")

#: Seconds one notification may wait for room at the service manager's socket.
SEND_TIMEOUT = 1.0


class Notifier:
    """Sends state lines to the service manager, if there is one."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self.address: str | bytes | None = None
        if address.startswith("@"):
            # An abstract socket: a leading NUL instead of the '@'.
            self.address = b"\0" + address[1:].encode()
        elif address.startswith("/"):
            self.address = address
        self._sock: socket.socket | None = None
        self.watchdog_interval: float | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_interval = int(usec) / 1e6

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> bool:
        """Send ``lines`` as one datagram; False (and a log line) when it fails."""
        if self.address is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                # A datagram to a receiver whose queue is full (10 by default,
                # net.unix.max_dgram_qlen) blocks: bounded, it is a warning.
                self._sock.settimeout(SEND_TIMEOUT)
            self._sock.sendto("\n".join(lines).encode(), self.address)
            return True
        except OSError as exc:
            log.warning("sd_notify to %r failed: %s", self.address, exc)
            return False

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        # STATUS is one line: systemd would cut at the first newline anyway, and
        # systemctl status shows it to a terminal.
        from slurmpolicy.inert import inert

        return self.send("STATUS=" + inert(text))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def reloading(self) -> bool:
        return self.send("RELOADING=1")

    def stopping(self, status: str = "") -> bool:
        return self.send("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

"""The submit doorbell: a file job_submit.lua rewrites when it accepts a job
that may need a preemption to start, so that the daemon runs a cycle now
rather than at its next ``daemon.interval``.

Owns the daemon's side: making the file (and its directory) at start so that
slurmctld's ``SlurmUser`` can write it, and telling whether it was rung since
the last cycle started. The wake itself is the loop's (``Daemon._sleep``):
it looks every ``daemon.preemption_poll`` seconds (one ``stat``), and never
sooner than that after the last cycle started, so that a storm of
submissions is at most one extra cycle per poll period. A doorbell that
cannot be made or read is a warning, never a failure: cycles then come every
``daemon.interval`` as before.
"""

from __future__ import annotations

import logging
import os
import pwd
from pathlib import Path

log = logging.getLogger("slurmpolicy.daemon")


def slurm_user(slurm_conf: Path | None) -> str:
    """``SlurmUser`` of slurm.conf (Slurm's default: root)."""
    if slurm_conf is None:
        return "root"
    try:
        text = slurm_conf.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "root"
    for line in text.splitlines():
        key, sep, value = line.split("#", 1)[0].partition("=")
        if sep and key.strip().lower() == "slurmuser" and value.strip():
            return value.strip().split()[0]
    return "root"


class Doorbell:
    """One doorbell file; ``path`` "" turns it off."""

    def __init__(self, path: str, poll: float) -> None:
        self.path = Path(path) if path else None
        #: Seconds between two looks, and the least time between two cycle starts
        #: that the doorbell causes.
        self.poll = max(1.0, poll)
        #: The file's stamp when the last cycle started (None: missing or unread).
        self.seen: int | None = None
        #: When (monotonic) the last cycle started.
        self.cycle_at = float("-inf")
        self._said = ""

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def stamp(self) -> int | None:
        """The file's mtime in ns; None when it is missing or cannot be read."""
        if self.path is None:
            return None
        try:
            return os.stat(self.path).st_mtime_ns
        except OSError:
            return None

    def cycle_started(self, now: float) -> None:
        """A cycle starts (monotonic ``now``): what it will see is not a ring."""
        self.seen = self.stamp()
        self.cycle_at = now

    def first_look(self, now: float) -> float:
        """When the sleep after a cycle may first look: a poll period after that
        cycle started (at once when the cycle took longer)."""
        return max(now, self.cycle_at + self.poll)

    def rung(self) -> bool:
        """The file changed (or appeared) since the last cycle started."""
        stamp = self.stamp()
        return stamp is not None and stamp != self.seen

    def prepare(self, slurm_conf: Path | None = None) -> bool:
        """Make the file and its directory if missing, writable by slurmctld's
        user. False (and one warning) when that cannot be done; never raises."""
        if self.path is None:
            return False
        try:
            self._prepare(slurm_user(slurm_conf))
        except (OSError, KeyError) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
            self._warn(f"doorbell {self.path} not usable ({why}); production jobs that need"
                       " a preemption wait for the next cycle. Make it writable by"
                       " slurmctld's SlurmUser, or set plugin.doorbell = \"\"")
            return False
        self._said = ""
        return True

    def _prepare(self, user: str) -> None:
        assert self.path is not None
        parent = self.path.parent
        if not parent.is_dir():
            parent.mkdir(mode=0o755, parents=True)
            os.chmod(parent, 0o755)  # mkdir's mode passes through the umask
        if not self.path.exists():
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.close(fd)
        if not self.path.is_file():
            raise OSError(0, "not a regular file")
        owner = pwd.getpwnam(user).pw_uid
        st = os.stat(self.path)
        if st.st_uid == owner:
            return
        if os.geteuid() == 0:
            if owner != 0:
                # slurmctld runs as SlurmUser: the file is its to write.
                os.chown(self.path, owner, -1)
            return
        if owner == 0:
            return  # slurmctld as root writes any file
        # Neither root nor slurmctld's user: let that user write it through the mode.
        if not st.st_mode & 0o002:
            self._warn(f"doorbell {self.path} belongs to uid {st.st_uid}, and slurmctld runs as"
                       f" {user}: it may not be able to ring it (chown it to {user})")

    def _warn(self, text: str) -> None:
        if text != self._said:
            log.warning("%s", text)
            self._said = text

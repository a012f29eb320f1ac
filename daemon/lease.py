"""One active daemon per cluster: a lease held in Slurm itself.

Owns the lease, a reservation named ``<reservations.name_prefix>lease`` that
only one daemon can hold, whatever its host or state directory (the state
directory lock, :mod:`slurmpolicy.daemon.lock`, only guards one directory):

- **Taking it is atomic in slurmctld**: ``scontrol create reservation``
  fails when the name exists, so of two daemons that both find no lease,
  one creates it and the other stands by.
- **What it says**: Slurm 22.05 reservations have no comment field, so the
  lease is written in its times: it *starts* ``OFFSET`` (ten years) after
  the holder last renewed it, and its *duration in minutes* is the holder's
  token (a random number drawn at start-up). Ten years ahead it blocks
  nothing: Slurm plans a job without a time limit one year ahead
  (``YEAR_SECONDS`` in slurmctld's reservation.c), and the planner ignores
  reservations that far away.
- **Renewal**: the holder moves the start forward (``scontrol update``)
  once a third of ``daemon.lease_ttl`` has passed, so a renewal costs one
  Slurm call every few cycles.
- **Takeover**: a standby that sees the lease unrenewed for longer than
  ``daemon.lease_ttl`` writes its own token into it, and acts only from the
  next cycle on, if the lease still carries its token (of two standbys
  racing, the later write wins and the other sees it). A holder that finds
  another token in the lease stops acting at once. Takeover thus comes
  within ``lease_ttl`` plus two cycles of the holder's last renewal.
- **Release**: a daemon that stops cleanly deletes its lease, so the
  standby takes over at its next cycle.

A dry run never takes the lease (it changes nothing in Slurm).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

from slurmpolicy.errors import SlurmError, SlurmUnavailable
from slurmpolicy.model import Reservation, Snapshot
from slurmpolicy.policy.reservations import FAR_AHEAD
from slurmpolicy.slurm.client import ReservationSpec, SlurmClient

log = logging.getLogger("slurmpolicy.daemon")

#: The lease starts this long after its last renewal (ten years).
OFFSET = 10 * 365 * 86400.0
assert OFFSET > FAR_AHEAD
#: Tokens are durations in minutes: up to about two years.
_TOKENS = (1000, 999_999)


def lease_name(prefix: str) -> str:
    return f"{prefix}lease"


@dataclass(frozen=True, slots=True)
class LeaseView:
    """What a lease reservation says."""

    renewed_at: float
    token: int


def read_lease(res: Reservation) -> LeaseView | None:
    """The holder's token and last renewal, or None for a reservation that is no lease."""
    if res.start_time is None or res.end_time is None:
        return None
    minutes = round((res.end_time - res.start_time) / 60.0)
    if not _TOKENS[0] <= minutes <= _TOKENS[1]:
        return None
    return LeaseView(renewed_at=res.start_time - OFFSET, token=minutes)


class Lease:
    """The lease as one daemon sees it; :meth:`check` once per cycle."""

    def __init__(self, client: SlurmClient, prefix: str, ttl: float, *,
                 token: int | None = None, user: str = "root") -> None:
        self.client = client
        self.name = lease_name(prefix)
        self.ttl = ttl
        self.token = token if token is not None else random.randint(*_TOKENS)
        self.user = user
        #: True once a check found the lease ours (confirmed): the daemon may act.
        self.held = False
        #: Our token was written into a stale lease; confirmed at the next check.
        self._claimed = False
        self.status = ""

    def _spec(self, now: float, nodes: tuple[str, ...] = ()) -> ReservationSpec:
        return ReservationSpec(name=self.name, nodes=nodes, start_time=now + OFFSET,
                               duration_minutes=self.token, users=(self.user,),
                               flags=("IGNORE_JOBS",))

    def check(self, snapshot: Snapshot, now: float) -> bool:
        """True when this daemon holds the lease now (and renewed it if due).

        Raises SlurmUnavailable when Slurm does not answer (the cycle backs off).
        """
        res = snapshot.reservation(self.name)
        if res is None:
            return self._create(snapshot, now)
        view = read_lease(res)
        if view is None:
            self.held = False
            self.status = (f"reservation {self.name} is not a slurmpolicy lease; no daemon "
                           "acts until an administrator removes it")
            return False
        age = now - view.renewed_at
        if view.token == self.token:
            if not self.held:
                log.info("lease %s is ours (token %d)%s", self.name, self.token,
                         "; taking over" if self._claimed else "")
            self.held = True
            self._claimed = False
            self.status = f"active: lease {self.name} held (token {self.token})"
            if age >= self.ttl / 3:
                self._renew(now)
            return True
        if self.held:
            log.error("lease %s was taken over by daemon token %d; standing by",
                      self.name, view.token)
        self.held = False
        self._claimed = False
        if age > self.ttl:
            # Stale: its holder stopped renewing. Claim it; act once confirmed.
            self._renew(now)
            self._claimed = True
            self.status = (f"claiming lease {self.name}: daemon token {view.token} has not "
                           f"renewed it for {age:.0f}s (limit {self.ttl:.0f}s)")
            log.warning("%s", self.status)
            return False
        self.status = (f"standing by: lease {self.name} held by daemon token {view.token}, "
                       f"renewed {max(0.0, age):.0f}s ago; takeover after {self.ttl:.0f}s "
                       "without renewal")
        return False

    def _create(self, snapshot: Snapshot, now: float) -> bool:
        nodes = sorted(n.name for n in snapshot.nodes)
        if not nodes:
            self.held = False
            self.status = "no node to hold the lease on; not acting"
            return False
        try:
            self.client.create_reservation(self._spec(now, (nodes[0],)))
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            # Another daemon created it first (or Slurm refused): stand by.
            self.held = False
            self.status = f"lease {self.name} not taken: {exc}"
            log.info("%s", self.status)
            return False
        self.held = True
        self._claimed = False
        self.status = f"active: lease {self.name} taken (token {self.token})"
        log.info("%s", self.status)
        return True

    def _renew(self, now: float) -> None:
        try:
            self.client.update_reservation(self._spec(now))
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            log.warning("lease %s not renewed: %s", self.name, exc)

    def release(self, snapshot: Snapshot | None = None) -> None:
        """Delete the lease if it is ours, so that a standby takes over at once."""
        if not self.held:
            return
        if snapshot is not None:
            res = snapshot.reservation(self.name)
            view = read_lease(res) if res is not None else None
            if view is None or view.token != self.token:
                self.held = False
                return
        try:
            self.client.delete_reservation(self.name)
            log.info("lease %s released", self.name)
        except SlurmError as exc:
            log.warning("lease %s not released (it expires by itself): %s", self.name, exc)
        self.held = False

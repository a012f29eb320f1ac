"""Fair share between accounts: guaranteed GPU shares and decayed usage.

Owns three things:

- the *target share* of each account: the configured fraction
  (``[fairshare.shares]``), with the unassigned rest split equally among the
  accounts that have none;
- *usage*: GPU-seconds decayed exponentially with ``half_life``, carried in
  ``Intents.usage`` from cycle to cycle (:func:`advance_usage` is what the
  daemon and the simulator call to bring it forward);
- the *guarantee*: an account may always hold ``share x cluster GPUs``; what it
  holds above that is *borrowed* idle capacity, the first to be reclaimed by
  preemption, and no preemption may push an account below its guarantee.

The priority term is ``weight x 2^(-usage_fraction / share)``: an account
that used nothing gets ``weight``, one exactly at its share ``weight / 2``,
and it falls towards 0 the further over its share it goes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurmpolicy.model import Job
from slurmpolicy.settings import Settings


def decay(usage: Mapping[str, float], since: float | None, now: float,
          half_life: float) -> dict[str, float]:
    """Usage as of ``now``: each value halved every ``half_life`` seconds."""
    if since is None or now <= since or half_life <= 0 or math.isinf(half_life):
        return dict(usage)
    factor = 0.5 ** ((now - since) / half_life)
    return {account: value * factor for account, value in usage.items()}


def advance_usage(usage: Mapping[str, float], usage_at: float | None, running: Iterable[Job],
                  now: float, half_life: float) -> dict[str, float]:
    """Decay ``usage`` to ``now`` and add the GPU-seconds ``running`` jobs used since.

    A job counts from ``max(usage_at, its start)``; the added part is decayed
    as if used at the midpoint of the interval, which is exact enough for
    intervals much shorter than the half-life.
    """
    result = decay(usage, usage_at, now, half_life)
    # Every job running since ``usage_at`` or before has the same span and so
    # the same weight: worked out once (a power and two max() per running
    # job per cycle were a few percent of a replay), the sums unchanged.
    full_span = max(0.0, now - usage_at) if usage_at is not None else None
    full_weight = (0.5 ** ((full_span / 2) / half_life) if half_life > 0 else 1.0
                   ) if full_span else 0.0
    get = result.get
    for job in running:
        gpus = job.gpus
        if gpus <= 0:
            continue
        start = job.start_time
        if full_span is not None and usage_at is not None and start is not None \
                and start <= usage_at:
            span = full_span
            weight = full_weight
        else:
            begin = start if start is not None else now
            if usage_at is not None:
                begin = max(begin, usage_at)
            span = max(0.0, now - begin)
            weight = 0.5 ** ((span / 2) / half_life) if half_life > 0 else 1.0
        if span <= 0:
            continue
        account = job.account
        result[account] = get(account, 0.0) + gpus * span * weight
    return result


@dataclass(frozen=True, slots=True)
class FairShareState:
    """Shares, usage and allocation of every account, computed once per plan."""

    total_gpus: int
    #: Target fraction of the cluster per account (sums to <= 1).
    shares: Mapping[str, float]
    #: Fraction of the (decayed) usage per account.
    usage_fraction: Mapping[str, float]
    #: GPUs held now by running jobs, per account.
    allocated: Mapping[str, int]
    weight: int
    configured: Mapping[str, float]

    def share(self, account: str) -> float:
        return self.shares.get(account, 0.0)

    def guaranteed_gpus(self, account: str) -> float:
        """GPUs the account may always hold: only configured shares guarantee."""
        return self.configured.get(account, 0.0) * self.total_gpus

    def borrowed_gpus(self, account: str) -> float:
        """GPUs held above the guarantee (borrowed idle capacity)."""
        return max(0.0, self.allocated.get(account, 0) - self.guaranteed_gpus(account))

    def points(self, account: str) -> int:
        share = self.share(account)
        if share <= 0:
            return 0
        return round(self.weight * 2.0 ** (-self.usage_fraction.get(account, 0.0) / share))

    def points_by_account(self) -> dict[str, int]:
        return {account: self.points(account) for account in self.shares}

    def describe(self, account: str) -> str:
        share = self.share(account)
        used = self.usage_fraction.get(account, 0.0)
        state = "under" if used < share else ("over" if used > share else "at")
        # Without slurmdbd, Slurm leaves a job's account empty.
        name = account or "(none)"
        return (f"account {name}: share {share:.0%}, usage {used:.0%} ({state} its share), "
                f"holds {self.allocated.get(account, 0)} GPUs, guaranteed "
                f"{self.guaranteed_gpus(account):.0f}")


def compute(settings: Settings, accounts: Iterable[str], running: Iterable[Job],
            total_gpus: int, usage: Mapping[str, float], usage_at: float | None,
            now: float) -> FairShareState:
    """Everything fair share needs for one plan."""
    configured = dict(settings.fairshare.shares)
    allocated: dict[str, int] = {}
    for job in running:
        if job.gpus > 0:
            allocated[job.account] = allocated.get(job.account, 0) + job.gpus
    seen = set(accounts) | set(allocated) | set(usage)
    unlisted = sorted(a for a in seen if a not in configured)
    rest = max(0.0, 1.0 - sum(configured.values()))
    shares = dict(configured)
    for account in unlisted:
        shares[account] = rest / len(unlisted)
    current = decay(usage, usage_at, now, settings.fairshare.half_life)
    total_usage = sum(current.values())
    if total_usage > 0:
        fraction = {a: v / total_usage for a, v in current.items()}
    else:
        # No history yet (fresh daemon): what accounts hold now is the best measure.
        held = sum(allocated.values())
        fraction = {a: v / held for a, v in allocated.items()} if held else {}
    return FairShareState(total_gpus=total_gpus, shares=shares, usage_fraction=fraction,
                          allocated=allocated, weight=settings.fairshare.weight,
                          configured=configured)

"""The answer to "why is my job waiting?" (and "what is happening to my running
job?"), as plain data. ``policy.explain()`` fills it; the inspector (``why``,
``top``) renders it, and ``--json`` dumps :meth:`Explanation.to_dict`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Alternative:
    """Something the user could change, and the start it would give."""

    change: str
    #: Epoch seconds of the estimated start with that change; None: unknown.
    estimated_start: float | None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Explanation:
    job_id: int
    state: str
    #: One line a person reads first: "Waiting: fragmentation - 32 GPUs free, ...".
    headline: str
    job_class: str = ""
    partition: str = ""
    #: What the job asks for, in words: "2 nodes x 8 GPU (h100), leaf,strict, 4h".
    request: str = ""
    #: 1-based position in its partition by effective priority (pending jobs).
    position: int | None = None
    #: Jobs ahead of it, by class name.
    ahead_by_class: dict[str, int] = field(default_factory=dict)
    effective_priority: int | None = None
    #: Slurm's own reason code, and its translation.
    slurm_reason: str = ""
    slurm_reason_text: str = ""
    #: slurmpolicy's reason code: held, dependency, quota, fragmentation,
    #: topology, reservation, preemption, priority, resources, deferred, none.
    blocking: str = ""
    blocking_text: str = ""
    #: What is free where the job may run: "32 GPUs free on 6 nodes; at most 8 in one leaf".
    free_text: str = ""
    estimated_start: float | None = None
    #: What the estimate rests on: "the end of jobs 12, 14 (time limits)".
    estimate_basis: str = ""
    alternatives: tuple[Alternative, ...] = ()
    # --- running jobs
    placement_text: str = ""
    last_checkpoint: float | None = None
    preemption_candidate: bool | None = None
    preemption_text: str = ""
    #: Free-form notes (daemon decisions, in-flight preemption...).
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

"""Pure decisions: priorities, fair share, reservations, checkpoint-first
preemption, deferral; ``plan()`` and ``explain()``. No I/O lives here."""

from slurmpolicy.policy.explain import explain
from slurmpolicy.policy.plan import apply_to_intents, plan

__all__ = ["apply_to_intents", "explain", "plan"]

"""Pure decisions: priorities, fair share, reservations, checkpoint-first
preemption, deferral; ``plan()`` and ``explain()``. No I/O lives here."""

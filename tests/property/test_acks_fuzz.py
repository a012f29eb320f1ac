"""Checkpoint acknowledgements are checked, and no comment can crash `why` or `top`.

Issue 13, finding 7: an ack stamped in the future was accepted (and counted
as a checkpoint), and ``ckpt:nan`` crashed ``why``. The job's comment is the
job's own text: whatever it holds, the readers and every renderer of a job
(``explain()``, the inspector's running and queue tables, the why panel)
must answer.
"""

from __future__ import annotations

import io
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from slurmpolicy.jobpolicy import ACK_SKEW, last_checkpoint, read_acks
from slurmpolicy.policy import explain
from slurmpolicy.policy.actions import Intents
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.settings import Settings
from slurmpolicy.tui.frame import Frame
from slurmpolicy.tui.views import queue_view, running_view, why_view

NOW = 1_800_000_000.0


@pytest.mark.parametrize(("comment", "refused"), [
    ("ckpt:nan", "not a finite number"),
    ("ckpt:inf", "not a finite number"),
    ("ckpt:-inf:3", "not a finite number"),
    ("ckpt:1e400", "not a finite number"),
    ("ckpt:-6.7e16", "stamped before 1970"),
    ("ckpt:soon", "malformed (not a number of epoch seconds)"),
    ("ckpt:", "malformed (not a number of epoch seconds)"),
    (f"ckpt:{NOW + 3600:.0f}", "stamped 3600s in the future (more than the allowed clock "
                               f"skew of {ACK_SKEW:.0f}s)"),
])
def test_bad_acks_are_refused_with_a_reason(comment: str, refused: str) -> None:
    assert read_acks(comment, NOW) == (None, (refused,))
    assert last_checkpoint(comment, NOW) is None


def test_a_valid_ack_counts_next_to_refused_ones() -> None:
    comment = f"note ckpt:nan ckpt:{NOW - 30:.0f}:1 ckpt:{NOW + 10_000:.0f}"
    stamp, refused = read_acks(comment, NOW)
    assert stamp == NOW - 30
    assert len(refused) == 2
    # Within the skew, a stamp a little ahead of our clock still counts.
    assert last_checkpoint(f"ckpt:{NOW + ACK_SKEW - 1:.0f}", NOW) == NOW + ACK_SKEW - 1


def _cluster(comment: str) -> ClusterBuilder:
    b = ClusterBuilder(hosts=2)
    b.now = NOW
    b.run(101, "r", hosts=[1], admin_comment=d("research", "USR1"), comment=comment)
    b.pend(1, "p", nodes=2, admin_comment=d("production", "USR1"))
    return b


def _render(renderable: object) -> str:
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(renderable)
    return out.getvalue()


comments = st.one_of(
    st.text(max_size=80),
    st.lists(st.one_of(
        st.just("ckpt:nan"), st.just("ckpt:inf"), st.just("ckpt:-1e999"),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda f: f"ckpt:{f!r}"),
        st.integers(-10**20, 10**20).map(lambda i: f"ckpt:{i}"),
        st.text(max_size=12).map(lambda t: "ckpt:" + t),
    ), max_size=4).map(" ".join),
)


@settings(max_examples=150, deadline=None)
@given(comments)
def test_no_comment_crashes_why_or_top(comment: str) -> None:
    b = _cluster(comment)
    snap = b.snapshot()
    exp = explain(snap, b.fabric(), Settings(), Intents(), b.now, 101)
    stamp = exp.last_checkpoint
    # Only a finite stamp, never one in the future beyond the skew, is shown as a checkpoint.
    assert stamp is None or (math.isfinite(stamp) and stamp <= NOW + ACK_SKEW)
    _render(why_view(exp, b.now))
    pending = explain(snap, b.fabric(), Settings(), Intents(), b.now, 1)
    _render(why_view(pending, b.now))
    frame = Frame(snapshot=snap, now=b.now)
    _render(running_view(frame, frame.running()))
    _render(queue_view(frame, frame.pending()))

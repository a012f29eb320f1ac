"""End to end: ``slurmpolicy top`` in a real terminal (tmux) on a real Slurm.

Fills the dev cluster with a running job, queues a job that must wait for
resources (partition research) and a held one (partition prod), starts
``slurmpolicy top`` inside a tmux pane, and drives it with keys: move,
select (its why), filter by partition, quit. The screen is read back with
``tmux capture-pane -p`` and polled with a timeout; nothing sleeps for a
fixed time. The jobs are ended by releasing them (never scancel).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slurm

TMUX = shutil.which("tmux")


class Pane:
    """One tmux session on a private server socket, running one command."""

    def __init__(self, name: str, command: list[str], env: dict[str, str],
                 width: int = 80, height: int = 24) -> None:
        if TMUX is None:
            raise AssertionError("tmux is not installed; it is needed for this test")
        self.socket = f"spolicy-top-{os.getpid()}-{name}"
        self.name = name
        env_args = [f"{k}={v}" for k, v in env.items()]
        self.tmux("new-session", "-d", "-s", name, "-x", str(width), "-y", str(height),
                  "env", *env_args, *command)
        # Keep the pane after the command exits, so that its last screen can be read.
        self.tmux("set-option", "-t", name, "remain-on-exit", "on")

    def tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TMUX or "tmux", "-L", self.socket, *args], capture_output=True,
                              text=True, check=check, timeout=10)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name).stdout

    def keys(self, *keys: str) -> None:
        for key in keys:
            self.tmux("send-keys", "-t", self.name, key)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.name, "-l", text)

    def dead(self) -> bool:
        out = self.tmux("list-panes", "-t", self.name, "-F", "#{pane_dead}", check=False)
        return out.returncode != 0 or out.stdout.strip() == "1"

    def wait(self, cond: Callable[[str], Any], what: str, timeout: float = 60) -> str:
        """Poll the screen until ``cond(screen)`` holds; return that screen."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if cond(screen):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; screen:\n{screen}")

    def close(self) -> None:
        self.tmux("kill-server", check=False)


def row_of(screen: str, job_id: int) -> str | None:
    """The queue row of ``job_id`` (with or without the cursor mark)."""
    for line in screen.splitlines():
        if re.match(rf"^[> ] {job_id}\s", line):
            return line
    return None


def job_rows(screen: str) -> list[str]:
    """The rows under the queue's column header, in screen order."""
    lines = screen.splitlines()
    for i, line in enumerate(lines):
        if "JOBID" in line:
            return [ln for ln in lines[i + 1:] if re.match(r"^[> ] \d", ln)]
    return []


@pytest.fixture
def busy_cluster(devcluster: Any) -> Iterator[dict[str, int]]:
    """A full cluster: one running job on every GPU, one job waiting for resources
    (research), one held job (prod)."""
    wd = devcluster.workdir()
    nodes = len(devcluster.node_names)
    big = devcluster.submit(devcluster.hold_script(), workdir=wd, extra_args=[
        "--partition=research", f"--nodes={nodes}", "--gres=gpu:8", "--job-name=filler"])
    devcluster.wait_state(big, "RUNNING")
    waiting = devcluster.submit(devcluster.hold_script(), workdir=wd, extra_args=[
        "--partition=research", "--nodes=2", "--gres=gpu:8", "--job-name=waiter"])
    held = devcluster.submit("#!/bin/bash\ntrue\n", workdir=wd, extra_args=[
        "--partition=prod", "--gres=gpu:1", "--hold", "--job-name=held"])
    # The scheduler gives the waiting job its reason on its next pass.
    deadline = time.monotonic() + 60
    while devcluster.scontrol_show_job(waiting).get("Reason") in (None, "", "None"):
        if time.monotonic() > deadline:
            raise AssertionError(f"job {waiting} got no pending reason")
        time.sleep(0.2)
    try:
        yield {"running": big, "waiting": waiting, "held": held}
    finally:
        # End everything without scancel: release the filler, let the waiter run and
        # release it, let the held job run (it exits at once).
        devcluster.release(big, wd)
        # Release the prod job only once the filler is gone: a prod job would
        # otherwise make Slurm's partition_prio preemption requeue the research
        # filler, which then waits out Slurm's requeue delay.
        devcluster.wait_state(big, "COMPLETED", timeout=90)
        devcluster.slurm_cmd("scontrol", "release", str(held), check=False)
        devcluster.wait_state(waiting, ("RUNNING", "COMPLETED"), timeout=90)
        devcluster.release(waiting, wd)
        for job in (big, waiting, held):
            devcluster.wait_state(job, "COMPLETED", timeout=90)


def test_top_in_tmux_shows_the_waiting_job_and_its_reason(
        devcluster: Any, busy_cluster: dict[str, int], tmp_path: Path) -> None:
    waiting, held, running = busy_cluster["waiting"], busy_cluster["held"], busy_cluster["running"]
    reason = devcluster.scontrol_show_job(waiting)["Reason"]
    env = {**devcluster.env(), "TERM": "xterm-256color", "HOME": str(tmp_path),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # No journal there: top must still work and say policy details are unavailable.
    command = [sys.executable, "-m", "slurmpolicy.cli", "top", "--interval", "1",
               "--journal", str(tmp_path / "no-daemon")]
    pane = Pane("top", command, env)
    try:
        screen = pane.wait(lambda s: row_of(s, waiting) and row_of(s, held),
                           "the waiting and the held job in the queue")
        line = row_of(screen, waiting)
        assert line is not None and reason in line, line
        assert "JobHeldUser" in (row_of(screen, held) or "")
        assert "2 pending" in screen and "1 running" in screen

        # Move: the cursor starts on the first row; j moves it one down.
        first = [ln for ln in screen.splitlines() if ln.startswith("> ")]
        assert len(first) == 1
        pane.keys("j")
        pane.wait(lambda s: sum(ln.startswith("> ") for ln in s.splitlines()) == 1
                  and not any(ln == first[0] for ln in s.splitlines()), "the cursor to move")

        # Select the waiting job: its why replaces the list on this small screen.
        pane.keys("g")
        screen = pane.wait(lambda s: (job_rows(s) or [""])[0].startswith("> "),
                           "the cursor on the first job")
        if not job_rows(screen)[0].startswith(f"> {waiting} "):
            pane.keys("j")
            pane.wait(lambda s: (row_of(s, waiting) or "").startswith("> "),
                      "the cursor on the waiting job")
        pane.keys("Enter")
        why = pane.wait(lambda s: f"Job {waiting} (PENDING)" in s, "the why of the waiting job")
        assert reason in why
        # slurmpolicy's own reading (policy.explain on the real fabric), not only Slurm's.
        assert "blocked by" in why and "asks for   2 nodes x 8 GPU" in why
        # At 80x24 the end of the explanation is below the fold: G scrolls to it.
        pane.keys("G")
        pane.wait(lambda s: "policy details unavailable" in s, "the end of the why pane")
        pane.keys("Escape")
        pane.wait(lambda s: row_of(s, waiting) is not None, "the queue again")

        # Filter by partition prod: only the held job stays.
        pane.keys("p")
        pane.wait(lambda s: "filter by partition" in s, "the filter prompt")
        pane.type("prod")
        pane.keys("Enter")
        screen = pane.wait(lambda s: row_of(s, held) and row_of(s, waiting) is None
                           and "partition=prod" in s, "the queue filtered to prod")
        assert "1 pending" in screen

        # The running view shows the filler job on its nodes.
        pane.keys("c", "2")
        screen = pane.wait(lambda s: re.search(rf"^[> ] {running}\s", s, re.M),
                           "the running job")

        pane.keys("q")
        pane.wait(lambda s: pane.dead(), "top to quit", timeout=20)
    finally:
        pane.close()

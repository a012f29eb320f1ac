"""Helpers for integration tests on a real dev cluster: submit batch jobs as the
ordinary test user, wait for job states by polling, read ``scontrol show job``
and the files jobs write.

``LiveCluster`` is a ``DevCluster`` with these helpers; the ``devcluster``
fixture (conftest.py) yields one. Everything runs Slurm's commands as argument
lists with ``SLURM_CONF`` set, never through a shell.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TypeVar

from slurmpolicy.devcluster import ClusterStatus, DevCluster
from slurmpolicy.errors import DevClusterError
from slurmpolicy.slurm.client import SlurmClient

#: The ordinary (non-root) user test jobs run as; scripts/setup and .ci/run create it.
TEST_USER = os.environ.get("SLURMPOLICY_TEST_USER", "spuser")
#: The adapter integration tests read and steer Slurm with (and the test
#: daemons are configured with): CI runs the suite once per adapter.
TEST_ADAPTER = os.environ.get("SLURMPOLICY_TEST_ADAPTER", "jsoncli")

TERMINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
    "BOOT_FAIL", "DEADLINE",
})

#: `scontrol show job -o` prints Key=Value pairs separated by spaces; values may
#: hold spaces (Command, WorkDir, Comment), so split only before the next `Key=`.
_PAIR = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


T = TypeVar("T")


def wait_until(probe: Callable[[], T | None], timeout: float = 60, what: str = "condition",
               interval: float = 0.2) -> T:
    """Poll ``probe`` until it returns something other than None/False; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def parse_scontrol_line(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value two`` -> dict (later duplicates win)."""
    matches = list(_PAIR.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def job_user() -> str | None:
    """The user to submit as: TEST_USER when we are root, else None (ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError as exc:
        raise DevClusterError(
            f"test user {TEST_USER!r} does not exist: run scripts/setup "
            f"(or `useradd -m {TEST_USER}`)"
        ) from exc
    return TEST_USER


class LiveCluster(DevCluster):
    """A DevCluster plus what tests need to drive it as an ordinary user.

    Runs the Slurm under test: ``SLURMPOLICY_TEST_SLURM_PREFIX`` (CI runs the
    suite on 22.05 and on 25.11 built at a prefix) unless told otherwise.
    """

    def __init__(self, state_dir: Path | str, **options: object) -> None:
        prefix = os.environ.get("SLURMPOLICY_TEST_SLURM_PREFIX")
        if prefix and options.get("slurm_prefix") is None:
            options["slurm_prefix"] = Path(prefix)
        super().__init__(state_dir, **options)  # type: ignore[arg-type]

    def up(self, timeout: float = 90) -> ClusterStatus:
        """Start the cluster; with ``SLURMPOLICY_TEST_EPILOG=SECONDS``, behind an
        epilog that long (:meth:`set_epilog`), as most sites run one: jobs then
        stay COMPLETING after they end, which the suite can be run against."""
        started = super().up(timeout)
        epilog = os.environ.get("SLURMPOLICY_TEST_EPILOG")
        if epilog:
            self.set_epilog(float(epilog))
        return started

    # ------------------------------------------------------------ commands
    def as_user(self, argv: Sequence[str], user: str | None = None) -> list[str]:
        """``argv`` run as ``user`` (default: the test user when we are root)."""
        who = user if user is not None else job_user()
        env_args = [f"{k}={v}" for k, v in self.env().items()]
        if who is None or (os.geteuid() != 0):
            return ["env", *env_args, *argv]
        runuser = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin") or "runuser"
        return [runuser, "-u", who, "--", "env", *env_args, *argv]

    def slurm_cmd(self, tool: str, *args: str, user: str | None = None,
                  input: str | bytes | None = None, check: bool = True,
                  timeout: float = 30, cwd: Path | None = None,
                  ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command; as ``user`` when given (root otherwise)."""
        argv = [str(self.slurm.tool(tool)), *args]
        if user is not None:
            argv = self.as_user(argv, user)
        env = {**os.environ, **self.env()}
        data = input.decode("utf-8", "surrogateescape") if isinstance(input, bytes) else input
        proc = subprocess.run(argv, capture_output=True, text=True, input=data, env=env,
                              timeout=timeout, cwd=cwd or self.shared_dir,
                              errors="surrogateescape")
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} failed (exit {proc.returncode}):\n{proc.stderr}{proc.stdout}"
            )
        return proc

    # ------------------------------------------------------------ files
    def workdir(self, name: str | None = None) -> Path:
        """A fresh directory under the shared dir that the job user can write."""
        d = self.shared_dir / (name or f"w-{uuid.uuid4().hex[:10]}")
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o1777)
        return d

    def read_file(self, path: Path | str, contains: str | None = None,
                  timeout: float = 30) -> str:
        """Wait until ``path`` exists (and holds ``contains``), then return its text."""
        p = Path(path)
        deadline = time.monotonic() + timeout
        while True:
            if p.exists():
                text = p.read_text(errors="replace")
                if contains is None or contains in text:
                    return text
            if time.monotonic() > deadline:
                have = p.read_text(errors="replace") if p.exists() else "(missing)"
                raise AssertionError(
                    f"{p} did not {'appear' if contains is None else f'contain {contains!r}'} "
                    f"within {timeout}s; it holds: {have!r}"
                )
            time.sleep(0.1)

    # ------------------------------------------------------------ jobs
    def submit(self, script_text: str, user: str | None = None,
               extra_args: Sequence[str] = (), workdir: Path | None = None) -> int:
        """sbatch ``script_text`` (from stdin) as ``user`` (default the test user);
        returns the job id. Output goes to ``<workdir>/slurm-<id>.out`` by default."""
        wd = workdir or self.workdir("jobs")
        args = ["--parsable", f"--chdir={wd}"]
        if not any(a.startswith(("-o", "--output")) for a in extra_args):
            args.append(f"--output={wd}/slurm-%j.out")
        who = user if user is not None else job_user()
        proc = self.slurm_cmd("sbatch", *args, *extra_args, user=who, input=script_text,
                              cwd=wd, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"sbatch failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return int(proc.stdout.strip().split(";")[0])

    def scontrol_show_job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job -o ID`` as a dict (empty when Slurm forgot the job)."""
        proc = self.slurm_cmd("scontrol", "show", "job", "-o", str(job_id), check=False)
        if proc.returncode != 0:
            return {}
        return parse_scontrol_line(proc.stdout.strip())

    def job_state(self, job_id: int) -> str:
        return self.scontrol_show_job(job_id).get("JobState", "")

    def wait_state(self, job_id: int, states: str | Collection[str],
                   timeout: float = 60) -> dict[str, str]:
        """Poll until the job is in one of ``states``; return its ``scontrol`` record.

        Fails early when the job reaches a terminal state that was not asked for.
        """
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        info: dict[str, str] = {}
        while time.monotonic() < deadline:
            info = self.scontrol_show_job(job_id)
            state = info.get("JobState", "")
            if state in wanted:
                return info
            if state in TERMINAL_STATES and not (wanted & TERMINAL_STATES):
                raise AssertionError(f"job {job_id} ended {state}, expected {sorted(wanted)}: "
                                     f"{info}")
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} not in {sorted(wanted)} after {timeout}s: {info}")

    def hold_script(self, body: str = "", trap: str | None = None) -> str:
        """A batch script that runs ``body`` then waits until ``release(job_id)``.

        ``trap``: a signal name (``USR1``) whose arrival the job appends to
        ``<workdir>/trap.<jobid>``. Lets tests keep jobs running without
        sleeping for fixed times and end them without scancel.
        """
        lines = ["#!/bin/bash"]
        if trap:
            lines.append(f"trap 'echo {trap} $(date +%s.%N) >> \"$PWD/trap.$SLURM_JOB_ID\"' {trap}")
        lines += [
            body,
            'echo "started $SLURM_JOB_ID on $SLURM_JOB_NODELIST" > "$PWD/started.$SLURM_JOB_ID"',
            # Waits in short sleeps so that a trapped signal is handled promptly.
            'while [ ! -e "$PWD/release.$SLURM_JOB_ID" ]; do sleep 0.2; done',
            'echo "released $SLURM_JOB_ID"',
        ]
        return "\n".join(lines) + "\n"

    def release(self, job_id: int, workdir: Path | None = None) -> None:
        """Let a ``hold_script`` job finish."""
        wd = workdir or self.workdir("jobs")
        (wd / f"release.{job_id}").touch()
        os.chmod(wd / f"release.{job_id}", 0o666)

    def set_epilog(self, seconds: float) -> None:
        """Give every node an Epilog that takes ``seconds`` (``scontrol
        reconfigure``): a job then stays COMPLETING that long after it ended,
        as behind a site's real epilog (GPU health checks, cleanup)."""
        script = self.conf_dir / "epilog.sh"
        script.write_text(f"#!/bin/sh\nsleep {seconds:g}\nexit 0\n")
        os.chmod(script, 0o755)
        line = f"Epilog={script}\n"
        if line not in self.slurm_conf.read_text():
            with open(self.slurm_conf, "a") as conf:
                conf.write(line)
        self.slurm_cmd("scontrol", "reconfigure")

    def node_table(self) -> dict[str, dict[str, str]]:
        """``scontrol show nodes -o``: node name -> fields."""
        proc = self.slurm_cmd("scontrol", "show", "nodes", "-o")
        out: dict[str, dict[str, str]] = {}
        for line in proc.stdout.splitlines():
            rec = parse_scontrol_line(line)
            if "NodeName" in rec:
                out[rec["NodeName"]] = rec
        return out

    def wait_idle(self, timeout: float = 60) -> None:
        """Wait until every node is IDLE (no job left on any)."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = {n: r.get("State", "") for n, r in self.node_table().items()}
            if states and all(s == "IDLE" for s in states.values()):
                return
            time.sleep(0.2)
        raise AssertionError(f"nodes not all idle after {timeout}s: {states}")


def adapter_client(cluster: DevCluster, timeout: float = 30) -> SlurmClient:
    """The SlurmClient of the adapter under test (SLURMPOLICY_TEST_ADAPTER), on ``cluster``.

    Asked for by name, so a pyslurm run that cannot use pyslurm fails with
    the reason instead of quietly reading through the JSON CLI.
    """
    from slurmpolicy.slurm.connect import connect

    return connect(TEST_ADAPTER, env=cluster.env(), timeout=timeout)


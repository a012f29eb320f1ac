"""``slurmpolicy demo``: the whole story on a local cluster, in about two minutes.

Owns the demo: it brings up the dev cluster with the rendered job_submit
plugin and starts the daemon, submits a small mixed workload (research and
experimental jobs filling the GPUs, then a production job and a large
topology-bound job), prints what the daemon does as it happens, and ends by
showing the queue, the audit log and the work lost (none: the victim
checkpointed before it was requeued). ``slurmpolicy demo --down`` stops the
daemon and the cluster and removes the demo's directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from slurmpolicy.errors import DevClusterError

#: One training job: steps of one second, checkpoint on USR1 then acknowledge,
#: resume from the checkpoint after a requeue. The same handshake as
#: contrib/examples/train.sh, kept inline so the demo needs no checkout.
TRAIN = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --nodes={nodes}
#SBATCH --gres=gpu:8
#SBATCH --time={limit}
#SBATCH --requeue
#SBATCH --open-mode=append
#SPOLICY --class={klass}
#SPOLICY --checkpoint=signal:USR1,grace=30s
{extra}
export PATH={path}:$PATH
CKPT="$PWD/ckpt.$SLURM_JOB_ID"
step=0
[ -s "$CKPT" ] && step=$(cat "$CKPT") && echo "resumed at step $step"
trap 'echo $step > "$CKPT"; echo "checkpoint at step $step"; slurmpolicy ckpt ack' USR1
while [ $step -lt {steps} ]; do sleep 1 & wait $!; step=$((step + 1)); done
echo "finished at step $step"
"""

DEFAULT_DIR = "~/.local/state/slurmpolicy/demo"


def demo_dir() -> Path:
    return Path(os.environ.get("SLURMPOLICY_DEMO_DIR", DEFAULT_DIR)).expanduser().absolute()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _settings_text(state: Path, port: int) -> str:
    return f"""# Written by `slurmpolicy demo`: short times so that the story fits in minutes.
[daemon]
state_dir = "{state}"
interval = 2
max_snapshot_age = 30
max_backoff = 10

[metrics]
bind = "127.0.0.1"
port = {port}

[preemption]
min_runtime = 0
default_grace = 30

[reservations]
large_job_gpus = 16
# On for the demo (off by default: Slurm's backfill plans a start for the jobs
# it tests; docs/policy.md): the large job heads a full cluster's queue.
reserve_after_wait = true
starvation_wait = 15

[plugin]
doorbell = "{state.parent / 'doorbell'}"  # rung by the cluster's job_submit.lua
"""


class _AuditPrinter:
    """Prints the audit records that appeared since the last call."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.seen = 0

    def flush(self) -> None:
        from slurmpolicy.store import Journal

        try:
            records = Journal(self.state, read_only=True).read_audit()
        except Exception:
            return  # the daemon has not written its journal yet
        for r in records[self.seen:]:
            if r.kind in ("SetSiteFactor", "Annotate"):
                continue
            click.echo(f"  {time.strftime('%H:%M:%S', time.localtime(r.at))} "
                       f"{r.kind:<18} {r.outcome:<10} {r.reason}")
        self.seen = len(records)


class Demo:
    def __init__(self, root: Path) -> None:
        from slurmpolicy.devcluster import DevCluster

        self.root = root
        self.settings = root / "slurmpolicy.toml"
        self.state = root / "state"
        self.jobs = root / "jobs"
        self.pid_file = root / "daemon.pid"
        self.log_file = root / "daemon.log"
        self.lua = root / "job_submit.lua"
        self.cluster = DevCluster(root / "cluster", job_submit_lua=self.lua)

    # ------------------------------------------------------------- plumbing
    def env(self) -> dict[str, str]:
        return {**os.environ, **self.cluster.env()}

    def slurm(self, *argv: str, check: bool = True) -> str:
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=self.env(),
                              timeout=60, cwd=self.jobs, check=False)
        if check and proc.returncode != 0:
            raise DevClusterError(f"`{' '.join(argv)}` failed: {proc.stderr.strip()}")
        return proc.stdout

    def daemon_pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    # ---------------------------------------------------------------- up
    def up(self) -> None:
        from slurmpolicy import plugin
        from slurmpolicy import settings as settings_mod

        self.root.mkdir(parents=True, exist_ok=True)
        self.jobs.mkdir(exist_ok=True)
        os.chmod(self.jobs, 0o1777)
        if not self.settings.exists():
            self.settings.write_text(_settings_text(self.state, _free_port()))
        loaded = settings_mod.load(self.settings)
        self.lua.write_text(plugin.render(loaded))
        click.echo(f"cluster  {self.cluster.nodes} nodes x {self.cluster.gpus_per_node} GPUs, "
                   f"job_submit.lua rendered from the settings ({self.root})")
        self.cluster.up()
        if self.daemon_pid() is None:
            with open(self.log_file, "ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "slurmpolicy.cli", "--config", str(self.settings),
                     "daemon", "run", "-v"],
                    stdout=out, stderr=out, env=self.env(), start_new_session=True,
                    stdin=subprocess.DEVNULL)
            self.pid_file.write_text(f"{proc.pid}\n")
            time.sleep(1)
            if proc.poll() is not None:
                raise DevClusterError(f"the daemon exited at once; see {self.log_file}:\n"
                                      + self.log_file.read_text()[-2000:])
        click.echo(f"daemon   pid {self.daemon_pid()}, metrics on "
                   f"http://127.0.0.1:{loaded.metrics.port}/metrics, log {self.log_file}")

    def submit(self, name: str, klass: str, steps: int, limit: str, nodes: int = 1,
               extra: str = "") -> int:
        script = TRAIN.format(name=name, klass=klass, steps=steps, limit=limit, nodes=nodes,
                              extra=extra, path=self.bindir())
        proc = subprocess.run(
            ["sbatch", "--parsable", f"--chdir={self.jobs}", f"--output={self.jobs}/%x-%j.out"],
            input=script, capture_output=True, text=True, env=self.env(), timeout=60,
            check=False)
        if proc.returncode != 0:
            raise DevClusterError(f"sbatch {name} failed: {proc.stderr.strip()}")
        return int(proc.stdout.strip().split(";")[0])

    def bindir(self) -> Path:
        """A ``slurmpolicy`` for the jobs: this very interpreter and package."""
        bindir = self.root / "bin"
        wrapper = bindir / "slurmpolicy"
        if not wrapper.exists():
            bindir.mkdir(exist_ok=True)
            wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m slurmpolicy.cli "$@"\n')
            wrapper.chmod(0o755)
        return bindir

    def states(self, ids: list[int]) -> dict[int, str]:
        out = self.slurm("squeue", "--noheader", "--states=all", "--format=%i %T",
                         "--jobs", ",".join(map(str, ids)), check=False)
        found = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                found[int(parts[0])] = parts[1]
        return found

    # --------------------------------------------------------------- story
    def run(self, timeout: float) -> int:
        from slurmpolicy.store import Journal

        n = self.cluster.nodes
        click.echo("\nworkload")
        fillers = []
        for i in range(n - 2):
            # Research jobs are protected for their first hour: the production job
            # has to take an experimental one.
            fillers.append(self.submit(f"research-{i + 1}", "research", steps=120 + 20 * i,
                                       limit=f"{4 + i}:00",
                                       extra="#SPOLICY --preemptible=after=1h"))
        for i in range(2):
            fillers.append(self.submit(f"experimental-{i + 1}", "experimental", steps=150,
                                       limit="10:00"))
        click.echo(f"  {n - 2} research + 2 experimental jobs, 8 GPUs each: every GPU busy")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if list(self.states(fillers).values()).count("RUNNING") == len(fillers):
                break
            time.sleep(1)
        half = max(2, n // 2)
        large = self.submit("large-leaf", "research", steps=40, limit="5:00", nodes=half,
                            extra="#SPOLICY --topology=leaf,strict")
        production = self.submit("production", "production", steps=40, limit="5:00")
        click.echo(f"  large-leaf ({large}): {half} nodes x 8 GPUs inside one leaf switch")
        click.echo(f"  production ({production}): 8 GPUs, must not wait for the research jobs")
        every = [*fillers, large, production]
        click.echo("\nwhat the daemon does")
        shown_reservation = False
        deadline = time.monotonic() + timeout
        preempted = reserved = False
        printer = _AuditPrinter(self.state)
        while time.monotonic() < deadline:
            printer.flush()
            states = self.states(every)
            try:
                journal = Journal(self.state, read_only=True)
            except Exception:
                time.sleep(2)
                continue
            victims = [v for p in journal.preemptions() for v in
                       journal.victims_of(p["preemption_id"])]
            preempted = any(v["state"] == "requeued" for v in victims) and \
                states.get(production) in ("RUNNING", "COMPLETED")
            reserved = any(r["job_id"] == large for r in journal.reservations(None))
            if reserved and not shown_reservation:
                printer.flush()
                shown_reservation = True
                self.show_reservations()
            if preempted and reserved:
                break
            time.sleep(2)
        printer.flush()
        return self.show(every, production, large, preempted, reserved)

    def top(self) -> None:
        """End in the live inspector on the demo's cluster and journal (q quits)."""
        from slurmpolicy import settings as settings_mod
        from slurmpolicy.slurm.jsoncli import JsonCliClient
        from slurmpolicy.tui import run_top

        click.echo("\nopening `slurmpolicy top` (q quits; `slurmpolicy demo --down` cleans up)")
        time.sleep(1)
        run_top(settings=settings_mod.load(self.settings),
                client=JsonCliClient(env=self.cluster.env()), journal=self.state)

    def show_reservations(self) -> None:
        out = self.slurm("scontrol", "show", "reservation", "-o", check=False)
        for line in out.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            name = fields.get("ReservationName", "")
            if name.startswith("spolicy_"):
                click.echo(f"  {'':8} reservation {name}: nodes {fields.get('Nodes')} from "
                           f"{fields.get('StartTime', '?').replace('T', ' ')} for "
                           f"{fields.get('Users')}")

    def show(self, every: list[int], production: int, large: int, preempted: bool,
             reserved: bool) -> int:
        from slurmpolicy.store import Journal

        click.echo("\nqueue")
        click.echo(self.slurm("squeue", "--format=%.6i %.16j %.9T %.3D %.14R %.8r",
                              check=False).rstrip())
        journal = Journal(self.state, read_only=True)
        def total(name: str) -> float:
            return sum(v for _, _, v in journal.metric_history(name))

        lost = total("slurmpolicy_preemption_lost_gpu_hours")
        acks = total("slurmpolicy_checkpoint_acks")
        misses = total("slurmpolicy_checkpoint_deadline_misses")
        states = self.states(every)
        missing = [j for j in every if states.get(j) not in
                   ("PENDING", "RUNNING", "COMPLETED", "COMPLETING", "CONFIGURING")]
        click.echo("\noutcome")
        click.echo(f"  checkpoint-first preemption for production job {production}: "
                   + ("done" if preempted else "not finished in time"))
        click.echo(f"  compact reservation for large job {large}: "
                   + ("in place" if reserved else "not made in time"))
        why = ("they checkpointed before being requeued" if acks and not misses else
               f"{misses:.0f} victim(s) missed the checkpoint deadline")
        click.echo(f"  work lost by preempted jobs: {lost:.2f} GPU-hours ({why})")
        click.echo("  jobs lost: " + ("none" if not missing else
                                      ", ".join(f"{j} ({states.get(j, 'gone')})"
                                                for j in missing)))
        click.echo(f"\nmore: SLURM_CONF={self.cluster.slurm_conf} squeue | "
                   f"slurmpolicy -c {self.settings} log | "
                   f"slurmpolicy -c {self.settings} report | slurmpolicy demo --down")
        return 0 if preempted and reserved and not missing else 1

    # --------------------------------------------------------------- down
    def down(self) -> None:
        pid = self.daemon_pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            for _ in range(150):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.2)
            else:
                os.kill(pid, signal.SIGKILL)
            click.echo(f"daemon {pid} stopped")
        if (self.root / "cluster").exists():
            self.cluster.down()
            click.echo("cluster stopped")
        shutil.rmtree(self.root, ignore_errors=True)
        click.echo(f"removed {self.root}")


@click.command()
@click.option("--down", is_flag=True, help="Stop the demo's daemon and cluster; remove its files.")
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="Give up waiting for the story after this many seconds.")
@click.option("--dir", "root", type=click.Path(file_okay=False), default=None,
              help=f"Demo directory (default $SLURMPOLICY_DEMO_DIR or {DEFAULT_DIR}).")
@click.option("--json", "as_json", is_flag=True, help="With --down: print what was removed.")
@click.option("--top/--no-top", "top", default=None,
              help="End in the live `slurmpolicy top` view (default: when run in a terminal).")
def demo(down: bool, timeout: float, root: str | None, as_json: bool, top: bool | None) -> int:
    """A local GPU cluster, the plugin and the daemon, and a workload that shows
    a checkpoint-first preemption and a compact reservation."""
    the = Demo(Path(root).absolute() if root else demo_dir())
    if down:
        the.down()
        if as_json:
            click.echo(json.dumps({"removed": str(the.root)}))
        return 0
    the.up()
    rc = the.run(timeout)
    if top is None:
        top = sys.stdin.isatty() and sys.stdout.isatty()
    if top:
        the.top()
    return rc


__all__: list[Any] = ["demo"]

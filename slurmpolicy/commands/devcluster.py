"""``slurmpolicy devcluster``: bring a real local Slurm up and down, show its
state and print the environment a shell needs to use it. Thin calls into
``slurmpolicy.devcluster``."""

from __future__ import annotations

import json
import shlex
import stat
from pathlib import Path
from typing import Any

import click

from slurmpolicy.devcluster import DevCluster, default_state_dir, parse_node_group
from slurmpolicy.errors import DevClusterError

_STATE_DIR_HELP = (
    "State directory (config, logs, spool, pids, fake devices). "
    "Default: $SLURMPOLICY_DEVCLUSTER_DIR or ~/.local/state/slurmpolicy/devcluster."
)


def _state_dir_option(f: Any) -> Any:
    return click.option(
        "--state-dir", type=click.Path(file_okay=False, path_type=Path),
        default=None, help=_STATE_DIR_HELP,
    )(f)


def _prefix_option(f: Any) -> Any:
    return click.option(
        "--slurm-prefix", type=click.Path(file_okay=False, path_type=Path), default=None,
        envvar="SLURMPOLICY_SLURM_PREFIX",
        help="Slurm installed at PREFIX (PREFIX/sbin, PREFIX/bin, PREFIX/lib/slurm) "
             "instead of the system's (env SLURMPOLICY_SLURM_PREFIX).",
    )(f)


def _existing(state_dir: Path | None, slurm_prefix: Path | None) -> DevCluster:
    cluster = DevCluster(state_dir or default_state_dir(), nodes=1, racks=1,
                         slurm_prefix=slurm_prefix)
    return cluster.load()


@click.group()
def devcluster() -> None:
    """A real local Slurm cluster with fake GPU nodes, for trying and testing slurmpolicy.

    \b
      slurmpolicy devcluster up
      eval "$(slurmpolicy devcluster env)"
      sinfo; sbatch --gres=gpu:8 -N2 job.sh
      slurmpolicy devcluster down
    """


@devcluster.command()
@_state_dir_option
@click.option("--nodes", type=click.IntRange(1, 512), default=8, show_default=True,
              help="Number of nodes (named gpu01, gpu02, ...).")
@click.option("--gpus-per-node", type=click.IntRange(1, 64), default=8, show_default=True)
@click.option("--gpu-type", default="h100", show_default=True, help="GRES type of the GPUs.")
@click.option("--racks", type=click.IntRange(1, 512), default=None,
              help="Racks (one NVLink domain and one IB leaf each). Default: 2, or 1 for one node.")
@click.option("--cpus-per-node", type=click.IntRange(1, 1024), default=None,
              help="CPUs per node. Default: max(8, GPUs per node).")
@click.option("--ctld-port", type=click.IntRange(1024, 65535), default=None,
              help="slurmctld's port. Default: a free one.")
@click.option("--first-slurmd-port", type=click.IntRange(1024, 65535), default=None,
              help="Port of the first slurmd; the others follow. Default: free ones.")
@click.option("--cluster-name", default="devcluster", show_default=True)
@click.option("--job-submit-lua", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None, help="job_submit.lua to install. Default: a pass-through one.")
@_prefix_option
@click.option("--timeout", type=float, default=120, show_default=True,
              help="Seconds to wait for every node to be idle.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("--node-group", "node_groups", multiple=True, metavar="SPEC",
              help="More nodes for pools, e.g. prefix=amd,nodes=1,gpus=2,type=mi250,"
                   "partition=amd or prefix=mig,mig=1g.10gb:7,shards=8,partition=mig "
                   "(repeatable; docs/pools.md).")
@click.option("--partition", "extra_partitions", multiple=True, metavar="NAME=HOSTS",
              help="One more partition over the given hosts, e.g. hpc=gpu[01-04] (repeatable).")
def up(state_dir: Path | None, nodes: int, gpus_per_node: int, gpu_type: str,
       racks: int | None, cpus_per_node: int | None, ctld_port: int | None,
       first_slurmd_port: int | None, cluster_name: str, job_submit_lua: Path | None,
       slurm_prefix: Path | None, timeout: float, as_json: bool,
       node_groups: tuple[str, ...] = (), extra_partitions: tuple[str, ...] = ()) -> None:
    """Start munged (unless one runs), slurmctld and one slurmd per node; wait until idle."""
    partitions: dict[str, str] = {}
    for item in extra_partitions:
        name, eq, hosts = item.partition("=")
        if not eq or not name or not hosts:
            raise DevClusterError(f"--partition {item!r}: expected NAME=HOSTS, e.g. "
                                  "hpc=gpu[01-04]")
        partitions[name] = hosts
    cluster = DevCluster(
        state_dir or default_state_dir(), nodes=nodes, gpus_per_node=gpus_per_node,
        gpu_type=gpu_type, racks=racks if racks is not None else min(2, nodes),
        ctld_port=ctld_port, first_slurmd_port=first_slurmd_port, slurm_prefix=slurm_prefix,
        job_submit_lua=job_submit_lua, cluster_name=cluster_name, cpus_per_node=cpus_per_node,
        groups=[parse_node_group(g) for g in node_groups], partitions=partitions,
    )
    status = cluster.up(timeout=timeout)
    if as_json:
        click.echo(json.dumps(status.to_dict(), indent=2))
        return
    click.echo(f"dev cluster {status.cluster_name!r} is up: {len(status.node_states)} nodes "
               f"x {cluster.gpus_per_node} {cluster.gpu_type}, slurmctld port {cluster.ctld_port}")
    click.echo(f"  state dir: {cluster.state_dir}")
    click.echo(f"  munged:    {status.munged}")
    click.echo(f"  use it:    eval \"$(slurmpolicy devcluster env --state-dir "
               f"{shlex.quote(str(cluster.state_dir))})\"")
    closed = _first_closed_parent(cluster.state_dir)
    if closed is not None:
        click.echo(f"  note: {closed} is not searchable by other users, so only you can submit "
                   "jobs here; choose a state dir under /tmp or /var for other users' jobs",
                   err=True)


def _first_closed_parent(path: Path) -> Path | None:
    """The first directory on ``path`` that other users cannot traverse (o+x), if any."""
    for d in [*reversed(path.resolve().parents), path.resolve()]:
        try:
            if not d.stat().st_mode & stat.S_IXOTH:
                return d
        except OSError:
            return d
    return None


@devcluster.command()
@_state_dir_option
@_prefix_option
def down(state_dir: Path | None, slurm_prefix: Path | None) -> None:
    """Stop the daemons `up` started (by their pid files) and their job steps."""
    cluster = _existing(state_dir, slurm_prefix)
    stopped = cluster.down()
    click.echo(f"dev cluster at {cluster.state_dir}: stopped {len(stopped)} processes"
               if stopped else f"dev cluster at {cluster.state_dir}: nothing was running")


@devcluster.command()
@_state_dir_option
@_prefix_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(state_dir: Path | None, slurm_prefix: Path | None, as_json: bool) -> int:
    """Show the daemons, whether slurmctld answers, and node states. Exit 1 when not running."""
    cluster = _existing(state_dir, slurm_prefix)
    st = cluster.status()
    if as_json:
        click.echo(json.dumps(st.to_dict(), indent=2))
        return 0 if st.running else 1
    if not st.configured:
        click.echo(f"no dev cluster at {cluster.state_dir} (run `slurmpolicy devcluster up`)")
        return 1
    state = "running" if st.running else ("stopped" if st.stopped else "partly running")
    click.echo(f"dev cluster {st.cluster_name!r} at {st.state_dir}: {state}")
    click.echo(f"  munged: {st.munged}")
    daemons = [st.slurmctld, *st.slurmds] if st.slurmctld else list(st.slurmds)
    for d in daemons:
        click.echo(f"  {d.name:<16} pid {d.pid if d.pid else '-':<8} "
                   f"{'alive' if d.alive else 'not running'}")
    if st.other_processes:
        click.echo(f"  other processes: {st.other_processes} (job step daemons, job "
                   "processes; `down` ends them)")
    if st.controller_responds:
        for node, node_state in st.node_states.items():
            click.echo(f"  node {node:<10} {node_state}")
    elif st.slurmctld and st.slurmctld.alive:
        click.echo("  slurmctld does not answer `scontrol ping`")
    return 0 if st.running else 1


@devcluster.command()
@_state_dir_option
@_prefix_option
def env(state_dir: Path | None, slurm_prefix: Path | None) -> None:
    """Print `export` lines for a shell: eval "$(slurmpolicy devcluster env)"."""
    cluster = _existing(state_dir, slurm_prefix)
    if not cluster.marker.exists():
        raise DevClusterError(f"no dev cluster at {cluster.state_dir}: run "
                              "`slurmpolicy devcluster up` first (or pass --state-dir)")
    for key, value in cluster.env().items():
        click.echo(f"export {key}={shlex.quote(value)}")

"""A real local Slurm for development and tests: munged, one slurmctld and N
slurmd on loopback, fake GPU character devices and a matching gres.conf, a
two-level fabric (NVLink domain and InfiniBand leaf per rack, one spine) as
topology.conf and node features.

This module owns the dev cluster's whole life: it writes the configuration,
starts the daemons, waits until the nodes are idle, reports status, and stops
exactly the processes of its cluster: the daemons by pid file, their job step
daemons and job processes by where they run (never by process name alone).
It refuses a Slurm built without ``--enable-multiple-slurmd`` (several slurmd
on one host need it), and ``up`` on a partly running cluster completes it
without touching its jobs, or refuses.
Everything lives under one state directory::

    STATE/devcluster.json   identity of the cluster (the marker)
    STATE/etc/              slurm.conf, gres.conf, topology.conf, job_submit.lua
    STATE/log/              slurmctld.log, slurmd.<node>.log
    STATE/spool/            slurmctld state, one slurmd spool per node
    STATE/run/              pid files
    STATE/dev/              nvidia0..N-1 (character devices, major 195)
    STATE/shared/           world-writable (sticky) place for job scripts and outputs
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import mmap
import os
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from slurmpolicy.errors import DevClusterError
from slurmpolicy.hostlist import compress

#: What a person should run when Slurm is missing.
INSTALL_HINT = (
    "install it with `apt-get install slurm-wlm slurmctld slurmd slurm-client munge` "
    "(or run scripts/setup), or point --slurm-prefix at a Slurm installation"
)

MARKER = "devcluster.json"
MARKER_KIND = "slurmpolicy-devcluster"
NVIDIA_MAJOR = 195
#: Ports are drawn from below Linux's default ephemeral range (32768-60999), so
#: that outgoing connections do not take them between the check and the bind.
PORT_RANGE = (20000, 32000)
#: One lock for the whole machine: several dev clusters may start at once, and
#: choosing free ports and binding them must not interleave.
GLOBAL_LOCK = Path("/tmp/slurmpolicy-devcluster.lock")
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
MUNGE_KEY = Path("/etc/munge/munge.key")


@dataclasses.dataclass(frozen=True)
class NodeGroup:
    """Further nodes beside the cluster's own (``DevCluster(groups=...)``), for pools:
    another GPU type or vendor (``gpu_type="mi250"``), fake MIG slices
    (``mig={"1g.10gb": 7}``: gres ``gpu:1g.10gb:7``, no device files, as with
    ``AutoDetect=off``), shards over the whole GPUs (``shards=8``), and the
    partition they form (created when it is new)."""

    prefix: str
    nodes: int = 1
    #: Whole GPUs per node (fake devices), of ``gpu_type``.
    gpus: int = 0
    gpu_type: str = "h100"
    #: MIG slice type -> slices per node.
    mig: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: Shards per node (gres ``shard``), spread over its whole GPUs.
    shards: int = 0
    partition: str = ""
    features: str = ""

    def names(self) -> list[str]:
        width = max(2, len(str(self.nodes)))
        return [f"{self.prefix}{i:0{width}d}" for i in range(1, self.nodes + 1)]

    def gres(self) -> str:
        parts = [f"gpu:{self.gpu_type}:{self.gpus}"] if self.gpus else []
        parts += [f"gpu:{t}:{n}" for t, n in self.mig.items()]
        if self.shards:
            parts.append(f"shard:{self.shards}")
        return ",".join(parts)

    def to_dict(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "mig": dict(self.mig)}


def parse_node_group(text: str) -> NodeGroup:
    """``prefix=amd,nodes=1,gpus=2,type=mi250,partition=amd`` (also ``mig=1g.10gb:7``,
    repeatable, ``shards=N``, ``features=a,b``): a NodeGroup, or a one-line error."""
    allowed = "prefix, nodes, gpus, type, mig=TYPE:N, shards, partition, features"
    fields: dict[str, object] = {}
    mig: dict[str, int] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq:
            if "features" in fields:  # features=a,b: the rest are more features
                fields["features"] = f"{fields['features']},{key}"
                continue
            raise DevClusterError(f"node group {text!r}: {part!r} is not KEY=VALUE; "
                                  f"allowed keys: {allowed}")
        try:
            if key in ("nodes", "gpus", "shards"):
                fields[key] = int(value)
            elif key == "type":
                fields["gpu_type"] = value
            elif key in ("prefix", "partition", "features"):
                fields[key] = value
            elif key == "mig":
                name, _, count = value.rpartition(":")
                mig[name] = int(count)
            else:
                raise DevClusterError(f"node group {text!r}: unknown key {key!r}; "
                                      f"allowed: {allowed}")
        except ValueError:
            raise DevClusterError(f"node group {text!r}: {key}={value!r} is not a whole "
                                  "number") from None
    if "prefix" not in fields:
        raise DevClusterError(f"node group {text!r}: prefix= is missing; allowed: {allowed}")
    return NodeGroup(mig=mig, **fields)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class DaemonStatus:
    """One daemon the dev cluster started: its name, pid (from its pid file) and liveness."""

    name: str
    pid: int | None
    alive: bool


@dataclasses.dataclass(frozen=True)
class ClusterStatus:
    """What ``status()`` reports."""

    state_dir: Path
    cluster_name: str
    configured: bool
    slurmctld: DaemonStatus | None
    slurmds: tuple[DaemonStatus, ...]
    controller_responds: bool
    node_states: Mapping[str, str]
    munged: str
    #: Live processes of the cluster besides the pid-file daemons: job step
    #: daemons, job processes, slurmscriptd (``DevCluster.cluster_processes``).
    other_processes: int = 0

    @property
    def running(self) -> bool:
        """True when every daemon of the cluster is alive."""
        return (
            self.slurmctld is not None
            and self.slurmctld.alive
            and bool(self.slurmds)
            and all(d.alive for d in self.slurmds)
        )

    @property
    def stopped(self) -> bool:
        """True when no daemon of the cluster is alive."""
        daemons = [self.slurmctld, *self.slurmds] if self.slurmctld else list(self.slurmds)
        return not any(d.alive for d in daemons)

    def to_dict(self) -> dict[str, object]:
        return {
            "state_dir": str(self.state_dir),
            "cluster_name": self.cluster_name,
            "configured": self.configured,
            "running": self.running,
            "controller_responds": self.controller_responds,
            "slurmctld": dataclasses.asdict(self.slurmctld) if self.slurmctld else None,
            "slurmds": [dataclasses.asdict(d) for d in self.slurmds],
            "node_states": dict(self.node_states),
            "munged": self.munged,
            "other_processes": self.other_processes,
        }


@dataclasses.dataclass(frozen=True)
class SlurmInstall:
    """Where the Slurm binaries and plugins are."""

    sbin: Path
    bin: Path
    plugin_dir: Path | None  # None: the build's default

    def tool(self, name: str) -> Path:
        for d in (self.bin, self.sbin):
            if (d / name).exists():
                return d / name
        raise DevClusterError(f"Slurm's `{name}` was not found in {self.bin} or {self.sbin}")


def find_slurm(prefix: Path | str | None = None) -> SlurmInstall:
    """Locate slurmctld, slurmd and the client commands, or say how to install them."""
    needed_sbin = ("slurmctld", "slurmd")
    needed_bin = ("scontrol", "sinfo", "squeue", "sbatch")
    if prefix is not None:
        p = Path(prefix).expanduser().resolve()
        sbin, bindir = p / "sbin", p / "bin"
        plugin_dir: Path | None = p / "lib" / "slurm"
        missing = [str(sbin / n) for n in needed_sbin if not (sbin / n).exists()]
        missing += [str(bindir / n) for n in needed_bin if not (bindir / n).exists()]
        if missing:
            raise DevClusterError(
                f"Slurm not found at prefix {p}: missing {', '.join(missing)}; {INSTALL_HINT}"
            )
        assert plugin_dir is not None
        if not plugin_dir.is_dir():
            alt = p / "lib64" / "slurm"
            if not alt.is_dir():
                raise DevClusterError(
                    f"Slurm at prefix {p} has no plugin directory {plugin_dir} (nor {alt})"
                )
            plugin_dir = alt
        return SlurmInstall(sbin=sbin, bin=bindir, plugin_dir=plugin_dir)

    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin",
                              "/usr/local/sbin", "/usr/local/bin"])
    found: dict[str, Path] = {}
    for name in (*needed_sbin, *needed_bin):
        w = shutil.which(name, path=search)
        if w:
            found[name] = Path(w)
    missing = [n for n in (*needed_sbin, *needed_bin) if n not in found]
    if missing:
        raise DevClusterError(f"Slurm is not installed (missing {', '.join(missing)}); "
                              f"{INSTALL_HINT}")
    return SlurmInstall(sbin=found["slurmctld"].parent, bin=found["scontrol"].parent,
                        plugin_dir=None)


#: Compiled into Slurm's read_config.c only when MULTIPLE_SLURMD is undefined
#: (``#if !defined(MULTIPLE_SLURMD)``, 22.05 and 25.11 alike; "NodeHostname" in
#: older releases). Every build also holds node_conf.c's fatal "Duplicated
#: NodeHostName %s in config file" (no "the"; a duplicate NodeName), so only
#: the whole sentence tells the two builds apart.
SINGLE_SLURMD_CHECK = re.compile(rb"Duplicated NodeHost[Nn]ame %s in the config file")
#: What a single-slurmd build logs when it reads the dev cluster's slurm.conf.
SINGLE_SLURMD_LOG = re.compile(r"Duplicated NodeHost[Nn]ame (\S+) in the config file")
MULTIPLE_SLURMD_FIX = (
    "rebuild it with `./configure --enable-multiple-slurmd` (scripts/build-slurm does), "
    "or point --slurm-prefix at such a build"
)


def slurm_library(install: SlurmInstall) -> Path | None:
    """The ``libslurmfull.so`` Slurm's daemons run with (read_config.c lives there),
    or None when it cannot be found."""
    if install.plugin_dir is not None and (install.plugin_dir / "libslurmfull.so").is_file():
        return install.plugin_dir / "libslurmfull.so"
    # A system install: ask the dynamic loader where slurmd's copy is.
    ldd = shutil.which("ldd", path="/usr/bin:/bin")
    if ldd is None:
        return None
    try:
        out = subprocess.run([ldd, str(install.sbin / "slurmd")], capture_output=True,
                             text=True, timeout=30, stdin=subprocess.DEVNULL).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    m = re.search(r"libslurmfull\S*\s+=>\s+(\S+)", out)
    return Path(m.group(1)) if m and Path(m.group(1)).is_file() else None


def holds_single_slurmd_check(path: Path) -> bool:
    """True when the binary at ``path`` has the one-slurmd-per-host check compiled in."""
    with open(path, "rb") as f:
        try:
            data: bytes | mmap.mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            data = b""
        try:
            return SINGLE_SLURMD_CHECK.search(data) is not None
        finally:
            if isinstance(data, mmap.mmap):
                data.close()


def multiple_slurmd_support(install: SlurmInstall) -> tuple[bool | None, Path | None]:
    """Whether this Slurm was configured with ``--enable-multiple-slurmd``, and the
    file that says so: (True, lib), (False, lib) or (None, None) when no library was
    found to read (``up`` then relies on slurmctld's log)."""
    lib = slurm_library(install)
    if lib is None:
        # A static build carries read_config.c in the daemon itself.
        slurmd = install.sbin / "slurmd"
        if slurmd.is_file() and holds_single_slurmd_check(slurmd):
            return False, slurmd
        return None, None
    return not holds_single_slurmd_check(lib), lib


def single_slurmd_refusal(where: str, evidence: str) -> DevClusterError:
    """The one-line refusal for a Slurm built without multiple-slurmd."""
    return DevClusterError(
        f"the Slurm at {where} was built without --enable-multiple-slurmd ({evidence}), "
        f"and the dev cluster runs one slurmd per node on this one host: {MULTIPLE_SLURMD_FIX}"
    )


def check_multiple_slurmd(install: SlurmInstall) -> None:
    """Refuse (DevClusterError) a Slurm built without ``--enable-multiple-slurmd``."""
    ok, lib = multiple_slurmd_support(install)
    if ok is False:
        raise single_slurmd_refusal(
            str(install.sbin.parent),
            f"{lib} holds the one-slurmd-per-host check \"Duplicated NodeHostName ... "
            "in the config file\"")


def port_is_free(port: int) -> bool:
    """True when nothing listens on ``port`` (slurmctld and slurmd bind all addresses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # Like Slurm's own listeners: a port in TIME_WAIT after a down is reusable,
        # one with a listener is not.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def find_free_ports(count: int, avoid: Sequence[int] = ()) -> list[int]:
    """``count`` distinct free TCP ports from PORT_RANGE, in no particular block."""
    rng = random.Random()
    chosen: list[int] = []
    tries = 0
    while len(chosen) < count:
        tries += 1
        if tries > 20000:
            raise DevClusterError(f"could not find {count} free TCP ports in {PORT_RANGE}")
        port = rng.randint(*PORT_RANGE)
        if port in chosen or port in avoid:
            continue
        if port_is_free(port):
            chosen.append(port)
    return chosen


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0] != "Z"
    except OSError:
        return False


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _proc_environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def _proc_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


def _where(prefix: object) -> str:
    """A Slurm prefix as recorded or asked, for comparing and for messages."""
    return str(Path(str(prefix)).expanduser().resolve()) if prefix else "the system's Slurm"


def _proc_link(pid: int, what: str) -> str:
    """``/proc/PID/exe`` or ``cwd`` ("" when gone or not ours to read)."""
    try:
        target = os.readlink(f"/proc/{pid}/{what}")
    except OSError:
        return ""
    # A binary replaced on disk (a reinstall) reads "... (deleted)".
    return target.removesuffix(" (deleted)")


def _within(path: str, root: Path) -> bool:
    return bool(path) and (path == str(root) or path.startswith(f"{root}/"))


#: Executables of the Slurm daemons a dev cluster runs (Debian names its
#: step daemon slurmstepd-wlm; slurmscriptd is a slurmctld fork).
_DAEMON_EXES = ("slurmctld", "slurmd", "slurmstepd")


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


def _descendants(pid: int, children: Mapping[int, list[int]]) -> list[int]:
    out: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(children.get(p, []))
    return out


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:]) if text else f"({path} is empty)"


@contextlib.contextmanager
def _global_lock() -> Iterator[None]:
    fd = os.open(GLOBAL_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(OSError):
        os.chmod(GLOBAL_LOCK, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def munge_works(env: Mapping[str, str] | None = None) -> bool:
    """True when a munged answers on the default socket (encode then decode a credential)."""
    munge, unmunge = shutil.which("munge", path="/usr/bin:/bin"), shutil.which(
        "unmunge", path="/usr/bin:/bin")
    if not munge or not unmunge:
        return False
    try:
        cred = subprocess.run([munge, "-n"], capture_output=True, timeout=10, check=True).stdout
        subprocess.run([unmunge], input=cred, capture_output=True, timeout=10, check=True)
    except (subprocess.SubprocessError, OSError):
        return False
    return True


def ensure_munged() -> str:
    """Make sure a munged serves the default socket; start one if none does.

    Returns a description for status. A munged we start is a shared system
    service (other dev clusters and Slurm clients on the machine use it), so it
    is started detached, outlives this process, and ``down`` never stops it.
    """
    if munge_works():
        return "running"
    munged = shutil.which("munged", path="/usr/sbin:/sbin:/usr/bin")
    if not munged:
        raise DevClusterError(f"munge is not installed (no munged); {INSTALL_HINT}")
    if os.geteuid() != 0:
        raise DevClusterError(
            "munged is not running and only root can start it: run `sudo service munge start` "
            "(or scripts/setup)"
        )
    if not MUNGE_KEY.exists():
        raise DevClusterError(
            f"no munge key at {MUNGE_KEY}: create one with `mungekey --create` (or scripts/setup)"
        )
    with _global_lock():
        if munge_works():
            return "running"
        run_dir = MUNGE_SOCKET.parent
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.chown(run_dir, "munge", "munge")
        os.chmod(run_dir, 0o755)
        for d in (Path("/var/log/munge"), Path("/var/lib/munge")):
            d.mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "munge", "munge")
        cmd = [munged]
        runuser = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin")
        if runuser:
            cmd = [runuser, "-u", "munge", "--", munged]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if munge_works():
                return "started by devcluster (left running: a shared system service)"
            time.sleep(0.2)
        raise DevClusterError(
            f"munged failed to start (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip()}\n{_tail(Path('/var/log/munge/munged.log'))}"
        )


def default_state_dir() -> Path:
    """``$SLURMPOLICY_DEVCLUSTER_DIR`` or ``~/.local/state/slurmpolicy/devcluster``."""
    env = os.environ.get("SLURMPOLICY_DEVCLUSTER_DIR")
    if env:
        return Path(env).expanduser()
    return Path("~/.local/state/slurmpolicy/devcluster").expanduser()


PASS_THROUGH_LUA = """\
-- Pass-through job_submit.lua of the slurmpolicy dev cluster: accepts every job
-- unchanged. `slurmpolicy devcluster up --job-submit-lua FILE` installs another.
function slurm_job_submit(job_desc, part_list, submit_uid)
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
"""


class DevCluster:
    """A local Slurm cluster under one state directory.

    ``up()`` writes the configuration and starts munged (when none runs),
    slurmctld and one slurmd per node, then waits until every node is idle;
    ``down()`` stops what ``up()`` started and waits for it to exit.
    """

    def __init__(
        self,
        state_dir: Path | str,
        nodes: int = 8,
        gpus_per_node: int = 8,
        gpu_type: str = "h100",
        racks: int = 2,
        ctld_port: int | None = None,
        first_slurmd_port: int | None = None,
        slurm_prefix: Path | str | None = None,
        job_submit_lua: Path | str | None = None,
        cluster_name: str = "devcluster",
        cpus_per_node: int | None = None,
        memory_mb: int = 64000,
        node_prefix: str = "gpu",
        groups: Sequence[NodeGroup] = (),
        partitions: Mapping[str, str] = MappingProxyType({}),
    ) -> None:
        if nodes < 1:
            raise DevClusterError(f"nodes must be at least 1, got {nodes}")
        if not 1 <= gpus_per_node <= 64:
            raise DevClusterError(f"gpus_per_node must be 1..64, got {gpus_per_node}")
        if not 1 <= racks <= nodes:
            raise DevClusterError(f"racks must be 1..nodes ({nodes}), got {racks}")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", cluster_name):
            raise DevClusterError(
                f"cluster name {cluster_name!r} is not allowed: use lower-case letters, digits "
                "and _ (Slurm's rule), starting with a letter"
            )
        if not re.fullmatch(r"[A-Za-z0-9_]+", gpu_type):
            raise DevClusterError(f"gpu type {gpu_type!r} is not allowed: letters, digits, _")
        if not re.fullmatch(r"[a-z][a-z-]*", node_prefix):
            raise DevClusterError(f"node prefix {node_prefix!r} is not allowed: letters and -")
        for name, port in (("ctld_port", ctld_port), ("first_slurmd_port", first_slurmd_port)):
            if port is not None and not 1024 <= port <= 65535 - nodes:
                raise DevClusterError(f"{name} must be in 1024..{65535 - nodes}, got {port}")
        self.state_dir = Path(state_dir).expanduser().absolute()
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.gpu_type = gpu_type
        self.racks = racks
        self.ctld_port = ctld_port
        self.first_slurmd_port = first_slurmd_port
        self.slurm_prefix = Path(slurm_prefix).expanduser() if slurm_prefix else None
        self.job_submit_lua = Path(job_submit_lua).expanduser() if job_submit_lua else None
        self.cluster_name = cluster_name
        self.cpus_per_node = cpus_per_node if cpus_per_node is not None else max(8, gpus_per_node)
        self.memory_mb = memory_mb
        self.node_prefix = node_prefix
        # Pools (docs/pools.md): further node groups and partitions (name -> hostlist).
        for group in groups:
            if not re.fullmatch(r"[a-z][a-z-]*", group.prefix) or group.prefix == node_prefix:
                raise DevClusterError(f"node group prefix {group.prefix!r} is not allowed: "
                                      "letters and -, other than the cluster's own")
            if not re.fullmatch(r"[A-Za-z0-9_]+", group.gpu_type) or not all(
                    re.fullmatch(r"[A-Za-z0-9_.]+", t) for t in group.mig):
                raise DevClusterError(f"node group {group.prefix}: GPU types are letters, "
                                      "digits, _ (MIG types also .)")
            if group.nodes < 1 or not 0 <= group.gpus <= 64 or group.shards < 0:
                raise DevClusterError(f"node group {group.prefix}: nodes >= 1, gpus 0..64, "
                                      "shards >= 0")
        self.groups = tuple(groups)
        self.partitions = dict(partitions)
        self._slurm: SlurmInstall | None = None
        self.munged = "unknown"

    # ---------------------------------------------------------------- paths
    @property
    def conf_dir(self) -> Path:
        return self.state_dir / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.conf_dir / "slurm.conf"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def spool_dir(self) -> Path:
        return self.state_dir / "spool"

    @property
    def dev_dir(self) -> Path:
        return self.state_dir / "dev"

    @property
    def shared_dir(self) -> Path:
        """World-writable (sticky) directory for job scripts and outputs."""
        return self.state_dir / "shared"

    @property
    def marker(self) -> Path:
        return self.state_dir / MARKER

    @property
    def ctld_pid_file(self) -> Path:
        return self.run_dir / "slurmctld.pid"

    def slurmd_pid_file(self, node: str) -> Path:
        return self.run_dir / f"slurmd.{node}.pid"

    def slurmd_log(self, node: str) -> Path:
        return self.log_dir / f"slurmd.{node}.log"

    @property
    def ctld_log(self) -> Path:
        return self.log_dir / "slurmctld.log"

    @property
    def slurm(self) -> SlurmInstall:
        if self._slurm is None:
            self._slurm = find_slurm(self.slurm_prefix)
        return self._slurm

    # ---------------------------------------------------------------- shape
    @property
    def node_names(self) -> list[str]:
        """The cluster's own nodes, then those of its node groups."""
        return self.base_node_names + [n for g in self.groups for n in g.names()]

    @property
    def base_node_names(self) -> list[str]:
        width = max(2, len(str(self.nodes)))
        return [f"{self.node_prefix}{i:0{width}d}" for i in range(1, self.nodes + 1)]

    @property
    def rack_nodes(self) -> list[list[str]]:
        """Nodes of each rack, in order; racks as even as possible (earlier ones larger)."""
        names = self.base_node_names
        base, extra = divmod(len(names), self.racks)
        out: list[list[str]] = []
        i = 0
        for r in range(self.racks):
            size = base + (1 if r < extra else 0)
            out.append(names[i:i + size])
            i += size
        return out

    def features_of(self, rack: int) -> str:
        """Node features of rack ``rack`` (1-based): GPU type, NVLink domain, IB leaf."""
        return f"{self.gpu_type},nvl_rack{rack},leaf{rack}"

    # ---------------------------------------------------------------- identity
    def _identity(self) -> dict[str, object]:
        return {"kind": MARKER_KIND, "cluster_name": self.cluster_name}

    def _read_marker(self) -> dict[str, object] | None:
        try:
            data = json.loads(self.marker.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise DevClusterError(f"{self.marker} is unreadable: {exc}") from exc
        if not isinstance(data, dict):
            raise DevClusterError(f"{self.marker} is not a devcluster marker")
        return data

    def _check_state_dir(self) -> dict[str, object] | None:
        """Refuse a state directory that belongs to something else; return its marker."""
        # slurmd puts unix sockets named <node>_<job>.<step> in its spool dir;
        # sun_path holds 108 bytes.
        last = self.node_names[-1]
        longest = len(f"{self.state_dir}/spool/slurmd.{last}/{last}_67043328.4294967291")
        if longest > 107:
            raise DevClusterError(
                f"state dir {self.state_dir} is too long ({len(str(self.state_dir))} characters): "
                "slurmd's socket paths under it would exceed 107 bytes; choose a shorter one"
            )
        if self.state_dir.exists() and not self.state_dir.is_dir():
            raise DevClusterError(f"state dir {self.state_dir} exists and is not a directory")
        marker = self._read_marker()
        if marker is None:
            if self.state_dir.exists() and any(self.state_dir.iterdir()):
                raise DevClusterError(
                    f"state dir {self.state_dir} is not empty and holds no {MARKER}: it is not a "
                    "dev cluster's; choose another --state-dir or empty it"
                )
            return None
        if marker.get("kind") != MARKER_KIND or marker.get("cluster_name") != self.cluster_name:
            raise DevClusterError(
                f"state dir {self.state_dir} belongs to another cluster "
                f"({marker.get('kind')!s} {marker.get('cluster_name')!s}), not "
                f"{self.cluster_name!r}: choose another --state-dir or --cluster-name"
            )
        return marker

    def load(self) -> DevCluster:
        """Adopt the shape and ports recorded in the state dir (for status/down/env)."""
        marker = self._read_marker()
        if marker is None:
            return self
        self.cluster_name = str(marker.get("cluster_name", self.cluster_name))
        for key in ("nodes", "gpus_per_node", "racks", "cpus_per_node", "memory_mb"):
            v = marker.get(key)
            if isinstance(v, int):
                setattr(self, key, v)
        for key in ("gpu_type", "node_prefix"):
            v = marker.get(key)
            if isinstance(v, str):
                setattr(self, key, v)
        if isinstance(marker.get("ctld_port"), int):
            self.ctld_port = marker["ctld_port"]  # type: ignore[assignment]
        if marker.get("slurm_prefix") and self.slurm_prefix is None:
            self.slurm_prefix = Path(str(marker["slurm_prefix"]))
        return self

    # ---------------------------------------------------------------- config
    def _choose_ports(self, marker: Mapping[str, object] | None) -> tuple[int, list[int]]:
        n = len(self.node_names)
        if self.first_slurmd_port is not None:
            slurmd_ports = list(range(self.first_slurmd_port, self.first_slurmd_port + n))
        else:
            recorded = marker.get("slurmd_ports") if marker else None
            if (isinstance(recorded, list) and len(recorded) == n
                    and all(isinstance(p, int) and port_is_free(p) for p in recorded)
                    and self.ctld_port not in recorded):
                slurmd_ports = [int(p) for p in recorded]
            else:
                slurmd_ports = find_free_ports(n, avoid=[self.ctld_port or 0])
        if self.ctld_port is not None:
            ctld_port = self.ctld_port
        else:
            recorded_ctld = marker.get("ctld_port") if marker else None
            if (isinstance(recorded_ctld, int) and recorded_ctld not in slurmd_ports
                    and port_is_free(recorded_ctld)):
                ctld_port = recorded_ctld
            else:
                ctld_port = find_free_ports(1, avoid=slurmd_ports)[0]
        if ctld_port in slurmd_ports:
            raise DevClusterError(
                f"slurmctld port {ctld_port} collides with the slurmd ports "
                f"{slurmd_ports[0]}..{slurmd_ports[-1]}"
            )
        busy = [p for p in [ctld_port, *slurmd_ports] if not port_is_free(p)]
        if busy:
            raise DevClusterError(
                f"port{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))} already in use: "
                "choose others with --ctld-port / --first-slurmd-port, or leave them unset to "
                "pick free ones"
            )
        return ctld_port, slurmd_ports

    def render_slurm_conf(self, ctld_port: int, slurmd_ports: Sequence[int]) -> str:
        s = self.state_dir
        lines = [
            "# Written by `slurmpolicy devcluster up`; rewritten at each up.",
            f"ClusterName={self.cluster_name}",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            # Ignored for nodes that name their own Port, but it must not clash.
            f"SlurmdPort={slurmd_ports[0]}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={s}/spool/slurmctld",
            f"SlurmdSpoolDir={s}/spool/slurmd.%n",
            f"SlurmctldPidFile={self.ctld_pid_file}",
            f"SlurmdPidFile={s}/run/slurmd.%n.pid",
            f"SlurmctldLogFile={self.ctld_log}",
            f"SlurmdLogFile={s}/log/slurmd.%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # Containers: no systemd, no usable cgroups.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "SchedulerType=sched/backfill",
            # Fast scheduling, so that tests wait seconds, not minutes.
            "SchedulerParameters=bf_interval=1,sched_min_interval=100000,bf_resolution=60",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            # Without it a job without --mem takes the whole node's memory.
            "DefMemPerCPU=1000",
            "PriorityType=priority/multifactor",
            # No PriorityWeightAge: without slurmdbd Slurm drops it (22.05 and 25.11
            # alike log "PriorityWeightAge can only be used with SlurmDBD, ignoring").
            # slurmpolicy's own aging ([aging]) goes into the site factor instead.
            "# No PriorityWeightAge: Slurm ignores it without slurmdbd; slurmpolicy's "
            "aging is part of the site factor.",
            "PriorityWeightJobSize=100",
            "PriorityWeightPartition=1000",
            "PriorityCalcPeriod=1",
            "PreemptType=preempt/partition_prio",
            "PreemptMode=REQUEUE",
            "JobRequeue=1",
            "GresTypes=gpu,shard" if any(g.shards for g in self.groups) else "GresTypes=gpu",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "JobSubmitPlugins=lua",
            "JobCompType=jobcomp/none",
            "AccountingStorageType=accounting_storage/none",
            "TopologyPlugin=topology/tree",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "MessageTimeout=10",
            "KillWait=5",
            "MinJobAge=600",
            "InactiveLimit=0",
            "Waittime=0",
            "MailProg=/bin/true",
        ]
        if self.slurm.plugin_dir is not None:
            lines.append(f"PluginDir={self.slurm.plugin_dir}")
        for r, members in enumerate(self.rack_nodes, start=1):
            for node in members:
                port = slurmd_ports[self.node_names.index(node)]
                lines.append(
                    f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                    f"CPUs={self.cpus_per_node} RealMemory={self.memory_mb} "
                    f"Gres=gpu:{self.gpu_type}:{self.gpus_per_node} "
                    f"Feature={self.features_of(r)} State=UNKNOWN"
                )
        for g in self.groups:
            for node in g.names():
                port = slurmd_ports[self.node_names.index(node)]
                features = g.features or g.gpu_type
                lines.append(
                    f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                    f"CPUs={self.cpus_per_node} RealMemory={self.memory_mb} "
                    f"Gres={g.gres()} Feature={features},leaf_{g.prefix} State=UNKNOWN"
                )
        all_nodes = compress(self.base_node_names)
        lines += [
            f"PartitionName=prod Nodes={all_nodes} PriorityTier=10 PreemptMode=OFF "
            "MaxTime=7-00:00:00 State=UP",
            f"PartitionName=research Nodes={all_nodes} Default=YES PriorityTier=1 "
            "PreemptMode=REQUEUE MaxTime=2-00:00:00 State=UP",
        ]
        extra: dict[str, list[str]] = {}
        for name, hosts in self.partitions.items():
            extra.setdefault(name, []).append(hosts)
        for g in self.groups:
            if g.partition:
                extra.setdefault(g.partition, []).append(compress(g.names()))
        for name, hosts_list in extra.items():
            lines.append(f"PartitionName={name} Nodes={','.join(hosts_list)} PriorityTier=1 "
                         "PreemptMode=REQUEUE MaxTime=2-00:00:00 State=UP")
        return "\n".join(lines) + "\n"

    def render_gres_conf(self) -> str:
        last = self.gpus_per_node - 1
        files = f"{self.dev_dir}/nvidia[0-{last}]" if last else f"{self.dev_dir}/nvidia0"
        text = (
            "AutoDetect=off\n"
            f"NodeName={compress(self.base_node_names)} Name=gpu Type={self.gpu_type} "
            f"File={files}\n"
        )
        for g in self.groups:
            names = compress(g.names())
            if g.gpus:
                last = g.gpus - 1
                gfiles = f"{self.dev_dir}/nvidia[0-{last}]" if last else f"{self.dev_dir}/nvidia0"
                text += f"NodeName={names} Name=gpu Type={g.gpu_type} File={gfiles}\n"
            first = g.gpus
            for mig_type, count in g.mig.items():
                # Fake MIG slices: each its own fake device after the whole GPUs
                # (slurmd wants File on all gpu records of a node or on none).
                last = first + count - 1
                mfiles = f"{self.dev_dir}/nvidia[{first}-{last}]" if last > first else \
                    f"{self.dev_dir}/nvidia{first}"
                text += f"NodeName={names} Name=gpu Type={mig_type} File={mfiles}\n"
                first = last + 1
            if g.shards:
                text += f"NodeName={names} Name=shard Count={g.shards}\n"
        return text

    def render_topology_conf(self) -> str:
        lines = [
            f"SwitchName=leaf{r} Nodes={compress(members)}"
            for r, members in enumerate(self.rack_nodes, start=1)
        ]
        lines += [f"SwitchName=leaf_{g.prefix} Nodes={compress(g.names())}" for g in self.groups]
        leaves = f"leaf[1-{self.racks}]" if self.racks > 1 else "leaf1"
        leaves += "".join(f",leaf_{g.prefix}" for g in self.groups)
        lines.append(f"SwitchName=spine Switches={leaves}")
        return "\n".join(lines) + "\n"

    def _make_devices(self) -> None:
        self.dev_dir.mkdir(parents=True, exist_ok=True)
        devices = max([self.gpus_per_node, *(g.gpus + sum(g.mig.values()) for g in self.groups)])
        for i in range(devices):
            path = self.dev_dir / f"nvidia{i}"
            if path.exists():
                st = path.stat()
                if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == NVIDIA_MAJOR \
                        and os.minor(st.st_rdev) == i:
                    continue
                path.unlink()
            try:
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, i))
            except PermissionError as exc:
                raise DevClusterError(
                    f"cannot create the fake GPU device {path} (mknod needs root / CAP_MKNOD): "
                    f"{exc}"
                ) from exc

    def write_config(self, ctld_port: int, slurmd_ports: Sequence[int]) -> None:
        """Write the state dir's layout and every config file."""
        for d in (self.state_dir, self.conf_dir, self.log_dir, self.run_dir, self.spool_dir,
                  self.spool_dir / "slurmctld"):
            d.mkdir(parents=True, exist_ok=True)
        # Job users need to read the config and reach shared/: parents must be traversable.
        for d in (self.state_dir, self.conf_dir):
            os.chmod(d, 0o755)
        self.shared_dir.mkdir(exist_ok=True)
        os.chmod(self.shared_dir, 0o1777)
        for node in self.node_names:
            (self.spool_dir / f"slurmd.{node}").mkdir(exist_ok=True)
        self._make_devices()
        files = {
            "slurm.conf": self.render_slurm_conf(ctld_port, slurmd_ports),
            "gres.conf": self.render_gres_conf(),
            "topology.conf": self.render_topology_conf(),
        }
        if self.job_submit_lua is not None:
            if not self.job_submit_lua.is_file():
                raise DevClusterError(f"job_submit.lua {self.job_submit_lua} does not exist")
            files["job_submit.lua"] = self.job_submit_lua.read_text()
        else:
            files["job_submit.lua"] = PASS_THROUGH_LUA
        for name, text in files.items():
            path = self.conf_dir / name
            path.write_text(text)
            os.chmod(path, 0o644)
        marker = {
            **self._identity(),
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "gpu_type": self.gpu_type,
            "racks": self.racks,
            "cpus_per_node": self.cpus_per_node,
            "memory_mb": self.memory_mb,
            "node_prefix": self.node_prefix,
            "ctld_port": ctld_port,
            "slurmd_ports": list(slurmd_ports),
            "slurm_prefix": str(self.slurm_prefix) if self.slurm_prefix else None,
            "node_names": self.node_names,
            "groups": [g.to_dict() for g in self.groups],
            "partitions": self.partitions,
        }
        self.marker.write_text(json.dumps(marker, indent=2) + "\n")
        os.chmod(self.marker, 0o644)
        self.ctld_port = ctld_port

    def install_job_submit_lua(self, path: Path | str | None) -> None:
        """Replace the running cluster's job_submit.lua (None: the pass-through one) and
        make slurmctld load it (``scontrol reconfigure``)."""
        text = PASS_THROUGH_LUA if path is None else Path(path).read_text()
        target = self.conf_dir / "job_submit.lua"
        target.write_text(text)
        os.chmod(target, 0o644)
        self.job_submit_lua = Path(path) if path is not None else None
        self.run_tool("scontrol", "reconfigure")

    # ---------------------------------------------------------------- env
    def env(self) -> dict[str, str]:
        """What a shell (or a subprocess) needs to talk to this cluster."""
        path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        parts = [str(self.slurm.bin), str(self.slurm.sbin)]
        rest = [p for p in path.split(os.pathsep) if p and p not in parts]
        return {"SLURM_CONF": str(self.slurm_conf), "PATH": os.pathsep.join(parts + rest)}

    def _daemon_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        env.update(self.env())
        # Tags slurmd and, through it, every slurmstepd: how down() finds the
        # job step daemons of this cluster (they do not appear in any pid file).
        env["SLURMPOLICY_DEVCLUSTER"] = str(self.state_dir)
        return env

    def run_tool(self, name: str, *args: str, timeout: float = 30,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster (argument list, no shell)."""
        env = {**os.environ, **self.env()}
        try:
            proc = subprocess.run([str(self.slurm.tool(name)), *args], capture_output=True,
                                  text=True, timeout=timeout, env=env,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise DevClusterError(f"`{name} {' '.join(args)}` timed out after {timeout}s") from exc
        if check and proc.returncode != 0:
            raise DevClusterError(
                f"`{name} {' '.join(args)}` failed (exit {proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()}"
            )
        return proc

    # ---------------------------------------------------------------- up
    def _start(self, what: str, argv: list[str], pid_file: Path, log: Path,
               timeout: float = 30) -> int:
        pid_file.unlink(missing_ok=True)
        err_path = self.log_dir / f"{what}.stderr"
        with open(err_path, "wb") as err:
            try:
                proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                      env=self._daemon_env(), timeout=timeout,
                                      start_new_session=True, cwd=self.state_dir)
            except subprocess.TimeoutExpired as exc:
                raise DevClusterError(f"{what} did not daemonize within {timeout}s") from exc
        if proc.returncode != 0:
            raise DevClusterError(
                f"{what} failed to start (exit {proc.returncode}).\n"
                f"stderr:\n{_tail(err_path)}\nlog {log}:\n{_tail(log)}"
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = _read_pid(pid_file)
            if pid is not None and _pid_alive(pid):
                return pid
            time.sleep(0.1)
        raise DevClusterError(
            f"{what} did not write a live pid to {pid_file} within {timeout}s.\n"
            f"stderr:\n{_tail(err_path)}\nlog {log}:\n{_tail(log)}"
        )

    def up(self, timeout: float = 90) -> ClusterStatus:
        """Start the cluster and wait until it is ready.

        Idempotent when it already runs. On a partly running cluster (slurmctld up
        and a slurmd dead, or the reverse) it starts only the missing daemons with
        the configuration on disk, so that running jobs live on; when it cannot
        (another shape asked, a port taken, slurmctld alive but mute) it refuses
        with the reason. It never stops a job.
        """
        marker = self._check_state_dir()
        if marker is not None:
            self._check_same_slurm(marker)
        slurm = self.slurm
        current = self.status() if marker is not None else None
        if current is not None and current.running:
            return current
        check_multiple_slurmd(slurm)
        if marker is not None and current is not None and not current.stopped:
            return self._complete(marker, current, timeout)
        if marker is not None:
            leftovers = self.cluster_processes()
            differences = self._shape_differences(marker)
            if leftovers and differences:
                raise DevClusterError(
                    f"the dev cluster at {self.state_dir} has no daemon running but "
                    f"{len(leftovers)} of its job processes still run (pids "
                    f"{', '.join(map(str, sorted(leftovers)[:5]))}), and another shape was "
                    f"asked ({'; '.join(differences)}): run `up` with its shape to take "
                    "them back, or `devcluster down` first (which ends them)")
        self.munged = ensure_munged()
        started: list[int] = []
        with _global_lock():
            ctld_port, slurmd_ports = self._choose_ports(marker)
            self.write_config(ctld_port, slurmd_ports)
            if self.munged != "running":
                # Say so where status() and a person will find it: this munged
                # now serves the whole machine and outlives the cluster.
                pid = _read_pid(Path("/run/munge/munged.pid"))
                (self.run_dir / "munged-started.json").write_text(json.dumps({
                    "pid": pid, "started_at": time.time(),
                    "note": "munged started by `devcluster up`; left running on down "
                            "(a shared system service)",
                }) + "\n")
            try:
                started.append(self._start(
                    "slurmctld", [str(slurm.sbin / "slurmctld"), "-f", str(self.slurm_conf)],
                    self.ctld_pid_file, self.ctld_log))
                self._wait_ctld(timeout=30)
                self._check_single_slurmd_log()
                for node in self.node_names:
                    started.append(self._start(
                        f"slurmd.{node}",
                        [str(slurm.sbin / "slurmd"), "-f", str(self.slurm_conf), "-N", node],
                        self.slurmd_pid_file(node), self.slurmd_log(node)))
            except BaseException:
                # Only what this call started: job processes an earlier run left
                # (its daemons died under them) are not ours to end here.
                self._stop(started)
                raise
        try:
            self.wait_ready(timeout)
        except BaseException:
            self._stop(started)
            raise
        return self.status()

    def _shape_differences(self, marker: Mapping[str, object]) -> list[str]:
        """How the shape asked of this object differs from the one the state dir
        records, as ``"nodes 3 (asked 8)"`` strings; [] when it is the same."""
        out = []
        for key in ("nodes", "gpus_per_node", "gpu_type", "racks", "cpus_per_node",
                    "memory_mb", "node_prefix"):
            recorded = marker.get(key)
            if recorded is not None and recorded != getattr(self, key):
                out.append(f"{key} {recorded} (asked {getattr(self, key)})")
        if _where(marker.get("slurm_prefix")) != _where(self.slurm_prefix):
            out.append(f"Slurm {_where(marker.get('slurm_prefix'))} "
                       f"(asked {_where(self.slurm_prefix)})")
        if self.ctld_port is not None and marker.get("ctld_port") not in (None, self.ctld_port):
            out.append(f"ctld_port {marker.get('ctld_port')} (asked {self.ctld_port})")
        ports = marker.get("slurmd_ports")
        if (self.first_slurmd_port is not None and isinstance(ports, list) and ports
                and ports[0] != self.first_slurmd_port):
            out.append(f"first_slurmd_port {ports[0]} (asked {self.first_slurmd_port})")
        return out

    def _check_same_slurm(self, marker: Mapping[str, object]) -> None:
        """Refuse to start another Slurm on the saved state of this one: slurmctld's
        state files are its version's (an older one stops at "CLUSTER NAME MISMATCH",
        a newer one reads at most two releases back)."""
        recorded, asked = _where(marker.get("slurm_prefix")), _where(self.slurm_prefix)
        saved = self.spool_dir / "slurmctld"
        if recorded != asked and saved.is_dir() and any(saved.iterdir()):
            option = (f"--slurm-prefix {recorded}" if marker.get("slurm_prefix")
                      else "no --slurm-prefix")
            raise DevClusterError(
                f"the dev cluster at {self.state_dir} keeps the saved state of {recorded} "
                f"in {saved}, which {asked} cannot take over: run `up` with {option}, or "
                "choose another --state-dir")

    def _complete(self, marker: Mapping[str, object], current: ClusterStatus,
                  timeout: float) -> ClusterStatus:
        """Start the missing daemons of a partly running cluster, or refuse."""
        daemons = [d for d in (current.slurmctld, *current.slurmds) if d is not None]
        dead = [d.name for d in daemons if not d.alive]
        state = (f"partly running: {', '.join(d.name for d in daemons if d.alive)} alive, "
                 f"{', '.join(dead)} not")
        advice = "`devcluster down` first stops it all (and ends its jobs)"
        differences = self._shape_differences(marker)
        if differences:
            raise DevClusterError(
                f"the dev cluster at {self.state_dir} is {state}, and another shape was asked "
                f"({'; '.join(differences)}): run `up` with its shape to complete it, or "
                f"{advice}")
        if not self.slurm_conf.is_file():
            raise DevClusterError(f"the dev cluster at {self.state_dir} is {state}, and its "
                                  f"{self.slurm_conf} is gone: {advice}")
        ctld_port = marker.get("ctld_port")
        ports = marker.get("slurmd_ports")
        names = self._recorded_node_names(marker)
        if not (isinstance(ctld_port, int) and isinstance(ports, list)
                and len(ports) == len(names)):
            raise DevClusterError(f"the dev cluster at {self.state_dir} is {state}, and "
                                  f"{self.marker} does not record its ports: {advice}")
        self.ctld_port = ctld_port
        ctld_alive = current.slurmctld is not None and current.slurmctld.alive
        if ctld_alive and not current.controller_responds:
            with contextlib.suppress(DevClusterError):
                self._wait_ctld(timeout=30)
            if not self.controller_responds():
                raise DevClusterError(
                    f"the dev cluster at {self.state_dir} is {state}, and its slurmctld (pid "
                    f"{current.slurmctld.pid if current.slurmctld else '?'}) is alive but does "
                    f"not answer `scontrol ping` (see {self.ctld_log}): {advice}")
        need = [] if ctld_alive else [("slurmctld", ctld_port)]
        need += [(f"slurmd.{n}", int(p)) for n, p in zip(names, ports, strict=True)
                 if f"slurmd.{n}" in dead]
        busy = [f"{what} port {port}" for what, port in need if not port_is_free(port)]
        if busy:
            raise DevClusterError(
                f"the dev cluster at {self.state_dir} is {state}, and another process holds "
                f"{', '.join(busy)}: free it, or {advice}")
        self.munged = ensure_munged()
        slurm = self.slurm
        started: list[int] = []
        with _global_lock():
            try:
                if not ctld_alive:
                    started.append(self._start(
                        "slurmctld", [str(slurm.sbin / "slurmctld"), "-f", str(self.slurm_conf)],
                        self.ctld_pid_file, self.ctld_log))
                    self._wait_ctld(timeout=30)
                for node in names:
                    if f"slurmd.{node}" in dead:
                        started.append(self._start(
                            f"slurmd.{node}",
                            [str(slurm.sbin / "slurmd"), "-f", str(self.slurm_conf), "-N", node],
                            self.slurmd_pid_file(node), self.slurmd_log(node)))
            except BaseException:
                # Stop only what this call started: the daemons that were running,
                # and their jobs, stay as they were.
                self._stop(started)
                raise
        # A failure here leaves the cluster as running as it got: nothing is stopped.
        self.wait_ready(timeout)
        return self.status()

    def _stop(self, pids: Sequence[int]) -> None:
        """SIGTERM daemons this object started, and wait until they are gone."""
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        self._wait_gone(pids, 30)

    def _check_single_slurmd_log(self) -> None:
        """Refuse when slurmctld's log shows a Slurm built for one slurmd per host."""
        try:
            text = self.ctld_log.read_text(errors="replace")
        except OSError:
            return
        m = SINGLE_SLURMD_LOG.search(text)
        if m:
            raise single_slurmd_refusal(
                str(self.slurm.sbin.parent),
                f"slurmctld logged \"{m.group(0)}\" in {self.ctld_log}")

    def _wait_ctld(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = _read_pid(self.ctld_pid_file)
            if pid is None or not _pid_alive(pid):
                raise DevClusterError(f"slurmctld exited during start.\nlog {self.ctld_log}:\n"
                                      f"{_tail(self.ctld_log)}")
            if self.controller_responds():
                return
            time.sleep(0.2)
        raise DevClusterError(f"slurmctld does not answer `scontrol ping` after {timeout}s.\n"
                              f"log {self.ctld_log}:\n{_tail(self.ctld_log)}")

    def controller_responds(self) -> bool:
        try:
            proc = self.run_tool("scontrol", "ping", timeout=15, check=False)
        except DevClusterError:
            return False
        return proc.returncode == 0 and "UP" in proc.stdout

    def node_states(self) -> dict[str, str]:
        """Node name -> Slurm state (``IDLE``, ``ALLOCATED``, ``IDLE+DRAIN``, ...)."""
        proc = self.run_tool("scontrol", "show", "nodes", "-o", timeout=15, check=False)
        states: dict[str, str] = {}
        if proc.returncode != 0:
            return states
        for line in proc.stdout.splitlines():
            name = re.search(r"\bNodeName=(\S+)", line)
            state = re.search(r"\bState=(\S+)", line)
            if name and state:
                states[name.group(1)] = state.group(1)
        return states

    def wait_ready(self, timeout: float = 90) -> None:
        """Wait until slurmctld answers and every node responds and is usable."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        bad = ("DOWN", "NOT_RESPONDING", "UNKNOWN", "FAIL", "INVAL")
        while time.monotonic() < deadline:
            self._check_daemons_alive()
            states = self.node_states()
            if (set(states) == set(self.node_names)
                    and not any(b in s for s in states.values() for b in bad)):
                return
            time.sleep(0.3)
        self._check_single_slurmd_log()
        waiting = {n: s for n, s in states.items() if any(b in s for b in bad)}
        first = next(iter(waiting), self.node_names[0])
        raise DevClusterError(
            f"nodes not ready after {timeout}s: {waiting or 'no answer from slurmctld'}.\n"
            f"log {self.slurmd_log(first)}:\n{_tail(self.slurmd_log(first))}\n"
            f"log {self.ctld_log}:\n{_tail(self.ctld_log, 10)}"
        )

    def _check_daemons_alive(self) -> None:
        pid = _read_pid(self.ctld_pid_file)
        if pid is None or not _pid_alive(pid):
            raise DevClusterError(f"slurmctld is not running.\nlog {self.ctld_log}:\n"
                                  f"{_tail(self.ctld_log)}")
        for node in self.node_names:
            pid = _read_pid(self.slurmd_pid_file(node))
            if pid is None or not _pid_alive(pid):
                raise DevClusterError(f"slurmd of {node} is not running.\n"
                                      f"log {self.slurmd_log(node)}:\n"
                                      f"{_tail(self.slurmd_log(node))}")

    # ---------------------------------------------------------------- status
    def _owned_pid(self, pid_file: Path) -> int | None:
        """The pid in ``pid_file`` if that process is alive and runs with our config."""
        pid = _read_pid(pid_file)
        if pid is None or not _pid_alive(pid):
            return None
        cmd = _proc_cmdline(pid)
        # A recycled pid would not carry our slurm.conf path on its command line.
        if cmd and str(self.slurm_conf) not in cmd:
            return None
        return pid

    def _recorded_node_names(self, marker: Mapping[str, object] | None) -> list[str]:
        """The nodes the state dir's cluster was started with (they may differ from ours)."""
        names = marker.get("node_names") if marker else None
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return [str(n) for n in names]
        return self.node_names

    def status(self) -> ClusterStatus:
        """Daemons (from pid files), controller reachability and node states."""
        marker = self._read_marker()
        if marker is None:
            return ClusterStatus(self.state_dir, self.cluster_name, False, None, (), False, {},
                                 self.munged)
        ctld_pid = _read_pid(self.ctld_pid_file)
        ctld = DaemonStatus("slurmctld", ctld_pid, self._owned_pid(self.ctld_pid_file) is not None)
        slurmds = tuple(
            DaemonStatus(f"slurmd.{n}", _read_pid(self.slurmd_pid_file(n)),
                         self._owned_pid(self.slurmd_pid_file(n)) is not None)
            for n in self._recorded_node_names(marker)
        )
        responds = ctld.alive and self.controller_responds()
        states = self.node_states() if responds else {}
        munged = self.munged
        if munged == "unknown":
            munged = "running" if munge_works() else "not running"
            note = self.run_dir / "munged-started.json"
            if munged == "running" and note.exists():
                with contextlib.suppress(OSError, ValueError):
                    info = json.loads(note.read_text())
                    when = time.strftime("%Y-%m-%d %H:%M:%S",
                                         time.localtime(float(info["started_at"])))
                    munged = (f"running (started by devcluster up at {when}, pid {info['pid']}; "
                              "left running: a shared system service)")
        daemons = {d.pid for d in (ctld, *slurmds) if d.alive}
        others = sum(1 for pid in self.cluster_processes() if pid not in daemons)
        return ClusterStatus(self.state_dir, self.cluster_name, True, ctld, slurmds, responds,
                             states, munged, others)

    # ---------------------------------------------------------------- down
    def cluster_processes(self) -> dict[int, str]:
        """Every live process of this cluster except the pid-file daemons' own
        identity check: pid -> why it belongs here.

        A process belongs to this cluster when it is
        - a Slurm daemon (slurmctld, slurmd, slurmstepd, slurmscriptd) whose working
          directory is in the state dir (slurmd and slurmctld run in ``STATE/log``;
          the step daemons inherit it), or whose command line names our slurm.conf;
        - tagged ``SLURMPOLICY_DEVCLUSTER=STATE`` in its environment (22.05's
          slurmstepd keeps it; 25.11's overwrites its environment with its title);
        - a job process: its environment has our ``SLURM_CONF`` and the
          ``SLURM_JOB_ID`` and ``SLURMD_NODENAME`` a step daemon sets (this finds
          job processes whose slurmstepd is already gone; a shell that merely
          ran ``eval "$(devcluster env)"`` has no job id and is never touched);
        - or a descendant of any of those.
        Zombies are dead and left out.
        """
        me = os.getpid()
        conf = str(self.slurm_conf)
        tag = str(self.state_dir)
        found: dict[int, str] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            pid = int(entry)
            if not _pid_alive(pid):
                continue
            exe = os.path.basename(_proc_link(pid, "exe"))
            if exe.startswith(_DAEMON_EXES):
                if _within(_proc_link(pid, "cwd"), self.state_dir):
                    found[pid] = f"{exe} running in the state dir"
                    continue
                if conf in _proc_cmdline(pid):
                    found[pid] = f"{exe} with our slurm.conf"
                    continue
            env = _proc_environ(pid)
            if env.get("SLURMPOLICY_DEVCLUSTER") == tag:
                found[pid] = "tagged by our daemons' environment"
            elif (env.get("SLURM_CONF") == conf and env.get("SLURM_JOB_ID")
                  and env.get("SLURMD_NODENAME")):
                found[pid] = f"process of job {env['SLURM_JOB_ID']}"
        children = _children_map()
        for pid in list(found):
            for child in _descendants(pid, children):
                if child != me and child not in found and _pid_alive(child):
                    found[child] = f"descendant of {pid}"
        return found

    def _stepd_pids(self) -> list[int]:
        """slurmstepd processes of this cluster."""
        return [p for p in self.cluster_processes()
                if os.path.basename(_proc_link(p, "exe")).startswith("slurmstepd")
                or _proc_cmdline(p).startswith("slurmstepd")]

    def _tagged_pids(self) -> list[int]:
        """Processes of this cluster other than the pid-file daemons (kept for callers
        of the earlier, environment-tag-only name)."""
        daemons = set(self._owned_daemons().values())
        return [p for p in self.cluster_processes() if p not in daemons]

    def _owned_daemons(self) -> dict[str, int]:
        """Daemon name (``slurmctld``, ``slurmd.<node>``) -> pid, for the live ones."""
        out: dict[str, int] = {}
        pid = self._owned_pid(self.ctld_pid_file)
        if pid is not None:
            out["slurmctld"] = pid
        for node in self._recorded_node_names(self._read_marker()):
            pid = self._owned_pid(self.slurmd_pid_file(node))
            if pid is not None:
                out[f"slurmd.{node}"] = pid
        return out

    def down(self, timeout: float = 30) -> list[int]:
        """Stop the daemons ``up`` started (by pid file), then every other process of
        the cluster (job step daemons, job processes, slurmscriptd: see
        ``cluster_processes``), and wait until all are gone.

        Returns the pids it stopped. munged is never stopped: it is a shared service.
        Afterwards no process of this cluster is left, on 22.05 or 25.11 alike.
        """
        marker = self._read_marker()
        if marker is None and not self.run_dir.exists():
            return []
        nodes = self._recorded_node_names(marker)
        targets: list[int] = []
        for pid_file in [*(self.slurmd_pid_file(n) for n in nodes), self.ctld_pid_file]:
            pid = self._owned_pid(pid_file)
            if pid is not None:
                targets.append(pid)
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        self._wait_gone(targets, timeout)
        # Job steps outlive slurmd; stop them and the job processes under them,
        # and whatever else our daemons left (slurmscriptd and its scripts). A
        # job may fork while we look: look again until a scan finds nothing.
        for _ in range(10):
            leftovers = list(self.cluster_processes())
            if not leftovers:
                break
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self._wait_gone(leftovers, timeout)
            targets += [p for p in leftovers if p not in targets]
        else:
            left = self.cluster_processes()
            if left:
                raise DevClusterError(
                    f"processes of the dev cluster at {self.state_dir} keep appearing after "
                    f"10 rounds of SIGKILL: {sorted(left)}")
        for pid_file in [*(self.slurmd_pid_file(n) for n in nodes), self.ctld_pid_file]:
            pid = _read_pid(pid_file)
            if pid is None or not _pid_alive(pid):
                pid_file.unlink(missing_ok=True)
        return targets

    def _wait_gone(self, pids: Sequence[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(_pid_alive(p) for p in pids):
                return
            time.sleep(0.1)
        for pid in pids:
            if _pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
            time.sleep(0.1)
        alive = [p for p in pids if _pid_alive(p)]
        if alive:
            raise DevClusterError(f"processes {alive} did not exit after SIGKILL")

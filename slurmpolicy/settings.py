"""Settings: the site's TOML file turned into typed, frozen, validated values.

Owns the schema of ``slurmpolicy.toml`` and its defaults. Parsing is done by
the standard ``tomllib``; validation and conversion by ``msgspec``, whose
errors name the path of the bad key (``$.classes.research.weight``). We add
the file name and the cross-field checks msgspec cannot express, and raise a
single :class:`~slurmpolicy.errors.ConfigError`.

Durations in the file are Slurm-style strings ("90", "30:00", "2-00:00:00")
or numbers of seconds; they are held as seconds (float).

Every number has a finite range (``nan``, ``inf`` and values that cannot be
meant, such as a zero interval, are refused); :func:`ranges` lists them for
the docs (``slurmpolicy config ranges``). An unknown key is named with its
nearest valid key (difflib), and ``metrics.bind`` must be an IP address.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from slurmpolicy.durations import parse_duration
from slurmpolicy.errors import ConfigError

DEFAULT_PATH = Path("/etc/slurmpolicy/slurmpolicy.toml")
ENV_PATH = "SLURMPOLICY_CONFIG"

#: Slurm's limit on a site factor: ``scontrol update SiteFactor`` refuses
#: values beyond +/-(NICE_OFFSET - 3) (src/scontrol/update_job.c).
SITE_FACTOR_MAX = 2**31 - 3
_DAY = 86400.0
_YEAR = 365 * _DAY


Seconds = Annotated[float, msgspec.Meta(ge=0, le=_YEAR)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
Points = Annotated[int, msgspec.Meta(ge=0, le=SITE_FACTOR_MAX)]


class _Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class PriorityClass(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A priority class (``#SPOLICY --class=NAME``)."""

    #: Base site-factor weight; higher classes get larger values.
    weight: Points
    #: Rank: a class may preempt classes of strictly lower rank only.
    rank: Annotated[int, msgspec.Meta(ge=0, le=1000)]
    #: Jobs of this class may be preempted by higher classes.
    preemptible: bool = True
    #: When not empty, only these Slurm accounts may use the class.
    accounts: tuple[str, ...] = ()
    description: str = ""
    #: Retries after failures that are not the job's own (``#SPOLICY --retry``
    #: overrides); None: ``lifecycle.default_retries``.
    retries: Annotated[int, msgspec.Meta(ge=0, le=100)] | None = None


class FairShare(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: Guaranteed fraction of the cluster's GPUs per account; the rest is shared.
    shares: dict[str, Fraction] = msgspec.field(default_factory=dict)
    #: Half-life of decayed GPU-second usage.
    half_life: Annotated[float, msgspec.Meta(ge=60, le=10 * _YEAR)] = 7 * 86400.0
    #: Site-factor points for an account exactly at zero usage vs. its share.
    weight: Points = 10_000


class Aging(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: Site-factor points per hour of eligible wait.
    points_per_hour: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 100.0
    #: Aging stops adding after this long.
    max_age: Seconds = 7 * 86400.0
    #: Extra points per hour since the daemon first saw the job blocked by
    #: fragmentation alone (kept while it waits; docs/policy.md). Off by
    #: default: starvation reservations are what place such jobs.
    fragmentation_bonus_per_hour: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 0.0


class Priority(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: A new job's site factor is written when it differs from Slurm's by at least
    #: this much; a known job's only when its order against a competing job whose
    #: effective priority differs by at least this much is wrong (closer: a tie).
    change_threshold: Annotated[int, msgspec.Meta(ge=0, le=SITE_FACTOR_MAX)] = 50
    #: At most this many jobs get a site factor per cycle (batched: jobs sharing
    #: a value go in one Slurm call).
    max_updates_per_cycle: PositiveInt = 10_000
    #: The order check of a known job's site factor looks at the first this
    #: many jobs of the policy's order and every job Slurm ranks at or above
    #: them (and every new job); the jobs deeper in both orders keep their
    #: stale values. Slurm's schedulers reach a few hundred jobs deep
    #: (``bf_max_job_test``, 500 by default). 0: check every waiting job.
    order_depth: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 1000
    #: Site factor for --checkpoint=none jobs (0 = no penalty).
    no_checkpoint_penalty: Points = 0


class Reservations(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: A job of at least this many GPUs is "large".
    large_job_gpus: PositiveInt = 16
    #: With ``reserve_after_wait``: a large job that waited this long (and
    #: cannot start now) gets a reservation.
    starvation_wait: Seconds = 3600.0
    #: Reserve for large jobs that waited ``starvation_wait``, wherever they
    #: stand in the queue. Off by default: Slurm's backfill already plans a
    #: start for every job it tests (``bf_max_job_test``), and a reservation
    #: on top of that puts a large job ahead of the smaller jobs of higher
    #: priority (docs/policy.md, docs/simulate.md). A large job that heads its
    #: partition but is blocked by fragmentation gets one either way. Turn it
    #: on where Slurm's backfill cannot reach large jobs (``bf_window``
    #: shorter than the time limits, no backfill).
    reserve_after_wait: bool = False
    #: Prefix of reservations slurmpolicy owns; it never touches others.
    #: Never empty: with the journal's record, it tells our reservations from
    #: everyone else's (letters, digits, "_", "-" and "."; a letter first).
    name_prefix: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$")] = (
        "spolicy_")
    #: Only update a reservation when its start moved by more than this.
    update_threshold: Annotated[float, msgspec.Meta(ge=0, le=_DAY)] = 300.0
    #: At most this many starving jobs get a reservation search per cycle.
    max_per_cycle: PositiveInt = 10
    #: Length of a reservation for a job without a time limit.
    default_duration: Annotated[float, msgspec.Meta(ge=60, le=_YEAR)] = 86400.0


class Preemption(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True
    #: A job younger than this is never a victim.
    min_runtime: Seconds = 600.0
    #: Grace when a job did not say how long its checkpoint takes.
    default_grace: Annotated[float, msgspec.Meta(ge=1, le=_DAY)] = 120.0
    #: Most times one job may be preempted in a rolling day.
    max_per_job_per_day: PositiveInt = 3
    #: Estimated cost of restarting a job (restore + warm-up), in seconds of its GPUs.
    restart_cost: Annotated[float, msgspec.Meta(ge=0, le=_DAY)] = 300.0
    #: GPU-seconds that one second of a beneficiary's wait for its victims'
    #: saves costs, per GPU it takes on the host, when victims are chosen.
    #: 1 counts its idle GPUs alone; higher values choose fast savers (a sooner
    #: start, fewer GPUs idle in grace) over victims with less to restart.
    wait_weight: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 16.0
    #: --checkpoint=none jobs are allowed only in these partitions (empty: anywhere).
    no_checkpoint_partitions: tuple[str, ...] = ()
    #: Victims a single beneficiary may claim per cycle.
    max_victims_per_job: PositiveInt = 16
    #: A victim that never acknowledged a promised checkpoint this many times
    #: counts as unable to checkpoint.
    missed_ack_limit: PositiveInt = 1
    #: At most this many new preemptions start per cycle.
    max_per_cycle: PositiveInt = 4
    #: At most this many waiting jobs get a victim search per cycle.
    max_searches_per_cycle: PositiveInt = 16
    #: Abort a preemption whose beneficiary has not started this long after it began.
    beneficiary_start_timeout: Annotated[float, msgspec.Meta(ge=60, le=7 * _DAY)] = 1800.0
    #: Shrink an elastic victim (--nodes=MIN-MAX, checkpoints) instead of evicting
    #: it when MIN of its nodes are left (policy/elastic.py).
    shrink_elastic: bool = True


class Window(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: Hours of the day (UTC, 0..23) this window covers.
    hours: tuple[Annotated[int, msgspec.Meta(ge=0, le=23)], ...]
    #: Relative cost (price or carbon intensity); lower is better.
    cost: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 1.0


class Deferral(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: Named windows that `--deferrable=NAME` may ask for.
    windows: dict[str, Window] = msgspec.field(default_factory=dict)
    #: Release deferred jobs at once when fewer GPUs than this fraction are in use.
    idle_release_fraction: Fraction = 0.5


class Fabric(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: topology.conf to read; empty: the one beside the active slurm.conf.
    topology_conf: str = ""
    #: Our own TOML fabric file; empty: none.
    fabric_file: str = ""
    #: Per-host `nvidia-smi topo -m` outputs, a glob; empty: none.
    nvidia_smi_topo: str = ""
    #: Per-host `rocm-smi --showtopo` outputs (AMD), a glob; empty: none.
    rocm_smi_topo: str = ""
    #: Node features read as domains, e.g. nvl_rack1 -> nvlink domain.
    nvlink_feature_prefix: str = "nvl_"
    leaf_feature_prefix: str = "leaf"


class Slurm(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: "auto", "jsoncli" or "pyslurm".
    adapter: str = "auto"
    #: Directory holding squeue, sinfo, scontrol; empty: $PATH.
    bin_dir: str = ""
    #: Seconds before a Slurm command is given up.
    command_timeout: Annotated[float, msgspec.Meta(ge=1, le=600)] = 30.0


class Daemon(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    state_dir: str = "/var/lib/slurmpolicy"
    #: Seconds between cycles.
    interval: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 30.0
    #: Seconds between cycles while a signalled victim is awaited (its ack or
    #: deadline decides its requeue); the shorter of this and ``interval``.
    preemption_poll: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 5.0
    #: Seconds between looks at the signalled victims (one ``jobs()`` call)
    #: between those cycles: an ack, a victim gone or a deadline passed starts
    #: the next cycle at once, so a victim does not train on for up to
    #: ``preemption_poll`` seconds after its save, work its requeue throws away.
    #: 0: no looks.
    ack_poll: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 1.0
    #: Skip a cycle whose snapshot is older than this.
    max_snapshot_age: Annotated[float, msgspec.Meta(ge=1, le=_DAY)] = 60.0
    #: At most this many Slurm calls that change something, per cycle.
    max_slurm_calls_per_cycle: PositiveInt = 100
    #: Longest back-off after Slurm failures.
    max_backoff: Annotated[float, msgspec.Meta(ge=1, le=_DAY)] = 300.0
    #: Metrics history and finished journal steps older than this are pruned
    #: (the audit is kept).
    keep_history: Annotated[float, msgspec.Meta(ge=3600, le=10 * _YEAR)] = 30 * 86400.0
    #: One active daemon per cluster: the lease in Slurm (a reservation named
    #: ``<name_prefix>lease``) is taken over by a standby daemon once its holder
    #: has not renewed it for this long. 0 turns the lease off.
    lease_ttl: Annotated[float, msgspec.Meta(ge=0, le=_DAY)] = 90.0


class Metrics(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True
    #: Address of the Prometheus endpoint; localhost unless configured.
    bind: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 9810


class Plugin(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """What the job_submit Lua plugin is rendered with (``slurmpolicy plugin render``)."""

    #: Uids that may change a job's admin_comment, or move a job past a
    #: directive restriction, through ``scontrol update`` (root, the daemon's user).
    admin_uids: tuple[Annotated[int, msgspec.Meta(ge=0, le=2**32 - 2)], ...] = (0,)
    #: Set ``requeue=1`` on jobs that can checkpoint (preemption requeues them).
    set_requeue: bool = True
    #: Set the job's site factor to its class weight at submission, so that a
    #: production job has its standing before the daemon's next cycle (Slurm
    #: lets only the job_submit plugin set ``site_factor`` at submit).
    set_site_factor: bool = True
    #: The submit doorbell: a file the plugin rewrites when it accepts a job of a
    #: class that preempts and is never preempted (:func:`doorbell_classes`); the
    #: daemon, between cycles, looks at its mtime every ``daemon.preemption_poll``
    #: seconds and runs a cycle early when it changed. An absolute path; "": off.
    doorbell: str = "/run/slurmpolicy/doorbell"


class Lifecycle(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Failed jobs resumed from their checkpoint, job timelines (docs/lifecycle.md)."""

    #: Requeue checkpointing jobs that failed for a reason not their own.
    retry: bool = True
    #: Retries of a job whose class and directives say nothing.
    default_retries: Annotated[int, msgspec.Meta(ge=0, le=100)] = 2
    #: Largest ``#SPOLICY --retry=N`` accepted at submit time.
    max_retries: Annotated[int, msgspec.Meta(ge=0, le=100)] = 10
    #: First back-off before a retried job may start again; doubles per retry.
    backoff: Seconds = 60.0
    #: Longest back-off.
    max_backoff: Seconds = 1800.0
    #: A job that fails this soon after its start failed to start up.
    startup_window: Seconds = 300.0
    #: Exit codes that mean a hardware fault (GPU Xid handlers, NCCL watchdogs...).
    hardware_exit_codes: tuple[Annotated[int, msgspec.Meta(ge=1, le=255)], ...] = ()
    #: Exit codes that, within ``startup_window``, mean a start-up fault of the
    #: platform (container pull, NCCL init) rather than of the job.
    startup_exit_codes: tuple[Annotated[int, msgspec.Meta(ge=1, le=255)], ...] = ()
    #: Timelines of finished jobs are kept this long.
    keep_timelines: Seconds = 14 * 86400.0
    #: At most this many timeline events per job (the oldest waits are merged).
    max_events_per_job: Annotated[int, msgspec.Meta(ge=10, le=10000)] = 200


class NodeHealth(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Drain nodes on which jobs of different users keep failing (opt-in)."""

    #: Drain suspect nodes; False: only show suspicion (nodes, top, log).
    drain: bool = False
    #: Failures count within this window.
    window: Seconds = 3600.0
    #: Failed jobs (not their own fault) on a node before it is drained ...
    min_failures: PositiveInt = 3
    #: ... of at least this many different users.
    min_users: PositiveInt = 2
    #: Never more than this share of the cluster's nodes drained by slurmpolicy.
    max_drained_share: Fraction = 0.1
    #: Start of the drain reasons slurmpolicy writes (it reads them back).
    reason_prefix: str = "spolicy:"


class Pool(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A pool: one Slurm partition and the hardware in it (``[pools.NAME]``).

    job_submit.lua routes a job that names no partition to the first pool, in
    the file's order, that accepts it and can ever run it (:mod:`slurmpolicy.pools`).
    Hardware fields left at 0 or empty are not checked.
    """

    #: The Slurm partition of the pool; empty: the pool's own name.
    partition: str = ""
    #: Classes the pool takes; empty: every class.
    classes: tuple[str, ...] = ()
    #: GPU gres types of its nodes (h100, mi250, 1g.10gb for MIG slices); empty: any.
    gpu_types: tuple[str, ...] = ()
    #: GPU vendor of its nodes (nvidia, amd, intel); empty: from the known gpu_types.
    vendor: str = ""
    #: GPUs (or GPU slices) per node.
    gpus_per_node: Annotated[int, msgspec.Meta(ge=0, le=1024)] = 0
    #: Nodes in the pool.
    nodes: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 0
    #: Memory of one GPU (or slice) in whole GB.
    gpu_memory_gb: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 0
    #: A job takes this pool only with at least this many GPUs in all.
    min_gpus: Annotated[int, msgspec.Meta(ge=0, le=10_000_000)] = 0
    #: ... and at most this many (0: no upper bound).
    max_gpus: Annotated[int, msgspec.Meta(ge=0, le=10_000_000)] = 0
    #: The pool's GPUs are slices (MIG or shards): one job gets at most one.
    slices: bool = False
    #: Only jobs that name one of its GPU types or its vendor (``--gres=gpu:mi300x:8``,
    #: ``#SPOLICY --gpu-type=amd``) go there: e.g. another vendor's GPUs, which a
    #: job that says nothing was most likely not built for.
    typed_only: bool = False
    description: str = ""

    @property
    def capacity(self) -> int:
        return self.nodes * self.gpus_per_node


def _default_classes() -> dict[str, PriorityClass]:
    return {
        "production": PriorityClass(weight=100_000, rank=3, preemptible=False,
                                    description="deadline-bound, never preempted"),
        "research": PriorityClass(weight=10_000, rank=2, preemptible=True,
                                  description="default class, preemptible by production"),
        "experimental": PriorityClass(weight=0, rank=1, preemptible=True,
                                      description="best effort, first to be preempted"),
    }


class Settings(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    classes: dict[str, PriorityClass] = msgspec.field(default_factory=_default_classes)
    #: Class of a job without --class.
    default_class: str = "research"
    fairshare: FairShare = msgspec.field(default_factory=FairShare)
    aging: Aging = msgspec.field(default_factory=Aging)
    priority: Priority = msgspec.field(default_factory=Priority)
    reservations: Reservations = msgspec.field(default_factory=Reservations)
    preemption: Preemption = msgspec.field(default_factory=Preemption)
    deferral: Deferral = msgspec.field(default_factory=Deferral)
    fabric: Fabric = msgspec.field(default_factory=Fabric)
    slurm: Slurm = msgspec.field(default_factory=Slurm)
    daemon: Daemon = msgspec.field(default_factory=Daemon)
    metrics: Metrics = msgspec.field(default_factory=Metrics)
    plugin: Plugin = msgspec.field(default_factory=Plugin)
    lifecycle: Lifecycle = msgspec.field(default_factory=Lifecycle)
    node_health: NodeHealth = msgspec.field(default_factory=NodeHealth)
    #: Pools in routing order (empty: no routing; jobs go where they say).
    pools: dict[str, Pool] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default_class not in self.classes:
            raise ValueError(
                f"default_class {self.default_class!r} is not one of the classes "
                f"({', '.join(sorted(self.classes))}) - at `$.default_class`"
            )
        total = sum(self.fairshare.shares.values())
        if total > 1.0 + 1e-9:
            raise ValueError(
                f"fairshare shares add up to {total:.3f}; they must not exceed 1.0"
                " - at `$.fairshare.shares`"
            )
        if self.slurm.adapter not in ("auto", "jsoncli", "pyslurm"):
            raise ValueError(
                f"unknown adapter {self.slurm.adapter!r}; allowed: auto, jsoncli, pyslurm"
                " - at `$.slurm.adapter`"
            )
        check_bind(self.metrics.bind)
        check_doorbell(self.plugin.doorbell)
        parts = site_factor_parts(self)
        highest = sum(parts.values())
        if highest > SITE_FACTOR_MAX:
            largest = max(parts, key=lambda k: parts[k])
            raise ValueError(
                f"the largest site factor these settings can give is {highest}, beyond Slurm's"
                f" limit {SITE_FACTOR_MAX}; lower the class weights, fairshare.weight or the"
                f" aging points (points_per_hour x max_age hours) - at `$.{largest}`"
            )

        for pool_name, pool in self.pools.items():
            unknown = [c for c in pool.classes if c not in self.classes]
            if unknown:
                raise ValueError(
                    f"pool {pool_name!r} names unknown class(es) {', '.join(unknown)}; allowed: "
                    f"{', '.join(self.classes)} - at `$.pools.{pool_name}.classes`"
                )
            if pool.max_gpus and pool.max_gpus < pool.min_gpus:
                raise ValueError(
                    f"pool {pool_name!r}: max_gpus {pool.max_gpus} is below min_gpus "
                    f"{pool.min_gpus} - at `$.pools.{pool_name}.max_gpus`"
                )

    def class_of(self, name: str | None) -> PriorityClass:
        return self.classes[name or self.default_class]

    def retries_of(self, class_name: str | None, asked: int | None) -> int:
        """Retries a job gets: its ``--retry``, else its class's, else the default."""
        if asked is not None:
            return asked
        cls = self.classes.get(class_name or self.default_class)
        if cls is not None and cls.retries is not None:
            return cls.retries
        return self.lifecycle.default_retries


def check_bind(bind: str) -> None:
    """``metrics.bind`` is an IPv4/IPv6 address or ``localhost``; ValueError otherwise."""
    if bind == "localhost":
        return
    try:
        ipaddress.ip_address(bind)
    except ValueError:
        raise ValueError(
            f"metrics.bind {bind!r} is not an IP address; allowed: an IPv4 or IPv6 address"
            " (127.0.0.1, ::1, 0.0.0.0 for every interface) or localhost - at `$.metrics.bind`"
        ) from None


def check_doorbell(path: str) -> None:
    """``plugin.doorbell`` is "" (off) or an absolute path; ValueError otherwise."""
    if path == "":
        return
    if not path.startswith("/") or any(ord(c) < 0x20 or c == "\x7f" for c in path):
        raise ValueError(
            f"plugin.doorbell {path!r} is not an absolute path; allowed: an absolute path"
            " without control characters (/run/slurmpolicy/doorbell), or \"\" to turn the"
            " doorbell off - at `$.plugin.doorbell`"
        )


def doorbell_classes(s: Settings) -> list[str]:
    """Classes whose accepted jobs ring the doorbell: never preempted, and ranked
    above the lowest preemptible class (so they may need a preemption to start)."""
    ranks = [c.rank for c in s.classes.values() if c.preemptible]
    if not ranks:
        return []
    low = min(ranks)
    return [name for name, c in s.classes.items() if not c.preemptible and c.rank > low]


def site_factor_parts(s: Settings) -> dict[str, int]:
    """The largest share of a site factor each setting can give, by its key."""
    hours = s.aging.max_age / 3600.0
    heaviest = max(s.classes, key=lambda name: s.classes[name].weight, default="")
    return {
        f"classes.{heaviest}.weight" if heaviest else "classes":
            s.classes[heaviest].weight if heaviest else 0,
        "fairshare.weight": s.fairshare.weight,
        "aging.points_per_hour": round(hours * s.aging.points_per_hour),
        "aging.fragmentation_bonus_per_hour": round(hours * s.aging.fragmentation_bonus_per_hour),
    }


def max_site_factor(s: Settings) -> int:
    """The largest site factor the priority rules can compute under ``s``."""
    return int(sum(site_factor_parts(s).values()))


_DURATION_KEYS = {
    ("fairshare", "half_life"), ("aging", "max_age"), ("reservations", "starvation_wait"),
    ("reservations", "update_threshold"), ("preemption", "min_runtime"),
    ("preemption", "default_grace"), ("preemption", "restart_cost"),
    ("preemption", "beneficiary_start_timeout"), ("reservations", "default_duration"),
    ("daemon", "interval"), ("daemon", "preemption_poll"), ("daemon", "ack_poll"),
    ("daemon", "max_snapshot_age"),
    ("daemon", "max_backoff"),
    ("daemon", "keep_history"), ("daemon", "lease_ttl"),
    ("slurm", "command_timeout"),
    ("lifecycle", "backoff"), ("lifecycle", "max_backoff"), ("lifecycle", "startup_window"),
    ("lifecycle", "keep_timelines"), ("node_health", "window"),
}


def from_mapping(data: Mapping[str, Any], source: str = "<settings>") -> Settings:
    """Validate a parsed mapping; raise ConfigError naming ``source`` and the key."""
    converted: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v)
                                 for k, v in data.items()}
    for section, key in _DURATION_KEYS:
        table = converted.get(section)
        if isinstance(table, dict) and isinstance(table.get(key), str):
            try:
                table[key] = parse_duration(table[key])
            except ValueError as exc:
                raise ConfigError(f"{source}: {exc} - at `$.{section}.{key}`") from exc
    bad = _non_finite(converted)
    if bad:
        allowed = _allowed(bad[2:])
        raise ConfigError(f"{source}: not a finite number (nan and inf are refused)"
                          + (f"; allowed: {allowed}" if allowed else "") + f" - at `{bad}`")
    try:
        return msgspec.convert(converted, Settings, strict=True)
    except msgspec.ValidationError as exc:
        message = _name_table_key(converted, str(exc))
        raise ConfigError(f"{source}: {_suggest(message)}") from exc
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from exc


#: Tables whose keys are names the site chose; msgspec writes them as ``[...]``.
_NAMED_TABLES: tuple[tuple[tuple[str, ...], type[msgspec.Struct]], ...] = (
    (("classes",), PriorityClass),
    (("deferral", "windows"), Window),
    (("pools",), Pool),
)


def _name_table_key(data: Mapping[str, Any], message: str) -> str:
    """Put the name of the bad entry where msgspec wrote ``[...]``."""
    for path, kind in _NAMED_TABLES:
        dotted = "$." + ".".join(path)
        if f"{dotted}[...]" not in message:
            continue
        table: Any = data
        for part in path:
            table = table.get(part, {}) if isinstance(table, Mapping) else {}
        if not isinstance(table, Mapping):
            continue
        for name, value in table.items():
            try:
                msgspec.convert(value, kind, strict=True)
            except msgspec.ValidationError as inner:
                text, _, where = str(inner).rpartition(" - at `$")
                if not text:  # the problem is the entry itself (an unknown key)
                    return f"{inner} - at `{dotted}.{name}`"
                return f"{text} - at `{dotted}.{name}{where}"
    return message


_UNKNOWN = re.compile(r"unknown field `(?P<key>[^`]*)`(?: - at `\$(?P<path>[^`]*)`)?")
_BOUND = re.compile(r"^Expected `(?:float|int)` [<>]=? \S+ - at `\$\.(?P<path>[^`]*)`$")


def _struct_at(path: str) -> type[msgspec.Struct] | None:
    """The settings struct a ``$.a.b`` path of msgspec's message points into."""
    kind: Any = Settings
    for part in [p for p in re.split(r"\.|\[[^]]*\]", path) if p]:
        fields = {f.name: f.type for f in msgspec.structs.fields(kind)}
        kind = fields.get(part)
        # dict[str, Struct] (classes, windows): the entry's struct.
        args = getattr(kind, "__args__", ())
        if args and isinstance(args[-1], type) and issubclass(args[-1], msgspec.Struct):
            kind = args[-1]
        if not (isinstance(kind, type) and issubclass(kind, msgspec.Struct)):
            return None
    return kind if isinstance(kind, type) else None


def _suggest(message: str) -> str:
    """An unknown key's message, with the nearest valid key of its table."""
    bound = _BOUND.match(message)
    if bound:
        allowed = _allowed(bound.group("path"))
        return f"{message}; allowed: {allowed}" if allowed else message
    m = _UNKNOWN.search(message)
    if not m:
        return message
    path = m.group("path") or ""
    # A named entry (classes.gpu) is a struct under a dict: look one level up too.
    kind = _struct_at(path) or _struct_at(re.sub(r"\.[^.]*$", "", path))
    if kind is None:
        return message
    valid = [f.name for f in msgspec.structs.fields(kind)]
    near = difflib.get_close_matches(m.group("key"), valid, n=1, cutoff=0.6)
    hint = f"did you mean `{near[0]}`?" if near else f"allowed: {', '.join(sorted(valid))}"
    return f"{message}; {hint}"


def _allowed(path: str) -> str:
    """The documented range of the setting at ``a.b.c`` (named entries as NAME)."""
    wanted = re.sub(r"^(classes|deferral\.windows)\.[^.]+\.", r"\1.NAME.", path)
    wanted = re.sub(r"\[\d+\]$", "", wanted)
    for key, allowed, _ in ranges():
        if key == wanted or (key == "fairshare.shares" and wanted.startswith(key + ".")):
            return allowed
    return ""


def _non_finite(data: Any, path: str = "$") -> str | None:
    """The path of the first nan or inf in a parsed mapping (TOML allows both)."""
    if isinstance(data, float) and not math.isfinite(data):
        return path
    items = data.items() if isinstance(data, Mapping) else (
        enumerate(data) if isinstance(data, (list, tuple)) else ())
    for key, value in items:
        found = _non_finite(value, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")
        if found:
            return found
    return None


def ranges() -> list[tuple[str, str, str]]:
    """(key, allowed range, default) of every number in the settings, for the docs."""
    out: list[tuple[str, str, str]] = []

    def walk(kind: type[msgspec.Struct], prefix: str, default: Any) -> None:
        for f in msgspec.structs.fields(kind):
            value = getattr(default, f.name, None) if default is not None else None
            t = f.type
            inner = getattr(t, "__args__", ())
            if isinstance(t, type) and issubclass(t, msgspec.Struct):
                walk(t, f"{prefix}{f.name}.", value)
                continue
            if inner and isinstance(inner[-1], type) and issubclass(inner[-1], msgspec.Struct):
                walk(inner[-1], f"{prefix}{f.name}.NAME.", None)
                continue
            meta = [m for m in getattr(t, "__metadata__", ()) if isinstance(m, msgspec.Meta)]
            if not meta and inner:  # tuple[Annotated[...], ...], dict[str, Annotated]
                for arg in inner:
                    meta = [m for m in getattr(arg, "__metadata__", ())
                            if isinstance(m, msgspec.Meta)]
                    if meta:
                        break
            meta = [m for m in meta if m.ge is not None or m.le is not None]
            if not meta:
                continue  # not a number (a pattern on a string)
            lo, hi = meta[0].ge, meta[0].le
            shown = "" if value is None else _show(value)
            out.append((prefix + f.name, f"{_show(lo)} .. {_show(hi)}", shown))

    walk(Settings, "", Settings())
    return out


def _show(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def _target(path: str | os.PathLike[str] | None) -> Path:
    """The file :func:`load` reads: ``path``, $SLURMPOLICY_CONFIG, else the default."""
    return Path(path if path is not None else os.environ.get(ENV_PATH, DEFAULT_PATH))


def _notices_of(data: Mapping[str, Any], target: Path) -> list[str]:
    """What the settings file ``target`` (parsed into ``data``) sets that its other
    keys make do nothing, each a sentence naming the file, the key and what to
    do (:func:`load_with_notices` hands them on)."""
    out: list[str] = []
    res = data.get("reservations")
    # Before reserve_after_wait existed, starvation_wait alone turned the rule
    # on: a file written then, which does not name reserve_after_wait, means it.
    if isinstance(res, dict) and "starvation_wait" in res and "reserve_after_wait" not in res:
        out.append(
            f"{target}: reservations.starvation_wait does nothing unless "
            "reservations.reserve_after_wait = true: large jobs that only waited get no "
            "reservation by default (Slurm's backfill plans their start; docs/policy.md). "
            "Set reserve_after_wait = true to keep that rule, or false to say you do not "
            "want it")
    return out


def load(path: str | os.PathLike[str] | None = None) -> Settings:
    """Load settings from ``path``, $SLURMPOLICY_CONFIG, or the default path.

    A missing default file gives the shipped defaults; a missing file that was
    asked for by name is an error.
    """
    return load_with_notices(path)[0]


def load_with_notices(path: str | os.PathLike[str] | None = None,
                      ) -> tuple[Settings, list[str]]:
    """:func:`load`, and what the same reading of the file sets that its other keys
    make do nothing (``config check`` prints them, the daemon logs them at start
    and reload); no notes without a file."""
    explicit = path is not None or ENV_PATH in os.environ
    target = _target(path)
    if not target.exists():
        if explicit:
            raise ConfigError(f"{target}: settings file not found")
        return Settings(), []
    try:
        data = tomllib.loads(target.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{target}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{target}: cannot read: {exc.strerror}") from exc
    return from_mapping(data, str(target)), _notices_of(data, target)

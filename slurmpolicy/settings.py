"""Settings: the site's TOML file turned into typed, frozen, validated values.

Owns the schema of ``slurmpolicy.toml`` and its defaults. Parsing is done by
the standard ``tomllib``; validation and conversion by ``msgspec``, whose
errors name the path of the bad key (``$.classes.research.weight``). We add
the file name and the cross-field checks msgspec cannot express, and raise a
single :class:`~slurmpolicy.errors.ConfigError`.

Durations in the file are Slurm-style strings ("90", "30:00", "2-00:00:00")
or numbers of seconds; they are held as seconds (float).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from slurmpolicy.durations import parse_duration
from slurmpolicy.errors import ConfigError

DEFAULT_PATH = Path("/etc/slurmpolicy/slurmpolicy.toml")
ENV_PATH = "SLURMPOLICY_CONFIG"

Seconds = Annotated[float, msgspec.Meta(ge=0)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]


class _Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class PriorityClass(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A priority class (``#SPOLICY --class=NAME``)."""

    #: Base site-factor weight; higher classes get larger values.
    weight: int
    #: Rank: a class may preempt classes of strictly lower rank only.
    rank: int
    #: Jobs of this class may be preempted by higher classes.
    preemptible: bool = True
    #: When not empty, only these Slurm accounts may use the class.
    accounts: tuple[str, ...] = ()
    description: str = ""


class FairShare(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: Guaranteed fraction of the cluster's GPUs per account; the rest is shared.
    shares: dict[str, Fraction] = msgspec.field(default_factory=dict)
    #: Half-life of decayed GPU-second usage.
    half_life: Seconds = 7 * 86400.0
    #: Site-factor points for an account exactly at zero usage vs. its share.
    weight: int = 10_000


class Aging(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: Site-factor points per hour of eligible wait.
    points_per_hour: float = 100.0
    #: Aging stops adding after this long.
    max_age: Seconds = 7 * 86400.0
    #: Extra points per hour for a job blocked only by fragmentation.
    fragmentation_bonus_per_hour: float = 200.0


class Priority(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: Emit a new site factor only when it moved by at least this much.
    change_threshold: int = 50
    #: At most this many site-factor updates per cycle.
    max_updates_per_cycle: PositiveInt = 200
    #: Site factor for --checkpoint=none jobs (0 = no penalty).
    no_checkpoint_penalty: int = 0


class Reservations(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: A job of at least this many GPUs is "large".
    large_job_gpus: PositiveInt = 16
    #: A large job that waited this long gets a reservation.
    starvation_wait: Seconds = 3600.0
    #: Prefix of reservations slurmpolicy owns; it never touches others.
    #: Never empty: with the journal's record, it tells our reservations from
    #: everyone else's (letters, digits, "_", "-" and "."; a letter first).
    name_prefix: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$")] = (
        "spolicy_")
    #: Only update a reservation when its start moved by more than this.
    update_threshold: Seconds = 300.0
    #: At most this many starving jobs get a reservation search per cycle.
    max_per_cycle: PositiveInt = 10
    #: Length of a reservation for a job without a time limit.
    default_duration: Seconds = 86400.0


class Preemption(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True
    #: A job younger than this is never a victim.
    min_runtime: Seconds = 600.0
    #: Grace when a job did not say how long its checkpoint takes.
    default_grace: Seconds = 120.0
    #: Most times one job may be preempted in a rolling day.
    max_per_job_per_day: PositiveInt = 3
    #: Estimated cost of restarting a job (restore + warm-up), in seconds of its GPUs.
    restart_cost: Seconds = 300.0
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
    beneficiary_start_timeout: Seconds = 1800.0


class Window(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: Hours of the day (UTC, 0..23) this window covers.
    hours: tuple[Annotated[int, msgspec.Meta(ge=0, le=23)], ...]
    #: Relative cost (price or carbon intensity); lower is better.
    cost: float = 1.0


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
    #: Node features read as domains, e.g. nvl_rack1 -> nvlink domain.
    nvlink_feature_prefix: str = "nvl_"
    leaf_feature_prefix: str = "leaf"


class Slurm(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    #: "auto", "jsoncli" or "pyslurm".
    adapter: str = "auto"
    #: Directory holding squeue, sinfo, scontrol; empty: $PATH.
    bin_dir: str = ""
    #: Seconds before a Slurm command is given up.
    command_timeout: Seconds = 30.0


class Daemon(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    state_dir: str = "/var/lib/slurmpolicy"
    #: Seconds between cycles.
    interval: Seconds = 30.0
    #: Seconds between cycles while a signalled victim is awaited (its ack or
    #: deadline decides its requeue); the shorter of this and ``interval``.
    preemption_poll: Annotated[float, msgspec.Meta(ge=1.0)] = 5.0
    #: Skip a cycle whose snapshot is older than this.
    max_snapshot_age: Seconds = 60.0
    #: At most this many Slurm calls that change something, per cycle.
    max_slurm_calls_per_cycle: PositiveInt = 100
    #: Longest back-off after Slurm failures.
    max_backoff: Seconds = 300.0
    #: Metrics history and finished journal steps older than this are pruned
    #: (the audit is kept).
    keep_history: Seconds = 30 * 86400.0
    #: One active daemon per cluster: the lease in Slurm (a reservation named
    #: ``<name_prefix>lease``) is taken over by a standby daemon once its holder
    #: has not renewed it for this long. 0 turns the lease off.
    lease_ttl: Seconds = 90.0


class Metrics(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True
    #: Address of the Prometheus endpoint; localhost unless configured.
    bind: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 9810


class Plugin(_Section, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """What the job_submit Lua plugin is rendered with (``slurmpolicy plugin render``)."""

    #: Uids that may change a job's admin_comment, or move a job past a
    #: directive restriction, through ``scontrol update`` (root, the daemon's user).
    admin_uids: tuple[Annotated[int, msgspec.Meta(ge=0)], ...] = (0,)
    #: Set ``requeue=1`` on jobs that can checkpoint (preemption requeues them).
    set_requeue: bool = True


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

    def class_of(self, name: str | None) -> PriorityClass:
        return self.classes[name or self.default_class]


_DURATION_KEYS = {
    ("fairshare", "half_life"), ("aging", "max_age"), ("reservations", "starvation_wait"),
    ("reservations", "update_threshold"), ("preemption", "min_runtime"),
    ("preemption", "default_grace"), ("preemption", "restart_cost"),
    ("preemption", "beneficiary_start_timeout"), ("reservations", "default_duration"),
    ("daemon", "interval"), ("daemon", "preemption_poll"), ("daemon", "max_snapshot_age"),
    ("daemon", "max_backoff"),
    ("daemon", "keep_history"), ("daemon", "lease_ttl"),
    ("slurm", "command_timeout"),
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
    try:
        return msgspec.convert(converted, Settings, strict=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {_name_table_key(converted, str(exc))}") from exc
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from exc


#: Tables whose keys are names the site chose; msgspec writes them as ``[...]``.
_NAMED_TABLES: tuple[tuple[tuple[str, ...], type[msgspec.Struct]], ...] = (
    (("classes",), PriorityClass),
    (("deferral", "windows"), Window),
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
                return f"{text} - at `{dotted}.{name}{where}" if text else message
    return message


def load(path: str | os.PathLike[str] | None = None) -> Settings:
    """Load settings from ``path``, $SLURMPOLICY_CONFIG, or the default path.

    A missing default file gives the shipped defaults; a missing file that was
    asked for by name is an error.
    """
    explicit = path is not None or ENV_PATH in os.environ
    target = Path(path if path is not None else os.environ.get(ENV_PATH, DEFAULT_PATH))
    if not target.exists():
        if explicit:
            raise ConfigError(f"{target}: settings file not found")
        return Settings()
    try:
        data = tomllib.loads(target.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{target}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{target}: cannot read: {exc.strerror}") from exc
    return from_mapping(data, str(target))

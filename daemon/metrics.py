"""The daemon's figures: a Prometheus endpoint (prometheus-client, its own
registry, bound to ``settings.metrics.bind``, localhost by default) and the
same figures written each cycle to the journal's metrics history.

Owns the metric names (documented in docs/daemon.md) and how each figure is
computed from a snapshot, the executor's cycle report and the fabric.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from slurmpolicy.jobpolicy import parse_admin_comment
from slurmpolicy.model import Snapshot
from slurmpolicy.settings import Settings
from slurmpolicy.topology.slices import node_free

log = logging.getLogger("slurmpolicy.daemon")

Figure = tuple[str, Mapping[str, str], float]


def snapshot_figures(snapshot: Snapshot, settings: Settings, now: float,
                     fabric: Any = None) -> list[Figure]:
    """Gauges read off the cluster: GPUs by state, waits by class, fragmentation."""
    out: list[Figure] = []
    allocated = idle = unavailable = 0
    free: dict[str, int] = {}
    free_slices: dict[str, int] = {}
    for node in snapshot.nodes:
        allocated += node.gpus_alloc
        if node.schedulable:
            idle += max(0, node.gpus - node.gpus_alloc)
            # Whole GPUs and GPU slices (MIG, shards) apart (topology/slices.py).
            free[node.name], free_slices[node.name] = node_free(node)
        else:
            unavailable += max(0, node.gpus - node.gpus_alloc)
    out += [("slurmpolicy_gpus", {"state": "allocated"}, allocated),
            ("slurmpolicy_gpus", {"state": "idle"}, idle),
            ("slurmpolicy_gpus", {"state": "unavailable"}, unavailable)]
    waits: dict[str, list[float]] = defaultdict(list)
    for job in snapshot.pending():
        since = job.eligible_time or job.submit_time
        if since is None:
            continue
        name = parse_admin_comment(job.admin_comment).job_class or settings.default_class
        waits[name].append(max(0.0, now - since))
    for name in sorted(set(settings.classes) | set(waits)):
        values = waits.get(name, [])
        out.append(("slurmpolicy_pending_jobs", {"class": name}, len(values)))
        out.append(("slurmpolicy_wait_seconds", {"class": name, "stat": "mean"},
                    sum(values) / len(values) if values else 0.0))
        out.append(("slurmpolicy_wait_seconds", {"class": name, "stat": "max"},
                    max(values) if values else 0.0))
    if fabric is not None:
        try:
            frag = fabric.fragmentation(free, free_slices=free_slices)
        except Exception as exc:  # a fabric bug must not stop the daemon's figures
            log.warning("fragmentation not computed: %s", exc)
        else:
            out.append(("slurmpolicy_fragmentation_index", {}, float(frag.index)))
            out.append(("slurmpolicy_stranded_gpus", {}, float(frag.stranded_gpus)))
            if frag.slices:
                out.append(("slurmpolicy_gpu_slices", {"state": "free"}, float(frag.free_slices)))
                out.append(("slurmpolicy_gpu_slices", {"state": "all"}, float(frag.slices)))
    return out


#: The checkpoint success ratio and mean signal-to-ack time are over this window.
CHECKPOINT_WINDOW = 86400.0
#: Buckets of the signal-to-acknowledgement histogram, in seconds.
ACK_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 90, 120, 300, 600, 1800)


def checkpoint_figures(outcomes: Mapping[str, Mapping[str, Any]]) -> list[Figure]:
    """By protocol, over the journal's last day of signalled victims (see
    Journal.checkpoint_outcomes): the share that acknowledged (by an ack, a
    self-requeue or a save-and-exit) and the mean signal-to-ack time."""
    out: list[Figure] = []
    for protocol, o in sorted(outcomes.items()):
        if not o["signalled"]:
            continue
        labels = {"protocol": protocol}
        out.append(("slurmpolicy_checkpoint_success_ratio", labels,
                    o["acknowledged"] / o["signalled"]))
        times = o["ack_seconds"]
        if times:
            out.append(("slurmpolicy_checkpoint_ack_seconds_mean", labels,
                        sum(times) / len(times)))
    return out


class Metrics:
    """Prometheus metrics of one daemon; ``serve()`` starts the endpoint."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.cycle_seconds = Gauge("slurmpolicy_cycle_seconds",
                                   "Duration of the last cycle", registry=r)
        self.cycles = Counter("slurmpolicy_cycles", "Cycles by result", ["result"], registry=r)
        self.slurm_calls = Counter("slurmpolicy_slurm_calls",
                                   "Slurm calls that change something", registry=r)
        self.actions = Counter("slurmpolicy_actions", "Actions by kind and outcome",
                               ["kind", "outcome"], registry=r)
        self.deferred = Counter("slurmpolicy_actions_deferred",
                                "Actions left for the next cycle (call budget)", registry=r)
        self.in_flight = Gauge("slurmpolicy_preemptions_in_flight",
                               "Open preemptions", registry=r)
        self.acks = Counter("slurmpolicy_checkpoint_acks",
                            "Checkpoint acknowledgements seen from victims", registry=r)
        self.misses = Counter("slurmpolicy_checkpoint_deadline_misses",
                              "Victims that reached their deadline without an ack", registry=r)
        self.lost = Counter("slurmpolicy_preemption_lost_gpu_hours",
                            "GPU-hours of work lost by requeued victims (since their last "
                            "checkpoint)", registry=r)
        self.requeues = Counter("slurmpolicy_requeues", "Victims requeued", registry=r)
        self.failures = Counter("slurmpolicy_cycle_failures",
                                "Failed cycles by reason (slurm_unavailable, snapshot_stale,"
                                " journal_corrupt, journal_readonly, journal_full, journal,"
                                " fabric, settings, slurm_error, internal)", ["reason"],
                                registry=r)
        self.reload_failures = Counter("slurmpolicy_settings_reload_failures",
                                       "Settings reloads refused (the last good ones stay)",
                                       registry=r)
        self.settings_stale = Gauge("slurmpolicy_settings_stale",
                                    "1 while the settings file was refused at the last reload"
                                    " and the daemon runs on the last good settings",
                                    registry=r)
        self.healthy = Gauge("slurmpolicy_healthy",
                             "0 once the daemon's own failures stopped the watchdog", registry=r)
        self.healthy.set(1)
        #: The reason the last reload was refused; "" when the file's settings are in force.
        self.settings_error = ""
        self.signals_by = Counter("slurmpolicy_checkpoint_signals",
                                  "Checkpoint signals sent to victims, by protocol",
                                  ["protocol"], registry=r)
        self.acks_by = Counter("slurmpolicy_checkpoint_protocol_acks",
                               "Victims' acknowledgements by protocol and how they answered "
                               "(ack, self-requeue, exit)", ["protocol", "how"], registry=r)
        self.misses_by = Counter("slurmpolicy_checkpoint_protocol_misses",
                                 "Victims past their deadline without an answer, by protocol",
                                 ["protocol"], registry=r)
        self.ack_seconds = Histogram("slurmpolicy_checkpoint_ack_seconds",
                                     "Seconds from the checkpoint signal to the victim's "
                                     "acknowledgement, by protocol", ["protocol"],
                                     buckets=ACK_BUCKETS, registry=r)
        self.doorbell_wakes = Counter("slurmpolicy_doorbell_wakes",
                                      "Cycles started early by the submit doorbell (a job"
                                      " of a class that preempts was accepted)", registry=r)
        self.ack_wakes = Counter("slurmpolicy_ack_wakes",
                                 "Cycles started early because a signalled victim acknowledged"
                                 " its checkpoint, left or passed its deadline (daemon.ack_poll)",
                                 registry=r)
        self.gauges: dict[str, Gauge] = {}
        self.last_figures: list[Figure] = []
        self.server: Any = None

    def serve(self, bind: str, port: int) -> None:
        result = start_http_server(port, addr=bind, registry=self.registry)
        # prometheus-client >= 0.18 returns (server, thread); older returns None.
        self.server = result[0] if isinstance(result, tuple) else result
        log.info("metrics on http://%s:%d/metrics", bind, port)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None

    def settings_refused(self, why: str) -> None:
        self.reload_failures.inc()
        self.settings_stale.set(1)
        self.settings_error = why

    def settings_accepted(self) -> None:
        self.settings_stale.set(0)
        self.settings_error = ""

    def _gauge(self, name: str, labels: Iterable[str]) -> Gauge:
        gauge = self.gauges.get(name)
        if gauge is None:
            gauge = self.gauges[name] = Gauge(name, name.replace("_", " "), list(labels),
                                              registry=self.registry)
        return gauge

    def observe_cycle(self, *, result: str, seconds: float, report: Any | None,
                      in_flight: int, figures: list[Figure], failure: str = "") -> list[Figure]:
        """Update the endpoint; return every figure of this cycle, for the history."""
        self.cycles.labels(result=result).inc()
        if failure:
            self.failures.labels(reason=failure).inc()
        if failure:
            figures = [*figures, ("slurmpolicy_cycle_failures", {"reason": failure}, 1.0)]
        self.cycle_seconds.set(seconds)
        out: list[Figure] = [("slurmpolicy_cycle_seconds", {}, seconds),
                             ("slurmpolicy_preemptions_in_flight", {}, float(in_flight))]
        self.in_flight.set(in_flight)
        if report is not None:
            self.slurm_calls.inc(report.calls)
            self.deferred.inc(report.deferred)
            self.acks.inc(report.acks)
            self.misses.inc(report.deadline_misses)
            self.lost.inc(report.lost_gpu_seconds / 3600.0)
            self.requeues.inc(len(report.requeued))
            for protocol, count in report.signals_by_protocol.items():
                self.signals_by.labels(protocol=protocol).inc(count)
                out.append(("slurmpolicy_checkpoint_signals", {"protocol": protocol},
                            float(count)))
            for (protocol, how), count in report.acks_by.items():
                self.acks_by.labels(protocol=protocol, how=how).inc(count)
                out.append(("slurmpolicy_checkpoint_protocol_acks",
                            {"protocol": protocol, "how": how}, float(count)))
            for protocol, count in report.misses_by_protocol.items():
                self.misses_by.labels(protocol=protocol).inc(count)
            for protocol, seconds in report.ack_seconds:
                self.ack_seconds.labels(protocol=protocol).observe(seconds)
            for (kind, outcome), count in report.outcomes.items():
                self.actions.labels(kind=kind, outcome=outcome).inc(count)
                out.append(("slurmpolicy_actions", {"kind": kind, "outcome": outcome},
                            float(count)))
            out += [("slurmpolicy_slurm_calls", {}, float(report.calls)),
                    ("slurmpolicy_checkpoint_acks", {}, float(report.acks)),
                    ("slurmpolicy_checkpoint_deadline_misses", {},
                     float(report.deadline_misses)),
                    ("slurmpolicy_preemption_lost_gpu_hours", {},
                     report.lost_gpu_seconds / 3600.0),
                    ("slurmpolicy_requeues", {}, float(len(report.requeued)))]
        out.append(("slurmpolicy_settings_stale", {}, 1.0 if self.settings_error else 0.0))
        for name, labels, value in figures:
            if name == "slurmpolicy_cycle_failures":
                continue  # a counter above, not a gauge
            self._gauge(name, sorted(labels)).labels(**labels).set(value) if labels else \
                self._gauge(name, ()).set(value)
        out += figures
        self.last_figures = out
        return out

"""Site factors: class weight + fair share + aging + fragmentation bonus.

Owns the number slurmpolicy hands Slurm for each pending job through its
site factor (Slurm's multifactor plugin keeps adding its own factors), the
effective priority the other rules and the inspector rank jobs by, and the
rule for which changes are worth a Slurm call: a new job's value (when it
differs by ``priority.change_threshold`` or more from what Slurm holds), and
a known job's only when its old value would put it out of order against a
job it competes with; at most ``priority.max_updates_per_cycle`` per cycle,
largest change first. Only the order of competing jobs matters to Slurm, so
drifts that change no order cost nothing; and in a deep queue only the order
of its head (``priority.order_depth``), which is as far as Slurm's
schedulers look.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import compress, filterfalse
from operator import add, attrgetter, is_, itemgetter, le, ne, not_, or_, sub

from slurmpolicy.model import Job
from slurmpolicy.policy.actions import SetSiteFactor, site_factors_within
from slurmpolicy.policy.context import Context


@dataclass(frozen=True, slots=True)
class Factors:
    """The parts of one job's site factor, for explanations."""

    class_weight: int
    fairshare: int
    aging: int
    fragmentation: int
    penalty: int

    @property
    def total(self) -> int:
        return max(0, self.class_weight + self.fairshare + self.aging
                   + self.fragmentation - self.penalty)

    def describe(self) -> str:
        parts = [f"class {self.class_weight}", f"fair share {self.fairshare}",
                 f"aging {self.aging}"]
        if self.fragmentation:
            parts.append(f"fragmentation bonus {self.fragmentation}")
        if self.penalty:
            parts.append(f"no-checkpoint penalty -{self.penalty}")
        return " + ".join(parts)


def factors(ctx: Context, job: Job, fragmented: bool | None = None,
            fairshare_points: int | None = None) -> Factors:
    """The parts of ``job``'s site factor; ``fragmented``: whether it earns the
    fragmentation bonus (None: ask the journal and the cluster)."""
    s = ctx.settings
    wait = ctx.wait_seconds(job)
    wait_hours = (wait if wait < s.aging.max_age else s.aging.max_age) / 3600.0
    if fragmented is None:
        fragmented = (job.job_id in ctx.intents.fragmented_since
                      or ctx.fragmentation_blocked(job))
    penalty = s.priority.no_checkpoint_penalty if not ctx.policy(job).can_checkpoint else 0
    return Factors(
        class_weight=ctx.job_class(job).weight,
        fairshare=(ctx.fairshare.points(job.account) if fairshare_points is None
                   else fairshare_points),
        aging=round(wait_hours * s.aging.points_per_hour),
        fragmentation=(round(_bonus_hours(ctx, job.job_id) * s.aging.fragmentation_bonus_per_hour)
                       if fragmented else 0),
        penalty=penalty,
    )


def _bonus_hours(ctx: Context, job_id: int) -> float:
    """Hours since the daemon first saw the job blocked by fragmentation alone
    (0 at the cycle it first does), up to ``aging.max_age``."""
    since = ctx.intents.fragmented_since.get(job_id, ctx.now)
    return min(max(0.0, ctx.now - since), ctx.settings.aging.max_age) / 3600.0


@dataclass(slots=True)
class PriorityResult:
    site_factor: dict[int, int]
    effective: dict[int, int]
    #: Blocked by fragmentation alone now (enough GPUs free, not in its shape),
    #: the jobs that are (True; ``.get`` of any other is None): asked only
    #: where a rule reads it, for jobs of
    #: ``reservations.large_job_gpus`` or more (:func:`reservations.starving`)
    #: and, with the fragmentation bonus on, for jobs not yet seen fragmented.
    fragmented: dict[int, bool]
    #: Pending jobs seen blocked by fragmentation alone at some cycle, since when
    #: (epoch seconds): what the journal keeps (``Intents.fragmented_since``).
    fragmented_since: dict[int, float]
    #: The jobs of ``fragmented_since`` that earn the bonus now (not held,
    #: dependent, deferred or over a quota).
    bonus: set[int]
    #: Pending jobs per partition, highest effective priority first.
    order: dict[str, list[Job]]
    #: Per partition, the highest job that is not held, dependent or deferred.
    heads: dict[str, int]
    #: Per partition, ``order``'s Slurm sort keys under the new site factors
    #: (-effective priority, submit time, job id: ascending is Slurm's order).
    order_keys: dict[str, list[tuple[int, float, int]]] = field(default_factory=dict)
    #: With one partition whose jobs are ``ctx.pending`` in its order: the
    #: positions in ``ctx.pending`` of that partition's ``order`` (else None).
    pending_ranked: list[int] | None = None

    def slurm_order(self) -> list[Job]:
        """Every pending job once, highest effective priority first (ties: the
        earlier submit, then the lower id): ``order``'s partitions merged."""
        lists = list(self.order.values())
        if len(lists) == 1:
            return lists[0]
        effective = self.effective
        merged = heapq.merge(*lists, key=lambda j: (-effective[j.job_id],
                                                     j.submit_time or 0.0, j.job_id))
        # A job asking for several partitions is in each of their lists.
        # (the same record each time): the first place counts.
        return list({j.job_id: j for j in merged}.values())


def compute(ctx: Context) -> PriorityResult:
    """Site factor and effective priority of every pending job."""
    since_of: dict[int, float] = {}
    with_bonus: set[int] = set()
    points = ctx.fairshare.points_by_account()
    # factors(), unrolled: the same sums over the same values, once per pending
    # job, into columns in ``ctx.pending``'s order (this runs every cycle over
    # every waiting job; the dicts are built from the columns at the end).
    s = ctx.settings
    max_age = s.aging.max_age
    per_hour = s.aging.points_per_hour
    aged_out = round(max_age / 3600.0 * per_hour)  # the aging of a job waiting max_age or more
    bonus_per_hour = s.aging.fragmentation_bonus_per_hour
    bonus_on = bonus_per_hour > 0
    now = ctx.now
    info_of = ctx.info
    infos_get = ctx.infos.get
    known_since = ctx.intents.fragmented_since
    known_get = known_since.get if known_since else None
    own_res = ctx.jobs_with_our_active_res
    # Thousands of pending jobs, a few dozen shapes: answer each shape once
    # (jobs with a reservation of their own are asked one by one).
    frag_by_shape: dict[tuple[object, ...], bool] = {}
    later = bool(ctx.reserved_later)
    # Who reads the answer: the bonus (a job not yet seen fragmented, when
    # the bonus is on) and the starvation rule (jobs of large_job_gpus or
    # more). Without the bonus that is a few large jobs of thousands waiting.
    large = s.reservations.large_job_gpus
    pending = ctx.pending
    ids: list[int] = []
    values: list[int] = []
    effs: list[int] = []
    keys: list[tuple[int, float, int]] = []  # Slurm's sort key under the new values
    why_of: list[tuple[int, str]] = []  # the blocked ones
    deferrable: list[Job] = []  # those with a deferral window (ctx.deferrable)
    uncounted: list[int] = []  # ctx.takes_uncounted
    frag_ids: list[int] = []  # the fragmented ones
    # Most of a deep queue is plain (JobInfo.plain): with no fragmentation
    # bonus known or to give, such a job's value is its aging and fair share
    # alone, and the checks below answer nothing for it: skipped.
    plain_ok = known_get is None and not bonus_on
    for job in pending:
        job_id = job.job_id
        info = infos_get(job_id)
        if info is None or info.job is not job:
            info = info_of(job)
        extra = 0
        if not (plain_ok and info.plain):
            why = info.blocked  # info.blocked_at(now), inlined
            if not why:
                begin = job.begin_time
                why = "deferred" if begin is not None and begin > now else info.quota
            if why:
                why_of.append((job_id, why))
            if info.deferrable:
                deferrable.append(job)
            if info.takes_uncounted:
                uncounted.append(job_id)
            first = known_get(job_id) if known_get is not None else None
            if not why and ((first is None and bonus_on) or info.gpus >= large):
                if job.reservation or job_id in own_res:  # ctx.has_own_active_reservation
                    frag = ctx.fragmentation_blocked(job)
                else:
                    key: tuple[object, ...] = info.frag_key
                    if later:
                        # Reservations ahead that its time limit runs into take hosts
                        # from it alone: part of the answer's key.
                        key = (key, ctx.reserved_later_for(job))
                    hit = frag_by_shape.get(key)
                    if hit is None:
                        hit = frag_by_shape[key] = ctx.fragmentation_blocked(job)
                    frag = hit
                if frag:
                    frag_ids.append(job_id)
                    # Once seen blocked by fragmentation alone, a job earns the bonus
                    # from then on while it waits: a flag that followed each cycle's
                    # free GPUs would add and take back the bonus of thousands of
                    # jobs at once (a Slurm call each), and a bonus for every hour
                    # waited would jump by hours of points the cycle a job first
                    # counts as fragmented.
                    if first is None and bonus_on:  # off: nothing to remember
                        first = now
            if first is not None:
                since_of[job_id] = first
                if not why:
                    with_bonus.add(job_id)
                    held = now - first
                    extra = round((held if held < max_age else max_age) / 3600.0 * bonus_per_hour)
        since = info.since
        if since is None or now <= since:
            aging = 0
        else:
            wait = now - since
            aging = round(wait / 3600.0 * per_hour) if wait < max_age else aged_out
        value = info.site_base + points.get(job.account, 0) + aging + extra
        if value < 0:
            value = 0
        ids.append(job_id)
        values.append(value)
        # Slurm's priority already contains the site factor it holds now.
        eff = info.slurm_base + value
        effs.append(eff)
        keys.append((-eff, info.submit, job_id))
    ctx.deferrable = deferrable
    ctx.takes_uncounted = set(uncounted)
    site = dict(zip(ids, values, strict=True))
    effective = dict(zip(ids, effs, strict=True))
    blocked = dict(why_of)  # the blocked ones alone: a few of a deep queue
    fragmented = dict.fromkeys(frag_ids, True)
    order: dict[str, list[Job]] = {}
    order_keys: dict[str, list[tuple[int, float, int]]] = {}
    heads: dict[str, int] = {}
    n = len(pending)
    pending_ranked: list[int] | None = None
    for part, jobs in ctx.pending_by_partition.items():
        # Most often one partition: its list is ``pending`` (the same jobs in the
        # same order), whose keys the loop made.
        as_pending = len(jobs) == n and all(map(is_, jobs, pending))
        part_keys = (keys if as_pending else
                     [(-effective[j.job_id], j.submit_time or 0.0, j.job_id) for j in jobs])
        ranked = sorted(range(len(jobs)), key=part_keys.__getitem__)
        if as_pending and len(ctx.pending_by_partition) == 1:
            pending_ranked = ranked
        order[part] = list(map(jobs.__getitem__, ranked))
        order_keys[part] = list(map(part_keys.__getitem__, ranked))
        head = next((j for j in order[part] if j.job_id not in blocked), None)
        if head is not None:
            heads[part] = head.job_id
    return PriorityResult(site, effective, fragmented, since_of, with_bonus, order, heads,
                          order_keys, pending_ranked)


def competing_groups(ctx: Context) -> list[list[Job]]:
    """Pending jobs that compete for the same nodes: partitions that share a host
    (or a multi-partition job) are one group; each group, in no particular order."""
    if len(ctx.pending_by_partition) == 1:
        # One partition asked for: every pending job competes with every other.
        return [list(ctx.pending)] if ctx.pending else []
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    by_host: dict[str, str] = {}
    for node in ctx.snapshot.nodes:
        for part in node.partitions:
            find(part)
            if node.name in by_host:
                union(part, by_host[node.name])
            else:
                by_host[node.name] = part
    first: dict[int, str] = {}
    for part, jobs in ctx.pending_by_partition.items():
        find(part)
        for job in jobs:
            seen = first.setdefault(job.job_id, part)
            if seen != part:  # a job asking for several partitions joins them
                union(seen, part)
    groups: dict[str, list[Job]] = {}
    for job in ctx.pending:
        groups.setdefault(find(first.get(job.job_id, "")), []).append(job)
    return list(groups.values())


_site_factor = attrgetter("site_factor")
#: Ahead of every Slurm sort key: no job must stay ahead yet.
_NO_KEY = (-math.inf, -math.inf, -math.inf)


def _reorder(group: list[Job], new: dict[int, int], cur: dict[int, int],
             effective: dict[int, int], threshold: int, chosen: set[int],
             keys: list[tuple[int, float, int]] | None = None) -> None:
    """Add to ``chosen`` the jobs of ``group`` whose site factor must be written so
    that Slurm's order matches the policy's wherever the policy's priorities differ
    by at least ``threshold`` (closer ones count as ties: no write to swap them).

    Slurm ranks by its priority, which holds the site factor it has now (``cur``;
    ``new`` once chosen); ties go to the earlier submit, then the lower job id.
    ``keys``: the group's Slurm sort keys at the policy's values, sorted (the
    policy's order), when the caller has them.

    Job x must stay behind every job at least ``threshold`` above it (its
    leaders, a prefix of the order). A written job sits at its policy key,
    behind all its leaders' policy keys; so where x is out of order, the write
    that mends it is x's own when Slurm holds a stale site factor for x, and
    else (x is at its policy key already) the write of each leader that is
    not ahead of it, which raises that leader (its stale key was at or below
    x's policy key, below its own). Two walks, O(n):

    1. down the order: x is written when a leader is not ahead of it and its
       site factor is stale (leaders' keys are final by then: raises come
       after, and only help the jobs behind);
    2. up the order: a job still at a stale key is raised when it is not
       ahead of a job it leads that sits at its policy key; a raised job sits
       at its policy key in turn, so its own leaders are checked after it
       (they come later in this walk). Against the jobs it leads at their
       policy keys, a job only has to beat the highest one, the first of them.

    This is the least set of writes given step 1's, and the fixpoint that
    the order check first reached by walks of the whole queue, each raising
    one leader per job out of order, until a walk changed nothing. (Those
    walks stopped after 64 and wrote every stale site factor of the group
    instead; that limit was kept, counted over the raised jobs, until a
    replay of a deep queue showed it cost a tenth of the simulator's CPU,
    and that where it struck it wrote thousands of site factors that change
    no order, up to ``priority.max_updates_per_cycle`` a cycle.)
    """
    if keys is None:
        keys = sorted((-effective[j.job_id], j.submit_time or 0.0, j.job_id) for j in group)
    # The jobs by position in the order, as Slurm's sort keys (ascending is
    # Slurm's order: -priority, submit time, job id): ``keys`` at the policy's
    # values, and ``skey`` as Slurm holds it (the site factor it has now, or
    # once chosen, the written one; a job at its policy value holds its
    # ``keys`` entry itself, which the walks tell by identity). Built column by
    # column: this runs every cycle over every waiting job.
    n = len(keys)
    if n == 0:
        return
    ids = [k[2] for k in keys]
    neg = [k[0] for k in keys]  # -effective priority
    vs = list(map(new.__getitem__, ids))
    cs = list(map(cur.__getitem__, ids))
    stale = list(map(ne, vs, cs))
    taken = list(map(chosen.__contains__, ids)) if chosen else [False] * n
    skey = [k if not st or tk else (k[0] + v - c, k[1], k[2])
            for k, st, tk, v, c in zip(keys, stale, taken, vs, cs, strict=True)]
    # Step 1, down the order, with the weakest leader's key so far (the
    # highest: a job behind it is behind them all). Nothing is chosen until
    # the end.
    own: list[int] = []
    lead = 0
    weakest = _NO_KEY
    mend = False  # a job at its policy key is not behind all its leaders
    for x in range(n):
        bar = neg[x] - threshold
        while lead < x and neg[lead] <= bar:
            key = skey[lead]
            if key > weakest:
                weakest = key
            lead += 1
        if weakest < skey[x]:
            continue
        if stale[x] and not taken[x]:
            skey[x] = keys[x]
            own.append(x)
            if weakest < skey[x]:
                continue
        mend = True
    raised: list[int] = []
    if mend:
        # Step 2, up the order. ``led_from[z]``: the first job that z leads
        # (n: none); ``first_set[q]``: the first job at or after q that sits
        # at its policy key (n: none), filled in as the walk goes up.
        led_from = [n] * n
        lead = 0
        for x in range(n):
            bar = neg[x] - threshold
            while lead < x and neg[lead] <= bar:
                led_from[lead] = x
                lead += 1
        first_set = [n] * (n + 1)
        for z in range(n - 1, -1, -1):
            at_policy = skey[z] is keys[z]
            if not at_policy:
                f = first_set[led_from[z]]
                if f < n and not skey[z] < keys[f]:
                    at_policy = True
                    raised.append(z)
            first_set[z] = z if at_policy else first_set[z + 1]
    chosen.update([ids[x] for x in own])
    chosen.update([ids[z] for z in raised])


_key_priority = itemgetter(0)  # -effective priority
_key_id = itemgetter(2)
_job_id = attrgetter("job_id")


def _order_head(keys: list[tuple[int, float, int]], held: list[int],
                known: Mapping[int, int], depth: int, chosen: set[int],
                ) -> tuple[list[tuple[int, float, int]], set[int]]:
    """The part of a deep group's order that the order check looks at, and the
    jobs it must lift (added to ``chosen`` too).

    ``keys``: the group's Slurm sort keys at the policy's values, sorted (the
    policy's order), more than ``2 * depth`` of them; ``held``: each one's
    Slurm priority as Slurm holds its site factor now (effective - new + what
    Slurm holds), in the same order. The head is the policy's
    first ``depth`` jobs. The floor is the lower of Slurm's ``depth``-th
    priority (as it holds the site factors) and the head's last effective
    priority. Checked: the head, every job Slurm holds at or above the floor
    (a job the policy ranks low but Slurm high must come down), and every job
    the daemon never set (it is written at its policy value, which may land
    among them). Lifted: each job of the head that Slurm holds below the
    floor (its site factor is stale: at its policy value it would be at or
    above the floor). So once written, every job of the head sits at or above
    the floor, and every job left out of the check strictly below it: the
    head ends ahead of them all, and the check mends the order among the
    jobs checked. Jobs left out keep their stale values, out of order among
    themselves only, deeper than Slurm's schedulers look.
    """
    ids = list(map(_key_id, keys))
    floor = min(heapq.nlargest(depth, held)[-1], -keys[depth - 1][0])
    lifted = {ids[x] for x in range(depth) if held[x] < floor}
    chosen |= lifted
    deeper = map(or_, map(partial(le, floor), held[depth:]),
                 map(not_, map(known.__contains__, ids[depth:])))
    return keys[:depth] + list(compress(keys[depth:], deeper)), lifted


def site_factor_actions(ctx: Context, result: PriorityResult,
                        ) -> tuple[list[SetSiteFactor], int]:
    """The site factors worth a Slurm call, largest change first, capped per
    cycle; and how many more the daemon could not write this cycle (held back).

    A job the daemon never set gets its site factor when it differs from what
    Slurm holds by ``priority.change_threshold`` or more. A job it did set is
    written again only when its old value puts it out of order against a job
    it competes with (same nodes) by at least the threshold: drifts that change
    no order cost no Slurm call, however many jobs drift. In a group of
    competing jobs more than twice ``priority.order_depth`` deep, the check
    looks at the head of the order only (:func:`_order_head`): the policy's
    first jobs end ahead of every job it leaves out.

    The executor writes the jobs that get the same value in one call (at most
    ``SITE_FACTOR_BATCH`` jobs), values in the order they first come in the
    plan, and stops at ``daemon.max_slurm_calls_per_cycle`` calls. A job whose
    batch lies past that many cannot be written this cycle whatever else the
    plan holds, and the next plan asks again: it is held back here, counted,
    and its action (whose reason spells out its factors) is not built. The
    jobs written are the same as without the cut.
    """
    threshold = max(1, ctx.settings.priority.change_threshold)
    known = ctx.intents.site_factors
    new = result.site_factor
    by_id = ctx.by_id
    ids = list(new)  # the pending jobs' ids, in ctx.pending's order (priority.compute)
    # What Slurm holds: the value the daemon wrote, else the record's; a column
    # in ctx.pending's order (the order check of a deep queue reads it all).
    held_factor = list(map(known.get, ids, map(_site_factor, ctx.pending)))
    # New jobs are a few of a deep queue: found by C-level lookups (Slurm holds
    # their record's site factor).
    chosen = {job_id for job_id in filterfalse(known.__contains__, ids)
              if abs(new[job_id] - by_id[job_id].site_factor) >= threshold}
    depth = ctx.settings.priority.order_depth
    effective = result.effective
    lifted: set[int] = set()
    groups = competing_groups(ctx)
    for group in groups:
        if len(group) > 1:
            # One group of every pending job in one partition: that partition's
            # order is the group's (the same key, unique per job).
            whole = (len(groups) == 1 and len(result.order) == 1
                     and len(group) == len(ctx.pending))
            keys = next(iter(result.order_keys.values())) if whole else None
            # A queue up to twice the depth costs the whole check about what
            # its head's costs.
            if depth and len(group) > 2 * depth:
                if keys is not None and result.pending_ranked is not None:
                    # Slurm's priority as it holds the site factor (effective -
                    # new + held), in the order's positions: C-level columns.
                    held_col = list(map(sub, map(add, held_factor, effective.values()),
                                        new.values()))
                    held = list(map(held_col.__getitem__, result.pending_ranked))
                else:
                    if keys is None:
                        keys = sorted((-effective[j.job_id], j.submit_time or 0.0, j.job_id)
                                      for j in group)
                    held_of = dict(zip(ids, held_factor, strict=True))
                    held = [held_of[k[2]] - k[0] - new[k[2]] for k in keys]
                keys, lifted_here = _order_head(keys, held, known, depth, chosen)
                lifted |= lifted_here
            checked = (list(map(_key_id, keys)) if keys is not None
                       else list(map(_job_id, group)))
            cur = {k: known.get(k, by_id[k].site_factor) for k in checked}
            _reorder(group, new, cur, effective, threshold, chosen, keys)
    cur = {j: known.get(j, by_id[j].site_factor) for j in chosen}
    changes = sorted((-abs(new[j] - cur[j]), j) for j in chosen)
    wanted = [job_id for _, job_id in changes[:ctx.settings.priority.max_updates_per_cycle]]
    writable = site_factors_within(wanted, new, ctx.settings.daemon.max_slurm_calls_per_cycle)
    actions = []
    fs = ctx.fairshare
    # A plan writes up to hundreds of site factors of a few accounts: each
    # account's fair share worded (and its points) once.
    fs_words: dict[str, tuple[int, str]] = {}
    for job_id in writable:
        job = ctx.by_id[job_id]
        why = ("new job" if job_id not in known else
               f"among the first {depth} of the policy's order, held below the jobs "
               "Slurm ranks there" if job_id in lifted else
               "its order against competing jobs changed")
        account = job.account
        words = fs_words.get(account)
        if words is None:
            words = fs_words[account] = (fs.points(account), fs.describe(account))
        parts = factors(ctx, job, job_id in result.bonus, fairshare_points=words[0])
        actions.append(SetSiteFactor(
            job_id=job_id, site_factor=new[job_id], previous=cur[job_id],
            reason=f"site factor {cur[job_id]} -> {new[job_id]} ({why}): "
                   f"{parts.describe()} ({ctx.job_class(job).name}, {words[1]})"))
    return actions, len(wanted) - len(writable)

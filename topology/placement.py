"""Placement: where an N-node x G-GPU job fits most compactly, or why it cannot.

Owns the search behind :meth:`Fabric.place`. The rule, in order:

1. Only hosts with at least G free, usable GPUs of the asked type (and GPU
   memory, when the shape asks: a host whose GPU memory the fabric does not
   know is left out, since it may be too small) are eligible. G = 0 (a
   CPU-only step) still needs one free GPU slot to count as free.
2. The innermost level (host, NVLink domain, leaf, spine, cluster) that has
   one domain holding N eligible hosts wins; in strict mode that level must
   not be above ``shape.level``.
3. Among the domains of that level, and inside the chosen one, the set that
   spans the fewest domains one level down, then two levels down and so on,
   then the least :meth:`Fabric.cost`, then the fewest hosts on degraded
   links, then the most preferred hosts, then the tightest fit (leave whole
   domains and hosts whole), then name. ``Shape.prefer`` therefore only
   breaks ties: it never makes a set less compact or costlier. On nested
   fabrics the search is exact (a knapsack over sub-domains, see
   :meth:`_Search.table`); where an NVLink domain reaches over leaves it
   also tries filling whole NVLink domains first and keeps the better.

Down links are never used: a host whose IB uplink is down only takes
one-host jobs (or jobs inside its multi-host NVLink domain); a leaf or spine
whose uplink is down only takes jobs that stay below it. Degraded links are
avoided when an equally compact choice exists and penalized in the cost.

No graph algorithm runs per call: everything reads the fabric's precomputed
integer columns, so a 64-node placement on 4,096 hosts takes milliseconds.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from slurmpolicy.topology.fabric import PAIR_COST
from slurmpolicy.topology.types import Health, Level, NoPlacement, Placement, Shape

if TYPE_CHECKING:
    from slurmpolicy.model import Node
    from slurmpolicy.topology.fabric import Fabric

SEARCH_LEVELS: tuple[Level, ...] = (Level.HOST, Level.NVLINK, Level.LEAF, Level.SPINE,
                                    Level.CLUSTER)
_HostKey = tuple[int, int, int, int]


def _word(level: Level) -> str:
    return {Level.HOST: "host", Level.GPU: "host", Level.NVLINK: "NVLink domain",
            Level.LEAF: "leaf", Level.SPINE: "spine", Level.CLUSTER: "cluster"}[level]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


class _Search:
    """One place() call: the eligible hosts and their ordering keys."""

    def __init__(self, fab: Fabric, shape: Shape, free: Mapping[str, int]) -> None:
        self.fab = fab
        self.shape = shape
        n, g = shape.nodes, shape.gpus_per_node
        if n < 1:
            raise ValueError(f"a shape needs at least 1 node, got {n}")
        if g < 0:
            raise ValueError(f"gpus_per_node must be >= 0, got {g}")
        need = max(g, 1)
        want_type = shape.gpu_type.lower() if shape.gpu_type else None
        min_mem = shape.min_gpu_memory_gb
        self.free: dict[int, int] = {}
        self.matching: list[int] = []  # type and memory match, any free count
        self.eligible: list[int] = []
        self.unknown_memory = 0
        self.wrong_type = 0
        #: Hosts left out (strict) or put last (preferred) because fewer than the GPUs
        #: asked for are NVLinked all to all on them (PCIe hosts, partial meshes).
        self.no_nvlink = 0
        self.key: dict[int, _HostKey] = {}
        usable, types, mems = fab._usable, fab._gpu_type, fab._gpu_mem
        prefer = shape.prefer
        degraded_host = fab._degraded_host
        hosts = fab.hosts
        if len(free) * 2 < len(hosts):
            # A sparse map (only hosts with free GPUs): walk it, in host order.
            index = fab._index
            pairs = sorted((index[h], f) for h, f in free.items() if f > 0 and h in index)
        else:
            get = free.get
            pairs = [(i, f) for i, f in enumerate(get(h, 0) for h in hosts) if f > 0]
        own_free, matching, eligible, key = self.free, self.matching, self.eligible, self.key
        clique = fab._nv_clique if shape.level == Level.NVLINK else None
        for i, f in pairs:
            if want_type is not None and (types[i] or "").lower() != want_type:
                self.wrong_type += 1
                continue
            if min_mem is not None:
                mem = mems[i]
                if mem is None:
                    self.unknown_memory += 1
                    continue
                if mem < min_mem:
                    continue
            u = usable[i]
            if f > u:
                f = u
            own_free[i] = f
            matching.append(i)
            if f >= need:
                pref = 0 if prefer and hosts[i] in prefer else 1
                if clique is not None:
                    if clique[i] < need:
                        self.no_nvlink += 1
                        if shape.strict:
                            continue
                        pref = 1  # NVLink asked for as a preference: such hosts come after
                    elif not prefer:
                        pref = 0
                eligible.append(i)
                key[i] = (degraded_host[i], pref, f - g, i)
        # Mixed-radix place values of a packed grade (see table()): counts stay
        # below b, costs below c, so sums of grades never carry between parts.
        b = len(eligible) + 1
        c = int(max(PAIR_COST.values())) * b * b + 1
        p_deg = b
        p_cost = p_deg * b
        p_nv = p_cost * c
        self._places = (p_nv * b * b, p_nv * b, p_nv, p_cost, p_deg)

    # ------------------------------------------------------------------ pools
    def pool(self, level: Level, cut: bool = True) -> tuple[dict[Any, list[int]], int]:
        """Eligible hosts grouped by domain at ``level``, minus those whose links
        a placement at that level would have to use and that are down.

        An NVLink domain may span leaves (NVL72 trays cabled to two leaves);
        when the shape asks for one leaf or spine, NVLink domains are cut
        along it, so an NVLink-compact set never leaves the asked domain."""
        fab, multi = self.fab, self.shape.nodes > 1
        col: Sequence[Any] = fab._dom[level]
        if cut and level == Level.NVLINK and self.shape.level in (Level.LEAF, Level.SPINE):
            outer = fab._dom[self.shape.level]
            col = list(zip(col, outer, strict=True))
        leaf, spine = fab._dom[Level.LEAF], fab._dom[Level.SPINE]
        groups: dict[Any, list[int]] = {}
        dropped = 0
        if not fab._any_down or not multi or level < Level.LEAF:
            for i in self.eligible:
                d = col[i]
                grp = groups.get(d)
                if grp is None:
                    groups[d] = [i]
                else:
                    grp.append(i)
            return groups, 0
        for i in self.eligible:
            if multi and level >= Level.LEAF and fab._host_up[i] == Health.DOWN:
                dropped += 1
                continue
            if multi and level >= Level.SPINE and fab._leaf_up[leaf[i]] == Health.DOWN:
                dropped += 1
                continue
            if multi and level >= Level.CLUSTER and fab._spine_up[spine[i]] == Health.DOWN:
                dropped += 1
                continue
            groups.setdefault(col[i], []).append(i)
        return groups, dropped

    # -------------------------------------------------------------- selection
    def _children(self, level: Level) -> tuple[list[int], Level]:
        fab = self.fab
        if level == Level.CLUSTER:
            return fab._dom[Level.SPINE], Level.SPINE
        if level == Level.SPINE:
            return fab._dom[Level.LEAF], Level.LEAF
        if level == Level.LEAF:
            # NVLink domain pieces inside this leaf: a nested tree even when
            # an NVLink domain spans leaves.
            return fab._frag, Level.NVLINK
        # Inside an NVLink domain: group by leaf, then hosts.
        return fab._dom[Level.LEAF], Level.HOST

    def _keyer(self, groups: list[list[int]]) -> Callable[[list[int]], tuple[float, int, int, int]]:
        """Order of equally large groups: the one cheaper inside (fewer switch
        hops, more NVLink) first, then fewer degraded, more preferred hosts.
        The inside cost is only worked out where sizes tie."""
        sizes: dict[int, int] = {}
        for grp in groups:
            sizes[len(grp)] = sizes.get(len(grp), 0) + 1
        # With one host per NVLink domain, equal groups cost nearly the same
        # inside; the sum is only worth its time where NVLink spans hosts.
        tied = ({size for size, count in sizes.items() if count > 1}
                if self.fab._multi_host_nvlink else set())
        key = self.key
        cost = self.fab._cost

        def group_key(grp: list[int]) -> tuple[float, int, int, int]:
            inside = cost(grp) if len(grp) in tied else 0.0
            degraded = sum(key[i][0] for i in grp)
            preferred = sum(1 - key[i][1] for i in grp)
            return inside, degraded, -preferred, grp[0]

        return group_key

    def select(self, pool: list[int], n: int, level: Level) -> list[int]:
        """n hosts of ``pool`` (all in one domain at ``level``), spanning the
        fewest sub-domains, then costing least; degraded hosts last, then
        preferred and tight-fit first."""
        if len(pool) == n:
            return pool
        if level <= Level.HOST or (level == Level.LEAF and not self.fab._multi_host_nvlink):
            # Below a leaf every host is its own NVLink domain: only host order matters.
            return sorted(pool, key=self.key.__getitem__)[:n]
        if level == Level.SPINE and not self.fab._multi_host_nvlink:
            # Leaves of single-host NVLink domains differ only in size: filling
            # the largest first is exact (its counts majorize every other
            # choice, so it has the fewest leaves and the fewest cross-leaf pairs).
            return self.select_greedy(pool, n, level)
        return self.hosts_of(self.table(pool, n, level, exact=True)[1][n])

    def select_greedy(self, pool: list[int], n: int, level: Level) -> list[int]:
        col, child_level = self._children(level)
        grouped: dict[int, list[int]] = {}
        for i in pool:
            grouped.setdefault(col[i], []).append(i)
        groups = list(grouped.values())
        if len(groups) == 1:
            return self.select(pool, n, child_level)
        gk = self._keyer(groups)
        fits = [grp for grp in groups if len(grp) >= n]
        if fits:
            best = min(fits, key=lambda grp: (len(grp), *gk(grp)))
            return self.select(best, n, child_level)
        ordered = sorted(grouped.values(), key=lambda grp: (-len(grp), *gk(grp)))
        taken: list[int] = []
        remaining = n
        for k, grp in enumerate(ordered):
            if len(grp) >= remaining:
                # The best-fitting group of those left takes the remainder.
                best = min((x for x in ordered[k:] if len(x) >= remaining),
                           key=lambda x: (len(x), *gk(x)))
                taken.extend(self.select(best, remaining, child_level))
                break
            taken.extend(grp)
            remaining -= len(grp)
        return taken

    def fewest_children(self, pool: list[int], n: int, level: Level) -> int:
        """How few sub-domains of ``level`` (as :meth:`select` groups them) can
        hold n hosts of ``pool``."""
        col = self._children(level)[0]
        sizes: dict[int, int] = {}
        for i in pool:
            sizes[col[i]] = sizes.get(col[i], 0) + 1
        total = 0
        for k, size in enumerate(sorted(sizes.values(), reverse=True), 1):
            total += size
            if total >= n:
                return k
        return len(sizes)

    def table(self, pool: list[int], cap: int, level: Level,
              exact: bool = False) -> tuple[list[int], list[Any]]:
        """The best r hosts of ``pool`` (one domain at ``level``) for every r up
        to ``cap``: (grades, picks), where :meth:`hosts_of` turns a pick into hosts.

        A grade is (spines, leaves, NVLink domains spanned, cost, degraded
        hosts, hosts not preferred), compared in that order and packed into one
        integer by :meth:`_pack`. In a nested tree each part is a sum over the
        sub-domains plus, for cost, PAIR_COST[level] per pair across two of
        them; so a knapsack over the sub-domains finds the exact best set, where
        filling the largest first can span more leaves (two spines of two hosts
        each, one in one leaf, the other in two). The preference comes last: it
        never buys a less compact or costlier set."""
        fab, key = self.fab, self.key
        nv, leaf = fab._dom[Level.NVLINK], fab._dom[Level.LEAF]
        p_spine, p_leaf, p_nv, p_cost, p_deg = self._places
        one_nv = all(nv[i] == nv[pool[0]] for i in pool)
        one_leaf = all(leaf[i] == leaf[pool[0]] for i in pool)
        if one_leaf and (one_nv or len({nv[i] for i in pool}) == len(pool)):
            # Hosts that differ only in their keys: take them in key order.
            ordered = sorted(pool, key=key.__getitem__)[:cap]
            pair = int(PAIR_COST[Level.NVLINK if one_nv else Level.LEAF])
            grades: list[int] = [0]
            picks: list[Any] = [None]
            g = p_spine + p_leaf
            for r, i in enumerate(ordered, 1):
                g += key[i][0] * p_deg + key[i][1] + (pair * (r - 1)) * p_cost
                g += p_nv if r == 1 or not one_nv else 0
                grades.append(g)
                picks.append((ordered, r))
            return grades, picks
        col, child_level = self._children(level)
        grouped: dict[int, list[int]] = {}
        for i in pool:
            grouped.setdefault(col[i], []).append(i)
        if len(grouped) == 1:
            return self.table(pool, cap, child_level, exact)
        w = int(PAIR_COST[level]) * p_cost
        groups = sorted(grouped.values(), key=lambda grp: (-len(grp), grp[0]))
        # The grade counts sub-domains first. When only ``cap`` hosts matter
        # (``exact``), the best set uses as few sub-domains as can hold them
        # (``least``), so a partial set that would need more is dropped.
        p_child = {Level.CLUSTER: p_spine, Level.LEAF: p_nv}.get(level, p_leaf)
        b = p_deg  # the radix of the counts
        cum = [0]
        for grp in groups:
            cum.append(cum[-1] + len(grp))
        least = bisect_left(cum, cap) if exact else 0
        # best[t]: grade of the best t hosts from the sub-domains so far; how[t]: which.
        best: list[int | None] = [None] * (cap + 1)
        how: list[Any] = [None] * (cap + 1)
        best[0] = 0
        reach = 0
        for j, grp in enumerate(groups):
            sub, sub_picks = self.table(grp, cap, child_level)
            new, new_how = list(best), list(how)
            if exact:
                # fewest[x]: how few of the sub-domains after this one hold x hosts.
                base = cum[j + 1]
                fewest = [bisect_left(cum, base + x) - j - 1 if base + x <= cum[-1]
                          else cap + 1 for x in range(cap + 1)]
            for t in range(reach + 1):
                a = best[t]
                if a is None:
                    continue
                if exact:
                    used = (a // p_child) % b + 1  # with this sub-domain
                    if used + fewest[max(0, cap - t - len(sub) + 1)] > least:
                        continue
                wt = w * t
                for r in range(1, min(len(sub) - 1, cap - t) + 1):
                    if exact and used + fewest[cap - t - r] > least:
                        continue
                    g = a + sub[r] + wt * r
                    old = new[t + r]
                    if old is None or g < old:
                        new[t + r] = g
                        new_how[t + r] = (how[t], sub_picks[r])
            best, how = new, new_how
            reach = min(cap, reach + len(sub) - 1)
        if exact:
            return [0] * cap + [best[cap] or 0], how
        # This domain counts once at its own level and those above it.
        top = {Level.NVLINK: p_nv, Level.LEAF: p_leaf, Level.SPINE: p_spine}.get(level)
        ones = sum(p for p in (p_spine, p_leaf, p_nv) if top is not None and p >= top)
        grades = [0]
        for found in best[1:reach + 1]:
            assert found is not None
            g = found
            grades.append(g % top + ones if top is not None else g)
        return grades, how[:reach + 1]

    @staticmethod
    def hosts_of(pick: Any) -> list[int]:
        """The hosts a :meth:`table` pick stands for."""
        out: list[int] = []
        stack = [pick]
        while stack:
            item = stack.pop()
            if item is None:
                continue
            first, second = item
            if isinstance(second, int):
                out.extend(first[:second])
            else:
                stack.append(first)
                stack.append(second)
        return out

    def select_by_nvlink(self, pool: list[int], n: int) -> list[int]:
        """n hosts of ``pool`` taking whole NVLink domains, largest first, and the
        best-fitting one for the remainder."""
        col = self.fab._dom[Level.NVLINK]
        grouped: dict[int, list[int]] = {}
        for i in pool:
            grouped.setdefault(col[i], []).append(i)
        gk = self._keyer(list(grouped.values()))
        ordered = sorted(grouped.values(), key=lambda grp: (-len(grp), *gk(grp)))
        taken: list[int] = []
        remaining = n
        for k, grp in enumerate(ordered):
            if len(grp) >= remaining:
                last = min((x for x in ordered[k:] if len(x) >= remaining),
                           key=lambda x: (len(x), *gk(x)))
                taken.extend(self.select(last, remaining, Level.NVLINK))
                break
            taken.extend(grp)
            remaining -= len(grp)
        return taken

    def grade(self, hosts: list[int], level: Level, domain_pool: int) -> tuple[object, ...]:
        fab = self.fab
        lower = [lv for lv in SEARCH_LEVELS if lv < level and lv > Level.HOST]
        key = self.key
        if level == Level.LEAF and not fab._multi_host_nvlink:
            # All sets inside one leaf of single-host NVLink domains span the
            # same and cost the same but for degraded links.
            spans: tuple[int, ...] = ()
            cost = fab._degraded_pairs(hosts) if fab._any_degraded else 0.0
        else:
            spans = tuple(len({fab._dom[lv][i] for i in hosts}) for lv in reversed(lower))
            cost = fab._cost(hosts)
        # An NVLink domain may reach over leaves: of two equal ones, the one
        # that stays inside fewer leaves and spines is the more compact.
        upper: tuple[int, ...] = ()
        if level == Level.NVLINK and fab._split_nvlink:
            upper = (len({fab._dom[Level.SPINE][i] for i in hosts}),
                     len({fab._dom[Level.LEAF][i] for i in hosts}))
        degraded = sum(key[i][0] for i in hosts)
        preferred = sum(1 - key[i][1] for i in hosts)
        slack = sum(key[i][2] for i in hosts)
        return (spans, cost, upper, degraded, -preferred, domain_pool - len(hosts), slack,
                min(hosts))

    # ------------------------------------------------------------------- main
    def run(self) -> Placement | NoPlacement:
        shape, fab = self.shape, self.fab
        n = shape.nodes
        if len(self.eligible) < n:
            return self.too_few()
        # Most eligible hosts in one domain, per level tried (for the reason).
        best_at: dict[Level, int] = {Level.HOST: min(1, len(self.eligible))}
        dropped_any = 0
        steps: list[tuple[Level, bool]] = [(level, True) for level in SEARCH_LEVELS]
        if not shape.strict and shape.level in (Level.LEAF, Level.SPINE) and fab._split_nvlink:
            # The preference for one leaf (spine) cuts NVLink domains along it;
            # once no leaf (spine) fits, a whole NVLink domain is the most compact.
            steps.insert(SEARCH_LEVELS.index(shape.level) + 1, (Level.NVLINK, False))
        for level, cut in steps:
            if level == Level.HOST and n > 1:
                continue
            if level == Level.NVLINK and n > 1 and not fab._multi_host_nvlink:
                best_at[level] = 1
                continue
            groups, dropped = self.pool(level, cut)
            dropped_any = max(dropped_any, dropped)
            fitting = [(d, grp) for d, grp in groups.items() if len(grp) >= n]
            if not fitting:
                best_at[level] = max((len(g) for g in groups.values()), default=0)
                continue
            if shape.strict and level > max(shape.level, Level.HOST):
                return self.strict_failure(best_at, dropped_any)
            if level == Level.HOST:
                # Best fit on the host, then pack into the leaf with the fewest
                # eligible hosts, keeping emptier leaves whole for large jobs.
                leaf = fab._dom[Level.LEAF]
                per_leaf: dict[int, int] = {}
                for i in self.eligible:
                    per_leaf[leaf[i]] = per_leaf.get(leaf[i], 0) + 1
                key = self.key
                host = min((grp[0] for _, grp in fitting),
                           key=lambda i: (key[i][0], key[i][1], key[i][2], per_leaf[leaf[i]], i))
                return self.result([host])
            if (level == Level.LEAF and not fab._multi_host_nvlink and not fab._any_degraded
                    and not shape.prefer):
                # Every leaf set then spans and costs the same; the grade starts
                # with the leaf's spare hosts, so only the tightest leaves compete.
                tightest = min(len(grp) for _, grp in fitting)
                fitting = [(d, grp) for d, grp in fitting if len(grp) == tightest]
            elif level > Level.NVLINK and len(fitting) > 1:
                # A set spans at least as many sub-domains as the fewest of its
                # domain's that hold n hosts, and the grade counts them first:
                # only the domains where that least number is smallest compete.
                least = [(self.fewest_children(grp, n, level), d, grp) for d, grp in fitting]
                fewest = min(k for k, _, _ in least)
                fitting = [(d, grp) for k, d, grp in least if k == fewest]
            chosen: tuple[tuple[object, ...], list[int]] | None = None
            for _d, grp in fitting:
                options = [self.select(grp, n, level)]
                if fab._split_nvlink and level > Level.NVLINK:
                    # The switch tree does not see NVLink domains that reach over
                    # leaves; also try filling whole NVLink domains first.
                    options.append(self.select_by_nvlink(grp, n))
                for hosts in options:
                    graded = self.grade(hosts, level, len(grp))
                    if chosen is None or graded < chosen[0]:
                        chosen = (graded, hosts)
            assert chosen is not None
            return self.result(chosen[1])
        return self.disconnected(dropped_any)

    def result(self, hosts: list[int]) -> Placement:
        fab = self.fab
        hosts = sorted(hosts)
        spans = fab._spans(hosts)
        level = next(lv for lv in SEARCH_LEVELS if spans[lv] == 1)
        bad = Health.DEGRADED
        leaf, spine = fab._dom[Level.LEAF], fab._dom[Level.SPINE]
        # Which links the set uses: IB uplinks once it leaves an NVLink domain,
        # leaf uplinks once it leaves a leaf, spine uplinks once it leaves a spine.
        degraded = (
            any(fab._gpu_degraded[i] for i in hosts)
            or (spans[Level.NVLINK] > 1 and any(fab._host_up[i] == bad for i in hosts))
            or (spans[Level.LEAF] > 1 and any(fab._leaf_up[leaf[i]] == bad for i in hosts))
            or (spans[Level.SPINE] > 1 and any(fab._spine_up[spine[i]] == bad for i in hosts))
        )
        return Placement(hosts=tuple(fab.hosts[i] for i in hosts), level=level,
                         spans={lv: spans[lv] for lv in SEARCH_LEVELS},
                         cost=fab._cost(hosts), degraded=bool(degraded))

    # ------------------------------------------------------------- no answer
    def _total_free(self) -> int:
        return sum(self.free.values())

    def _best_gpus(self, level: Level) -> int:
        col = self.fab._dom[level]
        per: dict[int, int] = {}
        for i, f in self.free.items():
            per[col[i]] = per.get(col[i], 0) + f
        return max(per.values(), default=0)

    def _what(self) -> str:
        s = self.shape
        kind = f" {s.gpu_type}" if s.gpu_type else ""
        mem = f" with >= {s.min_gpu_memory_gb:g} GB" if s.min_gpu_memory_gb is not None else ""
        return f"{_plural(s.nodes, 'node')} x {s.gpus_per_node}{kind} GPUs{mem}"

    def _notes(self, dropped: int = 0) -> str:
        notes = []
        if self.wrong_type:
            notes.append(f"{_plural(self.wrong_type, 'host')} with free GPUs of another type")
        if self.unknown_memory:
            notes.append(f"{_plural(self.unknown_memory, 'host')} whose GPU memory the fabric"
                         " does not know (set gpu_memory_gb in the fabric file)")
        if dropped:
            notes.append(f"{_plural(dropped, 'host')} left out for down links")
        if self.no_nvlink and self.shape.strict:
            notes.append(f"{_plural(self.no_nvlink, 'host')} with free GPUs but fewer than"
                         f" {max(self.shape.gpus_per_node, 1)} NVLinked to each other (PCIe"
                         " hosts or partial NVLink meshes)")
        return f" (not counted: {'; '.join(notes)})" if notes else ""

    def too_few(self) -> NoPlacement:
        s = self.shape
        total = self._total_free()
        most = max(self.free.values(), default=0)
        have = len(self.eligible)
        if have == 0:
            reason = (f"{total} GPUs free, at most {most} on any one host; no host has"
                      f" {max(s.gpus_per_node, 1)} free; asked for {self._what()}")
        else:
            reason = (f"{total} GPUs free, but only {_plural(have, 'host')} with"
                      f" {s.gpus_per_node} free; asked for {self._what()}")
        return NoPlacement(reason + self._notes(), free_gpus=total,
                           best_hosts_in_one_domain=have)

    def strict_failure(self, best_at: Mapping[Level, int],
                       dropped: int) -> NoPlacement:
        s = self.shape
        level = max(s.level, Level.HOST)
        best_hosts, best_gpus = best_at.get(level, 0), self._best_gpus(level)
        word = _word(level)
        reason = (f"{self._total_free()} GPUs free, at most {best_gpus} in any one {word}"
                  f" ({_plural(best_hosts, 'host')} with {s.gpus_per_node} free); asked for"
                  f" {s.nodes * s.gpus_per_node} in one {word} ({self._what()})")
        return NoPlacement(reason + self._notes(dropped), free_gpus=self._total_free(),
                           best_hosts_in_one_domain=best_hosts)

    def disconnected(self, dropped: int) -> NoPlacement:
        s = self.shape
        groups, _ = self.pool(Level.CLUSTER)
        best = max((len(g) for g in groups.values()), default=0)
        reason = (f"{len(self.eligible)} hosts have {s.gpus_per_node} free GPUs, but only"
                  f" {best} are reachable together over links that are up; asked for"
                  f" {self._what()}")
        return NoPlacement(reason + self._notes(dropped), free_gpus=self._total_free(),
                           best_hosts_in_one_domain=best)


def place(fab: Fabric, shape: Shape, free: Mapping[str, int]) -> Placement | NoPlacement:
    """See the module docstring; deterministic for equal inputs."""
    return _Search(fab, shape, free).run()


def free_from_nodes(nodes: Sequence[Node]) -> dict[str, int]:
    """Free GPUs per host from Slurm nodes (0 for nodes that cannot take work)."""
    return {node.name: node.gpus_free for node in nodes}

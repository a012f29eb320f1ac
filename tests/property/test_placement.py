"""Placement properties over random fabrics and random free-GPU maps (hypothesis)."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmpolicy.topology import synthetic_fabric
from slurmpolicy.topology.spec import LinkSpec
from slurmpolicy.topology.types import Health, Level, NoPlacement, Placement, Shape

LEVELS = (Level.NVLINK, Level.LEAF, Level.SPINE, Level.CLUSTER)


@st.composite
def scenarios(draw, nested=False):
    """A random fabric, free map and shape. ``nested``: NVLink domains never
    cross a leaf (as on real HGX and NVL72 systems)."""
    gpus = draw(st.integers(1, 8))
    per_nvlink = draw(st.sampled_from([1, 2, 4]))
    per_leaf = (per_nvlink * draw(st.integers(1, 4)) if nested
                else draw(st.integers(1, 8)))
    fab = synthetic_fabric(
        hosts=draw(st.integers(1, 40)), gpus_per_host=gpus, hosts_per_nvlink=per_nvlink,
        hosts_per_leaf=per_leaf, leaves_per_spine=draw(st.integers(1, 4)),
    )
    free = {h: draw(st.integers(0, gpus)) for h in fab.hosts}
    shape = Shape(nodes=draw(st.integers(1, 10)), gpus_per_node=draw(st.integers(0, gpus)),
                  level=draw(st.sampled_from(LEVELS)), strict=draw(st.booleans()))
    return fab, free, shape


def eligible(free, shape):
    return [h for h, f in free.items() if f >= max(shape.gpus_per_node, 1)]


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_placement_only_uses_hosts_with_the_free_gpus_asked_for(case):
    fab, free, shape = case
    result = fab.place(shape, free)
    if isinstance(result, Placement):
        assert len(result.hosts) == shape.nodes == len(set(result.hosts))
        assert all(free[h] >= max(shape.gpus_per_node, 1) for h in result.hosts)
    else:
        assert isinstance(result, NoPlacement) and result.reason


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_strict_never_spans_two_domains(case):
    fab, free, shape = case
    strict = Shape(shape.nodes, shape.gpus_per_node, shape.level, strict=True)
    result = fab.place(strict, free)
    per_domain = Counter(fab.domain_of(h, shape.level) for h in eligible(free, shape))
    fits = any(n >= shape.nodes for n in per_domain.values())
    if isinstance(result, Placement):
        assert result.spans[shape.level] == 1
        assert len({fab.domain_of(h, shape.level) for h in result.hosts}) == 1
    else:
        assert not fits, "strict mode refused although one domain had room"


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_preferred_mode_finds_a_one_leaf_placement_when_one_exists(case):
    fab, free, shape = case
    preferred = Shape(shape.nodes, shape.gpus_per_node, Level.LEAF, strict=False)
    per_leaf = Counter(fab.domain_of(h, Level.LEAF) for h in eligible(free, shape))
    result = fab.place(preferred, free)
    if any(n >= shape.nodes for n in per_leaf.values()):
        assert isinstance(result, Placement) and result.spans[Level.LEAF] == 1
    if len(eligible(free, shape)) >= shape.nodes:
        assert isinstance(result, Placement)  # no health problems: always placeable


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_most_compact_level_is_chosen(case):
    fab, free, shape = case
    result = fab.place(Shape(shape.nodes, shape.gpus_per_node), free)
    if not isinstance(result, Placement):
        return
    for level in (Level.NVLINK, Level.LEAF, Level.SPINE):
        if level >= result.level:
            break
        per = Counter(fab.domain_of(h, level) for h in eligible(free, shape))
        assert all(n < shape.nodes for n in per.values()), f"a single {level.name} fitted"


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_deterministic(case, rnd):
    fab, free, shape = case
    first = fab.place(shape, free)
    items = list(free.items())
    rnd.shuffle(items)
    assert fab.place(shape, dict(items)) == first
    assert fab.place(shape, free) == first


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.data())
def test_down_uplinks_never_used_by_multi_host_jobs(case, data):
    fab, free, shape = case
    down = data.draw(st.sets(st.sampled_from(fab.hosts), max_size=len(fab.hosts)))
    links = [LinkSpec(h, fab.domain_of(h, Level.LEAF), Health.DOWN) for h in sorted(down)]
    broken = fab.with_links(links)
    result = broken.place(Shape(shape.nodes, shape.gpus_per_node), free)
    if isinstance(result, Placement) and len(result.hosts) > 1:
        multi_host_nvlink = result.spans[Level.NVLINK] == 1
        assert multi_host_nvlink or not (set(result.hosts) & down)


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.data())
def test_linear_cost_is_the_sum_over_pairs(case, data):
    fab, _free, _shape = case
    hosts = data.draw(st.lists(st.sampled_from(fab.hosts), unique=True, max_size=12))
    degraded = data.draw(st.sets(st.sampled_from(fab.hosts), max_size=4))
    fab = fab.with_links([LinkSpec(h, fab.domain_of(h, Level.LEAF), Health.DEGRADED)
                          for h in sorted(degraded)])
    pairwise = sum(fab.cost([a, b]) for i, a in enumerate(hosts) for b in hosts[i + 1:])
    assert abs(fab.cost(hosts) - pairwise) < 1e-9


CHILD = {Level.CLUSTER: Level.SPINE, Level.SPINE: Level.LEAF, Level.LEAF: Level.NVLINK,
         Level.NVLINK: Level.HOST, Level.HOST: Level.HOST}


@settings(max_examples=200, deadline=None)
@given(scenarios(nested=True), st.data())
def test_prefer_never_costs_compactness(case, data):
    """Preferred hosts are a tie-break: they never change whether a job fits, the
    innermost domain that holds it, nor how many sub-domains of it it spans.
    (Below that the search is greedy, so other ties may fall differently.)"""
    fab, free, shape = case
    prefer = frozenset(data.draw(st.sets(st.sampled_from(fab.hosts), max_size=6)))
    plain = fab.place(shape, free)
    liked = fab.place(Shape(shape.nodes, shape.gpus_per_node, shape.level, shape.strict,
                            prefer=prefer), free)
    assert isinstance(plain, Placement) == isinstance(liked, Placement)
    if isinstance(plain, Placement) and isinstance(liked, Placement):
        assert liked.level == plain.level
        child = CHILD[plain.level]
        assert liked.spans[child] == plain.spans[child]

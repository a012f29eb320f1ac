"""Every reader of a site's file, fed fuzzed variants of the real corpus files and
random text: it answers or refuses with our typed error naming what was wrong,
never a traceback (hypothesis)."""

from __future__ import annotations

import io
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmpolicy.directives import check_script, sbatch_options
from slurmpolicy.errors import SlurmPolicyError, TopologyError
from slurmpolicy.sim.trace import SacctReport, TraceError, read_sacct
from slurmpolicy.topology import Fabric
from slurmpolicy.topology.nvsmi import interconnect, nvlink_clique, parse_topo_matrix
from slurmpolicy.topology.render import render
from slurmpolicy.topology.topoconf import parse_topology_conf
from slurmpolicy.topology.topoyaml import parse_topology_yaml

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def corpus(kind: str) -> list[str]:
    return [p.read_text(encoding="utf-8", errors="replace")
            for p in sorted((CORPUS / kind).iterdir()) if p.name != "README.md"]


#: Pieces that make the readers' grammar go wrong in interesting ways.
_NOISE = ["=", "[", "]", "-", ",", "#", "\\", "\t", " ", "\n", "\r\n", "\x00", "\x0c", "\x0b",
          "|", ":", "X", "NV", "NV99999999999999", "SOC", "GPU0", "GPU1", "NIC0", "mlx5_0",
          "SwitchName=", "Switches=", "Nodes=", "BlockName=", "BlockSizes=", "RingName=",
          "LinkSpeed=", "- topology: t", "  tree:", "  block:", "    switches:", "flat: true",
          "block_sizes: [0]", "nodes: n[1-3]", "children: x", "cluster_default: true",
          "n[001-999999]", "n[5-1]", "{", "}", "\"jobs\": [", "\"time\": {", "1e400", "null",
          "JobID", "Submit", "ElapsedRaw", "gres/gpu=8", "#SPOLICY --class=research",
          "#SPOLICY --checkpoint=signal:USR1,grace=60", "srun x", "\xe9", "\u2028"]


@st.composite
def mutated(draw: st.DrawFn, texts: list[str]) -> str:
    """A corpus file with lines dropped, duplicated, swapped, cut or sprinkled with noise."""
    lines = draw(st.sampled_from(texts)).split("\n")
    for _ in range(draw(st.integers(1, 6))):
        if not lines:
            lines = [""]
        k = draw(st.integers(0, len(lines) - 1))
        op = draw(st.integers(0, 5))
        if op == 0:
            del lines[k]
        elif op == 1:
            lines.insert(k, lines[k])
        elif op == 2:
            j = draw(st.integers(0, len(lines) - 1))
            lines[k], lines[j] = lines[j], lines[k]
        elif op == 3:
            cut = draw(st.integers(0, len(lines[k])))
            lines[k] = lines[k][:cut]
        else:
            at = draw(st.integers(0, len(lines[k])))
            lines[k] = lines[k][:at] + draw(st.sampled_from(_NOISE)) + lines[k][at:]
    return "\n".join(lines)


def texts(kind: str) -> st.SearchStrategy[str]:
    return st.one_of(mutated(corpus(kind)),
                     st.lists(st.sampled_from(_NOISE), max_size=30).map("".join),
                     st.text(max_size=200))


FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(texts("topology_conf"))
def test_topology_conf_reader_answers_or_refuses(text: str) -> None:
    try:
        spec = parse_topology_conf(text, "fuzz.conf")
    except TopologyError as exc:
        assert str(exc).startswith("fuzz.conf")
        return
    fab = Fabric(spec)
    for form in ("tree", "block", "ring", "yaml", None):
        render(fab, form)


@FUZZ
@given(texts("topology_yaml"))
def test_topology_yaml_reader_answers_or_refuses(text: str) -> None:
    try:
        spec = parse_topology_yaml(text, "fuzz.yaml")
    except TopologyError as exc:
        assert str(exc).startswith("fuzz.yaml")
        return
    render(Fabric(spec), None)


@FUZZ
@given(texts("nvsmi"))
def test_nvsmi_reader_answers_or_refuses(text: str) -> None:
    try:
        host = parse_topo_matrix(text, "h", "fuzz.txt")
    except TopologyError as exc:
        assert str(exc).startswith("fuzz.txt")
        return
    kind, _rank = interconnect(host)
    assert kind in ("", "nvlink", "partial", "pcie")
    assert 0 <= nvlink_clique(host) <= (host.gpus or 0)


@FUZZ
@given(texts("sacct"))
def test_sacct_reader_answers_or_refuses(text: str) -> None:
    report = SacctReport()
    try:
        jobs = read_sacct(io.StringIO(text), report=report)
    except TraceError as exc:
        assert str(exc).startswith("<trace>")
        return
    assert report.read == len(jobs) <= report.rows
    assert all(j.gpus > 0 and j.duration > 0 for j in jobs)
    report.summary()


@FUZZ
@given(st.one_of(texts("batch"), st.binary(max_size=300).map(lambda b: b.decode("latin-1"))))
def test_batch_script_reader_never_raises(text: str) -> None:
    data = text.encode("utf-8", errors="surrogateescape")
    try:
        result = check_script(data)
    except SlurmPolicyError as exc:  # pragma: no cover - check_script promises never to
        raise AssertionError(f"check_script raised {exc!r}") from exc
    assert all(p.message for p in result.problems)
    sbatch_options(data)

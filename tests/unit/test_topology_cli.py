"""`slurmpolicy fabric show | check | render | place` on the devcluster's files, without Slurm."""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmpolicy.cli import cli

DATA = Path(__file__).parent / "data"
EXAMPLE = Path(__file__).parents[2] / "contrib" / "fabric.example.toml"


@pytest.fixture
def run(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_CONF", str(DATA / "devcluster" / "slurm.conf"))
    monkeypatch.setenv("SLURMPOLICY_CONFIG", str(tmp_path / "none.toml"))
    settings = tmp_path / "s.toml"
    settings.write_text("")

    def invoke(*args: str):
        return CliRunner().invoke(cli, ["--config", str(settings), "fabric", *args],
                                  catch_exceptions=False)

    return invoke


def test_show_draws_domains_and_free_gpus(run):
    r = run("show", "--no-slurm")
    assert r.exit_code == 0, r.output
    for word in ("spine", "leaf1", "leaf2", "nvl_rack1", "dgx08", "8/8 h100 free"):
        assert word in r.output
    data = json.loads(run("show", "--no-slurm", "--json").output)
    assert data["free_gpus"] == 64 and len(data["hosts"]) == 8
    assert {h["leaf"] for h in data["hosts"]} == {"leaf1", "leaf2"}


def test_check_ok_and_conflict(run, tmp_path):
    r = run("check", "--no-slurm")
    assert r.exit_code == 0 and r.output.strip().endswith("ok")
    bad = tmp_path / "topology.conf"
    bad.write_text("SwitchName=a Nodes=dgx[01-02]\nSwitchName=b Nodes=dgx[03-08]\n")
    r = run("check", "--no-slurm", "--topology-conf", str(bad), "--json")
    data = json.loads(r.output)
    assert r.exit_code == 1 and data["status"] == "conflicts" and data["conflicts"]


def test_render_tree_and_block(run, tmp_path):
    r = run("render", "--no-slurm")
    assert "SwitchName=leaf1 Nodes=dgx[01-04]" in r.output
    assert "SwitchName=spine Switches=leaf[1-2]" in r.output
    out = tmp_path / "t.conf"
    r = run("render", "--no-slurm", "--form", "block", "-o", str(out))
    assert "BlockName=nvl_rack2 Nodes=dgx[05-08]" in out.read_text()


def test_place_and_no_place(run):
    r = run("place", "--no-slurm", "--nodes", "3", "--gpus-per-node", "8")
    assert r.exit_code == 0 and r.output.startswith("dgx[01-03]: within one NVLink domain")
    r = run("place", "--no-slurm", "-N", "6", "-G", "8", "--level", "leaf", "--strict", "--json")
    data = json.loads(r.output)
    assert r.exit_code == 1 and not data["placed"]
    assert "at most 32 in any one leaf" in data["reason"]
    r = run("place", "--no-slurm", "-N", "2", "-G", "8", "--prefer", "dgx[07-08]", "--json")
    assert json.loads(r.output)["hostlist"] == "dgx[07-08]"
    r = run("place", "--no-slurm", "-N", "1", "-G", "1", "--level", "rack")
    assert r.exit_code == 2 and "allowed: gpu, host, nvlink" in r.output


def test_bad_topology_conf_is_one_line_error(monkeypatch, tmp_path):
    from slurmpolicy.cli import main

    bad = tmp_path / "topology.conf"
    bad.write_text("SwitchName=a Nodes=dgx01\nSwitchName=b Switches=zz\n")
    monkeypatch.setenv("SLURM_CONF", str(DATA / "devcluster" / "slurm.conf"))
    with pytest.raises(SystemExit) as exc:
        main(["fabric", "check", "--no-slurm", "--topology-conf", str(bad)])
    assert exc.value.code == 2


def test_fabric_file_option(run):
    # The example names hosts (gb001..) the devcluster's Slurm does not know: as Slurm
    # does with such names in topology.conf, they are left out with a warning.
    r = run("check", "--no-slurm", "--fabric-file", str(EXAMPLE), "--json")
    data = json.loads(r.output)
    assert any(re.search(r"fabric.example.toml:17.*gb\[001-036\] not known to Slurm; left out", w)
               for w in data["warnings"]), data["warnings"]


def test_check_says_how_each_hosts_gpus_talk(run, tmp_path):
    corpus = Path(__file__).resolve().parents[1] / "corpus" / "nvsmi"
    topo = tmp_path / "topo"
    topo.mkdir()
    # The devcluster's hosts dgx01..: one NVSwitch board, one PCIe-only box.
    (topo / "dgx01.txt").write_text((corpus / "mleng-h100-nv18.txt").read_text())
    (topo / "dgx02.txt").write_text((corpus / "club3090-46-5gpu-pcie.txt").read_text())
    r = run("check", "--no-slurm", "--nvidia-smi-topo", str(topo / "*.txt"), "--json")
    data = json.loads(r.output)
    assert data["interconnect"] == {"nvlink": "dgx01", "pcie": "dgx02"}
    assert any("dgx02 has no NVLink" in w for w in data["warnings"])
    r = run("check", "--no-slurm", "--nvidia-smi-topo", str(topo / "*.txt"))
    assert "dgx02: PCIe only, no NVLink" in r.output
    assert "dgx01: GPUs NVLinked all to all" in r.output

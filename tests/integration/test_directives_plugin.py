"""The rendered job_submit.lua inside a real slurmctld (the dev cluster), used
by the ordinary test user through sbatch and scontrol: valid directives are
stored in admin_comment, bad lines are refused with the validator's messages,
updates cannot get around the directives, and pathological scripts neither
hang nor bring the controller down."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from slurmpolicy import settings as settings_mod
from slurmpolicy.directives import Context, check_script, sbatch_options
from slurmpolicy.plugin import render

from .slurmtools import LiveCluster, job_user

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "contrib" / "examples"
SITE = settings_mod.load(EXAMPLES / "site.toml")


@pytest.fixture(scope="module")
def cluster(devcluster_factory: Callable[..., LiveCluster], tmp_path_factory) -> LiveCluster:
    """A small cluster of its own, started with the plugin rendered for site.toml
    (its doorbell in the test's own directory: accepted production jobs ring it,
    and the host's /run/slurmpolicy/doorbell is a real daemon's)."""
    lua = tmp_path_factory.mktemp("plugin") / "job_submit.lua"
    lua.write_text(render(msgspec.structs.replace(
        SITE, plugin=msgspec.structs.replace(SITE.plugin, doorbell=str(lua.parent / "doorbell")))))
    return devcluster_factory(nodes=2, gpus_per_node=2, racks=1, job_submit_lua=lua)


def sbatch(cluster: LiveCluster, script: str | bytes, *args: str):
    """sbatch as the test user, held (these jobs need not run); the finished process."""
    wd = cluster.workdir("directives")
    return cluster.slurm_cmd("sbatch", "--parsable", "--hold", f"--chdir={wd}",
                             "--output=/dev/null", *args, user=job_user(), input=script,
                             check=False, timeout=60)


def own_line(cluster: LiveCluster, job: int, key: str) -> str | None:
    """A field that scontrol prints on a line of its own (AdminComment, Comment).

    Their values hold spaces and ``key=value`` words, so the one-line form
    cannot be split reliably; the multi-line form gives each its own line.
    """
    proc = cluster.slurm_cmd("scontrol", "show", "job", str(job))
    for line in proc.stdout.splitlines():
        stripped = line.strip()
        if stripped.startswith(key + "="):
            value = stripped[len(key) + 1:]
            return None if value in ("", "(null)") else value
    return None


def account_update_let_through(cluster: LiveCluster, job: int, proc) -> None:
    """The plugin let ``scontrol update jobid=N account=X`` through.

    Without slurmdbd, Slurm 25.11 itself then fails such an update now and then
    with a stale errno ("Resource temporarily unavailable": _retrieve_new_assoc()
    finds no association and returns whatever errno held), or "succeeds" leaving
    the account as it was; 22.05 answers 0. What stays checkable on both: it was
    not the plugin that said no (no "denied", no refusal of this job in the log).
    """
    out = proc.stderr + proc.stdout
    assert "denied" not in out.lower(), out
    log = cluster.ctld_log.read_text(errors="replace")
    assert f"slurmpolicy: job {job} has class" not in log
    version = cluster.slurm_cmd("scontrol", "--version").stdout.split()[-1]
    if tuple(int(x) for x in version.split(".")[:2]) < (25, 11):
        assert proc.returncode == 0, out
    else:
        assert proc.returncode == 0 or "Resource temporarily unavailable" in out, out


def submitted(proc) -> int:
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().split(";")[0])


def expected_comment(script: str | bytes, partition: str = "research") -> str | None:
    data = script.encode() if isinstance(script, str) else script
    opts = sbatch_options(data)
    result = check_script(data, SITE, Context(account=opts.get("account"),
                                              partition=opts.get("partition", partition)))
    assert result.ok, result.problems
    return result.admin_comment


VALID = {
    "every directive": (
        "#!/bin/bash\n#SBATCH --account=prod\n#SBATCH --partition=prod\n"
        "#SPOLICY --class=production\n"
        "#SPOLICY --checkpoint=signal:USR1,grace=2m,interval=30m\n"
        "#SPOLICY --preemptible=after=1:00:00 --topology=leaf,strict\n"
        "#SPOLICY --expected-runtime=1-12 --gpu-type=h100 --min-gpu-memory=80G\n"
        "#SPOLICY --data=imagenet --deferrable=night,deadline=2d\n"
        "srun hostname\n"),
    "space separated": "#!/bin/bash\n#SPOLICY --class research --topology nvlink # c\ntrue\n",
    "no checkpoint in research": "#!/bin/bash\n#SPOLICY --checkpoint=none\ntrue\n",
}


@pytest.mark.parametrize("name", list(VALID))
def test_valid_scripts_are_accepted_with_the_normalized_admin_comment(cluster, name):
    script = VALID[name]
    job = submitted(sbatch(cluster, script))
    info = cluster.scontrol_show_job(job)
    assert own_line(cluster, job, "AdminComment") == expected_comment(script)
    assert info["UserId"].startswith(f"{job_user() or ''}(")
    if "signal:" in script:
        assert info["Requeue"] == "1"


@pytest.mark.parametrize("path", sorted(p for p in EXAMPLES.glob("*.sh") if p.name != "invalid.sh"),
                         ids=lambda p: p.name)
def test_the_contrib_examples_are_accepted(cluster, path):
    script = path.read_text()
    # The examples ask for 8 GPUs and several nodes; the test cluster is smaller.
    job = submitted(sbatch(cluster, script, "--nodes=1", "--gres=gpu:1", "--array=0"))
    assert own_line(cluster, job, "AdminComment") == expected_comment(script)


def test_a_script_without_directives_is_left_alone(cluster):
    job = submitted(sbatch(cluster, "#!/bin/bash\n#SBATCH -N 1\ntrue\n"))
    assert own_line(cluster, job, "AdminComment") is None


def test_the_class_weight_is_the_site_factor_from_submission(cluster):
    """A production job has its class standing in Slurm before any daemon cycle:
    the plugin sets the site factor (slurmctld lets only the job_submit plugin
    set it at submit), and priority/multifactor adds it to the priority.

    Pairs of jobs alike but for their class (same account, partition, size,
    begin time a while away so that age plays no part) differ in priority by
    exactly the difference of their class weights."""
    later = ("--begin=now+1hour",)

    def priority(head: str, cls: str) -> int:
        job = submitted(sbatch_free(cluster, f"#!/bin/bash\n{head}#SPOLICY --class={cls}\ntrue\n",
                                    *later))
        return int(cluster.scontrol_show_job(job)["Priority"])

    prod = "#SBATCH --account=prod\n#SBATCH --partition=prod\n"
    weights = SITE.classes
    assert (priority(prod, "production") - priority(prod, "experimental")
            == weights["production"].weight - weights["experimental"].weight)
    assert (priority("", "research") - priority("", "experimental")
            == weights["research"].weight - weights["experimental"].weight)


def sbatch_free(cluster: LiveCluster, script: str | bytes, *args: str):
    """sbatch as the test user, not held."""
    wd = cluster.workdir("directives")
    return cluster.slurm_cmd("sbatch", "--parsable", f"--chdir={wd}", "--output=/dev/null",
                             *args, user=job_user(), input=script, check=False, timeout=60)


INVALID = {
    "unknown directive": "#SPOLICY --topologie=leaf",
    "bad class": "#SPOLICY --class=reserch",
    "restricted class": "#SPOLICY --class=production",
    "missing value": "#SPOLICY --class",
    "twice": "#SPOLICY --class=research\n#SPOLICY --class=experimental",
    "not an option": "#SPOLICY class=research",
    "lowercase prefix": "#spolicy --class=research",
    "bad signal": "#SPOLICY --checkpoint=signal:KILL,grace=60s",
    "grace too long": "#SPOLICY --checkpoint=signal:USR1,grace=2-00:00:00",
    "preemptible": "#SPOLICY --preemptible=sometimes",
    "topology": "#SPOLICY --topology=rack,strict",
    "duration": "#SPOLICY --expected-runtime=1h30m",
    "gpu memory": "#SPOLICY --min-gpu-memory=80TB",
    "data": "#SPOLICY --data=../../etc/passwd",
    "window": "#SPOLICY --deferrable=nigth",
    "no checkpoint outside research": "#SBATCH --partition=prod\n#SPOLICY --checkpoint=none",
    "binary in a directive": "#SPOLICY --data=\x01\x7f --class=research",
}


@pytest.mark.parametrize("name", list(INVALID))
def test_each_kind_of_invalid_line_is_refused_with_its_message(cluster, name):
    script = f"#!/bin/bash\n#SBATCH --account=vision\n{INVALID[name]}\ntrue\n"
    proc = sbatch(cluster, script)
    assert proc.returncode != 0 and not proc.stdout.strip()
    data = script.encode()
    opts = sbatch_options(data)
    result = check_script(data, SITE, Context(account=opts.get("account"),
                                              partition=opts.get("partition", "research")))
    assert result.problems
    for problem in result.problems:
        assert f"sbatch: error: slurmpolicy: {problem.message}\n" in proc.stderr, proc.stderr


def scontrol_as_user(cluster: LiveCluster, *args: str):
    return cluster.slurm_cmd("scontrol", *args, user=job_user(), check=False)


def test_a_user_cannot_change_admin_comment(cluster):
    script = "#!/bin/bash\n#SPOLICY --class=experimental\ntrue\n"
    job = submitted(sbatch(cluster, script))
    before = own_line(cluster, job, "AdminComment")
    proc = scontrol_as_user(cluster, "update", f"jobid={job}",
                            "admincomment=spolicy:v1 class=production")
    assert proc.returncode != 0 and "denied" in (proc.stderr + proc.stdout).lower()
    assert own_line(cluster, job, "AdminComment") == before
    # The comment is the user's own channel (checkpoint acknowledgements): still open.
    ack = scontrol_as_user(cluster, "update", f"jobid={job}", "comment=ckpt:1796218000")
    assert ack.returncode == 0, ack.stderr
    assert own_line(cluster, job, "Comment") == "ckpt:1796218000"


def test_a_user_cannot_escalate_through_update(cluster):
    prod = submitted(sbatch(cluster, "#!/bin/bash\n#SBATCH -A prod -p prod\n"
                                     "#SPOLICY --class=production\n"
                                     "#SPOLICY --checkpoint=signal:USR1,grace=30s\ntrue\n"))
    research = submitted(sbatch(cluster, "#!/bin/bash\n#SBATCH -A vision\n"
                                         "#SPOLICY --checkpoint=signal:USR1,grace=30s\ntrue\n"))
    nockpt = submitted(sbatch(cluster, "#!/bin/bash\n#SPOLICY --checkpoint=none\ntrue\n"))

    # A production-class job moved to an account that may not use the class.
    proc = scontrol_as_user(cluster, "update", f"jobid={prod}", "account=vision")
    assert proc.returncode != 0 and "denied" in proc.stderr.lower()
    assert cluster.scontrol_show_job(prod)["Account"] == "prod"
    # A job that cannot checkpoint moved out of the partitions that allow it.
    proc = scontrol_as_user(cluster, "update", f"jobid={nockpt}", "partition=prod")
    assert proc.returncode != 0 and "denied" in proc.stderr.lower()
    assert cluster.scontrol_show_job(nockpt)["Partition"] == "research"
    # A preemptible checkpointable job made impossible to requeue.
    proc = scontrol_as_user(cluster, "update", f"jobid={research}", "requeue=0")
    assert proc.returncode != 0 and "denied" in proc.stderr.lower()
    assert cluster.scontrol_show_job(research)["Requeue"] == "1"
    # What the directives allow stays allowed: the plugin lets these through (the
    # dev cluster has no accounting, so Slurm itself leaves the account as it was).
    proc = scontrol_as_user(cluster, "update", f"jobid={research}", "account=nlp")
    account_update_let_through(cluster, research, proc)
    proc = scontrol_as_user(cluster, "update", f"jobid={nockpt}", "requeue=0")
    assert proc.returncode == 0, proc.stderr
    assert cluster.scontrol_show_job(nockpt)["Requeue"] == "0"
    # The reason is in slurmctld's log (22.05 discards user messages from job_modify).
    log = cluster.ctld_log.read_text(errors="replace")
    assert f"slurmpolicy: job {prod} has class 'production', restricted to accounts prod" in log
    assert f"slurmpolicy: job {nockpt} cannot checkpoint (--checkpoint=none)" in log
    assert f"slurmpolicy: job {research} can checkpoint and is preemptible" in log


def test_an_administrator_may_update(cluster):
    job = submitted(sbatch(cluster, "#!/bin/bash\n#SBATCH -A prod -p prod\n"
                                    "#SPOLICY --class=production\n"
                                    "#SPOLICY --checkpoint=signal:USR1,grace=30s\ntrue\n"))
    proc = cluster.slurm_cmd("scontrol", "update", f"jobid={job}", "requeue=0", check=False)
    assert proc.returncode == 0, proc.stderr
    assert cluster.scontrol_show_job(job)["Requeue"] == "0"
    proc = cluster.slurm_cmd("scontrol", "update", f"jobid={job}", "account=vision",
                             check=False)
    account_update_let_through(cluster, job, proc)


PATHOLOGICAL = {
    "1 MB comment header, then a directive": (
        b"#!/bin/bash\n" + b"# padding\n" * 110_000 + b"#SPOLICY --class=research\ntrue\n",
        "slurmpolicy: script: the leading comment block is longer than 1000 lines"),
    "1 MB body": (b"#!/bin/bash\n#SPOLICY --class=research\n" + b"echo x\n" * 150_000,
                  None),
    "10,000 directive lines": (
        b"#!/bin/bash\n" + b"#SPOLICY --class=research\n" * 10_000 + b"true\n",
        "slurmpolicy: line 3: #SPOLICY --class=research: --class given twice"),
    "binary junk": (b"#!/bin/bash\n" + bytes(range(1, 256)) * 4000, None),
    "binary junk in the header": (
        b"#!/bin/bash\n#" + bytes(range(128, 256)) * 4000 + b"\n#SPOLICY --class=bogus\ntrue\n",
        "slurmpolicy: script: the leading comment block"),
}


@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_scripts_return_and_the_controller_stays_up(cluster, name):
    script, refusal = PATHOLOGICAL[name]
    proc = sbatch(cluster, script)  # returns (slurm_cmd has a timeout) ...
    if refusal is None:
        submitted(proc)
    else:
        assert proc.returncode != 0 and refusal in proc.stderr, proc.stderr[:2000]
    ping = cluster.slurm_cmd("scontrol", "ping", check=False)
    assert ping.returncode == 0 and "is UP" in ping.stdout  # ... and slurmctld answers
    # and still takes an ordinary job.
    job = submitted(sbatch(cluster, "#!/bin/bash\n#SPOLICY --class=research\ntrue\n"))
    assert own_line(cluster, job, "AdminComment") == "spolicy:v1 class=research"


def test_a_late_directive_is_warned_at_submit_and_the_job_accepted(cluster):
    script = "#!/bin/bash\n#SPOLICY --class=research\nsrun true\n#SPOLICY --class=production\n"
    proc = sbatch(cluster, script)
    job = submitted(proc)
    (warning,) = check_script(script.encode(), SITE).warnings
    assert f"slurmpolicy: warning: {warning}" in proc.stderr, proc.stderr
    assert own_line(cluster, job, "AdminComment") == "spolicy:v1 class=research"


def test_dos_line_breaks_get_sbatchs_refusal_in_the_same_words(cluster):
    # sbatch refuses the script before it reaches the plugin; `directives check` says
    # the same thing, so a user hears one message whichever runs first.
    proc = sbatch(cluster, b"#!/bin/bash\r\n#SPOLICY --class=research\r\ntrue\r\n")
    assert proc.returncode != 0
    said = " ".join(line.removeprefix("sbatch: error: ").strip()
                    for line in proc.stderr.splitlines())
    assert ("Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX line"
            " breaks (\\n)") in said, proc.stderr
    (problem,) = check_script(b"#!/bin/bash\r\ntrue\r\n", SITE).problems
    assert ("Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX line"
            " breaks (\\n)") in problem.message

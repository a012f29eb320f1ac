"""The #SPOLICY schema and validator: messages, grammar, round trips, CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from directives_support.cases import CASES, SITE, script
from hypothesis import given
from hypothesis import strategies as st

from slurmpolicy import settings as settings_mod
from slurmpolicy.cli import cli
from slurmpolicy.directives import (
    MAX_PROBLEMS,
    Context,
    DirectiveErrors,
    check_script,
    levenshtein,
    parse_directive_duration,
    parse_script,
    sbatch_options,
    schema,
    suggest,
)
from slurmpolicy.errors import InvalidDirective
from slurmpolicy.jobpolicy import Checkpoint, JobPolicy, parse_admin_comment, render_admin_comment


def problems(name: str) -> list[str]:
    body, account, partition, default = CASES[name]
    result = check_script(body, SITE, Context(account=account, partition=partition or default))
    return [p.message for p in result.problems]


def test_schema_has_every_directive_with_help_and_example():
    names = [d.name for d in schema(SITE)]
    assert names == ["class", "checkpoint", "preemptible", "topology", "expected-runtime",
                     "gpu-type", "min-gpu-memory", "data", "deferrable", "retry"]
    for d in schema(SITE):
        assert d.allowed and d.help and d.example.startswith(f"--{d.name}") and d.default
        # every documented example is itself valid
        assert check_script(script(f"#SPOLICY {d.example}"), SITE,
                            Context(account="prod")).ok, d.example


def test_schema_comes_from_the_settings():
    by_name = {d.name: d for d in schema(SITE)}
    assert "production (accounts prod, ops)" in by_name["class"].allowed
    assert by_name["class"].restrictions == {"production": ("prod", "ops")}
    assert "night, weekend" in by_name["deferrable"].allowed
    default = {d.name: d for d in schema()}
    assert "no deferral windows" in default["deferrable"].allowed


def test_valid_script_gives_the_policy():
    policy = parse_script(CASES["every directive"][0], SITE, Context(account="prod"))
    assert policy == JobPolicy(
        job_class="production",
        checkpoint=Checkpoint(signal="USR1", grace=120.0, interval=1800.0),
        preemptible=True, preemptible_after=3600.0, topology="leaf", topology_strict=True,
        expected_runtime=1.5 * 86400, gpu_type="h100", min_gpu_memory_gb=80.0,
        data="imagenet/train-2024", defer_window="night", defer_deadline=2 * 86400.0, retries=3)


@pytest.mark.parametrize(("name", "message"), [
    ("unknown directive",
     "line 2: #SPOLICY --topologie=leaf: unknown directive --topologie (did you mean "
     "--topology?); allowed: --class, --checkpoint, --preemptible, --topology, "
     "--expected-runtime, --gpu-type, --min-gpu-memory, --data, --deferrable, --retry"),
    ("bad class",
     "line 2: #SPOLICY --class=reserch: invalid value 'reserch' for --class (did you mean "
     "research?); allowed: production (accounts prod, ops), research, experimental"),
    ("restricted class, other account",
     "line 2: #SPOLICY --class=production: class 'production' is restricted to accounts "
     "prod, ops, not 'vision'; allowed: for account 'vision': research, experimental"),
    ("twice",
     "line 3: #SPOLICY --class=experimental: --class given twice (first on line 2); "
     "allowed: each directive once"),
    ("not an option",
     "line 2: #SPOLICY class=research: expected --name=value, found 'class=research' (did you "
     "mean --class=research?); allowed: #SPOLICY --name=value"),
    ("bad signal",
     "line 2: #SPOLICY --checkpoint=signal:KILL,grace=60: invalid value "
     "'signal:KILL,grace=60' for --checkpoint: unknown signal 'KILL'; allowed: none, "
     "periodic,interval=DURATION, or signal:SIG,grace=DURATION[,interval=DURATION][,exit=done] "
     "with SIG one of USR1, USR2, TERM, INT, HUP, "
     "QUIT, ALRM, CONT, URG, XCPU, grace from 1s to 1d (default 2m), interval from 1m to 30d"),
    ("topology near level",
     "line 2: #SPOLICY --topology=lef: invalid value 'lef' for --topology (did you mean leaf?);"
     " allowed: nvlink, leaf, spine or any, optionally followed by ,strict"),
    ("checkpoint none refused",
     "line 2: #SPOLICY --checkpoint=none: --checkpoint=none is allowed only in partitions "
     "batch, debug; the job's partition is 'gpu'; allowed: --checkpoint=signal:SIG,"
     "grace=DURATION, or partitions batch, debug (#SBATCH --partition=)"),
    ("grace too long",
     "line 2: #SPOLICY --checkpoint=signal:USR1,grace=2-00:00:00: invalid value "
     "'signal:USR1,grace=2-00:00:00' for --checkpoint: grace must be from 1s to 1d; allowed: "
     "none, periodic,interval=DURATION, or signal:SIG,grace=DURATION[,interval=DURATION]"
     "[,exit=done] with SIG one of USR1, USR2, TERM, INT, HUP, QUIT, ALRM, CONT, URG, XCPU, "
     "grace from 1s to 1d (default 2m), interval from 1m to 30d"),
])
def test_messages_name_line_value_and_what_is_allowed(name, message):
    assert problems(name) == [message]


@pytest.mark.parametrize(("name", "fragment"), [
    ("missing value", "--class needs a value"),
    ("empty value", "--class needs a value"),
    ("restricted class, no account", "and the job names no account"),
    ("single dash", "found '-topology=leaf' (did you mean --topology=leaf?)"),
    ("lowercase prefix", "the prefix must be #SPOLICY in capitals"),
    ("glued prefix", "a blank must follow #SPOLICY"),
    ("near signal", "unknown signal 'USR3' (did you mean USR1?)"),
    ("missing signal", "signal is missing"),
    ("unknown checkpoint part", "unknown part 'grce=60'"),
    ("grace twice", "grace given twice"),
    ("grace not duration", "grace 'soon' is not a duration"),
    ("interval too short", "interval must be from 1m to 30d"),
    ("preemptible bad", "(did you mean yes?)"),
    ("preemptible after bad", "after 'forever' is not a duration"),
    ("topology bad flag", "unknown flag 'strikt' (did you mean strict?)"),
    ("topology any strict", "strict needs a level other than any"),
    ("runtime unlimited", "for --expected-runtime: not a duration"),
    ("runtime zero", "must be from 1s to 365d"),
    ("runtime huge digits", "not a duration"),
    ("runtime garbage", "not a duration"),
    ("gpu type bad", "invalid value 'h100;rm' for --gpu-type;"),
    ("gpu memory bad", "invalid value '80TB'"),
    ("gpu memory big", "must be from 1 to 4096 GB"),
    ("data bad", "invalid value '../etc' for --data"),
    ("window unknown", "(did you mean night?)"),
    ("window deadline bad", "unknown part 'deadlin=1d'"),
    ("window deadline range", "deadline must be from 1s to 30d"),
    ("non ascii value", "invalid value 'r?search' for --class (did you mean research?)"),
    ("control characters", "invalid value 'a?b?' for --data"),
    ("long directive line", "line longer than 1024 bytes"),
    ("checkpoint none no partition", "the job's partition is not named"),
    ("checkpoint none partition list", "the job's partition is 'batch,gpu'"),
    ("directive after header line cap", "script: the leading comment block is longer than 1000"),
    ("1 MB single line", "script: the leading comment block is longer than 1000"),
    ("1 MB comment header then directive", "script: the leading comment block"),
    ("10000 directive lines", "--class given twice (first on line 2)"),
])
def test_each_kind_of_bad_line(name, fragment):
    found = problems(name)
    assert found and any(fragment in m for m in found), found


def test_crlf_is_refused_as_sbatch_refuses_it():
    # sbatch (src/sbatch/sbatch.c) refuses a script with any \r\n before reading #SBATCH.
    for name in ("tabs and CRLF", "CRLF in the body only"):
        assert problems(name) == [
            "script: Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX"
            " line breaks (\\n), as sbatch says; allowed: UNIX line breaks (convert with"
            " dos2unix)"]


def test_form_feed_and_vertical_tab_lines_are_blank_as_for_sbatch():
    result = check_script(CASES["form feed and vertical tab lines keep the header"][0], SITE)
    assert result.ok and result.policy.topology == "leaf"


def test_late_directives_are_warned_not_read():
    result = check_script(CASES["late directives warned"][0], SITE)
    assert result.ok and result.policy.job_class == "research"
    assert result.policy.topology == "any"
    assert [w.split(": ")[0] for w in result.warnings] == ["line 4", "line 7", "line 9"]
    assert result.warnings[0] == (
        "line 4: #SPOLICY --topology=leaf: after the first command (line 3), where sbatch"
        " stops reading directives; this line is ignored; allowed: #SPOLICY lines before"
        " the first command")
    end = check_script(CASES["late directive at the end without newline"][0], SITE)
    assert end.warnings == (end.warnings[0],) and end.warnings[0].startswith(
        "line 3: #SPOLICY --class=z: after the first command (line 2)")
    assert check_script(script("#SPOLICY --class=research"), SITE).warnings == ()
    after = check_script(CASES["late directive after comments"][0], SITE).warnings
    assert [w.split(":")[0] for w in after] == ["line 6"]
    # Only the 64 KiB after the first command are looked at: bounded work in slurmctld.
    assert check_script(CASES["late directive past the look-ahead"][0], SITE).warnings == ()


@pytest.mark.parametrize("name, key, number", [("bare grace", "grace", "60"),
                                              ("bare interval", "interval", "1800")])
def test_a_bare_number_for_grace_or_interval_shows_both_readings(name, key, number):
    (message,) = problems(name)
    assert (f"{key}={number} has no unit: {number}s (seconds, as --signal=SIG@{number} and"
            f" GraceTime count) or {number}m (minutes, as --time counts)? write {number}s or"
            f" {number}m") in message


def test_nothing_after_prefix_is_reported_for_each_line():
    assert [m.split(":")[0] for m in problems("nothing after prefix")] == ["line 2", "line 3"]


def test_problem_count_is_capped():
    assert len(problems("many problems")) == MAX_PROBLEMS


@pytest.mark.parametrize("name", [
    "no directives", "space separated values", "tabs, LF only", "lone CR line is blank",
    "form feed and vertical tab lines keep the header", "late directives warned",
    "checkpoint none in allowed partition", "checkpoint none in default partition",
    "default grace and SIG prefix", "fractional durations", "durations all forms",
    "directives stop at first command", "indented comment keeps header", "1 MB body",
    "1 MB comment header no directive", "binary junk", "NUL ends the script",
    "directive at header line cap",
])
def test_valid_scripts(name):
    assert problems(name) == []


def test_normalized_values():
    def policy(*lines: str) -> JobPolicy:
        return parse_script(script(*lines), SITE)
    assert policy("#SPOLICY --checkpoint=signal=sigterm").checkpoint == Checkpoint("TERM", 120.0)
    assert policy("#SPOLICY --expected-runtime=1.5h").expected_runtime == 5400
    assert policy("#SPOLICY --checkpoint=signal:USR2,grace=0.5s").checkpoint.grace == 1.0
    assert policy("#SPOLICY --preemptible=after=2-03:04:05").preemptible_after == 183845
    assert policy("#SPOLICY --class research # a comment").job_class == "research"
    assert policy("#SPOLICY --min-gpu-memory=80gb").min_gpu_memory_gb == 80
    assert policy("#SPOLICY --topology=nvlink").topology_strict is False
    # a line after the first command is not read, as sbatch does with #SBATCH
    assert policy("echo", "#SPOLICY --class=nope") == JobPolicy()


def test_no_directives_leaves_admin_comment_alone():
    result = check_script(script("#SBATCH -N 1"), SITE)
    assert result.ok and result.admin_comment is None and result.policy == JobPolicy()


def test_parse_script_raises_invalid_directive_with_every_problem():
    with pytest.raises(InvalidDirective) as exc:
        parse_script(script("#SPOLICY --class=x", "#SPOLICY --topology=y"), SITE)
    assert isinstance(exc.value, DirectiveErrors)
    assert [p.line for p in exc.value.problems] == [2, 3]
    assert "line 2:" in str(exc.value) and "line 3:" in str(exc.value)


def test_duration_grammar_matches_slurm_formats():
    cases = {"90": 5400, "1:30": 90, "01:02:03": 3723, "2-03": 183600, "2-03:04": 183840,
             "2-03:04:05": 183845, "90s": 90, "30m": 1800, "2h": 7200, "1d": 86400,
             "1.5h": 5400, "0.4s": 0, "0.5s": 1}
    for text, seconds in cases.items():
        assert parse_directive_duration(text) == seconds, text
    for text in ("UNLIMITED", "-1", "", "1h30m", "1e3", "\u0661", "9999999999", " 5", "5 "):
        assert parse_directive_duration(text) is None, text


def test_suggestions():
    assert levenshtein("kitten", "sitting") == 3
    assert suggest("clas", ["class", "data"]) == "class"
    assert suggest("zzzzzz", ["class", "data"]) is None
    assert suggest("x", ["any"]) is None
    assert suggest("a" * 100, ["a"]) is None


def test_sbatch_options_read_account_and_partition():
    body = script("#SBATCH -A vision -N 2", "#SBATCH --partition=batch",
                  body="echo\n#SBATCH -A no\n")
    assert sbatch_options(body) == {"account": "vision", "partition": "batch"}
    assert sbatch_options(script("#SBATCH --account prod -pgpu")) == {"account": "prod",
                                                                       "partition": "gpu"}


# --- round trips: directive -> JobPolicy -> admin_comment -> JobPolicy ----------

ROUND_TRIP = [
    "#SPOLICY --class=experimental",
    "#SPOLICY --checkpoint=none",
    "#SPOLICY --checkpoint=signal:USR1,grace=45s",
    "#SPOLICY --checkpoint=signal:TERM,grace=1:00,interval=2h",
    "#SPOLICY --preemptible=no",
    "#SPOLICY --preemptible=yes",
    "#SPOLICY --preemptible=after=90m",
    "#SPOLICY --topology=nvlink",
    "#SPOLICY --topology=spine,strict",
    "#SPOLICY --topology=any",
    "#SPOLICY --expected-runtime=3-00",
    "#SPOLICY --gpu-type=a100-80gb",
    "#SPOLICY --min-gpu-memory=24",
    "#SPOLICY --data=s3:bucket/c4.en",
    "#SPOLICY --deferrable=weekend",
    "#SPOLICY --deferrable=night,deadline=12:00:00",
]


@pytest.mark.parametrize("line", ROUND_TRIP)
def test_every_directive_round_trips_through_admin_comment(line):
    result = check_script(script(line), SITE, Context(partition="batch"))
    assert result.ok and result.admin_comment
    assert parse_admin_comment(result.admin_comment) == result.policy
    assert render_admin_comment(parse_admin_comment(result.admin_comment)) == result.admin_comment


@given(st.lists(st.sampled_from(ROUND_TRIP), unique_by=lambda line: line.split("=")[0]))
def test_any_combination_round_trips(lines):
    result = check_script(script(*lines), SITE, Context(partition="batch"))
    assert result.ok
    if lines:
        assert parse_admin_comment(result.admin_comment or "") == result.policy


def test_settings_plugin_section_defaults_and_validation(tmp_path):
    assert settings_mod.Settings().plugin.admin_uids == (0,)
    p = tmp_path / "s.toml"
    p.write_text("[plugin]\nadmin_uids = [0, 64030]\nset_requeue = false\n")
    loaded = settings_mod.load(p)
    assert loaded.plugin.admin_uids == (0, 64030) and not loaded.plugin.set_requeue
    p.write_text("[plugin]\nadmin_uids = [-1]\n")
    with pytest.raises(settings_mod.ConfigError, match="admin_uids"):
        settings_mod.load(p)


# --- the commands --------------------------------------------------------------

@pytest.fixture()
def site_toml(tmp_path):
    p = tmp_path / "site.toml"
    p.write_text(
        '[classes.production]\nweight = 100000\nrank = 3\npreemptible = false\n'
        'accounts = ["prod", "ops"]\n'
        '[classes.research]\nweight = 10000\nrank = 2\n'
        '[classes.experimental]\nweight = 0\nrank = 1\n'
        '[deferral.windows.night]\nhours = [0, 1, 2]\n')
    return p


def invoke(*args: str, input: bytes | None = None):
    return CliRunner().invoke(cli, list(args), input=input, obj={})


def test_check_prints_admin_comment(tmp_path, site_toml):
    f = tmp_path / "job.sh"
    f.write_bytes(script("#SBATCH --account=prod", "#SPOLICY --class=production",
                         "#SPOLICY --checkpoint=signal:USR1,grace=90s"))
    r = invoke("--config", str(site_toml), "directives", "check", str(f))
    assert r.exit_code == 0, r.output
    assert "admin_comment: spolicy:v1 class=production ckpt=signal:USR1,grace=90" in r.output
    assert "#SBATCH --signal=B:USR1@90" in r.output


def test_check_fails_with_the_plugin_messages(tmp_path, site_toml):
    f = tmp_path / "job.sh"
    f.write_bytes(script("#SPOLICY --class=production", "#SPOLICY --topology=rack"))
    r = invoke("--config", str(site_toml), "directives", "check", "--account", "vision", str(f))
    assert r.exit_code == 2
    assert f"{f}: line 2: #SPOLICY --class=production: class 'production'" in r.output
    assert f"{f}: line 3: #SPOLICY --topology=rack: invalid value 'rack'" in r.output


def test_check_json_and_stdin(site_toml):
    r = invoke("--config", str(site_toml), "directives", "check", "--json", "-",
               input=script("#SPOLICY --deferrable=nigth"))
    assert r.exit_code == 2
    data = json.loads(r.output)
    assert data["ok"] is False and data["problems"][0]["line"] == 2
    assert "did you mean night?" in data["problems"][0]["message"]
    r = invoke("--config", str(site_toml), "directives", "check", "--json", "-",
               input=script("#SPOLICY --deferrable=night"))
    assert r.exit_code == 0 and json.loads(r.output)["admin_comment"] == "spolicy:v1 defer=night"


def test_check_warns_about_directives_after_the_first_command(tmp_path, site_toml):
    f = tmp_path / "job.sh"
    f.write_bytes(script("#SPOLICY --class=research", body="srun x\n#SPOLICY --data=c4\n"))
    r = invoke("--config", str(site_toml), "directives", "check", str(f))
    assert r.exit_code == 0, r.output
    assert (f"{f}: warning: line 4: #SPOLICY --data=c4: after the first command (line 3),"
            " where sbatch stops reading directives") in r.output
    assert "admin_comment: spolicy:v1 class=research" in r.output
    r = invoke("--config", str(site_toml), "directives", "check", "--json", str(f))
    assert json.loads(r.output)["warnings"][0].startswith("line 4: #SPOLICY --data=c4")


def test_check_refuses_a_dos_script_as_sbatch_does(tmp_path, site_toml):
    f = tmp_path / "job.sh"
    f.write_bytes(b"#!/bin/bash\r\n#SPOLICY --class=research\r\nsrun x\r\n")
    r = invoke("--config", str(site_toml), "directives", "check", str(f))
    assert r.exit_code == 2
    assert f"{f}: script: Batch script contains DOS line breaks" in r.output


def test_check_notes_what_it_could_not_verify(tmp_path, site_toml):
    f = tmp_path / "job.sh"
    f.write_bytes(script("#SPOLICY --class=production"))
    r = CliRunner().invoke(
        cli, ["--config", str(site_toml), "directives", "check", str(f)], obj={},
        env={"SBATCH_ACCOUNT": None})
    assert r.exit_code == 0
    assert "the account was not checked" in r.output


def test_list_shows_the_schema(site_toml):
    r = invoke("--config", str(site_toml), "directives", "list", "--json")
    data = json.loads(r.output)
    assert [d["name"] for d in data][:2] == ["class", "checkpoint"]
    assert data[0]["restrictions"] == {"production": ["prod", "ops"]}
    r = invoke("--config", str(site_toml), "directives", "list")
    assert r.exit_code == 0 and "--min-gpu-memory" in r.output


def test_plugin_render_writes_the_file(tmp_path, site_toml):
    out = tmp_path / "job_submit.lua"
    r = invoke("plugin", "render", "--settings", str(site_toml), "-o", str(out))
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert '["production"] = { "prod", "ops" }' in text and "function slurm_job_submit" in text
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_contrib_examples_validate_with_their_settings():
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "contrib" / "examples"
    site = settings_mod.load(examples / "site.toml")
    scripts = sorted(examples.glob("*.sh"))
    assert len(scripts) >= 5
    for path in scripts:
        data = path.read_bytes()
        opts = sbatch_options(data)
        result = check_script(data, site, Context(account=opts.get("account"),
                                                  partition=opts.get("partition", "research")))
        if path.name == "invalid.sh":
            assert [p.line for p in result.problems] == [5, 6, 7, 8]
        else:
            assert result.ok and result.admin_comment, (path.name, result.problems)


def test_retry_directive_bounds_and_wire_form():
    ok = check_script(b"#!/bin/bash\n#SPOLICY --retry=3\n", SITE)
    assert ok.ok and ok.policy.retries == 3 and ok.admin_comment.endswith("retry=3")
    assert parse_admin_comment(ok.admin_comment).retries == 3
    bad = check_script(b"#!/bin/bash\n#SPOLICY --retry=11\n", SITE)
    assert not bad.ok
    assert "must be from 0 to 10" in bad.problems[0].message
    assert "allowed: a whole number from 0 to 10" in bad.problems[0].message
    assert not check_script(b"#!/bin/bash\n#SPOLICY --retry=-1\n", SITE).ok


def test_retries_default_from_class_then_site():
    from slurmpolicy import settings as settings_mod

    s = settings_mod.from_mapping({"classes": {
        "production": {"weight": 1, "rank": 2, "retries": 5},
        "research": {"weight": 0, "rank": 1}}, "lifecycle": {"default_retries": 1}})
    assert s.retries_of("production", None) == 5
    assert s.retries_of("research", None) == 1
    assert s.retries_of(None, None) == 1
    assert s.retries_of("production", 0) == 0


def test_periodic_and_exit_done_checkpoints():
    periodic = parse_script(CASES["periodic checkpointer"][0], SITE, Context())
    assert render_admin_comment(periodic) == "spolicy:v1 ckpt=periodic,interval=1800"
    done = parse_script(CASES["exit means done"][0], SITE, Context())
    assert render_admin_comment(done) == "spolicy:v1 ckpt=signal:TERM,grace=120,exit=done"
    assert problems("periodic without interval") == [
        "line 2: #SPOLICY --checkpoint=periodic: invalid value 'periodic' for --checkpoint: "
        "periodic needs interval=DURATION (how often it checkpoints); allowed: none, "
        "periodic,interval=DURATION, or signal:SIG,grace=DURATION[,interval=DURATION]"
        "[,exit=done] with SIG one of USR1, USR2, TERM, INT, HUP, QUIT, ALRM, CONT, URG, XCPU, "
        "grace from 1s to 1d (default 2m), interval from 1m to 30d"]
    assert "unknown exit 'dne'" in problems("bad exit")[0]

"""The rendered job_submit.lua, run by real Lua interpreters (lua5.3, and
liblua5.1 as Debian's slurmctld links it) in a harness that plays slurmctld's
part: same scripts as the Python validator, same verdicts, same messages,
same admin_comment. A pure-logic check of the plugin's code."""

from __future__ import annotations

from pathlib import Path

import pytest
from directives_support.cases import CASES, SITE, script
from directives_support.lua import Case, Outcome, interpreters, run
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from slurmpolicy.directives import Context, check_script, parse_directive_duration
from slurmpolicy.jobpolicy import parse_admin_comment
from slurmpolicy.plugin import lua_literal, lua_string, render
from slurmpolicy.settings import Settings

INTERPRETERS = interpreters()
REPO = Path(__file__).resolve().parents[2]


def expected(body: bytes, account: str | None, partition: str | None,
             settings: Settings = SITE) -> Outcome:
    result = check_script(body, settings, Context(account=account, partition=partition))
    requeue = "1" if result.admin_comment and result.policy.can_checkpoint else None
    return Outcome(rc="0" if result.ok else "-1", admin=result.admin_comment, requeue=requeue,
                   messages=["slurmpolicy: warning: " + w for w in result.warnings]
                   + ["slurmpolicy: " + p.message for p in result.problems])


@pytest.fixture(scope="module")
def site_plugin() -> str:
    return render(SITE)


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_same_verdicts_messages_and_admin_comment_as_python(site_plugin, interpreter):
    names = list(CASES)
    cases = [Case("submit", CASES[n][0], account=CASES[n][1], partition=CASES[n][2],
                  extra=CASES[n][3]) for n in names]
    outcomes = run(site_plugin, cases, interpreter)
    for name, outcome in zip(names, outcomes, strict=True):
        body, account, partition, default = CASES[name]
        assert outcome == expected(body, account, partition or default), name
    verdicts = dict(zip(names, outcomes, strict=True))
    # The corpus exercises both sides of the plugin, not only refusals.
    assert verdicts["every directive"].rc == "0" and verdicts["every directive"].admin
    assert verdicts["bad class"].rc == "-1"


def test_pathological_scripts_get_a_verdict(site_plugin):
    names = [n for n in CASES if n.startswith(("10000", "1 MB", "binary", "directive a"))]
    outcomes = run(site_plugin, [Case("submit", CASES[n][0]) for n in names])
    got = dict(zip(names, outcomes, strict=True))
    # Scanning stops at the 10th problem (a duplicate each), long before line 10,000.
    many = got["10000 directive lines"]
    assert many.rc == "-1" and len(many.messages) == 10
    assert all("--class given twice (first on line 2)" in m for m in many.messages)
    assert got["1 MB comment header then directive"].messages[0].startswith(
        "slurmpolicy: script: the leading comment block is longer than 1000 lines")
    assert got["1 MB comment header no directive"].rc == "0"
    assert got["1 MB body"].admin == "spolicy:v1 class=research"
    assert got["binary junk"].rc == "0" and got["binary junk"].admin is None
    assert got["directive at header line cap"].admin == "spolicy:v1 class=research"
    assert got["directive after header line cap"].rc == "-1"


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_duration_grammar_is_the_same_in_lua(site_plugin, interpreter):
    texts = ["0", "1", "90", "1:30", "01:02:03", "1-0", "2-03", "2-03:04", "2-03:04:05",
             "90s", "30m", "2h", "1d", "1.5h", "0.5s", "2.25m", "UNLIMITED", "infinite", "-1",
             "", "1h30m", "1.h", ".5h", "5 m", "1:2:3:4", "1-2-3", "abc", "1e3", "0x10",
             "999999999", "9999999999", "123456789.123456789d", "1:99", "00:00:01", "1-",
             "-1-2", "+5", "5M", "\u0661\u0662", "2-03:04:05:06", "1.5", "7s", "59:59"]
    outcomes = run(site_plugin, [Case("duration", t.encode("latin-1", "replace")) for t in texts],
                   interpreter)
    for text, outcome in zip(texts, outcomes, strict=True):
        want = parse_directive_duration(text.encode("latin-1", "replace").decode("latin-1"))
        assert outcome.rc == ("nil" if want is None else str(want)), text


def test_lua_admin_comment_parses_back_to_the_python_policy(site_plugin):
    body, account, _, _ = CASES["every directive"]
    (outcome,) = run(site_plugin, [Case("submit", body, account=account)])
    python = check_script(body, SITE, Context(account=account)).policy
    assert outcome.admin is not None
    assert parse_admin_comment(outcome.admin) == python
    assert python.can_checkpoint and python.defer_window == "night" and python.topology_strict


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_modify_refuses_what_the_directives_refuse(site_plugin, interpreter):
    prod = "spolicy:v1 class=production ckpt=signal:USR1,grace=120"
    nockpt = "spolicy:v1 class=research ckpt=none"
    research = "spolicy:v1 class=research ckpt=signal:USR1,grace=60"
    cases = [
        Case("modify", prod.encode(), account="vision"),                 # escalate: refused
        Case("modify", prod.encode(), account="ops"),                    # allowed account
        Case("modify", prod.encode(), account="vision", uid=0),          # root may
        Case("modify", b"", extra="admincomment"),                       # forge: refused
        Case("modify", b"", extra="admincomment", uid=0),                # root may
        Case("modify", nockpt.encode(), partition="gpu"),                # out of batch: refused
        Case("modify", nockpt.encode(), partition="debug"),              # allowed partition
        Case("modify", research.encode(), extra="requeue0"),             # dodge requeue: refused
        Case("modify", nockpt.encode(), extra="requeue0"),               # nothing to requeue
        Case("modify", research.encode(), account="vision"),             # unrestricted class
    ]
    outcomes = run(site_plugin, cases, interpreter)
    rcs = [o.rc for o in outcomes]
    denied = "2002"
    assert rcs == [denied, "0", "0", denied, "0", denied, "0", denied, "0", "0"]
    # Job ids and uids arrive as floats (Lua 5.3 in a 25.11 build): printed whole.
    assert outcomes[0].messages[0].startswith("slurmpolicy: job 42 has class 'production'")
    assert "(uid 1000)" in outcomes[3].messages[0], outcomes[3].messages
    assert not any(".0" in m for o in outcomes for m in o.messages), outcomes


def test_a_lua_error_fails_only_that_job_with_a_clear_message(site_plugin):
    # Break the plugin's scanner for one call: a job_desc whose script access errors.
    broken = site_plugin.replace('local script = job_desc.script',
                                 'local script = job_desc.script\n'
                                 '  if script and string.find(script, "BOOM", 1, true) then '
                                 'error("boom") end', 1)
    assert broken != site_plugin
    outcomes = run(broken, [Case("submit", script("#SPOLICY --class=research", body="BOOM\n")),
                            Case("submit", script("#SPOLICY --class=research"))])
    assert outcomes[0].rc == "-1"
    assert any(m.startswith("LOGERROR slurmpolicy: job_submit.lua failed") for m in
               outcomes[0].messages)
    assert any("internal error" in m for m in outcomes[0].messages)
    assert outcomes[1].rc == "0" and outcomes[1].admin == "spolicy:v1 class=research"


def test_contrib_copy_equals_a_fresh_render_with_default_settings():
    shipped = (REPO / "contrib" / "job_submit.lua").read_text(encoding="utf-8")
    assert shipped == render(Settings()), "run: slurmpolicy plugin render -o contrib/job_submit.lua"


def test_render_embeds_the_settings(site_plugin):
    assert '["production"] = { "prod", "ops" }' in site_plugin
    assert '"night", "weekend"' in site_plugin
    assert "@CONFIG@" not in site_plugin and "@GENERATED@" not in site_plugin


def test_lua_literals_escape_anything():
    assert lua_string('a"b\\c\n\x00é') == '"a\\"b\\\\c\\010\\000\\195\\169"'
    assert lua_literal({"b": [1, True], "a": {}}) == '{\n  ["a"] = {},\n  ["b"] = { 1, true },\n}'
    with pytest.raises(ValueError):
        lua_literal(1.5)


_FRAGMENTS = st.sampled_from([
    "--class=research", "--class=production", "--class=prod", "--class", "--checkpoint=none",
    "--checkpoint=signal:USR1,grace=2m", "--checkpoint=signal:usr2,grace=1:00,interval=1h",
    "--checkpoint=signal:KILL", "--preemptible=no", "--preemptible=after=30m", "--topology=leaf",
    "--topology=spine,strict", "--topology=any,strict", "--expected-runtime=2-00",
    "--gpu-type=a100", "--min-gpu-memory=40G", "--data=c4", "--deferrable=weekend",
    "--deferrable=night,deadline=12h", "--bogus=1", "class=x", "#", "# note", "-x", "--",
    "--data", "--=", "value", "\t", "\xe9", "\x00", "--clas=research",
])


@st.composite
def _scripts(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.integers(0, 5))
        if kind == 0:
            lines.append("#SBATCH -N 1")
        elif kind == 1:
            lines.append(draw(st.sampled_from(["", "echo hi", "  # c", "#!/bin/sh", "\r", "\f",
                                               "\x0b \t", " \r x"])))
        else:
            prefix = draw(st.sampled_from(["#SPOLICY ", "#SPOLICY\t", "#SPOLICY", "#spolicy ",
                                           "#SPOLICY  "]))
            words = draw(st.lists(_FRAGMENTS, max_size=4))
            sep = draw(st.sampled_from([" ", "\t", "  "]))
            lines.append(prefix + sep.join(words))
    tail = draw(st.binary(max_size=20))
    return ("#!/bin/bash\n" + "\n".join(lines) + "\n").encode("latin-1") + tail


@pytest.mark.parametrize("interpreter", INTERPRETERS)
@hsettings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=st.lists(st.tuples(_scripts(), st.sampled_from([None, "prod", "vision"]),
                                st.sampled_from([None, "batch", "gpu"])),
                      min_size=150, max_size=150))
def test_random_scripts_get_identical_verdicts(interpreter, batch):
    plugin = render(SITE)
    cases = [Case("submit", body, account=account, partition=partition)
             for body, account, partition in batch]
    outcomes = run(plugin, cases, interpreter)
    for (body, account, partition), outcome in zip(batch, outcomes, strict=True):
        assert outcome == expected(body, account, partition), body


def test_render_refuses_names_the_plugin_cannot_compare():
    from slurmpolicy import settings as settings_mod
    from slurmpolicy.errors import ConfigError

    odd = settings_mod.from_mapping({
        "classes": {"r\u00e9search": {"weight": 1, "rank": 1}}, "default_class": "r\u00e9search"})
    with pytest.raises(ConfigError, match=r"\$\.classes\.r\u00e9search"):
        render(odd)
    spaced = settings_mod.from_mapping({"preemption": {"no_checkpoint_partitions": ["a b"]}})
    with pytest.raises(ConfigError, match="no_checkpoint_partitions"):
        render(spaced)


def test_a_user_cannot_smuggle_our_wire_form_in_at_submit(site_plugin):
    plain = script("#SBATCH -N 1")
    forged = "spolicy:v1_class=production"
    outcomes = run(site_plugin, [
        Case("submitac", plain, uid=1000, extra=forged),           # user, no directives
        Case("submitac", plain, uid=0, extra=forged),              # root may
        Case("submitac", plain, uid=1000, extra="site_note"),      # not ours: untouched
        Case("submitac", script("#SPOLICY --class=experimental"), uid=1000, extra=forged),
    ])
    assert [o.admin for o in outcomes] == [
        "", "spolicy:v1 class=production", "site note", "spolicy:v1 class=experimental"]

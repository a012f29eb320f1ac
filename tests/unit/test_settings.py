from pathlib import Path
from typing import Any

import pytest

from slurmpolicy import settings
from slurmpolicy.durations import format_duration, parse_duration
from slurmpolicy.errors import ConfigError


def test_defaults_define_three_classes_highest_first():
    s = settings.Settings()
    ranked = sorted(s.classes, key=lambda c: -s.classes[c].rank)
    assert ranked == ["production", "research", "experimental"]
    assert not s.classes["production"].preemptible
    assert s.classes["research"].preemptible and s.classes["experimental"].preemptible


def test_bad_key_names_file_and_path(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text("[preemption]\nmin_runtime = -5\n")
    with pytest.raises(ConfigError) as exc:
        settings.load(p)
    assert str(p) in str(exc.value) and "$.preemption.min_runtime" in str(exc.value)


def test_unknown_key_is_refused(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text("[daemon]\nintervall = 5\n")
    with pytest.raises(ConfigError, match="intervall"):
        settings.load(p)


def test_duration_strings_in_settings(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[daemon]\ninterval = "1:30"\n[fairshare]\nhalf_life = "1-00:00:00"\n')
    s = settings.load(p)
    assert s.daemon.interval == 90 and s.fairshare.half_life == 86400


def test_default_class_must_exist(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('default_class = "nope"\n')
    with pytest.raises(ConfigError, match="default_class"):
        settings.load(p)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 5400), ("1:30", 90), ("01:00:00", 3600), ("2-0", 172800), ("1-02:03", 93780),
     ("1-02:03:04", 93784), ("45s", 45), ("30m", 1800), ("2h", 7200), ("1d", 86400)],
)
def test_slurm_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_duration_names_value_and_forms():
    with pytest.raises(ValueError, match=r"'3 weeks'.*D-HH:MM:SS"):
        parse_duration("3 weeks")


def test_format_duration_round_trips():
    for s in (0, 59, 3600, 93784, 864000):
        assert parse_duration(format_duration(s)) == s


def test_preemption_poll_default_and_bounds(tmp_path):
    assert settings.Settings().daemon.preemption_poll == 5.0
    p = tmp_path / "s.toml"
    p.write_text('[daemon]\npreemption_poll = "10s"\n')
    assert settings.load(p).daemon.preemption_poll == 10.0
    p.write_text("[daemon]\npreemption_poll = 0\n")
    with pytest.raises(ConfigError, match=r"\$\.daemon\.preemption_poll"):
        settings.load(p)


def test_ack_poll_default_off_and_bounds(tmp_path):
    assert settings.Settings().daemon.ack_poll == 1.0
    p = tmp_path / "s.toml"
    p.write_text('[daemon]\nack_poll = "2s"\n')
    assert settings.load(p).daemon.ack_poll == 2.0
    p.write_text("[daemon]\nack_poll = 0\n")
    assert settings.load(p).daemon.ack_poll == 0.0  # no looks
    p.write_text("[daemon]\nack_poll = -1\n")
    with pytest.raises(ConfigError, match=r"\$\.daemon\.ack_poll"):
        settings.load(p)


# --- issue 13, finding 4: settings that cannot be meant are refused ------------------
@pytest.mark.parametrize(("text", "path", "allowed"), [
    ("[aging]\npoints_per_hour = nan\n", "$.aging.points_per_hour", "0 .. 1000000"),
    ("[aging]\nfragmentation_bonus_per_hour = inf\n", "$.aging.fragmentation_bonus_per_hour",
     "0 .. 1000000"),
    ("[daemon]\ninterval = 0\n", "$.daemon.interval", "1 .. 3600"),
    ("[daemon]\ninterval = inf\n", "$.daemon.interval", "1 .. 3600"),
    ("[slurm]\ncommand_timeout = 0\n", "$.slurm.command_timeout", "1 .. 600"),
    ("[fairshare]\nhalf_life = 0\n", "$.fairshare.half_life", "60 .. 315360000"),
    ("[fairshare.shares]\nnlp = nan\n", "$.fairshare.shares.nlp", "0 .. 1"),
    ("[deferral.windows.night]\nhours = [1]\ncost = -inf\n", "$.deferral.windows.night.cost",
     "0 .. 1000000"),
    ("[classes.gpu]\nweight = -1\nrank = 1\n", "$.classes.gpu.weight", "0 .. 2147483645"),
    ("[metrics]\nport = 0\n", "$.metrics.port", "1 .. 65535"),
])
def test_numbers_are_finite_and_in_their_documented_range(tmp_path, text, path, allowed):
    p = tmp_path / "s.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        settings.load(p)
    message = str(exc.value)
    assert str(p) in message and f"`{path}`" in message and f"allowed: {allowed}" in message
    assert "\n" not in message


def test_site_factor_beyond_slurms_range_is_refused():
    with pytest.raises(ConfigError,
                       match=r"largest site factor .* 2147483645.*`\$\.classes\.top\.weight`"):
        settings.from_mapping({"classes": {"top": {"weight": 2**31 - 10, "rank": 1}},
                               "default_class": "top"})
    # The defaults stay far inside it.
    assert settings.max_site_factor(settings.Settings()) < settings.SITE_FACTOR_MAX


@pytest.mark.parametrize("bind", ["127.0.0.1", "0.0.0.0", "::1", "::", "localhost"])
def test_metrics_bind_accepts_addresses(bind):
    assert settings.from_mapping({"metrics": {"bind": bind}}).metrics.bind == bind


@pytest.mark.parametrize("bind", ["", "foo", "127.0.0.1:9810", "300.1.1.1", "http://x"])
def test_metrics_bind_must_be_an_address(bind):
    with pytest.raises(ConfigError, match=r"not an IP address.*`\$\.metrics\.bind`"):
        settings.from_mapping({"metrics": {"bind": bind}})


@pytest.mark.parametrize(("data", "near"), [
    ({"daemon": {"intervall": 5}}, "`$.daemon`; did you mean `interval`?"),
    ({"preemptoin": {}}, "did you mean `preemption`?"),
    ({"classes": {"gpu": {"weight": 1, "rank": 1, "preemtible": True}}},
     "`$.classes.gpu`; did you mean `preemptible`?"),
    ({"deferral": {"windows": {"n": {"hours": [1], "cots": 1}}}}, "did you mean `cost`?"),
])
def test_unknown_key_names_the_nearest_valid_key(data, near):
    with pytest.raises(ConfigError) as exc:
        settings.from_mapping(data)
    assert near in str(exc.value)


def test_unknown_key_without_a_near_one_lists_the_allowed():
    with pytest.raises(ConfigError, match=r"unknown field `zzz`.*allowed: .*interval"):
        settings.from_mapping({"daemon": {"zzz": 1}})


def test_every_documented_range_holds_its_default():
    for key, allowed, default in settings.ranges():
        lo, hi = (float(x) for x in allowed.split(" .. "))
        assert lo < hi, key
        if default and default[0].isdigit():
            assert lo <= float(default) <= hi, (key, allowed, default)


def test_docs_show_the_ranges_the_code_enforces():
    from pathlib import Path

    from click.testing import CliRunner

    from slurmpolicy.cli import cli

    out = CliRunner().invoke(cli, ["config", "ranges"])
    assert out.exit_code == 0 and "| `daemon.interval` | 1 .. 3600 | 30 |" in out.output
    docs = (Path(__file__).parents[2] / "docs" / "policy.md").read_text()
    assert out.output in docs


def test_config_check_notes_a_starvation_wait_that_does_nothing(tmp_path: Path) -> None:
    # Before reserve_after_wait, starvation_wait alone turned the rule on.
    from click.testing import CliRunner

    from slurmpolicy.cli import cli

    old = tmp_path / "old.toml"
    old.write_text('[reservations]\nstarvation_wait = "2h"\n')
    out = CliRunner().invoke(cli, ["config", "check", str(old)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == f"{old}: ok"
    assert lines[1].startswith(f"note: {old}: reservations.starvation_wait does nothing unless "
                               "reservations.reserve_after_wait = true")
    for text in ('[reservations]\nstarvation_wait = "2h"\nreserve_after_wait = false\n',
                 '[reservations]\nstarvation_wait = "2h"\nreserve_after_wait = true\n',
                 '[reservations]\nlarge_job_gpus = 32\n'):
        old.write_text(text)
        out = CliRunner().invoke(cli, ["config", "check", str(old)])
        assert out.exit_code == 0 and out.output == f"{old}: ok\n", (text, out.output)
    # The shipped example says what it wants.
    example = Path(__file__).parents[2] / "contrib" / "slurmpolicy.toml"
    assert settings.load_with_notices(example)[1] == []


def test_settings_and_their_notices_come_from_one_reading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon and ``config check`` load a file and say what it sets that does
    nothing from the same reading: a file rewritten between two reads (a reload
    racing an editor) cannot give settings of one text and notes of another."""
    path = tmp_path / "old.toml"
    path.write_text('[reservations]\nstarvation_wait = "2h"\n')
    reads: list[Path] = []
    real = Path.read_text

    def counted(self: Path, *args: Any, **kwargs: Any) -> str:
        reads.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    loaded, notes = settings.load_with_notices(path)
    assert reads == [path]
    assert loaded.reservations.starvation_wait == 7200
    assert len(notes) == 1 and "reserve_after_wait = true" in notes[0]



EXAMPLES = Path(__file__).resolve().parents[2] / "contrib" / "examples"


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_every_example_settings_file_loads_and_changes_something(name):
    """The settings files the docs point users at (`-c`, `scripts/figures
    --config`) load as they are, and each sets something the defaults don't."""
    assert settings.load(EXAMPLES / name) != settings.Settings()

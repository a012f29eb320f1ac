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

"""The submit doorbell (issue 16): its setting, the plugin ringing it for jobs of
classes that preempt, and the daemon waking early on a ring, at most once per
``daemon.preemption_poll`` (a fake clock and a real file)."""

from __future__ import annotations

import itertools
import logging
import os
from pathlib import Path

import pytest
from directives_support.cases import script
from directives_support.lua import Case, interpreters, run

from slurmpolicy.daemon.doorbell import Doorbell, slurm_user
from slurmpolicy.daemon.loop import Daemon
from slurmpolicy.directives import lua_config
from slurmpolicy.errors import ConfigError
from slurmpolicy.plugin import render
from slurmpolicy.settings import Daemon as DaemonSettings
from slurmpolicy.settings import Metrics, Plugin, Settings, doorbell_classes, from_mapping

# ------------------------------------------------------------------ setting


def test_default_doorbell_is_under_run_and_rings_for_production_only() -> None:
    s = Settings()
    assert s.plugin.doorbell == "/run/slurmpolicy/doorbell"
    # research (rank 2) may preempt experimental, but is itself preemptible: its
    # jobs are the default class and need not wake the daemon.
    assert doorbell_classes(s) == ["production"]
    config = lua_config(s)
    assert config["doorbell"] == "/run/slurmpolicy/doorbell"
    assert config["doorbell_classes"] == ["production"]


def test_doorbell_classes_follow_ranks_and_preemptibility() -> None:
    s = from_mapping({"classes": {
        "urgent": {"weight": 3, "rank": 9, "preemptible": False},
        "low": {"weight": 1, "rank": 1},
        "pinned": {"weight": 2, "rank": 0, "preemptible": False},  # below every victim
    }, "default_class": "low"})
    assert doorbell_classes(s) == ["urgent"]
    nothing = from_mapping({"classes": {"a": {"weight": 1, "rank": 1, "preemptible": False}},
                            "default_class": "a"})
    assert doorbell_classes(nothing) == []  # nothing is preemptible: nothing to wake for


@pytest.mark.parametrize("path", ["", "/run/slurmpolicy/doorbell", "/tmp/x y/bell"])
def test_doorbell_accepts_absolute_paths_and_empty(path: str) -> None:
    assert from_mapping({"plugin": {"doorbell": path}}).plugin.doorbell == path


@pytest.mark.parametrize("path", ["doorbell", "run/slurmpolicy/doorbell", "./bell", "~/bell",
                                  "/run/bell\n"])
def test_doorbell_refuses_relative_paths_and_says_what_is_allowed(path: str) -> None:
    with pytest.raises(ConfigError) as err:
        from_mapping({"plugin": {"doorbell": path}}, "site.toml")
    text = str(err.value)
    assert text.startswith("site.toml: plugin.doorbell")
    assert "not an absolute path" in text and "allowed: an absolute path" in text
    assert '""' in text and "$.plugin.doorbell" in text


# ------------------------------------------------------------------- plugin

INTERPRETERS = interpreters()


def _submit(lua: str, body: bytes, interpreter: str) -> str:
    outcome = run(lua, [Case("submit", body)], interpreter)[0]
    return outcome.rc


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_plugin_rings_for_production_and_not_for_research(tmp_path: Path,
                                                          interpreter: str) -> None:
    bell = tmp_path / "doorbell"
    lua = render(Settings(plugin=Plugin(doorbell=str(bell))))
    for cls in ("research", "experimental"):
        assert _submit(lua, script(f"#SPOLICY --class={cls}"), interpreter) == "0"
        assert not bell.exists(), cls
    assert _submit(lua, script("#SBATCH -N 1"), interpreter) == "0"  # default class
    assert not bell.exists()
    # A refused production job rings nothing.
    assert _submit(lua, script("#SPOLICY --class=production", "#SPOLICY --clas=x"),
                   interpreter) == "-1"
    assert not bell.exists()
    assert _submit(lua, script("#SPOLICY --class=production"), interpreter) == "0"
    when, cls = bell.read_text().split()
    assert cls == "production" and when.isdigit()
    # Rung again: rewritten (never appended), its mtime moves on.
    os.utime(bell, ns=(1, 1))
    assert _submit(lua, script("#SPOLICY --class=production"), interpreter) == "0"
    assert bell.stat().st_mtime_ns != 1 and len(bell.read_text().splitlines()) == 1


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_a_doorbell_that_cannot_be_written_changes_no_verdict(tmp_path: Path,
                                                             interpreter: str) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    for path in (str(blocked / "doorbell"), str(tmp_path), ""):  # below a file, a directory, off
        lua = render(Settings(plugin=Plugin(doorbell=path)))
        outcome = run(lua, [Case("submit", script("#SPOLICY --class=production"))],
                      interpreter)[0]
        assert outcome.rc == "0" and outcome.admin == "spolicy:v1 class=production"
        assert outcome.messages == [], path
    assert not (tmp_path / "doorbell").exists()


# ------------------------------------------------------------------- daemon


class FakeTime:
    """A monotonic clock that moves only when the daemon waits; ``rings`` are
    (time, mtime_ns) writes of the doorbell, made when the clock passes them."""

    def __init__(self, bell: Path, rings: list[float] = ()) -> None:  # type: ignore[assignment]
        self.now = 0.0
        self.bell = bell
        self.rings = sorted(rings)
        self.waits: list[float] = []
        self.stamp = 10**18

    def monotonic(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.advance(seconds)
        return False

    def advance(self, seconds: float) -> None:
        self.now += seconds
        while self.rings and self.rings[0] <= self.now:
            self.rings.pop(0)
            self.ring()

    def ring(self) -> None:
        self.stamp += 1_000_000
        self.bell.write_text("1 production\n")
        os.utime(self.bell, ns=(self.stamp, self.stamp))


def _daemon(tmp_path: Path, bell: Path | str, poll: float = 5,
            interval: float = 120) -> tuple[Daemon, FakeTime]:
    settings = Settings(daemon=DaemonSettings(state_dir=str(tmp_path / "state"),
                                              interval=interval, preemption_poll=poll,
                                              lease_ttl=0),
                        metrics=Metrics(enabled=False), plugin=Plugin(doorbell=str(bell)))
    d = Daemon(settings, client=object(), planner=lambda *a, **k: None,  # type: ignore[arg-type]
               fabric_loader=lambda s, st: None, serve_metrics=False)
    fake = FakeTime(Path(bell))
    d._monotonic = fake.monotonic
    d._wait = fake.wait
    return d, fake


def _wakes(d: Daemon) -> float:
    return float(d.metrics.doorbell_wakes._value.get())  # type: ignore[attr-defined]


def test_a_ring_wakes_the_daemon_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bell = tmp_path / "doorbell"
    bell.write_text("")
    d, fake = _daemon(tmp_path, bell)
    d.doorbell.cycle_started(fake.now)
    fake.rings = [2.0]
    with caplog.at_level(logging.DEBUG, logger="slurmpolicy.daemon"):
        assert d._sleep(120, doorbell=True) is True
    # Seen at the first look, a poll period after the cycle started: not at 120 s.
    assert fake.now == 5.0 and _wakes(d) == 1
    assert any("doorbell" in r.message and "rung" in r.message and r.levelno == logging.DEBUG
               for r in caplog.records)
    # The cycle it started takes the ring in; no change, no early wake.
    d.doorbell.cycle_started(fake.now)
    assert d._sleep(120, doorbell=True) is False
    assert fake.now == 125.0 and _wakes(d) == 1
    # One stat per poll period while sleeping: cheap.
    assert max(fake.waits[1:]) <= 5.0


def test_a_storm_of_rings_is_one_extra_cycle_per_poll_period(tmp_path: Path) -> None:
    bell = tmp_path / "doorbell"
    d, fake = _daemon(tmp_path, bell, poll=5)
    fake.rings = [i * 0.25 for i in range(1, 400)]  # four submissions a second for 100 s
    starts = []
    while fake.now < 100:
        starts.append(fake.now)
        d.doorbell.cycle_started(fake.now)
        fake.advance(0.5 if len(starts) % 2 else 7.0)  # the cycle itself: short, or long
        assert d._sleep(120, doorbell=True) is True
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 5.0  # never two doorbell cycles within a poll period
    assert len(starts) <= 100 / 5 + 1
    assert _wakes(d) == len(starts)


def test_no_wake_after_a_failed_cycle_or_when_off_or_missing(tmp_path: Path) -> None:
    bell = tmp_path / "doorbell"
    d, fake = _daemon(tmp_path, bell)
    d.doorbell.cycle_started(0.0)
    fake.rings = [1.0]
    # Back-off after a failed cycle keeps its own pace.
    assert d._sleep(40, doorbell=False) is False and fake.now == 40.0
    # A doorbell that appears after the cycle started is a ring.
    bell.unlink()
    d.doorbell.cycle_started(fake.now)
    assert d._sleep(10, doorbell=True) is False  # missing: nothing to see
    fake.ring()
    assert d._sleep(10, doorbell=True) is True
    off, fake2 = _daemon(tmp_path / "off", "")
    assert not off.doorbell.enabled
    assert off._sleep(30, doorbell=True) is False and fake2.waits == [30.0]


def test_stop_still_ends_the_sleep(tmp_path: Path) -> None:
    d, fake = _daemon(tmp_path, tmp_path / "doorbell")
    d.doorbell.cycle_started(0.0)

    def wait(seconds: float) -> bool:
        fake.now += seconds
        d.request_stop()
        return True

    d._wait = wait
    assert d._sleep(120, doorbell=True) is False and fake.now == 5.0


def test_prepare_makes_the_file_and_a_bad_path_is_only_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bell = tmp_path / "run" / "slurmpolicy" / "doorbell"
    assert Doorbell(str(bell), 5).prepare() is True
    assert bell.is_file() and oct(bell.parent.stat().st_mode & 0o777) == "0o755"
    blocked = tmp_path / "file"
    blocked.write_text("")
    with caplog.at_level(logging.WARNING, logger="slurmpolicy.daemon"):
        assert Doorbell(str(blocked / "doorbell"), 5).prepare() is False
        assert Doorbell(str(tmp_path), 5).prepare() is False  # a directory
    assert [r for r in caplog.records if "plugin.doorbell" in r.message]
    assert Doorbell("", 5).prepare() is False


def test_daemon_opens_with_an_unusable_doorbell(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    d, _ = _daemon(tmp_path, blocked / "doorbell")
    with caplog.at_level(logging.WARNING, logger="slurmpolicy.daemon"):
        d.open()
    try:
        assert any("not usable" in r.message for r in caplog.records)
    finally:
        d.close()
    ok, _ = _daemon(tmp_path / "ok", tmp_path / "ok" / "doorbell")
    ok.open()
    try:
        assert (tmp_path / "ok" / "doorbell").is_file()
    finally:
        ok.close()


@pytest.mark.parametrize(("text", "user"), [
    ("SlurmUser=slurm\n", "slurm"), ("slurmuser = slurm # comment\n", "slurm"),
    ("# SlurmUser=nobody\nClusterName=x\n", "root"), ("", "root")])
def test_slurm_user_is_read_from_slurm_conf(tmp_path: Path, text: str, user: str) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(text)
    assert slurm_user(conf) == user
    assert slurm_user(None) == "root" and slurm_user(tmp_path / "missing") == "root"


"""Settings keys the policy engine added: defaults that work, errors that name the key."""

import pytest

from slurmpolicy import settings
from slurmpolicy.errors import ConfigError


def load(tmp_path, text):
    p = tmp_path / "s.toml"
    p.write_text(text)
    return settings.load(p)


def test_policy_defaults():
    s = settings.Settings()
    assert s.preemption.max_per_cycle == 4
    assert s.preemption.max_searches_per_cycle == 16
    assert s.preemption.beneficiary_start_timeout == 1800
    assert s.reservations.default_duration == 86400
    assert s.reservations.name_prefix == "spolicy_"


@pytest.mark.parametrize(("text", "path"), [
    ("[preemption]\nmax_per_cycle = 0\n", "$.preemption.max_per_cycle"),
    ("[preemption]\nmax_searches_per_cycle = -1\n", "$.preemption.max_searches_per_cycle"),
    ("[preemption]\nbeneficiary_start_timeout = -5\n", "$.preemption.beneficiary_start_timeout"),
    ("[reservations]\ndefault_duration = -1\n", "$.reservations.default_duration"),
    ("[reservations]\nmax_per_cycle = 0\n", "$.reservations.max_per_cycle"),
    ("[priority]\nmax_updates_per_cycle = 0\n", "$.priority.max_updates_per_cycle"),
    ("[priority]\norder_depth = -1\n", "$.priority.order_depth"),
    ("[priority]\norder_depth = 2000000\n", "$.priority.order_depth"),
    ("[fairshare.shares]\nvision = 1.5\n", "$.fairshare.shares"),
    ("[deferral.windows.night]\nhours = [25]\n", "$.deferral.windows.night.hours"),
])
def test_bad_policy_keys_are_named(tmp_path, text, path):
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, text)
    assert path in str(exc.value)


def test_durations_for_new_keys(tmp_path):
    s = load(tmp_path, '[preemption]\nbeneficiary_start_timeout = "45m"\n'
                       '[reservations]\ndefault_duration = "1-00:00:00"\n')
    assert s.preemption.beneficiary_start_timeout == 2700
    assert s.reservations.default_duration == 86400


def test_bad_duration_string_names_key(tmp_path):
    with pytest.raises(ConfigError, match=r"\$\.preemption\.beneficiary_start_timeout"):
        load(tmp_path, '[preemption]\nbeneficiary_start_timeout = "soon"\n')


def test_settings_block_in_docs_loads_and_matches_defaults(tmp_path):
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "policy.md").read_text()
    block = text.split("## Settings (with defaults)")[1].split("```toml\n")[1].split("```")[0]
    s = load(tmp_path, block)
    d = settings.Settings()
    assert {k: (c.weight, c.rank, c.preemptible) for k, c in s.classes.items()} == \
        {k: (c.weight, c.rank, c.preemptible) for k, c in d.classes.items()}
    assert s.fairshare == d.fairshare and s.aging == d.aging
    assert s.priority == d.priority and s.reservations == d.reservations
    assert s.preemption == d.preemption
    assert s.deferral.windows["night"].hours == (0, 1, 2, 3, 4, 5)

"""Any number in any numeric setting (issue 13, finding 4): it loads, inside its
documented range, or it is refused in one line naming the key and the range.

Hypothesis draws a key from ``settings.ranges()`` (the table the docs show) and
a value from everywhere: nan, inf, huge, negative, zero, fractions, integers.
"""

from __future__ import annotations

import math
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmpolicy import settings as settings_mod
from slurmpolicy.errors import ConfigError

#: Keys a single TOML line can set (named tables and lists get their own entry).
KEYS = [(key, allowed) for key, allowed, _ in settings_mod.ranges()
        if "NAME" not in key and key not in ("fairshare.shares", "plugin.admin_uids")]

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 0.0, -1, 1e308, -1e308, float("nan"), float("inf"), 2**31, 1e-9,
                     2**31 - 10, 999_999]),
)


def _toml(value: float | int) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return str(value)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(KEYS), numbers)
def test_a_number_is_in_range_or_refused_naming_key_and_range(entry, value) -> None:  # type: ignore[no-untyped-def]
    key, allowed = entry
    section, name = key.split(".")
    text = f"[{section}]\n{name} = {_toml(value)}\n"
    data = tomllib.loads(text)
    lo, hi = (float(x) for x in allowed.split(" .. "))
    try:
        loaded = settings_mod.from_mapping(data, "s.toml")
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message
        # Refused for its range, or as a float where an integer is wanted (then the type),
        # or because the site factors it allows pass Slurm's limit (it is named then too).
        assert f"`$.{key}`" in message, message
        in_range = isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi
        assert not in_range or "Expected `int`" in message or "largest site factor" in message, \
            message
        if not in_range and "Expected `int`" not in message \
                and "largest site factor" not in message:
            assert f"allowed: {allowed}" in message, message
        return
    got = getattr(getattr(loaded, section), name)
    assert math.isfinite(got) and lo <= got <= hi


@pytest.mark.parametrize(("key", "allowed"), KEYS)
def test_every_numeric_key_is_documented_with_a_finite_range(key: str, allowed: str) -> None:
    lo, hi = (float(x) for x in allowed.split(" .. "))
    assert math.isfinite(lo) and math.isfinite(hi) and lo < hi

"""Unit tests write nothing outside their temporary directories: a daemon made
with default settings does not create the system's doorbell (/run/slurmpolicy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmpolicy.daemon import doorbell
from slurmpolicy.settings import Plugin


@pytest.fixture(autouse=True)
def _no_system_doorbell(monkeypatch: pytest.MonkeyPatch) -> None:
    real = doorbell.Doorbell.prepare
    system = Path(Plugin().doorbell)

    def prepare(self: doorbell.Doorbell, slurm_conf: Path | None = None) -> bool:
        if self.path == system:
            return False
        return real(self, slurm_conf)

    monkeypatch.setattr(doorbell.Doorbell, "prepare", prepare)

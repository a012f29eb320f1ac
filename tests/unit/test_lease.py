"""The cluster lease's logic (daemon/lease.py) over a stand-in for slurmctld's
reservation table: create fails when the name exists, update rewrites times.
The real thing runs in tests/integration/test_daemon_lease.py."""

from __future__ import annotations

import pytest

from slurmpolicy.daemon.lease import OFFSET, Lease, read_lease
from slurmpolicy.errors import ReservationError
from slurmpolicy.model import Node, Reservation, Snapshot
from slurmpolicy.slurm.client import ReservationSpec


class Reservations:
    """slurmctld's reservations, as far as the lease uses them."""

    def __init__(self) -> None:
        self.table: dict[str, Reservation] = {}
        self.calls = 0

    def create_reservation(self, spec: ReservationSpec) -> None:
        self.calls += 1
        if spec.name in self.table:
            raise ReservationError("Duplicate reservation name")
        self._write(spec)

    def update_reservation(self, spec: ReservationSpec) -> None:
        self.calls += 1
        self._write(spec)

    def delete_reservation(self, name: str) -> None:
        self.calls += 1
        self.table.pop(name)

    def _write(self, spec: ReservationSpec) -> None:
        self.table[spec.name] = Reservation(
            name=spec.name, nodes=spec.nodes or ("n1",), start_time=spec.start_time,
            end_time=spec.start_time + 60 * spec.duration_minutes)

    def snapshot(self) -> Snapshot:
        return Snapshot(taken_at=0, slurm_version="x", cluster_name="c",
                        nodes=(Node(name="n1", state="IDLE"),),
                        reservations=tuple(self.table.values()))


@pytest.fixture(name="slurm")
def slurm_fixture() -> Reservations:
    return Reservations()


def test_one_of_two_daemons_acts_and_the_other_takes_over_when_it_stops_renewing(
        slurm: Reservations) -> None:
    a = Lease(slurm, "sp_", ttl=60, token=1111)  # type: ignore[arg-type]
    b = Lease(slurm, "sp_", ttl=60, token=2222)  # type: ignore[arg-type]
    assert a.check(slurm.snapshot(), 1000.0)
    assert not b.check(slurm.snapshot(), 1000.0)
    assert b.status.startswith("standing by: lease sp_lease held by daemon token 1111")
    view = read_lease(slurm.table["sp_lease"])
    assert view is not None and view.token == 1111 and view.renewed_at == 1000.0
    # Renewed once a third of the TTL has passed, not every cycle.
    calls = slurm.calls
    assert a.check(slurm.snapshot(), 1010.0) and slurm.calls == calls
    assert a.check(slurm.snapshot(), 1030.0) and slurm.calls == calls + 1
    assert not b.check(slurm.snapshot(), 1080.0)  # renewed at 1030: still fresh
    # a stops renewing: b claims after the TTL, acts once the claim is confirmed.
    assert not b.check(slurm.snapshot(), 1091.0)
    assert b.status.startswith("claiming lease sp_lease")
    assert b.check(slurm.snapshot(), 1092.0)
    # a wakes up: it sees another token and stands by at once.
    assert not a.check(slurm.snapshot(), 1093.0)
    assert not a.held


def test_release_lets_the_standby_take_over_at_its_next_check(slurm: Reservations) -> None:
    a = Lease(slurm, "sp_", ttl=60, token=1111)  # type: ignore[arg-type]
    b = Lease(slurm, "sp_", ttl=60, token=2222)  # type: ignore[arg-type]
    assert a.check(slurm.snapshot(), 1000.0)
    a.release(slurm.snapshot())
    assert "sp_lease" not in slurm.table
    assert b.check(slurm.snapshot(), 1001.0)


def test_the_lease_starts_years_ahead_and_a_foreign_reservation_is_not_taken(
        slurm: Reservations) -> None:
    a = Lease(slurm, "sp_", ttl=60, token=1111)  # type: ignore[arg-type]
    assert a.check(slurm.snapshot(), 1000.0)
    assert slurm.table["sp_lease"].start_time == 1000.0 + OFFSET
    # An admin's reservation of that name (one hour long) is no lease: nobody acts.
    slurm.table["sp_lease"] = Reservation(name="sp_lease", nodes=("n1",), start_time=5000.0,
                                          end_time=8600.0)
    assert not a.check(slurm.snapshot(), 1001.0)
    assert "is not a slurmpolicy lease" in a.status
    assert slurm.table["sp_lease"].start_time == 5000.0


def test_the_lease_lasts_at_least_three_cycles() -> None:
    from slurmpolicy.daemon.loop import lease_ttl
    from slurmpolicy.settings import from_mapping

    assert lease_ttl(from_mapping({"daemon": {"interval": "30s"}})) == 90
    assert lease_ttl(from_mapping({"daemon": {"interval": "60s", "lease_ttl": "1m"}})) == 180

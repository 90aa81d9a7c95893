"""How a worker reckons the end of its leases (``simpleworkflow.worker.leases``), without I/O."""

from __future__ import annotations

import pytest

from simpleworkflow.worker import leases


@pytest.mark.parametrize(("lease", "margin"), [(1, 0.25), (3, 0.75), (5, 1.0), (30, 6.0)])
def test_the_margin_is_a_fifth_of_the_lease_at_least_a_second_at_most_a_quarter(
    lease: float, margin: float
) -> None:
    assert leases.margin(lease) == margin


def test_a_lease_is_given_up_a_margin_before_its_last_confirmed_renewal_ends() -> None:
    renewals = leases.Renewals(lease_seconds=10)
    renewals.granted(["a", "b"], sent_at=100.0)
    assert renewals.next_end() == 108.0
    renewals.renewed(["a"], sent_at=105.0)
    assert renewals.ending(107.9) == []
    assert renewals.ending(108.0) == ["b"]
    assert renewals.next_end() == 108.0
    renewals.forget("b")
    assert renewals.next_end() == 113.0


def test_a_renewal_never_brings_back_a_lease_given_up_or_shortens_one() -> None:
    renewals = leases.Renewals(lease_seconds=10)
    renewals.granted(["a"], sent_at=100.0)
    renewals.renewed(["a"], sent_at=99.0)  # an older heartbeat answered late
    assert renewals.until("a") == 110.0
    renewals.forget("a")
    renewals.renewed(["a"], sent_at=101.0)  # sent before it was given up
    assert renewals.until("a") is None
    assert renewals.next_end() is None


def test_the_claim_of_a_lease_is_remembered_until_it_is_forgotten() -> None:
    """When the claim was sent: it found the run held, so the first step needs no read."""
    renewals = leases.Renewals(lease_seconds=10)
    renewals.granted(["a"], sent_at=100.0)
    renewals.renewed(["a"], sent_at=105.0)
    assert renewals.claimed("a") == 100.0  # a renewal is not a claim
    renewals.forget("a")
    assert renewals.claimed("a") is None

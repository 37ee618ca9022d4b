"""The broker's leadership lease: it stops leading before the controllers may have fenced
it (found by the chaos suite: a coordinator cut off from the controllers kept answering
offset reads from its stale state after a new coordinator had taken commits)."""

from __future__ import annotations

from kraftlite.broker.lease import leadership_lapsed, lease_margin_ms


def test_the_lease_lapses_before_the_controllers_can_fence() -> None:
    margin = lease_margin_ms(3000, 100)
    assert margin == 2 * 100 + 300
    sent = 10_000
    assert not leadership_lapsed(sent, sent + 3000 - margin - 1, 3000, 100)
    assert leadership_lapsed(sent, sent + 3000 - margin, 3000, 100)
    # The lease is measured from when the answered heartbeat was sent, not answered:
    # the controller heard it no earlier than that.
    assert leadership_lapsed(sent, sent + 3000, 3000, 100)


def test_the_margin_covers_a_late_check() -> None:
    # Checked every 100 ms, the lapse is noticed at most 100 ms late: still before fencing.
    sent, timeout = 0, 9000
    first_lapsed = next(
        t for t in range(0, timeout + 1, 100) if leadership_lapsed(sent, t, timeout, 100)
    )
    assert first_lapsed + 100 < sent + timeout

"""The listener's connection counts (api/listener.py rule 1): regular slots by total and by
address, then slots reserved for the nodes, which a client cannot keep."""

from __future__ import annotations

import asyncio
from typing import cast

from kraftlite.api.listener import Admission, ConnectionCounts
from kraftlite.config import ListenerLimits


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


def _t() -> asyncio.BaseTransport:
    return cast(asyncio.BaseTransport, _Transport())


def _aborted(t: asyncio.BaseTransport) -> bool:
    return cast(_Transport, t).aborted


def _counts(total: int = 2, per_ip: int = 10, reserved: int = 2) -> ConnectionCounts:
    return ConnectionCounts(
        ListenerLimits(
            max_connections=total, max_connections_per_ip=per_ip, reserved_for_nodes=reserved
        )
    )


def test_past_the_caps_a_connection_gets_a_reserved_slot_then_none() -> None:
    counts = _counts()
    assert [counts.admit("a", _t()) for _ in range(2)] == [Admission.ADMITTED] * 2
    node = _t()
    assert counts.admit("a", node) is Admission.RESERVED
    assert counts.settle(node, from_node=True)
    other_node = _t()
    assert counts.admit("b", other_node) is Admission.RESERVED
    assert counts.settle(other_node, from_node=True)
    # every reserved slot holds a node's connection: refused
    assert counts.admit("c", _t()) is Admission.REFUSED
    assert counts.refused == 1


def test_the_per_address_cap_sends_an_address_to_the_reserve() -> None:
    counts = _counts(total=10, per_ip=1)
    assert counts.admit("a", _t()) is Admission.ADMITTED
    assert counts.admit("a", _t()) is Admission.RESERVED
    assert counts.admit("b", _t()) is Admission.ADMITTED


def test_a_client_in_a_reserved_slot_is_closed_at_its_first_request() -> None:
    counts = _counts(total=0)
    client = _t()
    assert counts.admit("a", client) is Admission.RESERVED
    assert not counts.settle(client, from_node=False)
    assert client not in counts.reserved
    # released by the listener when the closed connection goes: nothing counted twice
    counts.release("a", client, Admission.RESERVED)
    assert counts.total == 0 and not counts.reserved


def test_a_node_shown_keeps_its_slot_past_the_deadline() -> None:
    counts = _counts(total=0)
    node, idle = _t(), _t()
    counts.admit("a", node)
    counts.admit("a", idle)
    counts.settle(node, from_node=True)
    counts.expire(node)
    counts.expire(idle)
    assert not _aborted(node) and _aborted(idle)
    assert list(counts.reserved) == [node]
    assert counts.settle(node, from_node=True)  # each request of a node's keeps it
    # a client's request on it (a call passed on for a client; a captured signature
    # replayed, then plain requests) closes it: a slot cannot be held with them
    assert not counts.settle(node, from_node=False)
    assert not counts.reserved


def test_a_full_reserve_closes_its_oldest_unshown_connection_for_a_new_one() -> None:
    counts = _counts(total=0, reserved=2)
    node, first, second, third = _t(), _t(), _t(), _t()
    counts.admit("a", first)
    counts.admit("a", node)
    counts.settle(node, from_node=True)
    assert counts.admit("a", second) is Admission.RESERVED  # first is closed for it
    assert _aborted(first) and not _aborted(node)
    assert counts.admit("a", third) is Admission.RESERVED  # then second
    assert _aborted(second)
    assert list(counts.reserved) == [node, third]
    counts.release("a", first, Admission.RESERVED)  # its close arrives later: no harm
    assert list(counts.reserved) == [node, third]


def test_released_regular_slots_are_reused() -> None:
    counts = _counts(total=1, reserved=0)
    t = _t()
    assert counts.admit("a", t) is Admission.ADMITTED
    assert counts.admit("a", _t()) is Admission.REFUSED
    counts.release("a", t, Admission.ADMITTED)
    assert counts.admit("a", _t()) is Admission.ADMITTED


def test_an_address_overridden_to_zero_gets_no_reserved_slot() -> None:
    counts = ConnectionCounts(
        ListenerLimits(max_connections_per_ip_overrides=(("10.0.0.9", 0),), reserved_for_nodes=4)
    )
    assert counts.admit("10.0.0.9", _t()) is Admission.REFUSED
    assert not counts.reserved

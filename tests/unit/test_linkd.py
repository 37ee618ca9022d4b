"""The link forwarder's decisions (tests/harness/linkd.py), without a TUN device."""

from __future__ import annotations

import json
import random

import pytest

from tests.harness.linkd import hold_for, parse


def packet(src: str, dst: str) -> bytes:
    header = bytearray(20)
    header[0] = 0x45
    header[12:16] = bytes(int(o) for o in src.split("."))
    header[16:20] = bytes(int(o) for o in dst.split("."))
    return bytes(header)


def test_a_packet_waits_for_both_of_its_links() -> None:
    delays = parse(json.dumps({"delays": {"10.88.1.2": [3, 0], "10.88.2.2": [5, 0]}}))
    rng = random.Random(1)
    assert hold_for(packet("10.88.1.2", "10.88.2.2"), delays, rng) == pytest.approx(0.008)
    assert hold_for(packet("10.88.1.2", "10.88.9.2"), delays, rng) == pytest.approx(0.003)
    assert hold_for(packet("10.88.8.2", "10.88.9.2"), delays, rng) == 0


def test_jitter_stays_in_its_bounds_and_never_goes_below_zero() -> None:
    delays = parse(json.dumps({"delays": {"10.88.1.2": [1, 2]}}))
    rng = random.Random(2)
    holds = [hold_for(packet("10.88.1.2", "10.88.7.2"), delays, rng) for _ in range(1000)]
    assert min(holds) == 0 and max(holds) <= 0.003
    assert 0.00105 < sum(holds) / len(holds) < 0.0012  # E[max(0, U(-1, 3))] = 9/8 ms


def test_what_is_not_ipv4_passes_at_once() -> None:
    delays = parse(json.dumps({"delays": {"10.88.1.2": [3, 0]}}))
    assert hold_for(b"\x60" + bytes(39), delays, random.Random(3)) == 0  # IPv6
    assert hold_for(b"\x45", delays, random.Random(3)) == 0  # truncated

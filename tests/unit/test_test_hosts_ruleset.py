"""The test hosts' fault rules (tests/harness/hosts.py `ruleset`, `delays`), without a network."""

from __future__ import annotations

from tests.harness.hosts import Allow, Faults, Host, Shape, delays, ruleset

HOSTS = {name: Host(name, i, f"ns-{name}", f"klv{i}") for i, name in enumerate("abc", start=1)}


def rules(faults: Faults) -> list[str]:
    text = ruleset(HOSTS, faults)
    body = text.split("policy accept;", 1)[1]
    return [line.strip() for line in body.splitlines() if line.strip() not in {"", "}"}]


def test_no_fault_drops_nothing_but_tracks_connections() -> None:
    assert rules(Faults()) == ["ct state new counter"]
    text = ruleset(HOSTS, Faults())
    # replaced as a whole: created if missing, deleted, made again, in one transaction
    assert text.startswith("table inet kraftlite_testnet\ndelete table inet kraftlite_testnet\n")


def test_a_cut_acts_on_the_connections_src_opened_both_ways() -> None:
    hang = rules(Faults(cuts={("a", "b"): "hang"}))
    assert hang[1:] == ["ct original ip saddr 10.88.1.2 ct original ip daddr 10.88.2.2 drop"]
    reset = rules(Faults(cuts={("a", "b"): "reset"}))
    assert reset[1] == (
        "ct original ip saddr 10.88.1.2 ct original ip daddr 10.88.2.2 "
        "meta l4proto tcp reject with tcp reset"
    )
    assert reset[2].endswith("drop")  # what is not TCP


def test_silence_and_loss_match_a_link_once_per_packet() -> None:
    silenced = rules(Faults(silenced={"c"}))
    assert silenced[1:] == ['iifname "klv3" drop', 'oifname "klv3" drop']
    lossy = rules(Faults(shapes={"b": Shape(loss_pct=5), "a": Shape(delay_ms=3)}))
    assert lossy[1:] == [
        'iifname "klv2" numgen random mod 10000 < 500 drop',
        'oifname "klv2" numgen random mod 10000 < 500 drop',
    ]


def test_only_delayed_links_go_to_the_forwarder() -> None:
    shapes = {"a": Shape(delay_ms=3), "b": Shape(loss_pct=5), "c": Shape(jitter_ms=2)}
    assert delays(HOSTS, Faults(shapes=shapes)) == {"10.88.1.2": (3, 0), "10.88.3.2": (0, 2)}


def test_a_firewall_lets_only_the_allowed_connections_start() -> None:
    firewall = (Allow(("a", "b"), ("c",), 8080),)
    assert rules(Faults(firewall=firewall))[1:] == [
        "ct state new ip saddr { 10.88.1.2, 10.88.2.2 } ip daddr { 10.88.3.2 } "
        "tcp dport 8080 accept",
        "ct state new drop",
    ]
    # faults first: a cut drops even what the firewall allows
    both = rules(Faults(cuts={("a", "c"): "hang"}, firewall=firewall))
    assert both[1].endswith("drop") and "ct original" in both[1]

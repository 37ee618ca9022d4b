"""When a broker must stop leading because it lost the controllers (pure).

Rules:
1. The controller fences a broker it has not heard from for `broker.session.timeout.ms`
   and moves its leaderships to other ISR members. It heard our last successful heartbeat
   no earlier than we sent it, so by `sent + session_timeout` it may have fenced us.
2. A broker that has not had a heartbeat answered for longer than that, minus a margin for
   how late it notices, stops serving as a leader: no writes, no reads, no group
   coordination. Otherwise a deposed leader cut off from the controllers keeps answering
   reads from its old state (stale committed offsets, a stale log end) next to the new
   leader. This is a lease on leadership, renewed by every answered heartbeat.
3. It leads again only once a heartbeat was answered after the lapse (a fresh session) and
   the metadata it then holds says so.
"""

from __future__ import annotations


def lease_margin_ms(session_timeout_ms: int, check_interval_ms: int) -> int:
    """How much earlier than the controller could, the broker gives up its leaderships:
    two checks' worth (it notices up to one check late) and a tenth of the session."""
    return 2 * check_interval_ms + session_timeout_ms // 10


def leadership_lapsed(
    last_answered_sent_ms: int, now_ms: int, session_timeout_ms: int, check_interval_ms: int
) -> bool:
    """Rule 2: whether the controllers may have fenced us by now."""
    deadline = last_answered_sent_ms + session_timeout_ms
    return now_ms >= deadline - lease_margin_ms(session_timeout_ms, check_interval_ms)

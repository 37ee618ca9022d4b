"""Tagged fields (KIP-482) against the request's item budget, and where the Kafka listener
decodes (issue 24): every tagged field, known or unknown, in the header or in any struct,
costs one item; a stranger's frame of 131k empty tagged fields is refused at its count; a
request of many items leaves the event loop even when it is small in bytes."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest

from kraftlite.config import ListenerLimits
from kraftlite.kafka import server
from kraftlite.kafka.server import KafkaServer
from kraftlite.protocol.kafka import messages
from kraftlite.protocol.kafka.messages import ApiKey, decode_request, encode_request
from kraftlite.protocol.kafka.wire import ItemBudgetExceeded, Reader, WireError, Writer

# the most empty tagged fields a 512 KiB frame (the pre-authentication cap) holds when
# every tag is distinct and at most 3 varint bytes: what the attacker review sent
ATTACK_FIELDS = 131_000


def _tagged(count: int, first_tag: int = 0) -> bytes:
    """A tagged-field section of `count` empty fields with distinct, ascending tags."""
    writer = Writer()
    writer.tagged_fields({first_tag + tag: b"" for tag in range(count)})
    return writer.getvalue()


def _api_versions_v3(header_tags: bytes = b"\x00", body_tags: bytes = b"\x00") -> bytes:
    """An ApiVersions v3 request (no size prefix) with the given tagged-field sections."""
    return (
        struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, 7)
        + b"rdkafka"
        + header_tags
        + b"\x0blibrdkafka"  # compact "librdkafka"
        + b"\x072.16.1"  # compact "2.16.1"
        + body_tags
    )


def test_a_normal_api_versions_v3_still_decodes() -> None:
    request = decode_request(_api_versions_v3())
    assert request.api_key == ApiKey.API_VERSIONS and request.correlation_id == 1
    assert request.body == {
        "client_software_name": "librdkafka",
        "client_software_version": "2.16.1",
    }
    # a few unknown tags (a later client's), in the header and in the body: skipped
    tagged = decode_request(_api_versions_v3(_tagged(3, 20), _tagged(2, 40)), max_items=5)
    assert tagged.body == request.body


@pytest.mark.parametrize("where", ["header", "body"])
def test_every_tagged_field_costs_one_item(where: str) -> None:
    """Ten empty tagged fields need ten items, wherever they are."""
    tags = _tagged(10, 30)
    frame = (
        _api_versions_v3(tags, b"\x00") if where == "header" else _api_versions_v3(b"\x00", tags)
    )
    assert decode_request(frame, max_items=10).body["client_software_name"] == "librdkafka"
    with pytest.raises(ItemBudgetExceeded):
        decode_request(frame, max_items=9)


def test_tagged_fields_of_nested_structs_share_the_request_budget() -> None:
    """Metadata v12: 3 topics (3 items), each with 4 unknown tagged fields (12 items)."""
    writer = Writer()
    writer.compact_array_length(3)
    for name in ("a", "b", "c"):
        writer.uuid(UUID(int=0))
        writer.compact_nullable_string(name)
        writer.raw(_tagged(4, 50))
    writer.raw(b"\x00\x00\x00")  # auto creation, authorized operations, body tags
    header = struct.pack(">hhih", ApiKey.METADATA, 12, 1, 1) + b"c" + b"\x00"
    frame = header + writer.getvalue()
    topics = decode_request(frame, max_items=15).body["topics"]
    assert [t["name"] for t in topics] == ["a", "b", "c"]
    with pytest.raises(ItemBudgetExceeded):
        decode_request(frame, max_items=14)


def test_a_known_tagged_field_costs_an_item_too() -> None:
    """Fetch v12's ClusterId (tag 0) is known: it is read, and still counted."""
    plain = encode_request(ApiKey.FETCH, 12, 1, "c", {"topics": []})
    tagged = encode_request(ApiKey.FETCH, 12, 1, "c", {"topics": [], "cluster_id": "k"})
    assert decode_request(tagged, max_items=1).body["cluster_id"] == "k"
    assert decode_request(plain, max_items=0).body["cluster_id"] is None
    with pytest.raises(ItemBudgetExceeded):
        decode_request(tagged, max_items=0)


def _attack() -> bytes:
    frame = _api_versions_v3(_tagged(ATTACK_FIELDS))
    assert len(frame) <= server._UNAUTHENTICATED_MAX_BYTES  # what a stranger may send
    return frame


def _counting_headers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the tagged fields read one by one."""
    calls: list[int] = []
    original: Callable[[Reader], tuple[int, int]] = Reader.tagged_field_header

    def counted(reader: Reader) -> tuple[int, int]:
        calls.append(1)
        return original(reader)

    monkeypatch.setattr(Reader, "tagged_field_header", counted)
    return calls


def test_131k_tagged_fields_are_refused_at_their_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the budget, the frame is refused before one field is read (no wall clock: the
    fields read are counted)."""
    calls = _counting_headers(monkeypatch)
    with pytest.raises(WireError):
        decode_request(_attack(), max_items=ATTACK_FIELDS - 1)
    assert calls == []


class _Session:
    """What KafkaServer._decode asks of a session (passed where a Session is expected)."""

    def __init__(self, authenticated: bool) -> None:
        self.must_authenticate = True
        self.authenticated = authenticated

    def refusal(self, api_key: int, api_version: int) -> str | None:
        return None


def _server() -> KafkaServer:
    handlers: Any = None  # _decode asks nothing of them
    return KafkaServer(handlers, ListenerLimits(), 100 << 20)


async def test_a_strangers_frame_of_131k_tagged_fields_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before authenticating, ApiVersions and SASL need no arrays and a few tags: the
    review's frame is a WireError (the listener closes the connection), no field read."""
    calls = _counting_headers(monkeypatch)
    with pytest.raises(WireError):
        await _server()._decode(_attack(), _Session(authenticated=False))
    assert calls == []
    normal = await _server()._decode(_api_versions_v3(), _Session(authenticated=False))
    assert normal.body["client_software_version"] == "2.16.1"


def _metadata(topics: int) -> bytes:
    body = {"topics": [{"name": f"t{i}"} for i in range(topics)]}
    return encode_request(ApiKey.METADATA, 12, 1, "c", body)


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What the listener decodes on a worker thread."""
    decoded: list[Any] = []
    to_thread = asyncio.to_thread

    async def recording(func: Callable[..., Any], /, *args: Any) -> Any:
        decoded.append(args)
        return await to_thread(func, *args)

    monkeypatch.setattr(server.asyncio, "to_thread", recording)
    return decoded


async def test_a_small_request_of_many_items_is_decoded_off_the_loop(
    threads: list[Any],
) -> None:
    """5,000 topics fit in 256 KiB, yet cost ~20 ms to decode: a worker thread's."""
    few, many = _metadata(10), _metadata(5_000)
    assert len(many) < server._INLINE_DECODE_BYTES
    session = _Session(authenticated=True)
    assert len((await _server()._decode(few, session)).body["topics"]) == 10
    assert threads == []
    assert len((await _server()._decode(many, session)).body["topics"]) == 5_000
    assert threads == [(many, messages.MAX_REQUEST_ITEMS)]


async def test_over_the_request_budget_is_refused_on_the_thread_too(threads: list[Any]) -> None:
    """Metadata v9 naming 200,001 topics (2 bytes each, 400 KiB): refused by the full
    budget on the worker thread, as before tagged fields counted."""
    count = messages.MAX_REQUEST_ITEMS + 1
    writer = Writer()
    writer.compact_array_length(count)
    writer.raw(b"\x01\x00" * count)  # compact "" and no tagged fields, per topic
    writer.raw(b"\x00\x00\x00")  # auto creation, authorized operations, body tags
    frame = struct.pack(">hhih", ApiKey.METADATA, 9, 1, 1) + b"c\x00" + writer.getvalue()
    with pytest.raises(ItemBudgetExceeded):
        await _server()._decode(frame, _Session(authenticated=True))
    assert threads == [(frame, messages.MAX_REQUEST_ITEMS)]

"""The sink's batch size bound (kraftlite/spark/sink.py): what it adds up is never less than
the encoded batch, so a batch under batchMaxBytes is under it on the wire too (header values
null or not); a row's header keeps a null value.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlite.protocol import batch as batch_format
from kraftlite.spark.sink import BATCH_OVERHEAD, _header, encoded_size

records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=50)), max_size=3),
    ),
    min_size=1,
    max_size=300,
)


@given(records)
def test_the_size_bound_is_never_below_the_encoded_batch(rows: list) -> None:
    def rows_of(rows: list) -> list:
        return [(k, v, tuple(h)) for k, v, h in rows]

    keys = [k for k, _, _ in rows]
    values = [v for _, v, _ in rows]
    headers = [tuple(h) for _, _, h in rows]
    encoded = batch_format.encode_batch(
        values, keys=keys, timestamps=[0] * len(rows), headers=headers
    )
    bound = BATCH_OVERHEAD + sum(encoded_size(k, v, h) for k, v, h in rows_of(rows))
    assert len(encoded) <= bound
    assert bound - len(encoded) <= 21 * len(rows) + BATCH_OVERHEAD  # and not far above it


def test_a_header_row_keeps_a_null_value_and_refuses_a_null_key() -> None:
    assert _header({"key": "n", "value": None}) == ("n", None)
    assert _header({"key": "e", "value": b""}) == ("e", b"")
    assert _header({"key": "s", "value": "text"}) == ("s", b"text")
    with pytest.raises(ValueError, match="keys must not be null"):
        _header({"key": None, "value": b"x"})

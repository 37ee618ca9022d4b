"""Kafka's binary wire protocol, pure: bytes in, Python values out, and back.

`wire` reads and writes the protocol's primitive types, `messages` holds the request and
response schemas of the APIs kraftlite serves (with the request and response headers), and
`records` reads and writes Kafka's record batches (magic 2) and converts them to and from
kraftlite's own batch format. Nothing here does I/O: a server frames the bytes.
"""

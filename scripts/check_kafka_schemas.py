"""Compare our Kafka message schemas (kraftlite/protocol/kafka/messages.py) with Kafka's own.

Usage:
    python scripts/check_kafka_schemas.py KAFKA_MESSAGE_DIR_OR_GITDIR [--ref REF]

The argument is Kafka's message directory (clients/src/main/resources/common/message), a
Kafka checkout (the directory is found under it), or a Kafka git directory (bare or not;
the files are read at `--ref`, HEAD by default). Kafka's JSON files carry `//` comments,
which are stripped before parsing.

For every API and every version we serve, request and response alike, it compares what
the version carries on the wire, field by field and struct by struct:
  - the message: Kafka's validVersions hold the version, the same flexible versions;
  - the fields present in the version, in order (tagged fields by tag), by Kafka's name
    (our dict keys are its snake_case);
  - each field's type (primitive, `[]element`, struct name), nullability and tag or
    untagged-ness in that version, and its default (Kafka's, or its implicit one: 0, false,
    "", null records, zero uuid, [] and a struct of defaults);
  - sub-struct fields the same way, common structs (`commonStructs`) included.
Fields that exist only in versions we do not serve are trimmed on purpose (messages.py
keeps only what the versions served carry) and are no difference.

Prints one line per difference (with the versions where it holds) and exits 1 if any.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftlite.protocol.kafka.messages import (
    APIS,
    PRIMITIVES,
    Field,
    Message,
    Versions,
    snake_case,
    versions,
)

MESSAGE_DIR = "clients/src/main/resources/common/message"
_ZERO_UUID = uuid.UUID(int=0)


# ----------------------------------------------------------------------- reading Kafka's


def strip_comments(text: str) -> str:
    """Kafka's JSON with its `//` comments removed (not inside strings: `"about"` texts
    may hold URLs)."""
    out: list[str] = []
    index, in_string = 0, False
    while index < len(text):
        char = text[index]
        if in_string:
            out.append(char)
            if char == "\\":
                out.append(text[index + 1])
                index += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif text.startswith("//", index):
            while index < len(text) and text[index] != "\n":
                index += 1
            continue
        else:
            out.append(char)
        index += 1
    return "".join(out)


def _git(gitdir: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={gitdir}", *args], check=True, capture_output=True
    ).stdout


def read_schemas(source: Path, ref: str) -> list[dict[str, Any]]:
    """Every request and response schema of Kafka's message directory, parsed."""
    texts: list[str] = []
    if ((source / "objects").is_dir() and (source / "HEAD").is_file()) or source.name == ".git":
        listing = _git(source, "ls-tree", f"{ref}:{MESSAGE_DIR}").decode()
        for line in listing.splitlines():
            meta, name = line.split("\t", 1)
            if name.endswith(("Request.json", "Response.json")):
                texts.append(_git(source, "cat-file", "blob", meta.split()[2]).decode())
    else:
        directory = source / MESSAGE_DIR if (source / MESSAGE_DIR).is_dir() else source
        for path in sorted(directory.glob("*.json")):
            if path.name.endswith(("Request.json", "Response.json")):
                texts.append(path.read_text())
        if (source / ".git").is_dir() and not texts:
            return read_schemas(source / ".git", ref)
    if not texts:
        raise SystemExit(f"no Kafka message schemas found at {source}")
    return [json.loads(strip_comments(text)) for text in texts]


@dataclass(frozen=True)
class TheirField:
    """One of Kafka's fields, its versions parsed and its struct fields resolved."""

    name: str
    type: str
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: Any
    fields: tuple[TheirField, ...]

    @property
    def element(self) -> str:
        return self.type.removeprefix("[]")

    @property
    def is_struct(self) -> bool:
        return self.element not in PRIMITIVES


def _their_fields(
    specs: list[dict[str, Any]], common: dict[str, list[dict[str, Any]]]
) -> tuple[TheirField, ...]:
    out = []
    for spec in specs:
        type_ = spec["type"]
        element = type_.removeprefix("[]")
        sub = spec.get("fields")
        if sub is None and element not in PRIMITIVES:
            sub = common.get(element)
            if sub is None:
                raise SystemExit(f"{spec['name']}: struct {element} is defined nowhere")
        tag = spec.get("tag")
        tagged = spec.get("taggedVersions")
        fields = _their_fields(sub or [], common)
        out.append(
            TheirField(
                name=spec["name"],
                type=type_,
                versions=versions(spec.get("versions", "none")),
                nullable=versions(spec.get("nullableVersions", "none")),
                tagged=versions(tagged) if tagged is not None else versions("none"),
                tag=tag,
                default=_their_default(spec, fields),
                fields=fields,
            )
        )
    return tuple(out)


def _their_default(spec: dict[str, Any], fields: tuple[TheirField, ...]) -> Any:
    """Kafka's default of a field as our codec holds it (rule 2 of messages.py)."""
    type_ = spec["type"]
    given = spec.get("default")
    if given is not None and str(given) == "null":
        return None
    if type_.startswith("[]"):
        return []
    if type_ not in PRIMITIVES:
        return {snake_case(f.name): f.default for f in fields}
    text = None if given is None else str(given)
    if type_ in {"int8", "int16", "int32", "int64", "uint16", "uint32"}:
        return 0 if text is None else int(text, 0)
    if type_ == "float64":
        return 0.0 if text is None else float(text)
    if type_ == "bool":
        return text == "true"
    if type_ == "string":
        return text or ""
    if type_ == "uuid":
        return _ZERO_UUID if text is None else uuid.UUID(text)
    if type_ == "bytes":
        return b""
    return None  # records


# ----------------------------------------------------------------------------- comparing


class Differences:
    """Differences, each with the versions it was seen in."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], list[int]] = defaultdict(list)

    def add(self, where: str, what: str, version: int) -> None:
        seen = self.seen[(where, what)]
        if version not in seen:
            seen.append(version)

    def lines(self) -> list[str]:
        return [
            f"{where}: {what} (v{_ranges(found)})" for (where, what), found in self.seen.items()
        ]


def _ranges(found: list[int]) -> str:
    parts: list[str] = []
    start = previous = found[0]
    for version in [*found[1:], None]:
        if version is not None and version == previous + 1:
            previous = version
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if version is not None:
            start = previous = version
    return ",".join(parts)


def _ours_default(field: Field) -> Any:
    if field.is_struct and not field.is_array and field.default is not None:
        return {sub.key: _ours_default(sub) for sub in field.fields}
    return field.default


def compare_fields(
    ours: tuple[Field, ...],
    theirs: tuple[TheirField, ...],
    version: int,
    flexible: bool,
    where: str,
    out: Differences,
) -> None:
    """The fields one struct carries in `version`, ours against Kafka's."""

    def carried(fields: tuple[Any, ...]) -> tuple[list[Any], dict[int, Any]]:
        regular, tagged = [], {}
        for spec in fields:
            if not spec.versions.has(version):
                continue
            if spec.tagged.has(version):
                if flexible:
                    tagged[spec.tag] = spec
            else:
                regular.append(spec)
        return regular, tagged

    our_regular, our_tagged = carried(ours)
    their_regular, their_tagged = carried(theirs)
    our_names = [f.name for f in our_regular]
    their_names = [f.name for f in their_regular]
    for name in our_names:
        if name not in their_names:
            out.add(f"{where}.{name}", "ours has this field, Kafka's schema does not", version)
    for name in their_names:
        if name not in our_names:
            out.add(f"{where}.{name}", "Kafka has this field, ours does not", version)
    if set(our_names) == set(their_names) and our_names != their_names:
        out.add(where, f"fields in the order {our_names}, Kafka's {their_names}", version)
    by_name = {f.name: f for f in theirs}
    for field in our_regular:
        kafka = by_name.get(field.name)
        if kafka is not None and not kafka.tagged.has(version):
            compare_field(field, kafka, version, flexible, f"{where}.{field.name}", out)
        elif kafka is not None:
            out.add(f"{where}.{field.name}", f"untagged where Kafka tags it {kafka.tag}", version)
    for tag, field in our_tagged.items():
        kafka = their_tagged.get(tag)
        if kafka is None:
            out.add(f"{where}.{field.name}", f"tag {tag}: Kafka has no field of that tag", version)
            continue
        if kafka.name != field.name:
            out.add(f"{where}.{field.name}", f"tag {tag} is Kafka's {kafka.name}", version)
            continue
        compare_field(field, kafka, version, flexible, f"{where}.{field.name}", out)
    for tag, kafka in their_tagged.items():
        if tag not in our_tagged:
            out.add(
                f"{where}.{kafka.name}", f"Kafka has this field (tag {tag}), ours does not", version
            )


def compare_field(
    ours: Field, theirs: TheirField, version: int, flexible: bool, where: str, out: Differences
) -> None:
    if ours.type != theirs.type:
        out.add(where, f"type {ours.type} where Kafka has {theirs.type}", version)
        if ours.is_struct != theirs.is_struct or ours.is_array != theirs.type.startswith("[]"):
            return
    if ours.nullable.has(version) != theirs.nullable.has(version):
        if ours.nullable.has(version):
            out.add(where, "nullable where Kafka's is not", version)
        else:
            out.add(where, "not nullable where Kafka's is", version)
    if ours.tag != theirs.tag:
        out.add(where, f"tag {ours.tag} where Kafka has {theirs.tag}", version)
    if ours.tagged.has(version) != theirs.tagged.has(version):
        out.add(where, "tagged-ness differs", version)
    mine, kafka = _ours_default(ours), theirs.default
    if (not ours.is_struct or mine is None or kafka is None) and (
        mine != kafka or type(mine) is not type(kafka)
    ):
        out.add(where, f"default {mine!r} where Kafka's is {kafka!r}", version)
    if ours.is_struct:
        compare_fields(ours.fields, theirs.fields, version, flexible, where, out)


def compare(schemas: list[dict[str, Any]]) -> list[str]:
    by_key = {(s["apiKey"], s["type"]): s for s in schemas if "apiKey" in s}
    out = Differences()
    for key, entry in sorted(APIS.items()):
        for kind, message in (("request", entry.request), ("response", entry.response)):
            schema = by_key.get((int(key), kind))
            if schema is None:
                out.add(message.name, f"Kafka has no {kind} for api key {int(key)}", 0)
                continue
            _compare_message(message, schema, entry.served, out)
    return out.lines()


def _compare_message(
    message: Message, schema: dict[str, Any], served: Versions, out: Differences
) -> None:
    where = message.name
    if schema["name"] != message.name:
        out.add(where, f"Kafka names it {schema['name']}", served.low)
    valid = versions(schema["validVersions"])
    flexible = versions(schema.get("flexibleVersions", "none"))
    common = {s["name"]: s["fields"] for s in schema.get("commonStructs", [])}
    theirs = _their_fields(schema["fields"], common)
    for version in range(served.low, served.high + 1):
        if not valid.has(version):
            out.add(where, f"Kafka's validVersions {schema['validVersions']} lack it", version)
            continue
        if message.flexible.has(version) != flexible.has(version):
            out.add(where, "flexible versions differ", version)
        compare_fields(message.fields, theirs, version, flexible.has(version), where, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("source", type=Path, help="Kafka's message dir, checkout or git dir")
    parser.add_argument("--ref", default="HEAD", help="the revision read from a git dir")
    args = parser.parse_args(argv)
    schemas = read_schemas(args.source, args.ref)
    differences = compare(schemas)
    for line in differences:
        print(line)
    served = sum(e.served.high - e.served.low + 1 for e in APIS.values())
    print(
        f"{len(differences)} difference(s); {len(APIS)} APIs, {served} versions served, "
        f"compared with {len(schemas)} schemas of Kafka",
        file=sys.stderr,
    )
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())

"""Independent readers of exported traces, used to validate what the exporters wrote.

They share nothing with the exporters: the JSON is read with the standard library, and the
protobuf with a small decoder written from the wire-format specification.
"""

from __future__ import annotations

import gzip
import json
import struct
from collections import defaultdict
from pathlib import Path
from typing import Any


def load_chrome(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def check_chrome(events: list[dict[str, Any]]) -> dict[str, int]:
    """Assert strict nesting per thread, flows on existing slices; return counts."""
    slices: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for thread, spans in slices.items():
        spans.sort(key=lambda s: (s[0], -(s[1] - s[0])))
        stack: list[float] = []
        for start, end in spans:
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-6, f"overlap on {thread}: {start}..{end}"
            stack.append(end)
    starts = {}
    for e in events:
        if e["ph"] in ("s", "f"):
            inside = any(s <= e["ts"] <= t for s, t in slices[(e["pid"], e["tid"])])
            assert inside, f"flow {e['ph']} {e['id']} is not on a slice"
        if e["ph"] == "s":
            starts[e["id"]] = e
    finishes = [e for e in events if e["ph"] == "f"]
    assert all(f["id"] in starts for f in finishes), "a flow ends without a start"
    return {
        "slices": sum(len(v) for v in slices.values()),
        "flows": len(finishes),
        "counters": sum(1 for e in events if e["ph"] == "C"),
    }


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes) -> list[tuple[int, Any]]:
    out, pos = [], 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value = struct.unpack_from("<Q", data, pos)[0]
            pos += 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value = data[pos : pos + length]
            pos += length
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        out.append((field, value))
    return out


def check_perfetto(path: Path) -> dict[str, Any]:
    """Decode a TrackEvent trace; assert balanced, nested slices and resolvable flows."""
    descriptors: dict[int, dict[str, Any]] = {}
    events: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    flow_starts, flow_ends, counters = set(), [], 0
    for field, packet in _fields(path.read_bytes()):
        assert field == 1
        p = dict((f, v) for f, v in _fields(packet) if f != 47)
        if 60 in p:
            d = dict(_fields(p[60]))
            descriptors[d[1]] = {"name": d[2].decode(), "parent": d.get(5), "counter": 8 in d}
        if 11 in p:
            fields = _fields(p[11])
            e = dict(fields)
            kind, track = e[9], e[11]
            assert track in descriptors, "event on an undescribed track"
            if kind == 4:
                counters += 1
                continue
            events[track].append((p[8], kind, e.get(23, b"").decode()))
            flow_starts.update(v for f, v in fields if f == 47)
            flow_ends.extend(v for f, v in fields if f == 48)
    slices = 0
    for track, seq in events.items():
        depth, last_ts = 0, -1
        for ts, kind, _ in seq:
            assert ts >= last_ts, f"time goes back on track {descriptors[track]['name']}"
            last_ts = ts
            depth += 1 if kind == 1 else -1
            slices += kind == 1
            assert depth >= 0, "a slice ends that never began"
        assert depth == 0, "a slice never ends"
    assert set(flow_ends) <= flow_starts, "a flow ends without a start"

    def path_of(uuid: int) -> list[str]:
        names = []
        while uuid is not None:
            names.append(descriptors[uuid]["name"])
            uuid = descriptors[uuid]["parent"]
        return names[::-1]

    return {
        "slices": slices,
        "flows": len(flow_ends),
        "counters": counters,
        "paths": [path_of(u) for u in descriptors],
    }

"""The few protobuf wire-format primitives the Perfetto writer needs (no protobuf dependency)."""

from __future__ import annotations

import struct

__all__ = ["bytes_field", "double_field", "fixed64_field", "varint", "varint_field"]

_VARINT, _FIXED64, _LEN = 0, 1, 2


def varint(value: int) -> bytes:
    """Unsigned LEB128; negative int64 values take their 64-bit two's complement, as protobuf."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return varint((field << 3) | wire)


def varint_field(field: int, value: int) -> bytes:
    return _key(field, _VARINT) + varint(value)


def fixed64_field(field: int, value: int) -> bytes:
    return _key(field, _FIXED64) + struct.pack("<Q", value & 0xFFFFFFFFFFFFFFFF)


def double_field(field: int, value: float) -> bytes:
    return _key(field, _FIXED64) + struct.pack("<d", value)


def bytes_field(field: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _key(field, _LEN) + varint(len(data)) + data

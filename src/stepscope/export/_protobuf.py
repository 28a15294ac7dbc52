"""The protobuf wire-format primitives the Perfetto writer needs (no protobuf dependency).

Two flavours of the same encoding: one value at a time for the few descriptor packets, and whole
columns at a time (Arrow ``large_binary`` arrays, one message per row) for the slices and
counter samples, so a lane of a million slices costs a few NumPy and Arrow kernels instead of
millions of Python byte concatenations.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "bytes_field",
    "bytes_fields",
    "concat",
    "double_field",
    "double_fields",
    "fixed64_field",
    "fixed64_fields",
    "key",
    "varint",
    "varint_field",
    "varint_fields",
    "varints",
]

_VARINT, _FIXED64, _LEN = 0, 1, 2
_BINARY = pa.large_binary()
_MAX_VARINT_BYTES = 10


def varint(value: int) -> bytes:
    """Unsigned LEB128; negative int64 values take their 64-bit two's complement, as protobuf."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def key(field: int, wire: int) -> bytes:
    """A field's tag: its number and wire type (0 varint, 1 fixed64, 2 length-delimited)."""
    return varint((field << 3) | wire)


def varint_field(field: int, value: int) -> bytes:
    return key(field, _VARINT) + varint(value)


def fixed64_field(field: int, value: int) -> bytes:
    return key(field, _FIXED64) + struct.pack("<Q", value & 0xFFFFFFFFFFFFFFFF)


def double_field(field: int, value: float) -> bytes:
    return key(field, _FIXED64) + struct.pack("<d", value)


def bytes_field(field: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return key(field, _LEN) + varint(len(data)) + data


def _binary(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    count = len(offsets) - 1
    buffers = [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data)]
    return pa.Array.from_buffers(_BINARY, count, buffers)


def _rows(matrix: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Row ``i`` of ``matrix`` cut to its first ``lengths[i]`` bytes, as a binary array."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    keep = np.arange(matrix.shape[1]) < lengths[:, None]
    return _binary(offsets, np.ascontiguousarray(matrix[keep], dtype=np.uint8))


def varints(values: np.ndarray) -> pa.Array:
    """:func:`varint` of every value of an integer column."""
    remaining = np.asarray(values).astype(np.int64).view(np.uint64)
    matrix = np.empty((len(remaining), _MAX_VARINT_BYTES), dtype=np.uint8)
    lengths = np.ones(len(remaining), dtype=np.int64)
    for position in range(_MAX_VARINT_BYTES):
        more = remaining > 0x7F
        matrix[:, position] = (remaining & np.uint64(0x7F)) | (
            more.astype(np.uint64) << np.uint64(7)
        )
        lengths += more
        remaining = remaining >> np.uint64(7)
        if not more.any():
            break
    return _rows(matrix, lengths)


def concat(*parts: pa.Array | bytes) -> pa.Array:
    """Row-wise concatenation of binary columns and constant byte strings (at least one column)."""
    return pc.binary_join_element_wise(
        *(pa.scalar(p, _BINARY) if isinstance(p, bytes) else p.cast(_BINARY) for p in parts),
        pa.scalar(b"", _BINARY),
    )


def _only(column: pa.Array, present: np.ndarray | None) -> pa.Array:
    """``column`` where ``present``, an empty string (the field left out) elsewhere."""
    if present is None:
        return column
    return pc.if_else(pa.array(present), column, pa.scalar(b"", _BINARY))


def varint_fields(field: int, values: np.ndarray, present: np.ndarray | None = None) -> pa.Array:
    return _only(concat(key(field, _VARINT), varints(values)), present)


def fixed64_fields(field: int, values: np.ndarray, present: np.ndarray | None = None) -> pa.Array:
    little = np.ascontiguousarray(np.asarray(values).astype("<i8")).view(np.uint8)
    return _only(_fixed(field, little), present)


def double_fields(field: int, values: np.ndarray) -> pa.Array:
    return _fixed(field, np.ascontiguousarray(np.asarray(values).astype("<f8")).view(np.uint8))


def _fixed(field: int, little_endian: np.ndarray) -> pa.Array:
    tag = np.frombuffer(key(field, _FIXED64), dtype=np.uint8)
    matrix = np.empty((len(little_endian) // 8, len(tag) + 8), dtype=np.uint8)
    matrix[:, : len(tag)] = tag
    matrix[:, len(tag) :] = little_endian.reshape(-1, 8)
    offsets = np.arange(len(matrix) + 1, dtype=np.int64) * matrix.shape[1]
    return _binary(offsets, matrix.reshape(-1))


def bytes_fields(field: int, column: pa.Array, present: np.ndarray | None = None) -> pa.Array:
    """:func:`bytes_field` of every row of a string or binary column."""
    column = column.cast(_BINARY)
    lengths = pc.binary_length(column).to_numpy(zero_copy_only=False)
    return _only(concat(key(field, _LEN), varints(lengths), column), present)

"""The protobuf wire-format primitives the Perfetto writer needs (no protobuf dependency).

Two flavours of the same encoding: one value at a time for the few descriptor packets, and whole
columns at a time (:class:`Messages`: Arrow ``large_binary`` arrays, one message per row) for the
slices and counter samples, so a lane of a million slices costs a few NumPy and Arrow kernels instead of
millions of Python byte concatenations.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "Messages",
    "bytes_field",
    "key",
    "varint",
    "varint_field",
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


def _varint_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`varint` of every value: a byte matrix and each row's length."""
    remaining = np.asarray(values).astype(np.int64).view(np.uint64)
    matrix = np.zeros((len(remaining), _MAX_VARINT_BYTES), dtype=np.uint8)
    lengths = np.ones(len(remaining), dtype=np.int64)
    for position in range(_MAX_VARINT_BYTES):
        more = remaining > 0x7F
        matrix[:, position] = (remaining & np.uint64(0x7F)) | (
            more.astype(np.uint64) << np.uint64(7)
        )
        if not more.any():
            break
        lengths += more
        remaining = remaining >> np.uint64(7)
    return matrix, lengths


class Messages:
    """One message per row, built field by field from columns.

    Every row's length is known as fields are added, so a nested message's length prefix is
    plain arithmetic and the bytes are joined once, in :meth:`encode`. ``present`` rows hold
    the fields; the others stay empty (an optional message left out).
    """

    def __init__(self, count: int, present: np.ndarray | None = None) -> None:
        self.count = count
        self.present = present
        self.parts: list[pa.Array | pa.Scalar] = []
        self.lengths = np.zeros(count, dtype=np.int64)

    def raw(self, data: bytes) -> Messages:
        """Bytes already encoded, the same on every row."""
        if self.present is None:
            self.parts.append(pa.scalar(data, _BINARY))
            self.lengths += len(data)
        else:
            matrix = np.tile(np.frombuffer(data, dtype=np.uint8), (self.count, 1))
            self._add(matrix, np.full(self.count, len(data), dtype=np.int64))
        return self

    def varint(self, field: int, value: int) -> Messages:
        return self.raw(varint_field(field, value))

    def varints(self, field: int, values: np.ndarray) -> Messages:
        """A varint field per row (``values``: one integer per row)."""
        self.raw(key(field, _VARINT))
        self._add(*_varint_rows(values))
        return self

    def fixed64s(self, field: int, values: np.ndarray, dtype: str = "<i8") -> Messages:
        """A fixed64 field per row; ``dtype`` ``<f8`` makes it a double."""
        tag = np.frombuffer(key(field, _FIXED64), dtype=np.uint8)
        little = np.ascontiguousarray(np.asarray(values).astype(dtype)).view(np.uint8)
        matrix = np.empty((self.count, len(tag) + 8), dtype=np.uint8)
        matrix[:, : len(tag)] = tag
        matrix[:, len(tag) :] = little.reshape(-1, 8)
        self._add(matrix, np.full(self.count, matrix.shape[1], dtype=np.int64))
        return self

    def strings(self, field: int, column: pa.Array) -> Messages:
        """A length-delimited field per row, from a string or binary column (empty where the
        message is left out)."""
        column = column.cast(_BINARY)
        lengths = pc.binary_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
        self.raw(key(field, _LEN))
        self._add(*_varint_rows(lengths))
        self.parts.append(column)
        self.lengths += self._kept(lengths)
        return self

    def splice(self, inner: Messages) -> Messages:
        """``inner``'s fields as fields of this message (left out where ``inner`` is)."""
        self.parts.extend(inner.parts)
        self.lengths += inner.lengths
        return self

    def message(self, field: int, inner: Messages) -> Messages:
        """``inner`` as a nested message field (left out on rows where ``inner`` is)."""
        present = self.present if inner.present is None else inner.present
        prefixed = Messages(self.count, present).raw(key(field, _LEN))
        prefixed._add(*_varint_rows(inner.lengths))
        return self.splice(prefixed).splice(inner)

    def encode(self) -> pa.Array:
        """The messages, one ``large_binary`` value per row."""
        if not any(isinstance(part, pa.Array) for part in self.parts):
            self.parts.append(pa.nulls(self.count, _BINARY).fill_null(b""))
        return pc.binary_join_element_wise(*self.parts, pa.scalar(b"", _BINARY))

    def _kept(self, lengths: np.ndarray) -> np.ndarray:
        return lengths if self.present is None else np.where(self.present, lengths, 0)

    def _add(self, matrix: np.ndarray, lengths: np.ndarray) -> None:
        lengths = self._kept(lengths)
        self.parts.append(_rows(matrix, lengths))
        self.lengths += lengths

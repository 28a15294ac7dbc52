"""Event names of a PyTorch profiler (Kineto) trace, escaped as JSON strings.

The profiler writes each event's ``name`` between quotes without escaping it
(pytorch/pytorch#146900, still so in torch 2.13): one name with a quote (a ``record_function`` or
``stepscope.annotate`` name such as ``'load "train"'``, a ``with_stack`` frame of generated code)
makes the whole trace invalid JSON, which TensorBoard, Perfetto and HTA refuse. The trace reader
escapes the names of text that does not parse; the detailed profiling windows escape them as
their traces are saved, so the files stepscope leaves are JSON that every tool reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

import orjson

__all__ = ["escape_names", "iter_escaped_blocks"]

#: What may follow a name's closing quote: the next key, the end of its line or of its object
#: (the first, Kineto's usual, only to be found fast).
_VALUE_END = rb',\n|\s*,\s*"[^"\n]*"\s*:|\s*,?\s*$|\s*\}'
#: A ``"name"`` value as Kineto writes it, unescaped: it ends at the last quote before
#: :data:`_VALUE_END`.
_NAME_VALUE = re.compile(rb'("name"\s*:\s*")(.*?)"(?=' + _VALUE_END + rb")", re.MULTILINE)
#: A name that may need escapes: it holds a quote that does not end it, a backslash or a control
#: character. Found in about a third of the time rewriting every name takes (a trace holds one
#: for each event), so text without such a name is passed over cheaply.
_SUSPECT_NAME = re.compile(
    rb'"name"\s*+:\s*+"[^"\\\x00-\x1f]*+(?:[\\\x00-\x09\x0b-\x1f]|"(?!' + _VALUE_END + rb"))",
    re.MULTILINE,
)
#: A JSON escape, kept, or what a JSON string may not hold as it is: a quote, a backslash
#: that starts no escape, a control character.
_UNESCAPED = re.compile(rb'\\["\\/bfnrtu]|["\\\x00-\x1f]')
#: Bytes of whole lines escaped at a time by :func:`iter_escaped_blocks`.
_BLOCK_BYTES = 1 << 20


def escape_names(text: bytes) -> bytes:
    """``text`` with the quotes and control characters of every ``"name"`` value escaped.

    Names written correctly are kept as they are (their escapes included), so text that is
    already valid JSON comes back unchanged. A name must not span lines: Kineto writes one on
    a line of its own, or on one line with the rest of its event.
    """
    if _SUSPECT_NAME.search(text) is None:
        return text
    return _NAME_VALUE.sub(
        lambda match: match.group(1) + _UNESCAPED.sub(_escape, match.group(2)) + b'"', text
    )


def _escape(match: re.Match[bytes]) -> bytes:
    token = match.group()
    return token if len(token) == 2 else orjson.dumps(token.decode())[1:-1]


def iter_escaped_blocks(source: BinaryIO) -> Iterator[bytes]:
    """The content of a trace file with its names escaped, in blocks of whole lines, so a
    trace of any size is rewritten in little memory."""
    rest = b""
    while block := source.read(_BLOCK_BYTES):
        block = rest + block
        lines_end = block.rfind(b"\n") + 1
        rest = block[lines_end:]
        if lines_end:
            yield escape_names(block[:lines_end])
    if rest:
        yield escape_names(rest)

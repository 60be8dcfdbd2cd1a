"""json.dumps and json.loads of the standard library, without importing `json`.

`json`'s decoder and encoder import `re` (and `re` imports enum, functools and collections):
~10 ms at the start of a process on a loaded node, as long as Python's own start, paid by
every Prolog that asks the node agent (issue 20). The work is done by the same C accelerator
`json` itself uses (`_json`'s scanner and encoder, with json's default settings), so the
text is byte for byte json.dumps's and the values json.loads's; a test compares them on
random input. Only malformed text costs more: `_json` imports json.decoder to raise its
error, which is then a ValueError here as there.
"""

from __future__ import annotations

import _json

_WHITESPACE = " \t\n\r"  # json.decoder.WHITESPACE's characters
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _DecoderSettings:
    """What _json's scanner reads from a json.JSONDecoder(): its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _no_default(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# typeshed names a JSONDecoder; the scanner reads only the six attributes above.
_scan = _json.make_scanner(_DecoderSettings())  # type: ignore[arg-type]
# json.dumps' defaults: no markers (check_circular only guards against cycles, which our
# messages cannot have), ensure_ascii, ", " and ": ", keys as given, allow_nan.
_encode = _json.make_encoder(
    None, _no_default, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True
)


def dumps(value: object) -> str:
    """json.dumps(value) with its default settings."""
    return "".join(_encode(value, 0))


def loads(text: str) -> object:
    """json.loads(text) for a str; ValueError for anything that is not one JSON value."""
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration:
        raise ValueError("Expecting value") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError("Extra data")
    return value

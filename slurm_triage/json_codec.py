"""json.dumps and json.loads of the standard library for the per-job programs, without
importing `json` while all goes well.

`json`'s package imports its decoder, scanner and encoder, which compile six regexes, for
every process that writes one log line or one record: every wrapped rank, which also reads
its own record back to check it (issue 20). The work is done by the C accelerator `json`
itself uses, set as json.JSONEncoder and json.JSONDecoder set it for the same arguments:
`_json.make_encoder` (with `_json.encode_basestring_ascii` or `_json.encode_basestring`)
writes json.dumps's text byte for byte, errors included; `_json.make_scanner` reads what
json.loads reads, and anything it does not read whole (malformed text, a BOM, a hook or a
limit that raises) is read again by json.loads itself, so every error is json's own, with
its message. tests/unit/test_json_codec.py compares both with json on random input.
"""

from __future__ import annotations

import _json

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_WHITESPACE = " \t\n\r"  # json.decoder.WHITESPACE's characters
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


def _no_default(value: object) -> object:
    """json.JSONEncoder.default: a value json cannot write."""
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def dumps_with(
    *,
    ensure_ascii: bool = True,
    separators: tuple[str, str] = (", ", ": "),
    allow_nan: bool = True,
    default: Callable[[Any], object] | None = None,
) -> Callable[[object], str]:
    """`lambda value: json.dumps(value, ensure_ascii=..., separators=..., allow_nan=...,
    default=...)`: the other arguments at json's defaults (check_circular, no indent, keys
    neither sorted nor skipped)."""
    item_separator, key_separator = separators
    escape = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
    on_other = _no_default if default is None else default

    def dumps(value: object) -> str:
        if isinstance(value, str):
            return escape(value)  # type: ignore[no-any-return]
        # A new encoder per call, as json's: its markers (check_circular) are per value.
        encode = _json.make_encoder(
            {},
            on_other,
            escape,
            None,
            key_separator,
            item_separator,
            False,
            False,
            allow_nan,
        )
        return "".join(encode(value, 0))

    return dumps


class _DecoderSettings:
    """What _json's scanner reads from a json.JSONDecoder: its settings for these hooks."""

    strict = True
    object_hook = None
    parse_float = float
    parse_int = int

    def __init__(
        self,
        object_pairs_hook: Callable[[list[tuple[str, Any]]], object] | None,
        parse_constant: Callable[[str], object] | None,
    ) -> None:
        self.object_pairs_hook = object_pairs_hook
        self.parse_constant = parse_constant or _CONSTANTS.__getitem__


def loads_with(
    *,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], object] | None = None,
    parse_constant: Callable[[str], object] | None = None,
) -> Callable[[str], Any]:
    """`lambda text: json.loads(text, object_pairs_hook=..., parse_constant=...)` for a str,
    the other arguments at json's defaults."""
    # typeshed names a JSONDecoder; the scanner reads only the six attributes above.
    scan = _json.make_scanner(_DecoderSettings(object_pairs_hook, parse_constant))  # type: ignore[arg-type]

    def loads(text: str) -> Any:
        # (A BOM, which json refuses, is no whitespace: the scanner stops at it.)
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = scan(text, start)
        except Exception:  # noqa: BLE001 (json.loads below raises json's own error)
            pass
        else:
            if not text[end:].strip(_WHITESPACE):
                return value
        import json  # what the scanner did not read whole: json's error, with its message

        return json.loads(text, object_pairs_hook=object_pairs_hook, parse_constant=parse_constant)

    return loads

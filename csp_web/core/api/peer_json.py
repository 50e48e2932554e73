"""JSON a peer sent (a search backend, an API target, a model API, a scraping service): the one
way the project decodes it.

    try:
        document = peer_json.loads(result.body)
    except peer_json.NotJson:
        ...  # the caller's "bad response" case

``json.loads`` raises more than ValueError on hostile bytes: ``[`` * 100,000 overflows its C
scanner's recursion guard (RecursionError), and a document nested just short of that still
breaks the first recursive walk of it (a render, a ``json.dumps``) that starts deeper in the
stack. So nesting is measured first, without parsing (``fields.json_depth``), and refused past
``MAX_JSON_DEPTH`` (128, serde_json's default, as a client's JSON field); every failure is
NotJson, a ValueError, so a caller's ``except ValueError`` keeps its meaning.
"""

from __future__ import annotations

import json
from typing import Any

from csp_web.core.api.fields import MAX_JSON_DEPTH, json_depth


class NotJson(ValueError):
    """Bytes that are not a JSON document we read: not JSON, not in a JSON encoding, or
    nested past ``MAX_JSON_DEPTH``."""


def loads(data: bytes | str) -> Any:
    """The JSON value of ``data`` (bytes in UTF-8, -16 or -32, as ``json.loads`` detects
    them). Raises NotJson for anything else, whatever ``json`` would have raised."""
    try:
        text = (
            data
            if isinstance(data, str)
            else data.decode(json.detect_encoding(data), "surrogatepass")
        )
        if json_depth(text) > MAX_JSON_DEPTH:
            raise NotJson(f"nested deeper than {MAX_JSON_DEPTH} levels")
        return json.loads(text)
    except NotJson:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, ...
        raise NotJson(type(exc).__name__) from None

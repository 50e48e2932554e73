"""A document's own fields: Dublin Core and meta elements of its properties part."""

from __future__ import annotations

from ._xml import local, optional_xml


def properties(xml: bytes | None, kind: str) -> dict[str, str]:
    """The Dublin Core and meta fields of a core-properties part, by local name (the first
    non-empty of each), or nothing when the part is missing or damaged (``optional_xml``)."""
    root = optional_xml(xml, kind)
    if root is None:
        return {}
    found: dict[str, str] = {}
    for element in root.iter():
        if isinstance(element.tag, str) and element.text and element.text.strip():
            found.setdefault(local(element.tag), " ".join(element.text.split()))
    return found

"""Whether a pick names itself the page's content ("article__content").

The pick Readability makes stays the content when its class or id says so: it is the
article, not one section of a page or one item of a run (`_passes`' widen step asks).
"""

from __future__ import annotations

from ._dom import Elem
from ._hints import LIKELY


def names_content(content: list[Elem]) -> bool:
    """True when an element's class/id names it the page's content ("article__content")."""
    return any(LIKELY.search(elem.hint) for elem in content)

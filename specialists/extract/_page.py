"""The page model the extraction passes share: one typed record of named parts.

Each pass (`_passes.PASSES`) declares which parts it reads and which it writes; a part is
written by the passes that declare it and by no one else. What a page declares about itself
is read once into `Claims`, so no pass re-derives it and no flag is threaded by hand.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from selectolax.lexbor import LexborHTMLParser

from ._dom import Elem
from ._kind import Declared, Layout, declares_article, declares_product, declares_thread

NO_LAYOUT = Layout(listing=False, widened=False, run_items=0, run_link_density=0.0, prose_chars=0)
NO_DECLARATION = Declared("", Counter())


@dataclass(frozen=True)
class Claims:
    """What the page's og:type and schema.org types say it is (see `_kind`).

    `article` is False on a page that also declares a discussion: forum engines give a
    thread og:type article, and its posts are then its content.
    """

    article: bool
    thread: bool
    product: bool

    @classmethod
    def of(cls, declared: Declared) -> Claims:
        """The claims of a page's declared types."""
        thread = declares_thread(declared)
        return cls(
            article=declares_article(declared) and not thread,
            thread=thread,
            product=declares_product(declared),
        )


@dataclass(eq=False)
class Page:
    """One page being extracted. Parts, in the order the passes fill them:

    - `url`, `tree`: the input (`tree` is parsed, then narrowed to what a reader sees);
    - `title`, `description`, `declared`, `claims`: what the page says about itself;
    - `root`, `order`: the `Elem` mirror of the body and its elements, parents first
      (`root` stays None for a document without a body: the content passes then skip);
    - `run`: the parent of the largest run of similar siblings (`_repeat`);
    - `picked`: Readability's pick; `content`: what is read in the end;
    - `listing`: the content is a list of items whose links are content;
    - `layout`: the shape found, for the page-type hint;
    - `skip`: id()s of elements left out of the Markdown;
    - `blocks`: the Markdown blocks; `body`: the content's Markdown; `words` its word count;
    - `markdown`: the `# Title` line and `body`; `kind`: the page-type hint.
    """

    url: str | None
    tree: LexborHTMLParser
    title: str | None = None
    description: str | None = None
    declared: Declared = NO_DECLARATION
    claims: Claims = Claims(article=False, thread=False, product=False)
    root: Elem | None = None
    order: list[Elem] = field(default_factory=list)
    run: Elem | None = None
    picked: list[Elem] = field(default_factory=list)
    content: list[Elem] = field(default_factory=list)
    listing: bool = False
    layout: Layout = NO_LAYOUT
    skip: frozenset[int] = frozenset()
    blocks: list[str] = field(default_factory=list)
    body: str = ""
    words: int = 0
    markdown: str = ""
    kind: str | None = None

    def mirror(self) -> Elem:
        """The mirror's root; only the content passes call it, which run when there is one."""
        if self.root is None:
            raise RuntimeError("a content pass ran on a page without a body")
        return self.root

"""The one registry of the extractor's rules, and the switch that turns any of them off.

Every heuristic that decides what is content is declared here as a `Rule` with a name and
a one-line meaning, and its code asks `on(RULE)` at the point where the rule would change a
decision, after its condition held (`condition and on(RULE)`). So:

- `switched_off(names)` runs extraction with those rules off (the benchmark's ablation
  mode), through this registry and nothing else: a rule whose name is not here is an error;
- `census()` collects the rules that applied on one page: a rule that did not apply cannot
  change that page's output, so an ablation need not re-run the page without it.

The switches live in a context variable, so a switched-off run in one task or thread never
leaks into another; caches over class names are keyed by the rules off (`cached`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Rule:
    """One named heuristic: `stage` is the pass whose decisions it changes."""

    name: str
    stage: str
    what: str


@dataclass(frozen=True)
class _State:
    off: frozenset[str]
    fired: set[str] | None  # the census being taken, if any


_ALL_ON = _State(frozenset(), None)
_STATE: ContextVar[_State] = ContextVar("extract_rules", default=_ALL_ON)
_CACHE_CLEARS: list[Callable[[], None]] = []

# -- the page as a reader sees it (`_shell`, `_passes`)
NOSCRIPT_SHELL = Rule("noscript-shell", "narrow", "a script shell is read from its <noscript>")
SHELL_DESCRIPTION = Rule(
    "shell-description", "shell-description", "a body shorter than the description is replaced"
)
# -- mirroring (`_dom`, `_attrs`, `_runs`, `_panels`)
HIDDEN_ELEMENTS = Rule("hidden-elements", "mirror", "hidden elements are left out")
HIDDEN_PAGE = Rule("hidden-page", "mirror", "veto: a hidden element holding the page is kept")
COLLAPSIBLE_PANELS = Rule(
    "collapsible-panels", "mirror", "veto: a long hidden panel named collapsible is kept"
)
ARIA_HIDDEN_SHORT = Rule("aria-hidden-short", "mirror", "short aria-hidden elements are dropped")
STREAMED_SEGMENTS = Rule(
    "streamed-segments", "mirror", 'veto: React\'s hidden id="S:n" segments are shown'
)
DETAILS_PANELS = Rule(
    "details-panels", "mirror", "a product page's panels of details are kept whole"
)
CHROME_NAMES = Rule("chrome-names", "mirror", "elements named like chrome are flagged or dropped")
SMALL_CHROME = Rule("small-chrome", "mirror", "small chrome-named elements are not mirrored")
ALWAYS_CHROME = Rule("always-chrome", "mirror", "consent dialogs are dropped whatever their size")
LINK_CARDS = Rule("link-cards", "mirror", "veto: parts of a link card are never chrome")
CODE_TOKENS = Rule("code-tokens", "mirror", "veto: classes in <pre>/<code> name tokens, not chrome")
ITEM_RUNS = Rule("item-runs", "mirror", "veto: chrome words naming the page's items name content")
HOLDER_ITEMS = Rule("holder-items", "mirror", "veto: item-named runs inside a thread are posts")
ARTICLE_COMMENTS = Rule(
    "article-comments", "mirror", "an article's comments stay chrome unless nearly all the page"
)
TAB_PANELS = Rule("tab-panels", "mirror", "veto: a tablist holding its panels is content")
NEVER_CHROME_TAGS = Rule("never-chrome-tags", "mirror", "veto: body, main, article, a, tr, td")
CHROME_ROLES = Rule("chrome-roles", "mirror", "ARIA roles of chrome (navigation, dialog...)")
ACCORDION_ROLE = Rule("accordion-role", "mirror", "veto: a multiselectable tablist is content")
LIKELY_WORDS = Rule("likely-words", "mirror", "veto: an article word in the class list")
HIDING_CLASSES = Rule("hiding-classes", "mirror", 'classes that hide ("d-none") name chrome')
SHOWING_PREFIXES = Rule("showing-prefixes", "mirror", 'veto: "d-md-block" shows a hidden class')
ARBITRARY_VALUES = Rule("arbitrary-values", "mirror", "a utility class's [value] names nothing")
UTILITY_VARIANTS = Rule("utility-variants", "mirror", '"md:sidebar" is judged after its colon')
GENERATED_TAILS = Rule("generated-tails", "mirror", 'letters after a digit ("9ad") are noise')
HOOK_PIECES = Rule("hook-pieces", "mirror", 'veto: "js-" and "is-" tokens name nothing')
CONTENT_HEADS = Rule("content-heads", "mirror", 'veto: "comment-body" names content')
HERO_PIECES = Rule("hero-pieces", "mirror", 'veto: a "hero" token is a lead section')
MODIFIER_PIECES = Rule("modifier-pieces", "mirror", 'veto: pieces after "has-" name a feature')
TAXONOMY_SLUGS = Rule("taxonomy-slugs", "mirror", 'veto: "tag-sidebar" is a term\'s slug')
CHROME_PAIRS = Rule("chrome-pairs", "mirror", 'two pieces read as one word ("side-bar")')
CHROME_PIECES = Rule("chrome-pieces", "mirror", 'short whole pieces name chrome ("ad", "nav")')
CHROME_PREFIXES = Rule("chrome-prefixes", "mirror", 'piece starts name chrome ("print", "skip")')
GENRE_PIECES = Rule("genre-pieces", "mirror", 'veto: "commentary", "hero..." pieces')
STATE_PIECES = Rule("state-pieces", "mirror", 'veto: "promoted" is a state, not a promotion')
# -- pruning and selection (`_prune`, `_score`, `_repeat`, `_page_sections`, `_join`)
CHROME_PRUNE = Rule("chrome-prune", "prune", "flagged chrome with little prose is detached")
NEGATIVE_WEIGHT = Rule("negative-weight", "select", "Readability's -25 for a chrome class")
POSITIVE_WEIGHT = Rule("positive-weight", "select", "Readability's +25 for an article class")
RIVAL_ANCESTOR = Rule("rival-ancestor", "select", "three near-equal rivals pick their ancestor")
CLIMB = Rule("climb", "select", "a scored ancestor outscoring the path wins")
SIBLINGS = Rule("siblings", "select", "siblings that score or read like prose join the pick")
RUN_WIDEN = Rule("run-widen", "widen", "a run of similar items replaces or joins the pick")
NAMED_PICK = Rule("named-pick", "widen", "veto: a pick whose class names content is kept")
SPREAD = Rule("spread", "spread", "a small pick spreads to the ancestor reading like content")
JOIN_LEAD = Rule("join-lead", "join-lead", "a lead paragraph right before the pick opens it")
THREAD_JOIN = Rule("thread-join", "join-items", "a discussion's posts join the first post")
KEEP_MOST = Rule("keep-most", "keep-most", "content missing most of the page reads more")
# -- what is left out of the content (`_clean`, `_sections`, `_carousel`, `_markdown`)
SKIP_HEADER = Rule("skip-header", "find-skips", "an article's <header> is left out")
HEADER_LEADS = Rule("header-leads", "find-skips", "veto: a lead paragraph in the <header> is kept")
SKIP_DATELINE = Rule("skip-dateline", "find-skips", "a <time> alone is a dateline")
SKIP_MEMBER_STATS = Rule("skip-member-stats", "find-skips", "forum members' statistics")
SKIP_LABELS = Rule("skip-labels", "find-skips", 'interface labels ("Share this", "Advertisement")')
SKIP_TEASER_CARDS = Rule("skip-teaser-cards", "find-skips", "a link wrapping blocks is a teaser")
SKIP_H1 = Rule("skip-h1", "find-skips", "an <h1> repeats the `# Title` line")
SKIP_LINK_HEADINGS = Rule("skip-link-headings", "find-skips", "link-heavy headings")
CARD_TITLES = Rule("card-titles", "find-skips", "veto: a linked heading over its text is kept")
SKIP_TITLE_REPEAT = Rule("skip-title-repeat", "find-skips", "headings repeating the title")
SKIP_LINK_LISTS = Rule("skip-link-lists", "find-skips", "lists of three or more links")
INTRODUCED_LISTS = Rule("introduced-lists", "find-skips", 'veto: a list after "...:" is kept')
SKIP_LINK_PARAGRAPHS = Rule("skip-link-paragraphs", "find-skips", "link-heavy paragraphs")
LONE_LINKS = Rule("lone-links", "find-skips", "veto: a <p> that is one long link after prose")
SKIP_CAROUSELS = Rule("skip-carousels", "find-skips", "a product page's carousels of others")
SKIP_RECOMMENDATIONS = Rule(
    "skip-recommendations", "find-skips", 'sections under "Related", "References"...'
)
REPEATED_PARAGRAPHS = Rule("repeated-paragraphs", "render", "a long paragraph is written once")
DROP_REPEATS = Rule("drop-repeats", "drop-repeats", "a short label repeated in a row reads once")
TRIM_TAIL = Rule("trim-tail", "trim-tail", "trailing headings and sign-up lines are cut")
TAIL_TITLES = Rule("tail-titles", "trim-tail", "veto: four or more tail headings are titles")
KEEP_TEXT = Rule("keep-text", "keep-text", "cleaning never empties content that has text")

RULES: dict[str, Rule] = {rule.name: rule for rule in globals().values() if isinstance(rule, Rule)}


def on(rule: Rule) -> bool:
    """True unless `rule` is switched off; notes in a census that the rule applied."""
    state = _STATE.get()
    if state.fired is not None:
        state.fired.add(rule.name)
    return rule.name not in state.off


def rules_off() -> frozenset[str]:
    """The names of the rules switched off in this context (empty outside an ablation)."""
    return _STATE.get().off


@contextmanager
def switched_off(names: Iterable[str]) -> Iterator[None]:
    """Extract with the rules `names` off inside the block.

    Raises ValueError naming any name that is not a registered rule.
    """
    off = frozenset(names)
    unknown = sorted(off - RULES.keys())
    if unknown:
        raise ValueError(f"unknown extraction rules: {', '.join(unknown)}")
    state = _STATE.get()
    token = _STATE.set(_State(state.off | off, state.fired))
    try:
        yield
    finally:
        _STATE.reset(token)


@contextmanager
def census() -> Iterator[set[str]]:
    """Collect the names of the rules that apply inside the block (into the set yielded).

    The class-name caches are cleared first, so a rule applied on an earlier page and
    cached since is seen again.
    """
    for clear in _CACHE_CLEARS:
        clear()
    fired: set[str] = set()
    token = _STATE.set(_State(_STATE.get().off, fired))
    try:
        yield fired
    finally:
        _STATE.reset(token)


def cached(maxsize: int) -> Callable[[Callable[[str], T]], Callable[[str], T]]:
    """`functools.lru_cache` for a function of one string whose result depends on the
    rules: the rules off are part of the key, and `census` can clear it."""

    def wrap(function: Callable[[str], T]) -> Callable[[str], T]:
        @functools.lru_cache(maxsize=maxsize)
        def keyed(off: frozenset[str], text: str) -> T:
            return function(text)

        _CACHE_CLEARS.append(keyed.cache_clear)

        @functools.wraps(function)
        def call(text: str) -> T:
            return keyed(_STATE.get().off, text)

        return call

    return wrap

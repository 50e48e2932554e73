"""Tag sets and class/id patterns that hint at what an element holds.

The patterns descend from Mozilla Readability's `REGEXPS` (unlikelyCandidates, positive,
negative) and trafilatura's boilerplate XPaths, trimmed to words that recur across sites.
They are general web conventions, never the class names of one site.
"""

from __future__ import annotations

import re

# Never content: executable, presentational, interactive or out-of-flow elements.
DROP_TAGS = frozenset(
    {
        "script", "style", "noscript", "template", "svg", "math", "canvas", "iframe",
        "object", "embed", "video", "audio", "source", "track", "map", "area", "img",
        "picture", "button", "input", "select", "option", "optgroup", "textarea",
        "label", "datalist", "output", "meter", "progress", "dialog", "head", "link",
        "meta", "title", "base", "nav", "aside", "footer", "menu", "param",
    }
)  # fmt: skip

# Block-level elements: they end the paragraph that surrounds them.
BLOCK_TAGS = frozenset(
    {
        "address", "article", "blockquote", "body", "center", "dd", "details", "dialog",
        "dir", "div", "dl", "dt", "fieldset", "figcaption", "figure", "form", "h1", "h2",
        "h3", "h4", "h5", "h6", "header", "hgroup", "hr", "html", "li", "main", "ol", "p",
        "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr",
        "ul", "caption", "frameset", "frame", "legend", "colgroup", "col",
    }
)  # fmt: skip

HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})

# Readability's DEFAULT_TAGS_TO_SCORE: prose paragraphs (td, li, dd, blockquote only when
# they hold no block of their own, so nested paragraphs are not counted twice).
PARAGRAPH_TAGS = frozenset({"p", "pre", "td", "blockquote", "li", "dd"})

# Class/id words of chrome around an article: comments, sharing, promotion, navigation.
# Matched against the pieces of each class/id token (split at "-", "_" and the like, digits
# dropped), as the whole piece or its start or end ("comments", "sharebar", "topmenu"), never
# inside one ("seofootercopy"). See `_attrs.names_chrome` for the context that vetoes a match.
CHROME_WORDS = (
    "comment", "disqus", "discuss", "respond", "replies", "share", "sharing", "sociable",
    "related", "recommend", "popular", "trending", "mostread", "newsletter",
    "subscri", "signup", "promo", "sponsor", "advert", "banner", "cookie",
    "consent", "gdpr", "footer", "sidebar", "breadcrumb", "pagination",
    "pager", "menu", "navbar", "masthead", "byline", "author", "dateline", "timestamp",
    "caption", "credit", "taglist", "keywords", "topics", "toolbar",
    "modal", "popup", "overlay", "newsfeed", "outbrain", "taboola", "readmore",
    "teaser", "sronly", "rollover", "tooltip", "hovercard", "popover",
    "readtime", "readingtime", "disclaimer", "signature",
)  # fmt: skip
# Chrome words that can also name a page's own items: the posts of a thread ("comment",
# "replies", "discussion"), the cards of a listing ("teaser", "subscription-eligible", a
# card's "caption" under its picture). A run of them holding most of the page is its content
# (see `_runs`); menus never are.
ITEM_WORDS = (
    "comment", "discuss", "repl", "respond", "teaser", "subscri", "related", "author", "caption",
)  # fmt: skip
THREAD_WORDS = ("comment", "discuss", "repl", "respond")  # ...never on a declared article
# Chrome words of consent and cookie dialogs: their vendor lists and purposes can hold
# more prose than the page, so their size never makes them content.
ALWAYS_CHROME_WORDS = ("cookie", "consent", "gdpr")
# Names of two pieces that read as one chrome word ("side-bar", "read-more", "sr-only").
CHROME_PAIRS = frozenset(
    {
        "side bar", "sign up", "most read", "tag list", "tag cloud", "tags list", "tool bar",
        "read more", "more stories",
        "next post", "prev post", "post nav", "sr only", "visually hidden", "screen reader",
        "read time", "reading time",
    }
)  # fmt: skip
# Short words that only count as a whole piece of a name ("ad-slot", not "head").
CHROME_PIECES = frozenset({"ad", "ads", "nav", "tag", "tags", "meta", "rss"})
CHROME_PREFIXES = ("print", "skip")  # at the start of a piece: "printfriendly"
# Token starts that make a class a script hook or a state, never a name of what it holds
# ("js-comment-entry" marks posts for a script, "is-sticky" a state).
HOOK_PIECES = frozenset({"js", "is"})
# Pieces after which a class names a feature of the element, not the element itself:
# "summary-item-has-author" is an item that shows its author; "hide-read-more-ad" a block
# that hides an ad (a utility class, as "hide-for-small"), not an ad.
MODIFIER_PIECES = frozenset({"has", "with", "no", "without", "hide"})
# Pieces that start like a chrome word but name a state of the element: a CMS marks an
# article promoted to its front page "node--promoted"; the element is the article itself.
STATE_PIECES = frozenset({"promoted"})
# Taxonomy pieces that, followed by more pieces, start a term's slug: WordPress marks a post
# or product with its terms ("tag-sidebar", "product_tag-reusable-cups", "category-ads"),
# so what follows names a topic the author chose, never what the element is.
TAXONOMY_PIECES = frozenset({"tag", "tags", "category", "cat", "term"})
# A class whose last piece names content is the content of the chrome word before it:
# "comment-body", "forum-post-content", "topic-entry".
CONTENT_HEADS = frozenset({"body", "content", "entry", "text", "message", "post"})
HIDING_CLASSES = frozenset({"hidden", "is-hidden", "d-none", "invisible"})
# ...unless a responsive class shows it on some screens ("d-none d-md-block").
SHOWING_PREFIXES = ("d-sm-", "d-md-", "d-lg-", "d-xl-", "visible-")
# Elements never judged by their class: the page frame, the article, links, table parts.
NEVER_CHROME = frozenset({"html", "body", "main", "article", "a", "tbody", "tr", "td"})


# Class/id words of a collapsible panel (an accordion's answer, a tab pane, a "read more"
# expander): hidden by a style until a reader opens it, it is the page's content.
COLLAPSIBLE = re.compile(
    r"accordion|collaps|expand|toggle|tab-?pane|tabpanel|tab-?content|panel|faq|answer"
)

# Class/id words of the article itself; they veto a chrome name on the same element.
LIKELY = re.compile(r"article|body|column|content|main|shadow")

# Readability's REGEXPS.positive and .negative, for its +25/-25 class weight.
POSITIVE = re.compile(
    r"article|body|content|entry|hentry|h-entry|main|page|pagination|post|text|blog|story"
)
NEGATIVE = re.compile(
    r"-ad-|hidden|^hid$| hid$| hid |^hid |banner|combx|comment|com-|contact|footer|gdpr|"
    r"masthead|media|meta|outbrain|promo|related|scroll|share|shoutbox|sidebar|skyscraper|"
    r"sponsor|shopping|tags|widget",
)

# ARIA roles of page chrome (Readability's UNLIKELY_ROLES).
UNLIKELY_ROLES = frozenset(
    {"menu", "menubar", "complementary", "navigation", "alert", "alertdialog", "dialog",
     "banner", "contentinfo", "search", "toolbar", "tablist"}
)  # fmt: skip

# Whole texts of interface labels that sit between paragraphs (lower-cased, words only).
BOILERPLATE = frozenset(
    {
        "ad", "ads", "advert", "advertisement", "advertising", "sponsored", "sponsored content",
        "comments", "comment", "leave a comment", "leave a reply", "share", "share this",
        "share this article", "share this story", "share on facebook", "share on twitter",
        "tweet", "print", "email", "related", "related articles", "related stories",
        "related posts", "related content", "read more", "continue reading", "read next",
        "more stories", "more from", "you may also like", "you might also like",
        "recommended", "recommended for you", "most popular", "most read", "trending",
        "trending now", "story continues below", "story continues below advertisement",
        "article continues below", "article continues below advertisement",
        "advertisement continue reading below", "continue reading below",
        "scroll to continue with content", "this slideshow requires javascript",
        "enlarge image", "enlarge this image", "toggle caption", "hide caption",
        "image", "photo", "video", "loading", "play video", "watch", "skip ad", "close",
        "tags", "topics", "see also", "sign up", "subscribe", "newsletter",
        "write a review", "verified buyer", "skip to product information",
        "reply with quote", "report post", "permalink", "top", "back to top",
        "in stock", "add to cart", "add to bag", "add to basket", "add to wishlist",
        "add to wish list", "buy now", "quantity", "calculate shipping", "select a size",
        "select size", "size guide",
    }
)  # fmt: skip
BOILERPLATE_MAX_CHARS = max(map(len, BOILERPLATE)) + 4  # the longest label, with its punctuation

# Sign-up, follow-us and tip-line sentences that trail articles (English only).
PROMO = re.compile(
    r"\b(subscribe|newsletters?|sign up|follow (us|him|her|them)|have a tip|news tip|"
    r"click here|share it|let us know|all rights reserved)\b",
    re.IGNORECASE,
)

# A price: a currency sign before an amount, or a currency sign or code after it ("$99",
# "€ 1.299,00", "76 USD", "99 kr"). Product cards show one; so does each item of a shop's grid.
PRICE = re.compile(
    r"[$€£¥₹]\s?\d|\d(?:[\d,.]*\d)?\s?(?:[€£]|kr\b|zł|Kč|(?:USD|EUR|GBP|CHF|CAD|AUD|JPY)\b)"
)

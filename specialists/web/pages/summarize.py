"""Bullet summaries: extractive and deterministic by default, an OpenAI-compatible model when
one is configured (seed 001's web_summarize: "Uses LLM if enabled, otherwise heuristic").

The extractive method splits sentences (abbreviations, initials and decimals do not end one),
scores each by the normalised frequency of its content words (stopwords removed) with a bonus
for coming early, picks the best that are not near-duplicates of one already picked, and emits
them in document order, each cut to ``BULLET_CHARS``. Same text, same bullets.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from csp_web.core.api import budget, peer_json
from csp_web.core.api.deadlines import work_deadline
from csp_web.core.api.errors import OpError
from csp_web.infra.workers import WorkerPool
from csp_web.net import GuardedClient, never_sent
from specialists.web.config import SummarizeConfig

log = logging.getLogger(__name__)

Method = Literal["extractive", "llm"]

BULLET_CHARS = 300  # seed 000: SNIPPET <max_300_chars_summary>; a bullet is held to the same
MIN_SENTENCE_WORDS = 4  # shorter runs are captions and buttons ("Share this."), not points
DUPLICATE_JACCARD = 0.6  # content-word overlap above which two sentences make one point
MAX_WORD_CHARS = 40  # how far back from a period to look for an abbreviation
POSITION_BONUS = 0.5  # the first sentence scores up to 1.5x; news puts the point up front
PARAGRAPH_LEAD_BONUS = 0.1  # a paragraph's first sentence usually states its topic


def _word_list(text: str) -> list[str]:
    return text.split()


# The model names each bullet's support; the daemon looks for it in the text and never
# takes the model's word that it is there (issue 29).
# The answer's max_tokens under an llm_tokens budget (reserved from it, or what is left when
# less): BULLET_CHARS at about 4 characters a token is 75 tokens a bullet, and max_bullets is
# at most 20, so 2048 holds a whole answer with room for its JSON.
BUDGETED_MAX_TOKENS = 2048
LLM_PROMPT = (
    "Summarize the user's text as at most {n} short bullet points, using only facts from the "
    'text. Answer with JSON only: {{"bullets": [{{"text": "<one point>", "quote": "<the '
    'words of the text it rests on, copied exactly>"}}]}}'
)

_STOPWORDS = frozenset(
    _word_list(
        """a about above after again against all also am an and any are as at be because been
        before being below between both but by can could did do does doing down during each
        few for from further had has have having he her here hers herself him himself his how
        i if in into is it its itself just me more most my myself no nor not now of off on once
        only or other our ours ourselves out over own same she should so some such than that
        the their theirs them themselves then there these they this those through to too under
        until up us very was we were what when where which while who whom why will with would
        you your yours yourself yourselves said says one two new"""
    )
)
# Words that end with a period without ending the sentence (lower-case, without the period).
_ABBREVIATIONS = frozenset(
    _word_list(
        """mr mrs ms dr prof sr jr st mt vs etc al approx inc ltd co corp dept est fig figs no
        nos vol vols pp p ed eds rev gen gov sen rep col lt sgt capt cmdr adm jan feb mar apr
        jun jul aug sep sept oct nov dec ave blvd rd e.g i.e cf ca op cit viz"""
    )
)
_BOUNDARY = re.compile(r"[.!?…]+[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9À-ÖØ-Þ])|[。！？]+")
_LAST_WORD = re.compile(r"(\S+)$")
_DOTTED = re.compile(r"(?:\w\.)+\w")  # U.S, e.g: dotted abbreviations
_WORDS = re.compile(r"\w+")
_BLOCK_SPLIT = re.compile(r"\n\s*\n")
# No pattern scans past a bracket or parenthesis that could start another match: linear on a
# page of ``[[[[`` (once 12 s of CPU time for 40,000 of them, the GIL held throughout).
_IMAGE = re.compile(r"!\[[^\[\]]*\]\([^()]*\)")
_LINK = re.compile(r"\[([^\[\]]*)\]\([^()]*\)")
_LIST_MARKER = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_EMPHASIS = re.compile(r"\*\*|__|`")
_LLM_BULLET = re.compile(r"^\s*(?:[-*+•–]|\d{1,3}[.)])\s+(.*)$")
_OPENING_FENCE = re.compile(r"```(?:json)?\s*")  # matched at the start only: linear
_BULLETS_OPENING = re.compile(r'\{\s*"bullets"\s*:\s*\[\s*')
_DECODER = json.JSONDecoder()
_SURROGATE = re.compile(r"[\ud800-\udfff]")  # a model's JSON may escape one alone: no UTF-8


@dataclass(frozen=True)
class Summary:
    """Bullets and, for each, the words of the text it claims to rest on (``quotes``), to be
    located before they are shown."""

    bullets: tuple[str, ...]
    method: Method
    quotes: tuple[str, ...]


@dataclass(frozen=True)
class _Sentence:
    index: int
    text: str
    words: tuple[str, ...]  # content words, lower-case
    paragraph_lead: bool


def summarize_extractive(text: str, max_bullets: int) -> tuple[str, ...]:
    """Up to ``max_bullets`` sentences of ``text`` in document order, none over BULLET_CHARS.
    Deterministic; empty only when ``text`` holds no words."""
    sentences = split_sentences(text)
    eligible = [s for s in sentences if len(_WORDS.findall(s.text)) >= MIN_SENTENCE_WORDS]
    candidates = [s for s in eligible if s.words] or [s for s in sentences if s.words]
    ranked = sorted(candidates, key=_scorer(candidates, len(sentences)))
    chosen: list[_Sentence] = []
    for sentence in ranked:
        if len(chosen) == max_bullets:
            break
        if not any(_near_duplicate(sentence, other) for other in chosen):
            chosen.append(sentence)
    chosen.sort(key=lambda s: s.index)
    return tuple(clip(s.text) for s in chosen)


def split_sentences(text: str) -> list[_Sentence]:
    """The sentences of ``text`` (plain or Markdown) with their content words; headings, code
    and table rows are skipped, and each list item stands alone."""
    out: list[_Sentence] = []
    for block in _blocks(text):
        for position, sentence in enumerate(_split_block(block)):
            words = tuple(w for w in _WORDS.findall(sentence.lower()) if _is_content(w))
            out.append(_Sentence(len(out), sentence, words, position == 0))
    return out


def _blocks(text: str) -> list[str]:
    """Paragraphs as single lines, Markdown markup removed."""
    text = _LINK.sub(r"\1", _IMAGE.sub("", text))
    blocks: list[str] = []
    fenced = False
    for raw in _BLOCK_SPLIT.split(text.replace("\r\n", "\n")):
        lines: list[str] = []
        for line in raw.split("\n"):
            stripped = line.strip()
            if stripped.startswith("```"):
                fenced = not fenced
                continue
            if fenced or stripped.startswith(("#", "|")) or not stripped:
                continue
            if _LIST_MARKER.match(line) and lines:  # a list item starts its own block
                blocks.append(" ".join(lines))
                lines = []
            lines.append(_EMPHASIS.sub("", _LIST_MARKER.sub("", stripped.lstrip("> "))))
        if lines:
            blocks.append(" ".join(lines))
    return blocks


def _split_block(block: str) -> list[str]:
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(block):
        before = block[max(start, match.start() - MAX_WORD_CHARS) : match.start()]
        if match.group().startswith(".") and _keeps_going(before):
            continue
        sentences.append(block[start : match.end()].strip())
        start = match.end()
    tail = block[start:].strip()
    return [*sentences, tail] if tail else sentences


def _keeps_going(before: str) -> bool:
    """Whether the period after ``before`` belongs to an abbreviation or an initial."""
    match = _LAST_WORD.search(before)
    if match is None:
        return False
    word = match.group(1).lstrip("(\"'“‘[").lower()
    return word in _ABBREVIATIONS or len(word) == 1 or bool(_DOTTED.fullmatch(word))


def _is_content(word: str) -> bool:
    return len(word) > 1 and not word.isdigit() and word not in _STOPWORDS


def _scorer(sentences: list[_Sentence], total: int) -> Callable[[_Sentence], tuple[float, int]]:
    counts = Counter(word for s in sentences for word in s.words)
    top = max(counts.values(), default=1)

    def key(sentence: _Sentence) -> tuple[float, int]:
        weight = sum(counts[word] / top for word in sentence.words)
        score = weight / math.sqrt(len(sentence.words)) if sentence.words else 0.0
        score *= 1 + POSITION_BONUS * (1 - sentence.index / max(total, 1))
        score *= 1 + (PARAGRAPH_LEAD_BONUS if sentence.paragraph_lead else 0)
        return (-round(score, 9), sentence.index)  # rounded: ties break by position alone

    return key


def _near_duplicate(one: _Sentence, other: _Sentence) -> bool:
    a, b = set(one.words), set(other.words)
    if not a or not b:
        return one.text == other.text
    return len(a & b) / len(a | b) >= DUPLICATE_JACCARD


def clip(text: str, limit: int = BULLET_CHARS) -> str:
    """``text`` on one line, cut at a word boundary to at most ``limit`` characters, a lone
    surrogate (which no reply line can encode) read as U+FFFD."""
    text = " ".join(scrubbed(text).split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"


def scrubbed(text: str) -> str:
    """``text`` with each lone surrogate (``"\\ud800"`` in a model's JSON) as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


async def summarize(
    client: GuardedClient,
    config: SummarizeConfig,
    text: str,
    max_bullets: int,
    *,
    deadline_s: float,
    pool: WorkerPool,
) -> Summary:
    """Bullets for ``text``: from the model when ``llm_base_url`` is set and it answers
    usefully, else extractive (CPU-bound, so in ``pool``, by the task's own deadline).
    Raises OpError(WORKER_FAILED) when the extractive work's worker dies or runs past it."""
    if config.llm_base_url is not None:
        pairs = await summarize_llm(client, config, text, max_bullets, deadline_s=deadline_s)
        if pairs:
            return Summary(tuple(b for b, _ in pairs), "llm", tuple(q for _, q in pairs))
    extractive = functools.partial(summarize_extractive, text, max_bullets)
    bullets = await pool.run(extractive, deadline=work_deadline(), shape=tuple[str, ...])
    return Summary(bullets, "extractive", tuple(own_words(bullet) for bullet in bullets))


def own_words(bullet: str) -> str:
    """The words an extractive bullet quotes: the bullet without the ``…`` that ``clip``
    puts after a cut sentence (what is left is still the sentence's own start)."""
    return bullet.removesuffix("…").rstrip()


async def summarize_llm(
    client: GuardedClient,
    config: SummarizeConfig,
    text: str,
    max_bullets: int,
    *,
    deadline_s: float,
) -> tuple[tuple[str, str], ...] | None:
    """(bullet, quote) pairs from the configured chat endpoint, or None on any failure (the
    caller falls back to extractive). The API key comes from ``llm_api_key_env`` and is
    never logged, cached or sent on a redirect (``max_redirects=0``)."""
    assert config.llm_base_url is not None
    headers = {"Content-Type": "application/json"}
    if config.llm_api_key_env is not None:
        key = os.environ.get(config.llm_api_key_env)
        if not key:
            log.warning("summarize: %s is unset; summarising extractively", config.llm_api_key_env)
            return None
        headers["Authorization"] = f"Bearer {key}"
    body = {
        "model": config.llm_model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": LLM_PROMPT.format(n=max_bullets)},
            {"role": "user", "content": text},
        ],
    }
    # Under an llm_tokens budget the answer's tokens are reserved first and are its
    # max_tokens (none left: summarised extractively, a complete answer, not PARTIAL).
    reserved = 0
    if budget.limits("llm_tokens"):
        reserved = await budget.reserve("llm_tokens", BUDGETED_MAX_TOKENS, fallback=True)
        if reserved == 0:
            return None
        body["max_tokens"] = reserved
    try:
        result = await client.fetch(
            config.llm_base_url.rstrip("/") + "/chat/completions",
            method="POST",
            headers=headers,
            content=json.dumps(body).encode(),
            max_redirects=0,
            deadline_s=deadline_s,
        )
    except OpError as exc:
        # Cut midway (its timeout, a budget run out), the model may have billed all of it.
        await budget.settle("llm_tokens", reserved, 0 if never_sent(exc) else reserved)
        log.warning("summarize: model endpoint failed (%s); summarising extractively", exc.code)
        return None
    if result.status_code != 200:
        await budget.settle("llm_tokens", reserved, 0)
        log.warning("summarize: model endpoint answered %d", result.status_code)
        return None
    # No usage named: about 4 characters a token (OpenAI's rule of thumb), in and out.
    await budget.settle_tokens(reserved, result.body, (len(text) + len(result.body)) // 4)
    return parse_llm_bullets(result.body, max_bullets) or None


def parse_llm_bullets(body: bytes, max_bullets: int) -> tuple[tuple[str, str], ...]:
    """(bullet, quote) pairs from an OpenAI chat completion's ``choices[0].message.content``:
    its JSON ``{"bullets": [{"text", "quote"}]}``, else one bullet per bulleted line (or per
    line when none is bulleted) quoting itself; empty when the body is not a completion."""
    try:
        content = peer_json.loads(body)["choices"][0]["message"]["content"]
    except (peer_json.NotJson, KeyError, IndexError, TypeError):
        return ()
    if not isinstance(content, str):
        return ()
    pairs = json_bullets(content)
    if pairs is None:
        lines = [line for line in content.splitlines() if line.strip()]
        marked = [m.group(1) for line in lines if (m := _LLM_BULLET.match(line))]
        pairs = [(line, line) for line in (marked or lines)]
    clipped = [(clip(text), scrubbed(quote)) for text, quote in pairs]  # a quote is never cut
    return tuple((text, quote) for text, quote in clipped if text)[:max_bullets]


def json_bullets(content: str) -> list[tuple[str, str]] | None:
    """The (text, quote) pairs of a model's JSON answer, or None when ``content`` is not
    that JSON."""
    items = json_items(content)
    if items is None:
        return None
    texts = [(item, item.get("text")) for item in items]
    return [
        (text, claimed_quote(item, text))
        for item, text in texts
        if isinstance(text, str) and text.strip()
    ]


def json_items(content: str) -> list[dict[str, Any]] | None:
    """The objects of ``{"bullets": [...]}`` in a model's answer (a code fence around it is
    allowed; an answer cut by ``max_tokens`` keeps its whole objects), or None when
    ``content`` is not that JSON."""
    text = _unfenced(content.strip())
    try:
        data = peer_json.loads(text)
    except peer_json.NotJson:  # a hostile model may nest past the parser's stack
        return _whole_items(text)
    items = data.get("bullets") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    return [item for item in items if isinstance(item, dict)]


def _unfenced(text: str) -> str:
    """``text`` without a code fence around it. Not one ``sub`` of ``\\s*```$``: tried at
    every space of a long run of them, that scan was quadratic in a model's answer."""
    opening = _OPENING_FENCE.match(text)
    text = text[opening.end() :] if opening else text
    return text[:-3].rstrip() if text.endswith("```") else text


def _whole_items(text: str) -> list[dict[str, Any]] | None:
    """The complete objects of a ``{"bullets": [`` answer cut short, or None."""
    opening = _BULLETS_OPENING.match(text)
    if opening is None:
        return None
    items: list[dict[str, Any]] = []
    at = opening.end()
    while True:
        try:
            item, at = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError):
            return items or None
        if isinstance(item, dict):
            items.append(item)
        while at < len(text) and text[at] in ", \t\r\n":
            at += 1


def claimed_quote(item: dict[str, Any], text: str) -> str:
    """The quote a model's bullet claims: a bullet giving none (no ``quote`` key) quotes
    itself; one that is not a string is no quote (``""``, never found), as one holding
    only spaces or separators is not found (``quotes.supports``)."""
    if "quote" not in item:
        return text
    quote = item["quote"]
    return quote if isinstance(quote, str) else ""

"""The research answer written by an OpenAI-compatible chat model (``research.llm_*``).

    POST <llm_base_url>/chat/completions
    {"model", "temperature": 0, "max_tokens", "messages": [system, user]}
    -> {"choices": [{"message": {"content": '{"bullets": [{"text": "A point.",
            "sources": [1], "quote": "words copied from source 1"}]}'}}]}

The user message holds the question and the numbered sources' text; the model is asked for
bullets naming the sources they rest on and the words of a source they quote (an answer in
lines ending with ``[1]`` is read too, each bullet then quoting itself). A bullet citing no
source it was given is dropped (the model may not invent one), and its quote is only a
claim: ``run.py`` looks for it in the sources before the answer is shown. The key comes from
``llm_api_key_env`` and is never logged or sent on a redirect (``max_redirects=0``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import trio

from csp_web.core.api import budget
from csp_web.core.api.errors import OpError
from csp_web.net import GuardedClient, never_sent
from specialists.web.docs.config import ResearchConfig

from ..pages.summarize import claimed_quote, clip, json_items, scrubbed
from .jobs import Finding

PROMPT = (
    "Answer the user's question from the numbered sources only, in at most {n} bullet "
    'points. Answer with JSON only: {{"bullets": [{{"text": "<one point>", "sources": '
    '[<the numbers of the sources it rests on>], "quote": "<the words of one of those '
    'sources it rests on, copied exactly>"}}]}}'
)
_BULLET = re.compile(r"^\s*(?:[-*+•–]|\d{1,3}[.)])\s+(.*)$")
# A line's trailing ``[1][3]``, matched on the reversed line from its start: searched
# forwards, ``\s*`` and the cites were tried from every position (quadratic: 9 s of CPU for
# 20,000 spaces in one line of a model's answer).
_CITES_REVERSED = re.compile(r"(?:\s*\]\d{1,2}\[)+\s*")


@dataclass(frozen=True)
class Source:
    """One source read for a question: its final URL, title, (capped) text and the fileKey
    of its held snapshot (whose stored text ``text`` begins), and whether that text is
    Markdown (``quotes.is_markdown``: how its quotes are matched)."""

    url: str
    title: str | None
    text: str
    file_key: str
    markdown: bool = True


class LlmFailure(Exception):
    """The model gave no usable answer; ``reason`` is lower_snake for the job's steps."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def write_with_model(
    client: GuardedClient,
    config: ResearchConfig,
    question: str,
    sources: Sequence[Source],
    bullets: int,
    *,
    deadline: float,
) -> tuple[Finding, ...]:
    """Bullets with their source numbers and claimed quotes; raises LlmFailure."""
    assert config.llm_base_url is not None
    headers = {"Content-Type": "application/json"}
    if config.llm_api_key_env is not None:
        key = os.environ.get(config.llm_api_key_env)
        if not key:
            raise LlmFailure("no_api_key")
        headers["Authorization"] = f"Bearer {key}"
    budget_s = min(config.llm_timeout_s, deadline - trio.current_time())
    # The answer's tokens are reserved before it is asked for (none left: a failure like
    # any, the bullets extractive) and are the model's max_tokens; settled by its usage.
    max_tokens = 0
    try:
        max_tokens = await budget.reserve("llm_tokens", config.llm_max_tokens)
        body = request_body(config, question, sources, bullets, max_tokens)
        result = await client.fetch(
            config.llm_base_url.rstrip("/") + "/chat/completions",
            method="POST",
            headers=headers,
            content=json.dumps(body).encode(),
            max_redirects=0,
            deadline_s=max(0.0, budget_s),
        )
    except OpError as exc:
        # Cut midway (its timeout, a budget run out), the model may have billed all of it.
        await budget.settle("llm_tokens", max_tokens, 0 if never_sent(exc) else max_tokens)
        raise LlmFailure(f"{exc.code}:{exc.detail}") from None
    if result.status_code != 200:
        await budget.settle("llm_tokens", max_tokens, 0)
        raise LlmFailure(f"http_{result.status_code}")
    await budget.settle_tokens(max_tokens, result.body, max_tokens)
    answer = parse_answer(result.body, len(sources), bullets)
    if not answer:
        raise LlmFailure("no_cited_bullets")
    return answer


def request_body(
    config: ResearchConfig,
    question: str,
    sources: Sequence[Source],
    bullets: int,
    max_tokens: int,
) -> dict[str, object]:
    numbered = "\n\n".join(
        f"[{n}] {source.title or source.url}\n{source.url}\n{source.text}"
        for n, source in enumerate(sources, 1)
    )
    return {
        "model": config.llm_model,
        "temperature": 0,
        "max_tokens": max_tokens,
        "messages": [
            {"role": "system", "content": PROMPT.format(n=bullets)},
            {"role": "user", "content": f"Question: {question}\n\nSources:\n\n{numbered}"},
        ],
    }


def parse_answer(body: bytes, sources: int, bullets: int) -> tuple[Finding, ...]:
    """The cited bullets of a chat completion (``choices[0].message.content``), at most
    ``bullets``; a bullet naming no source in 1..``sources`` is dropped."""
    try:
        content = json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return ()
    if not isinstance(content, str):
        return ()
    claimed = _json_findings(content) or _line_findings(content)
    answer: list[Finding] = []
    for text, cited, quote in claimed:
        numbers = tuple(dict.fromkeys(n for n in cited if 1 <= n <= sources))
        bullet = clip(text)
        if numbers and bullet:
            answer.append(Finding(bullet, numbers, scrubbed(quote)))  # a quote is never cut
    return tuple(answer[:bullets])


def _json_findings(content: str) -> list[tuple[str, list[int], str]]:
    """(text, source numbers, quote) of a JSON answer; empty when it is not one. A bullet
    without a quote quotes itself."""
    findings = []
    for item in json_items(content) or []:
        text, cited = item.get("text"), item.get("sources")
        if isinstance(text, str) and text.strip():
            numbers = [n for n in cited if type(n) is int] if isinstance(cited, list) else []
            findings.append((text, numbers, claimed_quote(item, text)))
    return findings


def _line_findings(content: str) -> list[tuple[str, list[int], str]]:
    """(text, source numbers, quote) of lines ending ``[1]`` or ``[1][3]``, each quoting
    itself."""
    findings = []
    for line in content.splitlines():
        match = _BULLET.match(line)
        text = match.group(1) if match else line.strip()
        cites = _CITES_REVERSED.match(text[::-1])
        if text and cites is not None:
            start = len(text) - cites.end()
            numbers = [int(n) for n in re.findall(r"\d+", text[start:])]
            findings.append((text[:start], numbers, text[:start]))
    return findings

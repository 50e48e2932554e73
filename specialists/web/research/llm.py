"""The research answer written by an OpenAI-compatible chat model (``research.llm_*``).

    POST <llm_base_url>/chat/completions
    {"model", "temperature": 0, "max_tokens", "messages": [system, user]}
    -> {"choices": [{"message": {"content": "- A point. [1]\\n- Another. [1][2]"}}]}

The user message holds the question and the numbered sources' text; the model is asked for
bullets that end with the numbers of the sources they rest on. A bullet citing no source it
was given is dropped (the model may not invent one). The key comes from ``llm_api_key_env``
and is never logged or sent on a redirect (``max_redirects=0``).
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
from csp_web.net import GuardedClient
from specialists.web.docs.config import ResearchConfig

from ..pages.summarize import clip

PROMPT = (
    "Answer the user's question from the numbered sources only. Reply with at most {n} "
    "bullet points, one per line, each starting with '- ' and ending with the numbers of "
    "the sources it rests on in brackets, like [1] or [1][3]. Answer with the bullets only."
)
_BULLET = re.compile(r"^\s*(?:[-*+•–]|\d{1,3}[.)])\s+(.*)$")
_CITES = re.compile(r"\s*((?:\[\d{1,2}\]\s*)+)$")


@dataclass(frozen=True)
class Source:
    """One source read for a question: its final URL, title and (capped) text."""

    url: str
    title: str | None
    text: str


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
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Bullets with their source numbers; raises LlmFailure."""
    assert config.llm_base_url is not None
    headers = {"Content-Type": "application/json"}
    if config.llm_api_key_env is not None:
        key = os.environ.get(config.llm_api_key_env)
        if not key:
            raise LlmFailure("no_api_key")
        headers["Authorization"] = f"Bearer {key}"
    budget_s = min(config.llm_timeout_s, deadline - trio.current_time())
    try:
        budget.require("llm_tokens")  # none left: a failure like any, the bullets extractive
        result = await client.fetch(
            config.llm_base_url.rstrip("/") + "/chat/completions",
            method="POST",
            headers=headers,
            content=json.dumps(request_body(config, question, sources, bullets)).encode(),
            max_redirects=0,
            deadline_s=max(0.0, budget_s),
        )
    except OpError as exc:
        raise LlmFailure(f"{exc.code}:{exc.detail}") from None
    if result.status_code != 200:
        raise LlmFailure(f"http_{result.status_code}")
    await budget.spend_tokens(result.body, config.llm_max_tokens)
    answer = parse_answer(result.body, len(sources), bullets)
    if not answer:
        raise LlmFailure("no_cited_bullets")
    return answer


def request_body(
    config: ResearchConfig, question: str, sources: Sequence[Source], bullets: int
) -> dict[str, object]:
    numbered = "\n\n".join(
        f"[{n}] {source.title or source.url}\n{source.url}\n{source.text}"
        for n, source in enumerate(sources, 1)
    )
    return {
        "model": config.llm_model,
        "temperature": 0,
        "max_tokens": budget.cap("llm_tokens", config.llm_max_tokens),
        "messages": [
            {"role": "system", "content": PROMPT.format(n=bullets)},
            {"role": "user", "content": f"Question: {question}\n\nSources:\n\n{numbered}"},
        ],
    }


def parse_answer(
    body: bytes, sources: int, bullets: int
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The cited bullets of a chat completion (``choices[0].message.content``), at most
    ``bullets``; a bullet naming no source in 1..``sources`` is dropped."""
    try:
        content = json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ()
    if not isinstance(content, str):
        return ()
    answer: list[tuple[str, tuple[int, ...]]] = []
    for line in content.splitlines():
        match = _BULLET.match(line)
        text = match.group(1) if match else line.strip()
        cites = _CITES.search(text)
        if not text or cites is None:
            continue
        numbers = tuple(
            dict.fromkeys(
                int(n) for n in re.findall(r"\d+", cites.group(1)) if 1 <= int(n) <= sources
            )
        )
        bullet = clip(text[: cites.start()])
        if numbers and bullet:
            answer.append((bullet, numbers))
    return tuple(answer[:bullets])

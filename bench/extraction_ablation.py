"""The ablation mode of `bench/extraction.py`: each extraction rule's F1 contribution.

For every rule of the extractor's registry (`specialists.extract.RULES`) the corpus is
scored once with that rule switched off (`switched_off`, the registry's own switch: nothing
is patched), and the F1 lost, overall and per page type, is that rule's contribution.

A first pass over the corpus takes each page's census: the rules that applied on it. A rule
that did not apply on a page cannot change its Markdown, so a page is only extracted again
for the rules that applied on it; the others keep the first pass's counts, which makes the
ablation of about 70 rules cost a few corpus runs, not 70.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.extraction import (
    CorpusScore,
    Page,
    PageScore,
    compare,
    load_corpus,
    markdown_to_text,
    summarise,
)
from specialists.extract import RULES, census, extract_article, switched_off

# A contribution this close to zero on every page type of both corpora is nothing measured:
# the rule is a candidate for deletion (or for a corpus that shows what it is for).
NEGLIGIBLE_F1 = 0.0005


@dataclass(frozen=True)
class Ablation:
    """One rule's effect on one corpus: on how many pages it applied, and the F1 lost per
    page type ("overall" first) when it is off; negative when the rule costs F1."""

    rule: str
    applied: int
    contribution: dict[str, float]


def _score(page: Page, markdown: str) -> PageScore:
    counts = compare(markdown_to_text(markdown), page.truth)
    return PageScore(page.page_id, page.page_type, *counts, 0.0, 0.0)


def _by_type(score: CorpusScore) -> dict[str, float]:
    return {"overall": score.f1, **{kind: part.f1 for kind, part in score.by_type().items()}}


def ablate(corpus: Path, half: str | None = None) -> tuple[dict[str, float], list[Ablation]]:
    """The corpus's F1 per page type with every rule on, and each rule's `Ablation`."""
    pages = load_corpus(corpus, half)
    base: list[PageScore] = []
    fired: list[set[str]] = []
    for page in pages:
        with census() as applied:
            markdown = extract_article(page.html, url=page.url).markdown
        base.append(_score(page, markdown))
        fired.append(applied)
    baseline = _by_type(summarise(base))
    ablations = []
    for name in sorted(RULES):
        scores = list(base)
        where = [n for n, rules in enumerate(fired) if name in rules]
        with switched_off({name}):
            for n in where:
                page = pages[n]
                scores[n] = _score(page, extract_article(page.html, url=page.url).markdown)
        without = _by_type(summarise(scores))
        lost = {kind: baseline[kind] - without[kind] for kind in baseline}
        ablations.append(Ablation(name, len(where), lost))
    return baseline, ablations


def ablation_report(
    name: str, baseline: dict[str, float], ablations: Sequence[Ablation], command: str
) -> str:
    """A table of the rules by overall contribution: pages applied on, F1 lost per type."""
    kinds = list(baseline)
    head = "".join(f" {kind[:11]:>11}" for kind in kinds)
    lines = [
        f"{name}: F1 lost with each rule off (baseline F1 overall {baseline['overall']:.4f})",
        f"  {'rule':<22} {'pages':>5}{head}",
    ]
    for ablation in sorted(ablations, key=lambda a: -a.contribution["overall"]):
        cells = "".join(f" {ablation.contribution[kind]:>+11.4f}" for kind in kinds)
        lines.append(f"  {ablation.rule:<22} {ablation.applied:>5}{cells}")
    lines.append(f"reproduce: {command}")
    return "\n".join(lines)


def negligible(results: Sequence[Sequence[Ablation]]) -> list[str]:
    """The rules whose contribution is within NEGLIGIBLE_F1 of zero on every page type of
    every corpus in `results` (one list of ablations per corpus)."""
    names = set(RULES)
    for ablations in results:
        for ablation in ablations:
            if any(abs(lost) > NEGLIGIBLE_F1 for lost in ablation.contribution.values()):
                names.discard(ablation.rule)
    return sorted(names)

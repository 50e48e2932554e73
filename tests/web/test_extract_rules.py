"""The extractor's rule registry and pass list: every rule is asked, switching one off goes
through the registry and stays in its block, and each pass touches only the parts of the
page it declares."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path
from typing import NoReturn

import pytest
from selectolax.lexbor import LexborHTMLParser

from bench.extraction import (
    CorpusScore,
    PageScore,
    dump_corpus,
    report,
    score_corpus,
    summarise,
)
from bench.extraction_ablation import ablate, negligible
from specialists.extract import RULES, Article, _rules, census, extract_article, switched_off
from specialists.extract._page import Page
from specialists.extract._passes import PASSES

PACKAGE = Path(__file__).resolve().parents[2] / "specialists" / "extract"
PROSE = (
    "The council voted on Tuesday to expand the river park, adding trails, a boat ramp, "
    "and a community garden that volunteers have been asking for since the spring."
)
HEADLINE = "Council votes to expand the river park"
ARTICLE = (
    "<html><head><meta property='og:title' content='River park news'></head><body>"
    "<nav><a href='/'>Home</a> <a href='/news'>News</a></nav>"
    f"<article><h1>{HEADLINE}</h1><p>{PROSE}</p><p>{PROSE} Again, with more words.</p>"
    "<div class='ad'><p>Buy the best garden tools in town, now half price for all readers.</p>"
    "</div></article></body></html>"
)
THREAD = (
    '<html><head><script type="application/ld+json">{"@type": "DiscussionForumPosting"}'
    "</script></head><body><div class='post'><p>"
    + PROSE
    + "</p></div>"
    + "".join(
        f"<div class='comment reply'><p>Reply {n}: {PROSE}</p><dl><dt>Posts:</dt>"
        f"<dd>{n}</dd></dl></div>"
        for n in range(5)
    )
    + "</body></html>"
)


def test_switching_off_a_rule_the_registry_does_not_hold_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="no-such-rule"), switched_off({"no-such-rule"}):
        pass


def test_a_rule_switched_off_changes_the_page_it_applies_to_and_only_inside_its_block() -> None:
    before = extract_article(ARTICLE).markdown
    with switched_off({"skip-h1"}):
        without = extract_article(ARTICLE).markdown
    assert f"# {HEADLINE}" not in before
    assert f"# {HEADLINE}" in without
    assert extract_article(ARTICLE).markdown == before


def test_a_cached_class_name_decision_follows_the_rules_switched_off() -> None:
    assert "garden tools" not in extract_article(ARTICLE).markdown  # "ad" names chrome
    with switched_off({"chrome-pieces"}):
        assert "garden tools" in extract_article(ARTICLE).markdown
    assert "garden tools" not in extract_article(ARTICLE).markdown


def test_a_census_names_the_rules_that_applied_on_the_page() -> None:
    with census() as applied:
        extract_article(ARTICLE)
    assert {"skip-h1", "chrome-pieces", "chrome-names"} <= applied
    assert "thread-join" not in applied
    assert applied <= RULES.keys()


def test_every_registered_rule_is_asked_in_the_extractor_and_belongs_to_a_pass() -> None:
    source = "".join(
        path.read_text(encoding="utf-8")
        for path in PACKAGE.glob("*.py")
        if path.name != "_rules.py"
    )
    asked = set(re.findall(r"(?<![A-Za-z])on\(\s*(?:rules\.)?([A-Z_0-9]+)\b", source))
    declared = {name for name, value in vars(_rules).items() if isinstance(value, _rules.Rule)}
    assert declared == asked
    assert len(RULES) == len(declared)
    assert {rule.stage for rule in RULES.values()} <= {step.name for step in PASSES}


class _Undeclared:
    """Stands in for a page part a pass did not declare: any use of it fails the test."""

    def _fail(self, *args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("a pass used a page part it does not declare")

    __getattr__ = __bool__ = __len__ = __iter__ = __str__ = __eq__ = __hash__ = _fail


@pytest.mark.parametrize("html", [ARTICLE, THREAD], ids=["article", "thread"])
def test_each_pass_reads_and_writes_only_the_page_parts_it_declares(html: str) -> None:
    fields = [field.name for field in dataclasses.fields(Page)]
    page = Page(None, LexborHTMLParser(html))
    for step in PASSES:
        parts = {*step.reads, *step.writes}
        assert {part for part in parts if not part.startswith("Elem.")} <= set(fields), step.name
        if step.on_body and page.root is None:
            continue
        hidden = {name: getattr(page, name) for name in fields if name not in parts}
        for name in hidden:
            setattr(page, name, _Undeclared())
        kept = {name: getattr(page, name) for name in fields if name not in step.writes}
        step.run(page)
        for name in kept:
            assert getattr(page, name) is kept[name], f"{step.name} wrote {name}"
        for name, value in hidden.items():
            setattr(page, name, value)
    assert page.markdown


def _corpus(root: Path) -> Path:
    corpus = root / "tiny"
    (corpus / "html").mkdir(parents=True)
    truth = {"p1": {"articleBody": f"{PROSE}\n{PROSE} Again, with more words.", "url": None}}
    (corpus / "ground-truth.json").write_text(json.dumps(truth), encoding="utf-8")
    (corpus / "html" / "p1.html.gz").write_bytes(gzip.compress(ARTICLE.encode()))
    return corpus


def test_ablation_charges_a_rule_the_f1_lost_without_it_on_the_pages_it_applied_to(
    tmp_path: Path,
) -> None:
    baseline, ablations = ablate(_corpus(tmp_path))
    by_rule = {ablation.rule: ablation for ablation in ablations}
    assert set(by_rule) == set(RULES)
    assert by_rule["skip-h1"].applied == 1
    assert by_rule["skip-h1"].contribution["overall"] > 0  # the headline is not in the truth
    assert by_rule["thread-join"].applied == 0
    assert by_rule["thread-join"].contribution == {"overall": 0.0, "article": 0.0}
    assert "thread-join" in negligible([ablations])
    assert "skip-h1" not in negligible([ablations])
    assert baseline["overall"] > 0.9


def test_dump_writes_each_pages_markdown_under_the_corpus_name(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    assert dump_corpus(corpus, tmp_path / "out") == 1
    written = (tmp_path / "out" / "tiny" / "p1.md").read_text(encoding="utf-8")
    assert written == extract_article(ARTICLE).markdown


def test_the_report_says_when_trafilatura_was_not_run() -> None:
    score = CorpusScore(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, ())
    assert "trafilatura: not run (not installed, or --no-rival)" in report(score, "cmd")


def test_a_rival_is_timed_on_every_page_beside_ours_and_reported(tmp_path: Path) -> None:
    seen: list[str] = []
    score = score_corpus(_corpus(tmp_path), repeat=2, rival=lambda html, url: seen.append(html))
    assert seen == [ARTICLE, ARTICLE]  # interleaved: each page, as many runs as ours
    assert score.rival_median_ms is not None
    assert "trafilatura (interleaved) median ms" in report(score, "cmd")


def test_ours_and_the_rival_take_turns_on_each_page_with_the_same_string(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []

    def ours(html: str, url: str | None) -> Article:
        calls.append(("ours", html))
        return extract_article(html, url=url)

    def theirs(html: str, url: str | None) -> str:
        calls.append(("theirs", html))
        return PROSE

    score_corpus(_corpus(tmp_path), ours, repeat=2, rival=theirs)
    assert [who for who, _ in calls] == ["ours", "theirs", "ours", "theirs"]
    assert {html for _, html in calls} == {ARTICLE}


def test_the_rivals_output_is_scored_per_page_type_beside_ours(tmp_path: Path) -> None:
    score = score_corpus(_corpus(tmp_path), rival=lambda html, url: PROSE)  # half the truth
    rival = score.rival()
    assert rival is not None
    assert rival.precision == 1.0
    assert 0.0 < rival.recall < score.recall
    assert set(rival.by_type()) == {"article"}
    table = report(score, "cmd")
    assert f"  article            1   {score.f1:.4f}   {rival.f1:.4f}" in table
    assert score_corpus(_corpus(tmp_path / "again")).rival() is None


def test_the_speed_ratio_is_the_rivals_total_time_over_ours() -> None:
    timed = [
        PageScore("a", "article", 1, 0, 0, 2.0, 2.0, rival_ms=12.0),
        PageScore("b", "article", 1, 0, 0, 4.0, 4.0, rival_ms=18.0),
    ]
    score = summarise(timed)
    assert score.speedup == 5.0
    assert "ours is 5.00x its speed (total ms, goal >= 5x; n/a in CPU ms)" in report(score, "cmd")
    assert summarise([PageScore("c", "article", 1, 0, 0, 2.0, 2.0)]).speedup is None

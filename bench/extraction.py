"""Benchmark of the readable-content extractor on the extraction dev corpora.

Run from the repository root::

    python bench/extraction.py [--corpus [DIR ...]] [--half a|b] [--repeat N] [--dump DIR]
                               [--ablate] [--no-rival]

Without DIRs (or without `--corpus`) it runs both dev corpora beside the clone: the Zyte news
articles (`extraction-dev`) and the seven-type WCXB pages (`extraction-wcxb-dev`), and prints
a table per corpus: F1, precision and recall overall and per page type, median and p90 ms,
and how many of the extractor's PAGE_TYPE hints were right out of those given.
`--half a` or `--half b` scores only the pages whose id hashes into that half (crc32 of the
id, even or odd), so a rule tuned on one half can be checked on the other.
`--dump DIR` writes the Markdown of every page to `DIR/<corpus>/<id>.md` instead of scoring,
so a restructuring can be checked byte for byte (`diff -r BEFORE AFTER`). `--ablate` scores
each rule of the extractor's registry by the F1 lost per page type with it switched off
(`bench/extraction_ablation.py`).

When trafilatura is importable (it is never a runtime dependency: `pip install -e '.[bench]'`
installs it), each page is extracted by both, interleaved (ours, theirs, ours, theirs... on
the same input string, `--repeat` times each), so both see the same machine load; its output
is scored by the same metric, and the table shows both F1 per page type and the speed ratio
(its total ms over ours, goal 5x). `--no-rival` leaves it out.

The metric is the Zyte article-extraction-benchmark's, as the corpus README states it:
tokens are ``\\w+`` runs; each text becomes a multiset of 4-token shingles; per document
precision is TP/(TP+FP) and recall TP/(TP+FN); precision is averaged over documents with a
non-empty prediction, recall over documents with a non-empty truth, and F1 is the harmonic
mean of the two averages. Markdown is first stripped of link targets, image references and a
leading ``# Title`` line, as the independent scorer does.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/extraction.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from specialists.extract import Article, extract_article  # noqa: E402

CORPORA_DIR = REPO_ROOT.parent / "shared" / "corpus"
DEFAULT_CORPUS = CORPORA_DIR / "extraction-dev"
WCXB_CORPUS = CORPORA_DIR / "extraction-wcxb-dev"
DEFAULT_CORPORA = (DEFAULT_CORPUS, WCXB_CORPUS)
DEFAULT_PAGE_TYPE = "article"  # the Zyte corpus holds news articles and names no type
HALVES = ("a", "b")
SHINGLE_SIZE = 4  # the benchmark's n-gram size
SPEED_GOAL = 5.0  # issue 24: at least 5x trafilatura's speed, timed interleaved per page

T = TypeVar("T")
_TOKEN = re.compile(r"\w+")
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_LEADING_TITLE = re.compile(r"\A\s*# [^\n]*\n?")

Extractor = Callable[[str, str | None], Article]
# A rival extractor's Markdown of a page, or None when it finds nothing (trafilatura's way).
Rival = Callable[[str, str | None], str | None]
# The corpora's type names that the extractor's PAGE_TYPE hint spells otherwise.
_HINT_NAMES = {"documentation": "docs"}


@dataclass(frozen=True)
class PageScore:
    """One page's id in the corpus, its shingle overlap, and the extractor's wall and CPU ms."""

    page_id: str
    page_type: str
    true_positive: int
    false_positive: int
    false_negative: int
    elapsed_ms: float
    cpu_ms: float
    hint: str | None = None
    rival_ms: float | None = None  # trafilatura's wall ms on the same page, when installed
    rival_cpu_ms: float | None = None
    rival_counts: tuple[int, int, int] | None = None  # its (TP, FP, FN) on the same page

    def as_rival(self) -> PageScore | None:
        """This page as the rival extracted it: its counts and times (None: no rival ran)."""
        if self.rival_counts is None or self.rival_ms is None:
            return None
        cpu = self.rival_cpu_ms if self.rival_cpu_ms is not None else self.rival_ms
        return PageScore(self.page_id, self.page_type, *self.rival_counts, self.rival_ms, cpu)

    @property
    def hint_is_right(self) -> bool | None:
        """Whether the extractor's PAGE_TYPE hint names the page's type (None: no hint)."""
        if self.hint is None:
            return None
        return self.hint == _HINT_NAMES.get(self.page_type, self.page_type)

    @property
    def precision(self) -> float | None:
        """TP/(TP+FP), or None when the prediction is empty (not averaged, as the benchmark)."""
        predicted = self.true_positive + self.false_positive
        return self.true_positive / predicted if predicted else None

    @property
    def recall(self) -> float | None:
        """TP/(TP+FN), or None when the truth is empty."""
        actual = self.true_positive + self.false_negative
        return self.true_positive / actual if actual else None

    @property
    def f1(self) -> float:
        """This page's own F1 (0 when either side is empty); only used to rank pages."""
        return _harmonic(self.precision or 0.0, self.recall or 0.0)


@dataclass(frozen=True)
class CorpusScore:
    """The corpus-level figures: mean precision, mean recall, their F1, and timings."""

    precision: float
    recall: float
    f1: float
    mean_ms: float
    median_ms: float
    median_cpu_ms: float
    p90_ms: float
    pages: tuple[PageScore, ...]

    @property
    def rival_median_ms(self) -> float | None:
        """trafilatura's median wall ms per page, timed interleaved with ours (None: absent)."""
        times = [page.rival_ms for page in self.pages if page.rival_ms is not None]
        return statistics.median(times) if times else None

    @property
    def speedup(self) -> float | None:
        """trafilatura's total wall ms over ours on the pages both were timed on, each page
        timed by both in turn (None: trafilatura absent or nothing timed)."""
        timed = [page for page in self.pages if page.rival_ms is not None]
        ours = sum(page.elapsed_ms for page in timed)
        theirs = sum(page.rival_ms or 0.0 for page in timed)
        return theirs / ours if timed and ours else None

    @property
    def cpu_speedup(self) -> float | None:
        """As `speedup`, on this thread's CPU time: what a busy machine's waits leave out."""
        timed = [page for page in self.pages if page.rival_cpu_ms is not None]
        ours = sum(page.cpu_ms for page in timed)
        theirs = sum(page.rival_cpu_ms or 0.0 for page in timed)
        return theirs / ours if timed and ours else None

    def rival(self) -> CorpusScore | None:
        """The same figures for the rival's output on the pages it was scored on (None: no
        rival was scored)."""
        scored = [rival for page in self.pages if (rival := page.as_rival()) is not None]
        return summarise(scored) if scored else None

    @property
    def hints(self) -> tuple[int, int]:
        """(right, given): how many PAGE_TYPE hints were given, and how many named the type."""
        verdicts = [page.hint_is_right for page in self.pages if page.hint is not None]
        return sum(1 for right in verdicts if right), len(verdicts)

    def by_type(self) -> dict[str, CorpusScore]:
        """The same figures for each page type, in name order."""
        types = sorted({page.page_type for page in self.pages})
        return {kind: summarise([p for p in self.pages if p.page_type == kind]) for kind in types}


def markdown_to_text(markdown: str) -> str:
    """Drop image references, link targets (keeping link text) and a leading `# Title` line."""
    text = _LEADING_TITLE.sub("", markdown, count=1)
    text = _IMAGE.sub(" ", text)
    return _LINK.sub(r"\1", text)


def shingles(text: str, size: int = SHINGLE_SIZE) -> Counter[tuple[str, ...]]:
    """The multiset of `size`-token windows of `text`; a shorter text is its one window."""
    tokens = _TOKEN.findall(text)
    if 0 < len(tokens) < size:
        return Counter([tuple(tokens)])
    return Counter(tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1))


def compare(predicted: str, truth: str) -> tuple[int, int, int]:
    """(TP, FP, FN) of the shingle multisets of a plain-text prediction and its truth."""
    got, want = shingles(predicted), shingles(truth)
    overlap = sum((got & want).values())
    return overlap, sum(got.values()) - overlap, sum(want.values()) - overlap


@dataclass(frozen=True)
class Page:
    """One corpus page: its id and type, the HTML as served, its URL and the true main text."""

    page_id: str
    page_type: str
    html: str
    url: str | None
    truth: str


def half_of(page_id: str) -> str:
    """The half of the corpus, "a" or "b", that a page id hashes into (crc32, even or odd)."""
    return HALVES[zlib.crc32(page_id.encode()) % 2]


def load_corpus(corpus: Path, half: str | None = None) -> list[Page]:
    """Every page of the corpus (or of one `half`), in id order."""
    truth = json.loads((corpus / "ground-truth.json").read_text(encoding="utf-8"))
    pages = []
    for page_id in sorted(truth):
        if half is not None and half_of(page_id) != half:
            continue
        raw = gzip.decompress((corpus / "html" / f"{page_id}.html.gz").read_bytes())
        entry = truth[page_id]
        kind = entry.get("page_type") or DEFAULT_PAGE_TYPE
        html = raw.decode("utf-8", "replace")
        pages.append(Page(page_id, kind, html, entry.get("url"), entry["articleBody"]))
    return pages


def _extract(html: str, url: str | None) -> Article:
    return extract_article(html, url=url)


def trafilatura_rival() -> Rival | None:
    """trafilatura's Markdown extraction (its `output_format="markdown"`, from 1.9, default
    settings otherwise) as the rival, or None when it is not installed."""
    try:
        import trafilatura  # type: ignore[import-not-found,unused-ignore]  # optional
    except ImportError:
        return None

    def rival(html: str, url: str | None) -> str | None:
        markdown = trafilatura.extract(html, url=url, output_format="markdown")
        return markdown if isinstance(markdown, str) else None

    return rival


def score_corpus(
    corpus: Path = DEFAULT_CORPUS,
    extract: Extractor = _extract,
    *,
    repeat: int = 1,
    half: str | None = None,
    rival: Rival | None = None,
) -> CorpusScore:
    """Run `extract` over every page single-threaded and score it with the benchmark's metric.

    Only the extractor call is timed (wall clock, and this thread's CPU time); reading and
    decompressing pages is not. With `repeat` > 1 each page keeps its fastest run, as timeit
    does, to see through a busy machine; the output scored is the same on every run. A
    `rival` extractor runs on each page interleaved with ours (ours, the rival's, ours...,
    on the same string), so both see the same load; its output is scored the same way.
    """
    scores = []
    for page in load_corpus(corpus, half):
        ours, theirs = _timed_pair(extract, rival, page, max(1, repeat))
        article, wall_ms, cpu_ms = ours
        counts = compare(markdown_to_text(article.markdown), page.truth)
        rival_ms = rival_cpu_ms = None
        rival_counts = None
        if theirs is not None:
            markdown, rival_ms, rival_cpu_ms = theirs
            rival_counts = compare(markdown_to_text(markdown or ""), page.truth)
        scores.append(
            PageScore(
                page.page_id,
                page.page_type,
                *counts,
                wall_ms,
                cpu_ms,
                article.page_type,
                rival_ms=rival_ms,
                rival_cpu_ms=rival_cpu_ms,
                rival_counts=rival_counts,
            )
        )
    return summarise(scores)


class _Timing:
    """The fastest wall and CPU ms of one extractor's runs on a page, and its last result."""

    def __init__(self) -> None:
        self.wall_ms = float("inf")
        self.cpu_ms = float("inf")

    def run(self, extract: Callable[[str, str | None], T], html: str, url: str | None) -> T:
        wall, cpu = time.perf_counter(), time.thread_time()
        result = extract(html, url)
        self.cpu_ms = min(self.cpu_ms, (time.thread_time() - cpu) * 1000)
        self.wall_ms = min(self.wall_ms, (time.perf_counter() - wall) * 1000)
        return result


def _timed_pair(
    extract: Extractor, rival: Rival | None, page: Page, repeat: int
) -> tuple[tuple[Article, float, float], tuple[str | None, float, float] | None]:
    """Each extractor's result and fastest (wall, CPU) ms on `page`, run `repeat` times in
    turn (ours, the rival's, ours...) on the same string; the rival's part is None without
    a rival."""
    ours, theirs = _Timing(), _Timing()
    runs = [
        (
            ours.run(extract, page.html, page.url),
            theirs.run(rival, page.html, page.url) if rival is not None else None,
        )
        for _ in range(max(1, repeat))
    ]
    article, markdown = runs[-1]
    rival_part = (markdown, theirs.wall_ms, theirs.cpu_ms) if rival is not None else None
    return (article, ours.wall_ms, ours.cpu_ms), rival_part


def summarise(scores: Sequence[PageScore]) -> CorpusScore:
    """The corpus-level figures of `scores`: mean precision and recall, their F1, timings."""
    precisions = [s.precision for s in scores if s.precision is not None]
    recalls = [s.recall for s in scores if s.recall is not None]
    precision = statistics.fmean(precisions) if precisions else 0.0
    recall = statistics.fmean(recalls) if recalls else 0.0
    times = [s.elapsed_ms for s in scores]
    return CorpusScore(
        precision=precision,
        recall=recall,
        f1=_harmonic(precision, recall),
        mean_ms=statistics.fmean(times) if times else 0.0,
        median_ms=statistics.median(times) if times else 0.0,
        median_cpu_ms=statistics.median(s.cpu_ms for s in scores) if scores else 0.0,
        p90_ms=_percentile(times, 0.9),
        pages=tuple(scores),
    )


def _percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile of `values` (0 when empty)."""
    if not values:
        return 0.0
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, round(share * len(ranked)) - 1))]


def _harmonic(a: float, b: float) -> float:
    return 2 * a * b / (a + b) if a + b else 0.0


def report(score: CorpusScore, command: str, worst: int = 10, name: str = "corpus") -> str:
    """The human-readable summary printed by `main`: a per-type table, then the worst pages."""
    lines = [
        f"{name}: pages {len(score.pages)}  precision {score.precision:.4f}"
        f"  recall {score.recall:.4f}  F1 {score.f1:.4f}",
        f"ms/page  mean {score.mean_ms:.2f}  median {score.median_ms:.2f}"
        f"  p90 {score.p90_ms:.2f}  (median CPU {score.median_cpu_ms:.2f})",
        _rival_line(score),
        f"  {'type':<14} {'pages':>5} {'F1':>6} {'P':>6} {'R':>6} {'med ms':>7} {'p90 ms':>7}"
        "  hints right/given",
    ]
    rows = [("overall", score), *score.by_type().items()]
    for kind, part in rows:
        right, given = part.hints
        lines.append(
            f"  {kind:<14} {len(part.pages):>5} {part.f1:>6.3f} {part.precision:>6.3f}"
            f" {part.recall:>6.3f} {part.median_ms:>7.2f} {part.p90_ms:>7.2f}  {right:>5}/{given}"
        )
    lines.extend(_rival_table(score))
    lines.append(f"worst {worst} pages by F1:")
    for page in sorted(score.pages, key=lambda p: p.f1)[:worst]:
        lines.append(
            f"  {page.page_id[:16]}  {page.page_type:<13}  F1 {page.f1:.3f}"
            f"  P {page.precision or 0:.3f}  R {page.recall or 0:.3f}  {page.elapsed_ms:.1f} ms"
        )
    lines.append(f"reproduce: {command}")
    return "\n".join(lines)


def dump_corpus(corpus: Path, out: Path, half: str | None = None) -> int:
    """Write the extractor's Markdown of every page to `out/<corpus name>/<id>.md`; returns
    how many pages were written."""
    target = out / corpus.name
    target.mkdir(parents=True, exist_ok=True)
    pages = load_corpus(corpus, half)
    for page in pages:
        markdown = _extract(page.html, page.url).markdown
        (target / f"{page.page_id}.md").write_text(markdown, encoding="utf-8")
    return len(pages)


def _rival_table(score: CorpusScore) -> list[str]:
    """Ours beside the rival per page type: F1 of each, their difference, median ms of
    each, and the speed ratio (the rival's total ms over ours); empty without a rival."""
    rival = score.rival()
    if rival is None:
        return []
    lines = [
        "beside trafilatura (same pages, interleaved; speed = its total ms / ours):",
        f"  {'type':<14} {'pages':>5} {'ours F1':>8} {'traf F1':>8} {'diff':>7}"
        f" {'ours ms':>8} {'traf ms':>8} {'speed':>6}",
    ]
    theirs = {"overall": rival, **rival.by_type()}
    for kind, part in [("overall", score), *score.by_type().items()]:
        other = theirs[kind]
        speed = part.speedup
        lines.append(
            f"  {kind:<14} {len(part.pages):>5} {part.f1:>8.4f} {other.f1:>8.4f}"
            f" {part.f1 - other.f1:>+7.4f} {part.median_ms:>8.2f} {other.median_ms:>8.2f}"
            f" {speed or 0.0:>5.2f}x"
        )
    return lines


def _rival_line(score: CorpusScore) -> str:
    rival = score.rival_median_ms
    if rival is None:
        return "trafilatura: not run (not installed, or --no-rival): no comparison"
    speedup = score.speedup
    speed = f"{speedup:.2f}x" if speedup is not None else "n/a"
    cpu = score.cpu_speedup
    cpu_speed = f"{cpu:.2f}x" if cpu is not None else "n/a"
    return (
        f"trafilatura (interleaved) median ms {rival:.2f}  ours is {speed} its speed"
        f" (total ms, goal >= {SPEED_GOAL:g}x; {cpu_speed} in CPU ms)"
    )


def _ablate(corpora: Sequence[Path], half: str | None) -> None:
    from bench.extraction_ablation import ablate, ablation_report, negligible

    results = []
    for corpus in corpora:
        baseline, ablations = ablate(corpus, half)
        command = f"python bench/extraction.py --corpus {corpus} --ablate"
        print(ablation_report(corpus.name, baseline, ablations, command), end="\n\n")
        results.append(ablations)
    print("rules with no measured contribution on any page type: " + ", ".join(negligible(results)))


def main(argv: Sequence[str] | None = None) -> int:
    """Score the extractor on the corpus and print the summary; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--corpus", type=Path, nargs="*", help="corpus dirs; none given: both dev corpora"
    )
    parser.add_argument("--half", choices=HALVES, help="only the pages of this id-hash half")
    parser.add_argument("--repeat", type=int, default=1, help="time each page N times, keep best")
    parser.add_argument("--worst", type=int, default=10, help="list this many worst pages")
    parser.add_argument("--dump", type=Path, help="write each page's Markdown under DIR, no scores")
    parser.add_argument("--ablate", action="store_true", help="F1 lost with each rule off")
    parser.add_argument("--no-rival", action="store_true", help="do not run trafilatura beside")
    args = parser.parse_args(argv)
    corpora = args.corpus or [c for c in DEFAULT_CORPORA if c.is_dir()]
    if not corpora:
        print(f"no corpus found beside the clone ({CORPORA_DIR}); pass --corpus DIR")
        return 2
    half = f" --half {args.half}" if args.half else ""
    rival = None if args.no_rival else trafilatura_rival()
    if args.ablate:
        _ablate(corpora, args.half)
        return 0
    if args.dump is not None:
        for corpus in corpora:
            written = dump_corpus(corpus, args.dump, args.half)
            print(f"{corpus.name}: {written} pages written to {args.dump / corpus.name}")
        return 0
    for corpus in corpora:
        command = f"python bench/extraction.py --corpus {corpus}{half} --repeat {args.repeat}"
        score = score_corpus(corpus, repeat=args.repeat, half=args.half, rival=rival)
        print(report(score, command, args.worst, name=corpus.name), end="\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

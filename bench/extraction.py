"""Benchmark of the readable-content extractor on the article-extraction dev corpus.

Run from the repository root::

    python bench/extraction.py [--corpus DIR] [--repeat N]

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
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/extraction.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from specialists.web.extract import extract_article  # noqa: E402

DEFAULT_CORPUS = REPO_ROOT.parent / "shared" / "corpus" / "extraction-dev"
SHINGLE_SIZE = 4  # the benchmark's n-gram size

_TOKEN = re.compile(r"\w+")
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_LEADING_TITLE = re.compile(r"\A\s*# [^\n]*\n?")

Extractor = Callable[[str, str | None], str]


@dataclass(frozen=True)
class PageScore:
    """One page's id in the corpus, its shingle overlap, and the extractor's wall and CPU ms."""

    page_id: str
    true_positive: int
    false_positive: int
    false_negative: int
    elapsed_ms: float
    cpu_ms: float

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
    pages: tuple[PageScore, ...]


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


def load_corpus(corpus: Path) -> list[tuple[str, str, str | None, str]]:
    """(id, html, url, truth) for every page of the corpus, in id order."""
    truth = json.loads((corpus / "ground-truth.json").read_text(encoding="utf-8"))
    pages = []
    for page_id in sorted(truth):
        raw = gzip.decompress((corpus / "html" / f"{page_id}.html.gz").read_bytes())
        entry = truth[page_id]
        pages.append((page_id, raw.decode("utf-8", "replace"), entry["url"], entry["articleBody"]))
    return pages


def _extract_markdown(html: str, url: str | None) -> str:
    return extract_article(html, url=url).markdown


def score_corpus(
    corpus: Path = DEFAULT_CORPUS, extract: Extractor = _extract_markdown, *, repeat: int = 1
) -> CorpusScore:
    """Run `extract` over every page single-threaded and score it with the benchmark's metric.

    Only the extractor call is timed (wall clock, and this thread's CPU time); reading and
    decompressing pages is not. With `repeat` > 1 each page keeps its fastest run, as timeit
    does, to see through a busy machine; the output scored is the same on every run.
    """
    scores = []
    for page_id, html, url, truth in load_corpus(corpus):
        markdown, wall_ms, cpu_ms = _timed(extract, html, url, max(1, repeat))
        counts = compare(markdown_to_text(markdown), truth)
        scores.append(PageScore(page_id, *counts, wall_ms, cpu_ms))
    return _summarise(scores)


def _timed(extract: Extractor, html: str, url: str | None, repeat: int) -> tuple[str, float, float]:
    best_wall = best_cpu = float("inf")
    markdown = ""
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.thread_time()
        markdown = extract(html, url)
        best_cpu = min(best_cpu, (time.thread_time() - cpu) * 1000)
        best_wall = min(best_wall, (time.perf_counter() - wall) * 1000)
    return markdown, best_wall, best_cpu


def _summarise(scores: Sequence[PageScore]) -> CorpusScore:
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
        pages=tuple(scores),
    )


def _harmonic(a: float, b: float) -> float:
    return 2 * a * b / (a + b) if a + b else 0.0


def report(score: CorpusScore, command: str, worst: int = 10) -> str:
    """The human-readable summary printed by `main`."""
    lines = [
        f"pages {len(score.pages)}  precision {score.precision:.4f}  recall {score.recall:.4f}"
        f"  F1 {score.f1:.4f}",
        f"ms/page  mean {score.mean_ms:.2f}  median {score.median_ms:.2f}"
        f"  (median CPU {score.median_cpu_ms:.2f})",
        f"worst {worst} pages by F1:",
    ]
    for page in sorted(score.pages, key=lambda p: p.f1)[:worst]:
        lines.append(
            f"  {page.page_id[:16]}  F1 {page.f1:.3f}  P {page.precision or 0:.3f}"
            f"  R {page.recall or 0:.3f}  {page.elapsed_ms:.1f} ms"
        )
    lines.append(f"reproduce: {command}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Score the extractor on the corpus and print the summary; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--repeat", type=int, default=1, help="time each page N times, keep best")
    args = parser.parse_args(argv)
    command = f"python bench/extraction.py --corpus {args.corpus} --repeat {args.repeat}"
    print(report(score_corpus(args.corpus, repeat=args.repeat), command))
    return 0


if __name__ == "__main__":
    sys.exit(main())

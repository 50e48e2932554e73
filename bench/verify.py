"""What checking a bullet's quote costs, against what extracting its page costs (issue 29).

Run from the repository root::

    python bench/verify.py [--quick] [--bullets N] [--repeat N] [--corpus DIR]

For each page of the Zyte extraction dev corpus (`../shared/corpus/extraction-dev`; `--quick`
takes the first 12), the page is extracted to Markdown (``extract_article``, the anchor), the
extractive summariser picks `--bullets` sentences, and their quotes are located in the
Markdown as summarize and research locate them: the text folded once (``quotes.fold``), then
each quote found (``quotes.locate``). Half the quotes are given as a model would retype them
(curly quotes for straight ones, a line break for a space), so the folding is paid for.
Times are this process's CPU time (``time.process_time``: other engineers' load on the
machine does not count), the best of `--repeat` runs per page.

It prints one line per measure, tab-separated::

    measure  value  anchor  ratio  goal

`verify_us_per_bullet` is the CPU µs to check one bullet (the fold shared among the page's
bullets), its anchor the CPU µs to extract the page, the ratio the check of all the page's
bullets over that extraction, summed over pages, and the goal a tenth: checking every bullet
costs under a tenth of reading the page. `fold_us_per_page` and `locate_us_per_quote` split it;
`quotes_found` is the share of the summariser's quotes found (goal: all).

`--crafted` measures instead what a hostile page costs: each crafted text of 1 MB (runs of
``[``, ``![``, ``](``, ``[a](``, mixed brackets, ``–a``) and a 5 MB one folded, in CPU µs per
MB with the tracemalloc peak in bytes per input character; the anchor is the same text size
of plain prose, folded in the same run, so the ratio is the crafted page's cost over an
ordinary page's (goal: a small constant, not growing with the size); the peak's anchor is
the crafted text's own size in memory::

    python bench/verify.py --crafted
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/verify.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from specialists.extract import extract_article  # noqa: E402
from specialists.web.pages.quotes import fold, locate  # noqa: E402
from specialists.web.pages.summarize import own_words, summarize_extractive  # noqa: E402

DEFAULT_CORPUS = REPO_ROOT.parent / "shared" / "corpus" / "extraction-dev"
QUICK_PAGES = 12
GOAL_RATIO = 0.1  # checking a page's bullets should cost under a tenth of extracting it


@dataclass(frozen=True)
class PageCost:
    """One page's CPU µs: extraction, fold, all its quotes located; and quotes found."""

    extract_us: float
    fold_us: float
    locate_us: float
    quotes: int
    found: int


def retyped(quote: str) -> str:
    """``quote`` as a model might write it back: curly quotes, a line break for a space."""
    curly = quote.replace("'", "’").replace('"', "“")
    return curly.replace(" ", "\n", 1)


def best_us(work: Callable[[], object], repeat: int) -> float:
    """The least CPU µs ``work`` took over ``repeat`` runs."""
    best = float("inf")
    for _ in range(repeat):
        began = time.process_time()
        work()
        best = min(best, (time.process_time() - began) * 1e6)
    return best


def measure_page(html: str, bullets: int, repeat: int) -> PageCost | None:
    """The costs of one page, or None when its Markdown yields no bullet."""
    markdown = extract_article(html).markdown
    summary = summarize_extractive(markdown, bullets)
    if not summary:
        return None
    quotes = [own_words(b) if n % 2 else retyped(own_words(b)) for n, b in enumerate(summary)]
    folded = fold(markdown)
    found = sum(locate(folded, quote) is not None for quote in quotes)
    return PageCost(
        extract_us=best_us(lambda: extract_article(html), repeat),
        fold_us=best_us(lambda: fold(markdown), repeat),
        locate_us=best_us(lambda: [locate(folded, quote) for quote in quotes], repeat),
        quotes=len(quotes),
        found=found,
    )


def measure(corpus: Path, *, pages: int | None, bullets: int, repeat: int) -> list[PageCost]:
    """Each page's costs, in file name order."""
    files = sorted((corpus / "html").glob("*.html.gz"))[:pages]
    costs = [measure_page(gzip.decompress(f.read_bytes()).decode(), bullets, repeat) for f in files]
    return [cost for cost in costs if cost is not None]


def lines(costs: list[PageCost]) -> list[str]:
    """The ``measure value anchor ratio goal`` lines of the costs."""
    quotes = sum(c.quotes for c in costs)
    extract = sum(c.extract_us for c in costs)
    checking = sum(c.fold_us + c.locate_us for c in costs)
    per_page_extract = extract / len(costs)
    rows = [
        ("verify_us_per_bullet", checking / quotes, per_page_extract, checking / extract),
        ("fold_us_per_page", sum(c.fold_us for c in costs) / len(costs), per_page_extract, None),
        ("locate_us_per_quote", sum(c.locate_us for c in costs) / quotes, per_page_extract, None),
    ]
    out = [
        f"{name}\t{value:.1f}\textract_us_per_page={anchor:.1f}\t"
        f"{'' if ratio is None else f'{ratio:.4f}'}\t{f'<={GOAL_RATIO}' if ratio else ''}"
        for name, value, anchor, ratio in rows
    ]
    found = sum(c.found for c in costs)
    out.append(f"quotes_found\t{found}\tquotes={quotes}\t{found / quotes:.4f}\t>=1.0")
    return out


PROSE = "The North Sea has two high tides every day, about twelve hours apart. "
CRAFTED = {
    "open": "[",
    "image": "![",
    "close": "](",
    "link_open": "[a](",
    "mixed": "[![](a](x]",
    "dash": "\u2013a",
}
CRAFTED_GOAL = 10.0  # a crafted MB may cost a few ordinary ones, never a quadratic amount


def text_of(unit: str, chars: int) -> str:
    """``unit`` repeated to ``chars`` characters."""
    return (unit * (chars // len(unit) + 1))[:chars]


def fold_cost(text: str, repeat: int) -> tuple[float, int]:
    """(least CPU µs to fold ``text``, tracemalloc peak bytes of one fold)."""
    cpu = best_us(lambda: fold(text), repeat)
    tracemalloc.start()
    try:
        fold(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return cpu, peak


def crafted_lines(repeat: int) -> list[str]:
    """``measure value anchor ratio goal`` lines for the crafted pages: CPU against prose
    of the same size, memory against the crafted text's own size."""
    out = []
    for size in (1_000_000, 5_000_000):
        anchor_us, _ = fold_cost(text_of(PROSE, size), repeat)
        units = CRAFTED.items() if size == 1_000_000 else [("mixed", CRAFTED["mixed"])]
        for name, unit in units:
            text = text_of(unit, size)
            cpu_us, peak = fold_cost(text, repeat)
            own = sys.getsizeof(text)
            mb = size / 1_000_000
            out.append(
                f"fold_{name}_{mb:g}MB_cpu_us_per_MB\t{cpu_us / mb:.0f}\t"
                f"prose={anchor_us / mb:.0f}\t{cpu_us / anchor_us:.2f}\t<={CRAFTED_GOAL:g}"
            )
            out.append(
                f"fold_{name}_{mb:g}MB_peak_bytes_per_char\t{peak / size:.1f}\t"
                f"text_bytes_per_char={own / size:.1f}\t{peak / own:.2f}\t<={CRAFTED_GOAL:g}"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_PAGES} pages")
    parser.add_argument("--bullets", type=int, default=5, help="bullets per page (default 5)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per page, best kept")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--crafted", action="store_true", help="hostile 1 MB and 5 MB texts")
    args = parser.parse_args()
    if args.crafted:
        print("measure\tvalue\tanchor\tratio\tgoal")
        for line in crafted_lines(args.repeat):
            print(line)
        print(f"reproduce: python bench/verify.py --crafted --repeat {args.repeat}")
        return
    pages = QUICK_PAGES if args.quick else None
    costs = measure(args.corpus, pages=pages, bullets=args.bullets, repeat=args.repeat)
    print("measure\tvalue\tanchor\tratio\tgoal")
    for line in lines(costs):
        print(line)
    quick = " --quick" if args.quick else ""
    print(
        f"reproduce: python bench/verify.py{quick} --bullets {args.bullets} --repeat {args.repeat}"
    )


if __name__ == "__main__":
    main()

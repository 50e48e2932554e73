"""Pages with one main body (service and landing pages, product pages, documentation):
the rules that keep all of their sections and leave out what sells other things.

Each test is a small hand-made page showing one general page shape (never one site's markup).
"""

from __future__ import annotations

from specialists.web.extract import extract_article
from specialists.web.extract._attrs import names_chrome

SECTIONS = [
    "Our team plans the whole project with you, from the first survey of the site to the "
    "handover, and keeps one person as your contact from start to finish.",
    "We install heat pumps, boilers and solar panels, and we service every system we fit, "
    "so a single call covers the yearly check and any repair that comes up.",
    "Every quote is fixed before work starts: you pay what was agreed, and any change on "
    "site is priced and signed off by you before anyone picks up a tool.",
    "Financing over five or ten years is available on installations above a modest sum, "
    "with no fee for paying the balance early if your plans change later.",
    "Most installations take two days; we protect floors and furniture, remove the old "
    "equipment and leave the rooms as clean as we found them.",
]


def test_letters_glued_after_a_digit_in_a_generated_class_name_are_no_chrome_word() -> None:
    assert not names_chrome("jxk9ad-smkayb")
    assert not names_chrome("css-1ad3f4 wrapper")
    assert all(map(names_chrome, ["ad-slot", "ad1", "sidebar1", "top-ad", "col-2 sidebar"]))


def test_sections_in_generated_class_names_are_all_kept() -> None:
    body = "".join(
        f"<div class='hq{n}ad-smk'><h2>Section {n}</h2><p>{text}</p></div>"
        for n, text in enumerate(SECTIONS)
    )
    html = f"<html><body><div class='page'>{body}</div></body></html>"
    markdown = extract_article(html, url="https://service.example/").markdown
    assert all(text in markdown for text in SECTIONS)


def test_a_node_marked_promoted_is_the_article_not_a_promotion() -> None:
    assert not names_chrome("node node--type-recipe node--promoted node--view-mode-full")
    assert all(map(names_chrome, ["promo-box", "promotion", "sidebar-promo"]))


def test_an_article_marked_promoted_is_kept_beside_a_large_menu() -> None:
    menu = "".join(f"<li><a href='/c/{n}'>Recipe category number {n}</a></li>" for n in range(300))
    prose = "".join(f"<p>{text}</p>" for text in SECTIONS)
    html = (
        f"<html><body><nav><ul>{menu}</ul></nav><main>"
        f"<div class='node node--promoted'>{prose}</div></main></body></html>"
    )
    markdown = extract_article(html, url="https://recipes.example/r/1").markdown
    assert all(text in markdown for text in SECTIONS)

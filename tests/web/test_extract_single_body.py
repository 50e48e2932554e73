"""Pages with one main body (service and landing pages, product pages, documentation):
the rules that keep all of their sections and leave out what sells other things.

Each test is a small hand-made page showing one general page shape (never one site's markup).
"""

from __future__ import annotations

import pytest

from specialists.extract import extract_article
from specialists.extract._attrs import names_chrome

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


DESCRIPTION = (
    "A wheel-thrown stoneware mug with a matte speckled glaze, made by hand in small "
    "batches; each one differs a little in its colour and in the shape of its handle."
)
CARE = (
    "Safe in the dishwasher and the microwave; avoid sudden changes of temperature, and "
    "take care when stacking it with other ceramics, which can chip the unglazed foot."
)
SIGN_UP = (
    "Join our list and take ten percent off your first order, plus early access to new "
    "collections and the odd invitation to our studio sales throughout the year."
)


def _product_page(panels: str, *, declared: bool = True) -> str:
    meta = "<meta property='og:type' content='product'>" if declared else ""
    return (
        f"<html><head>{meta}</head><body><main><h1>Speckle mug</h1><p>$60.00</p>"
        f"<button>Description</button>{panels}</main></body></html>"
    )


def test_a_product_description_in_a_drawer_or_modal_is_the_product_text() -> None:
    panels = (
        f"<aside class='sheet'><h2>Description</h2><p>{DESCRIPTION}</p></aside>"
        "<div class='product-details-modal'><div class='product-details-modal__container'>"
        f"<p class='product-details-modal__paragraph'>{CARE}</p></div></div>"
        f"<div role='dialog' class='newsletter-popup'><p>{SIGN_UP}</p></div>"
    )
    markdown = extract_article(_product_page(panels), url="https://shop.example/p/1").markdown
    assert DESCRIPTION in markdown
    assert CARE in markdown
    assert "ten percent" not in markdown


def test_a_drawer_on_a_page_not_declaring_a_product_stays_out() -> None:
    panels = f"<aside class='sheet'><h2>Description</h2><p>{DESCRIPTION}</p></aside>"
    html = _product_page(panels, declared=False).replace("$60.00", SECTIONS[0])
    markdown = extract_article(html, url="https://shop.example/p/1").markdown
    assert SECTIONS[0] in markdown
    assert DESCRIPTION not in markdown


def test_a_utility_class_arbitrary_value_is_css_not_a_chrome_name() -> None:
    assert not names_chrome("stack lg:first:pt-[calc(var(--banner-min-height))]")
    assert not names_chrome("lg:first:has-[>[data-slot=banner]]:pt-0")
    assert all(map(names_chrome, ["md:sidebar-open", "banner-ad", "pt-[2px] sidebar"]))


def test_sections_styled_by_arbitrary_value_classes_are_kept() -> None:
    body = "".join(
        f"<section class='grid pt-[calc(var(--banner-height))]'><h2>Part {n}</h2><p>{text}</p>"
        "</section>"
        for n, text in enumerate(SECTIONS)
    )
    html = f"<html><body><main>{body}</main></body></html>"
    markdown = extract_article(html, url="https://service.example/").markdown
    assert all(text in markdown for text in SECTIONS)


def test_an_accordion_marked_as_a_multiselectable_tablist_is_content() -> None:
    panels = "".join(
        f"<div class='panel'><h3 role='tab'>Question {n}</h3>"
        f"<div role='tabpanel'><p>{text}</p></div></div>"
        for n, text in enumerate(SECTIONS[3:])
    )
    intro = "".join(f"<p>{text}</p>" for text in SECTIONS[:3])
    html = (
        f"<html><body><main>{intro}<div role='tablist' aria-multiselectable='true'>{panels}"
        "</div><ul role='tablist'><li role='tab'>Overview</li><li role='tab'>Prices</li></ul>"
        "</main></body></html>"
    )
    markdown = extract_article(html, url="https://service.example/").markdown
    assert all(text in markdown for text in SECTIONS)
    assert "Prices" not in markdown


STORY = [
    "The council met on Tuesday, after a week of delays, to vote on the new budget, which "
    "cuts road repairs, raises parking fees, and funds two more buses for the east side.",
    "Residents who spoke, most of them from the east side, welcomed the buses, but several "
    "asked why the repairs, promised last year, had been pushed back again, and by how long.",
]
ABOUT = [
    "The Town Gazette is published by a small team of volunteers who live in the town and "
    "have reported on its council meetings and its schools for more than twenty years now.",
    "Our office is open on weekday mornings in the old library building on the main square "
    "where readers can drop off letters and notices for the weekly print edition of the paper.",
    "We rely on readers for support and accept no advertising from political parties or any "
    "groups that campaign in local elections, and we publish our accounts every single year.",
]


@pytest.mark.parametrize("frame", ["main", "article"])
def test_a_small_pick_inside_main_or_article_does_not_spread_past_it(frame: str) -> None:
    about = "".join(f"<p>{text}</p>" for text in ABOUT)
    story = "".join(f"<p>{text}</p>" for text in STORY)
    html = (
        f"<html><body><div class='site-intro'>{about}</div>"
        f"<{frame}><div class='story'>{story}</div></{frame}></body></html>"
    )
    markdown = extract_article(html, url="https://gazette.example/council").markdown
    assert all(text in markdown for text in STORY)
    assert not any(text in markdown for text in ABOUT)


def test_a_tablist_holding_its_tab_panels_is_content() -> None:
    panels = "".join(
        f"<button role='tab'>Tab {n}</button><div role='tabpanel'><p>{text}</p></div>"
        for n, text in enumerate(SECTIONS[3:])
    )
    intro = "".join(f"<p>{text}</p>" for text in SECTIONS[:3])
    html = (
        f"<html><body><main>{intro}<div class='tabs' role='tablist'>{panels}</div>"
        "<ul role='tablist'><li role='tab'>Overview</li><li role='tab'>Prices</li></ul>"
        "</main></body></html>"
    )
    markdown = extract_article(html, url="https://shop.example/p/2").markdown
    assert all(text in markdown for text in SECTIONS)
    assert "Prices" not in markdown


def test_a_linked_heading_over_its_own_description_is_a_card_title_and_kept() -> None:
    cards = "".join(
        f"<div class='card'><h2><a href='/docs/part-{n}'>Part {n} of the guide</a></h2>"
        f"<div class='lead'><p>{text}</p></div></div>"
        for n, text in enumerate(SECTIONS)
    )
    more = "".join(f"<li><a href='/news/{n}'>Another story number {n}</a></li>" for n in range(4))
    html = (
        f"<html><body><main><p>{STORY[0]}</p>{cards}"
        f"<h3><a href='/news'>More news from the site</a></h3><ul>{more}</ul></main></body></html>"
    )
    markdown = extract_article(html, url="https://docs.example/guide").markdown
    assert all(f"[Part {n} of the guide]" in markdown for n in range(len(SECTIONS)))
    assert all(text in markdown for text in SECTIONS)
    assert "More news" not in markdown


def test_shop_interface_labels_between_a_products_paragraphs_are_left_out() -> None:
    labels = ["In stock", "Add to cart", "Quantity", "Select a size", "Add to wishlist"]
    buttons = "".join(f"<div class='buy'>{label}</div>" for label in labels)
    html = (
        "<html><head><meta property='og:type' content='product'></head><body><main>"
        f"<h1>Speckle mug</h1><p>{DESCRIPTION}</p>{buttons}<p>{CARE}</p></main></body></html>"
    )
    markdown = extract_article(html, url="https://shop.example/p/1").markdown
    assert DESCRIPTION in markdown
    assert CARE in markdown
    assert not any(label in markdown for label in labels)


def test_numbered_sections_beside_the_picked_one_join_it() -> None:
    intro = (
        "Physical activity has a long history as a remedy, and this short opening section "
        "says why the review was written and what it covers"
    )
    body = "".join(
        f"<p>{text} It was measured, compared, and checked again, in {n} trials.</p>"
        for n, text in enumerate(SECTIONS + STORY)
    )
    html = (
        "<html><body><div class='paper'>"
        f"<section class='sec1'><h2>Introduction</h2><p>{intro}</p></section>"
        f"<section class='sec2'><h2>Review</h2>{body}</section>"
        "</div></body></html>"
    )
    markdown = extract_article(html, url="https://journal.example/a/1").markdown
    assert intro in markdown
    assert all(text in markdown for text in SECTIONS)


def test_a_link_list_introduced_by_a_colon_is_part_of_the_text() -> None:
    tools = "".join(f"<li><a href='/tools/{n}'>Planning tool number {n}</a></li>" for n in range(4))
    more = "".join(f"<li><a href='/news/{n}'>Another story number {n}</a></li>" for n in range(4))
    html = (
        f"<html><body><main><p>{STORY[0]}</p><p>{STORY[1]}</p>"
        f"<p>The council published the tools it used:</p><ul>{tools}</ul>"
        f"<p>{SECTIONS[0]}</p><ul>{more}</ul></main></body></html>"
    )
    markdown = extract_article(html, url="https://gazette.example/council").markdown
    assert all(f"Planning tool number {n}" in markdown for n in range(4))
    assert "Another story" not in markdown


def test_a_hero_word_inside_a_run_together_class_name_vetoes_its_banner() -> None:
    assert not names_chrome("pageherobanner")
    assert names_chrome("pagebanner")


def test_a_drawer_named_for_the_description_by_its_class_is_the_product_text() -> None:
    panels = f"<aside class='description-drawer'><p>{DESCRIPTION}</p></aside>"
    markdown = extract_article(_product_page(panels), url="https://shop.example/p/1").markdown
    assert DESCRIPTION in markdown


def test_a_pick_in_one_of_several_similar_page_sections_widens_to_all_of_them() -> None:
    long_part = "".join(f"<p>{text}</p>" for text in [*STORY, *SECTIONS[:2]])
    parts = [("intro", long_part)] + [
        (name, f"<p>{text}</p>")
        for name, text in zip(("offer", "pricing", "visit"), SECTIONS[2:], strict=True)
    ]
    body = "".join(
        f"<section class='block {name}'><div class='row'><div class='column'>"
        f"<h2>{name.title()}</h2><div class='module'>{inner}</div></div></div></section>"
        for name, inner in parts
    )
    html = f"<html><body><div class='layout'>{body}</div></body></html>"
    markdown = extract_article(html, url="https://service.example/").markdown
    assert all(text in markdown for text in [*STORY, *SECTIONS])


def test_a_pick_naming_itself_the_article_stays_among_similar_sections() -> None:
    story = "".join(f"<p>{text}</p>" for text in [*STORY, *SECTIONS[:2]])
    others = "".join(
        f"<section class='block'><h2>Shop {n}</h2><p>{text}</p></section>"
        for n, text in enumerate(SECTIONS[2:])
    )
    html = (
        "<html><body><div class='page'><section class='block'>"
        f"<div class='article-content'>{story}</div></section>{others}</div></body></html>"
    )
    markdown = extract_article(html, url="https://shop.example/blog/1").markdown
    assert all(text in markdown for text in STORY)
    assert not any(text in markdown for text in SECTIONS[2:])

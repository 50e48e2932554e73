"""Product carousels: on a page declaring one product, a row of priced link cards (other
products, bundles, other colours) is left out; on other pages, or with fewer cards, it stays.

Each test is a small hand-made page showing one general page shape (never one site's markup).
"""

from __future__ import annotations

from specialists.extract import extract_article
from specialists.extract._hints import PRICE
from specialists.extract._repeat import MIN_ITEMS

DESCRIPTION = [
    "This travel mug keeps coffee hot for six hours and cold drinks cold for a whole day, "
    "thanks to a double wall of steel with a vacuum between the two layers.",
    "The lid seals with a quarter turn, opens with one hand, and comes apart for cleaning, "
    "so no coffee is left to go stale in a corner you cannot reach.",
    "Every mug is tested for leaks before it leaves the factory and carries a lifetime "
    "warranty against dents, rust and a lid that no longer closes.",
]
PRODUCT_HEAD = '<head><meta property="og:type" content="product"></head>'


def _page(cards: int, *, head: str = PRODUCT_HEAD) -> str:
    row = "".join(
        f"<div class='card'><a href='/p/{n}'><img src='/i/{n}.jpg' alt=''></a>"
        f"<h3>Camp cup model {n}</h3><p>Steel cup</p><span>${20 + n}.00</span></div>"
        for n in range(cards)
    )
    prose = "".join(f"<p>{text}</p>" for text in DESCRIPTION)
    return (
        f"<html>{head}<body><main><div class='product'><h1>Travel mug</h1>"
        f"<span class='price'>$35.00</span>{prose}"
        f"<div class='grid'>{row}</div></div></main></body></html>"
    )


def test_a_row_of_priced_link_cards_on_a_product_page_is_left_out() -> None:
    markdown = extract_article(_page(MIN_ITEMS), url="https://shop.example/p/mug").markdown
    assert all(text in markdown for text in DESCRIPTION)
    assert "Camp cup" not in markdown


def test_fewer_priced_cards_than_a_run_are_kept_as_part_of_the_product() -> None:
    markdown = extract_article(_page(MIN_ITEMS - 1), url="https://shop.example/p/mug").markdown
    assert all(text in markdown for text in DESCRIPTION)
    assert "Camp cup model 0" in markdown


def test_priced_cards_stay_on_a_page_that_does_not_declare_one_product() -> None:
    html = _page(MIN_ITEMS, head="<head><title>Mugs</title></head>")
    markdown = extract_article(html, url="https://shop.example/mugs").markdown
    assert "Camp cup model 0" in markdown


def test_a_card_without_a_price_is_not_a_product_card() -> None:
    html = _page(MIN_ITEMS).replace("<span>$20.00</span>", "<span>New</span>")
    markdown = extract_article(html, url="https://shop.example/p/mug").markdown
    assert "Camp cup model 0" in markdown


def test_prices_are_a_currency_sign_before_or_a_currency_code_after_an_amount() -> None:
    signs = ("$99", "€ 1.299,00", "£5", "12 €", "₹40", "¥800", "99 kr", "10 zł", "250 Kč")
    codes = ("76 USD", "1,299.00 EUR", "10 CHF", "500 JPY")
    for text in signs + codes:
        assert PRICE.search(text), text
    for text in ("99 bottles", "USD", "USD 5", "model 3", "2024", "3 kraken", "5 eurovision"):
        assert not PRICE.search(text), text


def test_a_section_under_a_featured_heading_is_left_out_with_its_heading() -> None:
    others = "".join(
        f"<div><p>Camp cup model {n}, a steel cup for the trail that nests over a bottle.</p></div>"
        for n in range(3)
    )
    prose = "".join(f"<p>{text}</p>" for text in DESCRIPTION)
    html = (
        f"<html><body><main><div class='product'>{prose}"
        f"<section><h2>Featured products</h2>{others}</section>"
        f"<p>{DESCRIPTION[0][::-1]}</p></div></main></body></html>"
    )
    markdown = extract_article(html, url="https://shop.example/p/mug").markdown
    assert all(text in markdown for text in DESCRIPTION)
    assert "Featured products" not in markdown
    assert "Camp cup" not in markdown


def test_review_widget_labels_are_interface_not_content() -> None:
    review = "Holds heat all morning on my commute and has never leaked in my bag, great buy."
    labels = "".join(
        f"<div>{label}</div>"
        for label in ("Write a review", "Verified Buyer", "Skip to product information")
    )
    prose = "".join(f"<p>{text}</p>" for text in DESCRIPTION)
    html = (
        f"<html><body><main><div class='product'>{prose}{labels}"
        f"<p>{review}</p></div></main></body></html>"
    )
    markdown = extract_article(html, url="https://shop.example/p/mug").markdown
    assert all(text in markdown for text in [*DESCRIPTION, review])
    for label in ("Write a review", "Verified Buyer", "Skip to product"):
        assert label not in markdown

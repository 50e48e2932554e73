"""fetch decodes pages in any charset as browsers do (issue 24, WHATWG): a BOM, then the HTTP
charset, then a <meta> in the first 1,024 bytes, then detection on undeclared bytes; a
declaration, even a wrong one, is never overridden by detection. Real text in each language,
served by the local HTTPS origin."""

from __future__ import annotations

import codecs
import unicodedata

import pytest

from csp_web.net.charset import MIN_DETECT_HIGH_BYTES, MIN_REREAD_HIGH_BYTES, decode_body, garbled
from protocol import Status
from specialists.web import WEB
from tests.net._origin import Origin
from tests.web.conftest import DispatcherFactory
from tests.web.pages_support import fetch, serve

# (Python codec, the label a page would declare, a few sentences in the language).
TEXTS = (
    (
        "cp1251",
        "windows-1251",
        "Санкт-Петербург основан Петром Первым в 1703 году. Город стоит на берегах Невы, у "
        "Финского залива. Летом здесь бывают белые ночи, когда солнце почти не заходит.",
    ),
    (
        "shift_jis",
        "Shift_JIS",
        "東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。春には桜が咲き、"
        "多くの人々が公園で花見を楽しみます。電車はとても正確に運行されています。",
    ),
    (
        "gb18030",
        "GB18030",
        "长城是中国古代的军事防御工程，绵延数千公里。每年有许多游客前来参观，欣赏壮丽的山景。"
        "北京附近的八达岭是最著名的一段。",
    ),
    (
        "euc_kr",
        "EUC-KR",
        "서울은 대한민국의 수도이며 한강이 도시를 가로질러 흐릅니다. 봄에는 벚꽃이 피고 "
        "가을에는 단풍이 아름답습니다. 지하철은 빠르고 깨끗합니다.",
    ),
    (
        "iso8859_2",
        "ISO-8859-2",
        "Kraków leży nad Wisłą i jest jednym z najstarszych miast w Polsce. Na Rynku Głównym "
        "stoją Sukiennice, a z wieży Mariackiej co godzinę słychać hejnał. Zimą ulice pachną "
        "grzanym winem i pieczonymi kasztanami.",
    ),
    (
        "cp1252",
        "windows-1252",
        "Le château de Versailles fut construit sous Louis XIV. Les jardins, dessinés par "
        "André Le Nôtre, s’étendent sur des kilomètres. « C’est magnifique », disent les "
        "visiteurs émerveillés.",
    ),
)
IDS = [codec for codec, _, _ in TEXTS]


def page(text: str, meta: str = "") -> str:
    return (
        f"<!doctype html><html><head>{meta}<title>Page</title></head><body><article>"
        f"<h1>Page</h1><p>{text}</p></article></body></html>"
    )


@pytest.mark.parametrize(("codec", "label", "text"), TEXTS, ids=IDS)
async def test_a_page_declared_in_its_http_charset_reads_as_written(
    make_dispatcher: DispatcherFactory, origin: Origin, codec: str, label: str, text: str
) -> None:
    url = serve(origin, "/p", page(text).encode(codec), f"text/html; charset={label}")
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert (reply.status, reply.get("DATA")) == (Status.OK, f"# Page\n\n{text}")


@pytest.mark.parametrize(("codec", "label", "text"), TEXTS, ids=IDS)
async def test_a_page_declared_only_in_a_meta_charset_reads_as_written(
    make_dispatcher: DispatcherFactory, origin: Origin, codec: str, label: str, text: str
) -> None:
    body = page(text, f'<meta charset="{label}">').encode(codec)
    url = serve(origin, "/p", body, "text/html")
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert reply.get("DATA") == f"# Page\n\n{text}"


@pytest.mark.parametrize(("codec", "label", "text"), TEXTS, ids=IDS)
async def test_an_undeclared_page_is_detected_and_reads_as_written(
    make_dispatcher: DispatcherFactory, origin: Origin, codec: str, label: str, text: str
) -> None:
    url = serve(origin, "/p", page(text).encode(codec), "text/html")
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert reply.get("DATA") == f"# Page\n\n{text}"


@pytest.mark.parametrize(("codec", "label", "text"), TEXTS[:4], ids=IDS[:4])
async def test_a_wrong_declaration_is_obeyed_not_outvoted_by_detection(
    make_dispatcher: DispatcherFactory, origin: Origin, codec: str, label: str, text: str
) -> None:
    """The page says windows-1252 and is not: it reads as windows-1252 would, as a browser
    shows it (detection that outvotes a page's own word is a spoofing lever)."""
    body = page(text).encode(codec)
    url = serve(origin, "/p", body, "text/html; charset=windows-1252")
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    misread = text.encode(codec).decode("cp1252", errors="replace")
    # As any text is read: soft hyphens (U+00AD, a byte 0xAD misread) dropped, then NFC.
    readable = unicodedata.normalize("NFC", misread.replace("\u00ad", ""))
    assert reply.get("DATA") == f"# Page\n\n{' '.join(readable.split())}"


async def test_a_wrong_meta_is_obeyed_too(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    _, _, text = TEXTS[0]
    body = page(text, '<meta charset="koi8-r">').encode("cp1251")
    url = serve(origin, "/p", body, "text/html")
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert reply.get("DATA") == f"# Page\n\n{text.encode('cp1251').decode('koi8-r')}"


async def test_a_byte_order_mark_wins_over_the_http_charset(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    _, _, text = TEXTS[1]
    body = codecs.BOM_UTF8 + page(text).encode("utf-8")
    url = serve(origin, "/p", body, "text/html; charset=Shift_JIS")
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert reply.get("DATA") == f"# Page\n\n{text}"


async def test_a_latin1_label_means_windows_1252_as_on_the_web(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """WHATWG: iso-8859-1 is windows-1252, so its curly quotes (0x92) are not C1 controls."""
    _, _, text = TEXTS[5]
    url = serve(origin, "/p", page(text).encode("cp1252"), "text/html; charset=iso-8859-1")
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert reply.get("DATA") == f"# Page\n\n{text}"


@pytest.mark.parametrize(("codec", "label", "text"), TEXTS[:4], ids=IDS[:4])
async def test_a_page_its_utf_8_label_cannot_read_is_detected_and_reads_as_written(
    make_dispatcher: DispatcherFactory, origin: Origin, codec: str, label: str, text: str
) -> None:
    """windows-1251, Shift_JIS, GB18030 and EUC-KR bytes labelled UTF-8 decode to mostly
    U+FFFD: the label is proved wrong by its own bytes, so detection reads the page."""
    url = serve(origin, "/p", page(text).encode(codec), "text/html; charset=utf-8")
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert (reply.status, reply.get("DATA")) == (Status.OK, f"# Page\n\n{text}")
    assert reply.get("WORD_COUNT") != "0"


async def test_a_short_latin_1_text_labelled_utf_8_keeps_its_visible_damage(
    make_dispatcher: DispatcherFactory, origin: Origin
) -> None:
    """Twelve accented letters say too little for detection (it picks a Central European code
    page: "naďve"): U+FFFD shows the damage where wrong letters would hide it."""
    text = "café naïve résumé words words words. " * 3
    url = serve(origin, "/p", page(text).encode("latin-1"), "text/html; charset=utf-8")
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    data = reply.get("DATA") or ""
    assert data.count("\ufffd") == 12
    assert "ď" not in data


@pytest.mark.parametrize(
    ("codec", "text"),
    [
        ("cp1252", TEXTS[5][2] * 4),  # Latin letters: detection is no better than chance
        ("iso8859_2", TEXTS[4][2] * 4),
        ("cp1251", TEXTS[0][2][:20]),  # a non-Latin script, but too few bytes to tell
    ],
    ids=["french", "polish", "short_cyrillic"],
)
def test_detection_does_not_reread_latin_text_or_too_few_bytes(codec: str, text: str) -> None:
    body = page(text).encode(codec)
    assert decode_body(body, declared="utf-8", html=True) == body.decode("utf-8", "replace")


def test_detection_rereads_from_min_reread_high_bytes_of_a_non_latin_script() -> None:
    _, _, text = TEXTS[0]
    body = page(text[: MIN_REREAD_HIGH_BYTES + 6]).encode("cp1251")
    assert decode_body(body, declared="utf-8", html=True) == body.decode("cp1251")


@pytest.mark.parametrize(("label", "codec"), [("windows-1251", "cp1251"), ("koi8-r", "koi8_r")])
async def test_a_meta_charset_is_tried_before_detection_when_the_http_one_fails(
    make_dispatcher: DispatcherFactory, origin: Origin, label: str, codec: str
) -> None:
    """The page's second word comes before a guess, and is obeyed when it reads the bytes
    cleanly, even wrongly (KOI8-R over windows-1251 bytes), as a wrong meta is."""
    _, _, text = TEXTS[0]
    body = page(text, f'<meta charset="{label}">').encode("cp1251")
    url = serve(origin, "/p", body, "text/html; charset=utf-8")
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert reply.get("DATA") == f"# Page\n\n{text.encode('cp1251').decode(codec)}"


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        (TEXTS[0][2], 12),
        ("The tide came in at noon and went out again by the evening, as it does.", 7),
    ],
    ids=["cyrillic", "ascii"],
)
async def test_a_utf_8_page_with_a_few_bad_bytes_is_not_decoded_again(
    make_dispatcher: DispatcherFactory, origin: Origin, text: str, bad: int
) -> None:
    """Twelve stray bytes among a hundred good non-ASCII characters, or seven (fewer than
    MIN_DETECT_HIGH_BYTES) in ASCII text, are the page's damage: they stay U+FFFD and the
    rest reads as UTF-8."""
    encoded = text.encode("utf-8")
    damaged = encoded[:20] + b"\xff" * bad + encoded[20:]
    body = page("").encode().replace(b"<p>", b"<p>" + damaged)
    url = serve(origin, "/p", body, "text/html; charset=utf-8")
    reply = await fetch(make_dispatcher(list(WEB.ops)), url)
    assert reply.get("DATA") == f"# Page\n\n{damaged.decode('utf-8', errors='replace')}"


def test_a_reading_is_garbled_from_eight_u_fffd_making_half_its_non_ascii() -> None:
    assert not garbled("\ufffd" * (MIN_DETECT_HIGH_BYTES - 1))
    assert garbled("\ufffd" * MIN_DETECT_HIGH_BYTES)
    assert garbled("\ufffd" * 8 + "é" * 8)  # half: at GARBLED_SHARE
    assert not garbled("\ufffd" * 8 + "é" * 9)

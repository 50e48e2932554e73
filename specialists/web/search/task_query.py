"""A search task's fields read into the query each backend is asked and the ranking its
answer gets; a bad value is FieldError(invalid_field) naming the field.

    SITE python.org / EXCLUDE_SITE pinterest.com   (each at most MAX_SITES times)
    AFTER 2024-01-01 / BEFORE 2024-06-30           (inclusive; UNDATED keep|drop)
    COUNTRY de / LANG de / VERTICAL news / MAX_PER_DOMAIN 2 / MODE fuse
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from csp_web.core.api.errors import FieldError
from csp_web.core.api.fields import Params
from protocol import ErrorCode
from specialists.web.config import SearchConfig

from .base import Freshness, SearchQuery, lang_code

# Perplexity's search_domain_filter takes 20 entries; SITE and EXCLUDE_SITE share it.
MAX_SITES = 10
# ISO 3166-1 alpha-2, as tzdata's iso3166.tab lists them (249 codes).
_COUNTRY_CODES = """
ad ae af ag ai al am ao aq ar as at au aw ax az ba bb bd be bf bg bh bi bj bl bm bn bo bq
br bs bt bv bw by bz ca cc cd cf cg ch ci ck cl cm cn co cr cu cv cw cx cy cz de dj dk dm
do dz ec ee eg eh er es et fi fj fk fm fo fr ga gb gd ge gf gg gh gi gl gm gn gp gq gr gs
gt gu gw gy hk hm hn hr ht hu id ie il im in io iq ir is it je jm jo jp ke kg kh ki km kn
kp kr kw ky kz la lb lc li lk lr ls lt lu lv ly ma mc md me mf mg mh mk ml mm mn mo mp mq
mr ms mt mu mv mw mx my mz na nc ne nf ng ni nl no np nr nu nz om pa pe pf pg ph pk pl pm
pn pr ps pt pw py qa re ro rs ru rw sa sb sc sd se sg sh si sj sk sl sm sn so sr ss st sv
sx sy sz tc td tf tg th tj tk tl tm tn to tr tt tv tw tz ua ug um us uy uz va vc ve vg vi
vn vu wf ws ye yt za zm zw
"""
COUNTRIES = frozenset(_COUNTRY_CODES.split())
_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})+")
# The FRESHNESS that covers a range starting so many days ago, for backends with no range.
_WIDENINGS: tuple[tuple[int, Freshness], ...] = ((1, "pd"), (7, "pw"), (31, "pm"), (366, "py"))


@dataclass(frozen=True)
class Ranking:
    """How an answer's hits are chosen: per-domain cap and fallback or fused backends."""

    max_per_domain: int
    mode: str


def read_query(
    text: str, params: Params, config: SearchConfig, today: datetime.date
) -> SearchQuery:
    """The query of one QUERY value with the task's filters."""
    count = params.opt_integer("MAX_RESULTS") or config.default_results
    if count > config.max_results:
        raise FieldError(ErrorCode.INVALID_FIELD, f"MAX_RESULTS above {config.max_results}")
    after, before = _day(params, "AFTER"), _day(params, "BEFORE")
    if after and before and before < after:
        raise FieldError(ErrorCode.INVALID_FIELD, "BEFORE is earlier than AFTER")
    if after and after > today:  # no page is published later than today (UTC)
        raise FieldError(ErrorCode.INVALID_FIELD, "AFTER is later than today")
    freshness = params.opt_text("FRESHNESS")
    if freshness and (after or before):
        raise FieldError(ErrorCode.INVALID_FIELD, "FRESHNESS cannot go with AFTER or BEFORE")
    return SearchQuery(
        " ".join(text.split()),
        count,
        freshness,
        sites=_sites(params, "SITE"),
        exclude_sites=_sites(params, "EXCLUDE_SITE"),
        after=after,
        before=before,
        undated=params.opt_text("UNDATED") or "keep",
        country=_country(params),
        lang=_lang(params),
        vertical=params.opt_text("VERTICAL") or "web",
        today=today,
        widened=widen(after, today),
    )


def read_ranking(params: Params, config: SearchConfig) -> Ranking:
    """MAX_PER_DOMAIN and MODE, else search.max_per_domain and search.mode."""
    per_domain = params.opt_integer("MAX_PER_DOMAIN") or config.max_per_domain
    if per_domain > config.max_results:
        raise FieldError(ErrorCode.INVALID_FIELD, f"MAX_PER_DOMAIN above {config.max_results}")
    return Ranking(per_domain, params.opt_text("MODE") or config.mode)


def widen(after: datetime.date | None, today: datetime.date) -> Freshness | None:
    """The narrowest FRESHNESS reaching back to after; None when none does."""
    if after is None:
        return None
    days = (today - after).days
    return next((fresh for limit, fresh in _WIDENINGS if days <= limit), None)


def _sites(params: Params, name: str) -> tuple[str, ...]:
    given = params.texts(name)
    if len(given) > MAX_SITES:
        raise FieldError(ErrorCode.INVALID_FIELD, f"more than {MAX_SITES} {name} fields")
    sites = []
    for value in given:
        host = value.strip().lower().rstrip(".")
        if not _HOST.fullmatch(host) or len(host) > 253:
            raise FieldError(
                ErrorCode.INVALID_FIELD, f"{name} must be a host name like example.com"
            )
        sites.append(host)
    return tuple(dict.fromkeys(sites))


def _day(params: Params, name: str) -> datetime.date | None:
    value = params.opt_text(name)
    if value is None:
        return None
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
            raise ValueError(value)
        return datetime.date.fromisoformat(value.strip())
    except ValueError:
        raise FieldError(ErrorCode.INVALID_FIELD, f"{name} must be a date YYYY-MM-DD") from None


def _country(params: Params) -> str | None:
    value = params.opt_text("COUNTRY")
    if value is None:
        return None
    code = value.strip().lower()
    if code not in COUNTRIES:
        raise FieldError(ErrorCode.INVALID_FIELD, "COUNTRY must be an ISO 3166-1 alpha-2 code")
    return code


def _lang(params: Params) -> str | None:
    value = params.opt_text("LANG")
    if value is None:
        return None
    code = lang_code(value)
    if code is None:
        raise FieldError(ErrorCode.INVALID_FIELD, "LANG must be a language code like en or pt-br")
    return code

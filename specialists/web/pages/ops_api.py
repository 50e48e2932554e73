"""``REQ:api IN:WEB OUT:API_RESPONSE``: one call to a configured API (seed 000).

    TASK REQ:api IN:WEB OUT:API_RESPONSE
    ENDPOINT github:repos/python-trio/trio
    METHOD GET

    STATUS OK
    SCOPE [api.github.com]
    DATA {"id":1,"full_name":"python-trio/trio",...}
    STATUS_CODE 200
    CACHED false
    CITE https://api.github.com/repos/python-trio/trio "github:repos/python-trio/trio"

ENDPOINT is ``<api>:<path>``: the API must be configured (else ``unknown_api``), and the path is
appended to its ``base_url`` and must stay under it; the base and the joined URL pass the URL
gate before anything else parses them (a malformed ``base_url`` is ``url_rejected``). The
credential comes from the API's ``auth_env`` and rides only in its ``auth_header``; it is never
logged, cached, echoed or sent through a redirect (with it attached, a redirect is
``api_error:redirect_refused``). Each API has its bucket ``api:<name>``; a 429 (or GitHub's 403
with ``x-ratelimit-remaining: 0``) pauses it, and the call is retried once when the pause ends
before the task's deadline, else ``rate_limited`` with RETRY_AFTER. GET answers of 2xx are
cached per API (``api:<name>``, ``cache_ttl_s``); any other method empties that API's cache. An
error status is ``api_error:<status>_<reason>`` with ENDPOINT, STATUS_CODE and the API's message
as SUMMARY.
"""

from __future__ import annotations

import http
import json
import math
import os
import re
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import httpx
import trio

from csp_web.core.api import budget, peer_json
from csp_web.core.api.audit import redact_url
from csp_web.core.api.context import OpContext
from csp_web.core.api.deadlines import work_seconds
from csp_web.core.api.errors import FieldError, OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import Effects, Op
from csp_web.core.api.replies import Result, cite
from csp_web.core.api.trace import TraceContext
from csp_web.infra.ratelimit import resume_at
from csp_web.net import FetchResult, GuardConfig, check_url
from protocol import ErrorCode, Field
from specialists.web.config import ApiConfig, WebConfig

from ..search.base import redact
from ..services import WebServices, web_audit
from .services import PagesServices

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
DATA_MAX_CHARS = 4000  # seed 003 truncates fetched text to ~4000 chars; a summary, not a dump
SUMMARY_MAX_CHARS = 300  # seed 000's snippet size, for an error's message
# GitHub's advice when a rate-limited answer names no time: wait at least a minute.
DEFAULT_PAUSE_S = 60.0
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 §5.6.2 header name
# A value as sent: visible ASCII, spaces and tabs (RFC 9110 §5.5, without obs-text, which
# httpx would not encode): a CR or LF would split it into a header of the client's making.
_VALUE = re.compile(r"[\t\x20-\x7e]*")
# Headers a caller may not set: identity, routing, framing; the API's auth header joins them.
_REFUSED_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
    }
)
_JSON_TYPES = re.compile(r"application/(?:[\w.+-]+\+)?json")
_TEXT_TYPES = re.compile(r"text/|application/(?:[\w.+-]+\+)?xml|application/x-www-form")

FIELDS = (
    FieldSpec("ENDPOINT", required=True, max_chars=2048, doc="<api>:<path> under its base_url"),
    FieldSpec("METHOD", "choice", default="GET", choices=METHODS),
    FieldSpec("PAYLOAD", "json", doc="JSON request body (not with GET)"),
    FieldSpec("HEADERS", repeat=True, doc="one Name:value per line; no credentials or Host"),
    FieldSpec("NO_CACHE", "bool", default=False, doc="skip the cached GET answer"),
)


@dataclass(frozen=True)
class ApiCall:
    """A validated call: everything but the credential."""

    endpoint: str
    name: str
    api: ApiConfig
    url: str
    method: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None


@dataclass(frozen=True)
class Answer:
    """What the reply shows and the cache keeps; the credential is already redacted."""

    status_code: int
    data: str
    total_chars: int  # of the whole rendering, before truncation


async def api(params: Params, ctx: OpContext, services: PagesServices) -> Result:
    """Make the call; raises OpError (UNKNOWN_API, INVALID_FIELD, API_ERROR, RATE_LIMITED,
    and the guarded client's codes), each with an ENDPOINT field."""
    endpoint = params.text("ENDPOINT")
    with web_audit(redact_url(endpoint)) as notes:
        try:
            call = prepare(params, services.config)
            answer, cached = await _answer(services, call, params.flag("NO_CACHE"), ctx)
        except OpError as exc:
            raise _with_endpoint(exc, endpoint) from exc
        notes.cache_hit, notes.status_code = cached, answer.status_code
        return notes.attach(_render(call, answer, cached=cached))


def prepare(params: Params, config: WebConfig) -> ApiCall:
    """The call a task asks for; raises UNKNOWN_API or INVALID_FIELD."""
    endpoint = params.text("ENDPOINT")
    name, sep, path = endpoint.partition(":")
    if not sep or not name:
        raise FieldError(ErrorCode.INVALID_FIELD, "ENDPOINT must be <api>:<path>")
    api_config = config.apis.get(name)
    if api_config is None:
        raise OpError(ErrorCode.UNKNOWN_API, name)
    method = params.text("METHOD")
    payload = params.json("PAYLOAD")
    if payload is not None and method == "GET":
        raise FieldError(ErrorCode.INVALID_FIELD, "PAYLOAD needs POST, PUT, PATCH or DELETE")
    headers = _headers(params.texts("HEADERS"), api_config)
    body = None
    if payload is not None:
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        if not any(key.lower() == "content-type" for key, _ in headers):
            headers += (("Content-Type", "application/json"),)
    url = join_under(api_config.base_url, path, config.guard)
    return ApiCall(endpoint, name, api_config, url, method, headers, body)


def join_under(base_url: str, path: str, guard: GuardConfig) -> str:
    """``path`` appended to ``base_url``, both through the URL gate before anything else
    parses them. Raises OpError(URL_REJECTED | SSRF_BLOCKED) for a URL the gate refuses, and
    FieldError unless the result stays under the base: no ``.``/``..`` segments (also
    percent-encoded), no scheme-relative ``//``, backslash, fragment, whitespace or control
    character."""
    base = check_url(base_url, guard)
    path = path.removeprefix("/")
    route = path.partition("?")[0]
    decoded = urllib.parse.unquote(route)
    if (
        path.startswith("/")
        or re.search(r"[\s\\#\x00-\x1f\x7f]", path + decoded)
        # "..;x" is ".." to Tomcat-style servers, which drop ;parameters before resolving.
        or any(segment.partition(";")[0] in (".", "..") for segment in decoded.split("/"))
    ):
        raise FieldError(ErrorCode.INVALID_FIELD, "ENDPOINT path must stay under the API's URL")
    root = base.url if base.url.endswith("/") else base.url + "/"
    joined = check_url(root + path, guard)
    if joined.origin != base.origin or not joined.target.startswith(
        urllib.parse.urlsplit(root).path
    ):
        raise FieldError(ErrorCode.INVALID_FIELD, "ENDPOINT path must stay under the API's URL")
    return joined.url


def _headers(lines: list[str], api_config: ApiConfig) -> tuple[tuple[str, str], ...]:
    refused = _REFUSED_HEADERS | {api_config.auth_header.lower()}
    headers: list[tuple[str, str]] = []
    for line in lines:
        name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not _TOKEN.fullmatch(name):
            raise FieldError(ErrorCode.INVALID_FIELD, "HEADERS must be Name:value")
        if not _VALUE.fullmatch(value):
            raise FieldError(
                ErrorCode.INVALID_FIELD, f"HEADERS {name}: value must be visible ASCII"
            )
        if name.lower() in refused:
            raise FieldError(ErrorCode.INVALID_FIELD, f"HEADERS may not set {name}")
        headers.append((name, value))
    return tuple(headers)


async def _answer(
    services: PagesServices, call: ApiCall, no_cache: bool, ctx: OpContext
) -> tuple[Answer, bool]:
    await budget.take("fetches")  # each call asked for, from the cache or not, as fetch's pages
    namespace = f"api:{call.name}"
    material = {"method": call.method, "url": call.url, "headers": sorted(call.headers)}
    cacheable = call.method == "GET" and call.api.cache_ttl_s > 0
    if cacheable and not no_cache:
        cached = _from_cache(await services.cache.get(namespace, material))
        if cached is not None:
            return cached, True
    token = _token(call.api)
    fallback_s = ctx.config.tasks.default_timeout_ms / 1000
    deadline = trio.current_time() + work_seconds(default_s=fallback_s)
    try:
        result = await _send_with_retry(services, call, token, ctx.trace, deadline=deadline)
    finally:
        if call.method != "GET":  # a write may have landed even if we saw no answer
            with trio.CancelScope(shield=True):
                await services.cache.invalidate(namespace)
    # Decoding (an undeclared charset is guessed) and JSON parsing are CPU work: off the loop.
    answer = await trio.to_thread.run_sync(_summarise, result, token, abandon_on_cancel=True)
    if not 200 <= result.status_code < 300:
        raise _status_error(result, answer)
    if cacheable:
        await services.cache.set(namespace, material, _to_cache(answer), ttl_s=call.api.cache_ttl_s)
    return answer, False


def _token(api_config: ApiConfig) -> str | None:
    """The credential from ``auth_env``; unset means the call goes out unauthenticated."""
    token = os.environ.get(api_config.auth_env, "").strip() if api_config.auth_env else ""
    return token or None


async def _send_with_retry(
    services: PagesServices,
    call: ApiCall,
    token: str | None,
    trace: TraceContext | None,
    *,
    deadline: float,
) -> FetchResult:
    """Send, and once more after a rate-limited answer whose pause ends before ``deadline``;
    each request joins ``trace`` when the task has one (SPEC D-3)."""
    bucket = services.limits.bucket(f"api:{call.name}")
    for attempt in range(2):
        if bucket is not None:
            await bucket.acquire(deadline=deadline)  # RATE_LIMITED + RETRY_AFTER past it
        result = await _send(services, call, token, trace, deadline=deadline)
        if not _rate_limited(result):
            return result
        now = trio.current_time()
        resume = resume_at(result.headers, now=now, wall=time.time())
        if resume is None:
            resume = now + DEFAULT_PAUSE_S
        if bucket is not None:
            await bucket.pause(resume)
        if attempt or resume >= deadline:
            retry = str(max(1, math.ceil(resume - now)))
            raise OpError(ErrorCode.RATE_LIMITED, call.name, fields=(("RETRY_AFTER", retry),))
        if bucket is None:
            await trio.sleep_until(resume)
    raise AssertionError("unreachable")


async def _send(
    services: PagesServices,
    call: ApiCall,
    token: str | None,
    trace: TraceContext | None,
    *,
    deadline: float,
) -> FetchResult:
    headers = httpx.Headers(call.api.headers)
    if trace is not None:  # a configured API only; the client drops it at another origin
        headers["traceparent"] = trace.traceparent()
    for name, value in call.headers:  # the caller's value wins, whatever its case
        headers[name] = value
    if token is not None:
        scheme = call.api.auth_scheme
        headers[call.api.auth_header] = f"{scheme} {token}" if scheme else token
    budget_s = min(deadline - trio.current_time(), services.config.guard.timeout_s)
    try:
        return await services.client.fetch(
            call.url,
            method=call.method,
            headers=headers,
            content=call.body,
            # With the credential attached no redirect is followed at all: curl drops it on a
            # cross-host hop; we refuse the hop, so the caller learns the API moved.
            max_redirects=0 if token is not None else None,
            credentials_headers=(call.api.auth_header,),
            follow_with_credentials=False,
            deadline_s=max(0.0, budget_s),
        )
    except OpError as exc:
        if token is not None and exc.code is ErrorCode.TOO_MANY_REDIRECTS:
            raise OpError(ErrorCode.API_ERROR, "redirect_refused") from None
        raise


def _rate_limited(result: FetchResult) -> bool:
    """429, or GitHub's 403 for a spent primary (remaining 0) or secondary (Retry-After) limit."""
    if result.status_code == 429:
        return True
    headers = result.headers
    return result.status_code == 403 and (
        headers.get("x-ratelimit-remaining") == "0" or "retry-after" in headers
    )


def _summarise(result: FetchResult, token: str | None) -> Answer:
    """The body as DATA: compact JSON, text, or a note for binary; at most DATA_MAX_CHARS."""
    text = _rendering(result)
    if token:
        text = redact(text, token)  # in any letter case: a server may echo it upper-cased
    total = len(text)
    if total > DATA_MAX_CHARS:
        text = f"{text[:DATA_MAX_CHARS]}…[truncated: {total} chars]"
    return Answer(result.status_code, text or "none", total)


def _rendering(result: FetchResult) -> str:
    if not result.body:
        return ""
    if _JSON_TYPES.fullmatch(result.content_type):
        try:
            document = peer_json.loads(result.body)
        except peer_json.NotJson:
            return result.text()
        return json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    if not result.content_type or _TEXT_TYPES.match(result.content_type):
        return result.text()
    return f"binary:{result.content_type},{len(result.body)} bytes"


def _status_error(result: FetchResult, answer: Answer) -> OpError:
    status = result.status_code
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = "error"
    reason = re.sub(r"[^a-z0-9]+", "_", phrase.lower()).strip("_")
    fields: list[Field] = [("STATUS_CODE", str(status))]
    message = _message(answer.data)
    if message:
        fields.append(("SUMMARY", message))
    return OpError(ErrorCode.API_ERROR, f"{status}_{reason}", fields=fields)


def _message(data: str) -> str:
    """The API's own error message (GitHub's ``message``, OpenAI's ``error.message``), or the
    start of the body."""
    try:
        document = peer_json.loads(data)
    except peer_json.NotJson:
        document = None
    if isinstance(document, dict):
        error = document.get("error")
        for candidate in (
            document.get("message"),
            error.get("message") if isinstance(error, dict) else error,
        ):
            if isinstance(candidate, str) and candidate:
                return " ".join(candidate.split())[:SUMMARY_MAX_CHARS]
    return " ".join(data.split())[:SUMMARY_MAX_CHARS] if data != "none" else ""


def _with_endpoint(exc: OpError, endpoint: str) -> OpError:
    """``exc`` with ``ENDPOINT <endpoint>`` first after ERROR (seed 000's api error form)."""
    if any(key == "ENDPOINT" for key, _ in exc.fields):
        return exc
    fields = (("ENDPOINT", endpoint), *exc.fields)
    return type(exc)(exc.code, exc.detail, scope=exc.scope, data=exc.data, fields=fields)


def _to_cache(answer: Answer) -> dict[str, Any]:
    return {"status_code": answer.status_code, "data": answer.data, "total": answer.total_chars}


def _from_cache(value: Any) -> Answer | None:
    try:
        return Answer(int(value["status_code"]), str(value["data"]), int(value["total"]))
    except (TypeError, KeyError, ValueError):
        return None


def _render(call: ApiCall, answer: Answer, *, cached: bool) -> Result:
    host = urllib.parse.urlsplit(call.url).hostname or ""
    fields: list[Field] = [
        ("STATUS_CODE", str(answer.status_code)),
        ("CACHED", str(cached).lower()),
    ]
    if answer.total_chars > DATA_MAX_CHARS:
        fields.append(("TRUNCATED", str(answer.total_chars)))
    fields.append(cite(call.url, call.endpoint))
    return Result(answer.data, scope=(host,), fields=tuple(fields))


API_REPLIES = (
    ReplyField("STATUS_CODE", "the API answered", "its HTTP status", kind="int"),
    ReplyField("CACHED", "OK", "whether the answer came from the cache", kind="bool"),
    ReplyField("TRUNCATED", "DATA was cut", "the answer's whole length in chars", kind="int"),
    ReplyField("CITE", "OK", "the URL called and the endpoint (R-4)"),
    ReplyField("SUMMARY", "FAIL: api_error", "the API's own error message"),
    ReplyField("ENDPOINT", "FAIL", "the endpoint asked"),
    ReplyField("RETRY_AFTER", "FAIL: rate_limited", "seconds to wait", kind="int"),
)
API_EXAMPLE = Example(
    ("TASK REQ:api IN:WEB OUT:API_RESPONSE\nID 1\nENDPOINT github:/repos/tides/tables\n"),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [api.test]\n"
        'DATA {"name":"tables","full_name":"tides/tables","stargazers_count":7}\n'
        "STATUS_CODE 200\n"
        "CACHED false\n"
        'CITE https://api.test/repos/tides/tables "github:/repos/tides/tables"\n'
    ),
)


OPS: list[Op[WebServices]] = [
    Op(
        "api",
        "WEB",
        "API_RESPONSE",
        "web",
        api,
        fields=FIELDS,
        inline="ENDPOINT",
        replies=API_REPLIES,
        example=API_EXAMPLE,
        doc="call a configured API; SCOPE, DATA summary, STATUS_CODE, CACHED, CITE",
        # METHOD may be POST, PUT or DELETE on the configured API.
        effects=Effects(),
    )
]

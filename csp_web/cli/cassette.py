"""Cassettes: the upstream HTTP exchanges a transcript's web ops made, kept beside it.

``foo.csp`` replays with ``foo.cassette.json`` when that file exists (docs/transcripts.md has
the format). Each exchange is one request as the guarded client sent it (method, URL, headers,
body) and the response the upstream gave (status, headers, body as it came on the wire, still
content-encoded). Redirects are separate exchanges, as the client makes separate requests.

Requests are matched by their key: method, URL and the SHA-256 of the body, all as redacted.
Repeated identical requests are served the recorded exchanges of their key in recorded order;
one more than were recorded is a miss.

Secrets never reach a cassette: ``Redactor`` blanks the credential headers and every
occurrence of a configured credential's value (header, URL, body) before anything is written.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import trio

from csp_web.config import Config, secret_variables

CASSETTE_VERSION = 1
CASSETTE_SUFFIX = ".cassette.json"
REDACTED = "[REDACTED]"
# Headers whose value is a credential whatever it holds (Brave's key rides in its own header).
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-subscription-token",
        "x-api-key",
    }
)
# Framing the replay's origin recomputes; a recorded value would contradict the body it serves.
CONNECTION_HEADERS = frozenset({"transfer-encoding", "connection", "keep-alive"})
FRAMING_HEADERS = CONNECTION_HEADERS | {"content-length"}

Headers = tuple[tuple[str, str], ...]
Key = tuple[str, str, str]


class CassetteError(Exception):
    """A cassette file is malformed; the message names the file and the bad entry."""


@dataclass(frozen=True)
class Exchange:
    """One request the guarded client sent and the response it got, both redacted."""

    method: str
    url: str
    request_headers: Headers
    request_body: bytes
    status: int
    headers: Headers
    body: bytes
    # The client stopped reading before the end (a byte cap, a redirect's unread body): the
    # body is what it had read, the headers keep Content-Length and Content-Encoding, and the
    # replay's origin sends that much and closes the connection.
    truncated: bool = False

    @property
    def key(self) -> Key:
        return request_key(self.method, self.url, self.request_body)


@dataclass
class Cassette:
    """The exchanges of one transcript, in the order their requests were sent.

    ``credentials`` names the credential variables (``credential_variables``) that were set
    when it was recorded; a replay sets those (to a stand-in) and unsets the others, so the
    same providers are chosen on any machine.
    """

    exchanges: list[Exchange] = field(default_factory=list)
    credentials: tuple[str, ...] = ()


def request_key(method: str, url: str, body: bytes) -> Key:
    return method.upper(), url, hashlib.sha256(body).hexdigest()


def wire_host(url: str | httpx.URL) -> str:
    """The host of ``url`` as it goes on the wire and to the resolver: IDNA-encoded, lower
    case, an IPv6 address without brackets."""
    return httpx.URL(url).raw_host.decode("ascii")


def cassette_path(transcript_path: str) -> str:
    """The cassette beside ``transcript_path``: ``foo.csp`` -> ``foo.cassette.json``."""
    stem = transcript_path[:-4] if transcript_path.endswith(".csp") else transcript_path
    return stem + CASSETTE_SUFFIX


def credential_variables(config: Config) -> tuple[str, ...]:
    """Every environment variable the configuration reads a credential from, sorted
    (``csp_web.config.secret_variables``)."""
    return secret_variables(config)


def secrets_in_environment(config: Config) -> tuple[str, ...]:
    """The values of the configured credential variables that are set, longest first (so a
    secret holding another is blanked whole)."""
    values = {os.environ.get(name, "").strip() for name in credential_variables(config)}
    return tuple(sorted((value for value in values if value), key=len, reverse=True))


@dataclass(frozen=True)
class Redactor:
    """Blanks credentials: the SECRET_HEADERS' values and every occurrence of a secret."""

    secrets: tuple[str, ...]

    def text(self, value: str) -> str:
        for secret in self.secrets:
            value = value.replace(secret, REDACTED)
        return value

    def url(self, url: str) -> str:
        """``url`` with each secret blanked, as written and percent-encoded (query values)."""
        from urllib.parse import quote, quote_plus

        for secret in self.secrets:
            for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
                url = url.replace(form, REDACTED)
        return url

    def headers(self, headers: Iterable[tuple[str, str]]) -> Headers:
        return tuple(
            (name, REDACTED if name.lower() in SECRET_HEADERS else self.text(value))
            for name, value in headers
        )

    def body(self, data: bytes) -> bytes:
        for secret in self.secrets:
            data = data.replace(secret.encode("utf-8"), REDACTED.encode("utf-8"))
        return data


def dump_cassette(cassette: Cassette) -> str:
    """The cassette as JSON text, one exchange per array element."""
    document = {
        "version": CASSETTE_VERSION,
        "credentials": list(cassette.credentials),
        "exchanges": [_exchange_json(exchange) for exchange in cassette.exchanges],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _exchange_json(exchange: Exchange) -> dict[str, Any]:
    request = {"method": exchange.method, "url": exchange.url}
    response: dict[str, Any] = {"status": exchange.status}
    if exchange.truncated:
        response["truncated"] = True
    return {
        "request": request | _message_json(exchange.request_headers, exchange.request_body),
        "response": response | _message_json(exchange.headers, exchange.body),
    }


def _message_json(headers: Headers, body: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"headers": [f"{name}: {value}" for name, value in headers]}
    encoded = any(name.lower() == "content-encoding" for name, _ in headers)
    try:
        text = None if encoded else body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None:
        out["body_base64"] = base64.b64encode(body).decode("ascii")
    else:
        out["body"] = text
    return out


async def read_cassette(path: str) -> Cassette | None:
    """The cassette in file ``path``, None when there is no such file; CassetteError naming
    the file when it cannot be read, is not UTF-8 or is not a whole cassette."""
    try:
        text = await trio.Path(path).read_text("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CassetteError(f"{path}: cannot be read as a cassette: {exc}") from exc
    return load_cassette(text, path)


def load_cassette(text: str, name: str = "<cassette>") -> Cassette:
    """Parse cassette JSON; raises CassetteError naming ``name`` and the bad entry."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CassetteError(
            f"{name}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno});"
            " a file cut short or edited by hand: restore it or record it again"
        ) from exc
    try:
        if document.get("version") != CASSETTE_VERSION:
            raise CassetteError(f"{name}: version must be {CASSETTE_VERSION}")
        credentials = tuple(str(value) for value in document.get("credentials", []))
        entries = document["exchanges"]
        exchanges = [_exchange(entry, f"{name}: exchange {n}") for n, entry in enumerate(entries)]
    except CassetteError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CassetteError(f"{name}: not a cassette: {exc!r}") from exc
    return Cassette(exchanges, credentials)


def _exchange(entry: Mapping[str, Any], where: str) -> Exchange:
    request, response = entry["request"], entry["response"]
    status = response["status"]
    if not isinstance(status, int) or not 200 <= status <= 599:  # a final response's
        raise CassetteError(f"{where}: status must be an integer from 200 to 599")
    return Exchange(
        method=str(request["method"]).upper(),
        url=str(request["url"]),
        request_headers=_headers(request, where),
        request_body=_body(request, where),
        status=status,
        headers=_headers(response, where),
        body=_body(response, where),
        truncated=response.get("truncated", False) is True,
    )


def _headers(message: Mapping[str, Any], where: str) -> Headers:
    lines = message.get("headers", [])
    if not all(isinstance(line, str) and ": " in line for line in lines):
        raise CassetteError(f'{where}: headers are "name: value" strings')
    return tuple(_split_header(line) for line in lines)


def _split_header(line: str) -> tuple[str, str]:
    name, _, value = line.partition(": ")
    return name, value


def _body(message: Mapping[str, Any], where: str) -> bytes:
    if "body_base64" in message:
        try:
            return base64.b64decode(message["body_base64"], validate=True)
        except ValueError as exc:
            raise CassetteError(f"{where}: body_base64 is not base64") from exc
    return str(message.get("body", "")).encode("utf-8")

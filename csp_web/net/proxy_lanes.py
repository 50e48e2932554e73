"""What a purpose lane of the guard proxy lets through: a fixed list of ``host:port``.

A browser context's lane goes wherever the guard allows; a purpose lane (exec's, for a program
rule with ``network``: specialists/tool/exec/_network.py) goes only to the destinations it was
opened with, and then still through the whole guard: the URL gate on the name, every address
it resolves to through the deny table, the connect pinned to those addresses. The lane listens
on a Unix socket (``GuardProxy.open_unix_lane``) that only ``uid`` may use (from one network
namespace, when ``pin_namespace``), holds at most ``max_connections`` connections at once,
and answers at most ``max_refusals`` refusals.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import urllib.parse
from dataclasses import dataclass

from csp_web.config.guard import GuardConfig
from csp_web.core.api.errors import OpError
from protocol import ErrorCode

NOT_IN_RULE = "not-in-network-rule"  # url_rejected's detail: a destination the rule omits
TOO_MANY = "too-many-connections"  # rate_limited's detail: past ``max_connections``
ANY_TARGET = "*:*"  # the target a refusal names when none was read (the connection cap)
SNI_MISMATCH = "sni-not-in-network-rule"  # a CONNECT whose TLS names another host
# Refusals a lane answers before it stops reading: past them a looping command costs the daemon
# one accept and one close per connection, not a parse, a judgement and a log line.
MAX_REFUSALS = 256
_PORT = re.compile(r"[0-9]{1,5}")  # ASCII digits only: str.isdigit() is true for "²"


@dataclass(frozen=True)
class Verdict:
    """What the list says of one request: the ``host:port`` it names, why it is refused
    (None: listed), and the target to pass on (a listed one, in its one spelling)."""

    named: str
    refusal: OpError | None
    target: str = ""


@dataclass(frozen=True)
class LanePolicy:
    """The destinations (lower-case host, port) a lane may reach, who may connect to it, and
    how many connections it holds at once."""

    allow: frozenset[tuple[str, int]]
    max_connections: int
    uid: int | None = None  # SO_PEERCRED must say this uid; None: any (a test's own socket)
    # SO_PEERCRED's pid must be in another network namespace than the daemon's, and every
    # connection in the one of the first (the bridge's, made before the command starts).
    pin_namespace: bool = False
    max_refusals: int = MAX_REFUSALS

    def narrow(self, guard: GuardConfig) -> GuardConfig:
        """The guard for this lane: its ports are the allow list's, and plain http is allowed
        (the rule named the destination, as ``http://`` mirrors on port 80 need)."""
        ports = tuple(sorted({port for _host, port in self.allow}))
        return dataclasses.replace(guard, allowed_ports=ports, allow_http=True)

    def judge(self, connect: bool, target: str) -> Verdict:
        """A CONNECT target (``connect``) or an absolute-form URL, judged by the list."""
        return self._judge_connect(target) if connect else self._judge_url(target)

    def _judge_connect(self, target: str) -> Verdict:
        host, _, port = target.rpartition(":")
        return self._judge(host.strip("[]"), port, "")

    def _judge_url(self, url: str) -> Verdict:
        """Only ``http://`` URLs are forwarded; anything else is named and refused."""
        try:
            parts = urllib.parse.urlsplit(url)
            host, port = parts.hostname or "", parts.port or 80
        except ValueError:
            return Verdict(_printable(url[:100]), OpError(ErrorCode.URL_REJECTED, "bad-url"))
        if parts.scheme != "http":
            refusal = OpError(ErrorCode.URL_REJECTED, "scheme-not-allowed")
            return Verdict(_printable(f"{host}:{port}"[:300]), refusal)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return self._judge(host, str(port), path)

    def _judge(self, host: str, port_text: str, path: str) -> Verdict:
        name = _canonical(host.lower().removesuffix("."))
        shown = f"[{name}]:{port_text}" if ":" in name else f"{name}:{port_text}"
        port = int(port_text) if _PORT.fullmatch(port_text) else -1
        if (name, port) not in self.allow:
            return Verdict(_printable(shown[:300]), OpError(ErrorCode.URL_REJECTED, NOT_IN_RULE))
        # What goes on is rebuilt from the listed name, so the guard can never read another
        # host out of the original spelling than the one judged here.
        listed = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
        return Verdict(listed, None, f"http://{listed}{path}" if path else listed)

    def over_cap(self) -> OpError:
        return OpError(ErrorCode.RATE_LIMITED, f"{TOO_MANY}-{self.max_connections}")


def _canonical(host: str) -> str:
    """An IP literal's compressed spelling (``0:0::1`` is ``::1``); a name as it is."""
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host


def _printable(text: str) -> str:
    """``text`` with every character but printable ASCII as ``?``: a refused target is the
    command's own bytes, and it is shown in replies and logs."""
    return "".join(c if " " < c < "\x7f" else "?" for c in text)

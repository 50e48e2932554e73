"""The guarded HTTP client every web op uses: URL gate, deny table, pinned DNS, caps, robots.

    async with open_guarded_client(config) as client:
        result = await client.fetch(url, respect_robots=True)
        text = result.text()

``check_url`` and ``check_address`` are the gate and the deny table alone, pure and I/O-free.
"""

from csp_web.config.guard import GuardConfig
from csp_web.net.body import LargerBody
from csp_web.net.client import GuardedClient, TransportWrapper, open_guarded_client
from csp_web.net.denylist import check_address, deny_rule
from csp_web.net.forward_proxy import Proxy, parse_proxy
from csp_web.net.resolver import Resolver, SystemResolver
from csp_web.net.result import FetchResult, decode_text
from csp_web.net.settings import GuardSettings
from csp_web.net.translate import never_sent
from csp_web.net.trust import trust_context
from csp_web.net.urlgate import ParsedUrl, check_url

__all__ = [
    "FetchResult",
    "GuardConfig",
    "GuardSettings",
    "GuardedClient",
    "LargerBody",
    "ParsedUrl",
    "Proxy",
    "Resolver",
    "SystemResolver",
    "TransportWrapper",
    "check_address",
    "check_url",
    "decode_text",
    "deny_rule",
    "never_sent",
    "open_guarded_client",
    "parse_proxy",
    "trust_context",
]

"""The TLS trust of web requests (``web.tls``): certifi's roots, or the OS trust store, plus an
optional extra CA bundle, so that a site behind a company CA can be read (issue 24).

Verification is never turned off here: every setting only adds roots.
"""

from __future__ import annotations

import ssl

import certifi
import truststore

from csp_web.config import TlsConfig
from csp_web.config.errors import ConfigError


def trust_context(tls: TlsConfig) -> ssl.SSLContext:
    """A verifying client context: the OS store when ``system_store`` (truststore: the store
    OpenSSL's default paths name on Linux, the platform verifier on macOS and Windows), else
    certifi's roots; ``ca_file``'s certificates added to either. Reads files: call it at start,
    off the event loop. Raises ConfigError naming the setting when ``ca_file`` cannot be used.
    """
    if tls.system_store:
        context: ssl.SSLContext = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    else:
        context = ssl.create_default_context(cafile=certifi.where())
    if tls.ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.ca_file)
        except (OSError, ssl.SSLError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(f"web.tls.ca_file: {tls.ca_file}: {reason}") from exc
    return context

"""What the browser's Chromium trusts: what fetch trusts (``web.tls``, issue 24).

Chromium on Linux verifies a server against its own root store (the Chrome Root Store, the
public roots certifi also holds) plus the certificates trusted in the user's NSS database,
``$HOME/.pki/nssdb``; it reads neither certifi nor OpenSSL's /etc/ssl/certs. So
``build_home`` makes a private HOME whose NSS database trusts as TLS issuers (``certutil -t
C,,``) every certificate of ``web.tls.ca_file`` and, with ``web.tls.system_store``, every
certificate of the OS store (OpenSSL's bundle, which truststore reads too) that is not a
public root already: the ones an administrator added. The engines run Chromium under it.

Trust stays a verification of the chain: only certificates those CAs issued pass.
Chromium's ``--ignore-certificate-errors-spki-list`` (``tool.browser.trusted_spki``) is not
used for this: it accepts any chain that merely *presents* a listed key, and a CA certificate
is public, so a server appending the company CA's certificate to a chain it made itself would
pass (tried on Debian's Chromium 156; tests/browser/test_render_trust.py keeps that out).
Needs ``certutil`` (Debian's libnss3-tools); without it nothing is added, and says so.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import ssl
import subprocess

import certifi

from csp_web.config import TlsConfig
from csp_web.config.errors import ConfigError

log = logging.getLogger(__name__)
NSSDB = os.path.join(".pki", "nssdb")  # under HOME: where Chromium's NSS reads user trust
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.+?-----END CERTIFICATE-----", re.S)
_CERTUTIL_TIMEOUT_S = 30.0  # one certutil call takes ~0.1 s; a hang is a broken install
_SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # Debian's, when OpenSSL names none


def build_home(tls: TlsConfig, home: str) -> str | None:
    """Fill ``home`` (an empty folder the caller owns) with an NSS database trusting what
    ``tls`` adds to the public roots, and return it as Chromium's HOME; None when ``tls``
    adds nothing, or certutil is missing (logged: Chromium then trusts its own roots only).
    Blocking: run it in a worker thread. Raises ConfigError naming ``web.tls.ca_file`` when
    that file cannot be read or holds no certificate."""
    added = extra_certificates(tls)
    if not added:
        return None
    certutil = shutil.which("certutil")
    if certutil is None:
        log.warning("certutil (libnss3-tools) not found: the browser trusts no web.tls CA")
        return None
    database = "sql:" + os.path.join(home, NSSDB)
    os.makedirs(os.path.join(home, NSSDB), mode=0o700)
    _run(certutil, "-N", "-d", database, "--empty-password")
    for number, pem in enumerate(added):
        _run(certutil, "-A", "-d", database, "-n", f"web-tls-{number}", "-t", "C,,", stdin=pem)
    log.info("the browser trusts %d certificate(s) of web.tls", len(added))
    return home


def extra_certificates(tls: TlsConfig) -> list[bytes]:
    """The PEM certificates ``tls`` trusts beyond the public roots, each once: ``ca_file``'s,
    then (``system_store``) the OS store's that certifi does not hold."""
    found: list[bytes] = []
    if tls.ca_file is not None:
        found = _certificates(tls.ca_file, "web.tls.ca_file")
        if not found:
            raise ConfigError(f"web.tls.ca_file: {tls.ca_file}: no PEM certificate in it")
    if tls.system_store:
        public = {_normal(pem) for pem in _certificates(certifi.where(), "certifi")}
        system = _certificates(_system_bundle(), "web.tls.system_store")
        found += [pem for pem in system if _normal(pem) not in public]
    return list(dict.fromkeys(found))


def _certificates(path: str, setting: str) -> list[bytes]:
    """The PEM certificates in ``path``; raises ConfigError naming ``setting``."""
    try:
        with open(path, "rb") as bundle:
            return _PEM.findall(bundle.read())
    except OSError as exc:
        raise ConfigError(f"{setting}: {path}: {exc.strerror or exc}") from exc


def _normal(pem: bytes) -> bytes:
    """A certificate's DER bytes: the same certificate however its PEM lines are wrapped."""
    return ssl.PEM_cert_to_DER_cert(pem.decode("ascii"))


def _system_bundle() -> str:
    """OpenSSL's CA file (what truststore verifies against on Linux), else Debian's."""
    named = ssl.get_default_verify_paths().cafile
    return named if named is not None and os.path.exists(named) else _SYSTEM_BUNDLE


def _run(*argv: str, stdin: bytes | None = None) -> None:
    """Run certutil; raises ConfigError with its complaint when it fails."""
    done = subprocess.run(
        argv, input=stdin, capture_output=True, timeout=_CERTUTIL_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        complaint = done.stderr.decode("utf-8", "replace").strip()[:200]
        raise ConfigError(f"web.tls: certutil {argv[1]} failed: {complaint}")

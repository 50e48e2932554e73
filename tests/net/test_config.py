"""GuardConfig: defaults that match the seeds, and bad values refused when built."""

from __future__ import annotations

import ipaddress

import pytest

from csp_web.config.guard import split_allow_list
from csp_web.net import GuardConfig


def test_defaults_follow_the_seeds() -> None:
    config = GuardConfig()
    assert (config.allow_http, config.allowed_ports, config.allow_private) == (False, (443,), ())
    assert (config.max_redirects, config.timeout_s, config.max_body_bytes) == (3, 10.0, 1_000_000)
    assert config.effective_ports == {443}


def test_allowing_http_opens_port_80_too() -> None:
    assert GuardConfig(allow_http=True).effective_ports == {80, 443}


@pytest.mark.parametrize(
    "options",
    [
        {"allowed_ports": (0,)},
        {"allowed_ports": (65536,)},
        {"timeout_s": 0.0},
        {"dns_timeout_s": -1.0},
        {"max_body_bytes": 0},
        {"max_redirects": -1},
        {"robots_cache_entries": 0},
        {"allow_private": ("10.0.0.0/33",)},
        {"allow_private": ("not a host",)},
    ],
)
def test_a_bad_setting_is_refused_when_the_config_is_built(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"\w"):
        GuardConfig(**options)  # type: ignore[arg-type]


def test_allow_list_entries_split_into_networks_and_names() -> None:
    networks, names = split_allow_list(("10.0.0.1", "fd00::/8", "Intranet.Example."))
    assert networks == (ipaddress.ip_network("10.0.0.1/32"), ipaddress.ip_network("fd00::/8"))
    assert names == {"intranet.example"}

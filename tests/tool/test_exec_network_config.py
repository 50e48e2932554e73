"""A program rule's ``network`` and ``env`` are loaded strictly (specialists/tool/exec/
_destinations.py): every malformed, private or repeated destination and every variable the
engine owns or that loads code is a ConfigError naming it."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
import yaml

from csp_web.app.catalog import config_from_mapping
from csp_web.config import ConfigError
from specialists.tool.config import tool_section
from specialists.tool.exec._destinations import MAX_DESTINATIONS, RULE_ENV, Destination
from specialists.tool.exec.config import ProgramRule


def _load(rule: dict[str, Any]) -> ProgramRule:
    config = config_from_mapping({"tool": {"exec": {"allowed_programs": [rule]}}})
    (loaded,) = tool_section(config).exec.allowed_programs
    return loaded


def test_a_rule_loads_its_destinations_with_443_by_default_and_its_env() -> None:
    rule = _load(
        {
            "program": "npm",
            "network": ["Registry.NPMJS.org.", "mirror.example:8443", "[2606:4700::6810:1]:443"],
            "env": {"NODE_EXTRA_CA_CERTS": "/etc/ssl/corp.pem", "npm_config_audit": "false"},
        }
    )
    assert rule.destinations == (
        Destination("registry.npmjs.org", 443),
        Destination("mirror.example", 8443),
        Destination("2606:4700::6810:1", 443),
    )
    assert dict(rule.env) == {
        "NODE_EXTRA_CA_CERTS": "/etc/ssl/corp.pem",
        "npm_config_audit": "false",
    }
    assert [str(d) for d in rule.destinations][2] == "[2606:4700::6810:1]:443"


def test_a_rule_without_network_has_none() -> None:
    rule = _load({"program": "ls"})
    assert (rule.network, rule.destinations, dict(rule.env)) == ((), (), {})


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("*.npmjs.org", "not a host name"),  # no wildcards
        ("registry..org", "not a host name"),
        ("regístry.org", "not a host name"),  # an IDN is written as its xn-- A-label
        ("registry.org/path", "not a host name"),
        ("https://registry.org", "no TCP port"),
        ("registry.org:0", "no TCP port"),
        ("registry.org:65536", "no TCP port"),
        ("registry.org:", "no TCP port"),
        ("registry.org:+443", "no TCP port"),
        ("registry.org:443:1", "no TCP port"),
        ("[::1", "not host"),
        ("", "not a host name"),
    ],
)
def test_a_malformed_destination_is_a_config_error(entry: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        _load({"program": "npm", "network": [entry]})


@pytest.mark.parametrize(
    ("entry", "rule"),
    [
        ("10.0.0.1", "private-10"),
        ("127.0.0.1:8080", "loopback"),
        ("169.254.169.254:80", "link-local"),
        ("192.168.1.10", "private-192.168"),
        ("[::1]", "loopback"),
        ("[::ffff:10.0.0.1]", "via"),
        ("0x7f.0.0.1", "not a"),  # not canonical dotted-quad: refused outright
        ("2130706433", "not a"),
    ],
)
def test_an_address_the_guard_refuses_is_a_config_error(entry: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule):
        _load({"program": "npm", "network": [entry]})


def test_a_public_address_may_be_listed() -> None:
    rule = _load({"program": "git", "network": ["93.184.215.14"]})
    assert rule.destinations == (Destination("93.184.215.14", 443),)


@pytest.mark.parametrize(
    "entries",
    [["a.example", "A.example:443"], ["a.example:80", "a.example.:80"]],
)
def test_a_destination_listed_twice_is_a_config_error(entries: list[str]) -> None:
    with pytest.raises(ConfigError, match="listed twice"):
        _load({"program": "npm", "network": entries})


def test_a_rule_lists_at_most_its_cap_of_destinations() -> None:
    hosts = [f"h{i}.example" for i in range(MAX_DESTINATIONS + 1)]
    assert len(_load({"program": "npm", "network": hosts[:-1]}).destinations) == MAX_DESTINATIONS
    with pytest.raises(ConfigError, match=f"at most {MAX_DESTINATIONS}"):
        _load({"program": "npm", "network": hosts})


@pytest.mark.parametrize(
    "name",
    [
        *("LD_PRELOAD", "NODE_OPTIONS", "PYTHONPATH", "GIT_SSH_COMMAND", "BASH_ENV", "PATH"),
        *("HOME", "HTTPS_PROXY", "http_proxy", "NO_PROXY", "npm_config_https_proxy", "1BAD"),
    ],
)
def test_a_rule_env_may_not_set_engine_proxy_or_code_loading_variables(name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        _load({"program": "npm", "env": {name: "x"}})


@pytest.mark.parametrize(
    "name",
    [
        *("PYTHONWARNINGS", "BROWSER", "npm_config_script_shell", "npm_config_node_options"),
        *("npm_config_onload_script", "npm_config_userconfig", "npm_config_globalconfig"),
        *("PERL5DB", "PYTHONINSPECT", "LUA_INIT", "RUSTC_WRAPPER", "PHPRC", "PHP_INI_SCAN_DIR"),
        *("JAVA_OPTIONS", "MAVEN_OPTS", "GRADLE_OPTS", "CLASSPATH", "TCLLIBPATH", "OPENSSL_CONF"),
        *("OPENSSL_ENGINES", "PIP_CONFIG_FILE", "LESSOPEN", "EDITOR", "PAGER", "SSH_ASKPASS"),
    ],
)
def test_a_rule_env_sets_only_the_allowed_names(name: str) -> None:
    with pytest.raises(ConfigError, match=f"env may not set {name}: a rule sets only"):
        _load({"program": "npm", "env": {name: "x"}})


@pytest.mark.parametrize("name", sorted(RULE_ENV))
def test_a_rule_env_may_set_each_allowed_name(name: str) -> None:
    assert dict(_load({"program": "npm", "env": {name: "x"}}).env) == {name: "x"}


def test_a_rule_env_value_must_be_a_string() -> None:
    with pytest.raises(ConfigError, match="env"):
        _load({"program": "npm", "env": {"NODE_EXTRA_CA_CERTS": 3}})


def test_network_max_connections_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="network_max_connections"):
        config_from_mapping({"tool": {"exec": {"network_max_connections": 0}}})


_DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "exec-policy.md")


def test_the_documented_network_policy_loads_as_written() -> None:
    with open(_DOC) as f:
        (block,) = re.findall(r"```yaml network\n(.*?)```", f.read(), re.DOTALL)
    exec_config = tool_section(config_from_mapping(yaml.safe_load(block))).exec
    npm, pip, node = exec_config.allowed_programs
    assert npm.destinations == (Destination("npm.registry.example", 443),)
    assert npm.env["npm_config_registry"] == "https://npm.registry.example/"
    assert pip.destinations == (
        Destination("pypi.mirror.example", 443),
        Destination("files.mirror.example", 8443),
    )
    assert (node.destinations, exec_config.network_max_connections) == ((), 32)

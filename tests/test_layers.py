"""The import layers (docs/composition.md, decision 1), read from the source with ast.

Layers, lowest first: protocol (0) <- config, client (1) <- core (2) <- memory, net, infra,
sink (3) <- cron (4) <- specialists (5) <- cli, mcp_face (6) <- app (7), the composition
root. A module imports only its own layer or lower ones; memory, net, infra, sink and cron
never import each other, nor does any specialist of the catalogue (csp_web.app.catalog)
import another (they meet through core's ports), nor cli and the MCP face; a pure package
(the extractor) does no I/O and imports no specialist;
specialists and the scheduler see only the public part of core (its op API); the programs
(core, client, sink, mcp_face, cli) import only what ``PROGRAM_IMPORTS`` lists, and nothing
but the composition root imports it; inside core, each layer imports only the ones below it
(``CORE_LAYERS``); the graph has no cycles; only core's replies module builds a reply
frame. Every import counts: module level, inside functions, under ``if TYPE_CHECKING``.

``KNOWN`` lists the violations the refactor has yet to remove; the tests also fail when a
known entry is gone, so the list can only shrink.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from csp_web.app.catalog import SPECIALISTS

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("protocol", "csp_web", "specialists")

# (module prefix, rank, group): the longest matching prefix wins.
LAYERS: tuple[tuple[str, int, str], ...] = (
    ("protocol", 0, "protocol"),
    ("csp_web", 0, "package"),  # the package itself: its version
    ("csp_web.__main__", 7, "app"),  # python -m csp_web: the csp-web command
    ("csp_web.config", 1, "config"),
    ("csp_web.client", 1, "client"),
    ("csp_web.core", 2, "core"),
    ("csp_web.memory", 3, "memory"),
    ("csp_web.net", 3, "net"),
    ("csp_web.infra", 3, "infra"),
    ("csp_web.sink", 3, "sink"),
    # The scheduler sits above the shared infrastructure: with redis.url its job table and
    # run claims live on the fleet's link (infra.redis_link).
    ("csp_web.cron", 4, "cron"),
    ("specialists", 5, "specialists"),
    # Each specialist of the catalogue is a group of its own on layer 5 (SPECIALIST_GROUPS).
    ("csp_web.cli", 6, "cli"),
    ("csp_web.mcp_face", 6, "mcp_face"),
    # The composition root: the catalogue, the memory path, the csp-web command; it lends
    # the programs that run a daemon in process the way to open it (cli, mcp_face).
    ("csp_web.app", 7, "app"),
)
# The specialists the daemon serves, each in its folder (specialists/<name>/): siblings.
SPECIALIST_GROUPS = tuple(f"specialists.{specialist.name}" for specialist in SPECIALISTS)
# Pure packages the specialists share: no I/O, no other specialist (the rule is checked below).
PURE = ("specialists.extract", "specialists.formats")
PURE_FORBIDDEN = frozenset({"trio", "httpx", "os", "socket", "subprocess", "asyncio", "csp_web"})
SIBLINGS = frozenset(
    {"memory", "sink", "net", "infra", "cron", "cli", "mcp_face", *SPECIALIST_GROUPS}
)
# What each program may import besides itself and the package's version (groups above).
PROGRAM_IMPORTS: dict[str, frozenset[str]] = {
    "core": frozenset({"protocol", "config"}),
    "client": frozenset({"protocol"}),
    "sink": frozenset({"protocol", "config", "core"}),
    # net: the one small HTTP server (net.h11_server) the face and the cassette origin share
    "mcp_face": frozenset({"protocol", "config", "core", "client", "net"}),
    # replay runs its own reference sink, and wraps the web client's transport (net)
    "cli": frozenset({"protocol", "config", "core", "client", "net", "sink"}),
}
# core's layers, lowest first: a core module imports only its own layer or lower ones, and
# the two on rank 1 (running a task; where streams come from) do not import each other.
CORE_LAYERS: dict[str, int] = {"api": 0, "dispatch": 1, "transports": 1, "wire": 2, "daemon": 3}
PRIVATE_CORE_USERS = frozenset({"specialists", "cron", *SPECIALIST_GROUPS, *PURE})
# What a specialist (or the scheduler) may import from core (by module name after the core/ prefix).
PUBLIC_CORE = frozenset(
    {
        "api.context",
        "api.ops",
        "api.specialist",
        "api.ports",
        "api.errors",
        "api.fields",
        "api.replies",
        "api.deadlines",
        "api.records",
        "api.audit",  # OpAudit: what an op adds to its one audit record
        "api.extras",  # the refusal of an op whose optional dependency is not installed
        "api.logs",
        "wire.stream",  # serve_stream and StreamHandler: the one read loop (the node link's)
        "transports.unix",  # socket helpers, for a specialist that listens (the node socket)
        "api.storage",  # storage_seam: each store's translation of a full disk (SPEC O-6)
        "api.trace",  # TraceContext: the trace an op passes on to a configured API (D-3)
        "api.budget",  # the task's budget: one line at each place work is charged (D-3)
        "api.peer_json",  # the one decoding of JSON a peer sent (a backend, an API, a model)
    }
)

KNOWN: frozenset[str] = frozenset()
OWN_SERVERS = ("csp_web.sink.", "specialists.node.link", "specialists.node.agent")


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


@cache
def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join(parts)] = Module(".".join(parts), path, is_package)
    return found


@cache
def tree(name: str) -> ast.Module:
    module = modules()[name]
    return ast.parse(module.path.read_text("utf-8"), str(module.path))


def _resolve(importer: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.name.split(".")
    if not importer.is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _ours(name: str) -> str | None:
    """The module of ours ``name`` is or lies in (``pkg.mod.attr`` -> ``pkg.mod``)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules():
            return ".".join(parts)
        parts.pop()
    return None


@cache
def edges() -> frozenset[tuple[str, str]]:
    """Every (importer, imported) pair between our modules, at any depth of the source."""
    out: set[tuple[str, str]] = set()
    for name, module in modules().items():
        for node in ast.walk(tree(name)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, node)
                targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
            for target in targets:
                ours = _ours(target)
                if ours is not None and ours != name:
                    out.add((name, ours))
    return frozenset(out)


def layer(name: str) -> tuple[int, str]:
    best: tuple[str, int, str] | None = None
    groups = tuple((group, 5, group) for group in (*SPECIALIST_GROUPS, *PURE))
    for prefix, rank, group in (*LAYERS, *groups):
        if (name == prefix or name.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best[0])
        ):
            best = (prefix, rank, group)
    assert best is not None, name
    return best[1], best[2]


def _check(found: set[str], kind: str) -> None:
    known = {entry for entry in KNOWN if entry.startswith(kind + ":")}
    assert sorted(found - known) == [], "new violations"
    assert sorted(known - found) == [], "fixed: remove these from KNOWN"


def test_no_module_imports_a_higher_layer() -> None:
    found = set()
    for importer, imported in edges():
        (rank_from, group_from), (rank_to, group_to) = layer(importer), layer(imported)
        if rank_to > rank_from or (group_from == "cli" and group_to.startswith("specialists")):
            found.add(f"layer: {importer} -> {imported}")
    _check(found, "layer")


def test_sibling_packages_on_one_layer_do_not_import_each_other() -> None:
    found = set()
    for importer, imported in edges():
        (rank_from, group_from), (rank_to, group_to) = layer(importer), layer(imported)
        if rank_from == rank_to and {group_from, group_to} <= SIBLINGS and group_from != group_to:
            found.add(f"sibling: {importer} -> {imported}")
    _check(found, "sibling")


def test_every_specialist_of_the_catalogue_is_a_folder_of_its_own() -> None:
    # The sibling rule reads its groups from the catalogue: a specialist whose name is not
    # its folder would escape it.
    assert len(SPECIALIST_GROUPS) >= 4
    for group in (*SPECIALIST_GROUPS, *PURE):
        assert modules()[group].is_package, group


def _imported_roots(name: str) -> Iterator[str]:
    module = modules()[name]
    for node in ast.walk(tree(name)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield _resolve(module, node)


def test_pure_packages_do_no_io_and_import_no_specialist() -> None:
    found = set()
    for name in modules():
        pure = next((package for package in PURE if layer(name)[1] == package), None)
        if pure is None:
            continue
        for imported in _imported_roots(name):
            root = imported.split(".")[0]
            # A pure package may use another (formats renders documents with extract's
            # Markdown): purity holds as long as each of them stays pure.
            other = imported.startswith("specialists") and not imported.startswith(PURE)
            if root in PURE_FORBIDDEN or other:
                found.add(f"pure: {name} -> {imported}")
    _check(found, "pure")


def test_the_pure_check_sees_a_forbidden_import() -> None:
    # The pure rule must see what it forbids, or it would pass on a package that breaks it.
    module = Module("specialists.extract._probe", ROOT / "probe.py", False)
    node = ast.parse("from ..web import x").body[0]
    assert isinstance(node, ast.ImportFrom)
    assert _resolve(module, node) == "specialists.web"
    assert layer("specialists.extract._probe")[1] == "specialists.extract"
    assert layer("specialists.browser.engine")[1] == "specialists.browser"


def test_specialists_use_only_the_public_core() -> None:
    found = set()
    for importer, imported in edges():
        if layer(importer)[1] not in PRIVATE_CORE_USERS or layer(imported)[1] != "core":
            continue
        if imported.removeprefix("csp_web.core.") not in PUBLIC_CORE:
            found.add(f"private: {importer} -> {imported}")
    _check(found, "private")


def test_each_program_imports_only_the_layers_below_it() -> None:
    found = set()
    for importer, imported in edges():
        group_from, group_to = layer(importer)[1], layer(imported)[1]
        allowed = PROGRAM_IMPORTS.get(group_from)
        if allowed is not None and group_to not in allowed | {group_from, "package"}:
            found.add(f"program: {importer} -> {imported}")
    _check(found, "program")


def test_nothing_imports_the_composition_root_but_itself() -> None:
    found = {
        f"root: {importer} -> {imported}"
        for importer, imported in edges()
        if layer(imported)[1] == "app" and layer(importer)[1] != "app"
    }
    _check(found, "root")


def _core_layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["csp_web", "core"] else None


def test_core_layers_import_only_downward() -> None:
    assert {name for name in map(_core_layer, modules()) if name} == set(CORE_LAYERS)
    found = set()
    for importer, imported in edges():
        layer_from, layer_to = _core_layer(importer), _core_layer(imported)
        if layer_from is None or layer_to is None or layer_from == layer_to:
            continue
        if CORE_LAYERS[layer_to] >= CORE_LAYERS[layer_from]:
            found.add(f"core: {importer} -> {imported}")
    _check(found, "core")


def test_the_program_rules_catch_an_import_back_up() -> None:
    # Each rule above must be able to fail: the groups it reads are the ones the scan gives.
    assert layer("csp_web.client.trio_client")[1] == "client"
    assert layer("csp_web.sink.server")[1] == "sink"
    assert layer("csp_web.mcp_face.serve")[1] == "mcp_face"
    assert layer("csp_web.cli.replay")[1] == "cli"
    assert layer("csp_web.app.main")[1] == "app"
    assert "app" not in set().union(*PROGRAM_IMPORTS.values())
    assert _core_layer("csp_web.core.wire.connection") == "wire"
    assert ("csp_web.app.compose", "csp_web.cli.cassette_run") in edges()


def _strongly_connected(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> Iterator[list[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                yield from visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            yield component

    for node in sorted(graph):
        if node not in index:
            yield from visit(node)


def test_the_import_graph_has_no_cycles() -> None:
    graph: dict[str, set[str]] = {}
    for importer, imported in edges():
        # A package's __init__ importing its own submodules is how a package is built, not
        # a cycle: only imports of a package from outside it count as edges into it.
        if modules()[imported].is_package and importer.startswith(imported + "."):
            continue
        graph.setdefault(importer, set()).add(imported)
    found = {
        "cycle: " + ", ".join(sorted(component))
        for component in _strongly_connected(graph)
        if len(component) > 1
    }
    _check(found, "cycle")


def _calls(name: str) -> Iterator[str]:
    for node in ast.walk(tree(name)):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                yield func.id
            elif isinstance(func, ast.Attribute):
                yield func.attr


def test_only_core_replies_builds_a_reply_frame() -> None:
    found = set()
    for name in modules():
        if name.startswith("protocol"):
            continue  # the protocol defines Reply and parses replies
        calls = set(_calls(name))
        if "Reply" in calls and name != "csp_web.core.api.replies":
            found.add(f"reply: {name} builds Reply(")
        # Endpoints with a connection loop of their own, for other peers than the daemon's
        # clients: the reference Memory Specialist, a node link (a paired node's frames) and
        # the reference node. Each loop is its one exception-to-reply place, with core's
        # fail_reply; the daemon's tasks are answered only by core.dispatch.
        own_server = name.startswith(OWN_SERVERS)
        if "fail_reply" in calls and layer(name)[1] != "core" and not own_server:
            found.add(f"reply: {name} calls fail_reply(")
    _check(found, "reply")


def test_protocol_imports_nothing_outside_protocol() -> None:
    found = {
        f"protocol: {importer} -> {imported}"
        for importer, imported in edges()
        if importer.startswith("protocol") and not imported.startswith("protocol")
    }
    assert found == set()


def test_the_scan_sees_lazy_and_type_checking_imports() -> None:
    # The scan must see imports inside functions and under TYPE_CHECKING, or the rules
    # above would pass on code that breaks them.
    lazy = ast.parse("def f():\n    from csp_web import context\nif TYPE_CHECKING:\n    import x\n")
    names = [n for n in ast.walk(lazy) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert len(names) == 2
    assert ("csp_web.app.main", "csp_web.config.load") in edges()

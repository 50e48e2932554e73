"""Every name the docs and the code's own prose give for a part of this repository exists.

Read: docs/*.md, README.md, protocol/*.md (SPEC, NODES); the docstrings and comments of the
Python under csp_web/, specialists/, protocol/, tests/, bench/ and scripts/; the comments of the
shell scripts, the systemd units, config.yaml, pyproject.toml and the ``.csp`` transcripts.
Checked, each where it is written:

- a path rooted at a top folder of the repo (``csp_web/core/api/logs.py``, ``tests/corpus/``) names
  a file or folder that exists;
- a dotted name rooted at a package (``csp_web.core.api.logs.setup_logging``) imports, and each
  part after the module is an attribute (or a dataclass field) of what precedes it;
- a bare or partial ``.py`` path (``core/api/ports.py``, ``fleet.py``) is the end of a file's path;
- a relative Markdown link resolves from the document that holds it.

A module moved or renamed without its mentions fails here, naming the file and line.
"""

from __future__ import annotations

import importlib
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP_FOLDERS = ("csp_web", "specialists", "protocol", "tests", "bench", "scripts", "docs", "deploy")
PACKAGES = ("csp_web", "specialists", "protocol", "tests")
PYTHON_FOLDERS = ("csp_web", "specialists", "protocol", "tests", "bench", "scripts")
DOCS = (
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "README.md",
    *sorted((ROOT / "protocol").glob("*.md")),
)
HASH_COMMENTED = (
    *(p for p in sorted((ROOT / "scripts").iterdir()) if p.is_file() and p.suffix != ".py"),
    *sorted((ROOT / "deploy").rglob("*.*")),
    ROOT / "config.yaml",
    ROOT / "pyproject.toml",
    *sorted((ROOT / "tests").rglob("*.csp")),
)
# Files of other projects, cited as the precedent of ours.
FOREIGN = frozenset(
    {
        "tests/strategies.py",  # attrs
        "tests/test_io.py",  # h11
        "test_encode_decode.py",  # hpack
    }
)

# Not preceded by a name character, a dot, a slash or a dash: a path inside a URL or inside a
# longer path is some other project's.
_START = r"(?<![\w./~-])"
ROOTED_PATH = re.compile(_START + rf"(?:{'|'.join(TOP_FOLDERS)})/[\w./-]*")
DOTTED_NAME = re.compile(_START + rf"(?:{'|'.join(PACKAGES)})(?:\.\w+)+")
PY_PATH = re.compile(_START + r"(?:[\w-]+/)*\w+\.py\b")
MD_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


# A string token after these starts a statement of its own: a docstring (or a bare string
# used as one).
_STATEMENT_START = frozenset(
    {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
)


def _python_prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of each docstring and comment of a Python file."""
    source = io.StringIO(path.read_text("utf-8"))
    before, depth = tokenize.NEWLINE, 0  # depth: brackets open, where a string is an argument
    for token in tokenize.generate_tokens(source.readline):
        if token.type == tokenize.COMMENT or (
            token.type == tokenize.STRING and not depth and before in _STATEMENT_START
        ):
            for offset, line in enumerate(token.string.splitlines()):
                yield token.start[0] + offset, line
        if token.type == tokenize.OP:
            depth += (token.string in "([{") - (token.string in ")]}")
        if token.type != tokenize.COMMENT:
            before = token.type


def prose() -> Iterator[tuple[Path, int, str]]:
    """(file, line number, line) of every text this test reads."""
    for path in DOCS:
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            yield path, number, line
    for path in HASH_COMMENTED:
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if line.lstrip().startswith("#"):
                yield path, number, line
            elif " #" in line:  # a comment after a setting
                yield path, number, line[line.index(" #") :]
    for folder in PYTHON_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in _python_prose(path):
                yield path, number, line


@cache
def _repo_files() -> tuple[str, ...]:
    return tuple(
        path.relative_to(ROOT).as_posix()
        for folder in TOP_FOLDERS
        for path in (ROOT / folder).rglob("*.py")
    )


def _path_exists(mention: str) -> bool:
    return (ROOT / mention.rstrip(".-")).exists()


def _py_path_exists(mention: str) -> bool:
    return any(name == mention or name.endswith("/" + mention) for name in _repo_files())


def _module_part(parts: list[str]) -> int:
    """How many leading parts of a dotted name name a module of the repo (0: none)."""
    for count in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:count])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return count
    return 0


def _dotted_resolves(mention: str) -> bool:
    parts = mention.split(".")
    count = _module_part(parts)
    if not count:
        return False
    target: object = importlib.import_module(".".join(parts[:count]))
    for name in parts[count:]:
        if not hasattr(target, name):
            # A dataclass field without a default: its value exists only on instances.
            return name in getattr(target, "__dataclass_fields__", {})
        target = getattr(target, name)
    return True


def stale_names(line: str, *, document: Path = ROOT / "docs" / "x.md") -> list[str]:
    """The names in ``line`` that name nothing in the repository; links resolve from
    ``document``'s folder."""
    stale = [m for m in ROOTED_PATH.findall(line) if not _path_exists(m)]
    stale += [m for m in DOTTED_NAME.findall(line) if not _dotted_resolves(m)]
    stale += [
        m
        for m in PY_PATH.findall(line)
        if m.split("/")[0] not in TOP_FOLDERS and not _py_path_exists(m)
    ]
    if document.suffix == ".md":
        links = (m for m in MD_LINK.findall(line) if not re.match(r"[a-z]+:", m))
        stale += [m for m in links if not (document.parent / m).exists()]
    return [m for m in stale if m not in FOREIGN]


@pytest.mark.slow
def test_every_repo_name_in_the_docs_and_the_codes_prose_exists() -> None:
    stale = [
        f"{path.relative_to(ROOT)}:{number}: {name}"
        for path, number, line in prose()
        for name in stale_names(line, document=path)
    ]
    assert stale == []


@pytest.mark.parametrize(
    ("line", "stale"),
    [
        ("`csp_web/redis_cache.py` holds the cache", ["csp_web/redis_cache.py"]),
        ("see ``csp_web.memory_embedded``.", ["csp_web.memory_embedded"]),
        (
            "the store (``csp_web.sink.store.NoSuchThing``)",
            ["csp_web.sink.store.NoSuchThing"],
        ),
        (
            "a table in `config_exec.py`, then `core/nowhere.py`",
            ["config_exec.py", "core/nowhere.py"],
        ),
        ("[the plan](composition-plan-gone.md)", ["composition-plan-gone.md"]),
        (
            "a page `tests/transcripts/gone/` and `scripts/gone.sh`",
            ["tests/transcripts/gone/", "scripts/gone.sh"],
        ),
    ],
)
def test_a_stale_name_is_found(line: str, stale: list[str]) -> None:
    assert stale_names(line) == stale


@pytest.mark.parametrize(
    "line",
    [
        "`csp_web/core/api/logs.py`, `csp_web.core.api.logs.setup_logging`, the `specialists/web/`",
        "``csp_web.config.Config.daemon``: a dataclass field; `core/api/ports.py`, `fleet.py`.",
        "the protocol. Then tests/corpus/*.csp and specialists/<name>/__init__.py.",
        "https://github.com/python-hyper/h11/blob/master/tests/test_io.py and csp_web.*",
        "[ops](ops.md), [config](../config.yaml), [h11](https://github.com/python-hyper/h11)",
        "after attrs' tests/strategies.py",
    ],
)
def test_live_names_and_prose_are_not_flagged(line: str) -> None:
    assert stale_names(line) == []

"""Strict loading of configuration files into ``csp_web.config.Config``: the one loader.

Unknown or misspelt keys are errors that name their dotted path, as msgspec's
``forbid_unknown_fields`` does (hypercorn's lenient loader silently ignores a typo, which is how
a security setting goes unapplied). Types are checked against the dataclass annotations, and
every scalar number must be positive unless its field says zero means "off".

A union of dataclasses is a tagged union when each member names in ``TAG`` the key only it
has (the MCP server kinds: ``command`` or ``url``); the value must hold exactly one of them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import stat
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from csp_web.config.errors import ConfigError
from csp_web.config.root import Config, SectionSpec

ENV_VAR = "CSP_WEB_CONFIG"
_MAX_INT = 2**63 - 1
T = typing.TypeVar("T")


def load_config(
    path: str | None = None, *, sections: Sequence[SectionSpec] = (), regular_only: bool = False
) -> Config:
    """Read ``path``, else the file named by $CSP_WEB_CONFIG, else the embedded defaults;
    the result's ``source`` names the file read. ``sections``: the specialists' own sections
    (the catalogue's, ``csp_web.app.catalog.config_sections``), each at its key: top-level, or
    dotted inside a core section or another own one (``tool.browser`` inside ``tool``).
    ``regular_only`` (a SIGHUP's reload): ConfigError unless ``path`` is a regular file, never
    a wait for a pipe's writer; a command's own load reads what it is given (``check-config
    /dev/stdin``, ``serve --config <(...)``)."""
    path = path or os.environ.get(ENV_VAR)
    if not path:
        return Config()
    try:
        with _open_regular(path) if regular_only else open(path, encoding="utf-8") as file:
            data = yaml.load(file, Loader=_StrictLoader)  # a SafeLoader: no Python tags
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except RecursionError:  # PyYAML composes recursively: "[[[[..." past the stack
        raise ConfigError(f"{path}: not valid YAML: nested too deeply") from None
    config = config_from_mapping(data or {}, sections=sections)
    return dataclasses.replace(config, source=os.path.abspath(path))


def _open_regular(path: str) -> typing.TextIO:
    """``path`` opened for reading as text, when it is a regular file. Opened non-blocking
    and typed first: a FIFO put in the config's place held a SIGHUP's reload until a writer
    came (for good, and every later reload behind it: a uid never revoked), and a device
    could be read without end. Raises ConfigError for anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path}: not a regular file")
        return open(fd, encoding="utf-8", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def complete_sections(config: Config, sections: Sequence[SectionSpec]) -> Config:
    """``config`` holding each of ``sections`` the file left out, at its defaults (as
    ``section_of`` reads it): shared settings that a section holds (the web's guard and
    cache) can then be changed where they stand (``with_shared``: replay opens the guard)."""
    present = dict(config.sections)
    if all(spec.key in present for spec in sections):
        return config
    ordered = {spec.key: present.get(spec.key) or spec.cls() for spec in sections}
    return dataclasses.replace(config, sections=tuple({**ordered, **present}.items()))


def serving_socket(config: Config, path: str | None) -> Config:
    """``config`` with ``path`` (``serve --socket``, or systemd's socket) as ``socket.path``,
    so the daemon's own paths, and so the exec sandbox's masks and the workspace-root check,
    cover the socket it really serves; ConfigError when a workspace root overlaps it."""
    if path is None or path == config.socket.path:
        return config
    try:
        return dataclasses.replace(config, socket=dataclasses.replace(config.socket, path=path))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping: PyYAML keeps the last
    silently, so a second ``exec:`` block would drop the first one's settings unseen."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<": its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, typing.Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def config_from_mapping(data: object, *, sections: Sequence[SectionSpec] = ()) -> Config:
    """Build a Config from parsed YAML, raising ConfigError for any unknown or bad key; the
    top-level keys of ``sections`` become ``Config.sections`` (checked as strictly)."""
    if not isinstance(data, Mapping):
        raise ConfigError("<root>: expected a mapping")
    own = {spec.key: spec.cls for spec in sections}
    taken = {key for key in own if _shadows(key, own)}
    if taken or len(own) != len(sections):  # a catalogue bug, not the file's
        raise ValueError(f"config sections named twice: {sorted(taken) or 'a key'}")
    core, found = _split_own(data, own)
    built = tuple((key, _build(own[key], value, key)) for key, value in found)
    config = load_section(Config, core, "")
    if not built:
        return config
    try:
        return dataclasses.replace(config, sections=built)
    except (TypeError, ValueError) as exc:  # the root's own checks, now over these sections
        raise ConfigError(str(exc)) from exc


def _shadows(key: str, own: Mapping[str, type]) -> bool:
    """Whether ``key`` names a setting of the core's own tree or of another own section
    (``tool.exec`` beside ``tool``): that setting would never be read (a catalogue bug, as is
    a key named twice)."""
    holders: list[tuple[str, type]] = [("", Config), *own.items()]
    for holder, cls in holders:
        if holder and not key.startswith(holder + "."):
            continue
        if _names_setting(cls, key.removeprefix(holder + ".") if holder else key):
            return True
    return False


def _names_setting(cls: Any, key: str) -> bool:
    """Whether the dotted ``key`` names a setting of the section class ``cls``, or lies
    under a scalar one."""
    for part in key.split("."):
        if not dataclasses.is_dataclass(cls) or part not in {
            f.name for f in dataclasses.fields(cls)
        }:
            return not dataclasses.is_dataclass(cls)
        cls = typing.get_type_hints(cls)[part]
    return True


def _split_own(
    data: Mapping[Any, Any], keys: Iterable[str]
) -> tuple[dict[Any, Any], list[tuple[str, object]]]:
    """``data`` without the specialists' own sections, and each section found, by its key
    (in the order of ``keys``): a top-level key (``nodes``) or a dotted one inside a core
    section or another own one (``tool.browser`` inside ``tool``), taken out first."""
    core = dict(data)
    found = {}
    order = list(keys)
    for key in sorted(order, key=lambda key: -key.count(".")):
        parent, _, name = key.rpartition(".")
        holder = _holder(core, parent.split(".") if parent else [])
        if holder is not None and name in holder:
            found[key] = holder.pop(name)
    return core, [(key, found[key]) for key in order if key in found]


def _holder(core: dict[Any, Any], parts: list[str]) -> dict[Any, Any] | None:
    """The mapping at ``parts`` in ``core``, each level copied so that taking a key out of
    it leaves the parsed file as it was; None where there is no mapping."""
    holder = core
    for part in parts:
        value = holder.get(part)
        if not isinstance(value, Mapping):
            return None
        holder[part] = holder = dict(value)
    return holder


def load_section(cls: type[T], data: object, path: str) -> T:
    """Build the section dataclass ``cls`` that stands at ``path`` from parsed YAML."""
    return typing.cast(T, _build(cls, data, path))


def _build(cls: type, data: object, path: str) -> object:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or '<root>'}: expected a mapping")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, object] = {}
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in fields or fields[key].metadata.get("internal", False):
            raise ConfigError(f"{key_path}: unknown key")
        # A number must be positive unless its field says zero means "off" (metadata).
        positive = not fields[key].metadata.get("zero_ok", False)
        kwargs[key] = _convert(hints[key], value, key_path, positive=positive)
    try:
        return cls(**kwargs)
    except ConfigError as exc:  # a section's own check, naming a path inside it
        raise ConfigError(f"{path}.{exc}" if path else str(exc)) from None
    except (TypeError, ValueError) as exc:  # the root's own checks name their paths
        raise ConfigError(f"{path}: {exc}" if path else str(exc)) from exc


def _convert(hint: Any, value: object, path: str, *, positive: bool = True) -> object:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _build(hint, value, path)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        members = [arg for arg in args if arg is not type(None)]
        if len(members) > 1:
            return _build(_tagged_member(members, value, path), value, path)
        return _convert(members[0], value, path, positive=positive)
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{path}: expected one of {', '.join(map(str, args))}")
        return value
    if origin in (tuple, frozenset):
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list")
        items = [_convert(args[0], v, f"{path}[{i}]", positive=False) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else frozenset(items)
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping")
        entries = {str(k): _convert(args[1], v, f"{path}.{k}") for k, v in value.items()}
        return entries if origin is dict else types.MappingProxyType(entries)
    return _scalar(hint, value, path, positive=positive)


def _tagged_member(members: list[Any], value: object, path: str) -> type:
    """The member of a tagged union whose ``TAG`` key ``value`` holds (exactly one must)."""
    tags = [getattr(member, "TAG", None) for member in members]
    if not all(isinstance(tag, str) for tag in tags):
        raise TypeError(f"{path}: a union of several types needs a TAG on each member")
    present = [
        m
        for m, tag in zip(members, tags, strict=True)
        if isinstance(value, Mapping) and tag in value
    ]
    if len(present) != 1:
        raise ConfigError(
            f"{path}: must be a mapping with exactly one of {' or '.join(map(str, tags))}"
        )
    return typing.cast(type, present[0])


def _scalar(hint: Any, value: object, path: str, *, positive: bool) -> object:
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value  # type: ignore[arg-type]
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint)
    if not ok:
        raise ConfigError(f"{path}: expected {getattr(hint, '__name__', hint)}")
    if isinstance(value, float) and not math.isfinite(value):  # a NaN deadline crashes trio
        raise ConfigError(f"{path}: must be a finite number")
    if isinstance(value, int) and abs(value) > _MAX_INT:  # SQLite and the kernel take int64
        raise ConfigError(f"{path}: must be at most {_MAX_INT}")
    if positive and isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
        raise ConfigError(f"{path}: must be positive")
    return value

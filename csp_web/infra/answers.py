"""A worker's answer as JSON, and its checked rebuild in the daemon (workers.py, pool_worker.py).

JSON, not pickle: it has no shared references (a small answer cannot expand into gigabytes
when the daemon walks it: pickle's memo could), no class lookup and no memo table to size,
so an answer's bytes bound what it becomes. The daemon rebuilds the value from the type the
caller expects (``decode(data, Page)``, ``decode(data, tuple[str, ...])``): every field of a
dataclass checked against its annotation, nothing more and nothing else accepted; an
exception only of the classes the caller names, with scalar attributes. Standard library
only: a worker imports this before any task.

    encode(value) -> bytes                  in the worker
    decode(data, shape, raises=()) -> value in the daemon; raises Malformed, or the
                                            task's own exception rebuilt
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

_SCALARS = (str, int, float, bool, type(None))
_CLASS = "$"  # the key naming a dataclass's class in its JSON object


class Malformed(ValueError):
    """An answer that is not of the shape expected: the worker is broken or subverted."""


class TaskRaised(Exception):
    """The task raised an exception of a class the caller did not name; ``text`` is its
    traceback."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def encode_value(value: object) -> bytes:
    """``value`` (builtins' scalars and containers, dataclasses of them) as an answer."""
    return _dumps({"ok": _plain(value)})


def encode_raised(exc: BaseException, text: str) -> bytes:
    """The exception ``exc`` a task raised, with its traceback ``text``, as an answer."""
    cls = type(exc)
    attrs = {k: v for k, v in vars(exc).items() if isinstance(v, _SCALARS)}
    args = [a for a in exc.args if isinstance(a, _SCALARS)]
    raised = {"class": f"{cls.__module__}.{cls.__qualname__}", "args": args, "attrs": attrs}
    return _dumps({"raised": raised, "text": text})


def decode(data: bytes, shape: Any, raises: Iterable[type[BaseException]] = ()) -> Any:
    """The value the answer ``data`` carries, rebuilt as ``shape``; raises the exception it
    carries when of a class in ``raises``, else TaskRaised. Raises Malformed for anything
    else (not JSON, nested past the parser's depth, a field of another type, an extra key)."""
    try:
        answer = json.loads(data.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        raise Malformed("not JSON") from exc
    if not isinstance(answer, dict):
        raise Malformed("not an object")
    if answer.keys() == {"ok"}:
        return rebuild(answer["ok"], shape)
    if answer.keys() == {"raised", "text"} and isinstance(answer["text"], str):
        raise _exception(answer["raised"], raises) or TaskRaised(answer["text"])
    raise Malformed("neither a value nor an exception")


def rebuild(value: object, shape: Any) -> Any:
    """``value`` (parsed JSON) as the type ``shape``; raises Malformed when it is not one."""
    return _builder(shape)(value)


Builder = Callable[[object], Any]


@functools.cache  # the answers' few shapes (Page and its fields' types, ...): a bounded set
def _builder(shape: Any) -> Builder:
    """The function that rebuilds a value as ``shape``, chosen once per shape: choosing it
    per value (typing.get_origin, get_args, is_dataclass for each field of each answer) made
    decoding a page's answer 5.05-5.15x its JSON parse; now 2.64-2.76x, about 0.12 ms a page
    less (``python bench/pool_exchange.py``, alternated with main, load 4.4-5.0; issue 26)."""
    origin = typing.get_origin(shape)
    if origin in (typing.Union, types.UnionType):
        return functools.partial(_first_fit, arms=typing.get_args(shape))
    if origin is typing.Literal:
        return functools.partial(_literal, allowed=typing.get_args(shape))
    if dataclasses.is_dataclass(shape) and isinstance(shape, type):
        return functools.partial(_dataclass, cls=shape)
    if origin in (tuple, list) or shape in (tuple, list):
        return functools.partial(_sequence, shape=shape, origin=origin or shape)
    if origin in (dict, Mapping) or shape is dict:
        return functools.partial(_mapping, shape=shape)
    return functools.partial(_scalar, shape=shape)


def _literal(value: object, allowed: tuple[Any, ...]) -> object:
    if value in allowed and isinstance(value, str | int | bool):
        return value
    raise Malformed("not one of the literals")


def _scalar(value: object, shape: Any) -> object:
    if shape is None or shape is type(None):
        fits = value is None
    elif shape is float:  # a float field may hold an int, as Python lets it
        fits = type(value) in (int, float)
    else:
        fits = shape in (str, int, bool) and type(value) is shape
    if not fits:
        raise Malformed(f"not a {getattr(shape, '__name__', shape)}")
    return value


def _first_fit(value: object, arms: tuple[Any, ...]) -> object:
    if value is None and type(None) in arms:  # no other arm takes None: skip their refusals
        return None
    for arm in arms:
        try:
            return rebuild(value, arm)
        except Malformed:
            continue
    raise Malformed("of none of the union's types")


def _sequence(value: object, shape: Any, origin: type) -> object:
    if not isinstance(value, list):
        raise Malformed("not an array")
    args = typing.get_args(shape)
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(args) != len(value):
            raise Malformed("a tuple of another length")
        return tuple(rebuild(item, arm) for item, arm in zip(value, args, strict=True))
    build = _builder(args[0] if args else Any)
    items = [build(item) for item in value]
    return tuple(items) if origin is tuple else items


def _mapping(value: object, shape: Any) -> dict[str, object]:
    if not isinstance(value, dict):
        raise Malformed("not an object")
    args = typing.get_args(shape)
    build = _builder(args[1] if args else Any)
    return {key: build(v) for key, v in value.items()}


def _dataclass(value: object, cls: type) -> object:
    """An instance of the dataclass ``cls`` from its JSON object: each key one of its
    fields, each value of that field's type; no other key."""
    if not isinstance(value, dict) or value.get(_CLASS) != cls.__qualname__:
        raise Malformed(f"not a {cls.__qualname__}")
    hints = _schema(cls)
    values = {k: v for k, v in value.items() if k != _CLASS}
    if not values.keys() <= hints.keys():
        raise Malformed(f"a {cls.__qualname__} with other fields")
    return cls(**{name: _builder(hints[name])(v) for name, v in values.items()})


@functools.cache  # the answers' few dataclasses (Page, ...): a bounded set
def _schema(cls: type) -> dict[str, Any]:
    """The type of each field of ``cls`` that its ``__init__`` takes. Kept per class: the
    annotations' evaluation (``typing.get_type_hints``) took 4.5 % of the event loop's CPU
    on an uncached fetch, about 0.5 ms a page (py-spy --gil, /tmp profile of bench/fetch.py's
    uncached loop, load 4-8; issue 26)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _exception(raised: object, raises: Iterable[type[BaseException]]) -> BaseException | None:
    """The exception ``raised`` describes, when of a class in ``raises`` and well formed:
    built without running its __init__, its args and attributes scalars only."""
    by_name = {f"{cls.__module__}.{cls.__qualname__}": cls for cls in raises}
    if not isinstance(raised, dict) or raised.keys() != {"class", "args", "attrs"}:
        raise Malformed("an exception of another shape")
    cls, args, attrs = by_name.get(str(raised["class"])), raised["args"], raised["attrs"]
    if cls is None:
        return None
    if not isinstance(args, list) or not isinstance(attrs, dict):
        raise Malformed("an exception of another shape")
    if not all(isinstance(v, _SCALARS) for v in (*args, *attrs.values())):
        raise Malformed("an exception with a value that is not a scalar")
    if any(name.startswith("_") or not name.isidentifier() for name in attrs):
        raise Malformed("an exception with a private attribute")
    exc = cls.__new__(cls)
    exc.args = tuple(args)
    for name, v in attrs.items():
        setattr(exc, name, v)
    return exc


def _plain(value: object) -> object:
    """``value`` as JSON's types: a dataclass an object naming its class, a tuple a list."""
    if isinstance(value, _SCALARS):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {_CLASS: type(value).__qualname__, **fields}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    raise TypeError(f"a {type(value).__qualname__} is not an answer a worker can send")


def _dumps(answer: object) -> bytes:
    # UTF-8 as is (ensure_ascii would double CJK text); a lone surrogate passes through.
    return json.dumps(answer, ensure_ascii=False).encode("utf-8", "surrogatepass")

"""A peer's forwarded node task is checked by the holding daemon as the ``node`` op checks a
client's (protocol/NODES.md N-17): name, action, and PARAMS at 8192 characters and not one
more."""

from __future__ import annotations

import json

import pytest

from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.node import ops_node
from specialists.node.forward_wire import MAX_PARAMS_CHARS, checked_task


def task(**fields: object) -> dict[str, object]:
    return {"name": "lab1", "action": "notify", "params": {}, **fields}


def params_of(chars: int) -> dict[str, str]:
    params = {"title": "x" * (chars - len(json.dumps({"title": ""})))}
    assert len(json.dumps(params)) == chars
    return params


def test_the_holder_checks_params_with_the_node_ops_own_limit() -> None:
    assert MAX_PARAMS_CHARS == ops_node.MAX_PARAMS_CHARS


def test_a_forwarded_task_with_params_at_the_limit_is_taken() -> None:
    params = params_of(MAX_PARAMS_CHARS)
    assert checked_task(task(params=params)) == ("lab1", "notify", params)


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"params": params_of(MAX_PARAMS_CHARS + 1)}, ErrorCode.INVALID_FIELD),
        ({"params": ["not", "an", "object"]}, ErrorCode.INVALID_FIELD),
        ({"action": "rm"}, ErrorCode.INVALID_FIELD),
        ({"name": "../etc"}, ErrorCode.NODE_UNKNOWN),
        ({"name": None}, ErrorCode.NODE_UNKNOWN),
    ],
)
def test_a_forwarded_task_out_of_bounds_is_refused_with_its_code(
    fields: dict[str, object], code: ErrorCode
) -> None:
    with pytest.raises(OpError) as raised:
        checked_task(task(**fields))
    assert raised.value.code is code

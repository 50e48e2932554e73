"""Logins kept: ``save_state``, ``forget_state`` and the ``STATE`` field (docs/browser.md).

    ACTION save_state  SESSION shop NAME shop-login    the session's cookies and storage, kept
    ACTION forget_state NAME shop-login                 removed
    ACTION navigate SESSION s2 STATE shop-login ...     s2 opens holding them

A state belongs to the uid that saved it (``states.StateStore``); it is read only to open a
context with it, and its contents appear in no reply, log or audit record.
"""

from __future__ import annotations

import json

import trio

from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import OpError
from csp_web.core.api.fields import FieldSpec, Params, ReplyField
from csp_web.core.api.replies import Result
from protocol import ErrorCode
from specialists.browser.config import BrowserConfig, browser_section

from .pages import PageSet
from .services import BrowserServices
from .sessions import owner_of
from .states import StateLimits, StateStore, check_name
from .steps import SCOPE, Handlers, on_pages, require_field


def _limits(config: BrowserConfig) -> StateLimits:
    return StateLimits(config.state_ttl_s, config.max_states_per_peer, config.max_state_bytes)


def _store(services: BrowserServices) -> StateStore:
    if services.states is None:
        raise OpError(ErrorCode.INTERNAL_ERROR, "no state store", scope=SCOPE)
    return services.states


async def _save_state(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    """Keep the session's storage_state as NAME (the session must be open)."""
    session = require_field(params, "SESSION")
    name = check_name(require_field(params, "NAME"))
    owner = owner_of(ctx.peer.uid, ctx.peer.connection)
    if (owner, session) not in services.sessions.sessions:
        raise OpError(ErrorCode.SESSION_NOT_FOUND, session, scope=SCOPE)
    engine = services.engine

    async def step(pages: PageSet) -> tuple[bytes, str]:
        state = await engine.run(pages.context.storage_state)
        return json.dumps(state, separators=(",", ":")).encode(), str(pages.page.url)

    state, url = await on_pages(services, ctx, session, step)
    limits = _limits(browser_section(ctx.config))
    await trio.to_thread.run_sync(_store(services).save, owner, name, state, limits)
    fields = (("URL", url), ("STATE", name), ("STATE_BYTES", str(len(state))))
    return Result(f"action:save_state,state:{name}", SCOPE, fields)


async def _forget_state(services: BrowserServices, ctx: OpContext, params: Params) -> Result:
    name = check_name(require_field(params, "NAME"))
    owner = owner_of(ctx.peer.uid, ctx.peer.connection)
    limits = _limits(browser_section(ctx.config))
    await trio.to_thread.run_sync(_store(services).forget, owner, name, limits)
    return Result(f"action:forget_state,state:{name}", SCOPE, (("STATE", name),))


async def restore(services: BrowserServices, ctx: OpContext, params: Params) -> None:
    """With STATE: open SESSION (which must be new) holding that saved state, before the
    action runs on it. Without STATE: nothing."""
    name = params.opt_text("STATE")
    if name is None:
        return
    check_name(name)
    session = params.opt_text("SESSION")
    if session is None:
        raise OpError(ErrorCode.MISSING_FIELD, "SESSION (STATE opens a session)", scope=SCOPE)
    config = browser_section(ctx.config)
    owner = owner_of(ctx.peer.uid, ctx.peer.connection)
    if (owner, session) in services.sessions.sessions:
        raise OpError(
            ErrorCode.INVALID_FIELD, f"STATE opens a session: {session} is open", scope=SCOPE
        )
    state = await trio.to_thread.run_sync(_store(services).load, owner, name, _limits(config))
    await services.sessions.open_with_state(session, owner, config, services.guard(), state)


HANDLERS: Handlers = {"save_state": _save_state, "forget_state": _forget_state}

FIELDS = (
    FieldSpec("NAME", max_chars=64, doc="save_state, forget_state: the saved state's name"),
    FieldSpec("STATE", max_chars=64, doc="a saved state the new SESSION opens with"),
)

REPLIES = (
    ReplyField("STATE", "save_state, forget_state", "the saved state's name"),
    ReplyField(
        "STATE_BYTES", "save_state", "the size of what was kept (before encryption)", kind="int"
    ),
)

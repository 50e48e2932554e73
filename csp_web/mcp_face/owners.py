"""What the face refuses a caller of another uid: state the daemon keeps per uid.

The face calls the daemon as its own uid, so the daemon sees every HTTP peer the face admits
(``socket.allowed_uids``) as the face's owner. Whatever the daemon keeps per uid would be the
face owner's for such a call, so a call that reads or writes it is refused
(``permission_denied``) unless it comes from the face's own uid; the table ``_PER_UID`` below
is the one list of it (audited against the op catalogue, ``docs/ops.md``):

- ``board``: the announcement board of fileKeys (``specialists.web.docs.board.owner``), and
  fetch's ``BOARD`` field, which appends it to the reply;
- ``save`` and ``cabinet``: the cabinet of pages saved from fileKeys (refused as the review
  asked; the daemon itself keys held pages and the cabinet by fileKey alone);
- ``research`` and ``result``: research jobs, kept per owner (``research.jobs``);
- ``cron``: jobs, kept per uid, which run under their author's uid (``csp_web.cron.table``);
- ``canvas``: canvas nodes are claimed per owner (``browser.ops_canvas``);
- ``browser``: sessions and saved logins (``SESSION``, ``STATE``, ``NAME``, ACTIONs
  ``save_state`` and ``forget_state``; ``specialists.browser.sessions.owner_of``,
  ``states.StateStore``);
- a ``BUDGET_ID`` on any op (``budgets.md``): the owner's budget would pay another's calls.

Left as they are: the other ops keep nothing a caller can read back by uid, but fetch,
search, summarize and the like still post their pages on (and age) the face owner's board,
which another uid through the face cannot read.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol import Task


@dataclass(frozen=True)
class PerUid:
    """What in one op names state kept per uid: every call (``whole``), or the calls that
    carry one of ``fields`` or one of ``actions`` as their ACTION."""

    whole: bool = False
    fields: frozenset[str] = frozenset()
    actions: frozenset[str] = frozenset()


_WHOLE = PerUid(whole=True)
_PER_UID: dict[str, PerUid] = {
    "board": _WHOLE,
    "save": _WHOLE,
    "cabinet": _WHOLE,
    "research": _WHOLE,
    "result": _WHOLE,
    "cron": _WHOLE,
    "canvas": _WHOLE,
    "fetch": PerUid(fields=frozenset({"BOARD"})),
    "browser": PerUid(
        fields=frozenset({"SESSION", "STATE", "NAME"}),
        actions=frozenset({"save_state", "forget_state"}),
    ),
}
_PER_UID_ANY_OP = frozenset({"BUDGET_ID"})  # the owner's budget would pay another's calls


def foreign_refusal(task: Task, peer_uid: int | None, own_uid: int) -> str | None:
    """Why ``task`` may not run for ``peer_uid`` through a face running as ``own_uid`` (the
    detail of ``permission_denied``), or None when it may. An unknown peer uid (None) is
    another uid: fail closed."""
    if peer_uid == own_uid:
        return None
    what = _per_uid_label(task)
    if what is None:
        return None
    who = "an unknown uid" if peer_uid is None else f"uid {peer_uid}"
    return (
        f"{what}: this state is kept per uid, and this face calls the daemon as uid "
        f"{own_uid}, not {who}; use the daemon's socket as your own uid"
    )


def _per_uid_label(task: Task) -> str | None:
    """What in ``task`` names per-uid state: the op for a whole op, else the op then its
    fields and ``ACTION <name>``s, sorted; None when nothing does. An inline ACTION counts as
    a field's."""
    rule = _PER_UID.get(task.req, PerUid())
    if rule.whole:
        return task.req
    named = sorted({name for name, _ in task.fields if name in rule.fields | _PER_UID_ANY_OP})
    actions = {value for name, value in task.fields if name == "ACTION"}
    actions |= {task.inline} if task.inline is not None else set()
    written = [f"ACTION {action}" for action in sorted(actions & rule.actions)]
    if not named and not written:
        return None
    return f"{task.req} {', '.join([*named, *written])}"

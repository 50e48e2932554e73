"""What the face refuses a caller of another uid: state the daemon keeps per uid.

The face calls the daemon as its own uid, so the daemon sees every HTTP peer the face admits
(``socket.allowed_uids``) as the face's owner. Most ops keep nothing between tasks and answer
the same whoever asks; the browser's sessions and saved logins are kept per uid
(``specialists.browser.sessions.owner_of``, ``states.StateStore``), and so is a BUDGET_ID
on any op (``budgets.md``). The face cannot carry another uid's identity to the daemon, so a
call naming one of them from another uid would reach the face owner's own sessions, logins or
budgets: it is refused (``permission_denied``).
"""

from __future__ import annotations

from protocol import Task

# Per op: the fields that name state kept per uid, and the ACTIONs that write it.
_PER_UID_FIELDS = {"browser": frozenset({"SESSION", "STATE", "NAME"})}
_PER_UID_ANY_OP = frozenset({"BUDGET_ID"})  # the owner's budget would pay another's calls
_PER_UID_ACTIONS = {"browser": frozenset({"save_state", "forget_state"})}


def foreign_refusal(task: Task, peer_uid: int | None, own_uid: int) -> str | None:
    """Why ``task`` may not run for ``peer_uid`` through a face running as ``own_uid`` (the
    detail of ``permission_denied``), or None when it may. An unknown peer uid (None) is
    another uid: fail closed."""
    if peer_uid == own_uid:
        return None
    fields = _PER_UID_FIELDS.get(task.req, frozenset()) | _PER_UID_ANY_OP
    actions = _PER_UID_ACTIONS.get(task.req, frozenset())
    named = sorted({name for name, _ in task.fields if name in fields})
    written = sorted({value for name, value in task.fields if name == "ACTION"} & actions)
    if not named and not written:
        return None
    what = ", ".join([*named, *(f"ACTION {action}" for action in written)])
    who = "an unknown uid" if peer_uid is None else f"uid {peer_uid}"
    return (
        f"{task.req} {what}: sessions, saved logins and budgets are kept per uid, and this face "
        f"calls the daemon as uid {own_uid}, not {who}; use the daemon's socket as your own uid"
    )

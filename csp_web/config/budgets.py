"""The ``budgets:`` section: where BUDGET_IDs are kept and the budget a uid's frames get when
they name none (SPEC D-3, docs/budgets.md)."""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field

from protocol import BudgetError, NumberError, parse_budget, parse_uint
from protocol._budget import Budget


def _no_defaults() -> Mapping[str, str]:
    return types.MappingProxyType({})


@dataclass(frozen=True)
class BudgetsConfig:
    # uid -> BUDGET (its syntax) for that uid's frames that carry neither BUDGET nor
    # BUDGET_ID: a default for each task an agent sends without saying (issue 29: a quota
    # spent in two days), not a cap (a frame naming a BUDGET of its own gets that one).
    # Empty: such frames are unbudgeted. wall_ms:0 is refused: it would lock the uid out.
    per_uid: Mapping[str, str] = field(default_factory=_no_defaults)
    # A BUDGET_ID unused this long is forgotten (its charges with it): an agent's run is
    # hours, not days; a cron job drawing from one keeps it alive with each run.
    idle_ttl_s: float = 86_400.0
    # BUDGET_IDs the embedded ledger (<state_dir>/budgets.sqlite3) holds at once, and per
    # uid: a new one past either is refused (busy) until one expires. Redis's are bounded
    # by their TTL and the server's memory.
    max_ids: int = 100_000
    max_ids_per_uid: int = 10_000

    def __post_init__(self) -> None:
        for uid, text in self.per_uid.items():
            try:
                if str(parse_uint(uid, maximum=2**32 - 1)) != uid:
                    raise NumberError("leading zeros")
                if parse_budget(text).get("wall_ms") == 0:
                    raise BudgetError("wall_ms:0 refuses every task the uid sends")
            except (NumberError, BudgetError) as exc:
                raise ValueError(f"per_uid.{uid}: {exc}") from None
        if self.max_ids_per_uid > self.max_ids:
            raise ValueError("max_ids_per_uid: must not exceed max_ids")

    def default_for(self, uid: int | None) -> Budget | None:
        """The budget ``uid``'s unbudgeted frames get; None: none (the stdin pipe too)."""
        if not self.per_uid or uid is None:  # the common case, met on every frame
            return None
        text = self.per_uid.get(str(uid))
        return parse_budget(text) if text is not None else None

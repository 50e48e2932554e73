"""BUDGET_IDs on the fleet's Redis (``redis.url``): tasks on every daemon draw from one budget.

One hash per BUDGET_ID, ``p budget:{<id>}`` (the id is the hash tag, so a cluster keeps it on
one slot): ``uid`` (its owner; ``-`` for the stdin pipe), ``lim:<dimension>`` and
``used:<dimension>``. Opening and charging are each one Lua script, so check-and-charge is
atomic across daemons; both refresh the key's TTL (``budgets.idle_ttl_s``), which is what
bounds how many the server holds.

When Redis cannot be reached the task fails closed (``not_available``): a fleet's shared
budget cannot be kept by one daemon alone, and spending unchecked is the overrun budgets are
there to prevent.
"""

from __future__ import annotations

import math

from csp_web.config import BudgetsConfig
from csp_web.core.api.errors import FieldError, OpError
from protocol import DIMENSIONS, ErrorCode
from protocol._budget import Budget

from .redis_link import RedisLink, RedisUnavailable

# KEYS: the hash. ARGV: uid, ttl_s, then dimension, limit pairs (none: it must be held).
# Returns {0}: not held; {-1}: another uid's; {1, dimension, left, ...}: held or made.
_OPEN = """
local owner = redis.call('HGET', KEYS[1], 'uid')
if not owner then
  if #ARGV == 2 then return {0} end
  for i = 3, #ARGV, 2 do
    redis.call('HSET', KEYS[1], 'lim:' .. ARGV[i], ARGV[i + 1], 'used:' .. ARGV[i], 0)
  end
  redis.call('HSET', KEYS[1], 'uid', ARGV[1])
  owner = ARGV[1]
end
if owner ~= ARGV[1] then return {-1} end
redis.call('EXPIRE', KEYS[1], ARGV[2])
local out = {1}
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local name = string.match(fields[i], '^lim:(.*)$')
  if name then
    local used = tonumber(redis.call('HGET', KEYS[1], 'used:' .. name))
    table.insert(out, name)
    table.insert(out, tonumber(fields[i + 1]) - used)
  end
end
return out
"""

# KEYS: the hash. ARGV: dimension, amount, strict (1/0), ttl_s. Not strict (a refund): the
# used amount is clamped to 0..limit, so what is left never goes below 0.
# Returns {0}: refused (or not held, or the dimension not limited); {1, left}: charged.
_CHARGE = """
local limit = redis.call('HGET', KEYS[1], 'lim:' .. ARGV[1])
if not limit then return {0} end
local used = tonumber(redis.call('HGET', KEYS[1], 'used:' .. ARGV[1]))
local amount = tonumber(ARGV[2])
if ARGV[3] == '1' and used + amount > tonumber(limit) then return {0} end
used = math.max(0, math.min(used + amount, tonumber(limit)))  -- never below 0 left
redis.call('HSET', KEYS[1], 'used:' .. ARGV[1], string.format('%d', used))
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {1, tonumber(limit) - used}
"""

# KEYS: the hash. ARGV: dimension, amount, ttl_s. Charges the amount or what is left when less.
# Returns {0}: not held (or the dimension not limited); {1, taken, left}: charged.
_TAKE_UP_TO = """
local limit = redis.call('HGET', KEYS[1], 'lim:' .. ARGV[1])
if not limit then return {0} end
local used = tonumber(redis.call('HGET', KEYS[1], 'used:' .. ARGV[1]))
local taken = math.min(tonumber(ARGV[2]), math.max(0, tonumber(limit) - used))
used = redis.call('HINCRBY', KEYS[1], 'used:' .. ARGV[1], string.format('%d', taken))
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {1, taken, tonumber(limit) - used}
"""


class RedisLedger:
    """BUDGET_IDs on ``link`` (``Ledger``); the link is its owner's."""

    instant = False  # every call is a round trip in a worker thread

    def __init__(self, link: RedisLink, settings: BudgetsConfig) -> None:
        self._link = link
        self._settings = settings
        self._open = link.client.register_script(_OPEN)
        self._charge = link.client.register_script(_CHARGE)
        self._take_up_to = link.client.register_script(_TAKE_UP_TO)

    async def open(self, budget_id: str, uid: int | None, limits: Budget | None) -> Budget:
        args: list[str | int] = [_owner(uid), self._ttl_s()]
        for dimension, amount in (limits or {}).items():
            args += [dimension, amount]
        reply = await self._call(self._open, budget_id, args)
        if reply[0] == 0:
            raise FieldError(ErrorCode.INVALID_FIELD, f"BUDGET_ID {budget_id} not held")
        if reply[0] == -1:
            raise OpError(ErrorCode.PERMISSION_DENIED, f"BUDGET_ID {budget_id} is another uid's")
        left = {
            _text(reply[i]): self._link.integer(reply[i + 1], "budget")
            for i in range(1, len(reply), 2)
        }
        return {d: left[d] for d in DIMENSIONS if d in left}

    async def charge(
        self, budget_id: str, dimension: str, amount: int, *, strict: bool
    ) -> int | None:
        args: list[str | int] = [dimension, amount, int(strict), self._ttl_s()]
        reply = await self._call(self._charge, budget_id, args)
        return self._link.integer(reply[1], "budget") if reply[0] == 1 else None

    async def take_up_to(
        self, budget_id: str, dimension: str, amount: int
    ) -> tuple[int, int] | None:
        reply = await self._call(self._take_up_to, budget_id, [dimension, amount, self._ttl_s()])
        if reply[0] != 1:
            return None
        integer = self._link.integer
        return integer(reply[1], "budget"), integer(reply[2], "budget")

    async def _call(self, script: object, budget_id: str, args: list[str | int]) -> list[object]:
        keys = [self._link.key("budget", "{" + budget_id + "}")]
        try:
            reply = await self._link.call(
                lambda r: script(keys=keys, args=args, client=r),  # type: ignore[operator]
                "budget",
            )
        except RedisUnavailable:
            self._link.fallback("budget_refused")
            raise OpError(ErrorCode.NOT_AVAILABLE, "budget ledger unreachable") from None
        if not isinstance(reply, list) or not reply:
            raise OpError(ErrorCode.NOT_AVAILABLE, "budget ledger: unexpected reply")
        return reply

    def _ttl_s(self) -> int:
        return max(1, math.ceil(self._settings.idle_ttl_s))


def _owner(uid: int | None) -> str:
    return "-" if uid is None else str(uid)


def _text(value: object) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)

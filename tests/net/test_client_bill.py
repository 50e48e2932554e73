"""A body's ``bytes`` bill (csp_web/net/client.py, SPEC D-3): a body paid for its stated
length that passes it lied, and is cut rather than reserving more."""

from __future__ import annotations

import pytest

from csp_web.core.api.errors import OpError
from csp_web.net.client import _Bill
from protocol import ErrorCode


async def test_a_paid_body_may_reach_its_stated_length() -> None:
    bill = _Bill(10, limited=True, whole=True)
    await bill.cover(10)
    assert (bill.reserved, bill.used) == (10, 10)


async def test_a_paid_body_a_byte_past_its_stated_length_is_cut_charged_what_it_got() -> None:
    bill = _Bill(10, limited=True, whole=True)
    with pytest.raises(OpError) as cut:
        await bill.cover(11)
    assert (cut.value.code, cut.value.detail) == (ErrorCode.FETCH_FAILED, "protocol_error")
    assert (bill.reserved, bill.used) == (10, 11)


async def test_a_body_of_unknown_length_reserves_more_as_it_grows() -> None:
    bill = _Bill(10, limited=True)
    await bill.cover(11)
    assert (bill.used, bill.reserved) == (11, 10 + 64 * 1024)

"""A toy specialist, all in this folder: its config section, one op, a private path. Adding it
to a catalogue is one line (tests/test_toy_specialist.py): the promise of
docs/adding-an-op.md."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from csp_web.config import Config, SectionSpec, section_of
from csp_web.core.api.context import OpContext
from csp_web.core.api.fields import FieldSpec, Params
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result
from csp_web.core.api.specialist import Specialist

from .config import ToyConfig


@asynccontextmanager
async def _open(section: ToyConfig, config: Config) -> AsyncIterator[ToyConfig]:
    yield section  # its services: nothing to open but its settings


async def greet(params: Params, ctx: OpContext, toy: ToyConfig) -> Result:
    greeting = section_of(ctx.config, "toy", ToyConfig).greeting  # per task: reloadable
    return Result(f"{greeting}, {params.text('NAME')}", ("toy",))


OPS = (
    Op("greet", "TOY", "TEXT", "tool", greet, (FieldSpec("NAME", required=True, max_chars=64),)),
)

TOY: Specialist[ToyConfig, ToyConfig] = Specialist(
    name="toy",
    ops=OPS,
    slots=lambda slots: slots.tool,  # a pool it shares: no SlotsConfig field of its own
    section=lambda config: section_of(config, "toy", ToyConfig),
    own_section=SectionSpec("toy", ToyConfig),
    reloadable=("toy",),  # the greeting is read per task
    restart_only=("toy.key_path",),  # a private path: the sandbox masks are set at start
    open_services=_open,
    background=lambda _: (),
    stats_lines=lambda _: {},
    storage=lambda _: {},
    reload=None,
)

"""What the tests of the actions sites need share: realistic pages, a fileKey store, reading a
session's page from the engine thread, and a dispatcher under other settings."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, with_section
from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import StoredFile
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.memory.outbox import open_outbox
from protocol import ErrorCode
from specialists.browser import browser_ops
from specialists.browser.config import SECTION, BrowserConfig
from specialists.browser.pages import PageSet
from specialists.browser.services import BrowserServices
from specialists.tool.config import ToolConfig
from specialists.tool.exec.config import ExecConfig
from tests.harness import build_dispatcher

from .test_browser_op import session_pages

# A shop's order form: a text field that submits on Enter, a select, a checkbox, a file
# input that shows what it got, and a menu that reacts to the pointer.
SHOP = b"""<!doctype html><html><head><title>Shop</title></head><body>
<form id="order" action="/ordered" method="get">
<input id="q" name="q" autocomplete="off">
<select id="size" name="size"><option value="s">Small</option><option value="m">Medium</option>
<option value="l">Large</option></select>
<label><input type="checkbox" id="gift" name="gift"> Gift wrap</label>
<input type="file" id="doc" name="doc">
<button id="send" type="submit">Order</button>
</form>
<nav id="menu" onmouseover="document.title = 'menu open'">Menu</nav>
<p id="got"></p>
<script>
document.getElementById('doc').addEventListener('change', async (event) => {
  const file = event.target.files[0];
  document.getElementById('got').textContent =
    file.name + ':' + file.type + ':' + file.size + ':' + await file.text();
});
document.getElementById('q').addEventListener('keydown', (event) => {
  document.title = 'key:' + event.key + (event.ctrlKey ? '+ctrl' : '');
});
</script></body></html>"""

ORDERED = b"<!doctype html><title>Ordered</title><p>Thank you</p>"

# A page as long as an article: 60 sections, the last one far below the fold.
LONG = (
    b"<!doctype html><title>Long</title><body>"
    + b"".join(
        f'<section style="height:400px"><h2 id="s{n}">Section {n}</h2></section>'.encode()
        for n in range(60)
    )
    + b"</body>"
)

# Results that come late: text, an element and a new URL, 300 ms after the load.
LATE = b"""<!doctype html><title>Late</title><div id="box"></div><script>
setTimeout(() => {
  document.getElementById('box').innerHTML = '<p id="late">Results are ready</p>';
  history.pushState({}, '', '/late/done');
}, 300);
</script>"""

# Dialogs: a confirm, a prompt and an alert, each leaving its answer in the title.
DIALOGS = b"""<!doctype html><title>Dialogs</title>
<button id="confirm" onclick="document.title = confirm('Delete it?') ? 'yes' : 'no'">c</button>
<button id="prompt" onclick="document.title = 'name:' + prompt('Your name?')">p</button>
<button id="alert" onclick="alert('Saved'); document.title = 'after alert'">a</button>"""

# Tabs: a link opening a popup, a button opening one per click.
OPENER = b"""<!doctype html><title>Opener</title>
<a id="link" href="/child" target="_blank">child</a>
<button id="more" onclick="window.open('/child')">more</button>
<button id="flood"
 onclick="for (let i = 0; i < 100; i++) window.open('/child?' + i)">100</button>"""

CHILD = b"<!doctype html><title>Child</title><p id='here'>child page</p>"


class MemoryFiles:
    """A FileStore (csp_web.core.api.ports) in a dict: the browser's side is under test."""

    def __init__(self) -> None:
        self.files: dict[str, StoredFile] = {}

    async def put(self, body: bytes, *, url: str, name: str, content_type: str) -> str:
        key = "fk_" + hashlib.sha256(url.encode() + b"\0" + body).hexdigest()[:16]
        key = key.translate(str.maketrans("0189", "2345"))  # base32's alphabet has no 0, 1, 8, 9
        self.files[key] = StoredFile(key, url, name, content_type, body)
        return key

    async def get(self, key: str) -> StoredFile:
        if key not in self.files:
            raise OpError(ErrorCode.UNKNOWN_FILE_KEY, key)
        return self.files[key]


async def page_eval(services: BrowserServices, name: str, expression: str) -> Any:
    """``expression`` evaluated in session ``name``'s current tab (uid 1000's)."""
    pages = session_pages(services, name)

    async def evaluate(pages: PageSet) -> Any:
        return await pages.page.evaluate(expression)

    return await services.engine.run(evaluate, pages)


@asynccontextmanager
async def dispatcher_under(
    config: Config,
    services: BrowserServices,
    *,
    browser: BrowserConfig | None = None,
    workspace_roots: tuple[str, ...] = (),
) -> AsyncIterator[Dispatcher]:
    """A dispatcher over ``services`` whose config has ``browser`` as its browser section
    and ``workspace_roots`` as exec's."""
    if browser is not None:
        config = with_section(config, SECTION, browser)
    if workspace_roots:
        config = with_section(
            config, "tool", ToolConfig(exec=ExecConfig(workspace_roots=workspace_roots))
        )
    os.makedirs(config.daemon.state_dir, exist_ok=True)
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        yield build_dispatcher(config, outbox_path(config, outbox), browser_ops(), services)

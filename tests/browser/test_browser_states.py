"""Logins kept (issue 25): save_state keeps a session's cookies and local storage, encrypted,
for its uid; STATE opens a new session holding them; forget_state removes them. Per uid,
expiring, capped at N and N+1, and a tampered, swapped or symlinked file fails cleanly."""

from __future__ import annotations

import os
import secrets
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import replace

import pytest

from csp_web.core.api.errors import OpError
from csp_web.core.dispatch.dispatcher import Dispatcher
from protocol import ErrorCode, Status
from specialists.browser.config import BrowserConfig
from specialists.browser.services import BrowserServices
from specialists.browser.states import StateLimits, StateStore
from tests.net._origin import Origin, Seen
from tests.net._origin import Reply as OriginReply

from .test_browser_op import error, run, writes

COOKIE = "sid=s3cr3t-cookie-value"
TOKEN = "t0ken-in-local-storage"
LOGIN_FORM = b"""<html><head><title>Sign in</title></head><body>
<form method="post" action="/login"><input id="user" name="user">
<button id="go" type="submit">Sign in</button></form></body></html>"""
# The page after login stores a token; /me shows who the cookie says and the token it finds.
WELCOME = (
    "<html><head><title>Welcome</title></head><body><script>"
    f"localStorage.setItem('token', '{TOKEN}');</script>signed in</body></html>"
).encode()


def _me(seen: Seen) -> OriginReply:
    who = "member" if COOKIE in seen.headers.get("cookie", "") else "anonymous"
    page = (
        f"<html><head><title>{who}</title></head><body><p id=who>{who}</p><p id=token></p>"
        "<script>document.getElementById('token').textContent ="
        " localStorage.getItem('token') || 'none';</script></body></html>"
    )
    return OriginReply(headers=[("content-type", "text/html")], body=page.encode())


def _login(seen: Seen) -> OriginReply:
    if seen.method != "POST":
        return OriginReply(headers=[("content-type", "text/html")], body=LOGIN_FORM)
    assert urllib.parse.parse_qs(seen.body.decode()) == {"user": ["ada"]}
    headers = [
        ("content-type", "text/html"),
        ("set-cookie", f"{COOKIE}; Path=/; Secure; HttpOnly; Max-Age=3600"),
    ]
    return OriginReply(headers=headers, body=WELCOME)


def _site(origin: Origin) -> tuple[str, str]:
    origin.routes["/login"] = _login
    origin.routes["/me"] = _me
    return origin.url("origin.test", "/login"), origin.url("origin.test", "/me")


async def _sign_in(dispatcher: Dispatcher, origin: Origin, session: str, uid: int = 1000) -> str:
    """Sign in through the form in ``session``; the /me URL."""
    login, me = _site(origin)
    s = ("SESSION", session)
    for fields in (
        (("ACTION", "navigate"), ("TARGET_URL", login)),
        (("ACTION", "type"), ("SELECTOR", "css:#user"), ("VALUE", "ada")),
        (("ACTION", "click"), ("SELECTOR", "css:#go")),
    ):
        reply = await run(dispatcher, *fields, s, uid=uid)
        assert reply.status is Status.OK, reply
    return me


async def _who(dispatcher: Dispatcher, session: str, *fields: tuple[str, str]) -> list[str]:
    texts = []
    for element in ("css:#who", "css:#token"):
        reply = await run(
            dispatcher, ("ACTION", "extract"), ("SESSION", session), ("SELECTOR", element), *fields
        )
        assert reply.status is Status.OK, reply
        texts.append(reply.get("CONTENT") or "")
    return texts


def _folder(services: BrowserServices) -> str:
    assert services.states is not None
    return services.states.folder


async def test_a_saved_login_opens_a_new_session_signed_in(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices
) -> None:
    me = await _sign_in(dispatcher, origin, "first")
    saved = await run(dispatcher, ("ACTION", "save_state"), ("SESSION", "first"), ("NAME", "shop"))
    assert saved.status is Status.OK, saved
    assert saved.get("DATA") == "action:save_state,state:shop"
    assert (saved.get("STATE"), saved.get("SESSION")) == ("shop", "first")
    assert (await run(dispatcher, ("ACTION", "close"), ("SESSION", "first"))).status is Status.OK

    fresh = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", me), ("SESSION", "bare"))
    assert fresh.get("TITLE") == "anonymous", fresh  # a session without the state is not
    opened = await run(
        dispatcher,
        ("ACTION", "navigate"),
        ("TARGET_URL", me),
        ("SESSION", "second"),
        ("STATE", "shop"),
    )
    assert opened.status is Status.OK, opened
    assert opened.get("TITLE") == "member"  # the origin saw the cookie
    assert await _who(dispatcher, "second") == ["member", TOKEN]  # and the page its storage
    assert COOKIE in origin.requests[-1].headers.get("cookie", "")

    folder = _folder(services)
    assert stat.S_IMODE(os.stat(os.path.join(folder, "key")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    with open(os.path.join(folder, "shop.state"), "rb") as kept:
        sealed = kept.read()
    assert b"s3cr3t" not in sealed
    assert TOKEN.encode() not in sealed
    records = writes(dispatcher, "audit")
    assert [r["state"] for r in records if r["action"] == "save_state"] == ["shop"]
    assert all("s3cr3t" not in str(r) and TOKEN not in str(r) for r in records)


async def test_another_uid_cannot_use_forget_or_take_a_saved_state(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    me = await _sign_in(dispatcher, origin, "mine", uid=1)
    saved = await run(
        dispatcher, ("ACTION", "save_state"), ("SESSION", "mine"), ("NAME", "bank"), uid=1
    )
    assert saved.status is Status.OK, saved
    used = await run(
        dispatcher,
        ("ACTION", "navigate"),
        ("TARGET_URL", me),
        ("SESSION", "theirs"),
        ("STATE", "bank"),
        uid=2,
    )
    assert error(used) == "permission_denied:state bank"
    assert error(await run(dispatcher, ("ACTION", "forget_state"), ("NAME", "bank"), uid=2)) == (
        "permission_denied:state bank"
    )
    await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", me), ("SESSION", "t2"), uid=2)
    taken = await run(
        dispatcher, ("ACTION", "save_state"), ("SESSION", "t2"), ("NAME", "bank"), uid=2
    )
    assert error(taken) == "permission_denied:state bank"
    gone = await run(dispatcher, ("ACTION", "forget_state"), ("NAME", "bank"), uid=1)
    assert (gone.status, gone.get("STATE")) == (Status.OK, "bank")
    again = await run(dispatcher, ("ACTION", "forget_state"), ("NAME", "bank"), uid=1)
    assert error(again) == "state_not_found:bank"


async def test_an_expired_state_is_gone(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices
) -> None:
    me = await _sign_in(dispatcher, origin, "old")
    await run(dispatcher, ("ACTION", "save_state"), ("SESSION", "old"), ("NAME", "old"))
    path = os.path.join(_folder(services), "old.state")
    assert os.path.exists(path)
    assert services.states is not None
    ttl_s = BrowserConfig().state_ttl_s
    services.states.clock = lambda: time.time() + ttl_s  # 30 days on
    reply = await run(
        dispatcher, ("ACTION", "navigate"), ("TARGET_URL", me), ("SESSION", "n"), ("STATE", "old")
    )
    assert error(reply) == "state_not_found:old expired"
    assert not os.path.exists(path)


async def test_a_tampered_or_symlinked_state_file_fails_cleanly(
    dispatcher: Dispatcher, origin: Origin, services: BrowserServices, tmp_path: str
) -> None:
    me = await _sign_in(dispatcher, origin, "t")
    for name in ("flip", "link", "moved"):
        saved = await run(dispatcher, ("ACTION", "save_state"), ("SESSION", "t"), ("NAME", name))
        assert saved.status is Status.OK, saved
    folder = _folder(services)
    with open(os.path.join(folder, "flip.state"), "r+b") as kept:
        kept.seek(-1, os.SEEK_END)
        last = kept.read(1)
        kept.seek(-1, os.SEEK_END)
        kept.write(bytes([last[0] ^ 1]))
    outside = os.path.join(str(tmp_path), "elsewhere.state")
    os.replace(os.path.join(folder, "link.state"), outside)
    os.symlink(outside, os.path.join(folder, "link.state"))
    os.replace(os.path.join(folder, "moved.state"), os.path.join(folder, "other.state"))
    for name, code in (
        ("flip", "state_unreadable:flip"),
        ("link", "state_unreadable:link"),
        ("other", "state_unreadable:other"),  # sealed for "moved": its name is bound in
        ("moved", "state_not_found:moved"),
    ):
        reply = await run(
            dispatcher,
            ("ACTION", "navigate"),
            ("TARGET_URL", me),
            ("SESSION", f"s-{name}"),
            ("STATE", name),
        )
        assert error(reply) == code, name
    saved = await run(dispatcher, ("ACTION", "save_state"), ("SESSION", "t"), ("NAME", "link"))
    assert saved.status is Status.OK, saved  # replaces the link, never writes through it
    assert not os.path.islink(os.path.join(folder, "link.state"))
    assert os.path.getsize(outside) > 0
    assert os.path.isfile(outside)


async def test_state_names_with_path_parts_and_misplaced_states_are_refused(
    dispatcher: Dispatcher, origin: Origin
) -> None:
    me = await _sign_in(dispatcher, origin, "p")
    for name in ("../../etc/passwd", "a/b", "..", ".", "x" * 65, "key\x00"):
        reply = await run(dispatcher, ("ACTION", "save_state"), ("SESSION", "p"), ("NAME", name))
        assert reply.status is Status.FAIL, name
        assert (reply.get("ERROR") or "").startswith("invalid_field:"), (name, reply)
    missing = await run(dispatcher, ("ACTION", "save_state"), ("SESSION", "p"))
    assert error(missing) == "missing_field:NAME"
    closed = await run(dispatcher, ("ACTION", "save_state"), ("SESSION", "nope"), ("NAME", "a"))
    assert error(closed) == "session_not_found:nope"
    await run(dispatcher, ("ACTION", "save_state"), ("SESSION", "p"), ("NAME", "a"))
    open_already = await run(
        dispatcher, ("ACTION", "navigate"), ("TARGET_URL", me), ("SESSION", "p"), ("STATE", "a")
    )
    assert error(open_already) == "invalid_field:STATE opens a session: p is open"
    oneshot = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", me), ("STATE", "a"))
    assert error(oneshot) == "missing_field:SESSION (STATE opens a session)"


# ---- the store's caps, at N and N+1 (no Chromium) ---------------------------------------------

LIMITS = StateLimits(ttl_s=60.0, max_per_owner=2, max_bytes=100)


def test_states_per_uid_are_capped_at_n(tmp_path: str) -> None:
    store = StateStore(os.path.join(str(tmp_path), "states"))
    store.save("uid:1", "a", b"{}", LIMITS)
    store.save("uid:1", "b", b"{}", LIMITS)  # N = 2
    with pytest.raises(OpError) as over:
        store.save("uid:1", "c", b"{}", LIMITS)  # N + 1
    assert (over.value.code, over.value.detail) == (ErrorCode.TOO_MANY_STATES, "2 per peer")
    store.save("uid:1", "b", b'{"cookies":[]}', LIMITS)  # replacing one is not a new one
    store.save("uid:2", "c", b"{}", LIMITS)  # another uid's own count
    assert store.load("uid:1", "b", LIMITS) == {"cookies": []}


def test_a_state_is_capped_at_max_state_bytes(tmp_path: str) -> None:
    store = StateStore(os.path.join(str(tmp_path), "states"))
    exact = b'{"a":"' + b"x" * 92 + b'"}'
    assert len(exact) == LIMITS.max_bytes
    store.save("uid:1", "n", exact, LIMITS)  # N bytes
    with pytest.raises(OpError) as over:
        store.save("uid:1", "n1", exact[:-2] + b'x"}', LIMITS)  # N + 1
    assert (over.value.code, over.value.detail) == (ErrorCode.TOO_LARGE, "state over 100 bytes")


def test_the_key_is_made_once_private_and_a_foreign_key_reads_nothing(tmp_path: str) -> None:
    folder = os.path.join(str(tmp_path), "states")
    store = StateStore(folder)
    store.save("uid:1", "a", b"{}", LIMITS)
    key_path = os.path.join(folder, "key")
    assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600
    with open(key_path, "rb") as held:
        first = held.read()
    store.save("uid:1", "b", b"{}", LIMITS)
    with open(key_path, "rb") as held:
        assert held.read() == first  # never replaced
    os.chmod(key_path, 0o644)
    with pytest.raises(OpError) as loose:
        store.load("uid:1", "a", LIMITS)
    assert (loose.value.code, loose.value.detail) == (
        ErrorCode.STATE_UNREADABLE,
        "the states key is not private",
    )
    os.chmod(key_path, 0o600)
    with open(key_path, "wb") as swapped:
        swapped.write(os.urandom(32))
    with pytest.raises(OpError) as foreign:
        store.load("uid:1", "a", LIMITS)
    assert foreign.value.code is ErrorCode.STATE_UNREADABLE


def test_a_fifo_in_the_keys_place_is_refused_at_once_not_waited_on(tmp_path: str) -> None:
    folder = os.path.join(str(tmp_path), "states")
    store = StateStore(folder)
    store.save("uid:1", "a", b"{}", LIMITS)
    key_path = os.path.join(folder, "key")
    os.unlink(key_path)
    os.mkfifo(key_path, 0o600)
    writer = os.open(key_path, os.O_RDWR)  # a writer that never writes: a read would wait
    rescued: list[bool] = []

    def rescue() -> None:  # a regression fails the test at 5 s instead of hanging it
        rescued.append(True)
        os.close(writer)

    timer = threading.Timer(5.0, rescue)
    timer.start()
    try:
        with pytest.raises(OpError) as refused:
            store.load("uid:1", "a", LIMITS)
    finally:
        timer.cancel()
        timer.join()
        if not rescued:
            os.close(writer)
    assert refused.value.code is ErrorCode.STATE_UNREADABLE
    assert rescued == []


@pytest.fixture
def browser_settings(browser_config: BrowserConfig) -> BrowserConfig:
    return replace(browser_config, max_states_per_peer=4)


# ---- key and I/O failures never remove a state; one lock around the uses ----------------------


def test_another_uid_cannot_remove_a_state_through_a_key_problem(tmp_path: str) -> None:
    folder = os.path.join(str(tmp_path), "states")
    store = StateStore(folder)
    store.save("uid:1", "bank", b'{"cookies":[]}', LIMITS)
    key_path = os.path.join(folder, "key")
    os.chmod(key_path, 0o644)  # "not private": the key is refused, the state is not at fault
    with pytest.raises(OpError) as loose:
        store.forget("uid:2", "bank", LIMITS)
    assert loose.value.code is ErrorCode.STATE_UNREADABLE
    os.chmod(key_path, 0o600)
    os.chmod(os.path.join(folder, "bank.state"), 0o000)  # EACCES on the file (not as root)
    if not os.access(os.path.join(folder, "bank.state"), os.R_OK):
        with pytest.raises(OpError) as denied:
            store.forget("uid:2", "bank", LIMITS)
        assert denied.value.code is ErrorCode.STATE_UNREADABLE
    os.chmod(os.path.join(folder, "bank.state"), 0o600)
    assert store.load("uid:1", "bank", LIMITS) == {"cookies": []}


def test_a_state_that_no_longer_decrypts_is_removed_only_by_its_owner(tmp_path: str) -> None:
    folder = os.path.join(str(tmp_path), "states")
    store = StateStore(folder)
    store.save("uid:1", "bank", b"{}", LIMITS)
    with open(os.path.join(folder, "key"), "wb") as swapped:
        swapped.write(os.urandom(32))  # the key changed: every state is undecryptable
    with pytest.raises(OpError) as other:
        store.forget("uid:2", "bank", LIMITS)
    assert (other.value.code, other.value.detail) == (ErrorCode.PERMISSION_DENIED, "state bank")
    with pytest.raises(OpError) as taken:
        store.save("uid:2", "bank", b"{}", LIMITS)
    assert taken.value.code is ErrorCode.PERMISSION_DENIED
    assert os.path.exists(os.path.join(folder, "bank.state"))
    with pytest.raises(OpError) as own:
        store.forget("uid:1", "bank", LIMITS)
    assert own.value.code is ErrorCode.STATE_UNREADABLE
    assert not os.path.exists(os.path.join(folder, "bank.state"))


def test_an_empty_key_left_by_a_crash_is_refused_and_removes_nothing(tmp_path: str) -> None:
    folder = os.path.join(str(tmp_path), "states")
    store = StateStore(folder)
    store.save("uid:1", "bank", b"{}", LIMITS)
    os.truncate(os.path.join(folder, "key"), 0)
    with pytest.raises(OpError) as damaged:
        store.forget("uid:2", "bank", LIMITS)
    assert (damaged.value.code, damaged.value.detail) == (
        ErrorCode.STATE_UNREADABLE,
        "the states key is damaged",
    )
    assert os.path.exists(os.path.join(folder, "bank.state"))


def test_stores_racing_to_make_the_key_all_read_one_whole_key(
    tmp_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = os.path.join(str(tmp_path), "states")
    real_token = secrets.token_bytes

    def slow_token(n: int) -> bytes:  # a slow disk: the key's bytes come late
        time.sleep(0.05)
        return real_token(n)

    monkeypatch.setattr(secrets, "token_bytes", slow_token)
    keys: list[bytes] = []
    failed: list[BaseException] = []
    start = threading.Barrier(8)

    def make() -> None:
        start.wait(timeout=10)
        try:
            keys.append(StateStore(folder)._key())
        except BaseException as exc:  # collected and asserted below
            failed.append(exc)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert failed == []
    assert len(keys) == 8
    assert len(set(keys)) == 1
    assert len(keys[0]) == 32
    assert sorted(os.listdir(folder)) == ["key"]  # no temporary key left behind


def _race(save: Callable[[int], None], threads: int) -> list[OpError]:
    """Run ``save(i)`` in ``threads`` threads at once; the OpErrors they raised."""
    refused: list[OpError] = []
    start = threading.Barrier(threads)

    def one(i: int) -> None:
        start.wait(timeout=10)
        try:
            save(i)
        except OpError as exc:
            refused.append(exc)

    running = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join(timeout=30)
    return refused


def test_two_uids_saving_one_new_name_at_once_one_wins_the_other_is_denied(
    tmp_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = StateStore(os.path.join(str(tmp_path), "states"))
    store._key()
    # Widen the window between reading the owners and writing, as a slow disk would.
    real_owners = StateStore._owners

    def slow_owners(self: StateStore, key: bytes, ttl_s: float) -> dict[str, str]:
        held = real_owners(self, key, ttl_s)
        time.sleep(0.05)
        return held

    monkeypatch.setattr(StateStore, "_owners", slow_owners)
    refused = _race(lambda i: store.save(f"uid:{i}", "shop", b"{}", LIMITS), 2)
    assert [(exc.code, exc.detail) for exc in refused] == [
        (ErrorCode.PERMISSION_DENIED, "state shop")
    ]
    loads: list[ErrorCode | None] = []
    for uid in ("uid:0", "uid:1"):
        try:
            store.load(uid, "shop", LIMITS)
            loads.append(None)
        except OpError as exc:
            loads.append(exc.code)
    assert sorted(loads, key=str) == sorted([None, ErrorCode.PERMISSION_DENIED], key=str)


def test_one_uid_saving_in_parallel_stays_within_max_states_per_peer(
    tmp_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = StateStore(os.path.join(str(tmp_path), "states"))
    store._key()
    real_owners = StateStore._owners

    def slow_owners(self: StateStore, key: bytes, ttl_s: float) -> dict[str, str]:
        held = real_owners(self, key, ttl_s)
        time.sleep(0.05)
        return held

    monkeypatch.setattr(StateStore, "_owners", slow_owners)
    refused = _race(lambda i: store.save("uid:1", f"n{i}", b"{}", LIMITS), 4)
    assert [exc.code for exc in refused] == [ErrorCode.TOO_MANY_STATES] * 2
    kept = [n for n in os.listdir(store.folder) if n.endswith(".state")]
    assert len(kept) == LIMITS.max_per_owner

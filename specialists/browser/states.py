"""Saved logins: a session's cookies and local storage (Playwright's ``storage_state``), kept
under a name for the uid that saved it, encrypted at rest.

    store = StateStore(os.path.join(state_dir, "browser", "states"))
    store.save("uid:1000", "shop", state_json, limits)   # blocking: run it in a thread
    state = store.load("uid:1000", "shop", limits)       # the storage_state dict
    store.forget("uid:1000", "shop")

The folder (0700) holds ``key`` (32 random bytes, 0600, made on first use) and one file per
name, ``<name>.state``: a header line (JSON: version, owner, name, when saved) then a 12-byte
nonce and the AES-GCM ciphertext of the state, the header its associated data, so a file
edited, moved to another name or handed to another owner does not decrypt. Names are one
namespace: a name another uid saved answers ``permission_denied`` (never its contents). Every
file is opened without following symlinks; a file that does not decrypt is
``state_unreadable``, one past ``state_ttl_s`` is removed and reads as ``state_not_found``.
A file is removed only by its header's owner, and only when the file itself is bad: a key or
I/O failure never removes anything. The uses run in worker threads and hold one lock, so
reading the owners and writing a name cannot interleave.
The state's contents never leave this module but to Chromium: not in DATA, logs or audits.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

from .sessions import SESSION_NAME

VERSION = 1
_KEY_BYTES = 32
_NONCE_BYTES = 12
_SUFFIX = ".state"
_HEADER_MAX = 512  # a header line is far shorter; a longer one is not ours
_SCOPE = ("browser",)
_NOFOLLOW = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# One lock for every store: the uses run in trio's worker threads, and checking a name's
# owner then writing it must be one step (else two uids saving one new name both win).
_USING = threading.Lock()


class _Undecryptable(OpError):
    """A state file that is there but does not decrypt; ``owner`` is its header's owner
    (unauthenticated), None when the header is not ours."""

    def __init__(self, name: str, owner: str | None) -> None:
        super().__init__(ErrorCode.STATE_UNREADABLE, name, scope=_SCOPE)
        self.owner = owner


class _NotAFile(OpError):
    """A symlink or other non-file in a state's place: no one's state, a save replaces it."""

    def __init__(self, name: str) -> None:
        super().__init__(ErrorCode.STATE_UNREADABLE, name, scope=_SCOPE)


@dataclass(frozen=True)
class StateLimits:
    """The bounds a store applies (``tool.browser``): read at each use, so a test may vary
    them."""

    ttl_s: float
    max_per_owner: int
    max_bytes: int


@dataclass(frozen=True)
class _Header:
    owner: str
    name: str
    saved_at: float

    def line(self) -> bytes:
        fields = {"v": VERSION, "owner": self.owner, "name": self.name, "saved": self.saved_at}
        return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def check_name(name: str) -> str:
    """A state's name: as a SESSION's, 1-64 of ``[A-Za-z0-9._-]``, and not only dots."""
    if not SESSION_NAME.fullmatch(name) or not name.strip("."):
        raise OpError(ErrorCode.INVALID_FIELD, "NAME must be 1-64 of [A-Za-z0-9._-]")
    return name


class StateStore:
    """The saved states in ``folder``; ``clock`` is wall time (states outlive restarts)."""

    def __init__(self, folder: str, clock: Callable[[], float] = time.time) -> None:
        self.folder = folder
        self.clock = clock

    # ---- the three uses (blocking) -------------------------------------------------------

    def save(self, owner: str, name: str, state: bytes, limits: StateLimits) -> None:
        """Keep ``state`` (storage_state JSON) as ``owner``'s ``name``, replacing its own
        earlier one. Raises too_large past ``max_bytes``, permission_denied for another
        owner's live name, too_many_states past ``max_per_owner``."""
        check_name(name)
        if len(state) > limits.max_bytes:
            raise OpError(ErrorCode.TOO_LARGE, f"state over {limits.max_bytes} bytes", scope=_SCOPE)
        with _USING:
            self._save(owner, name, state, limits)

    def _save(self, owner: str, name: str, state: bytes, limits: StateLimits) -> None:
        key = self._key()
        if self._owner_of(key, name, limits.ttl_s) not in (None, owner):
            raise OpError(ErrorCode.PERMISSION_DENIED, f"state {name}", scope=_SCOPE)
        held = self._owners(key, limits.ttl_s)
        mine = sum(1 for other, who in held.items() if who == owner and other != name)
        if mine >= limits.max_per_owner:
            raise OpError(
                ErrorCode.TOO_MANY_STATES, f"{limits.max_per_owner} per peer", scope=_SCOPE
            )
        header = _Header(owner, name, self.clock()).line()
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = header + nonce + AESGCM(key).encrypt(nonce, state, header)
        self._write(name, sealed)

    def load(self, owner: str, name: str, limits: StateLimits) -> dict[str, Any]:
        """``owner``'s state ``name``, as the dict ``new_context(storage_state=...)`` takes.
        Raises state_not_found (never saved, forgotten, expired: then removed),
        permission_denied (another owner's), state_unreadable (tampered, a symlink, another
        key)."""
        check_name(name)
        with _USING:
            header, state = self._open(self._key(), name, limits.ttl_s)
        if header.owner != owner:
            raise OpError(ErrorCode.PERMISSION_DENIED, f"state {name}", scope=_SCOPE)
        try:
            loaded = json.loads(state)
        except ValueError:
            loaded = None
        if not isinstance(loaded, dict):
            raise OpError(ErrorCode.STATE_UNREADABLE, name, scope=_SCOPE)
        return loaded

    def forget(self, owner: str, name: str, limits: StateLimits) -> None:
        """Remove ``owner``'s state ``name``; raises as ``load`` does. A file that does not
        decrypt is removed too, but only when its header names ``owner``: a key or I/O
        failure, or another owner's file, removes nothing."""
        check_name(name)
        with _USING:
            key = self._key()  # outside the try: a key problem is never the file's fault
            try:
                header, _state = self._open(key, name, limits.ttl_s)
            except _Undecryptable as exc:
                if exc.owner is not None and exc.owner != owner:
                    raise OpError(
                        ErrorCode.PERMISSION_DENIED, f"state {name}", scope=_SCOPE
                    ) from exc
                if exc.owner == owner:
                    self._remove(name)
                raise
            if header.owner != owner:
                raise OpError(ErrorCode.PERMISSION_DENIED, f"state {name}", scope=_SCOPE)
            self._remove(name)

    # ---- files -----------------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return os.path.join(self.folder, name + _SUFFIX)

    def _ensure_folder(self) -> None:
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        info = os.lstat(self.folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise OpError(ErrorCode.STATE_UNREADABLE, "the states folder is not ours")
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(self.folder, 0o700)

    def _key(self) -> bytes:
        """The store's key, made on first use (0600, never replaced once made)."""
        self._ensure_folder()
        path = os.path.join(self.folder, "key")
        try:
            return _read_key(path)
        except FileNotFoundError:
            self._make_key(path)
        try:
            return _read_key(path)
        except FileNotFoundError as exc:
            raise OpError(ErrorCode.STATE_UNREADABLE, "the states key cannot be read") from exc

    def _make_key(self, path: str) -> None:
        """Put a whole key at ``path`` at once: written and synced under a temporary name,
        then linked, so no one ever reads a half-written key. Losing a race to another
        maker is fine: its key is the one read."""
        temp = os.path.join(self.folder, f".key.{secrets.token_hex(8)}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as made:
                made.write(secrets.token_bytes(_KEY_BYTES))
                made.flush()
                os.fsync(made.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(temp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp)

    def _read(self, name: str) -> bytes | None:
        """The file's bytes; None when there is none. A symlink or other non-file is
        unreadable, never followed."""
        try:
            fd = os.open(self._path(name), os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symlink put in its place
                raise _NotAFile(name) from exc
            # EMFILE, EACCES...: the file may be fine; no one may act on it now
            raise OpError(
                ErrorCode.STATE_UNREADABLE, f"{name} cannot be read now", scope=_SCOPE
            ) from exc
        with os.fdopen(fd, "rb") as held:
            if not stat.S_ISREG(os.fstat(held.fileno()).st_mode):
                raise _NotAFile(name)
            return held.read()

    def _open(self, key: bytes, name: str, ttl_s: float) -> tuple[_Header, bytes]:
        sealed = self._read(name)
        if sealed is None:
            raise OpError(ErrorCode.STATE_NOT_FOUND, name, scope=_SCOPE)
        header, state = _unseal(key, sealed, name)
        if header is None or state is None:
            raise _Undecryptable(name, header.owner if header else None)
        if self.clock() - header.saved_at >= ttl_s:
            self._remove(name)
            raise OpError(ErrorCode.STATE_NOT_FOUND, f"{name} expired", scope=_SCOPE)
        return header, state

    def _owner_of(self, key: bytes, name: str, ttl_s: float) -> str | None:
        """Who holds ``name``: its owner, even when the file no longer decrypts (its header
        says); None when no one does (no file, expired, a symlink or a file not ours). Any
        other failure to read it raises: a name is never taken over because a read failed."""
        try:
            return self._open(key, name, ttl_s)[0].owner
        except _Undecryptable as exc:
            return exc.owner
        except _NotAFile:
            return None
        except OpError as exc:
            if exc.code is ErrorCode.STATE_NOT_FOUND:
                return None
            raise

    def _owners(self, key: bytes, ttl_s: float) -> dict[str, str]:
        """Every live, readable state's owner by name (for the per-owner count); expired
        ones are removed on the way."""
        owners: dict[str, str] = {}
        for name in self._names():
            with contextlib.suppress(OpError):
                owners[name] = self._open(key, name, ttl_s)[0].owner
        return owners

    def _names(self) -> Iterator[str]:
        for entry in os.listdir(self.folder):
            name = entry[: -len(_SUFFIX)]
            if entry.endswith(_SUFFIX) and SESSION_NAME.fullmatch(name):
                yield name

    def _write(self, name: str, data: bytes) -> None:
        """Write whole, then rename over the old file (a symlink there is replaced, not
        followed)."""
        temp = os.path.join(self.folder, f".{name}.{secrets.token_hex(8)}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self._path(name))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def _remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(name))


def _read_key(path: str) -> bytes:
    """The key at ``path``; FileNotFoundError when there is none yet."""
    try:
        # O_NONBLOCK, and the type checked before a read: a FIFO put in the key's place
        # must not hold a thread the op cannot cancel.
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise OpError(ErrorCode.STATE_UNREADABLE, "the states key cannot be read") from exc
    with os.fdopen(fd, "rb") as held:
        info = os.fstat(held.fileno())
        if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) & 0o077:
            raise OpError(ErrorCode.STATE_UNREADABLE, "the states key is not private")
        key = held.read(_KEY_BYTES + 1)
    if len(key) != _KEY_BYTES:
        raise OpError(ErrorCode.STATE_UNREADABLE, "the states key is damaged")
    return key


def _unseal(key: bytes, sealed: bytes, name: str) -> tuple[_Header | None, bytes | None]:
    """The header and plaintext of a state file; the header None when it is not one of
    ours for ``name``, the plaintext None when it does not decrypt with ``key``."""
    line, newline, _ = sealed[:_HEADER_MAX].partition(b"\n")
    header = _header(line, name) if newline else None
    body = sealed[len(line) + 1 :]
    if header is None or len(body) <= _NONCE_BYTES:
        return header, None
    try:
        state = AESGCM(key).decrypt(body[:_NONCE_BYTES], body[_NONCE_BYTES:], line + b"\n")
    except InvalidTag:
        return header, None
    return header, state


def _header(line: bytes, name: str) -> _Header | None:
    try:
        fields = json.loads(line)
    except ValueError:
        return None
    if not isinstance(fields, dict) or fields.get("v") != VERSION or fields.get("name") != name:
        return None
    owner, saved = fields.get("owner"), fields.get("saved")
    if not isinstance(owner, str) or not isinstance(saved, int | float):
        return None
    return _Header(owner, name, float(saved))

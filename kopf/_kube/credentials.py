"""
What the requests authenticate with now, and when to log in again.

Credentials change while an operator runs: token files are rotated, exec
plugins hand out short-lived tokens, a cluster revokes a token. This module
keeps the current credentials as a small state machine: every new set of
credentials (a rotated token, a new login) is a new *version*, a token file
is re-read when it has changed (looked at no more often than once a second),
and a new login is due a bit before the credentials expire. It decides by
the clock it is given and does no logging in itself: the session
(:mod:`kopf._kube.session`) calls the login and makes new connections when
the new credentials need them.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
from pathlib import Path

import aiohttp

from kopf._kube.errors import LoginError
from kopf._structs.clocks import Clock
from kopf._structs.credentials import AiohttpSession, ConnectionInfo
from kopf._structs.typedefs import Logger

TOKEN_FILE_CHECK_INTERVAL = 1.0  # seconds between checks whether a token file has changed

# Credentials are renewed this share of their lifetime before they expire, but at most so early.
REFRESH_SHARE = 1 / 5
MAX_REFRESH_ADVANCE = 60.0
# New credentials that have expired already are used anyway, and renewed again only after this pause.
EXPIRED_RETRY_PAUSE = 5.0

# What the connections are made of: if one of these changes, the old connections cannot serve the new credentials.
TRANSPORT_FIELDS = ('server', 'ca_path', 'ca_data', 'insecure', 'certificate_path', 'private_key_path',
                    'certificate_data', 'private_key_data', 'trust_env')


@dataclasses.dataclass(frozen=True)
class Accepted:
    """Credentials as the session uses them: the connection info, and a login handler's own session if any."""

    info: ConnectionInfo
    provided: aiohttp.ClientSession | None = None


def accept(credentials: ConnectionInfo | AiohttpSession) -> Accepted:
    """The connection info as far as it is known, and the session if the credentials are one."""
    if isinstance(credentials, AiohttpSession):
        if not isinstance(credentials.aiohttp_session, aiohttp.ClientSession):
            raise LoginError(f"kopf.AiohttpSession(aiohttp_session=...) must be an aiohttp.ClientSession, "
                             f"got {type(credentials.aiohttp_session).__name__}.")
        info = ConnectionInfo(server=credentials.server, default_namespace=credentials.default_namespace,
                              priority=credentials.priority, expiration=credentials.expiration)
        return Accepted(info, credentials.aiohttp_session)
    return Accepted(credentials)


def needs_new_connections(old: Accepted, new: Accepted) -> bool:
    """Whether the connections of the old credentials cannot serve the new ones."""
    if new.provided is not None and new.provided is not old.provided:
        return True
    return any(getattr(old.info, field) != getattr(new.info, field) for field in TRANSPORT_FIELDS)


@dataclasses.dataclass(frozen=True)
class Refresh:
    """When to log in again (``None``: never by time), and whether the credentials were expired on arrival."""

    at: datetime.datetime | None
    expired: bool = False


def plan_refresh(expires_at: datetime.datetime | None, now: datetime.datetime, *, renewed: bool) -> Refresh:
    """
    When to log in again: a fifth of the credentials' lifetime before they expire, at most a minute early.

    Credentials that arrive expired (``renewed``: from a login, not the
    initial ones) are used anyway, and renewed again only after a pause:
    not a busy loop of logins.
    """
    if expires_at is None:
        return Refresh(None)
    lifetime = (expires_at - now).total_seconds()
    advance = min(MAX_REFRESH_ADVANCE, max(0.0, lifetime * REFRESH_SHARE))
    at = expires_at - datetime.timedelta(seconds=advance)
    if at <= now and renewed:
        return Refresh(now + datetime.timedelta(seconds=EXPIRED_RETRY_PAUSE), expired=True)
    return Refresh(at)


@dataclasses.dataclass
class TokenFile:
    """A token kept in a file that may be replaced at any time; re-read when it changes."""

    path: str
    token: str | None
    signature: tuple[int, int, int] | None = None
    checked: float | None = None  # on the monotonic clock

    def due(self, now: float) -> bool:
        """Whether the file should be looked at again."""
        return self.checked is None or now - self.checked >= TOKEN_FILE_CHECK_INTERVAL

    def current(self, *, now: float, logger: Logger, force: bool = False) -> str | None:
        """The token, re-read if the file has changed since it was last looked at (or if forced)."""
        if not force and not self.due(now):
            return self.token
        self.checked = now
        try:
            stat = os.stat(self.path)
            signature = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if force or signature != self.signature:
                token = Path(self.path).read_text(encoding='utf-8').strip()
                if token:
                    self.token = token
                self.signature = signature
        except (OSError, UnicodeDecodeError) as e:
            logger.warning("Cannot re-read the token file %s: %s; using the last token.",
                           self.path, type(e).__name__)
        return self.token


class Credentials:
    """
    The credentials of one API context: what to authenticate with now, and when to log in again.

    :attr:`version` grows with every change (a rotated token, new
    credentials), so that of many requests refused at once, only the first
    one logs in again, and the others repeat with what it got.
    """

    def __init__(self, credentials: ConnectionInfo | AiohttpSession, *, clock: Clock, logger: Logger) -> None:
        self.clock = clock
        self.logger = logger
        self.version = 0
        self.current = accept(credentials)
        self._token_file = _token_file(self.current.info)
        self.refresh = plan_refresh(self.info.expires_at, clock.now(), renewed=False)

    @property
    def info(self) -> ConnectionInfo:
        return self.current.info

    @property
    def provided(self) -> aiohttp.ClientSession | None:
        """A login handler's own session, used as it is (it cannot be made anew from the credentials)."""
        return self.current.provided

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header (re-reading a changed token file)."""
        token = self.info.token
        if self._token_file is not None:
            token = self._token_file.current(now=self.clock.monotonic(), logger=self.logger)
        return self.info.authorization(token)

    def login_due(self) -> bool:
        """Whether the credentials expire soon enough to log in again before the next request."""
        return self.refresh.at is not None and self.clock.now() >= self.refresh.at

    def rotated_token(self) -> str | None:
        """Re-read the token file at once; its path if it has a new token (a new version), else ``None``."""
        if self._token_file is None:
            return None
        old_token = self._token_file.token
        if self._token_file.current(now=self.clock.monotonic(), logger=self.logger, force=True) == old_token:
            return None
        self.version += 1
        return self._token_file.path

    def install(self, accepted: Accepted) -> None:
        """Use new credentials (a new version) from now on."""
        self.current = accepted
        self._token_file = _token_file(accepted.info)
        self.version += 1
        self.refresh = plan_refresh(accepted.info.expires_at, self.clock.now(), renewed=True)


def _token_file(info: ConnectionInfo) -> TokenFile | None:
    return TokenFile(info.token_path, info.token) if info.token_path else None

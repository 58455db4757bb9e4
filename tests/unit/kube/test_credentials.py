"""The credentials of an API context: what to authenticate with now, and when to log in again, by the clock."""
import dataclasses
import datetime
import logging

import aiohttp
import pytest

from kopf._kube.credentials import (
    TOKEN_FILE_CHECK_INTERVAL,
    Accepted,
    Credentials,
    Refresh,
    TokenFile,
    accept,
    needs_new_connections,
    plan_refresh,
)
from kopf._kube.errors import LoginError
from kopf._structs.credentials import AiohttpSession, ConnectionInfo
from tests.unit.conftest import T0

logger = logging.getLogger('test-credentials')
SERVER = 'https://k8s'


def seconds(n):
    return datetime.timedelta(seconds=n)


# --- When to log in again -------------------------------------------------------------------------

@pytest.mark.parametrize('expires_in, renewed, expected', [
    (None, False, Refresh(None)),
    (None, True, Refresh(None)),
    (1, False, Refresh(T0 + seconds(0.8))),  # a fifth of the lifetime early
    (100, True, Refresh(T0 + seconds(80))),
    (3600, False, Refresh(T0 + seconds(3540))),  # at most a minute early
    (0, False, Refresh(T0)),  # the initial credentials expire now: a login is due at once
    (-60, False, Refresh(T0 - seconds(60))),
    (0, True, Refresh(T0 + seconds(5), expired=True)),  # new ones expired already: not a busy loop of logins
    (-60, True, Refresh(T0 + seconds(5), expired=True)),
])
def test_refresh_plans(expires_in, renewed, expected):
    expires_at = T0 + seconds(expires_in) if expires_in is not None else None
    assert plan_refresh(expires_at, T0, renewed=renewed) == expected


async def test_a_login_is_due_at_the_planned_time_of_the_clock(clock):
    info = ConnectionInfo(server=SERVER, token='t', expiration=clock.now() + seconds(100))
    credentials = Credentials(info, clock=clock, logger=logger)
    clock.advance(79.9)
    assert not credentials.login_due()
    clock.advance(0.1)
    assert credentials.login_due()


async def test_credentials_without_expiration_need_no_login(clock):
    credentials = Credentials(ConnectionInfo(server=SERVER, token='t'), clock=clock, logger=logger)
    clock.advance(10 ** 9)
    assert not credentials.login_due()


async def test_new_credentials_are_a_new_version_with_their_own_plan(clock):
    credentials = Credentials(ConnectionInfo(server=SERVER, token='old', expiration=clock.now()), clock=clock,
                              logger=logger)
    assert credentials.login_due()
    renewed = ConnectionInfo(server=SERVER, token='new', expiration=clock.now() + seconds(3600))
    credentials.install(Accepted(renewed))
    assert credentials.version == 1
    assert credentials.info is renewed
    assert credentials.headers() == {'Authorization': 'Bearer new'}
    assert not credentials.login_due()
    assert credentials.refresh == Refresh(clock.now() + seconds(3540))


# --- Token files ------------------------------------------------------------------------------------

@pytest.mark.parametrize('checked, now, due', [
    (None, 1000.0, True),
    (1000.0, 1000.0, False),
    (1000.0, 1000.0 + TOKEN_FILE_CHECK_INTERVAL - 0.01, False),
    (1000.0, 1000.0 + TOKEN_FILE_CHECK_INTERVAL, True),
    (1000.0, 5000.0, True),
])
def test_token_files_are_looked_at_once_per_interval(checked, now, due):
    assert TokenFile('/nowhere', 'token', checked=checked).due(now) is due


async def test_a_changed_token_file_is_read_once_the_interval_has_passed(tmp_path, clock):
    path = tmp_path / 'token'
    path.write_text('first\n')
    credentials = Credentials(ConnectionInfo(server=SERVER, token='first', token_path=str(path)),
                              clock=clock, logger=logger)
    assert credentials.headers() == {'Authorization': 'Bearer first'}
    replacement = tmp_path / 'token.new'
    replacement.write_text('second\n')
    replacement.replace(path)
    clock.advance(TOKEN_FILE_CHECK_INTERVAL - 0.01)
    assert credentials.headers() == {'Authorization': 'Bearer first'}  # not looked at yet
    clock.advance(0.01)
    assert credentials.headers() == {'Authorization': 'Bearer second'}
    assert credentials.version == 0  # the same credentials, as the file says


async def test_a_rotated_token_is_found_at_once_when_asked_and_is_a_new_version(tmp_path, clock):
    path = tmp_path / 'token'
    path.write_text('first\n')
    credentials = Credentials(ConnectionInfo(server=SERVER, token='first', token_path=str(path)),
                              clock=clock, logger=logger)
    assert credentials.headers() == {'Authorization': 'Bearer first'}
    assert credentials.rotated_token() is None  # unchanged
    path.write_text('second\n')
    assert credentials.rotated_token() == str(path)
    assert credentials.version == 1
    assert credentials.headers() == {'Authorization': 'Bearer second'}


async def test_without_a_token_file_nothing_rotates(clock):
    credentials = Credentials(ConnectionInfo(server=SERVER, token='t'), clock=clock, logger=logger)
    assert credentials.rotated_token() is None
    assert credentials.version == 0


async def test_an_emptied_or_vanished_token_file_keeps_the_last_token(tmp_path, clock, caplog):
    path = tmp_path / 'token'
    path.write_text('first\n')
    credentials = Credentials(ConnectionInfo(server=SERVER, token='first', token_path=str(path)),
                              clock=clock, logger=logger)
    path.write_text('\n')
    clock.advance(TOKEN_FILE_CHECK_INTERVAL)
    assert credentials.headers() == {'Authorization': 'Bearer first'}
    path.unlink()
    clock.advance(TOKEN_FILE_CHECK_INTERVAL)
    assert credentials.headers() == {'Authorization': 'Bearer first'}
    assert f"Cannot re-read the token file {path}: FileNotFoundError; using the last token." in caplog.text


# --- Credentials that are a session -------------------------------------------------------------

async def test_a_login_handlers_session_is_accepted_with_what_is_known_of_it():
    own = aiohttp.ClientSession()
    try:
        moment = T0 + seconds(60)
        accepted = accept(AiohttpSession(server=SERVER, aiohttp_session=own, default_namespace='ns',
                                         priority=5, expiration=moment))
    finally:
        await own.close()
    assert accepted.provided is own
    assert accepted.info == ConnectionInfo(server=SERVER, default_namespace='ns', priority=5, expiration=moment)


def test_a_session_that_is_not_one_is_a_login_error():
    with pytest.raises(LoginError, match=r'must be an aiohttp\.ClientSession, got str'):
        accept(AiohttpSession(server=SERVER, aiohttp_session='session'))


def test_connection_info_is_accepted_as_it_is():
    info = ConnectionInfo(server=SERVER, token='t')
    assert accept(info) == Accepted(info)


# --- Whether new credentials need new connections ----------------------------------------------

BASE = ConnectionInfo(server=SERVER, token='t', ca_data=b'CA')


@pytest.mark.parametrize('changes, renew', [
    ({}, False),
    ({'token': 'other'}, False),
    ({'username': 'u', 'password': 'p'}, False),
    ({'expiration': T0}, False),
    ({'default_namespace': 'ns'}, False),
    ({'server': 'https://k8s-2'}, True),
    ({'ca_data': b'other CA'}, True),
    ({'ca_path': '/ca.crt'}, True),
    ({'insecure': True}, True),
    ({'certificate_data': b'cert'}, True),
    ({'private_key_path': '/key'}, True),
    ({'trust_env': True}, True),
])
def test_new_connections_for_changed_transport_only(changes, renew):
    assert needs_new_connections(Accepted(BASE), Accepted(dataclasses.replace(BASE, **changes))) is renew


async def test_new_connections_for_a_new_session_of_a_login_handler():
    first, second = aiohttp.ClientSession(), aiohttp.ClientSession()
    try:
        assert needs_new_connections(Accepted(BASE, first), Accepted(BASE, second))
        assert needs_new_connections(Accepted(BASE), Accepted(BASE, first))
        assert not needs_new_connections(Accepted(BASE, first), Accepted(BASE, first))
    finally:
        await first.close()
        await second.close()

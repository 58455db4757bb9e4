"""Fixtures shared by the client-level tests (those talking to an ``aresponses`` mock server)."""
from __future__ import annotations

import pytest

from kopf.clients.auth import APIContext
from kopf.structs.credentials import ConnectionInfo

HOST = 'fake-k8s'
SERVER = f'http://{HOST}'


@pytest.fixture()
def host() -> str:
    return HOST


@pytest.fixture()
def info() -> ConnectionInfo:
    return ConnectionInfo(server=SERVER, token='the-token')


@pytest.fixture()
async def context(aresponses, info):
    """An open API context against the mock server; retries are immediate to keep tests fast."""
    async with APIContext(info, retries=2, backoff=0, max_backoff=0) as ctx:
        yield ctx

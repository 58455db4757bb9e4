"""The endpoint servers: one per port, a handler per path, and clear errors for ports in use and bad URLs."""
import socket

import aiohttp
import pytest

from kopf._observability import serving


async def fetch(url):
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_endpoints_on_one_port_share_its_server():
    servers = serving.Servers()
    problem = ["Waiting."]
    try:
        address = serving.Address('127.0.0.1', 0, '/readyz')
        ready_url = await servers.serve(address, serving.readiness_handler(lambda: problem[0]), what='r', option='-r')
        server = servers.find(address)
        assert server is not None
        port = server.bound_port
        same = serving.Address('127.0.0.1', 0, '/metrics')
        metrics_url = await servers.serve(same, serving.metrics_handler(lambda accept: (b'm 1\n', 'text/plain')),
                                          what='m', option='-m')
        assert metrics_url == f'http://127.0.0.1:{port}/metrics'
        assert await fetch(ready_url) == (503, '{"ready": false, "reason": "Waiting."}')
        problem[0] = None
        assert await fetch(ready_url) == (200, '{"ready": true}')
        assert await fetch(metrics_url) == (200, 'm 1\n')
        status, text = await fetch(f'http://127.0.0.1:{port}/other')
        assert status == 404 and 'Served: /metrics, /readyz.' in text
    finally:
        await servers.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        await fetch(ready_url)  # closed: refused, not hung


async def test_a_second_endpoint_on_the_same_path_is_refused_naming_the_option():
    servers = serving.Servers()
    try:
        address = serving.Address('127.0.0.1', 0, '/x')
        await servers.serve(address, serving.readiness_handler(lambda: None), what='the first', option='--first')
        with pytest.raises(serving.EndpointError, match=r"Cannot serve the second: the path /x of the port 0 serves "
                                                        r"another endpoint already. Choose another path with --second"):
            await servers.serve(address, serving.readiness_handler(lambda: None), what='the second',
                                option='--second')
    finally:
        await servers.stop()


async def test_a_port_in_use_is_an_error_naming_the_endpoint_and_the_option():
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        port = busy.getsockname()[1]
        servers = serving.Servers()
        url = f'http://127.0.0.1:{port}/metrics'
        address = serving.Address.parse(url, what='metrics endpoint', option='--metrics', example='x')
        with pytest.raises(serving.EndpointError) as e:
            await servers.serve(address, serving.readiness_handler(lambda: None),
                                what=f"the metrics endpoint {url}", option='--metrics')
    assert str(e.value).startswith(f"Cannot serve the metrics endpoint {url}: ")
    assert str(e.value).endswith(f"Is the port {port} used by another process? Choose another one with --metrics.")


@pytest.mark.parametrize('url, message', [
    ('ftp://0.0.0.0:9090/metrics', "The metrics endpoint 'ftp://0.0.0.0:9090/metrics' (--metrics) is not served: "
                                   "only http:// URLs are supported, e.g. http://0.0.0.0:9090/metrics."),
    ('http://0.0.0.0:port/metrics', "The metrics endpoint 'http://0.0.0.0:port/metrics' (--metrics) is invalid: "),
])
def test_invalid_urls_are_errors_naming_them(url, message):
    with pytest.raises(serving.EndpointError) as e:
        serving.Address.parse(url, what='metrics endpoint', option='--metrics', example='http://0.0.0.0:9090/metrics')
    assert str(e.value).startswith(message)


def test_addresses_default_to_all_interfaces_and_port_80():
    assert serving.Address.parse('http://:9090', what='', option='', example='') == \
        serving.Address('0.0.0.0', 9090, '/')
    assert serving.Address.parse('http://localhost/m', what='', option='', example='') == \
        serving.Address('localhost', 80, '/m')


async def test_an_adopted_server_is_shared_by_its_bound_port_and_keeps_running_without_our_paths():
    liveness = serving.EndpointServer('127.0.0.1', 0, what='liveness', option='-L')
    liveness.route('/healthz', serving.metrics_handler(lambda accept: (b'{}', 'application/json')))
    await liveness.start()
    try:
        servers = serving.Servers()
        servers.adopt(liveness)
        port = liveness.bound_port
        url = await servers.serve(serving.Address('127.0.0.1', port, '/metrics'),
                                  serving.metrics_handler(lambda accept: (b'm 1\n', 'text/plain')),
                                  what='m', option='-m')
        assert url == f'http://127.0.0.1:{port}/metrics'  # the same server, found by the port it has bound
        assert await fetch(url) == (200, 'm 1\n')
        await servers.stop()
        assert await fetch(f'http://127.0.0.1:{port}/healthz') == (200, '{}')  # its owner's: still served
        assert (await fetch(url))[0] == 404  # our path is gone with us
    finally:
        await liveness.stop()

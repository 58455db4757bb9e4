"""Failures of the API at startup end `kopf run` with one `Error:` line and exit code 1, not a traceback."""
import click.testing
import pytest

from kopf import cli
from kopf._kube.errors import APIConnectionError, APIForbiddenError, APIServerError, APIUnauthorizedError, LoginError


@pytest.fixture()
def run_failing(monkeypatch, tmp_path):
    path = tmp_path / 'op.py'
    path.write_text('import kopf\n')

    def run_failing(error):
        def fail(**_):
            raise error
        monkeypatch.setattr(cli.running, 'run', fail)
        return click.testing.CliRunner().invoke(cli.main, ['run', str(path)])

    return run_failing


@pytest.mark.parametrize('error, expected', [
    (APIUnauthorizedError('401 Unauthorized: Unauthorized [GET /api]', status=401),
     "Error: The Kubernetes API has refused the credentials, also after logging in again: "
     "401 Unauthorized: Unauthorized [GET /api]. Check the user of the kubeconfig's context"),
    (APIConnectionError('GET https://k8s/api failed after 5 attempts: ClientConnectorError: refused'),
     "Error: Cannot reach the Kubernetes API: GET https://k8s/api failed after 5 attempts: "
     "ClientConnectorError: refused. Check the server address"),
    (APIForbiddenError('403 Forbidden: nope [GET /apis]', status=403),
     "Error: The Kubernetes API has forbidden a request: 403 Forbidden: nope [GET /apis]. Grant the operator"),
    (APIServerError('500 InternalError: etcd [GET /apis]', status=500),
     "Error: The Kubernetes API has failed: 500 InternalError: etcd [GET /apis]"),
    (LoginError("The kubeconfig /x is not valid YAML at line 3, column 1: found character '\\t'."),
     "Error: The kubeconfig /x is not valid YAML at line 3, column 1"),
])
def test_api_failures_end_with_one_error_line(run_failing, error, expected):
    result = run_failing(error)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(expected)
    assert 'Traceback' not in result.output

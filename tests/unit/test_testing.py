"""KopfRunner: the operator of a test, run as ``kopf run`` would run it."""
import kopf
from kopf import cli
from kopf.testing import KopfRunner


def test_the_runners_registry_and_settings_reach_the_operator(monkeypatch, tmp_path):
    runs = []
    monkeypatch.setattr(cli.running, 'run', lambda **kwargs: runs.append(kwargs))
    monkeypatch.setattr(cli.logsetup, 'configure', lambda **kwargs: None)
    path = tmp_path / 'runner_op.py'
    path.write_text('')
    registry, settings = kopf.OperatorRegistry(), kopf.OperatorSettings()
    with KopfRunner(['run', str(path), '--standalone'], registry=registry, settings=settings, timeout=10) as runner:
        pass
    assert runner.exit_code == 0, runner.output
    assert runs[0]['registry'] is registry
    assert runs[0]['settings'] is settings


def test_without_them_the_operator_uses_its_defaults(monkeypatch, tmp_path):
    runs = []
    monkeypatch.setattr(cli.running, 'run', lambda **kwargs: runs.append(kwargs))
    monkeypatch.setattr(cli.logsetup, 'configure', lambda **kwargs: None)
    path = tmp_path / 'runner_op2.py'
    path.write_text('')
    with KopfRunner(['run', str(path)], timeout=10) as runner:
        pass
    assert runner.exit_code == 0, runner.output
    assert runs[0]['registry'] is None
    assert runs[0]['settings'] is None

"""
What ``import kopf`` costs an operator: not the parts that serve nothing it asked for.

The web server (for probes, webhooks and metrics) and the package metadata
(for ``kopf.__version__``) are a few megabytes of resident memory each
operator would pay for without using them; they are imported when used.
"""
import subprocess
import sys

import pytest

import kopf


@pytest.mark.parametrize('module', ['aiohttp.web', 'importlib.metadata'])
@pytest.mark.parametrize('entry', ['kopf', 'kopf.cli', 'kopf._runtime.running'])
def test_importing_kopf_does_not_import_what_serves_nothing_yet(entry, module):
    code = f"import sys, {entry}; print({module!r} in sys.modules)"
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == 'False', result.stderr


def test_the_version_is_still_there_when_asked_for():
    assert isinstance(kopf.__version__, str) and kopf.__version__


def test_other_missing_attributes_are_still_missing():
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        kopf.nonexistent  # noqa: B018

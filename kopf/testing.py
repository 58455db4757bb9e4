"""
Testing operators: fast handler tests in memory, and a real API server with the operator run inside the test.

* :class:`Simulation` (and :func:`handle`, :func:`call_handler`) runs the
  real handling cycle of one object in memory, without a server: the patch,
  the handlers called with their keyword arguments, their outcomes and the
  progress records, in milliseconds; :func:`load_operator` imports an
  operator's files into a fresh registry for it.
* The pytest plugin (active wherever kopf is installed; or ``-p kopf.testing``)
  gives the fixtures ``kopf_cluster``, ``kopf_api``, ``kopf_kubeconfig``,
  ``kopf_namespace`` and ``kopf_operator``: a local control plane per test
  session, a namespace per test, the operator in the test
  (:class:`OperatorInTest`); :func:`wait_until_handled` waits until the
  operator has handled an object.
* :class:`KopfRunner` runs ``kopf run ...`` in a background thread exactly
  as the command would; on exit from its ``with`` block it is stopped
  gracefully, and its output, exit code and exception are available for
  assertions (``registry=`` and ``settings=`` as in Kopf).
* :class:`ControlPlane` runs a throwaway local ``kube-apiserver`` + ``etcd``
  (built with Go on first use, or taken from ``$KOPF_CONTROLPLANE_BIN``);
  :class:`KubeAPI` is a plain client to check what the server holds, and
  :func:`wait_for` waits for a condition instead of sleeping.

``python -m kopf.testing build`` builds (or finds) the control plane's
binaries; ``python -m kopf.testing up`` runs one until Ctrl-C.
"""
from __future__ import annotations

import sys

from kopf._testkit import commands
from kopf._testkit.controlplane import ControlPlane, ControlPlaneError
from kopf._testkit.cycles import Call, Cycle, Outcome, Simulation, SimulationError, call_handler, handle, load_operator
from kopf._testkit.kubeapi import KubeAPI, KubeAPIError, wait_for
from kopf._testkit.operators import OperatorInTest, is_handled, wait_until_handled
from kopf._testkit.runner import KopfRunner

# The pytest plugin, when pytest loads this module as one (``-p kopf.testing``, or the entry point).
pytest_plugins = ['kopf._testkit.plugin']

__all__ = [
    'Call',
    'ControlPlane',
    'ControlPlaneError',
    'Cycle',
    'KopfRunner',
    'KubeAPI',
    'KubeAPIError',
    'OperatorInTest',
    'Outcome',
    'Simulation',
    'SimulationError',
    'call_handler',
    'handle',
    'is_handled',
    'load_operator',
    'wait_for',
    'wait_until_handled',
]


if __name__ == '__main__':
    sys.exit(commands.main())

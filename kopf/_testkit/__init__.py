"""
The test kit: what operators' tests need, from a real API server down to one handling cycle in memory.

The tour, from the server down:

* :mod:`.binaries` finds or builds ``kube-apiserver`` and ``etcd`` (from the
  Go sources shipped in ``go/``), :mod:`.certificates` makes the keys of a
  control plane, :mod:`.processes` keeps track of its servers, also after a
  crash, and :mod:`.controlplane` runs one;
* :mod:`.kubeapi` is a plain client to check what the server holds.

The public face is :mod:`kopf.testing` (and the pytest plugin,
:mod:`kopf.pytest_plugin`); nothing here is imported by the operator itself.
"""

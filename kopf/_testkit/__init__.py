"""
The test kit: what operators' tests need, from a real API server down to one handling cycle in memory.

The tour, from the server down:

* :mod:`.binaries` finds or builds ``kube-apiserver`` and ``etcd`` (from the
  Go sources shipped in ``go/``), :mod:`.certificates` makes the keys of a
  control plane, :mod:`.processes` keeps track of its servers, also after a
  crash, and :mod:`.controlplane` runs one;
* :mod:`.kubeapi` is a plain client to check what the server holds;
* :mod:`.runner` runs ``kopf run`` in a thread of the test (``KopfRunner``),
  :mod:`.tracking` remembers which test started which runner, and
  :mod:`.operators` runs the user's operator in a test's namespace and tells
  when it has handled an object;
* :mod:`.cycles` runs the real handling cycle of one object in memory, for
  handler tests in milliseconds;
* :mod:`.plugin` is the pytest plugin (fixtures ``kopf_cluster``,
  ``kopf_namespace``, ``kopf_operator``, ...).

The public face is :mod:`kopf.testing` (which also loads the plugin); nothing
here is imported by the operator itself.
"""

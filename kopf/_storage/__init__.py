"""
Persistence of handler state between handling cycles: progress, diff-base, finalizers.

The tour:

* :mod:`.progress` and :mod:`.diffbase` are the storages users choose and
  subclass: in annotations (the default), in the status, both (Smart/Multi);
  :mod:`.sqlite` and :mod:`.configmaps` keep records outside of the objects
  (:mod:`.cluster` gives the latter the operator's API session);
* :mod:`.persistence` is the one way the handling cycle reaches them: one
  snapshot read and one patch written per cycle;
* :mod:`.records` is the progress record's format, :mod:`.conventions` the
  annotation keys (ours and every form the released Kopf wrote);
* :mod:`.budget` fits the annotations into Kubernetes' 256 KiB, and
  :mod:`.trimming` the essences; :mod:`.finalizers` blocks and releases
  deletion; :mod:`.schemas` says where a resource's schema would prune;
  :mod:`.calls` calls sync and async storages alike.

Storages write into the patch they are given, never to the API themselves:
this package knows nothing of the Kubernetes client.
"""

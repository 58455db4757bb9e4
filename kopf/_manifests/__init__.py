"""
``kopf manifests``: what an operator needs in a cluster, derived from its code, its settings and its options.

The tour:

* :mod:`.facts` reads the operator: which resources its handlers serve and
  what it does with their objects (writes into them or their status, a
  finalizer, Events), its storages, Leases, namespaces, CRDs and webhook
  configurations;
* :mod:`.rules` is the table of features to RBAC rules: each row is a
  feature, what its rules are for, and the rules its facts call for; and the
  Roles and the ClusterRole that hold them;
* :mod:`.deployment` makes the ServiceAccount, the Deployment (the ports and
  probes of the options are rows of a table too), the PodDisruptionBudget,
  a Service for webhooks, and the Dockerfile;
* :mod:`.building` is the command's run: the startup handlers configure the
  settings, typed classes give their CRDs and resources, the cluster's
  discovery resolves the resources named by strings, and the parts are
  rendered as YAML (with a comment on every rule).
"""

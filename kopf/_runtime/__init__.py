"""
The runtime: what wires the operator together and runs it until it is stopped.

The tour:

* :mod:`.running` is the entry point (``kopf.run()``, ``kopf.operator()``,
  ``kopf run``): startup, login, the storages, the capabilities, the watch
  streams, and a graceful exit;
* :mod:`.activities` runs the startup, cleanup, login and probe handlers;
  :mod:`.probes` and :mod:`.probing` serve the liveness endpoint;
* :mod:`.observation` keeps track of which resources and namespaces are
  served (CRDs and namespaces that come and go), :mod:`.orchestration`
  starts and stops one watch stream per resource and namespace;
* :mod:`.preflight` checks the storages against the served resources;
* :mod:`.posting` posts Kubernetes Events, :mod:`.logsetup` configures the
  log output;
* :mod:`.exiting` and :mod:`.allocation` look after the process itself.
"""

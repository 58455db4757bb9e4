"""
The Kubernetes API over aiohttp, one module per job.

``auth`` logs in (kubeconfig, service account, other clients' configuration),
with ``kubeconfig`` reading kubeconfig files and ``plugins`` running their
exec credential plugins. ``session`` owns the authenticated HTTP session
(:class:`~kopf._kube.session.APIContext`) and executes what the modules below
it decide: ``credentials`` (what to authenticate with now, and when to log in
again: rotated token files, expiring credentials), ``retrying`` (a pure
policy: which failures to repeat and after how long, 429s as the server asks,
when to give up), ``slots`` (how many requests may be in flight), and
``connections`` (TLS, TCP keepalive, idle pooled connections). All of its
waits are on an injected :class:`~kopf._structs.clocks.Clock`.

``discovery`` resolves the user's resource names; ``fetching`` lists (in
pages) and reads; ``watching`` turns list+watch into an endless stream of
changes; ``patching`` sends merge-patches and reports pruned fields;
``objects`` has plain object requests for the storages (not found and
already there as values); ``events`` posts Kubernetes Events; ``access``
asks what the credentials may do; ``errors`` has the typed API
errors they all raise.

This package imports only ``kopf._structs`` (and ``kopf.errors``); settings
arrive as plain values. Leases are the replicas' business
(:mod:`kopf._replicas.leases`), webhook configurations the admission's
(:mod:`kopf._admission.configurations`).
"""

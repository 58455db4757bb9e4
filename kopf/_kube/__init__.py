"""
The Kubernetes API over aiohttp, one module per job.

``auth`` logs in (kubeconfig, service account, other clients' configuration),
with ``kubeconfig`` reading kubeconfig files and ``plugins`` running their
exec credential plugins; ``session`` owns the authenticated HTTP session
(:class:`~kopf._kube.session.APIContext`: timeouts, keepalive, retries,
re-authentication); ``discovery`` resolves the user's resource names;
``fetching`` lists (in pages) and reads; ``watching`` turns list+watch into an
endless stream of changes; ``patching`` sends merge-patches and reports
pruned fields; ``events`` posts Kubernetes Events; ``errors`` has the typed
API errors they all raise.

This package imports only ``kopf._structs``; settings arrive as
plain values. Leases are the replicas' business (:mod:`kopf._replicas.leases`),
webhook configurations the admission's (:mod:`kopf._admission.configurations`).
"""

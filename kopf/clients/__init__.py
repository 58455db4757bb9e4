"""
The Kubernetes API over aiohttp, one module per job.

``auth`` logs in and owns the HTTP session (:class:`~kopf.clients.auth.APIContext`);
``discovery`` resolves the user's resource names; ``fetching`` lists and reads;
``watching`` turns list+watch into an endless stream of changes; ``patching``
sends merge-patches and reports pruned fields; ``events`` posts Kubernetes
Events; ``errors`` has the typed API errors they all raise.

This package imports only ``kopf.structs``; settings arrive as plain values.
"""

"""
Pure data: the shapes of objects, patches, diffs, resources and the like, with no I/O.

Nothing here imports anything else of ``kopf``: every other package builds on
these types (bodies, patches, diffs, dicts, resources and selectors, ids,
credentials, namespace patterns, admission reviews, owner references, the
clock, dormant containers).
"""

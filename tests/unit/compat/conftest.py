"""
The forms that Kopf documents, each checked in-process where that is honest enough.

The handling cycle is driven as in ``tests/unit/cycle``: one object on a
simulated API server, a frozen clock moved by the delays asked for.
"""

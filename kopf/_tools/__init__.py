"""
Tools for the state that the framework keeps: ``kopf inspect`` and ``kopf migrate``.

They read (and move) the handlers' progress and the last-handled
configurations through the same storages the operator uses, for all objects
of a resource, without running any handler. The command line is in
:mod:`kopf.cli`; the work is here.
"""

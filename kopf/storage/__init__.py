"""
Persistence of handler state between handling cycles: progress, diff-base, finalizers.

In the objects (annotations, status), or outside of them (a local SQLite
file, ConfigMaps in the cluster); the annotation budget, trimmed essences,
and what the storages write where (for the startup checks).
"""

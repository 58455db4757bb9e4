"""Pure data structures: no I/O, no imports from other ``kopf`` packages."""

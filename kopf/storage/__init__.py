"""Persistence of handler state between handling cycles: progress, diff-base, finalizers."""

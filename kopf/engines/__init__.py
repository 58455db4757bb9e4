"""Side engines running beside the handling: per-object logging and posting Kubernetes Events."""

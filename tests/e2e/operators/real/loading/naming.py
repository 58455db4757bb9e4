"""A module beside the operator file, imported by it as ``python operator.py`` would import it."""


def child_name(name: str) -> str:
    return f"{name}-child"

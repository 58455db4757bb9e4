def suffix() -> str:
    return 'extra'

from kopf.cli import console

console()

from kopf.cli import main

main()

"""`python -m deploy ...` is the `petrel` command."""

from deploy.cli import main

main()

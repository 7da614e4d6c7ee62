"""Allows `python -m attncli`."""

from attncli.cli import main

main()

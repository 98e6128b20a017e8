"""The ``mvs`` command line: ``command_line`` parses it, ``commands`` runs each verb."""

from workers.cli.command_line import build_parser, main

__all__ = ["build_parser", "main"]

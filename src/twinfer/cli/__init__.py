"""Command-line interface (typer + rich)."""

from twinfer.cli._app import app, main

__all__ = ["app", "main"]

"""``falcon tidal pool``: warm node-pool rules for Falcon's own queues."""

from __future__ import annotations

import typer

pool_app = typer.Typer(no_args_is_help=True, help=__doc__)

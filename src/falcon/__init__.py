"""Falcon: dispatches TPU jobs from a MySQL table to GKE clusters, on Prefect 3."""

__version__ = "0.1.0"

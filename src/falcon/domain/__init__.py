"""Falcon's pure core: plain data, scheduling policy and state rules.

Nothing here may import sqlalchemy, prefect, google or kubernetes, nor read the clock
(enforced by import-linter, see .importlinter). Time comes in as an argument.
"""

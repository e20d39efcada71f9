"""Seed aggregation, tables checked against reported numbers, figures."""

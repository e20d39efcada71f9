"""Metrics and evaluation protocols.

Declarations (torch-free, what building the Snakemake DAG and the report read):
``methods.metrics.declarations`` (every metric, ``METRICS``), ``methods.metrics.protocols`` (the
named protocols) and ``methods.metrics.coco_ids`` (the COCO ids ECCV Caption / CxC score by).
Computation: each metric module registers the implementations of its declared metrics
(``methods.metrics.implementations``); ``methods.metrics.evaluation`` imports them all and
evaluates score matrices under the protocols.

Importing the package imports nothing, so a reader of the declarations does not pay torch's import.
"""

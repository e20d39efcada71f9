"""Losses as weighted terms declared in config.

``methods.losses.term_kinds``: the term kinds a config may name and their parameters (torch-free:
the DAG build reads them); ``methods.losses.terms``: the term contract and its registry;
``methods.losses.ranking``, ``set_regularisers``, ``label_wise``, ``generation``, ``dscmr``: the terms;
``methods.losses.weighted_sum``: a step's loss (importing it registers every term).
The package itself imports nothing, so that its torch-free modules stay torch-free.
"""

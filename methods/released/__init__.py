"""The authors' released checkpoints and vocabularies, read without running their code: safe
loading (``safe_load``), the tensor mapping (``mapping``), and per code base an importer onto the
project's model (``sgraf``, ``vsrn``, ``vsepp``: ``record.Importer``, listed in ``importers``)."""

"""The authors' released checkpoints and vocabularies as the project's trained models: the files
are read by ``methods.untrusted``; here, the options an importer accepts (``options``), the tensor
mapping (``mapping``), the vocabularies (``vocabulary``), and per code base an importer onto the
project's model (``sgraf``, ``vsrn``, ``vsepp``, ``pvse``, ``vse_infinity``, ``vse_infinity_grid``:
``record.Importer``, listed in ``importers``)."""

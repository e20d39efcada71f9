"""The authors' released checkpoints and vocabularies, read without running their code and within
bounds: a bounded child process per file (``sandbox``, ``reader``) that scans every pickle's
opcodes (``pickle_scan``), unpickles plain data only (``unpickler``), reads torch.save files
without torch (``torch_format``) and hands back plain values (``plain``), checked again and
materialised by ``safe_load``; the options an importer accepts (``options``), the tensor mapping
(``mapping``), the vocabularies (``vocabulary``), and per code base an importer onto the project's
model (``sgraf``, ``vsrn``, ``vsepp``, ``pvse``: ``record.Importer``, listed in ``importers``)."""

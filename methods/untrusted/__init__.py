"""Files from the internet (released checkpoints, vocabularies, weights), read without running them
and within bounds: a child process per file (``sandbox``, ``reader``) that scans every pickle's
opcodes (``pickle_scan``), unpickles plain data only (``unpickler``), reads torch.save files
without torch (``torch_format``) and hands back plain values (``plain``), which ``safe_load``
checks again and materialises. A base helper: it depends on nothing of the harness but its errors."""

"""Training: the epoch loop shared by every model (``loop``), what one step does (``step``), and
the batches (``data``)."""

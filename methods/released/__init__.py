"""The authors' released checkpoints and vocabularies, read without running their code: safe
loading (``safe_load``) and, per code base, an importer onto the project's model."""

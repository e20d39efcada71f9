# The jobs behind a dataset's runtime table (runtime.smk), read from the DAG Snakemake built
# (methods/plan/runtime_jobs.py): a rule's jobs are attributed without a copy of its wildcards here.

# datasets whose data the DAG makes: the synthetic one and those generated from it (synthetic tags)
RUNTIME_TABLES = [f"tables/runtime_{name}.{ext}" for name in HARNESS["default_datasets"] for ext in ("md", "html")
                  if data_kind(HARNESS["datasets"][name]) == "synthetic"]

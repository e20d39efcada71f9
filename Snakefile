# Reproducibility harness for image-text retrieval papers.
#   snakemake --cores 2                          the default (synthetic) datasets' tables, figures, claims and reports
#                                                (less datasets.<name>.skip_tables; all: --configfile config/synthetic_all_tables.yaml)
#   snakemake --cores 8 tables/table1_flickr.csv one table, from raw inputs
# The DAG is built from config/config.yaml and the paper files it lists (methods/papers/*.yaml).
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/runtime_jobs.smk"
include: "workflow/rules/runtime.smk"


rule all:
    input:
        PLAN.default_targets(),
        SYNTHETIC_PRECOMP,
        RUNTIME_TABLES,  # last: they wait for every other default target
    default_target: True

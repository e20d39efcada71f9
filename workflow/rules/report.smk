rule aggregate_row:
    """Mean and std over the seeds of one table row."""
    input:
        row_evals,
    output:
        f"{R}/{{dataset}}/rows/{{table}}/{{row}}.json",
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/aggregate/{{dataset}}/{{table}}/{{row}}.log",
    benchmark:
        benchmark_file("aggregate_row", "{dataset}/{table}/{row}")
    shell:
        "python -m methods.report.aggregate --out {output} {input} " + TO_LOG


rule table_spec:
    """Rows, reported numbers (with sources) and tolerances of one table."""
    output:
        f"{R}/{{dataset}}/tables/{{table}}.spec.json",
    params:
        spec=lambda w: json.dumps(PLAN.table_spec(w.table, w.dataset)),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/table_spec/{{dataset}}/{{table}}.log",
    shell:
        "python -m methods.io --out {output} --json {params.spec:q} " + TO_LOG


rule table:
    """A table: reproduced (mean ± std over seeds) beside reported, difference and verdict."""
    input:
        unpack(table_inputs),
    output:
        csv=report("tables/{table}_{dataset}.csv", category="Tables", caption="../report/table.rst"),
        md="tables/{table}_{dataset}.md",
    wildcard_constraints:
        table=r"(?!runtime_[a-z0-9]+\.)[a-z0-9_]+",  # tables/runtime_{dataset}.*: rule runtime
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/table/{{table}}_{{dataset}}.log",
    benchmark:
        benchmark_file("table", "{table}_{dataset}")
    shell:
        "python -m methods.report.table --spec {input.spec} --out-csv {output.csv} --out-md {output.md} "
        "{input.rows} " + TO_LOG


rule figure_reproduced_vs_reported:
    """Scatter of reproduced vs reported R@K over every table of a dataset."""
    input:
        # an unknown dataset, or one with no table, fails here (the job would plot nothing)
        lambda w: [f"tables/{t}_{w.dataset}.csv"
                   for t in PLAN.dataset_tables(w.dataset, f"figures/reproduced_vs_reported_{w.dataset}.png")],
    output:
        report("figures/reproduced_vs_reported_{dataset}.png", category="Figures", caption="../report/figure.rst"),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/figure/reproduced_vs_reported_{{dataset}}.log",
    benchmark:
        benchmark_file("figure_reproduced_vs_reported", "{dataset}")
    shell:
        "python -m methods.report.figure --dataset {wildcards.dataset} --out {output} {input} " + TO_LOG


rule figure_spec:
    """Rows (model, loss, seeds, runs) of one paper figure."""
    output:
        f"{R}/{{dataset}}/figures/{{figure}}.spec.json",
    params:
        spec=lambda w: json.dumps(PLAN.figure_spec(w.figure, w.dataset)),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/figure_spec/{{dataset}}/{{figure}}.log",
    shell:
        "python -m methods.io --out {output} --json {params.spec:q} " + TO_LOG


rule paper_figure:
    """A figure a paper file declares (RSUM per loss and model; gradient counts per epoch; SAF weights)."""
    input:
        unpack(figure_inputs),
    output:
        report("figures/{figure}_{dataset}.png", category="Figures", caption="../report/figure.rst"),
    params:
        extra=figure_extra_args,
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/figure/{{figure}}_{{dataset}}.log",
    benchmark:
        benchmark_file("paper_figure", "{figure}_{dataset}")
    shell:
        "python -m methods.report.paper_figures --spec {input.spec} --out {output} {params.extra} {input.rows} " + TO_LOG

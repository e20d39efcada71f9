rule aggregate_row:
    """Mean and std over the seeds of one table row."""
    input:
        lambda w: INPUTS.row_evals(w.table, w.dataset, w.row),
    output:
        LAYOUT.row_aggregate("{dataset}", "{table}", "{row}"),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/aggregate/{{dataset}}/{{table}}/{{row}}.log",
    benchmark:
        benchmark_file("aggregate_row", "{dataset}/{table}/{row}")
    shell:
        logged("python -m methods.report.aggregate --out {output} {input} ")


rule table_spec:
    """Rows, reported numbers (with sources) and tolerances of one table."""
    output:
        LAYOUT.spec("{dataset}", "tables", "{table}"),
    params:
        spec=lambda w: json.dumps(PLAN.table_spec(w.table, w.dataset).to_json()),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/table_spec/{{dataset}}/{{table}}.log",
    shell:
        logged("python -m methods.io --out {output} --json {params.spec:q} ")


rule table:
    """A table: reproduced (mean ± std over seeds) beside reported, difference and verdict."""
    input:
        unpack(lambda w: INPUTS.table(w.table, w.dataset)),
    output:
        csv="tables/{table}_{dataset}.csv",
        md="tables/{table}_{dataset}.md",
        html=report("tables/{table}_{dataset}.html", category="Tables", subcategory="{dataset}",
                    caption="../report/table.rst"),
    wildcard_constraints:
        # tables/runtime_<dataset>, tables/summary_<dataset>: their own rules; tables/claims_*: rule claims
        table=r"(?!runtime_[a-z0-9-]+\.)(?!summary_[a-z0-9-]+\.)(?!claims_)[a-z0-9_]+",
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/table/{{table}}_{{dataset}}.log",
    benchmark:
        benchmark_file("table", "{table}_{dataset}")
    shell:
        logged("python -m methods.report.table --spec {input.spec} --out-csv {output.csv} --out-md {output.md} "
               "--out-html {output.html} {input.rows} ")


# The rows of the authors' released weights alone (tables/released/<table>_<dataset>), beside the
# paper's numbers with their verdicts, without the retrained rows' training: `snakemake released_<dataset>`
# builds every such table of a dataset (one target rule per dataset).
rule released_rows_table_spec:
    """The released rows of one table."""
    output:
        LAYOUT.spec("{dataset}", "released_tables", "{table}"),
    params:
        spec=lambda w: json.dumps(PLAN.table_spec(w.table, w.dataset, released_only=True).to_json()),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/released_rows_table_spec/{{dataset}}/{{table}}.log",
    shell:
        logged("python -m methods.io --out {output} --json {params.spec:q} ")


rule released_rows_table:
    """A table's released rows: reproduced beside reported, difference and verdict."""
    input:
        unpack(lambda w: INPUTS.released_table(w.table, w.dataset)),
    output:
        csv="tables/released/{table}_{dataset}.csv",
        md="tables/released/{table}_{dataset}.md",
        html=report("tables/released/{table}_{dataset}.html", category="Released weights", subcategory="{dataset}",
                    caption="../report/table.rst"),
    wildcard_constraints:
        table=r"[a-z0-9_]+",
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/released_rows_table/{{table}}_{{dataset}}.log",
    benchmark:
        benchmark_file("released_rows_table", "{table}_{dataset}")
    shell:
        logged("python -m methods.report.table --spec {input.spec} --out-csv {output.csv} --out-md {output.md} "
               "--out-html {output.html} {input.rows} ")


for _name in HARNESS["datasets"]:

    rule:
        name:
            f"released_{_name}"
        input:
            lambda w, name=_name: INPUTS.released_tables(name),


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
        logged("python -m methods.report.figure --dataset {wildcards.dataset} --out {output} {input} ")


rule figure_spec:
    """Rows (model, loss, seeds, runs) of one paper figure."""
    output:
        LAYOUT.spec("{dataset}", "figures", "{figure}"),
    params:
        spec=lambda w: json.dumps(PLAN.figure_spec(w.figure, w.dataset).to_json()),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/figure_spec/{{dataset}}/{{figure}}.log",
    shell:
        logged("python -m methods.io --out {output} --json {params.spec:q} ")


rule paper_figure:
    """A figure a paper file declares (RSUM per loss and model; gradient counts per epoch; SAF weights)."""
    input:
        unpack(lambda w: INPUTS.figure(w.figure, w.dataset)),
    output:
        report("figures/{figure}_{dataset}.png", category=figure_paper_name, subcategory="{dataset}",
               caption="../report/figure.rst"),
    params:
        numerics=numerics_env_of(lambda d: 1),
        extra=lambda w: INPUTS.figure_arguments(w.figure, w.dataset),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/figure/{{figure}}_{{dataset}}.log",
    benchmark:
        benchmark_file("paper_figure", "{figure}_{dataset}")
    shell:
        logged("{params.numerics}python -m methods.report.paper_figures --spec {input.spec} --out {output} {params.extra} {input.rows} ")


# Claims and reproduction reports, per paper file (its key) and dataset: the claims job scores the
# compared rows' runs (score matrices) with a paired bootstrap over test images; the report reads
# the paper's tables and claims. A paper with no claim on a dataset still gets its report.
rule claims_spec:
    """The claims of a paper on a dataset, with the compared rows' score files and reported numbers."""
    output:
        LAYOUT.spec("{dataset}", "claims", "{paper}"),
    params:
        spec=lambda w: json.dumps(PLAN.claims_spec(w.paper, w.dataset).to_json()),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/claims_spec/{{dataset}}/{{paper}}.log",
    shell:
        logged("python -m methods.io --out {output} --json {params.spec:q} ")


rule claims:
    """Each claim of a paper on a dataset: the paper's difference, ours with its bootstrap interval, a verdict."""
    input:
        unpack(lambda w: INPUTS.claims(w.paper, w.dataset)),
    output:
        csv="tables/claims_{paper}_{dataset}.csv",   # in the paper's page (rule paper_page)
        md="tables/claims_{paper}_{dataset}.md",
    params:
        numerics=numerics_env_of(lambda d: 1),
    threads: 1
    resources:
        mem_mb=dataset_res("evaluate", "mem_mb"),
        runtime=dataset_res("evaluate", "runtime"),
        gpu=0,  # score matrices and resampling: no GPU
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/claims/{{paper}}_{{dataset}}.log",
    benchmark:
        benchmark_file("claims", "{paper}_{dataset}")
    shell:
        logged("{params.numerics}python -m methods.report.claims --spec {input.spec} --dataset-config {input.cfg} --out-csv {output.csv} "
               "--out-md {output.md} ")


rule claims_figure:
    """Each claim's difference with its interval, the paper's difference as a marker, the zero line."""
    input:
        "tables/claims_{paper}_{dataset}.csv",
    output:
        report("figures/claims_{paper}_{dataset}.png", category=paper_name, subcategory="{dataset}",
               caption="../report/claims_figure.rst"),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/claims_figure/{{paper}}_{{dataset}}.log",
    benchmark:
        benchmark_file("claims_figure", "{paper}_{dataset}")
    shell:
        logged("python -m methods.report.claims_figure --claims {input} --out {output} ")


rule report_spec:
    """Paper, notes, tables and statistics settings of a reproduction report."""
    output:
        LAYOUT.spec("{dataset}", "reports", "{paper}"),
    params:
        spec=lambda w: json.dumps(PLAN.report_spec(w.paper, w.dataset).to_json()),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/report_spec/{{dataset}}/{{paper}}.log",
    shell:
        logged("python -m methods.io --out {output} --json {params.spec:q} ")


rule reproduction_report:
    """A paper's reproduction report on a dataset (ML Reproducibility Challenge structure), from its tables and claims."""
    input:
        unpack(lambda w: INPUTS.report(w.paper, w.dataset)),
    output:
        "reports/{paper}_{dataset}.md",   # in the paper's page (rule paper_page)
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/reproduction_report/{{paper}}_{{dataset}}.log",
    benchmark:
        benchmark_file("reproduction_report", "{paper}_{dataset}")
    shell:
        logged("python -m methods.report.reproduction --spec {input.spec} --out {output} "
               "--tables {input.tables} --table-specs {input.table_specs} --claims {input.claims} ")


rule paper_page:
    """A paper's page on a dataset for snakemake --report: its reproduction report, each of its tables
    and its claims table, its figures beside them (methods.report.html)."""
    input:
        unpack(lambda w: INPUTS.paper_page(w.paper, w.dataset)),
    output:
        report("reports/{paper}_{dataset}.html", category=paper_name, subcategory="{dataset}",
               caption="../report/reproduction.rst"),
    params:
        title=lambda w: f"{PLAN.papers[w.paper]} on {w.dataset}",
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/paper_page/{{paper}}_{{dataset}}.log",
    benchmark:
        benchmark_file("paper_page", "{paper}_{dataset}")
    shell:
        logged("python -m methods.report.html --title {params.title:q} --out {output} "
               "--markdown {input.report} {input.tables} {input.claims} --figures {input.figures} ")


# What the run found on a dataset, paper by paper: each row's main metric against chance, whether
# it trained, each claim's verdict (the numbers docs/synthetic-dataset.md points to, generated, not copied).
rule summary_spec:
    """The papers, tables, rows (with their aggregates) and claims tables of a dataset's summary."""
    output:
        LAYOUT.summary_spec("{dataset}"),
    params:
        spec=lambda w: json.dumps(PLAN.summary_spec(w.dataset).to_json()),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/summary_spec/{{dataset}}.log",
    shell:
        logged("python -m methods.io --out {output} --json {params.spec:q} ")


rule summary:
    """tables/summary_<dataset>.{md,csv}: every row's main metric against chance and every claim's verdict."""
    input:
        spec=LAYOUT.summary_spec("{dataset}"),
        rows=lambda w: PLAN.summary_inputs(w.dataset),
    output:
        md="tables/summary_{dataset}.md",
        csv="tables/summary_{dataset}.csv",
        html=report("tables/summary_{dataset}.html", category="Summary", caption="../report/summary.rst"),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/summary/{{dataset}}.log",
    benchmark:
        benchmark_file("summary", "{dataset}")
    shell:
        logged("python -m methods.report.summary --spec {input.spec} --out-csv {output.csv} --out-md {output.md} "
               "--out-html {output.html} ")

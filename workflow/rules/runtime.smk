# The runtime table of a dataset: where the time of its default targets went, per rule and per
# paper, from the benchmark file of every job behind them. It waits for those targets; the jobs
# behind it are read from the DAG before any job starts (write_runtime_specs, runtime_jobs.smk).
rule runtime:
    """Where the time went: jobs, wall and CPU seconds, max RSS per rule and per paper."""
    input:
        lambda w: INPUTS.runtime(w.dataset),
    output:
        csv="tables/runtime_{dataset}.csv",
        md="tables/runtime_{dataset}.md",
        html=report("tables/runtime_{dataset}.html", category="Runtime", caption="../report/runtime.rst"),
    params:
        spec=lambda w: LAYOUT.runtime_spec(w.dataset),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/runtime/{{dataset}}.log",
    benchmark:
        benchmark_file("runtime", "{dataset}")
    shell:
        logged("python -m methods.report.runtime --spec {params.spec} --out-csv {output.csv} --out-md {output.md} --out-html {output.html} ")

# The runtime table of a dataset: where the time of its default targets went, per rule and per
# paper, from the benchmark file (BENCHMARKS, common.smk) of every job behind them. Its inputs
# are those benchmark files, so it runs after every other job of the dataset.
rule runtime_spec:
    """The jobs behind a dataset's default targets, their papers and rules (for the runtime table)."""
    output:
        LAYOUT.runtime_spec("{dataset}"),
    params:
        spec=lambda w: json.dumps(runtime_spec(w.dataset).to_json()),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/runtime_spec/{{dataset}}.log",
    shell:
        logged("python -m methods.io --out {output} --json {params.spec:q} ")


rule runtime:
    """Where the time went: jobs, wall and CPU seconds, max RSS per rule and per paper."""
    input:
        spec=LAYOUT.runtime_spec("{dataset}"),
        benchmarks=lambda w: list(runtime_jobs(w.dataset)),
    output:
        csv="tables/runtime_{dataset}.csv",
        md="tables/runtime_{dataset}.md",
        html=report("tables/runtime_{dataset}.html", category="Runtime", caption="../report/runtime.rst"),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/runtime/{{dataset}}.log",
    benchmark:
        benchmark_file("runtime", "{dataset}")
    shell:
        logged("python -m methods.report.runtime --spec {input.spec} --out-csv {output.csv} --out-md {output.md} --out-html {output.html} ")

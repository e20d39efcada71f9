rule dataset_config:
    """What the data, feature and training jobs of one dataset need, resolved from config."""
    output:
        f"{R}/{{dataset}}/dataset.json",
    params:
        payload=lambda w: json.dumps(dataset_payload(HARNESS, w.dataset)),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/dataset_config/{{dataset}}.log",
    shell:
        "python -m methods.io --out {output} --json {params.payload:q} " + TO_LOG


rule generate_synthetic:
    """The built-in synthetic dataset, in the Karpathy layout (same seed, same bytes), with every
    caption's true images (extended positives) and the split statistics."""
    input:
        dataset_json,
    output:
        karpathy=f"{R}/{{dataset}}/data/dataset_{{dataset}}.json",
        images=directory(f"{R}/{{dataset}}/data/images"),
        positives=f"{R}/{{dataset}}/data/positives_{{dataset}}.json",
        stats=f"{R}/{{dataset}}/data/stats.json",
    wildcard_constraints:
        dataset="|".join(SYNTHETIC) or "no-synthetic-dataset",
    params:
        out_dir=lambda w: f"{R}/{w.dataset}/data",
    threads: res("generate", "threads")
    resources:
        mem_mb=res("generate", "mem_mb"),
        runtime=res("generate", "runtime"),
        **cpu_partition(res("generate", "gpus")),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/generate/{{dataset}}.log",
    benchmark:
        benchmark_file("generate_synthetic", "{dataset}")
    shell:
        "python -m methods.data.synthetic --dataset-config {input} --out {params.out_dir} " + TO_LOG


rule vocab:
    """Vocabulary from the training captions only (or the configured one, checked against them)."""
    input:
        unpack(data_inputs),
        cfg=dataset_json,
        configured=lambda w: [str(p)] if (p := dataset_paths(HARNESS, w.dataset)["vocab"]) else [],
    output:
        f"{R}/{{dataset}}/vocab.json",
    threads: res("vocab", "threads")
    resources:
        mem_mb=res("vocab", "mem_mb"),
        runtime=res("vocab", "runtime"),
        **cpu_partition(res("vocab", "gpus")),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/vocab/{{dataset}}.log",
    benchmark:
        benchmark_file("vocab", "{dataset}")
    shell:
        "python -m methods.data.vocab --dataset-config {input.cfg} --out {output} " + TO_LOG

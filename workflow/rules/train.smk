rule experiment_config:
    """The resolved method config of one experiment (its hash is in the experiment name)."""
    output:
        f"{R}/{{dataset}}/runs/{{exp}}/config.json",
    params:
        config=lambda w: json.dumps(PLAN.experiment(w.dataset, w.exp).config),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/experiment_config/{{dataset}}/{{exp}}.log",
    shell:
        "python -m methods.io --out {output} --json {params.config:q} " + TO_LOG


rule train:
    """Train one experiment with one seed; resumes from results/.../checkpoints/last.pt if killed."""
    input:
        unpack(train_inputs),
    output:
        model=f"{R}/{{dataset}}/runs/{{exp}}/seed{{seed}}/model.pt",
        log=f"{R}/{{dataset}}/runs/{{exp}}/seed{{seed}}/train_log.json",
    params:
        features=lambda w: image_features_dir(w.dataset, w.exp),
        run_dir=lambda w: run_dir(w.dataset, w.exp, w.seed),
        device=DEVICE,
    threads: dataset_res("train", "threads")
    resources:
        mem_mb=res("train", "mem_mb"),
        runtime=res("train", "runtime"),
        gpu=res("train", "gpus"),
        **cpu_partition(res("train", "gpus")),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/train/{{dataset}}/{{exp}}/seed{{seed}}.log",
    benchmark:
        benchmark_file("train", "{dataset}/{exp}/seed{seed}")
    shell:
        "python -m methods.train --dataset-config {input.cfg} --experiment {input.exp} --seed {wildcards.seed} "
        "--run-dir {params.run_dir} --features-dir {params.features} --vocab {input.vocab} "
        "--device {params.device} --threads {threads} " + TO_LOG


rule evaluate:
    """Metrics of one run on one test split under every protocol of the dataset (+ its score matrix)."""
    input:
        unpack(evaluate_inputs),
    output:
        metrics=f"{R}/{{dataset}}/runs/{{exp}}/seed{{seed}}/eval_{{split}}.json",
        sims=f"{R}/{{dataset}}/runs/{{exp}}/seed{{seed}}/sims_{{split}}.npy",
    params:
        features=lambda w: image_features_dir(w.dataset, w.exp),
        run_dir=lambda w: run_dir(w.dataset, w.exp, w.seed),
        device=DEVICE,
    threads: dataset_res("evaluate", "threads")
    resources:
        mem_mb=res("evaluate", "mem_mb"),
        runtime=res("evaluate", "runtime"),
        gpu=res("evaluate", "gpus"),
        **cpu_partition(res("evaluate", "gpus")),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/evaluate/{{dataset}}/{{exp}}/seed{{seed}}_{{split}}.log",
    benchmark:
        benchmark_file("evaluate", "{dataset}/{exp}/seed{seed}_{split}")
    shell:
        "python -m methods.evaluate --dataset-config {input.cfg} --run-dir {params.run_dir} --split {wildcards.split} "
        "--features-dir {params.features} --vocab {input.vocab} --device {params.device} --threads {threads} " + TO_LOG


rule ensemble:
    """Average the members' score matrices (an ensemble row), then evaluate like a single model."""
    input:
        unpack(positives_inputs),
        cfg=dataset_json,
        sims=lambda w: [f"{d}/sims_{w.split}.npy" for d in ensemble_members(w)],
        evals=lambda w: [f"{d}/eval_{w.split}.json" for d in ensemble_members(w)],
    output:
        f"{R}/{{dataset}}/ensembles/{{ens}}/seed{{seed}}/eval_{{split}}.json",
    params:
        members=ensemble_members,
    threads: dataset_res("evaluate", "threads")
    resources:
        mem_mb=res("evaluate", "mem_mb"),
        runtime=res("evaluate", "runtime"),
        **cpu_partition(0),  # averages score matrices: no GPU
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/ensemble/{{dataset}}/{{ens}}/seed{{seed}}_{{split}}.log",
    benchmark:
        benchmark_file("ensemble", "{dataset}/{ens}/seed{seed}_{split}")
    shell:
        "python -m methods.ensemble --dataset-config {input.cfg} --split {wildcards.split} "
        "--members {params.members} --out {output} " + TO_LOG

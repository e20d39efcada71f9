rule experiment_config:
    """The resolved method config of one experiment (its hash is in the experiment name)."""
    output:
        LAYOUT.experiment_config("{dataset}", "{exp}"),
    params:
        config=lambda w: json.dumps(PLAN.experiment(w.dataset, w.exp).config),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/experiment_config/{{dataset}}/{{exp}}.log",
    shell:
        logged("python -m methods.io --out {output} --json {params.config:q} ")


# One training rule per dataset: a training job ends by evaluating the kept model on the
# dataset's test splits (eval_<split>.json, sims_<split>.npy), whose names are per-dataset
# config; evaluating in the training job saves a process start (torch's import) per run.
for _name in HARNESS["datasets"]:
    _tests = test_splits(HARNESS, _name)
    _run = LAYOUT.run_dir(_name, "{exp}", "{seed}")

    rule:
        name:
            f"train_{_name}"
        input:
            unpack(lambda w, name=_name: INPUTS.train(name, w.exp)),
        output:
            model=model_file(_run),
            log=train_log(_run),
            **{f"eval_{s}": eval_file(_run, s) for s in _tests},
            **{f"sims_{s}": sims_file(_run, s) for s in _tests},
        params:
            numerics=numerics_env(_name, dataset_resource(_name, "train", "threads")),
            features=lambda w, name=_name: PLAN.image_feature_dir(name, w.exp),
            run_dir=lambda w, name=_name: PLAN.run_dir(name, w.exp, w.seed),
            splits=" ".join(_tests),
            device=DEVICE,
            block_elements=BLOCK_ELEMENTS,
        threads: dataset_resource(_name, "train", "threads")
        priority: lambda w, name=_name: INPUTS.train_priority(name, w.exp)
        resources:
            **resources_of(_name, "train"),
            # on SLURM, SIGUSR1 five minutes before the time limit: training writes a checkpoint
            # and stops, and the retry resumes from it (SIGTERM at the limit is handled the same way)
            slurm_extra="'--signal=USR1@300'",
        conda:
            CONDA_ENV
        log:
            f"{R}/logs/train/{_name}/{{exp}}/seed{{seed}}.log",
        benchmark:
            benchmark_file(f"train_{_name}", f"{_name}/{{exp}}/seed{{seed}}")
        shell:
            logged("{params.numerics}python -m methods.train --dataset-config {input.cfg} --experiment {input.exp} --seed {wildcards.seed} "
                   "--run-dir {params.run_dir} --features-dir {params.features} --vocab {input.vocab} "
                   "--evaluate {params.splits} --device {params.device} --threads {threads} "
                   "--block-elements {params.block_elements} ")


# One rule per dataset for the authors' released checkpoints (paper-file rows with `released`):
# the job imports the checkpoint and its vocabulary into the row's method config (a run folder
# under released/<exp>/<config key>) and evaluates it on the test splits, as a training job ends.
for _name in HARNESS["datasets"]:
    _tests = test_splits(HARNESS, _name)
    _imported = LAYOUT.released_dir(_name, "{exp}", "{checkpoint}")

    rule:
        name:
            f"evaluate_released_{_name}"
        input:
            unpack(lambda w, name=_name: INPUTS.released(name, w.exp, w.checkpoint)),
        output:
            model=model_file(_imported),
            vocab=run_vocab(_imported),
            **{f"eval_{s}": eval_file(_imported, s) for s in _tests},
            **{f"sims_{s}": sims_file(_imported, s) for s in _tests},
        wildcard_constraints:
            checkpoint=r"[a-z0-9_]+",
        params:
            numerics=numerics_env(_name, dataset_resource(_name, "evaluate", "threads")),
            features=lambda w, name=_name: PLAN.image_feature_dir(name, w.exp),
            run_dir=lambda w, name=_name: LAYOUT.released_dir(name, w.exp, w.checkpoint),
            expect=lambda w, name=_name: json.dumps(dict(PLAN.released_member(name, w.exp, w.checkpoint).expect)),
            splits=" ".join(_tests),
            device=DEVICE,
            block_elements=BLOCK_ELEMENTS,
            reader_limits=READER_LIMITS,
        threads: dataset_resource(_name, "evaluate", "threads")
        resources:
            **resources_of(_name, "evaluate"),
        conda:
            CONDA_ENV
        log:
            f"{R}/logs/evaluate_released/{_name}/{{exp}}/{{checkpoint}}.log",
        benchmark:
            benchmark_file(f"evaluate_released_{_name}", f"{_name}/{{exp}}/{{checkpoint}}")
        shell:
            logged("{params.numerics}python -m methods.import_released --dataset-config {input.cfg} "
                   "--experiment {input.exp} --checkpoint {input.checkpoint:q} --vocab {input.vocab:q} "
                   "--run-dir {params.run_dir} --expect {params.expect:q} --evaluate {params.splits} --features-dir {params.features} "
                   "--device {params.device} --threads {threads} --block-elements {params.block_elements} "
                   "{params.reader_limits} ")


rule ensemble:
    """Average the members' score matrices (an ensemble row), then evaluate like a single model."""
    input:
        unpack(lambda w: INPUTS.relevance_files(w.dataset)),
        cfg=dataset_json,
        sims=lambda w: [sims_file(d, w.split) for d in INPUTS.ensemble_members(w.dataset, w.ens, w.seed)],
        evals=lambda w: [eval_file(d, w.split) for d in INPUTS.ensemble_members(w.dataset, w.ens, w.seed)],
    output:
        eval_file(LAYOUT.ensemble_dir("{dataset}", "{ens}", "{seed}"), "{split}"),
    params:
        numerics=numerics_env_of(lambda d: dataset_resource(d, "evaluate", "threads")),
        members=lambda w: INPUTS.ensemble_members(w.dataset, w.ens, w.seed),
    threads: dataset_res("evaluate", "threads")
    resources:
        mem_mb=dataset_res("evaluate", "mem_mb"),
        runtime=dataset_res("evaluate", "runtime"),
        gpu=0,  # averages score matrices: no GPU
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/ensemble/{{dataset}}/{{ens}}/seed{{seed}}_{{split}}.log",
    benchmark:
        benchmark_file("ensemble", "{dataset}/{ens}/seed{seed}_{split}")
    shell:
        logged("{params.numerics}python -m methods.ensemble --dataset-config {input.cfg} --split {wildcards.split} "
               "--members {params.members} --out {output} ")



# One view-evaluation rule per dataset and experiment whose rows declare evaluation views (set
# models, methods/model_kinds/element_views.py): a job encodes the run's test split once and scores
# it once per view, writing every view's eval_<split>@<view>.json and sims_<split>@<view>.npy.
for _name in HARNESS["datasets"]:
    for _exp, _views in PLAN.experiment_views(_name).items():

        rule:
            name:
                f"evaluate_views_{_name}_{_exp.replace('-', '_')}"
            input:
                unpack(lambda w, name=_name, exp=_exp: INPUTS.views(name, exp, w.seed, w.split)),
            output:
                [eval_file(LAYOUT.run_dir(_name, _exp, "{seed}"), "{split}", v) for v in _views],
                [sims_file(LAYOUT.run_dir(_name, _exp, "{seed}"), "{split}", v) for v in _views],
            params:
                numerics=numerics_env(_name, dataset_resource(_name, "evaluate", "threads")),
                features=lambda w, name=_name, exp=_exp: PLAN.image_feature_dir(name, exp),
                run_dir=lambda w, name=_name, exp=_exp: PLAN.run_dir(name, exp, w.seed),
                views=",".join(_views),
                device=DEVICE,
                block_elements=BLOCK_ELEMENTS,
            threads: dataset_resource(_name, "evaluate", "threads")
            resources:
                **resources_of(_name, "evaluate"),
            conda:
                CONDA_ENV
            log:
                f"{R}/logs/evaluate_views/{_name}/{_exp}/seed{{seed}}_{{split}}.log",
            benchmark:
                benchmark_file(f"evaluate_views_{_name}_{_exp.replace('-', '_')}", f"{_name}/{_exp}/seed{{seed}}_{{split}}")
            shell:
                logged("{params.numerics}python -m methods.evaluate --dataset-config {input.cfg} --run-dir {params.run_dir} "
                       "--split {wildcards.split} --views {params.views} --features-dir {params.features} "
                       "--vocab {input.vocab} --device {params.device} --threads {threads} "
                       "--block-elements {params.block_elements} ")

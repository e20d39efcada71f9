# GPUs of the pre-training jobs: one rule for every dataset a backbone pre-trains on, so the most
# any of them asks for (the synthetic datasets, of portable numerics, run on the CPU: none)
PRETRAIN_GPUS = max([resources_of(bb["pretrain"]["dataset"], "train")["gpu"] for bb in HARNESS["backbones"].values()
                     if "pretrain" in bb and bb["pretrain"]["dataset"] in HARNESS["datasets"]], default=0)


rule pretrain_backbone:
    """Backbone pre-trained on a synthetic training split (stands in for ImageNet weights)."""
    input:
        unpack(lambda w: INPUTS.data(w.dataset)),
        cfg=dataset_json,
    output:
        LAYOUT.backbone_weights("{dataset}", "{backbone}"),
    params:
        # the rule's threads, not a dataset's train.threads (set for its small training jobs): the
        # portable numerics of the pre-trained weights depend on the count
        numerics=numerics_env_of(lambda d: res("train", "threads")),
        device=DEVICE,
    threads: res("train", "threads")
    resources:
        mem_mb=dataset_res("train", "mem_mb"),
        runtime=dataset_res("train", "runtime"),
        gpu=PRETRAIN_GPUS,
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/pretrain/{{dataset}}/{{backbone}}.log",
    benchmark:
        benchmark_file("pretrain_backbone", "{dataset}/{backbone}")
    shell:
        logged("{params.numerics}python -m methods.features.pretrain --dataset-config {input.cfg} --backbone {wildcards.backbone} "
               "--out {output} --device {params.device} --threads {threads} ")


# One feature rule per dataset: which grid maps are cached is a per-dataset setting.


for _name, _ds in HARNESS["datasets"].items():

    rule:
        name:
            f"features_{_name}"
        input:
            unpack(lambda w, name=_name: INPUTS.data(name)),
            cfg=LAYOUT.dataset_config(_name),
            weights=lambda w: INPUTS.backbone_weights(w.backbone),
        output:
            pooled=f"{LAYOUT.features_dir(_name, '{backbone}')}/{{split}}_pooled.npy",
            **{
                layer: f"{LAYOUT.features_dir(_name, '{backbone}')}/{{split}}_{layer}.npy"
                for layer in _ds["features"]["grid_layers"]
            },
        params:
            numerics=numerics_env(_name, dataset_resource(_name, "features", "threads")),
            out_dir=lambda w, name=_name: LAYOUT.features_dir(name, w.backbone),
            device=DEVICE,
        threads: dataset_resource(_name, "features", "threads")
        resources:
            **resources_of(_name, "features"),
        conda:
            CONDA_ENV
        log:
            f"{R}/logs/features/{_name}/{{backbone}}_{{split}}.log",
        benchmark:
            benchmark_file(f"features_{_name}", f"{_name}/{{backbone}}_{{split}}")
        shell:
            logged("{params.numerics}python -m methods.features.extract --dataset-config {input.cfg} --backbone {wildcards.backbone} "
                   "--split {wildcards.split} --out-dir {params.out_dir} "
                   "--device {params.device} --threads {threads} ")


rule region_features:
    """RoIAlign region features of a synthetic split, in the BUTD precomputed layout."""
    input:
        unpack(lambda w: INPUTS.data(w.dataset)),
        cfg=dataset_json,
        grid=lambda w: INPUTS.region_grid(w.dataset, w.split),
    output:
        ims=f"{PRECOMP}/{{split}}_ims.npy",
        caps=f"{PRECOMP}/{{split}}_caps.txt",
        ids=f"{PRECOMP}/{{split}}_ids.txt",
        boxes=f"{PRECOMP}/{{split}}_boxes.npy",
    wildcard_constraints:
        dataset="|".join(SYNTHETIC) or "no-synthetic-dataset",
    params:
        numerics=numerics_env_of(lambda d: dataset_resource(d, "regions", "threads")),
        out_dir=lambda w: LAYOUT.precomp_dir(w.dataset),
    threads: dataset_res("regions", "threads")
    resources:
        **wildcard_resources("regions"),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/regions/{{dataset}}_{{split}}.log",
    benchmark:
        benchmark_file("region_features", "{dataset}_{split}")
    shell:
        logged("{params.numerics}python -m methods.features.regions --dataset-config {input.cfg} --split {wildcards.split} "
               "--grid {input.grid} --out-dir {params.out_dir} ")


rule pretrain_text_encoder:
    """A tiny BERT masked-language-modelled on a synthetic training split's captions (stands in
    for bert-base-uncased): a folder laid out as transformers saves one."""
    input:
        unpack(lambda w: INPUTS.data(w.dataset)),
        cfg=dataset_json,
    output:
        directory(LAYOUT.text_encoder_dir("{dataset}", "{encoder}")),
    params:
        numerics=numerics_env_of(lambda d: dataset_resource(d, "train", "threads")),
        device=DEVICE,
    threads: dataset_res("train", "threads")
    resources:
        mem_mb=dataset_res("train", "mem_mb"),
        runtime=dataset_res("train", "runtime"),
        gpu=PRETRAIN_GPUS,
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/pretrain_text_encoder/{{dataset}}/{{encoder}}.log",
    benchmark:
        benchmark_file("pretrain_text_encoder", "{dataset}/{encoder}")
    shell:
        logged("{params.numerics}python -m methods.features.pretrain_bert --dataset-config {input.cfg} "
               "--encoder {wildcards.encoder} --out {output} --device {params.device} --threads {threads} ")

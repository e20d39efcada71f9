rule dataset_config:
    """What the data, feature and training jobs of one dataset need, resolved from config."""
    output:
        DATASET_JSON,
    params:
        payload=lambda w: json.dumps(dataset_payload(HARNESS, w.dataset).to_json()),
    localrule: True
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/dataset_config/{{dataset}}.log",
    shell:
        logged("python -m methods.io --out {output} --json {params.payload:q} ")


rule generate_synthetic:
    """The built-in synthetic dataset, in the Karpathy layout (same seed, same bytes), with every
    caption's true images (extended positives) and the split statistics."""
    input:
        dataset_json,
    output:
        karpathy=f"{DATA}/dataset_{{dataset}}.json",
        images=directory(f"{DATA}/images"),
        positives=f"{DATA}/positives_{{dataset}}.json",
        stats=f"{DATA}/stats.json",
    wildcard_constraints:
        dataset="|".join(SYNTHETIC) or "no-synthetic-dataset",
    params:
        numerics=numerics_env_of(lambda d: dataset_resource(d, "generate", "threads")),
        out_dir=lambda w: LAYOUT.data_dir(w.dataset),
    threads: dataset_res("generate", "threads")
    resources:
        **wildcard_resources("generate"),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/generate/{{dataset}}.log",
    benchmark:
        benchmark_file("generate_synthetic", "{dataset}")
    shell:
        logged("{params.numerics}python -m methods.data.synthetic --dataset-config {input} --out {params.out_dir} ")


rule vocab:
    """Vocabulary from the training captions only (or the configured one, checked against them),
    with every split's captions tokenised by the dataset's tokenizer."""
    input:
        unpack(lambda w: INPUTS.data(w.dataset)),
        cfg=dataset_json,
        configured=lambda w: INPUTS.configured_vocabulary(w.dataset),
        punkt=lambda w: INPUTS.tokenizer(w.dataset),
    output:
        VOCAB,
    params:
        numerics=numerics_env_of(lambda d: dataset_resource(d, "vocab", "threads")),
    threads: dataset_res("vocab", "threads")
    resources:
        **wildcard_resources("vocab"),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/vocab/{{dataset}}.log",
    benchmark:
        benchmark_file("vocab", "{dataset}")
    shell:
        logged("{params.numerics}python -m methods.data.vocab --dataset-config {input.cfg} --out {output} ")


rule instance_categories:
    """The COCO object categories annotated in each image the plausible-match protocols (PMRP) test,
    from the instance annotation files (read once here: evaluations read this small file)."""
    input:
        unpack(lambda w: INPUTS.instance_annotations(w.dataset)),
        cfg=dataset_json,
    output:
        LAYOUT.instance_categories("{dataset}"),
    params:
        splits=lambda w: " ".join(INPUTS.plausible_match_splits(w.dataset)),
    threads: dataset_res("vocab", "threads")
    resources:
        **wildcard_resources("vocab"),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/instance_categories/{{dataset}}.log",
    benchmark:
        benchmark_file("instance_categories", "{dataset}")
    shell:
        logged("python -m methods.data.instance_categories --dataset-config {input.cfg} --splits {params.splits} "
               "--out {output} ")


# Multi-label datasets (kind multilabel): imported from a source folder in the label-wise code's
# layout (methods/data/multilabel.py), checked when the DAG is built; a generated one's source
# folder is written from a synthetic dataset's outputs (methods/data/synthetic_tags.py).

rule synthetic_tags_source:
    """A tag dataset's source folder in the label-wise layout, from a synthetic dataset's regions and scenes."""
    input:
        unpack(lambda w: INPUTS.synthetic_tags_from(w.dataset)),
        cfg=dataset_json,
    output:
        directory(SOURCE),
    wildcard_constraints:
        dataset="|".join(GENERATED_MULTILABEL) or "no-generated-multilabel-dataset",
    params:
        numerics=numerics_env_of(lambda d: dataset_resource(d, "generate", "threads")),
        from_precomp=lambda w: LAYOUT.precomp_dir(HARNESS["datasets"][w.dataset]["generated_from"]["dataset"]),
        image_size=lambda w: HARNESS["datasets"][HARNESS["datasets"][w.dataset]["generated_from"]["dataset"]]["generator"]["image_size"],
        results_dir=lambda w: R,   # the folder inside which its links are relative
    threads: dataset_res("generate", "threads")
    resources:
        **wildcard_resources("generate"),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/synthetic_tags_source/{{dataset}}.log",
    benchmark:
        benchmark_file("synthetic_tags_source", "{dataset}")
    shell:
        logged("{params.numerics}python -m methods.data.synthetic_tags --dataset-config {input.cfg} --from-json {input.json} "
               "--from-precomp {params.from_precomp} --image-size {params.image_size} --out {output} --results-dir {params.results_dir} ")


rule import_multilabel:
    """A multi-label dataset's Karpathy-style file (texts and labels of every split) from its source folder."""
    input:
        source=lambda w: INPUTS.multilabel_source(w.dataset),
        cfg=dataset_json,
    output:
        f"{DATA}/dataset_{{dataset}}.json",
    wildcard_constraints:
        dataset="|".join(MULTILABEL) or "no-multilabel-dataset",
    params:
        numerics=numerics_env_of(lambda d: dataset_resource(d, "generate", "threads")),
    threads: dataset_res("generate", "threads")
    resources:
        **wildcard_resources("generate"),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/import_multilabel/{{dataset}}.log",
    benchmark:
        benchmark_file("import_multilabel", "{dataset}")
    shell:
        logged("{params.numerics}python -m methods.data.multilabel --dataset-config {input.cfg} --json {output} ")


rule multilabel_precomp:
    """One split of a multi-label dataset in the precomputed-regions layout: features linked, texts written."""
    input:
        source=lambda w: INPUTS.multilabel_source(w.dataset, w.split),
        cfg=dataset_json,
    output:
        ims=f"{PRECOMP}/{{split}}_ims.npy",
        caps=f"{PRECOMP}/{{split}}_caps.txt",
    wildcard_constraints:
        dataset="|".join(MULTILABEL) or "no-multilabel-dataset",
    params:
        numerics=numerics_env_of(lambda d: dataset_resource(d, "regions", "threads")),
        out_dir=lambda w: LAYOUT.precomp_dir(w.dataset),
        results_dir=lambda w: R,   # the folder inside which its links are relative
    threads: dataset_res("regions", "threads")
    resources:
        **wildcard_resources("regions"),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/multilabel_precomp/{{dataset}}_{{split}}.log",
    benchmark:
        benchmark_file("multilabel_precomp", "{dataset}_{split}")
    shell:
        logged("{params.numerics}python -m methods.data.multilabel --dataset-config {input.cfg} --split {wildcards.split} "
               "--out-dir {params.out_dir} --results-dir {params.results_dir} ")


rule multilabel_region_classes:
    """The detector class of every region of a split (argmax of the source's class scores)."""
    input:
        source=lambda w: INPUTS.multilabel_classes(w.dataset, w.split),
        cfg=dataset_json,
    output:
        f"{PRECOMP}/{{split}}_region_classes.npy",
    wildcard_constraints:
        dataset="|".join(MULTILABEL) or "no-multilabel-dataset",
    params:
        numerics=numerics_env_of(lambda d: dataset_resource(d, "regions", "threads")),
    threads: dataset_res("regions", "threads")
    resources:
        **wildcard_resources("regions"),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/multilabel_region_classes/{{dataset}}_{{split}}.log",
    benchmark:
        benchmark_file("multilabel_region_classes", "{dataset}_{split}")
    shell:
        logged("{params.numerics}python -m methods.data.multilabel --dataset-config {input.cfg} --split {wildcards.split} "
               "--region-classes {output} ")


rule wordpiece_captions:
    """Every split's captions tokenised for one BERT text encoder (its vocab.txt), once per
    dataset and encoder: training and evaluation read the ids (methods/data/wordpiece.py)."""
    input:
        unpack(lambda w: INPUTS.data(w.dataset)),
        cfg=dataset_json,
        encoder=lambda w: INPUTS.text_encoder(w.encoder),
    output:
        LAYOUT.wordpiece_captions("{dataset}", "{encoder}"),
    params:
        numerics=numerics_env_of(lambda d: dataset_resource(d, "vocab", "threads")),
        folder=lambda w: HARNESS["text_encoders"][w.encoder]["path"],
    threads: dataset_res("vocab", "threads")
    resources:
        **wildcard_resources("vocab"),
    conda:
        CONDA_ENV
    log:
        f"{R}/logs/wordpiece_captions/{{dataset}}/{{encoder}}.log",
    benchmark:
        benchmark_file("wordpiece_captions", "{dataset}/{encoder}")
    shell:
        logged("{params.numerics}python -m methods.data.wordpiece_captions --dataset-config {input.cfg} "
               "--encoder {wildcards.encoder} --folder {params.folder} --out {output} ")

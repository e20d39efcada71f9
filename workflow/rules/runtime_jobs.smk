# The jobs behind a dataset's runtime table (runtime.smk): every job of its default targets,
# with the benchmark file it writes (BENCHMARKS, common.smk).
from pathlib import Path

# datasets whose data the DAG makes: the synthetic one and those generated from it (synthetic tags)
RUNTIME_TABLES = [f"tables/runtime_{name}.{ext}" for name in HARNESS["default_datasets"] for ext in ("md", "html")
                  if data_kind(HARNESS["datasets"][name]) == "synthetic"]
_RUNTIME_JOBS = {}


def runtime_jobs(dataset):
    """Every job behind the dataset's default targets (its tables, figures, claims and reports, and for a synthetic
    dataset the region features of every split), but the local config writers, as
    {benchmark file: {"rule": its rule, "papers": keys of the papers whose rows, tables or figures
    need it}}. The dataset's own jobs (data, vocabulary, backbone pre-training, features) name no
    paper: they are shared."""
    if dataset in _RUNTIME_JOBS:
        return _RUNTIME_JOBS[dataset]
    PLAN.check_target_dataset(dataset, f"tables/runtime_{dataset}")
    ds = HARNESS["datasets"][dataset]
    jobs = {}

    def add(rule_name, papers=(), **wildcards):
        job = jobs.setdefault(BENCHMARKS[rule_name].format(**wildcards), {"rule": rule_name, "papers": set()})
        job["papers"].update(papers)

    def add_data(name):
        if HARNESS["datasets"][name]["kind"] == "synthetic":
            add("generate_synthetic", dataset=name)
        if HARNESS["datasets"][name]["kind"] == "multilabel":   # the import (and for synthtags its source);
            if "generated_from" in HARNESS["datasets"][name]:    # the synthetic regions it links to are the
                add("synthetic_tags_source", dataset=name)       # synthetic dataset's own default target
            add("import_multilabel", dataset=name)

    def add_weights(backbone):
        pretrain = HARNESS["backbones"][backbone].get("pretrain")
        if pretrain:
            add_data(pretrain["dataset"])
            add("pretrain_backbone", dataset=pretrain["dataset"], backbone=backbone)

    def add_features(backbone, split):
        add_weights(backbone)
        add(f"features_{dataset}", backbone=backbone, split=split)

    def add_regions(split):  # synthetic RoIAlign regions, pooled from a cached grid map
        add("region_features", dataset=dataset, split=split)
        add_features(ds["features"]["region"]["backbone"], split)

    def add_image_input(exp_id, split):
        """The jobs that write the files of one split that an experiment's jobs read."""
        for path in image_feature_files(dataset, exp_id, split):
            parent = Path(path).parent
            for backbone in HARNESS["backbones"]:
                if parent == Path(features_dir(dataset, backbone)):
                    add_features(backbone, split)
            if ds["kind"] == "synthetic" and parent == Path(LAYOUT.precomp_dir(dataset)):
                add_regions(split)
            if ds["kind"] == "multilabel":   # the imported features (linked) and region classes
                add("multilabel_region_classes" if path.endswith("_region_classes.npy") else "multilabel_precomp",
                    dataset=dataset, split=split)

    add_data(dataset)
    add("vocab", dataset=dataset)
    splits = test_splits(HARNESS, dataset)
    tables = [tbl for (_, d), tbl in PLAN.tables.items() if d == dataset]
    for tbl in tables:
        for row in tbl.rows:
            for seed in row.seeds:
                for i, exp_id in enumerate(row.members):
                    run_seed = row.member_seed(seed, i)
                    add(f"train_{dataset}", {row.paper}, exp=exp_id, seed=run_seed)  # training and test evaluation
                for member in row.released:   # import and test evaluation of an authors' checkpoint
                    add(f"evaluate_released_{dataset}", {row.paper}, exp=member.exp, checkpoint=member.checkpoint)
                if row.ensemble_id is not None:
                    for split in splits:
                        add("ensemble", {row.paper}, dataset=dataset, ens=row.ensemble_id, seed=seed, split=split)
                if row.view is not None:   # one job per run evaluates all of its views
                    for split in splits:
                        add(f"evaluate_views_{dataset}_{row.members[0].replace('-', '_')}", {row.paper},
                            seed=seed, split=split)
    for tbl in tables:
        for row in tbl.rows:
            if row.runs_models:
                add("aggregate_row", {row.paper}, dataset=dataset, table=tbl.name, row=row.id)
    for tbl in tables:
        add("table", {row.paper for row in tbl.rows}, table=tbl.name, dataset=dataset)
    if tables:
        add("figure_reproduced_vs_reported", {row.paper for tbl in tables for row in tbl.rows}, dataset=dataset)
    for (name, d), fig in PLAN.figures.items():
        if d == dataset:
            add("paper_figure", {fig.paper}, figure=name, dataset=dataset)
            needs = FIGURE_KINDS.get(fig.kind).needs
            if "trained_run" in needs or "trained_runs" in needs:
                split = PLAN.figure_spec(name, dataset).split
                for row_id in [fig.row] if fig.row else fig.rows:
                    add_image_input(PLAN.row(fig.table, dataset, row_id).members[0], split)
    for paper in PLAN.papers:   # reproduction reports, and the claims of the papers that state some here
        if dataset in PLAN.paper_datasets(paper):
            add("reproduction_report", {paper}, paper=paper, dataset=dataset)
            add("paper_page", {paper}, paper=paper, dataset=dataset)
        if PLAN.claims.get((paper, dataset)):
            add("claims", {paper}, paper=paper, dataset=dataset)
            add("claims_figure", {paper}, paper=paper, dataset=dataset)
    if tables:   # the summary of every paper's rows and claims
        add("summary", dataset=dataset)
    for member in {m for tbl in tables for row in tbl.rows for m in row.released}:
        if PLAN.experiment(dataset, member.exp).backbone is None:   # what the released evaluation reads
            for split in splits:
                add_image_input(member.exp, split)
    for exp_id in dict.fromkeys(exp_id for tbl in tables for row in tbl.rows for exp_id in row.members):
        exp = PLAN.experiment(dataset, exp_id)
        if exp.backbone is not None:
            add_weights(exp.backbone)
        for split in ("train", "dev"):  # what train reads
            add_image_input(exp_id, split)
        if exp.may_evaluate_on_cached_features or any(r.view for t in tables for r in t.rows if exp_id in r.members):
            # what the test evaluation reads (and evaluation views)
            for split in splits:
                add_image_input(exp_id, split)
    if ds["kind"] == "synthetic" and "region" in ds["features"] and dataset in HARNESS["default_datasets"]:
        for split in ds["splits"]:  # SYNTHETIC_PRECOMP, a default target of its own
            add_regions(split)
    _RUNTIME_JOBS[dataset] = jobs
    return jobs


def runtime_spec(dataset):
    """What methods.report.runtime reads (a RuntimeSpec): the jobs (rule, benchmark file, papers), the
    rules in pipeline order and the papers ([key, name] pairs in config order: JSON objects are written sorted)."""
    jobs = [RuntimeJobSpec(rule=job["rule"], file=path, papers=sorted(job["papers"]))
            for path, job in runtime_jobs(dataset).items()]
    used = {p for job in jobs for p in job.papers}
    return RuntimeSpec(dataset=dataset, rules=[name for name in BENCHMARKS if any(j.rule == name for j in jobs)],
                       papers=[[key, title] for key, title in PLAN.papers.items() if key in used], jobs=jobs)

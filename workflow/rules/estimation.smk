# Attention-level experiments on one captured prefill (Figures 2-6, 9a, Table 9) and automatic (K, L).
E = P["estimation"]
ESTIMATION_DIR = f"{RES}/estimation"
CAPTURE = f"{ESTIMATION_DIR}/captures/capture_{E['length']}.pt"
TUNE_KL = f"{ESTIMATION_DIR}/tune_kl_{tune_kl_tag(E['target_cost'])}"
# what the report reads: the experiments' CSVs and tune-kl's result (its JSON and the candidates it weighed)
ESTIMATION_FILES = [f"{ESTIMATION_DIR}/{name}" for name in experiment_files()] + [
    f"{TUNE_KL}.json",
    f"{TUNE_KL}_candidates.csv",
]


rule estimation_capture:
    output:
        CAPTURE,
    log:
        f"{RES}/logs/estimation_capture.log",
    params:
        magicpig=MAGICPIG,
        args=capture_args(P, E["length"], SEED),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 128000),
        runtime=sized(P, 60, 240),
        gpu=GPUS,
    shell:
        "{params.magicpig} estimate capture {params.args} --out {output} > {log} 2>&1"


rule estimation_experiments:
    input:
        CAPTURE,
    output:
        [f"{ESTIMATION_DIR}/{name}" for name in experiment_files()],
    log:
        f"{RES}/logs/estimation_experiments.log",
    params:
        magicpig=MAGICPIG,
        out_dir=out_dir,
        seed=SEED,
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 64000),
        runtime=sized(P, 120, 720),
    shell:
        "{params.magicpig} estimate all --capture {input} --out-dir {params.out_dir} --seed {params.seed} "
        "> {log} 2>&1"


# tune-kl writes its result to <out-dir>/tune_kl_<target>.json itself; its stdout goes to the log.
rule tune_kl:
    input:
        CAPTURE,
    output:
        json=f"{TUNE_KL}.json",
        candidates=f"{TUNE_KL}_candidates.csv",
    log:
        f"{RES}/logs/tune_kl.log",
    params:
        magicpig=MAGICPIG,
        model=P["model"],
        target_cost=E["target_cost"],
        out_dir=out_dir,
        seed=SEED,
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 64000),
        runtime=sized(P, 60, 240),
    shell:
        "{params.magicpig} tune-kl --model {params.model:q} --capture {input} --target-cost {params.target_cost} "
        "--out-dir {params.out_dir} --seed {params.seed} > {log} 2>&1"

# Attention-level experiments on captured prefills (Figures 2-6, 9a, 10, 11, Table 9) and automatic (K, L).
# `estimation.prompts` prompts are captured (each its own needle and haystack text); every experiment runs on
# all of them (a `prompt` column in its tables), tune-kl on the first. Keys across many short inputs (Fig. 5a/b)
# come from their own job (`magicpig estimate inputs`).
E = P["estimation"]
ESTIMATION_DIR = f"{RES}/estimation"
PROMPTS = list(range(int(E["prompts"])))
CAPTURE_PATTERN = f"{ESTIMATION_DIR}/{CAPTURE.format(length=E['length'], prompt='{prompt}')}"
CAPTURES = [CAPTURE_PATTERN.format(prompt=i) for i in PROMPTS]
TUNE_KL_FILES = [f"{ESTIMATION_DIR}/{name}" for name in tune_kl_files(E["target_cost"])]
ESTIMATION_INPUTS = [f"{ESTIMATION_DIR}/{name}" for name in inputs_files()]
# what the report reads: the experiments' CSVs, the short-input tables and tune-kl's result (its JSON and the
# candidates it weighed)
ESTIMATION_FILES = [f"{ESTIMATION_DIR}/{name}" for name in experiment_files()] + ESTIMATION_INPUTS + TUNE_KL_FILES


rule estimation_capture:
    output:
        CAPTURE_PATTERN,
    log:
        f"{RES}/logs/estimation_capture_p{{prompt}}.log",
    benchmark:
        f"{RES}/benchmarks/estimation_capture/estimation_capture_p{{prompt}}.tsv",
    params:
        magicpig=MAGICPIG,
        args=lambda w: capture_args(P, E["length"], SEED, int(w.prompt)),
    wildcard_constraints:
        prompt="[0-9]+",
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 128000),
        runtime=sized(P, 60, 240),
        gpu=GPUS,
    shell:
        "{params.magicpig} estimate capture {params.args} --out {output:q} > {log:q} 2>&1"


rule estimation_inputs:
    output:
        ESTIMATION_INPUTS,
    log:
        f"{RES}/logs/estimation_inputs.log",
    benchmark:
        f"{RES}/benchmarks/estimation_inputs/estimation_inputs.tsv",
    params:
        magicpig=MAGICPIG,
        args=inputs_args(P, E, SEED),
        out_dir=out_dir,
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 64000),
        runtime=sized(P, 60, 240),
        gpu=GPUS,
    shell:
        "{params.magicpig} estimate inputs {params.args} --out-dir {params.out_dir:q} > {log:q} 2>&1"


rule estimation_experiments:
    input:
        CAPTURES,
    output:
        [f"{ESTIMATION_DIR}/{name}" for name in experiment_files()],
    log:
        f"{RES}/logs/estimation_experiments.log",
    benchmark:
        f"{RES}/benchmarks/estimation_experiments/estimation_experiments.tsv",
    params:
        magicpig=MAGICPIG,
        out_dir=out_dir,
        seed=SEED,
        captures=lambda w, input: " ".join(f"--capture {shlex.quote(c)}" for c in input),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 64000),
        runtime=sized(P, 120, 720),
    shell:
        "{params.magicpig} estimate all {params.captures} --out-dir {params.out_dir:q} --seed {params.seed:q} "
        "> {log:q} 2>&1"


# tune-kl writes its result to <out-dir>/tune_kl_<target>.json itself; its stdout goes to the log. It reads the
# first prompt's capture.
rule tune_kl:
    input:
        CAPTURES[0],
    output:
        json=TUNE_KL_FILES[0],
        candidates=TUNE_KL_FILES[1],
    log:
        f"{RES}/logs/tune_kl.log",
    benchmark:
        f"{RES}/benchmarks/tune_kl/tune_kl.tsv",
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
        "{params.magicpig} tune-kl --model={params.model:q} --capture {input:q} --target-cost {params.target_cost:q} "
        "--out-dir {params.out_dir:q} --seed {params.seed:q} > {log:q} 2>&1"

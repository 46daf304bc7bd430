# Ablations: centering on/off (Figure 9a), the (K, L) grid, evaluation setup A vs B. Each runs `magicpig eval`
# on the ablation tasks (at `ablations.length`, default the first RULER length) into its own folder; its outputs
# are those metrics.json.
A = P["ablations"]
ABLATION_LENGTH = A.get("length", P["ruler"]["lengths"][0])
ABLATION_SAMPLES = A.get("samples", P["ruler"]["samples"])
# the centering claim's exact bound needs more samples than the other ablations (claims: no_centering_collapse)
CENTERING_SAMPLES = A.get("centering_samples", ABLATION_SAMPLES)
ABLATION_TASKS = [f"ruler/{t}" for t in A["tasks"]]
ABLATIONS = f"{RES}/ablations"
# setup A vs B: dense and the first centering method
SETUP_METHODS = ["dense", A["centering_methods"][0]]
ABLATION_METRICS = (
    metrics_files(f"{ABLATIONS}/centering", ABLATION_TASKS, [ABLATION_LENGTH], A["centering_methods"])
    + metrics_files(f"{ABLATIONS}/kl_grid", ABLATION_TASKS, [ABLATION_LENGTH], A["kl_grid"])
    + [f for s in A["setups"]
       for f in metrics_files(f"{ABLATIONS}/setup_{s}", ABLATION_TASKS, [ABLATION_LENGTH], SETUP_METHODS)]
)


rule ablation_centering:
    input:
        rules.build_cpu_module.output,
    output:
        metrics_files(f"{ABLATIONS}/centering", ABLATION_TASKS, [ABLATION_LENGTH], A["centering_methods"]),
    log:
        f"{RES}/logs/ablation_centering.log",
    params:
        magicpig=MAGICPIG,
        args=eval_args(P, SEED, ABLATION_TASKS, [ABLATION_LENGTH], A["centering_methods"], CENTERING_SAMPLES),
        out=lambda w, output: eval_root(output[0], ABLATION_TASKS[0]),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 128000),
        runtime=sized(P, 240, 1440),
        gpu=GPUS,
    shell:
        "{params.magicpig} eval {params.args} --out {params.out} > {log} 2>&1"


rule ablation_kl_grid:
    input:
        rules.build_cpu_module.output,
    output:
        metrics_files(f"{ABLATIONS}/kl_grid", ABLATION_TASKS, [ABLATION_LENGTH], A["kl_grid"]),
    log:
        f"{RES}/logs/ablation_kl_grid.log",
    params:
        magicpig=MAGICPIG,
        args=eval_args(P, SEED, ABLATION_TASKS, [ABLATION_LENGTH], A["kl_grid"], ABLATION_SAMPLES),
        out=lambda w, output: eval_root(output[0], ABLATION_TASKS[0]),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 128000),
        runtime=sized(P, 240, 1440),
        gpu=GPUS,
    shell:
        "{params.magicpig} eval {params.args} --out {params.out} > {log} 2>&1"


rule ablation_setup:
    input:
        rules.build_cpu_module.output,
    output:
        metrics_files(f"{ABLATIONS}/setup_{{setup}}", ABLATION_TASKS, [ABLATION_LENGTH], SETUP_METHODS),
    log:
        f"{RES}/logs/ablation_setup_{{setup}}.log",
    params:
        magicpig=MAGICPIG,
        args=lambda w: eval_args(P, SEED, ABLATION_TASKS, [ABLATION_LENGTH], SETUP_METHODS, ABLATION_SAMPLES,
                                 setup=w.setup),
        out=lambda w, output: eval_root(output[0], ABLATION_TASKS[0]),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 128000),
        runtime=sized(P, 240, 1440),
        gpu=GPUS,
    shell:
        "{params.magicpig} eval {params.args} --out {params.out} > {log} 2>&1"

# Budget / cost sweeps on RULER (Figures 1, 6c, 9a, 9b/c): TopK and oracle sampling at several budgets, MagicPIG
# with and without centering at several L, and several (K, L) settings. One job per task: `magicpig eval`
# prefills each sample once and decodes every method of the sweep from it, so a sweep costs decode time only.
# Its outputs are the metrics.json of each method (as in accuracy.smk).
S = P.get("sweeps") or {}
SWEEP_TASKS = S.get("tasks", [])
SWEEP_LENGTH = S.get("length", P["ruler"]["lengths"][0])
SWEEP_SAMPLES = S.get("samples", P["ruler"]["samples"])
SWEEP_METHODS = sweep_methods(S)
SWEEPS = f"{RES}/sweeps"
SWEEP_METRICS = metrics_files(SWEEPS, [f"ruler/{t}" for t in SWEEP_TASKS], [SWEEP_LENGTH], SWEEP_METHODS)


rule sweep_ruler:
    input:
        rules.build_cpu_module.output,
    output:
        metrics_files(SWEEPS, ["ruler/{task}"], [SWEEP_LENGTH], SWEEP_METHODS),
    log:
        f"{RES}/logs/sweep_ruler_{{task}}.log",
    params:
        magicpig=MAGICPIG,
        args=lambda w: eval_args(P, SEED, [f"ruler/{w.task}"], [SWEEP_LENGTH], SWEEP_METHODS, SWEEP_SAMPLES),
        out=lambda w, output: eval_root(output[0], f"ruler/{w.task}"),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 128000),
        runtime=sized(P, 240, 2880),
        gpu=GPUS,
    shell:
        "{params.magicpig} eval {params.args} --out {params.out} > {log} 2>&1"

# Accuracy: RULER (Table 3 / Figure 1), LongBench (Table 2), GSM8K-CoT (Table 1).
# One job per (task, length) prefills each sample once and decodes every method from it; `magicpig eval`
# resumes, so an interrupted job redoes only missing samples. A job's outputs are the metrics.json of each of
# its methods (the predictions.jsonl beside them are what it resumes from, so they are not outputs: Snakemake
# would delete them before a rerun).
# Each benchmark runs its own method list (the settings of its paper table).
RULER_TASKS = P["ruler"]["tasks"] if runs(P["ruler"]["samples"]) else []
LONGBENCH_TASKS = P["longbench"]["tasks"] if runs(P["longbench"]["samples"]) else []
GSM8K_TASKS = ["gsm8k"] if runs(P["gsm8k"]["samples"]) else []
LONGBENCH_LENGTH = P["longbench"].get("max_length", 7680)
GSM8K_LENGTH = P["gsm8k"].get("max_length", 4096)
ACCURACY = f"{RES}/accuracy"
ACCURACY_METRICS = (
    metrics_files(ACCURACY, [f"ruler/{t}" for t in RULER_TASKS], P["ruler"]["lengths"], P["ruler"]["methods"])
    + metrics_files(ACCURACY, [f"longbench/{t}" for t in LONGBENCH_TASKS], [LONGBENCH_LENGTH],
                    P["longbench"]["methods"])
    + metrics_files(ACCURACY, GSM8K_TASKS, [GSM8K_LENGTH], P["gsm8k"]["methods"])
)


rule eval_ruler:
    input:
        rules.build_cpu_module.output,
        data=lambda w: data_files([f"ruler/{w.task}"]),
    output:
        metrics_files(ACCURACY, ["ruler/{task}"], ["{length}"], P["ruler"]["methods"]),
    log:
        f"{RES}/logs/eval_ruler_{{task}}_{{length}}.log",
    params:
        magicpig=MAGICPIG,
        args=lambda w: eval_args(P, SEED, [f"ruler/{w.task}"], [w.length], P["ruler"]["methods"],
                                 P["ruler"]["samples"]),
        out=lambda w, output: eval_root(output[0], f"ruler/{w.task}"),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 128000),
        runtime=sized(P, 240, 1440),
        gpu=GPUS,
    shell:
        "{params.magicpig} eval {params.args} --out {params.out} > {log} 2>&1"


rule eval_longbench:
    input:
        rules.build_cpu_module.output,
        data=lambda w: data_files([f"longbench/{w.task}"]),
    output:
        metrics_files(ACCURACY, ["longbench/{task}"], [LONGBENCH_LENGTH], P["longbench"]["methods"]),
    log:
        f"{RES}/logs/eval_longbench_{{task}}.log",
    params:
        magicpig=MAGICPIG,
        args=lambda w: eval_args(P, SEED, [f"longbench/{w.task}"], [LONGBENCH_LENGTH], P["longbench"]["methods"],
                                 P["longbench"]["samples"]),
        out=lambda w, output: eval_root(output[0], f"longbench/{w.task}"),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 128000),
        runtime=sized(P, 240, 2880),
        gpu=GPUS,
    shell:
        "{params.magicpig} eval {params.args} --out {params.out} > {log} 2>&1"


rule eval_gsm8k:
    input:
        rules.build_cpu_module.output,
        data=data_files(["gsm8k"]),
    output:
        metrics_files(ACCURACY, ["gsm8k"], [GSM8K_LENGTH], P["gsm8k"]["methods"]),
    log:
        f"{RES}/logs/eval_gsm8k.log",
    params:
        magicpig=MAGICPIG,
        args=eval_args(P, SEED, ["gsm8k"], [GSM8K_LENGTH], P["gsm8k"]["methods"], P["gsm8k"]["samples"]),
        out=lambda w, output: eval_root(output[0], "gsm8k"),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 128000),
        runtime=sized(P, 240, 2880),
        gpu=GPUS,
    shell:
        "{params.magicpig} eval {params.args} --out {params.out} > {log} 2>&1"

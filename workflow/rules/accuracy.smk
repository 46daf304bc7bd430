# Accuracy: RULER (Tables 3-5 / Figure 1), LongBench (Table 2), GSM8K-CoT, CoQA, MMLU-CoT (Table 1), infini_igsm
# (Table 6).
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
# optional blocks (absent from a preset: not run): Table 1's CoQA / MMLU-CoT, Table 6's infini_igsm
LM_EVAL = P.get("lm_eval", {"tasks": [], "samples": 0, "methods": ["dense"]})
REASONING = P.get("reasoning", {"tasks": [], "samples": 0, "methods": ["dense"]})
LM_EVAL_TASKS = LM_EVAL["tasks"] if runs(LM_EVAL["samples"]) else []
REASONING_TASKS = REASONING["tasks"] if runs(REASONING["samples"]) else []
LM_EVAL_LENGTH = LM_EVAL.get("max_length", 4096)
REASONING_LENGTH = REASONING.get("max_length", 16384)
ACCURACY = f"{RES}/accuracy"
ACCURACY_METRICS = (
    metrics_files(ACCURACY, [f"ruler/{t}" for t in RULER_TASKS], P["ruler"]["lengths"], P["ruler"]["methods"])
    + metrics_files(ACCURACY, [f"longbench/{t}" for t in LONGBENCH_TASKS], [LONGBENCH_LENGTH],
                    P["longbench"]["methods"])
    + metrics_files(ACCURACY, GSM8K_TASKS, [GSM8K_LENGTH], P["gsm8k"]["methods"])
    + metrics_files(ACCURACY, LM_EVAL_TASKS, [LM_EVAL_LENGTH], LM_EVAL["methods"])
    + metrics_files(ACCURACY, [f"infini_igsm/{t}" for t in REASONING_TASKS], [REASONING_LENGTH], REASONING["methods"])
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


rule eval_lm_eval:
    input:
        rules.build_cpu_module.output,
    output:
        metrics_files(ACCURACY, ["{lm_task}"], [LM_EVAL_LENGTH], LM_EVAL["methods"]),
    log:
        f"{RES}/logs/eval_{{lm_task}}.log",
    wildcard_constraints:
        lm_task="coqa|mmlu_cot",
    params:
        magicpig=MAGICPIG,
        args=lambda w: eval_args(P, SEED, [w.lm_task], [LM_EVAL_LENGTH], LM_EVAL["methods"], LM_EVAL["samples"]),
        out=lambda w, output: eval_root(output[0], w.lm_task),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 128000),
        runtime=sized(P, 240, 2880),
        gpu=GPUS,
    shell:
        "{params.magicpig} eval {params.args} --out {params.out} > {log} 2>&1"


rule eval_reasoning:
    input:
        rules.build_cpu_module.output,
    output:
        metrics_files(ACCURACY, ["infini_igsm/{task}"], [REASONING_LENGTH], REASONING["methods"]),
    log:
        f"{RES}/logs/eval_infini_igsm_{{task}}.log",
    params:
        magicpig=MAGICPIG,
        args=lambda w: eval_args(P, SEED, [f"infini_igsm/{w.task}"], [REASONING_LENGTH], REASONING["methods"],
                                 REASONING["samples"]),
        out=lambda w, output: eval_root(output[0], f"infini_igsm/{w.task}"),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 8000, 128000),
        runtime=sized(P, 240, 2880),
        gpu=GPUS,
    shell:
        "{params.magicpig} eval {params.args} --out {params.out} > {log} 2>&1"

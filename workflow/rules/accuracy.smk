# Accuracy: RULER (Table 3 / Figure 1), LongBench (Table 2), GSM8K-CoT (Table 1).
# One job per (task, length) prefills each sample once and decodes every method from it; `magicpig eval`
# resumes, so an interrupted job redoes only missing samples.
# Each benchmark runs its own method list (the settings of its paper table).
RULER_TASKS = P["ruler"]["tasks"] if runs(P["ruler"]["samples"]) else []
LONGBENCH_TASKS = P["longbench"]["tasks"] if runs(P["longbench"]["samples"]) else []
GSM8K_TASKS = ["gsm8k"] if runs(P["gsm8k"]["samples"]) else []


def accuracy_outputs():
    out = [f"{RES}/accuracy/ruler/{t}/{n}.done" for t in RULER_TASKS for n in P["ruler"]["lengths"]]
    out += [f"{RES}/accuracy/longbench/{t}.done" for t in LONGBENCH_TASKS]
    out += [f"{RES}/accuracy/gsm8k.done" for _ in GSM8K_TASKS]
    return out


rule eval_ruler:
    input:
        rules.build_cpu_module.output,
    output:
        touch(f"{RES}/accuracy/ruler/{{task}}/{{length}}.done"),
    log:
        f"{RES}/logs/eval_ruler_{{task}}_{{length}}.log",
    threads: workflow.cores
    params:
        cmd=lambda w: eval_command([f"ruler/{w.task}"], [w.length], P["ruler"]["methods"], P["ruler"]["samples"],
                                   f"{RES}/accuracy"),
    shell:
        "{params.cmd} > {log} 2>&1"


rule eval_longbench:
    input:
        rules.build_cpu_module.output,
    output:
        touch(f"{RES}/accuracy/longbench/{{task}}.done"),
    log:
        f"{RES}/logs/eval_longbench_{{task}}.log",
    threads: workflow.cores
    params:
        cmd=lambda w: eval_command([f"longbench/{w.task}"], [P["longbench"].get("max_length", 7680)],
                                   P["longbench"]["methods"], P["longbench"]["samples"], f"{RES}/accuracy"),
    shell:
        "{params.cmd} > {log} 2>&1"


rule eval_gsm8k:
    input:
        rules.build_cpu_module.output,
    output:
        touch(f"{RES}/accuracy/gsm8k.done"),
    log:
        f"{RES}/logs/eval_gsm8k.log",
    threads: workflow.cores
    params:
        cmd=eval_command(["gsm8k"], [P["gsm8k"].get("max_length", 4096)], P["gsm8k"]["methods"], P["gsm8k"]["samples"],
                         f"{RES}/accuracy"),
    shell:
        "{params.cmd} > {log} 2>&1"

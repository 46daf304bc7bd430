# Attention-level experiments on one captured prefill (Figures 2-6, 9a, Table 9) and automatic (K, L).
E = P["estimation"]
CAPTURE = f"{RES}/estimation/captures/capture_{E['length']}.pt"
ESTIMATION_DIR = f"{RES}/estimation"


def estimation_outputs():
    return [f"{ESTIMATION_DIR}/experiments.done", f"{ESTIMATION_DIR}/tune_kl.json"]


rule estimation_capture:
    output:
        CAPTURE,
    log:
        f"{RES}/logs/estimation_capture.log",
    threads: workflow.cores
    shell:
        "{MAGICPIG} estimate capture --model {P[model]} --context {E[length]} --seed {SEED} "
        "--out {output} > {log} 2>&1"


rule estimation_experiments:
    input:
        CAPTURE,
    output:
        touch(f"{ESTIMATION_DIR}/experiments.done"),
    log:
        f"{RES}/logs/estimation_experiments.log",
    threads: workflow.cores
    shell:
        "{MAGICPIG} estimate all --capture {input} --out-dir {ESTIMATION_DIR} --seed {SEED} > {log} 2>&1"


rule tune_kl:
    input:
        CAPTURE,
    output:
        f"{ESTIMATION_DIR}/tune_kl.json",
    log:
        f"{RES}/logs/tune_kl.log",
    threads: workflow.cores
    shell:
        "{MAGICPIG} tune-kl --model {P[model]} --capture {input} --target-cost {E[target_cost]} --json "
        "--out-dir {ESTIMATION_DIR} --seed {SEED} "
        "> {output} 2> {log}"

# Ablations: centering on/off (Figure 9a), the (K, L) grid, evaluation setup A vs B.
A = P["ablations"]
ABLATION_LENGTH = P["ruler"]["lengths"][0]


def ablation_outputs():
    out = [f"{RES}/ablations/centering.done", f"{RES}/ablations/kl_grid.done"]
    out += [f"{RES}/ablations/setup_{s}.done" for s in A["setups"]]
    return out


rule ablation_centering:
    input:
        rules.build_cpu_module.output,
    output:
        touch(f"{RES}/ablations/centering.done"),
    log:
        f"{RES}/logs/ablation_centering.log",
    threads: workflow.cores
    params:
        cmd=eval_command([f"ruler/{t}" for t in A["tasks"]], [ABLATION_LENGTH], A["centering_methods"],
                         P["ruler"]["samples"], f"{RES}/ablations/centering"),
    shell:
        "{params.cmd} > {log} 2>&1"


rule ablation_kl_grid:
    input:
        rules.build_cpu_module.output,
    output:
        touch(f"{RES}/ablations/kl_grid.done"),
    log:
        f"{RES}/logs/ablation_kl_grid.log",
    threads: workflow.cores
    params:
        cmd=eval_command([f"ruler/{t}" for t in A["tasks"]], [ABLATION_LENGTH], A["kl_grid"],
                         P["ruler"]["samples"], f"{RES}/ablations/kl_grid"),
    shell:
        "{params.cmd} > {log} 2>&1"


rule ablation_setup:
    input:
        rules.build_cpu_module.output,
    output:
        touch(f"{RES}/ablations/setup_{{setup}}.done"),
    log:
        f"{RES}/logs/ablation_setup_{{setup}}.log",
    threads: workflow.cores
    params:
        cmd=lambda w: eval_command([f"ruler/{t}" for t in A["tasks"]], [ABLATION_LENGTH],
                                   ["dense", A["centering_methods"][0]], P["ruler"]["samples"],
                                   f"{RES}/ablations/setup_{w.setup}", setup=w.setup),
    shell:
        "{params.cmd} > {log} 2>&1"

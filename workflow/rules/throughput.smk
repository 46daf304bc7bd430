# Throughput and latency measured on the hardware at hand: the CPU kernel sweep and end-to-end decoding.
KB = P["kernel_bench"]
DB = P["decode_bench"]


def throughput_outputs():
    return [f"{RES}/throughput/kernel.csv", f"{RES}/throughput/decode.csv",
            f"{RES}/throughput/projection_paper_hardware.csv"]


rule bench_kernel:
    input:
        rules.build_cpu_module.output,
    output:
        f"{RES}/throughput/kernel.csv",
    log:
        f"{RES}/logs/bench_kernel.log",
    threads: workflow.cores
    params:
        grid=" ".join([f"--n {n}" for n in KB["n"]] + [f"--head-dim {d}" for d in KB["head_dim"]]
                      + [f"--kl {kl}" for kl in KB["kl"]]),
    shell:
        "{MAGICPIG} bench kernel {params.grid} --csv {output} > {log} 2>&1"


rule bench_decode:
    input:
        rules.build_cpu_module.output,
    output:
        f"{RES}/throughput/decode.csv",
    log:
        f"{RES}/logs/bench_decode.log",
    threads: workflow.cores
    params:
        args=" ".join([f"--context {n}" for n in DB["lengths"]] + [method_args(DB["methods"])]
                      + [f"--fill {DB.get('fill', 'prefill')}"]),
    shell:
        "{MAGICPIG} bench decode --model {P[model]} {params.args} --csv {output} > {log} 2>&1"


rule project_hardware:
    input:
        f"{RES}/throughput/kernel.csv",
    output:
        f"{RES}/throughput/projection_paper_hardware.csv",
    log:
        f"{RES}/logs/project_hardware.log",
    shell:
        "{MAGICPIG} project --kernel-csv {input} --csv {output} > {log} 2>&1"

# Throughput and latency measured on the hardware at hand: the CPU kernel sweep and end-to-end decoding.
KB = P["kernel_bench"]
DB = P["decode_bench"]
# `magicpig project`: the bandwidth model fitted to the kernel and decode CSVs, then projected (its OUT_FILES)
PROJECT_OUTPUTS = [f"{RES}/throughput/{name}" for name in
                   ("fit.csv", "decode_predicted.csv", "projection_paper_hardware.csv",
                    "projection_paper_latency.csv", "projection_h200.csv")]


def throughput_outputs():
    return [f"{RES}/throughput/kernel.csv", f"{RES}/throughput/decode.csv"] + PROJECT_OUTPUTS


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
        # stock transformers (SDPA + DynamicCache) is the baseline of every throughput row
        args=" ".join([f"--context {n}" for n in DB["lengths"]]
                      + [method_args((["dense@stock"] if "dense@stock" not in DB["methods"] else [])
                                     + list(DB["methods"]))]
                      + [f"--fill {DB.get('fill', 'exact')}"]
                      + [f"--batch {b}" for b in DB.get("batches", [1])]
                      + [f"--steps {DB.get('steps', 128)} --warmup {DB.get('warmup', 32)}"]
                      + (["--max-throughput"] if DB.get("max_throughput") else [])),
    shell:
        "{MAGICPIG} bench decode --model {P[model]} {params.args} --csv {output} > {log} 2>&1"


rule project_hardware:
    input:
        kernel=f"{RES}/throughput/kernel.csv",
        decode=f"{RES}/throughput/decode.csv",
    output:
        PROJECT_OUTPUTS,
    log:
        f"{RES}/logs/project_hardware.log",
    params:
        out=f"{RES}/throughput",
    shell:
        "{MAGICPIG} project --kernel-csv {input.kernel} --decode-csv {input.decode} --out-dir {params.out} "
        "> {log} 2>&1"

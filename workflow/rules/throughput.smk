# Throughput and latency measured on the hardware at hand: the CPU kernel sweep and end-to-end decoding,
# then the bandwidth model fitted to both and projected to the paper's hardware.
THROUGHPUT = f"{RES}/throughput"
THROUGHPUT_FILES = (
    [f"{THROUGHPUT}/{KERNEL_CSV.name}", f"{THROUGHPUT}/{DECODE_CSV.name}"]
    + [f"{THROUGHPUT}/{name}" for name in project_files()]
    + [shape_decode_file(RES, name) for name in decode_shapes(P)]
)


# The CPU module alone (random keys, no model): never a GPU job.
rule bench_kernel:
    input:
        rules.build_cpu_module.output,
    output:
        f"{THROUGHPUT}/{KERNEL_CSV.name}",
    log:
        f"{RES}/logs/bench_kernel.log",
    benchmark:
        f"{RES}/benchmarks/bench_kernel/bench_kernel.tsv",
    params:
        magicpig=MAGICPIG,
        grid=kernel_args(P["kernel_bench"]),
    threads: job_threads(16)
    conda:
        ENV
    resources:
        mem_mb=16000,
        runtime=240,
    shell:
        "{params.magicpig} bench kernel {params.grid} --csv {output:q} > {log:q} 2>&1"


rule bench_decode:
    input:
        rules.build_cpu_module.output,
    output:
        f"{THROUGHPUT}/{DECODE_CSV.name}",
    log:
        f"{RES}/logs/bench_decode.log",
    benchmark:
        f"{RES}/benchmarks/bench_decode/bench_decode.tsv",
    params:
        magicpig=MAGICPIG,
        args=decode_args(P),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        # --max-throughput grows the batch until memory runs out: give it the node's memory
        mem_mb=sized(P, 64000, 256000) if P["decode_bench"]["max_throughput"] else sized(P, 8000, 128000),
        runtime=sized(P, 480, 1440),
        gpu=GPUS,
    shell:
        "{params.magicpig} bench decode {params.args} --csv {output:q} > {log:q} 2>&1"


# The models the preset measures by their shape only (decode_bench.shapes: random weights of the stored
# architecture, timing only), as the paper's Fig. 8a/b measure CodeLlama-34B and -13B.
rule bench_decode_shape:
    input:
        rules.build_cpu_module.output,
    output:
        shape_decode_file(RES, "{shape}"),
    log:
        f"{RES}/logs/bench_decode_{{shape}}.log",
    benchmark:
        f"{RES}/benchmarks/bench_decode_shape/bench_decode_{{shape}}.tsv",
    wildcard_constraints:
        shape="[A-Za-z0-9._-]+",
    params:
        magicpig=MAGICPIG,
        args=lambda wildcards: decode_args(shape_preset(P, wildcards.shape)),
    threads: job_threads(CPUS)
    conda:
        ENV
    resources:
        mem_mb=sized(P, 64000, 256000),
        runtime=sized(P, 480, 1440),
        gpu=GPUS,
    shell:
        "{params.magicpig} bench decode {params.args} --csv {output:q} > {log:q} 2>&1"


rule project_hardware:
    input:
        kernel=f"{THROUGHPUT}/{KERNEL_CSV.name}",
        decode=f"{THROUGHPUT}/{DECODE_CSV.name}",
        reference="config/paper_reference.yaml",
    output:
        [f"{THROUGHPUT}/{name}" for name in project_files()],
    log:
        f"{RES}/logs/project_hardware.log",
    benchmark:
        f"{RES}/benchmarks/project_hardware/project_hardware.tsv",
    params:
        magicpig=MAGICPIG,
        out_dir=out_dir,
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=30,
    shell:
        "{params.magicpig} project --kernel-csv {input.kernel:q} --decode-csv {input.decode:q} "
        "--out-dir {params.out_dir:q} > {log:q} 2>&1"

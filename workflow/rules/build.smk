# Build the C++/OpenMP CPU module for this machine and self-check it against the torch reference.
rule build_cpu_module:
    output:
        f"{RES}/build/{CPU_MODULE_TXT.name}",
    log:
        f"{RES}/logs/build_cpu_module.log",
    benchmark:
        f"{RES}/benchmarks/build_cpu_module/build_cpu_module.tsv",
    params:
        magicpig=MAGICPIG,
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=30,
    shell:
        "{params.magicpig} build > {output:q} 2> {log:q}"

# The report: every table and figure, each beside the paper's numbers.
rule report:
    input:
        accuracy_outputs(),
        ablation_outputs(),
        estimation_outputs(),
        throughput_outputs(),
        "config/paper_reference.yaml",
    output:
        f"{FIG}/REPORT.md",
    log:
        f"{RES}/logs/report.log",
    shell:
        "{PYTHON} workflow/scripts/report.py --results {RES} --out {FIG} --preset {PRESET} > {log} 2>&1"

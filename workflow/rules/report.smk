# The report: every table and figure, each beside the paper's numbers. Its inputs are the results files it
# reads, so it reruns when one of them changes; its outputs are REPORT.md and each figure
# (magicpig.harness.report.figures.FIGURES), wrapped for `snakemake --report report.html`.
rule report:
    input:
        accuracy=ACCURACY_METRICS,
        ablations=ABLATION_METRICS,
        sweeps=SWEEP_METRICS,
        estimation=ESTIMATION_FILES,
        throughput=THROUGHPUT_FILES,
        reference="config/paper_reference.yaml",
        script="workflow/scripts/report.py",
    output:
        report=report(f"{FIG}/REPORT.md", caption="../report/report_md.rst", category="Report"),
        figures=[report(f"{FIG}/{name}", caption=figure_caption(name), category="Figures")
                 for name in report_figures()],
    log:
        f"{RES}/logs/report.log",
    params:
        results=results_root,
        out=report_dir,
        python=PYTHON,
        preset=PRESET,
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=30,
    shell:
        "{params.python} {input.script} --results {params.results} --out {params.out} --preset {params.preset} "
        "> {log} 2>&1"

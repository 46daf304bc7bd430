# The report: every table and figure, each beside the paper's numbers. Its inputs are the results files its
# sections read (magicpig.harness.result_files.SECTION_READS), so it reruns when one of them changes; its outputs
# are REPORT.md, its HTML rendering REPORT.html and each figure (result_files.REPORT_FIGURES).
# `snakemake --report report.html` shows REPORT.html inline (a Markdown file would only be offered as a download)
# and each figure with its caption (the ``caption`` of its entry in result_files). The
# preset's config goes along as JSON: the report's coverage table computes each paper item's status from it.
import json
import shlex

rule report:
    input:
        results=report_inputs(EVAL_RULES, RES, P),
        reference="config/paper_reference.yaml",
        script="workflow/scripts/report.py",
    output:
        report=f"{FIG}/{REPORT_MD.name}",
        html=report(f"{FIG}/{REPORT_HTML.name}", caption=report_caption(REPORT_HTML), category="Report"),
        figures=[report(f"{FIG}/{figure.name}", caption=report_caption(figure), category="Figures")
                 for figure in report_figures()],
    log:
        f"{RES}/logs/report.log",
    benchmark:
        f"{RES}/benchmarks/report/report.tsv",
    params:
        results=results_root,
        preset_config=shlex.quote(json.dumps(P, sort_keys=True)),
        out=report_dir,
        python=PYTHON,
        preset=PRESET,
        methods_module=methods_module_args(),
    conda:
        ENV
    resources:
        mem_mb=4000,
        runtime=30,
    shell:
        "{params.python:q} {input.script:q} --results {params.results:q} --out {params.out:q} "
        "--preset {params.preset:q} --preset-config {params.preset_config} {params.methods_module} > {log:q} 2>&1"

# `magicpig eval`: accuracy, ablations and budget sweeps, one rule per row of the job table (eval_rules in
# common.smk: what each benchmark runs, at which length, with which methods). A job prefills each sample once
# and decodes every method from it; `magicpig eval` resumes, so an interrupted job redoes only missing samples.
# A job's outputs are the metrics.json of each of its methods (the predictions.jsonl beside them are what it
# resumes from, so they are not outputs: Snakemake would delete them before a rerun).
EVAL_RULES = eval_rules(P, RES)
EVAL_METRICS = [f for eval_rule in EVAL_RULES for f in eval_rule.targets()]


for eval_rule in EVAL_RULES:

    rule:
        name:
            eval_rule.name
        input:
            rules.build_cpu_module.output,
            data=eval_rule.data,
        output:
            eval_rule.outputs(),
        log:
            f"{RES}/logs/{eval_rule.log}.log",
        benchmark:
            f"{RES}/benchmarks/{eval_rule.name}/{eval_rule.log}.tsv",
        wildcard_constraints:
            **eval_rule.wildcard_constraints(),
        params:
            magicpig=MAGICPIG,
            args=eval_rule.args,
            out=eval_rule.out_dir,
        threads: job_threads(CPUS)
        conda:
            ENV
        resources:
            mem_mb=sized(P, 8000, 128000),
            runtime=sized(P, 240, eval_rule.runtime),
            gpu=GPUS,
        shell:
            "{params.magicpig} eval {params.args} --out {params.out:q} > {log:q} 2>&1"

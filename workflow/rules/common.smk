# Helpers shared by the rule files.
import shlex


def method_args(methods):
    """--method options for a list of method specs (specs contain commas, so one option each)."""
    return " ".join(f"--method {shlex.quote(m)}" for m in methods)


def runs(samples):
    """Whether a benchmark block runs: a sample count > 0, or `all` (every record)."""
    return samples == "all" or int(samples) > 0


def eval_command(tasks, lengths, methods, samples, out, setup=None):
    task_args = " ".join(f"--task {shlex.quote(t)}" for t in tasks)
    length_args = " ".join(f"--length {int(n)}" for n in lengths)
    samples = "all" if samples == "all" else int(samples)
    return (f"{MAGICPIG} eval --model {shlex.quote(P['model'])} {method_args(methods)} {task_args} "
            f"{length_args} --samples {samples} --out {shlex.quote(out)} --seed {SEED} "
            f"--setup {setup or P.get('setup', 'A')} --backend {P.get('backend', 'offload')} "
            f"--chat-template {P.get('chat_template', 'tokenizer')} --no-progress")

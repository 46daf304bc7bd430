"""CoQA scoring as lm-evaluation-harness computes it: SQuAD v2 exact match and token F1 (the
normalisation of ``magicpig_tasks.longbench.metrics.normalize_answer``: lower case, punctuation and the
articles a/an/the removed, whitespace collapsed), the maximum over gold answers, and with several gold
answers the mean over the leave-one-out sets (each answer left out in turn)."""
from __future__ import annotations

from collections import Counter

from magicpig_tasks.longbench.metrics import normalize_answer


def exact(gold: str, pred: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(pred))


def token_f1(gold: str, pred: str) -> float:
    """SQuAD's ``compute_f1``: two empty token lists match (1), one empty list scores 0."""
    g, p = normalize_answer(gold).split(), normalize_answer(pred).split()
    if not g or not p:
        return float(g == p)
    same = sum((Counter(g) & Counter(p)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def coqa_scores(gold: list[str], pred: str) -> dict[str, float]:
    """{"em", "f1"} in [0, 1] of one prediction against the gold answers of its turn."""
    if not gold:
        raise ValueError("coqa: a sample needs at least one gold answer")
    if len(gold) == 1:
        return {"em": exact(gold[0], pred), "f1": token_f1(gold[0], pred)}
    held_out = [gold[:i] + gold[i + 1:] for i in range(len(gold))]
    em = sum(max(exact(a, pred) for a in rest) for rest in held_out)
    f1 = sum(max(token_f1(a, pred) for a in rest) for rest in held_out)
    return {"em": em / len(gold), "f1": f1 / len(gold)}

"""The LongBench reference settings for the six tasks of the paper's Table 2: prompt template (with
``{context}`` and ``{input}``), answer budget, metric, whether the chat template is applied and whether
only the first line of the prediction is scored."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LongBenchSpec:
    template: str
    max_new_tokens: int
    metric: str
    chat: bool
    first_line: bool


_QASPER_RULES = ("Answer the question as concisely as you can, using a single phrase or sentence if possible. "
                 "If the question cannot be answered based on the information in the article, write "
                 "\"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or "
                 "\"unanswerable\". Do not provide any explanation.")

SPECS = {
    "qasper": LongBenchSpec(
        "You are given a scientific article and a question. " + _QASPER_RULES + "\n\nArticle: {context}\n\n "
        "Answer the question based on the above article as concisely as you can, using a single phrase or "
        "sentence if possible. If the question cannot be answered based on the information in the article, "
        "write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or "
        "\"unanswerable\". Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:",
        128, "qa_f1", True, False),
    "repobench-p": LongBenchSpec("Please complete the code given below. \n{context}{input}Next line of code:\n",
                                 64, "code_sim", False, False),
    "lcc": LongBenchSpec("Please complete the code given below. \n{context}Next line of code:\n",
                         64, "code_sim", False, False),
    "passage_retrieval_en": LongBenchSpec(
        "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the "
        "abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter the number "
        "of the paragraph that the abstract is from. The answer format must be like \"Paragraph 1\", "
        "\"Paragraph 2\", etc.\n\nThe answer is: ",
        32, "retrieval", True, False),
    "trec": LongBenchSpec("Please determine the type of the question below. Here are some examples of "
                          "questions.\n\n{context}\n{input}", 64, "classification", False, True),
    "triviaqa": LongBenchSpec("Answer the question based on the given passage. Only give me the answer and do "
                              "not output any other words. The following are some examples.\n\n{context}\n\n"
                              "{input}", 32, "qa_f1", False, True),
}

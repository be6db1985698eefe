"""The papers' evaluation prompts: DRAGIN's chain-of-thought exemplars and RetrievalQA's answer templates.

DRAGIN (Su et al., 2024), appendix F "Prompt Template": Prompt 1 (2WikiMultihopQA Direct), Prompt 3 (HotpotQA
Direct) and Prompt 5 (StrategyQA Direct) give the exemplars; Prompts 2, 4 and 6 show the same exemplars
followed by ``Context:``, the numbered documents and ``Answer in the same format as before.``. The
exemplars are kept verbatim from the appendix text except for the slips noted next to them. How the pieces
are joined (the instruction line of each dataset, ``Answer:`` at the end) follows the appendix and DRAGIN's
``src/data.py`` (``test_input_template``); exemplars are separated by a blank line.

RetrievalQA (Zhang et al., 2024), github.com/hyintell/RetrievalQA @ f26134c ``utils.py`` ``PROMPT_DICT`` and
``run_lm.py`` ``format_context``: the ``openai_chat_*`` templates, the first 5 contexts formatted as
``"[i] title\\ntext"`` and joined by newlines. For the chat models the authors also sent the system message
:data:`RETRIEVALQA_SYSTEM_PROMPT`; for TinyLlama, phi-2 and Llama-2 they wrapped the same texts in each
model's own chat markup (not reproduced here: apply the model's chat template instead).
"""

from __future__ import annotations

from active_rag.errors import UnknownNameError
from active_rag.components.prompts import HOTPOTQA_EXEMPLARS
from active_rag.components.routing import ta_are_resources
from active_rag.types import Passage

__all__ = [
    "CONTEXT_FOOTER",
    "EXEMPLARS",
    "INSTRUCTIONS",
    "RETRIEVALQA_NO_RETRIEVAL_TEMPLATE",
    "RETRIEVALQA_RETRIEVAL_TEMPLATE",
    "RETRIEVALQA_SYSTEM_PROMPT",
    "RETRIEVALQA_TOP_N",
    "build_eval_prompt",
    "format_dragin_context",
    "format_retrievalqa_evidence",
    "fewshot_block",
    "question_block",
]

# ---------------------------------------------------------------------------------------- DRAGIN appendix F

_WIKI2_EXEMPLARS: tuple[tuple[str, str], ...] = (  # Prompt 1: exemplars of 2WMQA Direct
    (
        "When did the director of film Hypocrite (Film) die?",
        "The film Hypocrite was directed by Miguel Morayta. Miguel Morayta died on 19 June 2013. "
        "So the answer is 19 June 2013.",
    ),
    (
        "Are both Kurram Garhi and Trojkrsti located in the same country?",
        "Kurram Garhi is located in the country of Pakistan. Trojkrsti is located in the country of Republic of "
        "Macedonia. Thus, they are not in the same country. So the answer is no.",
    ),
    (
        # Prompt 1 ends this answer with "no."; Prompt 2 (RAG) drops the final period, a slip.
        "Do director of film Coolie No. 1 (1995 Film) and director of film The Sensational Trial have the same "
        "nationality?",
        "Coolie No. 1 (1995 film) was directed by David Dhawan. The Sensational Trial was directed by Karl Freund. "
        "David Dhawan's nationality is India. Karl Freund's nationality is Germany. Thus, they do not have the "
        "same nationality. So the answer is no.",
    ),
    (
        "Who is Boraqchin (Wife Of Ögedei)'s father-in-law?",
        "Boraqchin is married to Ögedei Khan. Ögedei Khan's father is Genghis Khan. Thus, Boraqchin's "
        "father-in-law is Genghis Khan. So the answer is Genghis Khan.",
    ),
    (
        "Who was born first out of Martin Hodge and Ivania Martinich?",
        "Martin Hodge was born on 4 February 1959. Ivania Martinich was born on 25 July 1995. Thus, Martin Hodge "
        "was born first. So the answer is Martin Hodge.",
    ),
    (
        "When did the director of film Laughter In Hell die?",
        "The film Laughter In Hell was directed by Edward L. Cahn. Edward L. Cahn died on August 25, 1963. "
        "So the answer is August 25, 1963.",
    ),
)

_HOTPOTQA_EXEMPLARS: tuple[tuple[str, str], ...] = HOTPOTQA_EXEMPLARS  # Prompt 3 (kept in active_rag.components.prompts)

_STRATEGYQA_EXEMPLARS: tuple[tuple[str, str], ...] = (  # Prompt 5: exemplars of StrategyQA Direct
    (
        # Prompt 5 reads "yes"; Prompt 6 (RAG) has the OCR slip "ves".
        "Do hamsters provide food for any animals?",
        "Hamsters are prey animals. Prey are food for predators. Thus, hamsters provide food for some animals. "
        "So the answer is yes.",
    ),
    (
        "Could Brooke Shields succeed at University of Pennsylvania?",
        "Brooke Shields went to Princeton University. Princeton University is about as academically rigorous as "
        "the University of Pennsylvania. Thus, Brooke Shields could also succeed at the University of "
        "Pennsylvania. So the answer is yes.",
    ),
    (
        "Hydrogen's atomic number squared exceeds number of Spice Girls?",
        "Hydrogen has an atomic number of 1. 1 squared is 1. There are 5 Spice Girls. Thus, Hydrogen's atomic "
        "number squared is less than 5. So the answer is no.",
    ),
    (
        "Is it common to see frost during some college commencements?",
        "College commencement ceremonies can happen in December, May, and June. December is in the winter, so "
        "there can be frost. Thus, there could be frost at some commencements. So the answer is yes.",
    ),
    (
        "Could a llama birth twice during War in Vietnam (1945-46)?",
        "The War in Vietnam was 6 months. The gestation period for a llama is 11 months, which is more than "
        "6 months. Thus, a llama could not give birth twice during the War in Vietnam. So the answer is no.",
    ),
    (
        # The appendix text has "$0.6g/cm^3$" (LaTeX math delimiters left by the PDF conversion); DRAGIN's
        # src/data.py exemplar reads "0.6g/cm^3".
        "Would a pear sink in water?",
        "The density of a pear is about 0.6g/cm^3, which is less than water. Objects less dense than water "
        "float. Thus, a pear would float. So the answer is no.",
    ),
)

#: Few-shot chain-of-thought exemplars per dataset: (question, answer) pairs, each answer ending with
#: "So the answer is X.".
EXEMPLARS: dict[str, tuple[tuple[str, str], ...]] = {
    "hotpotqa": _HOTPOTQA_EXEMPLARS,
    "2wikimultihopqa": _WIKI2_EXEMPLARS,
    "strategyqa": _STRATEGYQA_EXEMPLARS,
    # a documentation folder has no paper's prompt: HotpotQA's (Prompt 3) is the general one, bridges, comparisons
    # and yes/no questions alike; nothing of it was written for the pydocs questions
    "pydocs": _HOTPOTQA_EXEMPLARS,
}

#: The instruction line before the test question, per dataset (appendix F; DRAGIN ``test_input_template``).
#: 2WikiMultihopQA has none: Prompts 1 and 2 go straight from the exemplars (or the context) to the question.
INSTRUCTIONS: dict[str, str | None] = {
    "hotpotqa": "Answer the following question by reasoning step-by-step, following the example above.",
    "2wikimultihopqa": None,
    "strategyqa": "Following the examples above, answer the question by reasoning step-by-step.",
    "pydocs": "Answer the following question by reasoning step-by-step, following the example above.",
}

# DRAGIN's src/data.py puts a blank line between StrategyQA's instruction and the question, a newline for HotpotQA.
_INSTRUCTION_SEPARATOR = {"hotpotqa": "\n", "strategyqa": "\n\n", "pydocs": "\n"}

#: The line between the retrieved documents and the instruction/question (Prompts 2, 4 and 6).
CONTEXT_FOOTER = "Answer in the same format as before."


def _check_fewshot(dataset: str) -> str:
    if dataset not in EXEMPLARS:
        raise UnknownNameError("few-shot dataset", dataset, EXEMPLARS)
    return dataset


def fewshot_block(dataset: str) -> str:
    """The exemplars of ``dataset`` as ``"Question: ...\\nAnswer: ...\\n\\n"`` repeated (ends with a blank line)."""
    return "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in EXEMPLARS[_check_fewshot(dataset)])


def question_block(dataset: str, question: str) -> str:
    """The instruction line (if the dataset has one) and ``"Question: {question}\\nAnswer:"``."""
    instruction = INSTRUCTIONS[_check_fewshot(dataset)]
    head = "" if instruction is None else instruction + _INSTRUCTION_SEPARATOR[dataset]
    return f"{head}Question: {question}\nAnswer:"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def format_dragin_context(passages: list[Passage]) -> str:
    """``"Context:\\n[1] title text\\n[2] ...\\n"`` (appendix F); whitespace runs (newlines too) become one space."""
    lines = []
    for i, p in enumerate(passages, start=1):
        body = _one_line(f"{p.title} {p.text}" if p.title else p.text)
        lines.append(f"[{i}] {body}\n")
    return "Context:\n" + "".join(lines)


# ---------------------------------------------------------------------------------------------- RetrievalQA

#: The system message the authors sent with the OpenAI chat templates (``run_lm.call_openai_api``).
RETRIEVALQA_SYSTEM_PROMPT = "You are a helpful assistant to answer questions."

# The authors' answer templates, read from the file the package ships (``active_rag/data/ta_are_prompts.json``,
# extracted from RetrievalQA ``utils.PROMPT_DICT``); the router prompts live in :mod:`active_rag.components.routing`.
_AUTHORS_TEMPLATES = ta_are_resources()["prompt_templates"]

#: ``PROMPT_DICT["openai_chat_no_retrieval"]``.
RETRIEVALQA_NO_RETRIEVAL_TEMPLATE: str = _AUTHORS_TEMPLATES["openai_chat_no_retrieval"]

#: ``PROMPT_DICT["openai_chat_retrieval"]``.
RETRIEVALQA_RETRIEVAL_TEMPLATE: str = _AUTHORS_TEMPLATES["openai_chat_retrieval"]

#: How many of a question's contexts the authors put in the prompt (``--doc_top_n 5``).
RETRIEVALQA_TOP_N = 5


def format_retrievalqa_evidence(passages: list[Passage], top_n: int = RETRIEVALQA_TOP_N) -> str:
    """``"[1] title\\ntext\\n[2] title\\ntext..."`` over the first ``top_n`` passages (``run_lm.format_context``)."""
    return "\n".join(f"[{i}] {p.title.strip()}\n{p.text.strip()}" for i, p in enumerate(passages[:top_n], start=1))


# ------------------------------------------------------------------------------------------------ entry point

_EVAL_DATASETS = ("hotpotqa", "2wikimultihopqa", "strategyqa", "retrievalqa", "pydocs")


def build_eval_prompt(dataset: str, question: str, passages: list[Passage] | None = None) -> str:
    """The paper's prompt for answering ``question`` of ``dataset``, without or with documents.

    HotpotQA, 2WikiMultihopQA, StrategyQA (DRAGIN appendix F): without passages (None or empty),
    ``fewshot_block + question_block``; with passages, ``fewshot_block + "Context:\\n[1] title text\\n..." +
    "Answer in the same format as before.\\n" + question_block``, using every passage given (DRAGIN used 3).
    RetrievalQA: the authors' ``openai_chat_no_retrieval`` template, or ``openai_chat_retrieval`` with the first
    :data:`RETRIEVALQA_TOP_N` passages as evidence. Every prompt ends with ``"Answer:"``.
    """
    if dataset not in _EVAL_DATASETS:
        raise UnknownNameError("dataset", dataset, _EVAL_DATASETS)
    if dataset == "retrievalqa":
        if not passages:
            return RETRIEVALQA_NO_RETRIEVAL_TEMPLATE.format(question=question)
        return RETRIEVALQA_RETRIEVAL_TEMPLATE.format(evidence=format_retrievalqa_evidence(passages), question=question)
    prompt = fewshot_block(dataset)
    if passages:
        prompt += format_dragin_context(passages) + CONTEXT_FOOTER + "\n"
    return prompt + question_block(dataset, question)

"""Prompt templates. A template renders the user message for a question, with or without retrieved
passages; :mod:`active_rag.components.prompt_layout` lays it out in one of three prompt modes (one chat message,
exemplars as prior chat turns, or plain completion without chat template) and the loop appends the answer so far.

Every template puts what all questions share (instruction, exemplars) before the documents and the
question, so the prompts of different questions share the longest possible token prefix (prefix KV cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..types import Passage

_MARK = "\uE001QUESTION\uE001"


@dataclass(frozen=True)
class PromptTemplate:
    """``direct`` and ``with_docs`` are ``str.format`` templates with ``{question}``; ``with_docs`` also has
    ``{documents}``, each passage formatted with ``doc_format`` (``{i}``, ``{title}``, ``{text}``)."""

    name: str
    direct: str
    with_docs: str
    doc_format: str = "[{i}] {title} {text}"
    doc_separator: str = "\n"
    # The structure the "chat-turns" and "completion" prompt modes need (active_rag.components.prompt_layout). A template
    # without exemplars and instruction is laid out from ``direct``/``with_docs`` in every mode.
    instruction: str = ""  # shared text before the exemplars
    exemplars: tuple[tuple[str, str], ...] = ()  # (question, answer) pairs
    question_instruction: str = ""  # the line before the asked question (e.g. "Answer ... following the example above.")
    context_header: str = ""  # before the documents block
    context_footer: str = ""  # after it (DRAGIN: "Answer in the same format as before.")
    question_format: str = "Question: {question}"
    answer_prefix: str = "Answer:"

    @property
    def structured(self) -> bool:
        return bool(self.exemplars or self.instruction)

    def context(self, passages: Sequence[Passage]) -> str:
        """The documents block with its header and footer (empty without passages)."""
        if not passages:
            return ""
        footer = self.context_footer + "\n" if self.context_footer else ""
        return self.context_header + self.documents(passages) + "\n" + footer

    def documents(self, passages: Sequence[Passage]) -> str:
        return self.doc_separator.join(
            self.doc_format.format(i=i, title=p.title, text=p.text).replace("  ", " ") for i, p in enumerate(passages, 1)
        )

    def render(self, question: str, passages: Sequence[Passage] = ()) -> str:
        before, q, after = self.render_parts(question, passages)
        return before + q + after

    def render_parts(self, question: str, passages: Sequence[Passage] = ()) -> tuple[str, str, str]:
        """``(text before the question, question, text after)`` so the engine knows where the question sits."""
        template = self.with_docs if passages else self.direct
        text = template.format(question=_MARK, documents=self.documents(passages))
        before, _, after = text.partition(_MARK)
        return before, question, after.replace(_MARK, question)


#: DRAGIN (Su et al. 2024) appendix F, Prompt 3: the HotpotQA chain-of-thought exemplars, verbatim (also the
#: evaluation prompts' exemplars, :mod:`active_rag.evaluation.prompts`).
HOTPOTQA_EXEMPLARS: tuple[tuple[str, str], ...] = (
    (
        "Jeremy Theobald and Christopher Nolan share what profession?",
        "Jeremy Theobald is an actor and producer. Christopher Nolan is a director, producer, and screenwriter. "
        "Therefore, they both share the profession of being a producer. So the answer is producer.",
    ),
    (
        # Verbatim "Of these Nosferatu" (appendix F); appendix A quotes it as "Of these, Nosferatu".
        "What film directed by Brian Patrick Butler was inspired by a film directed by F.W. Murnau?",
        "Brian Patrick Butler directed the film The Phantom Hour. The Phantom Hour was inspired by the films such "
        "as Nosferatu and The Cabinet of Dr. Caligari. Of these Nosferatu was directed by F.W. Murnau. "
        "So the answer is The Phantom Hour.",
    ),
    (
        "How many episodes were in the South Korean television series in which Ryu Hye-young played Bo-ra?",
        "The South Korean television series in which Ryu Hye-young played Bo-ra is Reply 1988. The number of "
        "episodes Reply 1988 has is 20. So the answer is 20.",
    ),
    (
        "Were Lonny and Allure both founded in the 1990s?",
        "Lonny (magazine) was founded in 2009. Allure (magazine) was founded in 1991. Thus, of the two, only "
        "Allure was founded in 1990s. So the answer is no.",
    ),
    (
        'Vertical Limit stars which actor who also played astronaut Alan Shepard in "The Right Stuff"?',
        'The actor who played astronaut Alan Shepard in "The Right Stuff" is Scott Glenn. The movie Vertical '
        "Limit also starred Scott Glenn. So the answer is Scott Glenn.",
    ),
    (
        "What was the 2014 population of the city where Lake Wales Medical Center is located?",
        "Lake Wales Medical Center is located in the city of Polk County, Florida. The population of Polk County "
        "in 2014 was 15,140. So the answer is 15,140.",
    ),
    (
        "Who was born first? Jan de Bont or Raoul Walsh?",
        "Jan de Bont was born on 22 October 1943. Raoul Walsh was born on March 11, 1887. Thus, Raoul Walsh was "
        "born the first. So the answer is Raoul Walsh.",
    ),
    (
        "In what country was Lost Gravity manufactured?",
        "The Lost Gravity (roller coaster) was manufactured by Mack Rides. Mack Rides is a German company. "
        "So the answer is Germany.",
    ),
)

_COT_INSTRUCTION = "Answer the following question by reasoning step-by-step. End with \"So the answer is\" and the answer."

DRAGIN_PROMPT = PromptTemplate(
    name="dragin",
    direct=_COT_INSTRUCTION + "\nQuestion: {question}",
    # DRAGIN §3.3: "Below are the external knowledge references: [1] Di1 ... Please answer the question
    # based on the external knowledge: Question: xxx Answer: T'" -- after the shared instruction line
    with_docs=_COT_INSTRUCTION + "\nBelow are the external knowledge references:\n{documents}\n"
    "Please answer the question based on the external knowledge:\nQuestion: {question}",
    # the chat-turns and completion modes show four HotpotQA exemplars (appendix F) before the documents
    instruction=_COT_INSTRUCTION,
    exemplars=HOTPOTQA_EXEMPLARS[:4],
    context_header="Below are the external knowledge references:\n",
    context_footer="Please answer the question based on the external knowledge:",
)

FLARE_PROMPT = PromptTemplate(
    name="flare",
    direct=_COT_INSTRUCTION + "\nQuestion: {question}",
    # FLARE App. A: documents are linearised by rank and prepended to the user input (after the shared
    # instruction, so every question's prompt starts with the same tokens).
    with_docs=_COT_INSTRUCTION + "\nSearch results:\n{documents}\n\nUse the search results.\nQuestion: {question}",
    instruction=_COT_INSTRUCTION,
    exemplars=HOTPOTQA_EXEMPLARS[:4],
    context_header="Search results:\n",
    context_footer="Use the search results.",
)

_FLARE_INSTRUCT_SKILLS = (
    "Skill 1. Use the Search API to look up relevant information by writing \"[Search(term)]\" where \"term\" is "
    "the search term you want to look up. For example:\n"
    "Question: But what are the risks during production of nanomaterials?\n"
    "Answer (with Search): [Search(nanomaterial production risks)] Some nanomaterials may give rise to various "
    "kinds of lung damage.\n\n"
    "Question: The colors on the flag of Ghana have the following meanings.\n"
    "Answer (with Search): Red is for [Search(Ghana flag red meaning)] the blood of martyrs, green for forests, "
    "and gold for mineral wealth.\n\n"
    "Skill 2. Answer questions by thinking step-by-step. First, write out the reasoning steps, then draw the "
    "conclusion. For example:\n"
    "Question: When did the director of film Hypocrite (Film) die?\n"
    "Answer (with step-by-step): The film Hypocrite was directed by Miguel Morayta. Miguel Morayta died on "
    "19 June 2013. So the answer is 19 June 2013.\n\n"
    "Now, combine the aforementioned two skills. First, write out the reasoning steps, then draw the conclusion, "
    "where the reasoning steps should also utilize the Search API \"[Search(term)]\" whenever possible.\n"
)

FLARE_INSTRUCT_PROMPT = PromptTemplate(
    name="flare-instruct",
    # FLARE §3.1 / Prompt 3.1-3.3: retrieval instructions + task instructions, combined.
    direct=_FLARE_INSTRUCT_SKILLS + "Question: {question}\nAnswer (with step-by-step & Search):",
    with_docs=_FLARE_INSTRUCT_SKILLS + "Search results:\n{documents}\n\n"
    + "Question: {question}\nAnswer (with step-by-step & Search):",
)

_SELF_ASK_EXEMPLARS = (
    "Question: Who lived longer, Muhammad Ali or Alan Turing?\n"
    "Are follow up questions needed here: Yes.\n"
    "Follow up: How old was Muhammad Ali when he died?\n"
    "Intermediate answer: Muhammad Ali was 74 years old when he died.\n"
    "Follow up: How old was Alan Turing when he died?\n"
    "Intermediate answer: Alan Turing was 41 years old when he died.\n"
    "So the final answer is: Muhammad Ali\n\n"
    "Question: When was the founder of craigslist born?\n"
    "Are follow up questions needed here: Yes.\n"
    "Follow up: Who was the founder of craigslist?\n"
    "Intermediate answer: Craigslist was founded by Craig Newmark.\n"
    "Follow up: When was Craig Newmark born?\n"
    "Intermediate answer: Craig Newmark was born on December 6, 1952.\n"
    "So the final answer is: December 6, 1952\n\n"
)

SELF_ASK_PROMPT = PromptTemplate(
    name="self-ask",
    # Press et al. 2022 (FLARE Prompt D.2): exemplars with manually written follow-up questions.
    direct=_SELF_ASK_EXEMPLARS + "Question: {question}\nAre follow up questions needed here:",
    with_docs=_SELF_ASK_EXEMPLARS + "Search results:\n{documents}\n\n"
    + "Question: {question}\nAre follow up questions needed here:",
)

PROMPTS: dict[str, PromptTemplate] = {p.name: p for p in (DRAGIN_PROMPT, FLARE_PROMPT, FLARE_INSTRUCT_PROMPT, SELF_ASK_PROMPT)}

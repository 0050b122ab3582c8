"""``tools/MultiHopQA-v0``: multi-hop questions over a seeded synthetic knowledge base, answered with tools.

Question kinds (``plan`` in the task data records the reasoning chain):
    ``entity``: follow ``hops`` relations from a named entity ("What is the country of the birth city of the
    founder of Brimcast Labs?"); the answer is an entity name.
    ``attribute``: follow ``hops - 1`` relations, then read a number ("What is the birth year of ...?").
    ``arithmetic``: two attribute chains of ``hops`` lookups each, added or subtracted; the calculator is the
    reliable path.
Answers are checked by exact match after SQuAD normalisation (numbers by value): reward 1.0 or 0.0.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlvr_gym.core import draw_seed
from rlvr_gym.tasks import Task
from rlvr_gym.toolcall import Tool, ToolCall, ToolEnv, ToolError
from rlvr_gym.verifier import RewardResult
from rlvr_gym_tools.common import CALCULATOR_TOOL, PYTHON_TOOL, verify_exact_answer
from rlvr_gym_tools.kb import ATTRIBUTES, RELATIONS, KBConfig, KnowledgeBase, build_kb, read_attribute, read_relation

ENV_ID = "tools/MultiHopQA-v0"
QUESTION_KINDS = ("entity", "attribute", "arithmetic")
RELATION_PHRASES = {
    "born_in": "the birth city of {x}",
    "works_for": "the employer of {x}",
    "mentor": "the mentor of {x}",
    "founded_by": "the founder of {x}",
    "headquartered_in": "the headquarters city of {x}",
    "country": "the country of {x}",
    "capital": "the capital of {x}",
}
ATTRIBUTE_PHRASES = {
    "birth_year": "the birth year of {x}",
    "founded_year": "the founding year of {x}",
    "population": "the population of {x}",
    "area_km2": "the area in square kilometres of {x}",
}


def _walk(kb: KnowledgeBase, rng: np.random.Generator, num_relations: int, end_type: str | None) -> dict[str, Any]:
    """A random chain of relations without repeated entities; ``end_type`` (if given) must have attributes."""
    for _ in range(100):
        start = list(kb.types)[int(rng.integers(len(kb.types)))]
        path, relations = [start], []
        for _ in range(num_relations):
            options = [r for r, (subject, _) in RELATIONS.items() if subject == kb.types[path[-1]]]
            relation = options[int(rng.integers(len(options)))]
            relations.append(relation)
            path.append(kb.relations[(path[-1], relation)])
        if len(set(path)) == len(path) and (end_type is None or kb.types[path[-1]] == end_type):
            return {"start": start, "relations": relations, "path": path}
    raise RuntimeError("could not draw a chain without repeated entities; use a larger knowledge base")


def _chain(kb: KnowledgeBase, rng: np.random.Generator, hops: int, with_attribute: bool) -> dict[str, Any]:
    if not with_attribute:
        return {**_walk(kb, rng, hops, None), "attribute": None}
    attribute = list(ATTRIBUTES)[int(rng.integers(len(ATTRIBUTES)))]
    chain = _walk(kb, rng, hops - 1, ATTRIBUTES[attribute][0])
    return {**chain, "attribute": attribute, "value": kb.attributes[(chain["path"][-1], attribute)]}


def _phrase(chain: dict[str, Any]) -> str:
    text = chain["start"]
    for relation in chain["relations"]:
        text = RELATION_PHRASES[relation].format(x=text)
    return ATTRIBUTE_PHRASES[chain["attribute"]].format(x=text) if chain["attribute"] else text


def make_question(kb: KnowledgeBase, rng: np.random.Generator, hops: int, kind: str) -> dict[str, Any]:
    """Draws one question. Returns ``{"question", "answer", "kind", "plan"}``; ``plan`` is
    ``{"chains": [{"start", "relations", "attribute", ...}], "op": "+" | "-" | None}``.

    Raises:
        ValueError: on ``hops < 1`` or an unknown ``kind``.
    """
    if hops < 1 or kind not in QUESTION_KINDS:
        raise ValueError(f"need hops >= 1 and kind in {QUESTION_KINDS}, got hops={hops}, kind={kind!r}")
    if kind == "entity":
        chain = _chain(kb, rng, hops, with_attribute=False)
        return {
            "question": f"What is {_phrase(chain)}?",
            "answer": chain["path"][-1],
            "kind": kind,
            "plan": {"chains": [chain], "op": None},
        }
    if kind == "attribute":
        chain = _chain(kb, rng, hops, with_attribute=True)
        return {
            "question": f"What is {_phrase(chain)}?",
            "answer": str(chain["value"]),
            "kind": kind,
            "plan": {"chains": [chain], "op": None},
        }
    first, second = (_chain(kb, rng, hops, with_attribute=True) for _ in range(2))
    op = "+" if rng.random() < 0.5 else "-"
    value = first["value"] + second["value"] if op == "+" else first["value"] - second["value"]
    word = "plus" if op == "+" else "minus"
    return {
        "question": f"What is {_phrase(first)} {word} {_phrase(second)}?",
        "answer": str(value),
        "kind": kind,
        "plan": {"chains": [first, second], "op": op},
    }


def generate_task_data(
    seed: int, hops: int = 2, kind: str = "entity", config: KBConfig | None = None
) -> dict[str, Any]:
    """Task data for one question: the knowledge base comes from ``seed`` and ``config``, the question from a
    generator seeded by ``seed`` as well, so the data is a pure function of the arguments.

    Raises:
        ValueError: on ``hops < 1`` or an unknown ``kind``.
    """
    if kind not in QUESTION_KINDS:
        raise ValueError(f"unknown question kind {kind!r}; choose from {QUESTION_KINDS}")
    config = config or KBConfig()
    kb = build_kb(seed, config)
    rng = np.random.default_rng([seed, hops, QUESTION_KINDS.index(kind)])
    return {
        "kb_seed": seed,
        "kb_config": dataclasses.asdict(config),
        "hops": hops,
        **make_question(kb, rng, hops, kind),
    }


class MultiHopQAEnv(ToolEnv):
    """Answer a multi-hop question about fictional entities using ``search``, ``lookup``, ``calculator``
    and ``python`` tools; the final ``<answer>`` is checked by normalised exact match.

    Args:
        hops: lookups per reasoning chain for questions generated from a seed (tasks carry their own).
        num_distractors: extra look-alike entities in generated knowledge bases.
        question_kinds: kinds drawn for generated questions.
        enable_python: offer the sandboxed ``python`` tool.
        max_turns, max_tool_calls, action_formats, describe_tools_in_prompt: see :class:`ToolEnv`.

    Version History:
        v0: first version.
    """

    max_turns = 16
    max_tool_calls = 16

    def __init__(
        self,
        hops: int = 2,
        num_distractors: int = 4,
        question_kinds: Sequence[str] = QUESTION_KINDS,
        enable_python: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if hops < 1 or not set(question_kinds) <= set(QUESTION_KINDS) or not question_kinds:
            raise ValueError(f"need hops >= 1 and question_kinds a non-empty subset of {QUESTION_KINDS}")
        self.hops, self.question_kinds, self.enable_python = hops, tuple(question_kinds), enable_python
        self.kb_config = KBConfig(num_distractors=num_distractors)
        self.answer = ""

    def _start(self, task: Task | None) -> tuple[str, list[Tool], dict[str, Any]]:
        if task is not None:
            data = task.data
        else:
            kind = self.question_kinds[int(self.np_random.integers(len(self.question_kinds)))]
            data = generate_task_data(draw_seed(self.np_random), self.hops, kind, self.kb_config)
        self.kb = build_kb(int(data["kb_seed"]), KBConfig(**data["kb_config"]))
        self.answer, self.data = str(data["answer"]), data
        prompt = (
            "Answer the question about fictional entities using the tools; the answer is not common "
            f"knowledge. Give the final answer as <answer>...</answer>.\nQuestion: {data['question']}"
        )
        return prompt, self._tools(), {"question": data["question"]}

    def _tools(self) -> list[Tool]:
        tools = [
            Tool(
                "search",
                "Searches the knowledge base (BM25) and returns the best matching documents.",
                {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string"},
                        "k": {"type": "integer", "minimum": 1, "maximum": 5, "description": "documents, default 3"},
                    },
                    "required": ["query"],
                },
                self._search,
            ),
            Tool(
                "lookup",
                "Returns the document about one entity, by exact name.",
                {"type": "object", "properties": {"entity": {"type": "string"}}, "required": ["entity"]},
                self._lookup,
            ),
            CALCULATOR_TOOL,
        ]
        return tools + ([PYTHON_TOOL] if self.enable_python else [])

    def _search(self, query: str, k: int = 3) -> str:
        titles = self.kb.search(query, k)
        if not titles:
            return "No matching documents."
        return "\n".join(f"{i}. {self.kb.documents[t]}" for i, t in enumerate(titles, start=1))

    def _lookup(self, entity: str) -> str:
        document = self.kb.lookup(entity)
        if document is None:
            close = self.kb.close_names(entity)
            raise ToolError(f"no entity named {entity!r}" + (f"; similar names: {', '.join(close)}" if close else ""))
        return document

    def _verify_answer(self, answer: str) -> RewardResult:
        return verify_exact_answer(self.answer, answer)

    def oracle_action(self) -> str:
        """The next action of :class:`MultiHopOracle` (Python-style calls) for this episode, read from the
        last observation: an expert for behaviour cloning on tasks generated from seeds. It assumes the
        episode so far followed the oracle (tool envs have no admissible-action list to inject mistakes from)."""
        if self.turn == 0 or not hasattr(self, "_oracle"):
            self._oracle = MultiHopOracle(call_format="python")
            self._oracle.start(self.data["plan"])
        return self._oracle.act(self.last_observation, {})


class MultiHopOracle:
    """Solves MultiHopQA tasks from the task's ``plan`` by reading facts out of tool responses: one
    ``lookup`` per hop, a ``calculator`` call for arithmetic, then the answer. Follows the evaluation
    harness's ``Agent`` protocol (``reset(task)``, ``act(observation, info)``).

    Args:
        call_format: ``"hermes"`` (``<tool_call>`` JSON, as in the shipped gold) or ``"python"`` (shorter).
    """

    def __init__(self, call_format: str = "hermes") -> None:
        self.call_format = call_format

    def reset(self, task: Task) -> None:
        self.start(task.data["plan"])

    def start(self, plan: dict[str, Any]) -> None:
        """Starts an episode from a plan (``task.data["plan"]``)."""
        self.plan, self.chain_index, self.hop = plan, 0, 0
        self.values: list[str] = []
        self.current = self.plan["chains"][0]["start"]
        self.expected: str | None = None

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        call = ToolCall(name, arguments)
        return call.to_python() if self.call_format == "python" else call.to_hermes()

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if self.expected == "lookup" and self.chain_index < len(self.plan["chains"]):
            if not self._read_fact(observation):  # the last call was not the lookup asked for: ask again
                return self._call("lookup", {"entity": self.current})
        elif self.expected == "calculator":
            if _response_name(observation) == "calculator":
                return f"<answer>{_response_body(observation)}</answer>"
            return self._calculator_call()
        if self.chain_index < len(self.plan["chains"]):
            self.expected = "lookup"
            return self._call("lookup", {"entity": self.current})
        if self.plan["op"] is None:
            return f"<answer>{self.values[0]}</answer>"
        self.expected = "calculator"
        return self._calculator_call()

    def _calculator_call(self) -> str:
        return ToolCall(
            "calculator", {"expression": f"{self.values[0]} {self.plan['op']} {self.values[1]}"}
        ).to_hermes()

    def _read_fact(self, observation: str) -> bool:
        """Reads the fact the plan needs next from a lookup's response; False (nothing read) when the response is
        not the document of the entity asked for (an injected mistake looked up another one)."""
        chain, document = self.plan["chains"][self.chain_index], _response_body(observation)
        if not document.startswith(f"{self.current} is a "):  # another entity's document ("Lower X" for "X" too)
            return False
        if self.hop < len(chain["relations"]):
            found = read_relation(document, self.current, chain["relations"][self.hop])
            if found is None:
                return False
            self.current, self.hop = found, self.hop + 1
            if self.hop < len(chain["relations"]) or chain["attribute"]:
                return True
            self.values.append(self.current)
        else:
            value = read_attribute(document, self.current, chain["attribute"])
            if value is None:
                return False
            self.values.append(str(value))
        self.chain_index, self.hop = self.chain_index + 1, 0
        if self.chain_index < len(self.plan["chains"]):
            self.current = self.plan["chains"][self.chain_index]["start"]
        return True


def plausible_mistakes(env: MultiHopQAEnv) -> list[str]:
    """Wrong actions a careless reader could take next, for a noisy expert in the warm start
    (``sft.mistake_actions``): a lookup of, or an answer naming, any entity named in the question or in the last
    tool response. Some are the expert's own action; the demonstrator leaves that one out. A wrong lookup is
    recoverable (the oracle looks up the entity it needs again), a wrong answer ends the episode unsolved.

    Returns:
        Python-style ``lookup`` calls and ``<answer>`` actions, sorted; empty before the first reset.
    """
    if not getattr(env, "data", None):
        return []
    text = f"{env.data['question']}\n{env.last_observation}"
    names = sorted(name for name in env.kb.types if name in text)
    return [ToolCall("lookup", {"entity": n}).to_python() for n in names] + [f"<answer>{n}</answer>" for n in names]


def _response_name(observation: str) -> str | None:
    match = re.search(r'<tool_response name="([^"]*)"', observation)
    return match.group(1) if match else None


def _response_body(observation: str) -> str:
    match = re.search(r"<tool_response[^>]*>\n(.*)\n</tool_response>", observation, re.DOTALL)
    return match.group(1) if match else observation

"""Seeded synthetic knowledge bases of fictional entities, with BM25 search over their documents.

Every name is a made-up word (from closed pools, see :data:`NAME_POOLS`) and every fact is drawn per seed, so
no pretrained model has seen the facts: answering needs the tools.
A :class:`KnowledgeBase` holds people, companies, cities and countries linked by functional relations
(each entity has exactly one value per relation of its type) and numeric attributes; every entity has one
short document stating its facts in fixed sentence templates. The same seed and sizes always give the same
knowledge base (numpy ``default_rng``).

Relations (subject type -> object type):
    person.born_in -> city, person.works_for -> company, person.mentor -> person,
    company.founded_by -> person, company.headquartered_in -> city, city.country -> country,
    country.capital -> city.
Attributes: person.birth_year, company.founded_year, city.population, country.area_km2.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from typing import Any

import bm25s
import numpy as np

ENTITY_TYPES = ("person", "company", "city", "country")
RELATIONS: dict[str, tuple[str, str]] = {
    "born_in": ("person", "city"),
    "works_for": ("person", "company"),
    "mentor": ("person", "person"),
    "founded_by": ("company", "person"),
    "headquartered_in": ("company", "city"),
    "country": ("city", "country"),
    "capital": ("country", "city"),
}
ATTRIBUTES: dict[str, tuple[str, int, int]] = {  # name -> (entity type, low, high)
    "birth_year": ("person", 1900, 2000),
    "founded_year": ("company", 1850, 2020),
    "population": ("city", 10_000, 5_000_000),
    "area_km2": ("country", 1_000, 900_000),
}
# Sentence templates: the documents state facts with them and the oracle reads facts back with them.
RELATION_SENTENCES = {
    "born_in": "{s} was born in {o}.",
    "works_for": "{s} works for {o}.",
    "mentor": "The mentor of {s} is {o}.",
    "founded_by": "{s} was founded by {o}.",
    "headquartered_in": "{s} is headquartered in {o}.",
    "country": "{s} lies in {o}.",
    "capital": "The capital of {s} is {o}.",
}
ATTRIBUTE_SENTENCES = {
    "birth_year": "The birth year of {s} is {v}.",
    "founded_year": "The founding year of {s} is {v}.",
    "population": "The population of {s} is {v}.",
    "area_km2": "The area of {s} is {v} square kilometres.",
}
_SYLLABLES = ["ka", "ri", "to", "ven", "mar", "lo", "sa", "del", "qu", "in", "bra", "th", "or", "el", "ny", "ga", "fen", "dor", "ul", "vi", "sk", "ar", "mon", "tes", "pa", "lin", "ro", "cas", "zel", "hu", "ber", "na", "wy", "tor", "is", "fal", "gre", "op", "ju", "kel"]  # fmt: skip
_COMPANY_SUFFIXES = ("Labs", "Works", "Holdings", "Systems", "Foundry", "Group")
_COUNTRY_SUFFIXES = ("ia", "land", "stan", "ora")
_CITY_PREFIXES = ("Port", "New", "Upper", "Lower")
_COUNTRY_PREFIXES = ("North", "South", "East", "West")


def _name_pools(seed: int = 20261130) -> dict[str, list[str]]:
    """Closed pools of made-up words (fixed seed), so a word-level tokenizer trained on some knowledge bases
    covers the names of all of them, while the facts linking them differ per seed."""
    rng, seen, pools = np.random.default_rng(seed), set(), {}
    sizes = {"first": 48, "surname": 48, "company": 32, "city": 64, "country": 24}
    for pool, size in sizes.items():
        words: list[str] = []
        while len(words) < size:
            word = "".join(_SYLLABLES[int(i)] for i in rng.integers(len(_SYLLABLES), size=2 + int(rng.integers(2))))
            if pool == "country":
                word += _COUNTRY_SUFFIXES[int(rng.integers(len(_COUNTRY_SUFFIXES)))]
            if word not in seen:
                seen.add(word)
                words.append(word.capitalize())
        pools[pool] = words
    return pools


NAME_POOLS = _name_pools()


@dataclasses.dataclass(frozen=True)
class KBConfig:
    """Sizes of a knowledge base.

    Attributes:
        num_people, num_companies, num_cities, num_countries: entities of each type (each >= 2).
        num_distractors: extra entities whose names share a word with an existing entity of the same type,
            so that search results are ambiguous.
    """

    num_people: int = 10
    num_companies: int = 5
    num_cities: int = 6
    num_countries: int = 3
    num_distractors: int = 4

    def __post_init__(self) -> None:
        sizes = (self.num_people, self.num_companies, self.num_cities, self.num_countries)
        if min(sizes) < 2 or self.num_distractors < 0:
            raise ValueError(f"KBConfig needs >= 2 entities of each type and >= 0 distractors, got {self}")


class KnowledgeBase:
    """A generated knowledge base. Build with :func:`build_kb` (cached; treat instances as immutable).

    Attributes:
        types: entity name -> type.
        relations: (entity, relation) -> object entity name.
        attributes: (entity, attribute) -> int value.
        documents: entity name -> document text.
    """

    def __init__(self, seed: int, config: KBConfig) -> None:
        self.seed, self.config = seed, config
        rng = np.random.default_rng(seed)
        self.types: dict[str, str] = {}
        self._make_entities(rng)
        self.relations: dict[tuple[str, str], str] = {}
        self.attributes: dict[tuple[str, str], int] = {}
        self._link(rng)
        self.documents = {name: self._document(name) for name in self.types}
        self._titles = list(self.documents)
        self._retriever = bm25s.BM25()
        self._retriever.index(bm25s.tokenize(list(self.documents.values()), show_progress=False), show_progress=False)

    def __deepcopy__(self, memo: dict[int, Any]) -> KnowledgeBase:
        return self  # immutable and shared: forking an env must not copy the index

    def entities(self, entity_type: str) -> list[str]:
        """Names of the entities of one type, in generation order."""
        return [name for name, kind in self.types.items() if kind == entity_type]

    def search(self, query: str, k: int = 3) -> list[str]:
        """The names of the ``k`` documents that best match ``query`` under BM25 (Robertson et al., 2009;
        ``bm25s`` defaults), best first; empty when no query term occurs in the corpus."""
        tokens = bm25s.tokenize([query], show_progress=False, return_ids=False)
        vocab = self._retriever.vocab_dict
        ids = [[vocab[t] for t in tokens[0] if t in vocab]]
        if not ids[0]:
            return []
        docs, scores = self._retriever.retrieve(ids, k=min(k, len(self._titles)), show_progress=False)
        return [self._titles[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    def lookup(self, name: str) -> str | None:
        """The document of the entity called ``name`` (case- and space-insensitive), or None."""
        return self.documents.get(self._canonical.get(_key(name), ""))

    def close_names(self, name: str, n: int = 3) -> list[str]:
        """Entity names sharing a word with ``name``, for helpful not-found messages."""
        words = set(_key(name).split())
        return [title for title in self._titles if words & set(_key(title).split())][:n]

    @functools.cached_property
    def _canonical(self) -> dict[str, str]:
        return {_key(name): name for name in self.types}

    def _make_entities(self, rng: np.random.Generator) -> None:
        counts = {
            "person": self.config.num_people,
            "company": self.config.num_companies,
            "city": self.config.num_cities,
            "country": self.config.num_countries,
        }
        for kind in ENTITY_TYPES:
            for _ in range(counts[kind]):
                self.types[self._fresh_name(rng, kind)] = kind
        for _ in range(self.config.num_distractors):
            kind = ENTITY_TYPES[int(rng.integers(len(ENTITY_TYPES)))]
            base = self.entities(kind)[int(rng.integers(len(self.entities(kind))))]
            self.types[self._fresh_name(rng, kind, share_word_with=base)] = kind

    def _fresh_name(self, rng: np.random.Generator, kind: str, share_word_with: str | None = None) -> str:
        taken = {_key(n) for n in self.types}
        for _ in range(1000):
            name = _name(rng, kind) if share_word_with is None else _look_alike(rng, kind, share_word_with)
            if _key(name) not in taken:
                return name
        raise ValueError(f"no unused {kind} name left; use fewer entities than the name pools hold")

    def _link(self, rng: np.random.Generator) -> None:
        for name, kind in self.types.items():
            for relation, (subject_type, object_type) in RELATIONS.items():
                if subject_type == kind:
                    choices = [o for o in self.entities(object_type) if o != name]
                    self.relations[(name, relation)] = choices[int(rng.integers(len(choices)))]
            for attribute, (subject_type, low, high) in ATTRIBUTES.items():
                if subject_type == kind:
                    self.attributes[(name, attribute)] = int(rng.integers(low, high + 1))

    def _document(self, name: str) -> str:
        kind = self.types[name]
        sentences = [f"{name} is a {kind}."]
        sentences += [
            t.format(s=name, o=self.relations[(name, r)])
            for r, t in RELATION_SENTENCES.items()
            if RELATIONS[r][0] == kind
        ]
        sentences += [
            t.format(s=name, v=self.attributes[(name, a)])
            for a, t in ATTRIBUTE_SENTENCES.items()
            if ATTRIBUTES[a][0] == kind
        ]
        return " ".join(sentences)


def build_kb(seed: int, config: KBConfig | None = None) -> KnowledgeBase:
    """The knowledge base of ``seed`` and ``config`` (default sizes when None); cached, so the same
    arguments return the same object."""
    return _cached_kb(int(seed), config or KBConfig())


@functools.lru_cache(maxsize=256)
def _cached_kb(seed: int, config: KBConfig) -> KnowledgeBase:
    return KnowledgeBase(seed, config)


def read_relation(document: str, subject: str, relation: str) -> str | None:
    """Reads the object of ``relation`` for ``subject`` back from a document text, or None."""
    pattern = re.escape(RELATION_SENTENCES[relation]).replace(r"\{s\}", re.escape(subject))
    match = re.search(pattern.replace(r"\{o\}", r"(.+?)") + r"(?= [A-Z]|$)", document)
    return match.group(1) if match else None


def read_attribute(document: str, subject: str, attribute: str) -> int | None:
    """Reads a numeric attribute of ``subject`` back from a document text, or None."""
    pattern = re.escape(ATTRIBUTE_SENTENCES[attribute]).replace(r"\{s\}", re.escape(subject))
    match = re.search(pattern.replace(r"\{v\}", r"(-?\d+)"), document)
    return int(match.group(1)) if match else None


def _key(name: str) -> str:
    return " ".join(name.lower().split())


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _name(rng: np.random.Generator, kind: str) -> str:
    if kind == "person":
        return f"{_pick(rng, NAME_POOLS['first'])} {_pick(rng, NAME_POOLS['surname'])}"
    if kind == "company":
        return f"{_pick(rng, NAME_POOLS['company'])} {_pick(rng, _COMPANY_SUFFIXES)}"
    return _pick(rng, NAME_POOLS[kind])


def _look_alike(rng: np.random.Generator, kind: str, base: str) -> str:
    """A name sharing a word with ``base``: same first name, same company stem, or a prefixed place name."""
    if kind == "person":
        return f"{base.split()[0]} {_pick(rng, NAME_POOLS['surname'])}"
    if kind == "company":
        return f"{base.split()[0]} {_pick(rng, _COMPANY_SUFFIXES)}"
    prefixes = _CITY_PREFIXES if kind == "city" else _COUNTRY_PREFIXES
    return f"{_pick(rng, prefixes)} {base.split()[-1]}"

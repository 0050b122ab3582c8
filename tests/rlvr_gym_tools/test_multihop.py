"""tools/MultiHopQA-v0: knowledge bases, questions, tools, the oracle and the shipped suites."""

from __future__ import annotations

import time

import pytest
from rlvr_gym_tools.kb import KBConfig, build_kb, read_attribute, read_relation
from rlvr_gym_tools.multihop import MultiHopOracle, MultiHopQAEnv, generate_task_data
from rlvr_gym_tools.suites import multihop_task, run_oracle

import rlvr_gym
from rlvr_gym import FailureKind, load_suite


def test_kb_is_seeded_and_documents_state_every_fact() -> None:
    kb, again, other = build_kb(5), build_kb(5, KBConfig()), build_kb(6)
    assert kb is again and kb.documents != other.documents
    assert len(kb.types) == 10 + 5 + 6 + 3 + 4
    for (subject, relation), obj in kb.relations.items():
        assert read_relation(kb.documents[subject], subject, relation) == obj
    for (subject, attribute), value in kb.attributes.items():
        assert read_attribute(kb.documents[subject], subject, attribute) == value


def test_kb_search_and_lookup() -> None:
    kb = build_kb(5)
    person = kb.entities("person")[0]
    assert kb.search(person)[0] == person
    assert kb.search("qqqq zzzz") == []
    assert kb.lookup(person.upper()) == kb.documents[person]
    assert kb.lookup("Nobody Here") is None


def test_generated_data_is_a_pure_function_of_its_arguments() -> None:
    assert generate_task_data(3, 2, "entity") == generate_task_data(3, 2, "entity")
    assert generate_task_data(3, 2, "entity") != generate_task_data(4, 2, "entity")
    data = generate_task_data(11, 3, "arithmetic")
    assert len(data["plan"]["chains"]) == 2 and data["plan"]["op"] in "+-"
    with pytest.raises(ValueError, match="kind"):
        generate_task_data(1, 2, "poem")


def test_tools_respond_and_report_errors() -> None:
    env = rlvr_gym.make("tools/MultiHopQA-v0")
    task = multihop_task(0, "test", 2, "entity")
    obs, info = env.reset(options={"task": task})
    assert task.data["question"] in obs
    assert [t["function"]["name"] for t in info["tools"]] == ["search", "lookup", "calculator", "python"]
    start = task.data["plan"]["chains"][0]["start"]
    obs, *_ = env.step(f'search(query="{start}", k=2)')
    assert obs.count(" is a ") >= 1 and start in obs
    obs, _, _, _, info = env.step('lookup(entity="Nobody Here")')
    assert "no entity named 'Nobody Here'" in obs and info["failure"].kind is FailureKind.TOOL_ERROR
    obs, _, _, _, info = env.step('search(query="x", k=9)')
    assert info["failure"].kind is FailureKind.INVALID_ACTION and "9 is greater than the maximum of 5" in obs
    obs, *_ = env.step('calculator(expression="(2 + 3) * 4")')
    assert "\n20\n" in obs


def test_gold_and_wrong_on_the_shipped_test_suite() -> None:
    suite = load_suite("tools/multihop_test")
    assert len(suite) >= 100
    env = rlvr_gym.make("tools/MultiHopQA-v0")
    for task in list(suite)[:30]:
        for actions, expected in ((task.gold, 1.0), (task.wrong, 0.0)):
            env.reset(options={"task": task})
            total = sum(env.step(a).reward for a in actions)
            assert total == expected, task.id


def test_oracle_solves_500_generated_tasks_quickly() -> None:
    env, oracle = MultiHopQAEnv(enable_python=False), MultiHopOracle()
    start, solved = time.perf_counter(), 0
    kinds = ("entity", "attribute", "arithmetic")
    for i in range(500):
        task = multihop_task(10_000 + i, "train", 1 + i % 4, kinds[i % 3], KBConfig(num_distractors=i % 6))
        _, total = run_oracle(env, oracle, task)
        solved += total == 1.0
    elapsed = time.perf_counter() - start
    assert solved == 500
    assert elapsed < 60, f"500 oracle episodes took {elapsed:.1f} s"


def test_seeded_episodes_without_a_task_are_deterministic_and_forkable() -> None:
    env = MultiHopQAEnv(hops=3, question_kinds=("attribute",))
    first, _ = env.reset(seed=7)
    second, _ = MultiHopQAEnv(hops=3, question_kinds=("attribute",)).reset(seed=7)
    assert (
        first == second
        and "birth year" in first
        or "founding year" in first
        or "population" in first
        or "area" in first
    )
    env.step('lookup(entity="x")')
    child = env.fork()
    assert child.kb is env.kb  # the knowledge base is shared, not copied
    assert child.step(f"<answer>{env.answer}</answer>").reward == 1.0
    assert env.step("<answer>wrong</answer>").reward == 0.0


def test_bad_knobs() -> None:
    with pytest.raises(ValueError, match="hops"):
        MultiHopQAEnv(hops=0)
    with pytest.raises(ValueError, match="question_kinds"):
        MultiHopQAEnv(question_kinds=("riddle",))
    with pytest.raises(ValueError, match="KBConfig"):
        KBConfig(num_people=1)


def test_oracle_action_solves_seeded_episodes_with_python_calls() -> None:
    env = MultiHopQAEnv(hops=3, enable_python=False)
    for seed in range(20):
        env.reset(seed=seed)
        total, actions = 0.0, []
        while True:
            action = env.oracle_action()
            actions.append(action)
            result = env.step(action)
            total += result.reward
            if result.terminated or result.truncated:
                break
        assert total == 1.0, (seed, actions)
        assert actions[0].startswith("lookup(entity=")


def test_easy_suites_have_only_entity_questions_of_one_or_two_hops() -> None:
    for name in ("tools/multihop_easy_train", "tools/multihop_easy_test"):
        suite = load_suite(name)
        assert {t.metadata["kind"] for t in suite} == {"entity"}
        assert {t.metadata["hops"] for t in suite} == {1, 2}


def test_names_come_from_closed_pools() -> None:
    from rlvr_gym_tools.kb import NAME_POOLS

    words = {w for pool in NAME_POOLS.values() for w in pool}
    for seed in range(20):
        for name in build_kb(seed).types:
            assert set(name.split()) & words, name


def test_tag_format_episode() -> None:
    env = MultiHopQAEnv(action_formats=("tags",), enable_python=False)
    task = multihop_task(0, "test", 1, "entity")
    env.reset(options={"task": task})
    start = task.data["plan"]["chains"][0]["start"]
    obs, _, _, _, info = env.step(f"<lookup>{start}</lookup>")
    assert "failure" not in info and start in obs
    assert env.step(f"<answer>{task.data['answer']}</answer>").reward == 1.0


def test_plausible_mistakes_name_the_entities_in_sight() -> None:
    from rlvr_gym_tools.multihop import plausible_mistakes

    env = MultiHopQAEnv(hops=2, question_kinds=("entity",), enable_python=False)
    assert plausible_mistakes(env) == []  # before the first reset
    env.reset(seed=3)
    start = env.data["plan"]["chains"][0]["start"]
    assert plausible_mistakes(env) == [f"lookup(entity={start!r})", f"<answer>{start}</answer>"]
    env.step(env.oracle_action())
    document = env.kb.lookup(start)
    named = sorted(name for name in env.kb.types if name in document or name in env.data["question"])
    assert len(named) >= 3  # the subject and the objects of its relations
    assert plausible_mistakes(env) == ([f"lookup(entity={n!r})" for n in named] + [f"<answer>{n}</answer>" for n in named])


def test_oracle_recovers_after_looking_up_the_wrong_entity() -> None:
    for seed in range(20):
        env = MultiHopQAEnv(hops=2, question_kinds=("entity",), enable_python=False)
        env.reset(seed=seed)
        env.step(env.oracle_action())  # the start entity's document
        needed = env.oracle_action()  # the second hop's lookup
        wrong = next(n for n in sorted(env.kb.types) if n in env.last_observation and repr(n) not in needed)
        env.step(f"lookup(entity={wrong!r})")  # an injected mistake: another entity of the response
        assert env.oracle_action() == needed  # the oracle asks for the document it needs again
        result = env.step(needed)
        result = env.step(env.oracle_action())
        assert result.terminated and result.reward == 1.0, seed


def test_oracle_does_not_read_a_look_alike_entitys_document() -> None:
    from rlvr_gym_tools.suites import generate_easy_tasks

    task = generate_easy_tasks("tools/MultiHopQA-v0", "train", 1, 565)[0]  # ... the birth city of Rodoror Skri?
    env = MultiHopQAEnv(enable_python=False)
    env.reset(options={"task": task})
    env.step(env.oracle_action())
    needed = env.oracle_action()
    assert needed == "lookup(entity='Brawy')"
    env.step("lookup(entity='Isskhu Group')")
    env.step("lookup(entity='Lower Brawy')")  # "Lower Brawy lies in East Wytoland." also matches "Brawy lies in ..."
    assert env.oracle_action() == needed
    env.step(needed)
    result = env.step(env.oracle_action())
    assert result.terminated and result.reward == 1.0

"""HumanEval envs, the judge, the codec, code extraction and mutants."""

from __future__ import annotations

import math

import pytest
from rlvr_gym_code import codec
from rlvr_gym_code.batch import judge_many
from rlvr_gym_code.extract import extract_code
from rlvr_gym_code.humaneval import assemble_program, humaneval_tests, load_humaneval
from rlvr_gym_code.judge import judge_python
from rlvr_gym_code.mutants import mutate

import rlvr_gym
from rlvr_gym import FailureKind, load_suite

SAMPLE = 20  # problems in the fast tier; the full 164 run is marked slow


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    return load_humaneval()


def test_extract_code() -> None:
    assert extract_code("Here:\n```python\nx = 1\n```\nand\n```python\ny = 2\n```") == "y = 2"
    assert extract_code("```\nplain\n```") == "plain"
    assert extract_code("```bash\nls\n```\n```py\nz = 3\n```") == "z = 3"
    assert extract_code("```python\nunclosed = True\n") == "unclosed = True"
    assert extract_code("def f():\n    return 1\n") == "def f():\n    return 1"
    assert extract_code("```js\nvar a;\n```") == "var a;"


def test_codec_round_trip_and_strictness() -> None:
    value = [1, 2.5, "s", None, True, (1, 2), {"k": [3]}, {4, 5}, frozenset({6}), b"\x00", 1 + 2j, float("inf")]
    back = codec.decode(codec.loads(codec.dumps({"v": codec.encode(value)}))["v"])
    assert back == value and type(back[5]) is tuple and type(back[7]) is set
    assert math.isnan(codec.decode(codec.loads(codec.dumps({"v": codec.encode(float("nan"))}))["v"]))
    for bad in ({"x": 1}, {"l": 1}, {"d": [[{"l": []}, 1]]}, {"l": [], "t": []}, [1, 2]):
        with pytest.raises(codec.CodecError):
            codec.decode(bad)
    with pytest.raises(codec.CodecError):
        codec.encode(object())
    with pytest.raises(codec.CodecError):
        codec.loads(b"1" * 5000)  # an integer longer than Python's 4300-digit limit


def test_assemble_program_accepts_full_function_or_completion(problems) -> None:  # type: ignore[no-untyped-def]
    p = problems[0]
    body = p["canonical_solution"]
    full = "def has_close_elements(numbers, threshold):\n    return any(abs(a - b) < threshold for i, a in " \
           "enumerate(numbers) for b in numbers[i + 1:])\n"
    assert assemble_program(p["prompt"], p["entry_point"], body) == p["prompt"] + body
    assert assemble_program(p["prompt"], p["entry_point"], full).startswith(p["prompt"])
    assert judge_python(assemble_program(p["prompt"], p["entry_point"], full), humaneval_tests(p)).passed


def test_mutants() -> None:
    src = "def f(x):\n    '''doc'''\n    if x < 3:\n        return x + 1\n    return 0\n"
    # breadth-first: the top-level `return 0` comes before the constants nested in the `if`
    assert mutate(src, "f", "off_by_one") == "def f(x):\n    \"\"\"doc\"\"\"\n    if x < 3:\n        return x + 1\n    return 1"
    assert "x <= 3" in mutate(src, "f", "flip_compare")  # type: ignore[operator]
    assert "x - 1" in mutate(src, "f", "swap_arith")  # type: ignore[operator]
    assert mutate(src, "f", "return_none").endswith("return None")  # type: ignore[union-attr]
    assert mutate(src, "g", "off_by_one") is None
    with pytest.raises(ValueError, match="unknown mutation"):
        mutate(src, "f", "delete")


def test_canonical_pass_and_wrong_fail_on_a_sample() -> None:
    suite = load_suite("code/humaneval")
    sample = [suite[i] for i in range(0, len(suite), len(suite) // SAMPLE)][:SAMPLE]
    gold = judge_many([(_program(t, t.gold[0]), humaneval_tests(t.data)) for t in sample],  # type: ignore[index]
                      batch_size=10, max_workers=2)
    wrong = judge_many([(_program(t, t.wrong[0]), humaneval_tests(t.data)) for t in sample],  # type: ignore[index]
                       batch_size=10, max_workers=2)
    assert [r.passed for r in gold] == [True] * len(sample), [r.reason for r in gold if not r.passed]
    assert [r.passed for r in wrong] == [False] * len(sample)
    assert all(r.num_asserts >= 1 and r.num_calls >= 1 for r in gold)


def _program(task: rlvr_gym.Task, action: str) -> str:
    return assemble_program(task.data["prompt"], task.data["entry_point"], extract_code(action))


def test_single_turn_env_rewards_and_feedback() -> None:
    suite = load_suite("code/humaneval")
    env = rlvr_gym.make("code/HumanEval-v0")
    obs, info = env.reset(options={"task": suite[0]})
    assert "has_close_elements" in obs and "check(" not in obs  # the hidden tests are not shown
    _, reward, terminated, truncated, info = env.step(suite[0].gold[0])  # type: ignore[index]
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert info["reward_details"]["components"]["passed"] == 1.0
    env.reset(options={"task": suite[0]})
    obs, reward, terminated, _, info = env.step("I don't know")
    assert reward == 0.0 and terminated and info["failure"].kind is FailureKind.PARSE_ERROR
    env.close()


def test_refine_env_gives_the_failing_test_then_accepts_a_fix() -> None:
    task = load_suite("code/humaneval_refine")[0]
    env = rlvr_gym.make("code/HumanEval-Refine-v0")
    env.reset(options={"task": task})
    obs, reward, terminated, truncated, info = env.step(task.wrong[0])  # type: ignore[index]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert "test failed" in obs and "assert candidate(" in obs
    obs, reward, terminated, truncated, info = env.step(task.gold[0])  # type: ignore[index]
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    env.reset(options={"task": task})
    for _ in range(4):
        _, reward, terminated, truncated, info = env.step(task.wrong[0])  # type: ignore[index]
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["failure"].kind is FailureKind.TURN_LIMIT


@pytest.mark.parametrize("env_id", ["code/HumanEval-v0", "code/HumanEval-Refine-v0"])
def test_conformance(env_id: str) -> None:
    from rlvr_gym.testing import check_env

    report = check_env(env_id, num_tasks=1)
    assert all(r.status != "failed" for r in report.results)


@pytest.mark.slow
def test_all_164_canonical_pass_and_two_wrong_variants_fail() -> None:
    suite = load_suite("code/humaneval")
    assert len(suite) == 164
    gold = judge_many([(_program(t, t.gold[0]), humaneval_tests(t.data)) for t in suite], batch_size=8)  # type: ignore[index]
    mutants = judge_many([(_program(t, t.wrong[0]), humaneval_tests(t.data)) for t in suite], batch_size=8)  # type: ignore[index]
    nones = judge_many([(mutate(_program(t, t.gold[0]), t.data["entry_point"], "return_none"),  # type: ignore[misc,index]
                         humaneval_tests(t.data)) for t in suite], batch_size=8)
    assert sum(r.passed for r in gold) == 164, [t.id for t, r in zip(suite, gold) if not r.passed]
    assert sum(r.passed for r in mutants) == 0
    assert sum(r.passed for r in nones) == 0


def test_judge_needs_an_interactive_back_end() -> None:
    from rlvr_gym_code.judge import interactive_sandbox

    from rlvr_gym.sandbox import SandboxUnavailableError

    class OneShot:
        name = "docker"

        def run(self, argv):  # type: ignore[no-untyped-def]
            raise AssertionError("not used")

    assert interactive_sandbox("bwrap").name == "bwrap"
    with pytest.raises(SandboxUnavailableError, match="interactive sessions"):
        interactive_sandbox(OneShot())  # type: ignore[arg-type]


def _still_running(before: set[int]) -> list[object]:
    """This process's children that are not in ``before`` and still run (zombies waiting for a reap do not)."""
    import psutil

    return [p for p in psutil.Process().children() if p.pid not in before and p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]


def test_persistent_sandbox_gives_the_same_verdicts_forks_and_closes() -> None:
    import psutil

    suite = load_suite("code/humaneval_refine")
    env = rlvr_gym.make("code/HumanEval-Refine-v0", persistent_sandbox=True)
    me = psutil.Process()
    # processes other tests left running (multiprocessing's resource tracker) are not this env's
    before = {p.pid for p in me.children()}
    env.reset(options={"task": suite[1]})
    assert env.step(suite[1].wrong[0]).reward == 0.0  # type: ignore[index]
    zygote = env.batch_judge()._session  # type: ignore[attr-defined]
    assert zygote is not None and {c.pid for c in me.children()} - before  # one long-lived sandbox
    clone = env.fork()
    assert clone._batch is None  # type: ignore[attr-defined]
    assert env.step(suite[1].gold[0]).reward == 1.0  # type: ignore[index]
    assert env.batch_judge()._session is zygote  # type: ignore[attr-defined]  # reused, not restarted
    assert clone.step(suite[1].gold[0]).reward == 1.0  # type: ignore[index]
    env.reset(options={"task": suite[2]})
    assert env.step("```python\nimport os\nos.kill(os.getppid(), 9)\n```").reward == 0.0  # kills its zygote
    assert env.step(suite[2].gold[0]).reward == 1.0  # type: ignore[index]  # a new zygote takes over
    env.close()
    clone.close()
    assert _still_running(before) == []


def test_envs_made_inside_hold_shared_resources_judge_in_the_shared_warm_sandboxes() -> None:
    import threading

    import psutil
    from rlvr_gym_code.batch import shared_judges
    from rlvr_gym_code.humaneval import HumanEvalEnv

    suite = load_suite("code/humaneval_refine")
    me = psutil.Process()
    before = {p.pid for p in me.children()}
    assert shared_judges() is None
    with HumanEvalEnv.hold_shared_resources() as pool, HumanEvalEnv.hold_shared_resources() as nested:
        assert shared_judges() is pool is nested
        zygotes = []
        for task, action, reward in [(suite[1], suite[1].wrong[0], 0.0), (suite[2], suite[2].gold[0], 1.0)]:  # type: ignore[index]
            env = rlvr_gym.make("code/HumanEval-Refine-v0")  # one env per episode, as the trainer makes them
            env.reset(options={"task": task})
            assert env.step(action).reward == reward
            env.close()
            (judge,) = pool._idle[(env.backend, env.limits)]  # type: ignore[attr-defined]
            zygotes.append(judge._session)
        assert zygotes[0] is not None and zygotes[0] is zygotes[1]  # the second episode reused the first's
        # concurrent steps borrow different judges, and each verdict is its own program's
        envs = [rlvr_gym.make("code/HumanEval-Refine-v0") for _ in range(3)]
        for env in envs:
            env.reset(options={"task": suite[1]})
        actions = [suite[1].gold[0], suite[1].wrong[0], suite[1].gold[0]]  # type: ignore[index]
        rewards: list[float] = [0.0] * 3
        barrier = threading.Barrier(3)

        def step(i: int) -> None:
            barrier.wait()
            rewards[i] = envs[i].step(actions[i]).reward

        threads = [threading.Thread(target=step, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert rewards == [1.0, 0.0, 1.0]
        assert 1 <= len(pool._idle[(envs[0].backend, envs[0].limits)]) <= 3  # type: ignore[attr-defined]
        for env in envs:
            env.close()
        # an explicit persistent_sandbox=False still starts a fresh sandbox per step
        fresh = rlvr_gym.make("code/HumanEval-Refine-v0", persistent_sandbox=False)
        with fresh.step_judge() as judge:  # type: ignore[attr-defined]
            assert judge is None
        fresh.close()
    assert shared_judges() is None  # the last holder left: its sandboxes are stopped
    assert _still_running(before) == []


def test_an_env_worker_holds_the_judge_pool_until_shutdown() -> None:
    import psutil
    from rlvr_gym_code.batch import shared_judges

    from rlvr_gym.workers import EnvWorker

    suite = load_suite("code/humaneval_refine")
    me = psutil.Process()
    before = {p.pid for p in me.children()}
    worker = EnvWorker(max_idle_envs=0)  # the body of a Ray env worker, run here in process
    zygotes = []
    for task in suite[1:3]:
        handle, _ = worker.create("code/HumanEval-Refine-v0", {})
        worker.reset(handle, None, {"task": task})
        assert worker.step(handle, task.gold[0]).reward == 1.0  # type: ignore[index]
        worker.close_env(handle)  # not parked (max_idle_envs 0): closed
        pool = shared_judges()
        assert pool is not None
        zygotes.append(next(iter(pool._idle.values()))[0]._session)  # type: ignore[attr-defined]
    assert zygotes[0] is not None and zygotes[0] is zygotes[1]  # a new env, the same warm sandbox
    worker.shutdown()
    assert shared_judges() is None
    assert _still_running(before) == []


def test_a_program_cannot_leave_anything_to_a_later_episode_in_the_shared_pool() -> None:
    """Episode A (a passing answer with a side effect) tries to leave a trace for episode B judged later in the
    same pooled sandbox: a directory chmod-ed to 0 (rmtree cannot enter it), a lowered memory limit or a nice
    value set on the zygote with prlimit(2) / setpriority(2), a POSIX message queue, a key in the user keyring.
    B must see a clean sandbox, as a fresh one."""
    from rlvr_gym_code.humaneval import HumanEvalEnv

    task = load_suite("code/synth-test")[0]  # f(xs) = [x * 2 for x in xs if x < 7]
    gold = "def f(xs):\n    return [x * 2 for x in xs if x < 7]\n"
    plants = [
        ("import os\nfor d in ('/tmp', '/workspace', '/dev/shm'):\n    os.makedirs(d + '/hideout', exist_ok=True)\n"
         "    open(d + '/hideout/secret', 'w').write('x')\n    os.chmod(d + '/hideout', 0)\n"),
        "import os, resource\nresource.prlimit(os.getppid(), resource.RLIMIT_AS, (150 * 2**20, 150 * 2**20))\n",
        "import os\nos.setpriority(os.PRIO_PROCESS, os.getppid(), 19)\n",
        ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"  # a POSIX message queue, a key (x86_64)
         "libc.mq_open(b'/leak', os.O_CREAT | os.O_RDWR, 0o600, None)\n"
         "if os.uname().machine == 'x86_64':\n    libc.syscall(248, b'user', b'leak', b'A', 1, ctypes.c_int(-4))\n"),
    ]
    # B passes only in a clean sandbox: no hideout, 200 MB allocatable (the limit is 1024 MB), nice 0
    probe = ("import os\n_buf = bytearray(200 * 2**20)\n"
             "_dirty = any(os.path.exists(d + '/hideout') for d in ('/tmp', '/workspace', '/dev/shm'))\n"
             "_dirty = _dirty or os.getpriority(os.PRIO_PROCESS, 0) != 0\n"
             "import ctypes\n_libc = ctypes.CDLL(None, use_errno=True)\n"
             "_dirty = _dirty or _libc.mq_open(b'/leak', os.O_RDONLY, 0, None) >= 0\n"
             "_dirty = _dirty or (os.uname().machine == 'x86_64'\n"
             "                    and _libc.syscall(250, 10, ctypes.c_int(-4), b'user', b'leak', 0) > 0)\n"
             "def f(xs):\n    return ['dirty'] if _dirty else [x * 2 for x in xs if x < 7]\n")
    with HumanEvalEnv.hold_shared_resources():
        for plant in plants:
            for action, reward in [(plant + gold, 1.0), (probe, 1.0)]:
                env = rlvr_gym.make("code/Synth-v0")
                env.reset(options={"task": task})
                step = env.step(action)
                env.close()
                assert step.reward == reward, (plant, step.observation)


def test_a_pooled_sandbox_outlives_the_thread_that_first_judged_in_it() -> None:
    import threading

    from rlvr_gym_code.humaneval import HumanEvalEnv

    task = load_suite("code/synth-test")[0]
    with HumanEvalEnv.hold_shared_resources() as pool:
        def episode() -> None:
            env = rlvr_gym.make("code/Synth-v0")
            env.reset(options={"task": task})
            assert env.step(task.gold[0]).reward == 1.0  # type: ignore[index]
            env.close()

        thread = threading.Thread(target=episode)  # as an evaluation's step threads, which end with it
        thread.start()
        thread.join()
        (judge,) = next(iter(pool._idle.values()))  # type: ignore[attr-defined]
        assert judge._session.proc.poll() is None  # bwrap dies with the thread that started it: not this one

"""Bad input to ``rlvr-gym train`` fails before any work with one line that says how to fix it, never a traceback.

Each test runs :func:`rlvr_gym_agents.cli.train_main` in-process and reads stderr; the last one runs ``rlvr-gym train``
in a subprocess to show the exit status end to end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest
from rlvr_gym_agents.cli import train_main
from rlvr_gym_agents.policy.transformers import UnknownModelError, check_model_source
from rlvr_gym_agents.rollout.types import RolloutBatch, Trajectory
from rlvr_gym_agents.train import LOST_STEPS_LIMIT, TrainingError, check_not_all_crashed

from rlvr_gym import Env, Failure, FailureKind, Task, TaskSuite
from rlvr_gym.testing import temporary_env
from rlvr_gym.testing.toy import echo_tasks

CRASH_ENV_MODULE = '''
from rlvr_gym import Env, register


class CrashEnv(Env):
    """Raises in every reset, as an env whose simulator is missing."""

    def _reset(self, task):
        raise RuntimeError("the crash simulator is not installed")

    def _step(self, action):
        raise AssertionError("never reached")


register("testing/Crash-v0", CrashEnv, max_turns=2)
'''


class CrashEnv(Env):
    """Raises in every reset, as an env whose simulator is missing."""

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        raise RuntimeError("the crash simulator is not installed")

    def _step(self, action: str) -> Any:
        raise AssertionError("never reached")


def _overrides(tmp_path: Path, model: Path | str, *extra: str) -> list[str]:
    """A two-step Echo run in ``tmp_path/run`` (the model is not built: every test fails before or at step 1)."""
    if not (tmp_path / "train.jsonl").is_file():
        TaskSuite("train", echo_tasks(8, "train")).save(tmp_path / "train.jsonl")
        TaskSuite("test", echo_tasks(4, "test")).save(tmp_path / "test.jsonl")
    return [f"model.path_or_id={model}", "env.env_id=testing/Echo-v0", f"env.train_suite={tmp_path / 'train.jsonl'}",
            f"env.test_suite={tmp_path / 'test.jsonl'}", "sft.enabled=false", "rollout.max_new_tokens=4",
            "train.tasks_per_step=2", "train.group_size=2", "train.num_steps=2", "eval.num_tasks=2", "eval.k=1",
            "eval.greedy=false", f"output.dir={tmp_path / 'run'}", "output.progress=false", "output.tensorboard=false",
            "model.num_threads=1", *extra]


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str], status: int = 2) -> str:
    """Runs ``train_main(argv)``, checks its exit status and that stderr is one ``rlvr-gym train:`` message."""
    assert train_main(argv) == status
    err = capsys.readouterr().err
    assert "rlvr-gym train: " in err and "Traceback" not in err
    return err


def test_malformed_yaml_names_file_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("seed: 1\ntrain:\n  num_steps: [3\n  group_size: 4\n", encoding="utf-8")
    err = _fails([str(recipe)], capsys)
    assert f"{recipe}:4:13: malformed YAML" in err  # where the parser gave up (1-based line and column)
    assert "flow sequence that starts at line 3, column 14" in err  # ... and the bracket that was never closed
    recipe.write_text("train:\n\tnum_steps: 3\n", encoding="utf-8")
    assert f"{recipe}:2:1: malformed YAML: found character '\\t'" in _fails([str(recipe)], capsys)
    err = _fails([str(tmp_path / "missing.yaml")], capsys)
    assert f"recipe {tmp_path / 'missing.yaml'} not found" in err


def test_malformed_override_and_unknown_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "empty.yaml"
    recipe.write_text("{}\n", encoding="utf-8")
    assert "override 'train.num_steps=[3': malformed YAML" in _fails([str(recipe), "train.num_steps=[3"], capsys)
    assert "Did you mean train.num_steps?" in _fails([str(recipe), "train.num_step=3"], capsys)


def test_unknown_env_id_suggests_the_closest(tiny_model_dir: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    err = _fails([str(_empty_recipe(tmp_path)),
                  *_overrides(tmp_path, tiny_model_dir, "env.env_id=testing/Ecko-v0")], capsys)
    assert "No env `testing/Ecko-v0`. Closest registered ids: testing/Echo-v0" in err
    assert not (tmp_path / "run").exists()  # before any work


def test_a_suite_task_of_an_unknown_env_fails_before_training(tiny_model_dir: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    tasks = [Task(id=f"t{i}", env_id="testing/Echo-v9", data={"target": "egg"}) for i in range(4)]
    TaskSuite("typo", tasks).save(tmp_path / "typo.jsonl")
    err = _fails([str(_empty_recipe(tmp_path)),
                  *_overrides(tmp_path, tiny_model_dir, f"env.train_suite={tmp_path / 'typo.jsonl'}")], capsys)
    assert "No env `testing/Echo-v9`. Closest registered ids: testing/Echo-v0" in err
    assert not (tmp_path / "run").exists()


def test_unknown_suite_suggests_the_closest(tiny_model_dir: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    err = _fails([str(_empty_recipe(tmp_path)), *_overrides(tmp_path, tiny_model_dir, "env.test_suite=testing/ecko")],
                 capsys)
    assert "no suite 'testing/ecko'; did you mean testing/echo?" in err
    err = _fails([str(_empty_recipe(tmp_path)),
                  *_overrides(tmp_path, tiny_model_dir, f"env.train_suite={tmp_path / 'nope.jsonl'}")], capsys)
    assert f"suite file {tmp_path / 'nope.jsonl'} not found" in err


def _fake_hub_cache(root: Path, *model_ids: str) -> Path:
    """A Hugging Face cache layout holding ``config.json`` of each model (enough for ``try_to_load_from_cache``)."""
    for model_id in model_ids:
        folder = root / f"models--{model_id.replace('/', '--')}"
        (folder / "refs").mkdir(parents=True)
        (folder / "refs" / "main").write_text("abc123", encoding="utf-8")
        (folder / "snapshots" / "abc123").mkdir(parents=True)
        (folder / "snapshots" / "abc123" / "config.json").write_text("{}", encoding="utf-8")
    return root


def test_unknown_hub_model_names_the_closest_cached_models(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _fake_hub_cache(tmp_path / "hub", "Qwen/Qwen2.5-0.5B-Instruct", "gpt2")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    err = _fails([str(_empty_recipe(tmp_path)), *_overrides(tmp_path, "Qwen/Qwen2.5-0.5B-Instuct")], capsys)
    assert ("could not load hub model 'Qwen/Qwen2.5-0.5B-Instuct': it is not a local model directory, not in the "
            "Hugging Face cache") in err
    assert "HF_HUB_OFFLINE is set" in err and "Did you mean Qwen/Qwen2.5-0.5B-Instruct (cached)?" in err
    assert "hf download Qwen/Qwen2.5-0.5B-Instuct" in err
    assert not (tmp_path / "run").exists()
    check_model_source("Qwen/Qwen2.5-0.5B-Instruct")  # a cached model passes, offline too


def test_a_hub_that_cannot_be_reached_is_an_unknown_model_at_once(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(_fake_hub_cache(tmp_path / "hub", "gpt2")))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "model_info", unreachable)
    with pytest.raises(UnknownModelError, match=r"the hub could not be reached \(ConnectionError\)\. Cached models: gpt2"):
        check_model_source("someone/some-model")
    monkeypatch.setattr(huggingface_hub, "model_info", lambda *args, **kwargs: None)  # the hub has it: download
    check_model_source("someone/some-model")


def test_missing_local_model_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _fails([str(_empty_recipe(tmp_path)), *_overrides(tmp_path, tmp_path / "no" / "such" / "model")], capsys)
    assert f"model path {tmp_path / 'no' / 'such' / 'model'} does not exist (expected a model directory)" in err


def test_a_step_in_which_every_episode_crashed_stops_the_run(tiny_model_dir: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    _crash_suites(tmp_path)
    with temporary_env("testing/Crash-v0", CrashEnv, max_turns=2):
        err = _fails([str(_empty_recipe(tmp_path)),
                      *_overrides(tmp_path, tiny_model_dir, "env.env_id=testing/Crash-v0",
                                  f"env.train_suite={tmp_path / 'crash-train.jsonl'}",
                                  f"env.test_suite={tmp_path / 'crash-test.jsonl'}")], capsys, status=1)
    assert ("rlvr-gym train: every episode of RL step 1 crashed (4 episodes of testing/Crash-v0); the first: "
            "env raised in reset(): RuntimeError: the crash simulator is not installed") in err


def test_rlvr_gym_train_exit_status_end_to_end(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``rlvr-gym train`` in a fresh process: exit 1 and one line on stderr when every episode crashed."""
    (tmp_path / "crash_env_module.py").write_text(CRASH_ENV_MODULE, encoding="utf-8")
    _crash_suites(tmp_path)
    argv = [sys.executable, "-m", "rlvr_gym.cli", "train", str(_empty_recipe(tmp_path)),
            *_overrides(tmp_path, tiny_model_dir, "env.env_id=crash_env_module:testing/Crash-v0",
                        f"env.train_suite={tmp_path / 'crash-train.jsonl'}",
                        f"env.test_suite={tmp_path / 'crash-test.jsonl'}")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "rlvr-gym train: every episode of RL step 1 crashed" in done.stderr
    assert "the crash simulator is not installed" in done.stderr and "Traceback" not in done.stderr


def _empty_recipe(tmp_path: Path) -> Path:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("seed: 3\n", encoding="utf-8")
    return recipe


def _crash_suites(tmp_path: Path) -> None:
    for split in ("train", "test"):
        tasks = [Task(id=f"crash-{split}-{i}", env_id="testing/Crash-v0") for i in range(4)]
        TaskSuite(split, tasks).save(tmp_path / f"crash-{split}.jsonl")


def test_train_from_python_fails_on_a_bad_env_id_before_any_ray_actor_starts(tiny_model_dir: Path,
                                                                        tmp_path: Path) -> None:
    import ray
    from rlvr_gym_agents.config import load_config
    from rlvr_gym_agents.train import train

    from rlvr_gym import UnknownEnvError

    config = load_config(None, _overrides(tmp_path, tiny_model_dir, "env.env_id=testing/Ecko-v0", "env.num_workers=2",
                                          "cluster.rollout_workers=1", "cluster.learners=2"))
    was_running = ray.is_initialized()
    with pytest.raises(UnknownEnvError, match="testing/Echo-v0"):
        train(config)
    assert ray.is_initialized() == was_running  # no env pool, rollout worker or learner rank was started
    assert not (tmp_path / "run").exists()


def _lost_batch(kind: str, worker_detail: bool, tokens: int = 0) -> RolloutBatch:
    details = {"rollout_worker": 0, "timeout_s": 5.0} if worker_detail else {}
    failure = Failure(FailureKind(kind), "rollout worker 0 did not return its shard within 5 s (hung)", details)
    return RolloutBatch([Trajectory(f"t{i}", "testing/Echo-v0", truncated=True, failures=[failure], group=i // 2)
                         for i in range(4)], tokens_generated=tokens)


def test_steps_lost_with_their_rollout_workers_stop_the_run_only_when_in_a_row() -> None:
    assert LOST_STEPS_LIMIT == 3
    lost = _lost_batch("timeout", worker_detail=True)
    assert check_not_all_crashed(lost, 5, 0) == 1 and check_not_all_crashed(lost, 6, 1) == 2
    assert check_not_all_crashed(_lost_batch("timeout", True, tokens=7), 7, 2) == 0  # a step that generated resets
    assert check_not_all_crashed(_lost_batch("env_crash", True), 8, 0) == 1  # a worker that died, restarted
    with pytest.raises(TrainingError, match=r"every episode of RL steps 7-9 was lost with its rollout worker \(4 "
                                            r"episodes of testing/Echo-v0 per step\).*\(hung\)"):
        check_not_all_crashed(lost, 9, 2)
    with pytest.raises(TrainingError, match="every episode of RL step 3 crashed"):  # the env's own crash: at once
        check_not_all_crashed(_lost_batch("env_crash", worker_detail=False), 3, 0)
    assert check_not_all_crashed(_lost_batch("timeout", worker_detail=False), 3, 0) == 0  # env timeouts: learnable

"""GPU check: a ~110M-parameter Qwen2 built locally, a short SFT warm start and RL on the text world, in mixed precision.

On a device it runs through ``benchmarks/gpu_check_device.sh`` (results of its runs: ``docs/results.md``); on the CPU
as ``--device cpu --tiny`` (the ``slow`` test ``tests/rlvr_gym_agents/test_gpu_check.py``). Every number it prints is
measured on the machine it runs on.

What it runs: the trainer's own path (:func:`rlvr_gym_agents.train.train`) on the quickstart recipe's text world
(``textworld/ALFWorld-Starter-v0``), with the model built from scratch (word-level tokenizer from env text, random
Qwen2 of hidden 768, 12 layers, 12 heads, MLP 3072: ~110M parameters; nothing is downloaded, so it fits a GPU machine
without network), the transformers rollout engine, ``train.precision: mixed`` (fp32 master weights, forward passes
autocast to bf16), a short warm start, ``--steps`` RL steps and an evaluation before and after.

What it prints (and writes to ``OUT/gpu_check.json``): parameters, rollout tokens/s (generated tokens over rollout
seconds), update tokens/s (``train_tokens_per_s``), SFT seconds, peak GPU memory (CUDA only), the reward of every RL
step and the mean of the first and second half, pass@1 before and after.

Run on a GPU machine: ``python benchmarks/gpu_check.py --device cuda``; on the CPU in under a minute or two:
``python benchmarks/gpu_check.py --device cpu --tiny``. ``--override KEY=VALUE`` (repeatable) runs the same check over
another part of the GPU path: ``rollout.sampler=tree`` (tree rollouts), ``model.lora.rank=16`` (LoRA through PEFT),
``train.precision=pure`` (parameters in ``--dtype``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

RECIPE = Path(__file__).resolve().parents[1] / "agents" / "recipes" / "quickstart.yaml"
FULL = {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 3072}
TINY = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "intermediate_size": 256}


def check_overrides(device: str, tiny: bool, steps: int, out: Path, dtype: str = "bfloat16") -> list[str]:
    """The quickstart recipe's overrides for the check (model size, device, precision, short phases)."""
    size = TINY if tiny else FULL
    phases = ({"sft_steps": 6, "demos": 48, "tasks": 2, "group": 2, "eval_tasks": 2, "k": 1, "corpus": 20,
               "max_turns": 4} if tiny else
              {"sft_steps": 300, "demos": 2400, "tasks": 8, "group": 8, "eval_tasks": 50, "k": 2, "corpus": 400,
               "max_turns": "null"})
    return [
        f"env.max_turns={phases['max_turns']}",
        *(f"model.{key}={value}" for key, value in size.items()),
        f"model.device={device}", f"model.dtype={dtype}", "train.precision=mixed", "rollout.engine=transformers",
        f"model.corpus_episodes={phases['corpus']}", "model.num_threads=2",
        f"sft.max_steps={phases['sft_steps']}", f"sft.num_demos={phases['demos']}", "sft.max_time_s=600",
        "sft.ema_decay=null", "sft.loss_threshold=0.0",
        f"train.num_steps={steps}", f"train.tasks_per_step={phases['tasks']}", f"train.group_size={phases['group']}",
        "train.max_time_s=null", "train.run_budget_s=null", "train.checkpoint_every=0", "train.resume=false",
        "algorithm.drop_zero_variance_groups=false",  # every step updates, so the update speed is measured
        f"eval.num_tasks={phases['eval_tasks']}", f"eval.k={phases['k']}", "eval.greedy=false",
        f"output.dir={out / 'run'}", "output.progress=false", "output.tensorboard=false",
    ]


def check_config(device: str, tiny: bool, steps: int, out: Path, dtype: str = "bfloat16",
                 extra: list[str] | None = None) -> Any:
    """The check's validated :class:`~rlvr_gym_agents.config.TrainConfig`: the quickstart recipe, the check's
    overrides, then ``extra`` (``KEY=VALUE``; a later override of the same key wins). Raises ``ConfigError``."""
    from rlvr_gym_agents.config import load_config

    return load_config(RECIPE, [*check_overrides(device, tiny, steps, out, dtype), *(extra or [])])


def run_check(device: str, tiny: bool, steps: int, out: Path, dtype: str = "bfloat16",
              extra: list[str] | None = None) -> dict[str, Any]:
    """Runs the check; returns (and writes to ``out/gpu_check.json``) its measurements.

    ``extra``: more ``KEY=VALUE`` overrides applied after the check's own (``rollout.sampler=tree``, ``model.lora.rank=16``,
    ``train.precision=pure``): the same check over another part of the GPU path.
    """
    from rlvr_gym_agents.train import train

    config = check_config(device, tiny, steps, out, dtype, extra)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    began = time.monotonic()
    summary = train(config)
    records = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines() if line]
    rl = [r for r in records if r.get("phase") == "rl"]
    sft = next((r for r in records if r.get("phase") == "sft"), {})
    rewards = [float(r["reward_mean"]) for r in rl]
    half = max(1, len(rewards) // 2)
    result = {
        "device": device, "tiny": tiny, "dtype": dtype, "precision": config.train.precision,
        "overrides": list(extra or []),
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "parameters": _parameters(out / "run" / "tiny_init"),
        "rollout_tokens_per_s": sum(r["tokens_generated"] for r in rl) / max(sum(r["rollout_s"] for r in rl), 1e-9),
        "update_tokens_per_s": (sum(r["train_tokens_per_s"] for r in rl if "train_tokens_per_s" in r)
                                / max(1, sum("train_tokens_per_s" in r for r in rl))),
        "sft_s": sft.get("elapsed_s"), "sft_loss": sft.get("loss"),
        "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "rewards": rewards, "reward_first_half": sum(rewards[:half]) / half,
        "reward_second_half": sum(rewards[half:]) / max(1, len(rewards) - half),
        "pass@1_before": summary["before"]["pass@1_sampled"], "pass@1_after": summary["after"]["pass@1_sampled"],
        "elapsed_s": time.monotonic() - began,
    }
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def _parameters(model_dir: Path) -> int:
    config = json.loads((model_dir / "config.json").read_text())
    hidden, layers, mlp, vocab = (config["hidden_size"], config["num_hidden_layers"], config["intermediate_size"],
                                  config["vocab_size"])
    kv = hidden * config["num_key_value_heads"] // config["num_attention_heads"]
    per_layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * mlp + 2 * kv + hidden + 2 * hidden
    return layers * per_layer + vocab * hidden * (1 if config.get("tie_word_embeddings") else 2) + hidden


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--tiny", action="store_true", help="a ~0.1M-parameter model and minimal phases (CPU smoke)")
    parser.add_argument("--steps", type=int, default=None, help="RL steps (default 10; --tiny 2)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                        help="autocast dtype over fp32 master weights (default bfloat16)")
    parser.add_argument("--out", help="output folder (default: a temporary one)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe override applied after the check's own (repeatable), e.g. rollout.sampler=tree")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run with --device cpu --tiny for the CPU smoke check", file=sys.stderr)
        return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="gpu_check-"))
    steps = args.steps if args.steps is not None else (2 if args.tiny else 10)
    result = run_check(args.device, args.tiny, steps, out, args.dtype, args.override)
    print(f"gpu_check on {result['gpu'] or args.device} ({'tiny' if args.tiny else '~110M'} model, "
          f"{result['parameters']:,} parameters, {result['precision']} precision {args.dtype}"
          f"{', ' + ' '.join(args.override) if args.override else ''}):")
    for key in ("rollout_tokens_per_s", "update_tokens_per_s", "sft_s", "peak_gpu_memory_gib", "reward_first_half",
                "reward_second_half", "pass@1_before", "pass@1_after", "elapsed_s"):
        value = result[key]
        print(f"  {key:24s} {value:,.3f}" if isinstance(value, float) else f"  {key:24s} {value}")
    print(f"  rewards per step         {[round(r, 3) for r in result['rewards']]}")
    print(f"wrote {out / 'gpu_check.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

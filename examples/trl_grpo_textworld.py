"""Train a policy on an rlvr_gym env with TRL's GRPOTrainer (multi-turn, token-in/token-out).

By default it builds a tiny word-level Qwen2 from the text world's own vocabulary (no download) and runs a
few GRPO steps on the CPU; pass ``--model Qwen/Qwen2.5-0.5B-Instruct`` (or a local directory) for a real model.

    python examples/trl_grpo_textworld.py --steps 2 --out runs/trl-textworld
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlvr_gym import load_suite
from rlvr_gym.adapters.trl import RlvrGymRollout, env_reward, task_dataset


def tiny_model_and_tokenizer(seed: int = 0) -> tuple[Any, Any]:
    """A ~0.3M-parameter Qwen2 and a word-level tokenizer over every text the text world can show."""
    import torch
    from rlvr_gym_textworld import corpus_texts
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    special = ["<pad>", "<unk>", "<|user|>", "<|assistant|>", "<|end|>"]
    word_level = Tokenizer(models.WordLevel(unk_token="<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    word_level.train_from_iterator(corpus_texts(), trainers.WordLevelTrainer(special_tokens=special))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, pad_token="<pad>", unk_token="<unk>",
                                        eos_token="<|end|>", additional_special_tokens=special[2:4])
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config), tokenizer


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="textworld/starter-train")
    parser.add_argument("--num-tasks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--model", help="a model directory or hub id (default: a tiny model built here)")
    parser.add_argument("--out", type=Path, default=Path("runs/trl-textworld"))
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    if args.model:
        model, tokenizer = AutoModelForCausalLM.from_pretrained(args.model), AutoTokenizer.from_pretrained(args.model)
    else:
        model, tokenizer = tiny_model_and_tokenizer()
    tasks = load_suite(args.suite).tasks[: args.num_tasks]
    rollout = RlvrGymRollout(tasks, max_new_tokens=12, max_response_tokens=192)
    config = GRPOConfig(output_dir=str(args.out), max_steps=args.steps, per_device_train_batch_size=4,
                        num_generations=4, max_completion_length=192, learning_rate=1e-4, logging_steps=1,
                        use_cpu=True, bf16=False, report_to=[], save_strategy="no", seed=0, temperature=1.0)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=env_reward, args=config,
                          train_dataset=task_dataset(tasks), rollout_func=rollout)
    trainer.train()
    episodes = rollout.last_episodes
    summary = {"steps": trainer.state.global_step, "last_batch_episodes": len(episodes),
               "last_batch_mean_turns": sum(e.num_turns for e in episodes) / max(len(episodes), 1),
               "log_history": trainer.state.log_history}
    print(f"trained {summary['steps']} GRPO steps; last batch: {len(episodes)} episodes, "
          f"{summary['last_batch_mean_turns']:.1f} turns each on average")
    return summary


if __name__ == "__main__":
    main()

"""The ``rlvr-gym`` command line.

Commands::

    rlvr-gym envs [--family F]                       ids and descriptions, grouped by family
    rlvr-gym check ENV_ID [--num-tasks N] [--suite S] run the conformance checker, one line per check
    rlvr-gym check --all                              ... on every registered env
    rlvr-gym play ENV_ID [--seed S] [--suite S] [--task ID]
                                                      play an episode in the terminal (`:q` quits)
    rlvr-gym eval --agent AGENT --suite family/suite [-k 8] [--limit N] [--out DIR] [--workers N] [--by KEY]
                                                      evaluate an agent; writes report.{json,md,png},
                                                      transcripts.md
    rlvr-gym compare A B [--by KEY] [--metric M] [--out DIR]
                                                      compare two reports: per-task deltas, paired
                                                      bootstrap confidence intervals
    rlvr-gym train RECIPE [key=value ...]             train (delegates to rlvr_gym_agents)

``AGENT`` is ``gold`` (replays each task's gold actions), ``random``, ``python:module:attr`` (an Agent or
BatchAgent class, a factory, an agent object or a ``(observation, info) -> action`` callable), or anything
else: a model directory or hub id loaded by ``rlvr_gym_agents.cli.load_agent``.

Exit codes: 0 ok, 1 a check failed or a training run failed (``train``: e.g. every episode of a step crashed),
2 usage error (bad arguments, a malformed recipe, unknown env id, suite or model, missing package). Errors are
one line that says how to fix them, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import rlvr_gym
from rlvr_gym.core import Env
from rlvr_gym.registry import UnknownEnvError
from rlvr_gym.reporting import format_value
from rlvr_gym.tasks import Task, TaskFileError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2
AGENTS_MISSING = "the `rlvr_gym_agents` package is not installed; run `pip install -e ./agents`"


class UsageError(Exception):
    """A user mistake reported with exit code 2 (the message says how to fix it)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI on ``argv`` (default ``sys.argv[1:]``) and returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits 2 on bad usage, 0 on --help
        return int(exit_.code or 0)
    console = Console(width=None if sys.stdout.isatty() else 120, highlight=False)
    try:
        return int(args.run(args, console))
    except (UsageError, UnknownEnvError, FileNotFoundError, TaskFileError) as error:
        console.print(f"[red]error:[/red] {escape(str(error))}", soft_wrap=True)
        return EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = argparse.ArgumentParser(prog="rlvr-gym", description="Multi-turn environments with verifiable rewards.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    envs = commands.add_parser("envs", help="list the registered environments")
    envs.add_argument("--family", help="only this family")
    envs.set_defaults(run=cmd_envs)
    check = commands.add_parser("check", help="run the conformance checker on an env")
    check.add_argument("env_id", nargs="?", help="family/Name-vN")
    check.add_argument("--all", action="store_true", help="check every registered env")
    check.add_argument("--num-tasks", type=int, default=3, help="tasks to check on (default 3)")
    check.add_argument("--suite", help="family/suite to take tasks from (default: the env's default suite)")
    check.add_argument("--no-surrogates", action="store_true",
                       help="do not send actions with lone surrogates (also RLVR_GYM_CHECK_SURROGATES=0)")
    check.set_defaults(run=cmd_check)
    play = commands.add_parser("play", help="play an env in the terminal")
    play.add_argument("env_id")
    play.add_argument("--seed", type=int, help="reset seed (also picks the task: index seed mod suite size)")
    play.add_argument("--suite", help="family/suite to take the task from (default: the env's default suite)")
    play.add_argument("--task", help="task id to play")
    play.set_defaults(run=cmd_play)
    _add_eval_parser(commands)
    compare = commands.add_parser("compare", help="compare two eval reports (paired bootstrap over tasks)")
    compare.add_argument("a", help="baseline: report.json or the folder holding it")
    compare.add_argument("b", help="candidate: report.json or the folder holding it")
    compare.add_argument("--metric", action="append", help="pass@J, mean_reward, mean_turns, success_rate "
                         "(repeatable; default pass@1, pass@k, mean_reward)")
    compare.add_argument("--by", help="also compare within each value of this task metadata key")
    compare.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    compare.add_argument("--confidence", type=float, default=0.95, help="interval coverage (default 0.95)")
    compare.add_argument("--seed", type=int, default=0, help="seed of the resampling")
    compare.add_argument("--out", help="also write compare.json and compare.md here")
    compare.set_defaults(run=cmd_compare)
    train = commands.add_parser("train", help="train a policy with a recipe (needs rlvr_gym_agents)")
    train.add_argument("--ray-address", help="join this Ray cluster (sets cluster.ray_address; e.g. auto)")
    train.add_argument("recipe")
    train.add_argument("overrides", nargs=argparse.REMAINDER, help="key=value overrides (and --ray-address)")
    train.set_defaults(run=cmd_train)
    return parser


def _add_eval_parser(commands: Any) -> None:
    evaluate = commands.add_parser("eval", help="evaluate an agent on a task suite")
    evaluate.add_argument("--agent", required=True, help="gold | random | python:module:attr | model dir or hub id")
    evaluate.add_argument("--suite", required=True, help="family/suite (tasks/<family>/<suite>.jsonl) or a path")
    evaluate.add_argument("-k", type=int, default=1, help="samples per task, the k of pass@k (default 1)")
    evaluate.add_argument("--limit", type=int, help="evaluate only the first N tasks")
    evaluate.add_argument("--split", choices=["train", "dev", "test"], help="only tasks of this split")
    evaluate.add_argument("--out", help="report folder (default runs/eval/<suite>-<agent>)")
    evaluate.add_argument("--max-parallel", type=int, default=16, help="episodes in flight for batch agents")
    evaluate.add_argument("--workers", type=int, default=0,
                          help="run heavy envs (web/*) in a Ray pool of this many workers (default 0: in-process); "
                               "implies --env-threads")
    evaluate.add_argument("--env-threads", action=argparse.BooleanOptionalAction, default=None,
                          help="step the envs of a batch agent concurrently in threads (not for in-process web envs); "
                               "default: on when every env declares concurrent steps (code, rtl)")
    evaluate.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (model agents)")
    evaluate.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling p (model agents)")
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the random agent / sampling")
    evaluate.add_argument("--system-prompt", help="system message before the first observation (model agents; "
                                                  "default: the training run's, '' for none)")
    evaluate.add_argument("--max-new-tokens", type=int, help="generated tokens per turn at most (model agents; "
                                                             "default: the training run's, else 32)")
    evaluate.add_argument("--device", help="cpu or cuda[:N] (model agents; default: the training run's when "
                                           "available, else cpu)")
    evaluate.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                          help="model dtype (model agents; default: the training run's, else float32)")
    evaluate.add_argument("--by", action="append", default=[], metavar="KEY",
                          help="split every metric by this task metadata key (repeatable)")
    evaluate.add_argument("--transcripts", type=int, default=20, metavar="N",
                          help="episodes written to transcripts.md (default 20; 0: none)")
    evaluate.set_defaults(run=cmd_eval)


# -- envs ---------------------------------------------------------------------------------------------------
def cmd_envs(args: argparse.Namespace, console: Console) -> int:
    """Prints the registered env ids with their descriptions, one table per family."""
    import rlvr_gym.testing  # registers the testing family

    specs = rlvr_gym.list_envs(args.family)
    if not specs:
        raise UsageError(f"no envs in family {args.family!r}; families: {', '.join(_families())}")
    for family in sorted({s.family for s in specs}):
        table = Table(title=f"[bold]{family}[/bold]", title_justify="left", show_lines=False)
        for column in ("id", "description", "max turns", "default suite"):
            table.add_column(column)
        for s in (s for s in specs if s.family == family):
            table.add_row(s.id, s.description, format_value(s.max_turns), s.default_suite or "-")
        console.print(table)
    return EXIT_OK


def _families() -> list[str]:
    return sorted({s.family for s in rlvr_gym.list_envs()})


# -- check --------------------------------------------------------------------------------------------------
def cmd_check(args: argparse.Namespace, console: Console) -> int:
    """Runs the checker and prints one row per check; exit 1 when any check failed."""
    from rlvr_gym.testing import CheckError, check_env

    if args.all == bool(args.env_id):
        raise UsageError("give an ENV_ID or --all (not both)")
    if args.num_tasks < 1:
        raise UsageError(f"--num-tasks must be >= 1, got {args.num_tasks}")
    env_ids = [s.id for s in rlvr_gym.list_envs()] if args.all else [args.env_id]
    tasks = rlvr_gym.load_suite(args.suite).tasks if args.suite else None
    passed = True
    for env_id in env_ids:
        env_id = rlvr_gym.spec(env_id).id  # unknown ids are a usage error, reported with the closest ids
        try:
            with console.status(f"checking {env_id} ..."):
                report = check_env(env_id, tasks, args.num_tasks, raise_on_failure=False,
                                   surrogates=False if args.no_surrogates else None)
        except CheckError as error:  # no tasks to check on
            console.print(f"[red]FAILED[/red] {escape(str(error))}", soft_wrap=True)
            passed = False
            continue
        _print_check_report(report, console)
        passed = passed and report.passed
    return EXIT_OK if passed else EXIT_CHECK_FAILED


def _print_check_report(report: Any, console: Console) -> None:
    table = Table(title=f"{report.env_id} (tasks: {', '.join(report.task_ids)})", title_justify="left")
    for column in ("check", "status", "time", "details"):
        table.add_column(column, overflow="fold")
    colours = {"passed": "green", "skipped": "yellow", "failed": "red"}
    for result in report.results:
        status = f"[{colours[result.status]}]{result.status}[/]"
        table.add_row(result.name, status, f"{result.elapsed_s:.2f}s", result.message)
    console.print(table)
    verdict = "[green]all checks passed[/green]" if report.passed else f"[red]{len(report.failures)} failed[/red]"
    console.print(f"{report.env_id}: {verdict}")


# -- play ---------------------------------------------------------------------------------------------------
def cmd_play(args: argparse.Namespace, console: Console) -> int:
    """Lets a person play one episode: shows the observation and the admissible actions or tools, reads a
    line from stdin per turn (several lines between ``:paste`` and ``:end``). ``:q`` (or end of input) quits."""
    env_spec = rlvr_gym.spec(args.env_id)
    args.env_id = env_spec.id  # drops a "module:" prefix
    task = _pick_task(args, env_spec.default_suite)
    env = env_spec.make()
    try:
        observation, info = env.reset(seed=args.seed, options={"task": task} if task else None)
        console.print(f"[bold]{args.env_id}[/bold] task {getattr(task, 'id', None)}: type an action "
                      "(several lines between :paste and :end); :q quits")
        _show_turn(console, observation, info)
        while True:
            action = _read_action(console)
            if action is None:
                console.print("quit")
                return EXIT_OK
            observation, reward, terminated, truncated, info = env.step(action)
            _show_turn(console, observation, info, reward)
            if terminated or truncated:
                ending = "terminated" if terminated else "truncated"
                console.print(f"[bold]episode {ending}[/bold]: success={info.get('success', False)} "
                              f"after {info.get('turn')} turn(s)")
                return EXIT_OK
    finally:
        env.close()


def _pick_task(args: argparse.Namespace, default_suite: str | None) -> Task | None:
    suite_name = args.suite or default_suite
    if suite_name is None:
        if args.task:
            raise UsageError(f"{args.env_id} has no default suite; pass --suite to pick task {args.task!r}")
        return None
    tasks = [t for t in rlvr_gym.load_suite(suite_name) if t.env_id == args.env_id]
    if args.task:
        chosen = [t for t in tasks if t.id == args.task]
        if not chosen:
            raise UsageError(f"no task {args.task!r} for {args.env_id} in suite {suite_name!r}")
        return chosen[0]
    if not tasks:
        raise UsageError(f"suite {suite_name!r} has no task for {args.env_id}")
    return tasks[(args.seed or 0) % len(tasks)]


def _show_turn(console: Console, observation: str, info: dict[str, Any], reward: float | None = None) -> None:
    if reward is not None:
        console.print(f"[dim]reward {reward:g}[/dim]")
    console.print(observation, markup=False)
    failure = info.get("failure")
    if failure is not None:
        kind, message = getattr(failure, "kind", failure), getattr(failure, "message", "")
        console.print(f"[yellow]failure: {escape(str(getattr(kind, 'value', kind)))}[/yellow] {escape(message)}")
    actions = info.get("admissible_actions")
    if actions:
        console.print("[cyan]admissible:[/cyan] " + escape(" | ".join(map(str, actions))))
    tools = info.get("tools")
    if tools:
        console.print("[cyan]tools:[/cyan] " + escape(", ".join(_tool_name(t) for t in tools)))


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        function = tool.get("function", tool)
        return str(function.get("name", "?"))
    return str(tool)


def _read_action(console: Console) -> str | None:
    """One action from stdin: a line, or the lines between ``:paste`` and ``:end``; None to quit."""
    try:
        line = input("> ")
        if line.strip() != ":paste":
            return None if line.strip() == ":q" else line
        lines = []
        while (line := input("... ")).strip() != ":end":
            lines.append(line)
        return "\n".join(lines)
    except EOFError:
        return None


# -- eval ---------------------------------------------------------------------------------------------------
def cmd_eval(args: argparse.Namespace, console: Console) -> int:
    """Evaluates an agent on a suite, prints the metrics and writes report.json, report.md, report.png."""
    from rlvr_gym.evaluation import evaluate

    if args.k < 1 or (args.limit is not None and args.limit < 1) or args.max_parallel < 1 or args.workers < 0:
        raise UsageError("-k, --limit and --max-parallel must be >= 1, --workers >= 0")
    suite = rlvr_gym.load_suite(args.suite)
    tasks = suite.filter(split=args.split).tasks[: args.limit]
    if not tasks:
        raise UsageError(f"suite {args.suite!r} has no tasks" + (f" in split {args.split!r}" if args.split else ""))
    for env_id in sorted({t.env_id for t in tasks}):
        rlvr_gym.spec(env_id)
    agent = load_agent(args.agent, temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                       system_prompt=args.system_prompt, max_new_tokens=args.max_new_tokens, device=args.device,
                       dtype=args.dtype)
    console.print(f"evaluating {args.agent} on {len(tasks)} task(s) of {args.suite}, k={args.k}")
    with _env_factory(args.workers) as env_factory:
        report = evaluate(agent, tasks, k=args.k, env_factory=env_factory, max_parallel=args.max_parallel,
                          env_threads=True if args.workers > 0 else args.env_threads, by=args.by)
    report.config = {"agent": args.agent, "suite": args.suite, "k": args.k, "num_tasks": len(tasks),
                     "temperature": args.temperature, "top_p": args.top_p, "seed": args.seed, "workers": args.workers}
    _print_metrics(report.metrics, console)
    out = Path(args.out or Path("runs") / "eval" / f"{_slug(args.suite)}-{_slug(args.agent)}")
    paths = report.save(out, num_transcripts=args.transcripts)
    console.print("wrote " + ", ".join(str(p) for p in paths.values()))
    return EXIT_OK


@contextlib.contextmanager
def _env_factory(num_workers: int) -> Iterator[Callable[[str], Env]]:
    """``rlvr_gym.make``, or the ``make`` of a Ray :class:`rlvr_gym.workers.EnvPool` closed on exit."""
    if num_workers <= 0:
        yield rlvr_gym.make
        return
    from rlvr_gym.workers import EnvPool

    with EnvPool(num_workers=num_workers) as pool:
        yield pool.make


def load_agent(spec: str, **sampling: Any) -> Any:
    """Builds the agent named by ``spec`` (see the module docstring).

    Raises:
        UsageError: when a ``python:`` target cannot be imported or is not an agent, or when a model agent is
            asked for and ``rlvr_gym_agents`` is not installed.
    """
    from rlvr_gym.testing import GoldAgent, RandomAgent

    if spec == "gold":
        return GoldAgent()
    if spec == "random":
        return RandomAgent(seed=int(sampling.get("seed", 0)))
    if spec.startswith("python:"):
        return _load_python_agent(spec.removeprefix("python:"))
    try:
        from rlvr_gym_agents.cli import load_agent as load_model_agent
    except ModuleNotFoundError as error:
        if error.name and error.name.startswith("rlvr_gym_agents"):
            raise UsageError(f"--agent {spec!r} looks like a model; {AGENTS_MISSING}") from None
        raise
    # Options left unset are not passed: the model's training run supplies them (rlvr_gym_agents.evaluate.load_agent).
    options = {key: sampling[key] for key in ("system_prompt", "max_new_tokens", "device", "dtype")
               if sampling.get(key) is not None}
    return load_model_agent(spec, temperature=sampling["temperature"], top_p=sampling["top_p"],
                            seed=int(sampling.get("seed", 0)), **options)


def _load_python_agent(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise UsageError(f"python agents look like python:package.module:attr, got python:{target}")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"cannot load agent python:{target}: {error}") from None
    if inspect.isclass(obj) or (callable(obj) and _required_params(obj) == 0):
        obj = obj()  # a class or a zero-argument factory
    if hasattr(obj, "act") or hasattr(obj, "act_batch") or callable(obj):
        return obj
    raise UsageError(f"python:{target} is not an agent (needs act(), act_batch() or (observation, info) -> str)")


def _required_params(function: Any) -> int:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return -1
    return sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def _print_metrics(metrics: dict[str, Any], console: Console) -> None:
    k = metrics["k"]
    table = Table(title="metrics", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    keys = ["num_tasks", "num_episodes", "pass@1", *([f"pass@{k}"] if k != 1 else []), "mean_reward", "mean_turns",
            "truncation_rate", "tool_calls_per_episode", "invalid_tool_call_rate", "mean_elapsed_s"]
    for key in keys:
        stderr = metrics.get(f"{key}_stderr")
        table.add_row(key, format_value(metrics.get(key)) + (f" ± {stderr:.3f}" if stderr is not None else ""))
    console.print(table)
    splits = [("per env / task type", {**metrics["per_env"], **metrics["per_task_type"]})]
    splits += [(f"by {key}", groups) for key, groups in metrics.get("by", {}).items()]
    for title, groups in splits:
        if title.startswith("per") and len(metrics["per_env"]) < 2 and not metrics["per_task_type"]:
            continue
        breakdown = Table(title=title, title_justify="left")
        for column in ("name", "episodes", "pass@1", f"pass@{k}", "mean reward"):
            breakdown.add_column(column)
        for name, m in groups.items():
            breakdown.add_row(name, str(m["num_episodes"]), format_value(m["pass@1"]),
                              format_value(m[f"pass@{k}"]), format_value(m["mean_reward"]))
        console.print(breakdown)
    if metrics["failures_by_type"]:
        console.print("failures by type: " + ", ".join(f"{k_}={v}" for k_, v in metrics["failures_by_type"].items()))


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip("_")[:60]


# -- compare ------------------------------------------------------------------------------------------------
def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    """Compares report B with report A and prints one row per metric (and per ``--by`` value)."""
    import json

    from rlvr_gym.compare import compare_markdown, compare_reports

    if args.resamples < 1 or not 0 < args.confidence < 1:
        raise UsageError("--resamples must be >= 1 and --confidence in (0, 1)")
    try:
        result = compare_reports(args.a, args.b, metrics=args.metric, by=args.by, num_resamples=args.resamples,
                                 confidence=args.confidence, seed=args.seed)
    except ValueError as error:
        raise UsageError(str(error)) from None
    console.print(compare_markdown(result), markup=False, soft_wrap=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        (out / "compare.md").write_text(compare_markdown(result), encoding="utf-8")
        console.print(f"wrote {out / 'compare.json'}, {out / 'compare.md'}")
    return EXIT_OK


# -- train --------------------------------------------------------------------------------------------------
def cmd_train(args: argparse.Namespace, console: Console) -> int:
    """Delegates to ``rlvr_gym_agents.cli.train_main([recipe, *overrides])``, whose exit status it returns: 0, 1
    (the run failed) or 2 (bad input); ``train_main`` prints its own ``rlvr-gym train: ...`` message."""
    try:
        from rlvr_gym_agents.cli import train_main
    except ModuleNotFoundError as error:
        if error.name and error.name.startswith("rlvr_gym_agents"):
            raise UsageError(f"`rlvr-gym train` needs the training package: {AGENTS_MISSING}") from None
        raise
    address = [] if args.ray_address is None else ["--ray-address", args.ray_address]
    return int(train_main([args.recipe, *args.overrides, *address]))


if __name__ == "__main__":
    sys.exit(main())

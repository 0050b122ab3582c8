"""Tree sampler on a tiny real Qwen2 and the Echo toy env (algorithms.md §9 properties 21, 22, 25, 26)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from agent_helpers import training_batch, tree_token_advantages
from rlvr_gym_agents.credit.estimators import group_advantages
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout.branching import BranchConfig, BranchState
from rlvr_gym_agents.rollout.tree import RolloutTree
from rlvr_gym_agents.rollout.tree_sampler import TreeSampler, TreeSamplerConfig
from rlvr_gym_agents.warmstart.tiny import build_model, build_word_tokenizer

from rlvr_gym import Env, StepResult
from rlvr_gym.testing.toy import WORDS, EchoEnv, echo_tasks

TEXTS = (
    [f"Say the word: {w}" for w in WORDS]
    + [f"say {w}" for w in WORDS]
    + ["Correct.", "Wrong.", "Invalid action 'x': actions look like 'say <word>'.", "hello"]
)
SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=4)
ALWAYS = BranchConfig(alpha=1.0, entropy_weight=0.0)
NEVER = BranchConfig(alpha=0.0, entropy_weight=0.0)


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Any:
    """Tiny matmuls are ~25x slower with 2 threads on a loaded 2-core machine (thread contention)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_word_tokenizer(TEXTS)


def _policy(tokenizer: Any, seed: int = 0) -> TransformersPolicy:
    model = build_model(
        len(tokenizer),
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        max_context_tokens=256,
        seed=0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return TransformersPolicy(model, tokenizer, seed=seed)


def _sample(tokenizer: Any, branch: BranchConfig, seed: int = 0, **config: Any) -> list[RolloutTree]:
    env_factory = config.pop("env_factory", _make_echo)
    num_leaves = config.pop("num_leaves", 4)
    sampler = TreeSampler(
        _policy(tokenizer, seed),
        ChatFormat(tokenizer),
        TreeSamplerConfig(num_leaves=num_leaves, branch=branch, seed=seed, **config),
        env_factory=env_factory,
    )
    rollout = sampler.sample(echo_tasks(2), SAMPLING)
    rollout.trees[0].metrics = rollout.metrics  # type: ignore[attr-defined]
    return rollout.trees


def _make_echo(env_id: str, **kwargs: Any) -> Env:
    assert env_id == "testing/Echo-v0"
    return EchoEnv(**kwargs)


def _check_logps_against_full_forward(policy: TransformersPolicy, trees: list[RolloutTree]) -> int:
    """Asserts every generated token's recorded log-prob is that of a full forward pass over its leaf's ids (what a
    rewound or merged KV cache must not change); returns how many tokens it checked."""
    checked = 0
    for traj in (t for tree in trees for t in tree.trajectories()):
        ids = torch.tensor([traj.token_ids])
        with torch.no_grad():
            logprobs = torch.log_softmax(policy.model(input_ids=ids).logits[0].float(), dim=-1)
        for pos, trained in enumerate(traj.loss_mask):
            if trained:
                assert traj.logps[pos] == pytest.approx(float(logprobs[pos - 1, traj.token_ids[pos]]), abs=1e-4)
                checked += 1
    return checked


@pytest.mark.parametrize("branch", [ALWAYS, NEVER, BranchConfig()], ids=["always", "never", "default"])
def test_exactly_n_leaves_per_task(tokenizer: Any, branch: BranchConfig) -> None:
    trees = _sample(tokenizer, branch, fallback="prompt")
    metrics = trees[0].metrics  # type: ignore[attr-defined]
    assert [len(t.leaves()) for t in trees] == [4, 4]
    assert metrics["leaves_per_task"] == [4, 4]
    assert metrics["global_samples"] + metrics["branches"] == 8
    if branch is NEVER:
        assert metrics["branches"] == 0 and metrics["global_samples"] == 8
    if branch is ALWAYS:
        assert metrics["branches"] >= 2
        assert metrics["tokens_generated"] < metrics["flat_equivalent_tokens"]


@pytest.mark.parametrize("branch", [ALWAYS, NEVER], ids=["branching", "fallback"])
def test_children_share_prefix_ids_mask_and_logps(tokenizer: Any, branch: BranchConfig) -> None:
    for tree in _sample(tokenizer, branch):
        leaves = tree.leaves()
        trajs = dict(zip(leaves, tree.trajectories(), strict=True))
        for a, b in itertools.combinations(leaves, 2):
            common = [n for n in tree.path(a) if n in tree.path(b)]
            end = sum(tree.nodes[n].num_tokens for n in common)
            for field in ("token_ids", "loss_mask", "logps", "entropies"):
                assert getattr(trajs[a], field)[:end] == getattr(trajs[b], field)[:end]
        for traj in trajs.values():
            assert len(traj.token_ids) == len(traj.loss_mask) == len(traj.logps)
            generated = [i for s, e in traj.turn_spans for i in range(s, e)]
            assert [i for i, m in enumerate(traj.loss_mask) if m] == generated


def test_cached_logps_equal_a_full_forward_pass(tokenizer: Any) -> None:
    """Rewinding and merging KV caches must not change what the model computes (TITO, property 26)."""
    policy = _policy(tokenizer)
    sampler = TreeSampler(
        policy, ChatFormat(tokenizer), TreeSamplerConfig(num_leaves=4, branch=ALWAYS), env_factory=_make_echo
    )
    trees = sampler.sample(echo_tasks(2), SAMPLING).trees
    assert _check_logps_against_full_forward(policy, trees) > 10


def test_branches_reuse_parent_state_when_not_forkable_only_root(tokenizer: Any) -> None:
    class NoForkEcho(EchoEnv):
        supports_fork = False

    trees = _sample(tokenizer, ALWAYS, env_factory=lambda env_id, **kw: NoForkEcho(**kw))
    for tree in trees:
        assert len(tree.leaves()) == 4
        assert all(tree.path(leaf)[1] in [c.index for c in tree.nodes if c.parent == 0] for leaf in tree.leaves())
        assert sum(1 for n in tree.nodes if n.parent == 0) == 4  # every leaf is its own global sample
    assert trees[0].metrics["branches"] == 0  # type: ignore[attr-defined]


def test_same_seed_same_trees_and_no_state_leak(tokenizer: Any) -> None:
    def signature(trees: list[RolloutTree]) -> list[list[tuple[int, tuple[int, ...]]]]:
        return [[(n.parent, tuple(n.generated_ids)) for n in t.nodes] for t in trees]

    first = _sample(tokenizer, BranchConfig(entropy_weight=1.0), seed=3)
    sampler = TreeSampler(
        _policy(tokenizer, 3),
        ChatFormat(tokenizer),
        TreeSamplerConfig(num_leaves=4, branch=BranchConfig(entropy_weight=1.0), seed=3),
        env_factory=_make_echo,
    )
    again = sampler.sample(echo_tasks(2), SAMPLING).trees
    assert signature(first) == signature(again)


def test_reuse_kv_cache_off_gives_valid_trees(tokenizer: Any) -> None:
    trees = _sample(tokenizer, ALWAYS, reuse_kv_cache=False)
    assert [len(t.leaves()) for t in trees] == [4, 4]


def test_pre_monitoring_keeps_budget(tokenizer: Any) -> None:
    trees = _sample(tokenizer, BranchConfig(), pre_monitoring=True, num_leaves=6)
    metrics = trees[0].metrics  # type: ignore[attr-defined]
    assert metrics["leaves_per_task"] == [6, 6]
    assert 2 <= metrics["global_samples"] <= 12


@pytest.mark.parametrize("mode", ["soft", "treerl", "local", "global", "arpo_hard", "treepo", "gigpo"])
def test_token_advantages_align_with_trajectories(tokenizer: Any, mode: str) -> None:
    tree = _sample(tokenizer, ALWAYS)[0]
    advantages = tree_token_advantages(tree, mode)
    for traj, adv in zip(tree.trajectories(), advantages, strict=True):
        assert adv.shape == (len(traj.token_ids),)
        assert torch.all(adv[: traj.prompt_length] == 0)


def test_env_crash_becomes_a_leaf(tokenizer: Any) -> None:
    class CrashingEcho(EchoEnv):
        def _step(self, action: str) -> Any:
            raise RuntimeError("boom")

    trees = _sample(tokenizer, ALWAYS, env_factory=lambda env_id, **kw: CrashingEcho(**kw))
    for tree in trees:
        assert len(tree.leaves()) == 4
        assert all(tree.nodes[leaf].failures[0].kind.value == "env_crash" for leaf in tree.leaves())


class ScoredEcho(EchoEnv):
    """Two turns, then a reward that varies with the action text (so group advantages are not all 0)."""

    def _step(self, action: str) -> Any:
        if self.turn < 2:
            return StepResult("go on", 0.0, False, False, {})
        return StepResult("done", float(len(action) % 3), True, False, {"success": len(action) % 3 == 2})


def test_training_batch_soft_credit_equals_flat_group_advantages(tokenizer: Any) -> None:
    sampler = TreeSampler(
        _policy(tokenizer),
        ChatFormat(tokenizer),
        TreeSamplerConfig(num_leaves=4, branch=ALWAYS),
        env_factory=lambda env_id, **kw: ScoredEcho(**kw),
    )
    rollout = sampler.sample(echo_tasks(2), SAMPLING)
    trajectories, token_adv = training_batch(rollout, "soft", "grpo")
    assert [t.group for t in trajectories] == [0, 0, 0, 0, 1, 1, 1, 1]
    rewards = torch.tensor([t.reward for t in trajectories])
    assert len(set(rewards.tolist())) > 1
    expected = group_advantages(rewards, torch.tensor([t.group for t in trajectories]))
    for traj, adv, want in zip(trajectories, token_adv, expected, strict=True):
        generated = torch.tensor(traj.loss_mask, dtype=torch.bool)
        torch.testing.assert_close(adv[generated], torch.full((int(generated.sum()),), float(want)))


def test_entropy_fallback_branches_at_internal_boundaries_with_replayed_state(tokenizer: Any) -> None:
    """Without in-flight branching the budget left after the global samples goes to replayed boundaries."""
    trees = _sample(tokenizer, NEVER, global_samples=2)
    metrics = trees[0].metrics  # type: ignore[attr-defined]
    assert metrics["global_samples"] == 4 and metrics["branches"] == 4
    for tree in trees:
        fallbacks = [n for n in tree.nodes if n.branched]
        assert len(fallbacks) == 2 and all(tree.nodes[n.parent].depth >= 1 for n in fallbacks)
        for node in fallbacks:  # the replayed env answered the same observation as the recorded sibling
            sibling = next(c for c in tree.nodes if c.parent == node.parent and c.index != node.index)
            assert node.turn is not None and sibling.turn is not None
            assert node.turn.observation == sibling.turn.observation


def test_surprisal_fallback_in_rounds_branches_first_before_the_least_likely_action(tokenizer: Any) -> None:
    """One global sample, no in-flight branching: the first fallback round (half the budget left) starts at
    the boundary before the global path's least likely action; later rounds fill the budget to n leaves."""
    trees = _sample(tokenizer, NEVER, num_leaves=4, global_samples=1, fallback="surprisal", fallback_share=0.5)
    assert any(n.branched for tree in trees for n in tree.nodes)  # the check below runs on at least one tree
    for tree in trees:
        assert len(tree.leaves()) == 4
        branched = [n.index for n in tree.nodes if n.branched]
        if not branched:  # the global path ended after one turn: no boundary to branch at, refilled from the prompt
            continue
        first = branched[0]
        before = tree.nodes[:first]  # the tree when the first round chose its boundaries
        surprisal = {
            n.index: max(-sum(c.logps) for c in before if c.parent == n.index)
            for n in before[1:]
            if not n.done and any(c.parent == n.index for c in before)
        }
        assert tree.nodes[first].parent == max(surprisal, key=lambda k: (surprisal[k], k))


def test_fallback_share_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match="fallback_share"):
        TreeSamplerConfig(fallback_share=0.0)
    with pytest.raises(ValueError, match="fallback must be"):
        TreeSamplerConfig(fallback="random")


@pytest.mark.parametrize("pre_monitoring", [False, True])
def test_context_overflow_still_gives_n_leaves(tokenizer: Any, pre_monitoring: bool) -> None:
    policy = _policy(tokenizer)
    policy.max_context_tokens = 30  # the prompt fits, a second turn does not
    sampler = TreeSampler(
        policy,
        ChatFormat(tokenizer),
        TreeSamplerConfig(num_leaves=4, branch=ALWAYS, pre_monitoring=pre_monitoring),
        env_factory=_make_echo,
    )
    trees = sampler.sample(echo_tasks(2), SAMPLING).trees
    for tree in trees:
        assert len(tree.leaves()) == 4
        kinds = {f.kind.value for leaf in tree.leaves() for f in tree.nodes[leaf].failures}
        assert "context_overflow" in kinds


def test_a_replayed_fallback_branch_can_fork_in_its_first_round(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fallback branch rebuilt by replay starts without a KV row (fresh, at depth >= 1). When it forks in its first
    round, its child is fresh too and feeds the same full context: the sampler crashed here (AssertionError /
    KeyError in the KV rewind) when a short context window sent many paths to the fallback."""
    from rlvr_gym_agents.rollout.branching import BranchState

    # only the replayed paths (ids >= 1: path 0 is the one global sample) branch, at every boundary
    monkeypatch.setattr(BranchState, "decide", lambda self, path_id, *args: path_id >= 1)
    policy = _policy(tokenizer)
    sampler = TreeSampler(policy, ChatFormat(tokenizer),
                          TreeSamplerConfig(num_leaves=4, branch=NEVER, global_samples=1, fallback="entropy",
                                            fallback_share=0.5),
                          env_factory=_make_echo)
    trees = sampler.sample(echo_tasks(2), SAMPLING).trees
    forked_fresh = 0
    for tree in trees:
        assert len(tree.leaves()) == 4
        children: dict[int, int] = {}
        for node in tree.nodes[1:]:
            children[node.parent] = children.get(node.parent, 0) + 1
        forked_fresh += sum(1 for n, count in children.items() if count >= 3 and tree.nodes[n].depth >= 1)
    _check_logps_against_full_forward(policy, trees)  # every leaf's log-probs are those of its own full context
    assert forked_fresh >= 1  # some boundary got the original child, the replayed branch and its fork


def test_fallback_branches_start_from_the_kept_kv_row_of_their_path(tokenizer: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A fallback branch at a boundary its global path generated from warm starts from that path's kept KV row,
    rewound to the boundary, and feeds only the boundary's observation (not its whole context): the leaves'
    log-probs are still those of a full forward pass over each leaf's ids."""
    from rlvr_gym_agents.rollout import tree_kv

    warm_starts: list[int] = []
    add_row = tree_kv.KVRows.add_row
    monkeypatch.setattr(tree_kv.KVRows, "add_row",
                        lambda self, path_id, row: (warm_starts.append(path_id), add_row(self, path_id, row))[1])
    policy = _policy(tokenizer)
    sampler = TreeSampler(policy, ChatFormat(tokenizer),
                          TreeSamplerConfig(num_leaves=4, branch=NEVER, global_samples=1, fallback="entropy"),
                          env_factory=_make_echo)
    trees = sampler.sample(echo_tasks(4), SAMPLING).trees
    assert warm_starts  # some fallback branch started warm
    assert all(len(tree.leaves()) == 4 for tree in trees)
    assert _check_logps_against_full_forward(policy, trees) > 20


@pytest.mark.parametrize("branch, fallbacks", [(NEVER, True), (ALWAYS, False)], ids=["fallback", "in-flight"])
def test_kept_kv_rows_are_only_those_a_fallback_branch_may_use_and_go_with_the_call(
        tokenizer: Any, monkeypatch: pytest.MonkeyPatch, branch: BranchConfig, fallbacks: bool) -> None:
    """A finished path's row is kept only while a boundary names the path and its task has budget left, and none
    outlives ``sample()`` (the run is only freed by the cyclic collector, so it must not hold them)."""
    from rlvr_gym_agents.rollout import tree_kv, tree_sampler

    runs: list[Any] = []
    kept_sizes: list[int] = []
    loop, rebuild = tree_sampler._Run.loop, tree_kv.KVRows.rebuild
    monkeypatch.setattr(tree_sampler._Run, "loop", lambda self: (runs.append(self), loop(self))[1])
    monkeypatch.setattr(tree_kv.KVRows, "rebuild", lambda self, running, children: (
        rebuild(self, running, children), kept_sizes.append(sum(len(rows) for rows in self.finished.values())))[1])
    sampler = TreeSampler(_policy(tokenizer), ChatFormat(tokenizer),
                          TreeSamplerConfig(num_leaves=4, branch=branch, global_samples=1), env_factory=_make_echo)
    trees = sampler.sample(echo_tasks(4), SAMPLING).trees
    assert all(len(tree.leaves()) == 4 for tree in trees)
    (run,) = runs
    assert run.kv.finished == {} and run.boundaries == {}
    if fallbacks:
        assert max(kept_sizes) >= 1
    else:  # branching in flight fills each task's budget before its paths end: nothing to keep
        assert max(kept_sizes) == 0


def test_rewound_childrens_holes_are_compacted_away_each_round(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Children rewound by masking leave holes in every row of the batch; each round's rebuild compacts them away (the
    longest row fills at least 90% of the width), and every sampled token's log-prob is still a full forward pass's."""
    from rlvr_gym_agents.rollout import tree_kv

    fill: list[float] = []
    shrunk: list[bool] = []
    rebuild = tree_kv.KVRows.rebuild

    def spy(self: Any, running: Any, children: Any) -> None:
        before = None if self.post_state is None else self.post_state.attention_mask.shape[1]
        rebuild(self, running, children)
        if self.state is not None and before is not None:
            mask = self.state.attention_mask
            fill.append(float(mask.sum(dim=1).max()) / mask.shape[1])
            shrunk.append(mask.shape[1] < before)

    monkeypatch.setattr(tree_kv.KVRows, "rebuild", spy)
    policy = _policy(tokenizer)
    sampler = TreeSampler(policy, ChatFormat(tokenizer), TreeSamplerConfig(num_leaves=4, branch=ALWAYS),
                          env_factory=_make_echo)
    trees = sampler.sample(echo_tasks(4), SAMPLING).trees
    assert any(shrunk) and min(fill) >= 0.9
    assert _check_logps_against_full_forward(policy, trees) > 20


def test_finished_rows_are_dropped_in_place_and_the_next_round_feeds_the_rows_in_their_order(
        tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deciding at the boundary, a round's rebuild has no children to add: the finished rows are dropped in place
    (:meth:`KVState.retain_rows`: the state stays, and so do its buffers when no compaction follows), the next round
    feeds the warm paths in their rows' order without selecting them, and every sampled token's log-prob is still a
    full forward pass's."""
    from rlvr_gym_agents.policy.kv import KVState
    from rlvr_gym_agents.rollout import tree_kv

    drops: list[bool] = []  # per round that dropped rows: whether no compaction followed
    rebuild = tree_kv.KVRows.rebuild

    def spy(self: Any, running: Any, children: Any) -> None:
        post = self.post_state
        buffer = None if post is None else post.cache.layers[0]._key_buffer
        rows, width = (0, 0) if post is None else (len(post), post.attention_mask.shape[1])
        rebuild(self, running, children)
        if self.state is not None:  # freed rows are kept only while the next round can use about half of them
            assert self.state.row_capacity <= 2 * (len(self.state) + self.spare_rows())
        if self.state is not None and len(self.state) < rows:
            assert self.state is post
            same_width = self.state.attention_mask.shape[1] == width
            if same_width:  # not compacted: the same buffers
                assert post.cache.layers[0]._key_buffer is buffer
            drops.append(same_width)

    selects = [0]
    select = KVState.select

    def count_selects(self: KVState, rows: Any, *args: Any, **kwargs: Any) -> KVState:
        selects[0] += len(list(rows)) > 1  # one-row copies are the finished rows kept for fallback branches
        return select(self, rows, *args, **kwargs)

    monkeypatch.setattr(tree_kv.KVRows, "rebuild", spy)
    monkeypatch.setattr(KVState, "select", count_selects)
    policy = _policy(tokenizer)
    config = TreeSamplerConfig(num_leaves=4, global_samples=1,
                               branch=BranchConfig(alpha=1.0, entropy_weight=0.0, at_boundary=True))
    sampler = TreeSampler(policy, ChatFormat(tokenizer), config, env_factory=_make_echo)
    trees = sampler.sample(echo_tasks(4), SAMPLING).trees
    assert len(drops) >= 2 and any(drops)
    assert selects[0] == 0  # the running rows are never selected: dropped in place, fed in their order
    assert _check_logps_against_full_forward(policy, trees) > 20


def test_children_decided_after_the_turn_copy_their_parents_row_after_rows_moved(
        tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deciding after the turn, a child names its parent's row in the round's generate order. Once a finished row in
    the middle was dropped in place (a later row moved into it), that order is not the path order: a child that
    copied the row at its parent's place in ``running`` would extend another path's context, and its log-probs
    would not be a full forward pass's."""
    from rlvr_gym_agents.rollout import tree_sampler

    made = itertools.count()

    class OneEndsEarly(_LongEchoEnv):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.number = next(made)

        def _step(self, action: str) -> Any:
            return StepResult("Wrong.", 0.0, self.number == 1, False, {})  # the second env ends after one turn

    moved = [0]
    round_ = tree_sampler._Run._round

    def count_moved(self: Any, running: list[Any]) -> None:
        warm = [p.path_id for p in running if not p.fresh]
        moved[0] += [row for row in self.kv.rows if row in warm] != warm
        round_(self, running)

    monkeypatch.setattr(tree_sampler._Run, "_round", count_moved)
    monkeypatch.setattr(BranchState, "decide", lambda self, *args, **kwargs: True)  # every boundary branches
    policy = _policy(tokenizer)
    config = TreeSamplerConfig(num_leaves=6, global_samples=3, fallback="prompt",
                               branch=BranchConfig(alpha=1.0, entropy_weight=0.0, at_boundary=False))
    sampler = TreeSampler(policy, ChatFormat(tokenizer), config, env_factory=lambda env_id, **kw: OneEndsEarly(**kw))
    trees = sampler.sample(echo_tasks(2), SAMPLING).trees
    assert moved[0] > 0 and sum(len(tree.leaves()) for tree in trees) == 12
    assert _check_logps_against_full_forward(policy, trees) > 20


def test_the_kv_buffers_shrink_when_most_rows_finish(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows dropped in place stay in the buffers as spare rows; when most paths finish, the rows the next round can
    use (running rows and the children it can fork) are selected into buffers of their size instead, so a few long
    paths do not carry the batch's first row count to ever longer contexts."""
    from rlvr_gym_agents.rollout import tree_kv

    made = itertools.count()

    class FewRunLong(_LongEchoEnv):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.long = next(made) % 8 == 0  # one env in eight runs to the turn limit, the others end after one turn

        def _step(self, action: str) -> Any:
            return StepResult("Wrong.", 0.0, not self.long, False, {})

    held: list[tuple[int, int]] = []
    rebuild = tree_kv.KVRows.rebuild

    def spy(self: Any, running: Any, children: Any) -> None:
        rebuild(self, running, children)
        if self.state is not None:
            held.append((self.state.row_capacity, len(self.state) + self.spare_rows()))

    monkeypatch.setattr(tree_kv.KVRows, "rebuild", spy)
    policy = _policy(tokenizer)
    config = TreeSamplerConfig(num_leaves=8, global_samples=8, fallback="prompt", branch=NEVER)
    sampler = TreeSampler(policy, ChatFormat(tokenizer), config, env_factory=lambda env_id, **kw: FewRunLong(**kw))
    sampler.sample(echo_tasks(4), SAMPLING)
    assert len(held) >= 5 and all(capacity <= 2 * needed for capacity, needed in held)


class _LongEchoEnv(EchoEnv):
    """Never ends before its turn limit (6): every path runs to it, so a tree's budget is spent in flight or by a
    second phase of fallback branches."""

    max_turns = 6

    def _step(self, action: str) -> Any:
        return StepResult("Wrong.", 0.0, False, False, {})


def test_paced_branching_spends_the_budget_while_the_paths_run(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``pace`` the leaves are started by in-flight branches (no entropy term, alpha 0: the paced rate alone, no
    penalty for branching in a row). Every path runs to the 6-turn limit, so the rate 1 at the last boundary spends
    what is left there (at most as many leaves as paths run: the rate reaches 1 by the third boundary) and no leaf
    comes from a fallback branch after the paths end; the trees take fewer rounds. The log-probs are a full forward
    pass's."""
    from rlvr_gym_agents.rollout import tree_sampler

    counts = {"rounds": 0, "replayed": 0}
    round_, replayed = tree_sampler._Run._round, tree_sampler._Run._start_replayed_branch

    def count_round(self: Any, running: Any) -> None:
        counts["rounds"] += 1
        round_(self, running)

    def count_replayed(self: Any, *args: Any) -> bool:
        counts["replayed"] += 1
        return replayed(self, *args)

    monkeypatch.setattr(tree_sampler._Run, "_round", count_round)
    monkeypatch.setattr(tree_sampler._Run, "_start_replayed_branch", count_replayed)
    seen = {}
    for pace in (False, True):
        counts.update(rounds=0, replayed=0)
        policy = _policy(tokenizer)
        sampler = TreeSampler(policy, ChatFormat(tokenizer),
                              TreeSamplerConfig(num_leaves=4, global_samples=1, seed=3,
                                                branch=BranchConfig(alpha=0.0, entropy_weight=0.0,
                                                                    consecutive_penalty=0.0, pace=pace)),
                              env_factory=lambda env_id, **kw: _LongEchoEnv(**kw))
        rollout = sampler.sample(echo_tasks(4), SAMPLING)
        assert all(len(tree.leaves()) == 4 for tree in rollout.trees)
        seen[pace] = dict(counts, branches=rollout.metrics["branches"])
        if pace:
            assert _check_logps_against_full_forward(policy, rollout.trees) > 20
    assert seen[False]["replayed"] == seen[False]["branches"] == 12  # alpha 0: every branch is a fallback
    assert seen[True]["branches"] == 12 and seen[True]["replayed"] == 0
    assert seen[True]["rounds"] < seen[False]["rounds"]


@pytest.mark.parametrize("at_boundary", [False, True], ids=["after-turn", "at-boundary"])
def test_children_decided_at_the_boundary_decode_in_their_parents_round(
        tokenizer: Any, monkeypatch: pytest.MonkeyPatch, at_boundary: bool) -> None:
    """Deciding after the turn, a child generates its first turn one round after its parent's, so every level of
    nesting adds a round; deciding at the boundary (``branch.at_boundary``) it decodes in its parent's round from a
    copy of its row: trees of paths that all run to the 6-turn limit take exactly 6 rounds. The children's rows are
    written into the spare rows the state keeps for the children the next round can fork (no copy of the other rows),
    except at the first fork, from the prompt's state, which has none. The log-probs are a full forward pass's either way."""
    from rlvr_gym_agents.policy.kv import GrowableLayer
    from rlvr_gym_agents.rollout import tree_sampler

    rounds = [0]
    round_ = tree_sampler._Run._round
    monkeypatch.setattr(tree_sampler._Run, "_round", lambda self, running: (rounds.__setitem__(0, rounds[0] + 1),
                                                                            round_(self, running))[1])
    forks = {"in place": 0, "copied": 0}
    append_rows = GrowableLayer.append_rows

    def count_forks(self: GrowableLayer, indices: Any) -> None:
        buffer = self._key_buffer
        append_rows(self, indices)
        forks["in place" if self._key_buffer is buffer else "copied"] += 1

    monkeypatch.setattr(GrowableLayer, "append_rows", count_forks)
    policy = _policy(tokenizer)
    sampler = TreeSampler(policy, ChatFormat(tokenizer),
                          TreeSamplerConfig(num_leaves=4, global_samples=1,
                                            branch=BranchConfig(alpha=1.0, entropy_weight=0.0, at_boundary=at_boundary)),
                          env_factory=lambda env_id, **kw: _LongEchoEnv(**kw))
    rollout = sampler.sample(echo_tasks(3), SAMPLING)
    assert all(len(tree.leaves()) == 4 for tree in rollout.trees) and rollout.metrics["branches"] == 9
    assert all(len(tree.path(leaf)) == 7 for tree in rollout.trees for leaf in tree.leaves())  # root + 6 turns
    assert (rounds[0] == 6) == at_boundary and rounds[0] >= 6
    layers = policy.model.config.num_hidden_layers
    assert forks == ({"in place": layers, "copied": layers} if at_boundary else {"in place": 0, "copied": 0})
    assert _check_logps_against_full_forward(policy, rollout.trees) > 20

"""The KV rows of one tree sampling call (:mod:`rlvr_gym_agents.rollout.tree_sampler`): one row per warm path, the
per-round generate calls (warm rows on their kept state, fresh rows on full contexts, children copied at a boundary),
and the bookkeeping that rewinds a branching parent's row for its children, keeps finished paths' rows for fallback
branches and compacts the holes each round."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlvr_gym_agents.policy import Generation, Policy, SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.kv import RewindInfo, merge_kv_states

if TYPE_CHECKING:
    from rlvr_gym_agents.rollout.tree_sampler import _Path


def row_copies(fork: Callable[[_Path, float], list[_Path]], paths: list[_Path],
                children: list[_Path]) -> Callable[[list[float]], list[int]]:
    """The policy's ``fork`` hook for one generate call over ``paths``: asks ``fork`` for each path's children (given
    the entropy of its first-token distribution), appends them to ``children`` and returns the row each one copies."""
    def copies(entropies: list[float]) -> list[int]:
        rows: list[int] = []
        for row, (path, entropy) in enumerate(zip(paths, entropies, strict=True)):
            made = fork(path, entropy)
            children.extend(made)
            rows += [row] * len(made)
        return rows

    return copies


class KVRows:
    """The KV state of a sampling call's running paths: one row per warm path (a path that has run through the
    policy), and the per-round bookkeeping that rewinds a branching parent's row for its children.

    With ``reuse_kv_cache`` off every call passes each path's full context (``context_ids(path)``) instead.
    ``spare_rows()`` bounds the children the next round may fork at its boundaries: the state gets that many spare
    rows, so a fork writes only the children's rows (:meth:`KVState.append_rows`) instead of copying every row.
    """

    def __init__(self, policy: Policy, sampling: SamplingParams, reuse_kv_cache: bool,
                 context_ids: Callable[[_Path], list[int]], keeps_row: Callable[[_Path], bool],
                 spare_rows: Callable[[], int] = lambda: 0) -> None:
        self.policy, self.sampling, self.reuse, self.context_ids = policy, sampling, reuse_kv_cache, context_ids
        self.keeps_row = keeps_row  # whether a finished path's row may serve a fallback branch
        self.spare_rows = spare_rows
        self.state: Any = None  # rows: the warm running paths
        self.rows: list[int] = []  # the path id of each row of ``state``
        self.post_state: Any = None  # this round's state after generation, rows in the order generate() returned
        self.rewind: RewindInfo | None = None  # the warm rows before this round's call
        self.finished: dict[int, dict[int, Any]] = {}  # task -> path id -> the one-row state the path ended with
        self.joining: list[tuple[int, Any]] = []  # (path id, one-row state) added since the last round

    def kept_row(self, task_index: int, path_id: int, rewind: RewindInfo) -> Any:
        """A copy of finished path ``path_id``'s row rewound by ``rewind`` (a snapshot of a round in which it was
        warm: the row's first real slots, by position), or None when the path has no kept row."""
        kept = self.finished.get(task_index, {}).get(path_id)
        return None if kept is None else rewind.apply(kept.select([0], spare_slots=False), path_id)

    def add_row(self, path_id: int, row: Any) -> None:
        """Adds a one-row state for a path joining between rounds (a fallback branch started warm); the rows joining
        before a round are merged into the state once, at its generate call."""
        self.joining.append((path_id, row))

    def generate(self, running: list[_Path], fork: Callable[[_Path, float], list[_Path]] | None = None
                 ) -> tuple[list[_Path], list[Generation]]:
        """One turn per running path: one generate call for the warm rows (their state selected) and one for the fresh
        rows (full contexts); their states are merged for :meth:`rebuild`. With ``fork`` (``branch.at_boundary``)
        each call asks it, per path and with the entropy of the path's first-token distribution, for the children to
        start at the path's boundary; they decode in the same call, from a copy of the path's row.

        Returns:
            The paths that generated, in the rows of the merged state (the warm paths in the order of their rows, each
            call's children after its paths, then the fresh paths) and their generations.
        """
        if not self.reuse:
            return running, self.policy.generate([self.context_ids(p) for p in running], self.sampling)[0]
        made: list[_Path] = []
        if self.joining:
            parts = [self.state] if self.state is not None else []
            self.state = merge_kv_states(parts + [row for _, row in self.joining], self.spare_rows())
            self.rows += [path_id for path_id, _ in self.joining]
            self.joining = []
        row_of = {path_id: row for row, path_id in enumerate(self.rows)}
        warm = sorted((p for p in running if not p.fresh), key=lambda p: row_of[p.path_id])  # the state's row order
        fresh = [p for p in running if p.fresh]
        out: dict[int, Generation] = {}
        states: list[Any] = []
        order: list[_Path] = []
        self.rewind = None
        for paths in (warm, fresh):
            if not paths:
                continue
            state = None
            if paths is warm:
                rows = [row_of[p.path_id] for p in warm]
                state = (self.state if rows == list(range(len(self.state)))
                         else self.state.select(rows, spare_rows=self.spare_rows()))
                self.rewind = RewindInfo.of(state, [p.path_id for p in warm])
            children: list[_Path] = []
            copies = None if fork is None else row_copies(fork, paths, children)
            assert isinstance(self.policy, TransformersPolicy)  # the KV cache is reused with this engine only
            # generate feeds and forks ``state`` in place (``self.state`` too, when it is that state): nothing reads
            # self.state or self.rows again before rebuild() replaces them
            gens, state = self.policy.generate([p.episode.feed_ids for p in paths], self.sampling, state, copies)
            order += paths + children
            made += children
            out.update({p.path_id: g for p, g in zip(paths + children, gens, strict=True)})
            states.append(state)
        self.post_state = merge_kv_states(states, self.spare_rows())
        return order, [out[p.path_id] for p in order]

    def rebuild(self, running: list[_Path], children: list[tuple[_Path, int]]) -> None:
        """The next round's state from this round's (``running`` in its rows, as :meth:`generate` returned them): the
        surviving running rows, then each warm child's copy of its parent's row rewound to the branch boundary by
        masking the round's slots (a fresh parent's child is fresh too and feeds its full context), and compacted
        (:meth:`KVState.compact`) when holes take a tenth of it. Without such children the finished rows are dropped
        in place (:meth:`KVState.retain_rows`), unless the buffers would then hold more than twice the rows the next
        round can use (the running rows and the children it can fork): then, as with children, the rows are
        selected in one copy, into buffers of their size."""
        post_state = self.post_state
        if post_state is None:
            return
        for row, path in enumerate(running):
            if path.done and self.keeps_row(path):  # for fallback branches at its boundaries
                self.finished.setdefault(path.task_index, {})[path.path_id] = post_state.select([row], spare_slots=False)
        keep = [row for row, p in enumerate(running) if not p.done]
        warm_children = [(child, row) for child, row in children if not child.fresh]
        rows = keep + [row for _, row in warm_children]
        spare_rows = self.spare_rows()
        if not rows:
            self.state, self.rows = None, []
        elif not warm_children and post_state.row_capacity <= 2 * (len(keep) + spare_rows):
            self.state = post_state  # the finished rows dropped in place, only as many rows copied as finished
            self.rows = [running[row].path_id for row in post_state.retain_rows(keep)]
        else:  # children to add, or most rows finished: the rows the next round needs, in buffers of their size
            self.state = post_state.select(rows, spare_rows=spare_rows)
            self.rows = [running[row].path_id for row in keep] + [child.path_id for child, _ in warm_children]
        if self.state is not None:
            for index, (_, row) in enumerate(warm_children, start=len(keep)):
                assert self.rewind is not None  # a warm child's parent was a warm row of this round
                self.rewind.mask_row(self.state, index, running[row].path_id)
            self.state.compact()  # the holes of rewound children and of stopped rows
        self.post_state = None

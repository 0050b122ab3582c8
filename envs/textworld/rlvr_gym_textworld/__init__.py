"""rlvr_gym environment family: an ALFWorld-like household text world in pure Python.

Registers (when imported):

- ``textworld/ALFWorld-Starter-v0``: one kitchen, 3-4 objects, no closed receptacles, every object in sight
  from the first observation, pick-and-place and cool-then-place; 10 turns. The world of the CPU quickstart.
- ``textworld/ALFWorld-Easy-v0``: one kitchen with 4-6 receptacles, 3-6 objects, the four short task types
  (pick_and_place, pick_cool/heat/clean_then_place); 12-turn limit.
- ``textworld/ALFWorld-v0``: a kitchen and a second room, 6-10 objects, all six ALFWorld task types; 30 turns.
- ``textworld/ALFWorld-Hard-v0``: 3-4 rooms, 10-16 objects, most openable receptacles closed; 50 turns.

Public API: :class:`ALFWorldEnv`, :func:`generate_tasks`, :func:`generate_world`, :func:`verify`,
:func:`oracle_next_action`, :func:`oracle_plan`, :func:`wrong_plan`, :func:`apply_command`,
:func:`admissible_actions`, `exploring_expert` (an SFT expert function), :func:`corpus_texts` (every text the agent can see, for a word-level tokenizer),
:func:`impossible_actions` (commands the current state rejects, for SFT demonstrations with invalid mistakes).
"""

from rlvr_gym.registry import register
from rlvr_gym_textworld.corpus import corpus_texts
from rlvr_gym_textworld.engine import admissible_actions, apply_command
from rlvr_gym_textworld.env import ALFWorldEnv, exploring_expert, impossible_actions
from rlvr_gym_textworld.generator import DIFFICULTIES, Difficulty, generate_world
from rlvr_gym_textworld.oracle import OracleError, oracle_next_action, oracle_plan, wrong_plan
from rlvr_gym_textworld.suites import generate_tasks
from rlvr_gym_textworld.verifier import verify
from rlvr_gym_textworld.world import TASK_TYPES, Goal, WorldState

__version__ = "0.1.0"

__all__ = [
    "DIFFICULTIES",
    "TASK_TYPES",
    "ALFWorldEnv",
    "Difficulty",
    "Goal",
    "OracleError",
    "WorldState",
    "admissible_actions",
    "apply_command",
    "corpus_texts",
    "exploring_expert",
    "generate_tasks",
    "generate_world",
    "impossible_actions",
    "oracle_next_action",
    "oracle_plan",
    "verify",
    "wrong_plan",
]

_ENTRY_POINT = "rlvr_gym_textworld.env:ALFWorldEnv"

register(
    "textworld/ALFWorld-Starter-v0",
    _ENTRY_POINT,
    description="ALFWorld-like kitchen, 3-4 objects in sight, put and cool-then-put tasks, 10 turns (CPU quickstart)",
    kwargs={"difficulty": "starter"},
    max_turns=10,
    default_suite="textworld/starter-test",
)
register(
    "textworld/ALFWorld-Easy-v0",
    _ENTRY_POINT,
    description="ALFWorld-like kitchen: 4-6 receptacles, put/cool/heat/clean-then-put tasks, 12 turns",
    kwargs={"difficulty": "easy"},
    max_turns=12,
    default_suite="textworld/easy-test",
)
register(
    "textworld/ALFWorld-v0",
    _ENTRY_POINT,
    description="ALFWorld-like two-room house, all six ALFWorld task types, 30 turns",
    kwargs={"difficulty": "medium"},
    max_turns=30,
    default_suite="textworld/medium-test",
)
register(
    "textworld/ALFWorld-Hard-v0",
    _ENTRY_POINT,
    description="ALFWorld-like 3-4 room house, many distractors, mostly closed receptacles, 50 turns",
    kwargs={"difficulty": "hard"},
    max_turns=50,
    default_suite="textworld/hard-test",
)

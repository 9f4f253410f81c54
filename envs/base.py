"""Shared machinery of the cxsim text environments.

Every cxsim environment speaks lowercase words and symbols separated by single
spaces, so ``text.split()`` is its exact tokenization and a closed word-level
vocabulary (``vocabulary()``) covers everything it can emit or accept. The
ground truth a diagnostic needs (key facts, when each was shown, revised and
needed) travels in ``info`` under the keys listed in ``docs/CONTRACTS.md``.

This module holds the parts every environment shares: the character set and
text spaces, action parsing that never raises, observation noise, the
``info`` builder and the horizon / error-penalty knobs.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

# Every character an environment emits or accepts, in a fixed order (the
# default Text charset is alphanumeric only, so spaces and punctuation would
# fail ``contains`` and ``check_env``).
CHARSET = "abcdefghijklmnopqrstuvwxyz0123456789 .,:;?!()[]<>=+-*/_#|'"
MAX_OBS_CHARS = 65536
MAX_ACTION_CHARS = 64
# A corrupted word (observation noise) is replaced by this token.
NOISE_WORD = "#"
# Words of the error observations shared by all environments.
ERROR_WORDS = ("error", ":", "unknown", "word", "empty", "action", "not", "allowed", "now", ".")

INFO_KEYS = (
    "key_facts",
    "needed_facts",
    "fact_shown_step",
    "fact_revised_steps",
    "fact_needed_step",
    "admissible_actions",
    "state",
    "step",
    "success",
    "error",
)


def words_of(*texts: str) -> set[str]:
    """The whitespace-split words of ``texts`` (for building vocabularies)."""
    out: set[str] = set()
    for text in texts:
        out.update(text.split())
    return out


def corrupt(words: list[str], rate: float, rng: np.random.Generator) -> list[str]:
    """Replace each word by ``NOISE_WORD`` with probability ``rate`` (one RNG call)."""
    if rate <= 0.0 or not words:
        return words
    hit = rng.random(len(words)) < rate
    return [NOISE_WORD if h else w for w, h in zip(words, hit, strict=True)]


def draw_lengths(
    rng: np.random.Generator, n: int, mean: float, std: float, low: int, high: int
) -> list[int]:
    """``n`` observation lengths in words: a rounded normal(mean, std) clipped to [low, high]."""
    raw = rng.normal(mean, std, size=n) if std > 0 else np.full(n, mean)
    return np.clip(np.rint(raw), low, high).astype(int).tolist()


class TextEnv(gym.Env[str, str]):
    """Base class: text spaces, shared knobs, action parsing and the info dict.

    Subclasses set ``system_prompt``, ``env_name`` and ``PRESETS``, implement
    ``vocabulary()`` (a classmethod listing every word they can emit or
    accept), ``reset`` (calling ``super().reset(seed=seed)`` first) and
    ``_act(words)``, and keep the ground-truth attributes that ``_info`` reads
    up to date.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    system_prompt: ClassVar[str] = ""
    env_name: ClassVar[str] = ""
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(
        self,
        *,
        horizon: int,
        noise: float = 0.0,
        error_penalty: float = 0.0,
        render_mode: str | None = None,
    ) -> None:
        if horizon < 2:
            raise ValueError(f"horizon={horizon} must be at least 2")
        if not 0.0 <= noise < 1.0:
            raise ValueError(f"noise={noise} must be in [0, 1)")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r}; choose None or 'ansi'")
        self.horizon = horizon
        self.noise = noise
        self.error_penalty = error_penalty
        self.render_mode = render_mode
        self.observation_space = spaces.Text(MAX_OBS_CHARS, min_length=1, charset=CHARSET)
        self.action_space = spaces.Text(MAX_ACTION_CHARS, min_length=0, charset=CHARSET)
        self._vocab = frozenset(self.vocabulary())
        # Ground truth, kept current by subclasses and copied into every info.
        self._facts: dict[str, str] = {}
        self._needed: list[str] = []
        self._shown: dict[str, int] = {}
        self._revised: dict[str, list[int]] = {}
        self._needed_step: dict[str, int] = {}
        self._t = 0
        self._success = False
        self._last_obs = ""

    @classmethod
    def vocabulary(cls) -> list[str]:
        """Every word this environment can emit or accept, sorted."""
        raise NotImplementedError

    # -- subclass hooks ---------------------------------------------------
    def _act(self, words: list[str]) -> tuple[str, float, bool, str | None]:
        """Apply a parsed action: ``(observation, reward, terminated, error)``."""
        raise NotImplementedError

    def _admissible(self) -> list[str]:
        raise NotImplementedError

    def _state(self) -> dict[str, Any]:
        raise NotImplementedError

    # -- gymnasium API -----------------------------------------------------
    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._t += 1
        words = action.split() if isinstance(action, str) else []
        error: str | None
        if not words:
            obs, reward, terminated, error = self._error("empty action")
        elif any(w not in self._vocab for w in words):
            obs, reward, terminated, error = self._error("unknown word")
        else:
            obs, reward, terminated, error = self._act(words)
        truncated = not terminated and self._t >= self.horizon
        self._last_obs = obs
        return obs, reward, terminated, truncated, self._info(error)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        return None

    # -- helpers -------------------------------------------------------------
    def _error(self, reason: str, then: str = "") -> tuple[str, float, bool, str | None]:
        """An error observation (``then`` is what the world shows anyway) and the penalty."""
        obs = f"error : {reason} ." + (f" {then}" if then else "")
        return obs, 0.0 - self.error_penalty, False, reason

    def _info(self, error: str | None = None) -> dict[str, Any]:
        # Fresh containers on every call: callers keep infos (check_env tests this).
        return {
            "key_facts": dict(self._facts),
            "needed_facts": list(self._needed),
            "fact_shown_step": dict(self._shown),
            "fact_revised_steps": {k: list(v) for k, v in self._revised.items()},
            "fact_needed_step": dict(self._needed_step),
            "admissible_actions": self._admissible(),
            "state": self._state(),
            "step": self._t,
            "success": self._success,
            "error": error,
        }

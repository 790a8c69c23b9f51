"""The tiny model zoo shipped with the project: ids that load by name with no network."""

from __future__ import annotations

from pathlib import Path

MODELS_DIR = Path(__file__).parent / "models"
DEMO_MODELS = {
    "heterofold/tiny-llama-code": MODELS_DIR / "tiny-llama-code",
    "heterofold/tiny-qwen-code": MODELS_DIR / "tiny-qwen-code",
}
DEMO_PAIR = ("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code")


def resolve_demo(name: str) -> Path | None:
    """Folder of a shipped demo model id, or None if ``name`` is not one."""
    return DEMO_MODELS.get(name)


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


ADAPTERS_DIR = Path(__file__).parent / "adapters"


def shipped_adapter(sender: str, receiver: str) -> Path | None:
    """Folder of the shipped HeteroFold adapter for a demo pair direction, or None."""
    if sender not in DEMO_MODELS or receiver not in DEMO_MODELS:
        return None
    folder = ADAPTERS_DIR / f"{DEMO_MODELS[sender].name}--{DEMO_MODELS[receiver].name}"
    return folder if (folder / "adapter_config.json").is_file() else None

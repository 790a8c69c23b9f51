"""Whether a model id can load here without waiting on the network, decided in well under a second.

A Hub id that is not in the local cache, asked for while offline or while the Hub does not answer, fails at once
with a clear message (:func:`must_use_cache` turns on ``local_files_only``) instead of after huggingface_hub's
retries, which take tens of seconds (docs/design.md, "Figures behind choices in the code"). No torch or
transformers here: asking costs nothing before a model loads.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

from heterofold_hub.base_models.gguf import PACKAGED, is_gguf
from heterofold_hub.zoo import DEMO_MODELS

KNOWN_IDS = (*DEMO_MODELS, *PACKAGED)  # ids that load with no network: demo models and packaged GGUF models
PROBE_SECONDS = 1.5  # one HTTP request to the Hub's endpoint, name lookup included


def is_hub_id(name: str) -> bool:
    """Whether ``name`` would be fetched from the Hub: not a shipped id, a GGUF file or an existing folder."""
    name = str(name)
    return not (name in DEMO_MODELS or is_gguf(name) or name.startswith((".", "/", "~")) or Path(name).is_dir())


@functools.lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """False when HF_HUB_OFFLINE is set, or when the Hub's endpoint gives no HTTP answer (any status counts)
    within ``PROBE_SECONDS`` (through the proxy the environment names, as huggingface_hub would); asked once."""
    import urllib.error
    import urllib.request

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    answered = threading.Event()

    def ask() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"), timeout=PROBE_SECONDS).close()
            answered.set()
        except urllib.error.HTTPError:  # a status, even 4xx/5xx: something answers there
            answered.set()
        except (OSError, ValueError):  # no route, no name, refused, timed out, a malformed endpoint
            pass

    # In a thread: the name lookup has no timeout of its own, and a stuck resolver must not hold the command.
    probe = threading.Thread(target=ask, name="hub-probe", daemon=True)
    probe.start()
    probe.join(PROBE_SECONDS)
    return answered.is_set()


def must_use_cache(name: str) -> bool:
    """Whether ``name`` must load from the local cache alone: a Hub id while the Hub is offline or unreachable
    (then transformers fails at once when the files are not cached, instead of retrying first)."""
    return is_hub_id(name) and not hub_reachable()


def not_found_message(name: str, reason: str) -> str:
    return (f"Model {name!r} could not be loaded: it is not a local folder, not a shipped model ({', '.join(KNOWN_IDS)}), "
            f"and the Hub could not provide it ({reason}). Check the spelling, pass a local folder, or download it "
            "first (`hf download ORG/NAME`) and run with HF_HUB_OFFLINE=1.")

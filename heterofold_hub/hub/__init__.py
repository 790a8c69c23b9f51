"""Adapter hubs: publish pair-adapter folders as immutable versions (``vX.Y.Z``) and download them back.

- ``LocalHub`` (default): a folder of git repos, no server (``$HF_FOLD_HOME``, else ``~/.cache/heterofold``).
- ``RemoteHub``: any Hub-compatible server (https://huggingface.co or your own) via ``huggingface_hub``.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from heterofold_hub.hub.base import AdapterHub, HubError, PublishedVersion, validate_repo_id, validate_version, version_key

__all__ = [
    "AdapterHub", "HubError", "LocalHub", "PublishedVersion", "RemoteHub", "get_hub", "validate_repo_id",
    "validate_version", "version_key",
]

# The hubs load on first use (PEP 562): reading registry.json (`hf-fold list`) imports this package, and
# RemoteHub's import of huggingface_hub is start-up time that only a download or a push needs.
_LAZY = {"LocalHub": "heterofold_hub.hub.local", "RemoteHub": "heterofold_hub.hub.remote",
         "HF_ENDPOINT": "heterofold_hub.hub.remote"}

if TYPE_CHECKING:
    from heterofold_hub.hub.local import LocalHub
    from heterofold_hub.hub.remote import HF_ENDPOINT, RemoteHub


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'heterofold_hub.hub' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def get_hub(hub: str | None = None, *, hub_dir: str | os.PathLike | None = None,
            token: str | None = None) -> AdapterHub:
    """The hub named by ``hub``: None or "local" -> LocalHub(hub_dir); "hf" or an http(s) URL -> RemoteHub.

    For a RemoteHub, ``hub_dir`` is the download cache (default: huggingface_hub's cache).
    """
    if hub is None or hub == "local":
        from heterofold_hub.hub.local import LocalHub

        return LocalHub(hub_dir)
    from heterofold_hub.hub.remote import HF_ENDPOINT, RemoteHub

    if hub == "hf":
        return RemoteHub(HF_ENDPOINT, token=token, cache_dir=hub_dir)
    if hub.startswith(("http://", "https://")):
        return RemoteHub(hub, token=token, cache_dir=hub_dir)
    raise HubError(f"Unknown hub {hub!r}: use 'local' (the default, a folder of git repos), 'hf' ({HF_ENDPOINT}) "
                   "or the http(s):// URL of a Hub-compatible server.")

"""What an adapter package is on disk: its config dataclass (``adapter_config.json``), its file names, and the
fit-options base every method's options extend. No torch here: reading a package's description stays cheap."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from heterofold_hub.errors import HeteroFoldError

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter.safetensors"
METRICS_NAME = "metrics.json"  # held-out evaluation written by `hf-fold train`
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")  # refused, never loaded: unpickling runs code


@dataclass
class AdapterConfig:
    """What an adapter was fitted for and how. It is the adapter's on-disk JSON (``adapter_config.json``).

    ``layer_sources[r]`` lists the sender layers whose features feed receiver layer ``r``. The pair identity
    (ids, revisions, tokenizer fingerprints, KV specs) is what loading checks against the models in use.
    """

    method: str
    sender: str
    receiver: str
    sender_spec: dict
    receiver_spec: dict
    layer_sources: list[list[int]]
    min_native: int = 1
    extra: dict = field(default_factory=dict)  # method-specific settings
    sender_revision: str | None = None
    receiver_revision: str | None = None
    sender_tokenizer: str | None = None  # tokenizer fingerprints (heterofold_hub.base_models.fingerprint), "sha256:..."
    receiver_tokenizer: str | None = None
    library_version: str | None = None
    training_args: dict = field(default_factory=dict)  # how it was fitted (hf-fold train arguments)
    training_windows: int | None = None
    # The saved adapter.safetensors ("sha256:..." and its length): written by save_adapter, checked by
    # load_adapter, so a truncated or altered weights file is refused; None in older configs (not checked).
    weights_sha256: str | None = None
    weights_bytes: int | None = None

    def __post_init__(self):
        n_recv, n_send = self.receiver_spec["num_layers"], self.sender_spec["num_layers"]
        if len(self.layer_sources) != n_recv:
            raise HeteroFoldError(
                f"layer_sources has {len(self.layer_sources)} entries but the receiver has {n_recv} layers."
            )
        widths = {len(s) for s in self.layer_sources}
        if len(widths) != 1 or any(not 0 <= i < n_send for s in self.layer_sources for i in s):
            raise HeteroFoldError(
                f"layer_sources must list the same number of sender layers (0..{n_send - 1}) for every "
                f"receiver layer; got {self.layer_sources}."
            )

    @property
    def in_features(self) -> int:
        """Input width of each receiver layer's map: sources x sender kv_heads x head_dim."""
        return len(self.layer_sources[0]) * self.sender_spec["kv_heads"] * self.sender_spec["head_dim"]

    @property
    def out_features(self) -> int:
        return self.receiver_spec["kv_heads"] * self.receiver_spec["head_dim"]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "AdapterConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise HeteroFoldError(f"Unknown adapter config fields {unknown}; known: {sorted(known)}.")
        return cls(**data)


@dataclass
class MethodOptions:
    """A method's fit options (PEFT's config-as-dataclass): typed fields with their defaults, checked in
    ``__post_init__``. Built from keyword arguments by :meth:`from_kwargs`, where an unknown name is an error
    rather than silently dropped, so "same data and budget" is what actually ran."""

    @classmethod
    def from_kwargs(cls, method: str, options: dict) -> "MethodOptions":
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise HeteroFoldError(f"{method}: unknown option(s) {', '.join(unknown)}; its options are "
                                  f"{', '.join(known)} ({cls.__name__}).")
        return cls(**options)

    def to_dict(self) -> dict:
        return asdict(self)

"""``HeteroFoldModel``: a frozen receiver plus the pair adapter that maps one sender's KV caches into it.

    model = HeteroFoldModel.from_pretrained("heterofold/tiny-llama-code", "heterofold/tiny-qwen-code")
    prefill = model.prefill_sender(text)                # the sender's cache (what the sending agent computed)
    result = model.transfer(prefill, text)              # receiver cache, no receiver prefill
    new_tokens = model.generate(result, prompt="\n# What does it return?\n", max_new_tokens=20)
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from heterofold_hub.errors import HeteroFoldError
from heterofold_hub.base_models.loading import Side
from heterofold_hub.transfer.config import TransferConfig
from heterofold_hub.transfer.pipeline import TransferPipeline, TransferResult, check_result, native_prefill
from heterofold_hub.transfer.plan import TransferPlan
from heterofold_hub.hub.registry import NoAdapterError, Registry, open_registry
from heterofold_hub.hub.resolve import ResolvedAdapter, resolve_adapter
from heterofold_hub.adapter.save_and_load import save_adapter
from heterofold_hub.transfer.fast import LayerStream
from heterofold_hub.transfer.sender import SenderPrefill, prefill_sender

FALLBACKS = ("error", "prefill")


def _side(model, *, revision=None, torch_dtype=None, device_map=None, local_files_only=False, with_model=True) -> Side:
    """A Side from an id, a local folder, a Side, or a loaded transformers model (its tokenizer by name)."""
    if isinstance(model, Side):
        return model
    if isinstance(model, torch.nn.Module):
        from heterofold_hub.base_models.loading import load_tokenizer

        return Side.from_model(model, load_tokenizer(model.name_or_path, local_files_only=local_files_only))
    model_kwargs = dict(torch_dtype=torch_dtype, device=device_map) if with_model else {}
    return Side.load(str(model), with_model=with_model, revision=revision, local_files_only=local_files_only,
                     **model_kwargs)


def _check_fallback(fallback: str) -> None:
    if fallback not in FALLBACKS:
        raise HeteroFoldError(f"fallback={fallback!r}; choose one of {', '.join(FALLBACKS)}.")


class HeteroFoldModel:
    """The receiver wrapped for one sender. ``resolved`` is None when no adapter fit and ``fallback="prefill"``."""

    def __init__(self, sender: Side, receiver: Side, resolved: ResolvedAdapter | None, *, fallback: str = "error"):
        _check_fallback(fallback)
        self.sender, self.receiver, self.resolved, self.fallback = sender, receiver, resolved, fallback
        self.sender_revision: str | None = None  # the sender's revision asked for, for a later load of its model
        self.pipeline = (TransferPipeline(resolved.adapter, sender, receiver, source=resolved.describe())
                         if resolved is not None else None)

    @classmethod
    def from_pretrained(
        cls,
        sender,
        receiver,
        *,
        adapter: str | Path | None = None,
        revision: str | None = None,
        sender_revision: str | None = None,
        receiver_revision: str | None = None,
        adapter_revision: str | None = None,
        registry: Registry | str | Path | None = None,
        torch_dtype: torch.dtype | None = None,
        map_dtype: torch.dtype | None = None,
        device_map: str | torch.device | None = None,
        local_files_only: bool = False,
        fallback: str = "error",
        min_recovered: float | None = None,
        pivot: str | None = None,
        load_sender: bool = False,
        hub_dir=None,
        token: str | None = None,
    ) -> "HeteroFoldModel":
        """Resolve the adapter for exactly this pair and load the frozen receiver.

        ``sender``/``receiver``: model ids, local folders or loaded models. ``adapter``: a package folder or a
        registered repo id (default: the registry's best fit). ``revision`` is the adapter version (alias of
        ``adapter_revision``, e.g. ``"v1.0.0"``). The sender model itself is loaded only with
        ``load_sender=True`` (its tokenizer and config always are). ``pivot="auto"`` (or a model id): when no
        direct adapter fits, compose registered adapters sender -> pivot -> receiver into one (a direct adapter
        always wins; ``model.resolved.path`` says which path was taken). ``min_recovered`` compares each version's
        ``recovered`` measured on the registry's reference split (``bundled:unseen``); a version never measured
        there does not pass. ``fallback="prefill"``: when no adapter fits or none reaches ``min_recovered``,
        ``transfer`` re-prefills natively and says so. ``map_dtype`` (e.g. ``torch.bfloat16``): the dtype of the
        adapter's matrix products, the receiver and its cache keeping ``torch_dtype``; on a CPU with AVX512-BF16
        or AMX that speeds up the products, the gathers and turns staying float32 (quality and speed measured in
        docs/results/bf16.md, "Maps in bf16").
        """
        _check_fallback(fallback)
        if revision is not None and adapter_revision is not None and revision != adapter_revision:
            raise HeteroFoldError(f"revision={revision!r} and adapter_revision={adapter_revision!r} disagree; pass one.")
        common = dict(local_files_only=local_files_only, torch_dtype=torch_dtype, device_map=device_map)
        sender_side = _side(sender, revision=sender_revision, with_model=load_sender, **common)
        receiver_side = _side(receiver, revision=receiver_revision, **common)
        try:
            resolved = resolve_adapter(sender_side, receiver_side, adapter=adapter, version=revision or adapter_revision,
                                       registry=registry, min_recovered=min_recovered, pivot=pivot,
                                       local_files_only=local_files_only, hub_dir=hub_dir, token=token)
        except NoAdapterError as miss:
            if fallback == "error":
                raise
            warnings.warn(f"No adapter fits; transfer() will prefill the receiver natively.\n{miss}", stacklevel=2)
            resolved = None
        if map_dtype is not None and resolved is not None:
            if not (isinstance(map_dtype, torch.dtype) and map_dtype.is_floating_point):
                raise HeteroFoldError(f"map_dtype={map_dtype!r}; give a floating torch dtype such as torch.bfloat16, "
                                      "or None for the adapter's own (float32).")
            resolved.adapter.to(map_dtype)
        model = cls(sender_side, receiver_side, resolved, fallback=fallback)
        model.sender_revision = sender_revision
        return model

    @property
    def adapter(self):
        return None if self.resolved is None else self.resolved.adapter

    def _adapted(self, what: str) -> TransferPipeline:
        if self.pipeline is None:
            raise HeteroFoldError(f"No adapter was resolved for this pair (fallback='prefill'), so there is nothing to "
                                  f"{what}; call transfer(sender_cache, text), which prefills natively.")
        return self.pipeline

    def plan(self, text: str | list[str], *, prefill: SenderPrefill | None = None) -> TransferPlan:
        """Tokenize and align ``text`` once, for any number of :meth:`transfer` calls (``plan=``) or a
        layer-by-layer :meth:`stream`. ``prefill``: the sender's prefill of ``text``, whose tokens the plan reads
        instead of tokenizing the sender side again (a transfer given a prefill and the text does this itself)."""
        return self._adapted("plan").plan(text, prefill=prefill)

    def stream(self, plan: TransferPlan) -> LayerStream:
        """Map sender layers as they arrive: ``stream.push(i, keys, values)`` returns finished receiver layers."""
        return self._adapted("stream").stream(plan)

    def prefill_sender(self, text: str | list[str], *, surprisal: bool = False) -> SenderPrefill:
        """The sender's cache of ``text`` exactly as :meth:`transfer` expects it (right-padded, every position kept,
        the sender's special prefix included), with the token ids it was computed from; ``surprisal=True`` also
        keeps each token's surprisal for ``select="content"``. Loads the sender model on first use."""
        if self.sender.model is None:
            self.sender = Side.load(self.sender.name, revision=self.sender_revision,
                                    torch_dtype=self.receiver.model.dtype, device=self.receiver.model.device)
            if self.pipeline is not None:
                self.pipeline.sender = self.sender
        return prefill_sender(self.sender, text, surprisal=surprisal)

    def transfer(
        self,
        sender_cache,
        text: str | list[str] | None = None,
        *,
        plan: TransferPlan | None = None,
        config: TransferConfig | None = None,
        recompute: float | None = None,
        select: str | None = None,
        repair_layers: int | None = None,
        mapped_key_scale: float | None = None,
        query: str | list[str] | None = None,
        spans: list[list[tuple[int, int]]] | None = None,
        sender_position_ids: torch.Tensor | None = None,
    ) -> TransferResult:
        """The receiver cache for ``text`` (or a :meth:`plan` of it) from the sender's cache of it
        (``prefilled=True`` when it fell back to the receiver's own prefill).

        What the receiver recomputes after the map is one :class:`TransferConfig`: pass ``config=``, or any of its
        fields by name. Naming ``recompute`` sets the share yourself, the other fields defaulting
        (``recompute=0`` is the pure transfer); naming only ``select``, ``repair_layers`` or ``mapped_key_scale``
        replaces those fields of the adapter version's recommended setting (:attr:`recommended`); naming none runs
        it (the pure transfer when the version recommends none). ``result.config`` says what ran.

        - ``recompute``: share of the context's mapped positions the receiver recomputes, in [0, 1];
        - ``select``: which positions (``"statement"``, ``"statement-tail"``, ``"tail"``, ``"content"``, ...);
        - ``repair_layers``: the receiver's first layers recomputed for every position;
        - ``mapped_key_scale``: a factor on the keys of the rows left mapped (1: unchanged);
        - ``query``: the receiver's prompt, for a select that reads it; without it that recompute waits for
          :meth:`generate`'s prompt;
        - ``spans``: per context, the character spans ``select="oracle"`` recomputes;
        - ``sender_position_ids`` ``[B, Ts]``: the positions the sender used, if not its cache columns.
        """
        chosen = TransferConfig.resolve(config, recommended=self.recommended, recompute=recompute, select=select,
                                        repair_layers=repair_layers, mapped_key_scale=mapped_key_scale)
        if self.pipeline is not None:
            return self.pipeline.transfer(sender_cache, text, plan=plan, config=chosen, query=query, spans=spans,
                                          sender_position_ids=sender_position_ids)
        if text is None:
            raise HeteroFoldError("This model falls back to native prefill (no adapter), which needs the text itself.")
        return native_prefill(self.receiver, text)

    @property
    def recommended(self) -> TransferConfig | None:
        """The adapter version's recommended setting (the smallest recompute measured to keep >= 90% of native
        retrieval, recorded in the registry), or None. A recommendation whose select reads the receiver's prompt
        uses ``query=`` when the call passes it, and otherwise waits for :meth:`generate`'s prompt (the result keeps
        the sender's cache until then: :class:`~heterofold_hub.transfer.pipeline.DeferredRecompute`)."""
        recommended = None if self.resolved is None else self.resolved.recommended
        if recommended is None or isinstance(recommended, TransferConfig):
            return recommended
        return TransferConfig.from_dict(recommended, where=f"the registry's entry for {self.resolved.describe()}")

    def compose(self, segments: list, *, config: TransferConfig | None = None,
                query: str | None = None) -> TransferResult:
        """One receiver cache of ``segments`` in order: :class:`~heterofold_hub.transfer.segments.Native` text the
        receiver reads itself (chat-template scaffolding, its system prompt, its notes, the question) and
        :class:`~heterofold_hub.transfer.segments.Mapped` sender prefills (this pair's, or another sender's with
        ``via=``). ``config``: what the receiver recomputes after mapping each mapped segment (default: the pure
        transfer; a segment's own ``config`` wins); ``query``: the prompt, for a select that reads it (a composed
        cache cannot wait for it). Continue with :meth:`generate`, or add turns with :meth:`append`."""
        from heterofold_hub.transfer.segments import compose

        return compose(self._adapted("compose"), segments, config=config, query=query)

    def append(self, result: TransferResult, *segments, config: TransferConfig | None = None,
               query: str | None = None) -> TransferResult:
        """``result`` (of :meth:`compose`) followed by ``segments``: the next turn, its cost its own length (earlier
        rows are neither mapped nor copied again); ``result`` itself is left as it was."""
        from heterofold_hub.transfer.segments import append

        return append(self._adapted("append"), result, *segments, config=config, query=query)

    def generate(self, result: TransferResult, *, prompt: str | list[str] | None = None, **kwargs) -> torch.Tensor:
        """``receiver.generate`` continuing from ``result``, the receiver first reading ``prompt`` itself (one per
        context, or one for all); returns only the new tokens ``[B, new]``. ``result`` is not changed: ask it any
        number of questions."""
        check_result(result, self.receiver)
        return TransferPipeline.continue_from(self.receiver.model, result, prompt=prompt,
                                              tokenizer=self.receiver.tokenizer, **kwargs)

    def save_pretrained(self, folder: str | Path) -> Path:
        """Write the adapter package (config + safetensors weights, never base-model weights)."""
        if self.resolved is None:
            raise HeteroFoldError("There is no adapter to save: this model fell back to native prefill.")
        return save_adapter(self.resolved.adapter, folder)

    def push_to_hub(self, repo_id: str, *, version: str, hub: str | None = None, hub_dir=None,
                    token: str | None = None, registry: Registry | str | Path | None = None):
        """Publish this model's adapter package (card, immutable version, registry entry), like ``hf-fold push``."""
        from heterofold_hub.hub import get_hub
        from heterofold_hub.hub.publishing import push_package

        if self.resolved is None:
            raise HeteroFoldError("There is no adapter to push: this model fell back to native prefill.")
        if self.resolved.folder is None:
            raise HeteroFoldError("This adapter was composed in memory and has no held-out metrics to publish: write "
                                  f"it with `hf-fold compose --sender {self.sender.name} --receiver {self.receiver.name} "
                                  f"--pivot {self.resolved.path.pivot} --out DIR` (which scores it), then `hf-fold push DIR`.")
        return push_package(self.resolved.folder, repo_id=repo_id, version=version,
                            hub=get_hub(hub, hub_dir=hub_dir, token=token),
                            registry=open_registry(registry, must_exist=False))

    def __repr__(self) -> str:
        where = "native prefill (fallback)" if self.resolved is None else self.resolved.describe()
        return f"HeteroFoldModel({self.sender.name} -> {self.receiver.name}, adapter: {where})"

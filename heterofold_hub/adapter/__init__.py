"""The adapter contract and its files, low in the package so every layer above can build on it:

- ``config``: ``AdapterConfig`` (``adapter_config.json``), the package's file names, ``MethodOptions`` (no torch);
- ``save_and_load``: writing and reading a package's bytes, with every integrity check (like PEFT's
  ``utils/save_and_load.py``);
- ``base``: ``PairAdapter``, the one base class a method implements, the methods by name, ``load_adapter``.

Nothing is re-exported here, so reading a config or a file name never imports torch.
"""

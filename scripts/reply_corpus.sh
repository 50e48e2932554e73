#!/usr/bin/env bash
# The reply corpus (docs/transcripts.md, "The reply corpus"): the replies of every frame of
# tests/corpus/*.csp and tests/transcripts/*.csp, masked where runs differ. Usage:
#   scripts/reply_corpus.sh > before.bin   ... change ...   scripts/reply_corpus.sh | cmp before.bin
set -euo pipefail
cd "$(dirname "$0")/.."
exec python scripts/reply_corpus.py

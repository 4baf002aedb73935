#!/usr/bin/env bash
# Create ./.venv with fedrepro (editable) and its test dependencies. Idempotent; safe to rerun.
# Uses pip's configured indexes/find-links (CPU-only wheels where the machine offers them).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
.venv/bin/python -m fedrepro list > /dev/null
echo "fedrepro installed in .venv ($(.venv/bin/python --version))"

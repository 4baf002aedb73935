#!/usr/bin/env bash
# Create ./.venv with fedrepro (editable) and its test dependencies. Idempotent; safe to rerun.
# Uses pip's configured indexes/find-links (CPU-only wheels where the machine offers them).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_PIN=2.13.0
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi

# Directories pip takes wheels from (--find-links): $PIP_FIND_LINKS and pip's config files.
find_links_dirs() {
  {
    printf '%s\n' "${PIP_FIND_LINKS:-}"
    .venv/bin/python -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.find-links=//p" || true
  } | tr -d "'\"" | tr ' ' '\n' | sed 's#^file://##' | sort -u || true
}

# torch: when it is not installed yet and a CPU wheel of the pinned version sits in a find-links directory, install
# that one first, so resolving opacus' torch requirement cannot pull a multi-GB CUDA build. Elsewhere pip resolves
# torch normally.
if ! .venv/bin/python -c "import torch" > /dev/null 2>&1; then
  for dir in $(find_links_dirs); do
    if [ -d "$dir" ] && compgen -G "$dir/torch-${TORCH_PIN}*.whl" > /dev/null; then
      .venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==${TORCH_PIN}"
      break
    fi
  done
fi

.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
.venv/bin/python -m fedrepro list > /dev/null
echo "fedrepro installed in .venv ($(.venv/bin/python --version))"

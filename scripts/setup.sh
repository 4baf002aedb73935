#!/usr/bin/env bash
# Create ./.venv with fedrepro (editable) and its test dependencies. Idempotent; safe to rerun.
# Uses pip's configured indexes/find-links (CPU-only wheels where the machine offers them).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

# Offline real data from Debian: Fashion-MNIST (dataset-fashion-mnist; the data stage restores and verifies the
# upstream files from it). Installed where this user may (root, or sudo without a password); elsewhere one line
# says the command, and the workflow leaves out the Fashion-MNIST experiments (the report says why). Set
# FEDREPRO_NO_APT=1 to skip this step.
apt_install() {
  if [ -n "${FEDREPRO_NO_APT:-}" ] || dpkg -s "$1" > /dev/null 2>&1; then
    return 0
  fi
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo > /dev/null && sudo -n true 2> /dev/null; then sudo="sudo -n"; else sudo=none; fi
  fi
  if ! command -v apt-get > /dev/null || [ "$sudo" = none ]; then
    echo "setup: Debian package $1 not installed ($2); to have it: sudo apt-get install $1"
    return 0
  fi
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$1" > /dev/null 2>&1; }; then
    echo "setup: apt-get could not install $1 ($2); the workflow leaves those experiments out"
  fi
}
apt_install dataset-fashion-mnist "AdaPeD's Fashion-MNIST tables offline"
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

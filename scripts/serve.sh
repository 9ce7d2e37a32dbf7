#!/usr/bin/env bash
# Starts a single-node broker with defaults (port 9092, data in ./data), installing kafkacompat
# into ./.venv first if needed. Extra arguments go to `kafkacompat serve`.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${KAFKACOMPAT_VENV:-$here/.venv}"
if [ ! -x "$VENV/bin/kafkacompat" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$here"
fi
exec "$VENV/bin/kafkacompat" serve "$@"

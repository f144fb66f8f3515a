#!/usr/bin/env bash
# Install headless Chromium for tests/test_browser.py, only when it is missing.
# Idempotent: does nothing when /usr/bin/chromium (or a chromium on PATH) already exists.
set -euo pipefail

if [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1; then
    echo "chromium: already installed ($(command -v chromium || echo /usr/bin/chromium))"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
echo "chromium: installed $(chromium --version 2>/dev/null || true)"

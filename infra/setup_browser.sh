#!/usr/bin/env bash
# Headless Chromium for the status page's browser test (tests/integration/test_status_page.py):
# Debian's chromium and chromium-driver, installed once (idempotent: nothing to do when
# /usr/bin/chromium is there). Playwright drives it from Python with executable_path; it never
# downloads a browser of its own (that download is not reachable here).
set -euo pipefail
if [[ -x /usr/bin/chromium ]]; then
  exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
  echo "setup_browser: not root or no apt-get: Chromium not installed (the browser test will skip)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
echo "setup_browser: $(/usr/bin/chromium --version)"

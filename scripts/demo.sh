#!/usr/bin/env bash
# The README demo: installs and builds, then runs a small greedy generation on the
# bundled target model (CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
./build/cli/specula generate --model models/target-16m --max-new-tokens 64 \
  --prompt "$(printf 'import os\nimport sys\n\n\ndef main():\n    """Parse the command line and')"

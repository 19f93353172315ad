#!/usr/bin/env bash
# The README demo: installs and builds the `specula` program (not the tests or benchmarks),
# then runs configs/quickstart.toml, a small speculative run on the bundled models (CPU)
# that ends in a table (results/quickstart/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --target specula build
./build/cli/specula run configs/quickstart.toml
